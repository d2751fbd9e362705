// ZeRO-3 with offload_param on the CPU: the host waits for its fetches' copies
// (simulator/param_fetch.h, docs/simulator.md "Fetching offloaded parameters"). The expected
// values come from the coordinator's rules, not from the code under test: without prefetch the
// host waits for every copy it issues; with blocking copies (world size > 1) likewise; with
// prefetch it hides copies only behind its own work.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/hardware_profile.h"
#include "core/model_catalog.h"
#include "simulator/cost_model.h"
#include "simulator/param_fetch.h"
#include "simulator/simulate.h"
#include "simulator/step_builder.h"
#include "simulator/workload.h"

namespace dsplan {
namespace {

const std::string kData = DSPLAN_TEST_DATA_DIR;

struct Built {
  Workload w;
  std::vector<LayerParams> lp;
  BuiltStep built;
};

Plan OffloadPlan(int gpus, int64_t bucket) {
  Plan p;
  p.gpus_per_node = gpus;
  p.micro_batch = 1;
  p.grad_accum = 1;
  p.seq_len = 128;
  p.precision = Precision::kBf16;
  p.optimizer = OptimizerType::kAdamW;
  p.zero.stage = 3;
  p.zero.offload_optimizer.device = OffloadDevice::kCpu;
  p.zero.offload_param.device = OffloadDevice::kCpu;
  p.zero.stage3_prefetch_bucket_size = bucket;
  return p;
}

Built Build(const std::string& model, const Plan& plan) {
  auto spec = LoadModel(model, kData);
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  RunShape o;
  o.micro_batch = plan.micro_batch;
  o.seq_len = plan.seq_len;
  auto w = BuildWorkload(*spec, o);
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  Built s{std::move(*w), {}, {}};
  s.lp = ComputeLayerParams(s.w, plan.zero.stage3_param_persistence_threshold);
  const Status st = BuildStepGraphInto(s.w, s.lp, plan, 0, StepGraphForm::kUnrolled, &s.built);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return s;
}

HardwareProfile Profile() {
  auto hw = LoadHardwareProfile(kData + "/profiles/h200-sxm.yaml");
  EXPECT_TRUE(hw.ok()) << hw.status().ToString();
  return *hw;
}

// The copy time of every partitioned tensor of the layers the forward of micro-step 0 copies
// from the host, each at the profile's pinned host-to-device rate.
double ForwardCopySeconds(const Built& s, const Plan& plan, const CostModel& cost) {
  const StepGraph& g = s.built.graph;
  const int64_t ranks = plan.dp_size();
  double total = 0;
  for (TaskId id = 0; id < g.size(); ++id) {
    const Task& t = g.task(id);
    if (t.kind == TaskKind::kBackward || t.kind == TaskKind::kRecompute) break;
    if (t.kind != TaskKind::kCopyH2D || !t.param_fetch) continue;
    const LayerParams& lp = s.lp[t.layer];
    std::vector<int64_t> numels;
    for (int64_t n : lp.tensor_numels) {
      if (n > plan.zero.stage3_param_persistence_threshold) numels.push_back(n);
    }
    if (lp.tied_numel > 0) numels.push_back(lp.tied_numel);
    for (int64_t n : numels) {
      total += cost.CopySeconds(true, true, 2.0 * static_cast<double>((n + ranks - 1) / ranks));
    }
  }
  return total;
}

struct ForwardSums {
  double wait = 0, host = 0;
};

ForwardSums SumForward(const Built& s, const CostModel& cost, const std::vector<double>& waits) {
  const StepGraph& g = s.built.graph;
  const std::vector<LayerCost> layers = cost.Layers(s.w);
  ForwardSums out;
  for (TaskId id = 0; id < g.size(); ++id) {
    const Task& t = g.task(id);
    if (t.kind != TaskKind::kForward || t.micro_step != 0) continue;
    out.wait += waits[id];
    double gpu = 0, host = 0;
    cost.LayerTaskParts(t, layers, &gpu, &host);
    out.host += host;
  }
  return out;
}

TEST(OffloadedFetchWaits, NoneWithoutParameterOffload) {
  // Stage 3 with the parameters on the GPU, and stage 2 with the optimizer offloaded.
  const HardwareProfile hw = Profile();
  for (int stage : {3, 2}) {
    Plan p = OffloadPlan(1, 50'000'000);
    p.zero.stage = stage;
    p.zero.offload_param.device = OffloadDevice::kNone;
    Built s = Build("gpt2", p);
    CostModel cost(hw, p.precision, SoftwareStack::kPyTorchDeepSpeed);
    const std::vector<double> waits =
        OffloadedFetchWaits(s.built.graph, s.w, s.lp, p, cost, cost.Layers(s.w));
    ASSERT_EQ(waits.size(), static_cast<size_t>(s.built.graph.size()));
    for (double x : waits) EXPECT_EQ(x, 0.0) << "stage " << stage;
  }
}

TEST(OffloadedFetchWaits, WithoutPrefetchTheHostWaitsForEveryCopy) {
  // stage3_prefetch_bucket_size 0: each module fetches its own partitions and synchronizes on
  // them at once, so the forward's waits add up to its copies.
  const HardwareProfile hw = Profile();
  const Plan p = OffloadPlan(1, 0);
  Built s = Build("gemma-2b", p);
  CostModel cost(hw, p.precision, SoftwareStack::kPyTorchDeepSpeed);
  const std::vector<double> waits =
      OffloadedFetchWaits(s.built.graph, s.w, s.lp, p, cost, cost.Layers(s.w));
  const double copies = ForwardCopySeconds(s, p, cost);
  ASSERT_GT(copies, 0.05);  // 2.5 B parameters over PCIe
  EXPECT_NEAR(SumForward(s, cost, waits).wait, copies, 1e-9 * copies);
}

TEST(OffloadedFetchWaits, BlockingCopiesAtSeveralRanksAreWaitedInFull) {
  // World size 2: all_gather_coalesced copies each partition with a blocking .to(device)
  // before the collective, prefetch or not.
  const HardwareProfile hw = Profile();
  const Plan p = OffloadPlan(2, 50'000'000);
  Built s = Build("gemma-2b", p);
  CostModel cost(hw, p.precision, SoftwareStack::kPyTorchDeepSpeed);
  const std::vector<double> waits =
      OffloadedFetchWaits(s.built.graph, s.w, s.lp, p, cost, cost.Layers(s.w));
  const double copies = ForwardCopySeconds(s, p, cost);
  ASSERT_GT(copies, 0.02);
  EXPECT_NEAR(SumForward(s, cost, waits).wait, copies, 1e-9 * copies);
}

TEST(OffloadedFetchWaits, PrefetchHidesCopiesOnlyBehindTheHostsOwnWork) {
  // World size 1 with the default bucket: the copies a prefetch queues run while the host
  // works, and the next module's synchronize waits for the rest.
  const HardwareProfile hw = Profile();
  for (const char* model : {"gemma-2b", "gpt2-xl"}) {
    const Plan p = OffloadPlan(1, 50'000'000);
    Built s = Build(model, p);
    CostModel cost(hw, p.precision, SoftwareStack::kPyTorchDeepSpeed);
    const std::vector<double> waits =
        OffloadedFetchWaits(s.built.graph, s.w, s.lp, p, cost, cost.Layers(s.w));
    const double copies = ForwardCopySeconds(s, p, cost);
    const ForwardSums f = SumForward(s, cost, waits);
    EXPECT_GT(f.wait, 0.0) << model;
    EXPECT_LE(f.wait, copies * (1 + 1e-9)) << model;
    EXPECT_GE(f.wait, copies - f.host - 1e-9) << model;
  }
}

TEST(OffloadedFetchWaits, ReachTheForwardsPredictedTime) {
  // The prediction's forward includes the waits: the same plan with the parameters' copies
  // made free of waiting (offload_param none) has a shorter forward than the waits add.
  const HardwareProfile hw = Profile();
  auto spec = LoadModel("gemma-2b", kData);
  ASSERT_TRUE(spec.ok());
  Simulator sim(*spec, hw);
  Plan p = OffloadPlan(1, 50'000'000);
  p.micro_batch = 2;
  auto with = sim.Simulate(p);
  ASSERT_TRUE(with.ok()) << with.status().ToString();
  Built s = Build("gemma-2b", p);
  CostModel cost(hw, p.precision, SoftwareStack::kPyTorchDeepSpeed);
  const std::vector<double> waits =
      OffloadedFetchWaits(s.built.graph, s.w, s.lp, p, cost, cost.Layers(s.w));
  const ForwardSums f = SumForward(s, cost, waits);
  EXPECT_GE(with->breakdown.forward_s, f.host + f.wait - 1e-9);
  // The prediction reports the waits (the forward's and the backward's fetches).
  EXPECT_GE(with->param_fetch_wait_s, f.wait - 1e-9);
  p.zero.offload_param.device = OffloadDevice::kNone;
  auto without = sim.Simulate(p);
  ASSERT_TRUE(without.ok()) << without.status().ToString();
  EXPECT_EQ(without->param_fetch_wait_s, 0.0);
}

}  // namespace
}  // namespace dsplan
