// The experimental host pipeline (simulator/host_pipeline.h, docs/research/host-pipeline.md):
// where BuildHostPipeline makes the host wait, and what Simulate does with it.
#include "simulator/host_pipeline.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/hardware_profile.h"
#include "core/model_catalog.h"
#include "core/plan.h"
#include "simulator/simulate.h"
#include "simulator/step_builder.h"
#include "simulator/workload.h"

namespace dsplan {
namespace {

const std::string kData = DSPLAN_TEST_DATA_DIR;

struct Built {
  ModelSpec spec;
  HardwareProfile hw;
  Workload w;
  BuiltStep step;
};

Plan MakePlan(int stage, int64_t mb, bool gc, int64_t seq, int gas = 1, int64_t target = 0) {
  Plan p;
  p.gpus_per_node = 1;
  p.micro_batch = mb;
  p.grad_accum = gas;
  p.seq_len = seq;
  p.target_len = target;
  p.gradient_checkpointing = gc;
  p.zero.stage = stage;
  return p;
}

// The step graph of |plan| on |model| (unrolled), with its layer costs in |ctx_out|.
void Build(const char* model, const Plan& plan, Built* b, std::vector<LayerCost>* costs) {
  auto spec = LoadModel(model, kData);
  auto hw = FindHardwareProfile("h200-measured", kData);
  ASSERT_TRUE(spec.ok() && hw.ok());
  b->spec = *spec;
  b->hw = *hw;
  auto w = BuildWorkload(b->spec, plan.shape());
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  b->w = std::move(*w);
  const SimulationContext ctx = MakeSimulationContext(
      b->w, b->hw, plan.precision, plan.zero.stage3_param_persistence_threshold);
  *costs = ctx.layer_costs;
  auto step = BuildStepGraph(b->w, ctx.layer_params, plan, 0, StepGraphForm::kUnrolled);
  ASSERT_TRUE(step.ok()) << step.status().ToString();
  b->step = std::move(*step);
}

// Each micro-step's forward starts after a wait (the loop reads its loss); the decoder stack of
// an encoder-decoder model waits again (its mask read); with phase synchronization the
// backward does too. Every layer task keeps only its kernels in the durations.
TEST(HostPipelineTest, WaitsAtMicroStepsTheDecoderStackAndPhases) {
  Built b;
  std::vector<LayerCost> costs;
  const Plan plan = MakePlan(2, 2, false, 64, 2, 32);
  ASSERT_NO_FATAL_FAILURE(Build("t5-small", plan, &b, &costs));
  const StepGraph& g = b.step.graph;
  CostModel cost(b.hw, plan.precision);
  for (bool phases : {false, true}) {
    SCOPED_TRACE(phases);
    std::vector<double> d(g.size(), 7.0);
    HostPipelineOptions o;
    o.sync_each_phase = phases;
    o.zero_stage = 2;
    const HostPipeline hp = BuildHostPipeline(g, b.w, cost, costs, o, &d);
    int syncs = 0, decoder_syncs = 0, backward_syncs = 0, pipelined = 0;
    for (TaskId id = 0; id < g.size(); ++id) {
      const Task& t = g.task(id);
      const bool layer_task = t.kind == TaskKind::kForward || t.kind == TaskKind::kBackward ||
                              t.kind == TaskKind::kRecompute;
      EXPECT_EQ(hp.host_s[id] >= 0, layer_task) << id;
      if (!layer_task) {
        EXPECT_EQ(d[id], 7.0);  // other tasks keep their durations
        continue;
      }
      ++pipelined;
      double gpu = 0, host = 0;
      ASSERT_TRUE(cost.LayerTaskParts(t, costs, &gpu, &host));
      EXPECT_EQ(d[id], gpu);
      EXPECT_EQ(hp.host_s[id], host);
      EXPECT_EQ(hp.waits_for[id], -1);  // no reduce-event cap below stage 3
      if (!hp.sync[id]) continue;
      ++syncs;
      const std::string& name = b.w.layers[t.layer].name;
      if (t.kind == TaskKind::kForward && name.rfind("decoder", 0) == 0) ++decoder_syncs;
      if (t.kind == TaskKind::kBackward) ++backward_syncs;
    }
    EXPECT_GT(pipelined, 0);
    // Per micro-step: the encoder's embedding (its forward's first task) and the decoder's.
    EXPECT_EQ(decoder_syncs, 2);
    EXPECT_EQ(backward_syncs, phases ? 2 : 0);
    EXPECT_EQ(syncs, phases ? 6 : 4);
  }
}

// ZeRO-3: a backward whose hooks flush a reduce bucket waits for the flush three before, an
// earlier task on the reduction's side stream.
TEST(HostPipelineTest, Stage3BackwardWaitsForTheThirdFlushBack) {
  Built b;
  std::vector<LayerCost> costs;
  Plan plan = MakePlan(3, 1, false, 128);
  plan.zero.reduce_bucket_size = 1'000'000;  // many flushes
  ASSERT_NO_FATAL_FAILURE(Build("gpt2", plan, &b, &costs));
  const StepGraph& g = b.step.graph;
  CostModel cost(b.hw, plan.precision);
  std::vector<double> d(g.size(), 1.0);
  HostPipelineOptions o;
  o.zero_stage = 3;
  const HostPipeline hp = BuildHostPipeline(g, b.w, cost, costs, o, &d);
  int waiting = 0, flushing = 0;
  for (TaskId id = 0; id < g.size(); ++id) {
    const Task& t = g.task(id);
    if (t.kind == TaskKind::kBackward && t.bucket_flushes > 0) ++flushing;
    if (hp.waits_for[id] < 0) continue;
    ++waiting;
    EXPECT_EQ(t.kind, TaskKind::kBackward);
    EXPECT_GT(t.bucket_flushes, 0);
    EXPECT_LT(hp.waits_for[id], id);
    const TaskKind k = g.task(hp.waits_for[id]).kind;
    EXPECT_TRUE(k == TaskKind::kGradCopy || k == TaskKind::kReduceScatter ||
                k == TaskKind::kAllReduce);
  }
  EXPECT_GT(flushing, 3);
  // The first flushes have nothing three back to wait for.
  EXPECT_GT(waiting, 0);
  EXPECT_LT(waiting, flushing);
}

// Simulate: a checkpointed step at stage 2, whose recomputation is host-heavy and whose
// backward is GPU-heavy, is faster as a pipeline than as per-layer maxima, and never faster
// than its kernels; gradient accumulation (scheduled unrolled) works and scales.
TEST(HostPipelineTest, SimulatePipelinedCheckpointedStep) {
  auto spec = LoadModel("gpt2-xl", kData);
  auto hw = FindHardwareProfile("h200-measured", kData);
  ASSERT_TRUE(spec.ok() && hw.ok());
  Simulator sim(*spec, *hw);
  const Plan plan = MakePlan(2, 8, true, 1024);
  SimulateOptions on;
  on.host_pipeline = true;
  auto base = sim.Simulate(plan);
  auto piped = sim.Simulate(plan, on);
  ASSERT_TRUE(base.ok() && piped.ok());
  EXPECT_LT(piped->step_time_s, 0.97 * base->step_time_s);
  double critical = 0;
  const StepBreakdown& k = piped->breakdown;
  critical = k.forward_s + k.backward_s + k.recompute_s + k.optimizer_s + k.exposed_comm_s +
             k.offload_s + k.nvme_s + k.other_s;
  EXPECT_NEAR(critical, piped->step_time_s, 1e-9 * piped->step_time_s);
  // Memory does not depend on the schedule.
  EXPECT_EQ(piped->gpu_peak_allocated_bytes, base->gpu_peak_allocated_bytes);
  auto gas4 = sim.Simulate(MakePlan(2, 8, true, 1024, 4), on);
  ASSERT_TRUE(gas4.ok()) << gas4.status().ToString();
  EXPECT_GT(gas4->step_time_s, 3.0 * piped->step_time_s);
  EXPECT_LT(gas4->step_time_s, 4.0 * piped->step_time_s);
}

}  // namespace
}  // namespace dsplan
