// The validation report: errors, verdicts, OOM handling, the per-class split and --calibrate.
// Executions are built from a real prediction's schedule with known distortions, so the
// expected errors follow from the distortion, not from the report's output.
#include <cmath>
#include <memory>
#include <utility>
#include <string>

#include <gtest/gtest.h>

#include "core/hardware_profile.h"
#include "core/model_catalog.h"
#include "planner/ds_config.h"
#include "runtime/executor.h"
#include "runtime/validation.h"
#include "simulator/cost_model.h"
#include "simulator/simulate.h"
#include "simulator/workload.h"

namespace dsplan {
namespace {

struct Fixture {
  ModelSpec spec;
  HardwareProfile profile;
  Plan plan;
  Workload workload;
  std::vector<LayerCost> costs;
  Prediction pred;
};

// gpt2-medium, one GPU, the given stage, with optional CPU optimizer offload, simulated for
// dsplan's runtime.
Fixture Make(int stage, bool offload, const std::string& model = "gpt2-medium") {
  Fixture f;
  auto spec = LoadModel(model, DSPLAN_TEST_DATA_DIR);
  EXPECT_TRUE(spec.ok()) << spec.status().message();
  f.spec = *spec;
  auto hw = FindHardwareProfile("h200-measured", DSPLAN_TEST_DATA_DIR);
  EXPECT_TRUE(hw.ok()) << hw.status().message();
  f.profile = *hw;
  f.plan.micro_batch = 4;
  f.plan.seq_len = 1024;
  f.plan.zero.stage = stage;
  if (offload) f.plan.zero.offload_optimizer.device = OffloadDevice::kCpu;
  auto w = BuildWorkload(f.spec, f.plan.shape());
  EXPECT_TRUE(w.ok()) << w.status().message();
  f.workload = *w;
  SimulationContext ctx = MakeSimulationContext(f.workload, f.profile, f.plan.precision, 0,
                                                SoftwareStack::kDsplanRuntime);
  f.costs = ctx.layer_costs;
  SimulateOptions so;
  so.keep_graph = true;
  auto p = Simulate(ctx, f.plan, so);
  EXPECT_TRUE(p.ok()) << p.status().message();
  f.pred = *p;
  return f;
}

// An execution that took |time_scale| x the predicted schedule and |mem_scale| x its memory;
// layer tasks split by op class in the predicted proportions.
Execution Scaled(const Fixture& f, double time_scale, double mem_scale) {
  Execution e;
  e.device_name = "test GPU";
  e.step_s = {f.pred.step_time_s * time_scale, f.pred.step_time_s * time_scale * 1.01,
              f.pred.step_time_s * time_scale * 0.99};
  const StepGraph& g = f.pred.graph;
  for (TaskId id = 0; id < g.size(); ++id) {
    e.start_s.push_back(f.pred.schedule.start_s[id] * time_scale);
    e.end_s.push_back(f.pred.schedule.end_s[id] * time_scale);
    OpClassSeconds o;
    const Task& t = g.task(id);
    if (t.layer >= 0) {
      const LayerCost& c = f.costs[t.layer];
      const bool fwd = t.kind != TaskKind::kBackward;
      o.gemm_s = (fwd ? c.fwd_gemm_s : c.bwd_gemm_s) * time_scale;
      o.attention_s = (fwd ? c.fwd_attention_s : c.bwd_attention_s) * time_scale;
      o.memory_s = (fwd ? c.fwd_memory_s : c.bwd_memory_s) * time_scale;
    }
    e.op_class.push_back(o);
  }
  e.peak_allocated_bytes = static_cast<int64_t>(f.pred.gpu_peak_allocated_bytes * mem_scale);
  e.peak_reserved_bytes = static_cast<int64_t>(f.pred.gpu_peak_reserved_bytes * mem_scale);
  e.scratch_bytes = 64 << 20;
  e.device_used_peak_bytes =
      static_cast<int64_t>(f.pred.gpu_total_bytes * mem_scale) + e.scratch_bytes;
  return e;
}

const ValidationRow* Row(const ValidationReport& r, const std::string& name) {
  for (const ValidationRow& row : r.rows) {
    if (row.quantity == name) return &row;
  }
  return nullptr;
}

TEST(Validation, ErrorsFollowTheDistortion) {
  const Fixture f = Make(0, false);
  const ValidationReport r =
      CompareExecution(f.pred, f.workload, f.costs, Scaled(f, 1.05, 1.02), ValidationThresholds{});
  const ValidationRow* step = Row(r, "step time");
  ASSERT_NE(step, nullptr);
  // Median of {1.05, 1.0605, 1.0395} x predicted is 1.05 x predicted.
  EXPECT_NEAR(step->Error(), 1 / 1.05 - 1, 1e-9);
  const ValidationRow* gemm = Row(r, "forward GEMMs");
  ASSERT_NE(gemm, nullptr);
  EXPECT_NEAR(gemm->Error(), 1 / 1.05 - 1, 1e-9);
  // The arena outside the allocator is not counted against the plan.
  const ValidationRow* dev = Row(r, "device memory (driver)");
  ASSERT_NE(dev, nullptr);
  EXPECT_NEAR(dev->Error(), 1 / 1.02 - 1, 1e-6);
  EXPECT_TRUE(r.pass) << r.verdict;
  EXPECT_EQ(r.verdict.rfind("PASS", 0), 0u) << r.verdict;
}

TEST(Validation, SlowStepFailsAndNamesTheQuantity) {
  const Fixture f = Make(0, false);
  const ValidationReport r =
      CompareExecution(f.pred, f.workload, f.costs, Scaled(f, 1.25, 1.0), ValidationThresholds{});
  EXPECT_FALSE(r.pass);
  EXPECT_NE(r.verdict.find("step time"), std::string::npos) << r.verdict;
  EXPECT_EQ(r.verdict.find("device memory"), std::string::npos) << r.verdict;
  // A looser threshold passes the same run.
  ValidationThresholds loose;
  loose.time = 0.25;
  EXPECT_TRUE(CompareExecution(f.pred, f.workload, f.costs, Scaled(f, 1.25, 1.0), loose).pass);
}

TEST(Validation, MemoryMissFails) {
  const Fixture f = Make(2, false);
  const ValidationReport r =
      CompareExecution(f.pred, f.workload, f.costs, Scaled(f, 1.0, 1.08), ValidationThresholds{});
  EXPECT_FALSE(r.pass);
  EXPECT_NE(r.verdict.find("peak allocated"), std::string::npos) << r.verdict;
}

TEST(Validation, OutOfMemoryAgreesOnlyWithAPredictionThatDoesNotFit) {
  Fixture f = Make(0, false);
  Execution e;
  e.device_name = "test GPU";
  e.out_of_memory = true;
  e.oom_task = f.pred.graph.size() / 2;
  e.oom_request_bytes = 1 << 30;
  e.oom_allocated_bytes = int64_t{70} << 30;
  ASSERT_TRUE(f.pred.fits);
  ValidationReport r = CompareExecution(f.pred, f.workload, f.costs, e, ValidationThresholds{});
  EXPECT_TRUE(r.out_of_memory);
  EXPECT_FALSE(r.pass);
  EXPECT_NE(r.oom_line.find(TaskName(f.pred.graph, f.workload, e.oom_task)), std::string::npos)
      << r.oom_line;
  EXPECT_NE(r.oom_line.find("1.00 GiB requested"), std::string::npos) << r.oom_line;
  f.pred.fits = false;
  f.pred.reason = "too big";
  r = CompareExecution(f.pred, f.workload, f.costs, e, ValidationThresholds{});
  EXPECT_TRUE(r.pass);
  EXPECT_NE(r.oom_line.find("too big"), std::string::npos) << r.oom_line;
}

TEST(Validation, ClassesCoverEveryTaskOnce) {
  const Fixture f = Make(2, true);
  const Execution e = Scaled(f, 1.0, 1.0);
  const ClassSeconds m = MeasuredClassSeconds(f.pred.graph, e);
  // Offload runs the CPU optimizer and both copy directions.
  EXPECT_GT(m.seconds[static_cast<int>(TaskClass::kCpuOptimizer)], 0);
  EXPECT_GT(m.seconds[static_cast<int>(TaskClass::kCopyD2H)], 0);
  EXPECT_GT(m.seconds[static_cast<int>(TaskClass::kCopyH2D)], 0);
  // Non-layer tasks are counted with their measured duration: the class sums add up to the
  // total measured time of the non-layer tasks plus the op-class sums of the layer tasks.
  double expect = 0;
  for (TaskId id = 0; id < f.pred.graph.size(); ++id) {
    const Task& t = f.pred.graph.task(id);
    const bool layer_work = t.kind == TaskKind::kForward || t.kind == TaskKind::kBackward ||
                            t.kind == TaskKind::kRecompute;
    if (t.layer >= 0 && layer_work) {
      expect += e.op_class[id].gemm_s + e.op_class[id].attention_s + e.op_class[id].memory_s;
    } else {
      expect += e.end_s[id] - e.start_s[id];
    }
  }
  double sum = 0;
  for (double s : m.seconds) sum += s;
  EXPECT_NEAR(sum, expect, 1e-9 * std::max(1.0, expect));
}

TEST(Validation, CalibrationClosesTheGemmGap) {
  const Fixture f = Make(0, false, "gpt2-xl");
  // GEMMs measured 25 % slower than predicted, everything else as predicted.
  Execution e = Scaled(f, 1.0, 1.0);
  for (OpClassSeconds& o : e.op_class) o.gemm_s *= 1.25;
  const ValidationReport r = CompareExecution(f.pred, f.workload, f.costs, e, ValidationThresholds{});
  auto cal = CalibratedProfile(f.profile, r, "test");
  ASSERT_TRUE(cal.ok()) << cal.status().message();
  EXPECT_EQ(cal->gpu.gemm_source.kind, SourceKind::kMeasured);
  // Re-predicting with the corrected profile: the GEMM classes now match the measurement.
  const std::vector<LayerCost> again =
      CostModel(*cal, f.plan.precision, SoftwareStack::kDsplanRuntime).Layers(f.workload);
  double pred_gemm = 0, meas_gemm = 0;
  for (size_t i = 0; i < again.size(); ++i) pred_gemm += again[i].fwd_gemm_s + again[i].bwd_gemm_s;
  meas_gemm = r.measured.seconds[static_cast<int>(TaskClass::kForwardGemm)] +
              r.measured.seconds[static_cast<int>(TaskClass::kBackwardGemm)];
  // GEMMs that are bandwidth-bound keep their time, so the match is close, not exact.
  EXPECT_NEAR(pred_gemm / meas_gemm, 1.0, 0.03);
  // Numbers the run did not exercise keep their source.
  EXPECT_EQ(cal->host.cpu_adam_source.kind, f.profile.host.cpu_adam_source.kind);
}

TEST(Validation, CalibrationScalesTheStreamingCurveAndTheGemmLayoutsSeparately) {
  auto hw = FindHardwareProfile("h200-measured", DSPLAN_TEST_DATA_DIR);
  ASSERT_TRUE(hw.ok()) << hw.status().message();
  HardwareProfile base = *hw;
  base.gpu.streaming = {{4096, 3e-6}, {1e9, 2.5e-4}};
  base.gpu.streaming_source = {SourceKind::kMeasured, "test"};
  base.gpu.gemm = {{Precision::kBf16, 8192, 6400, 1600, 700e12, GemmLayout::kNT},
                   {Precision::kBf16, 8192, 1600, 6400, 600e12, GemmLayout::kNN},
                   {Precision::kBf16, 6400, 1600, 8192, 500e12, GemmLayout::kTN}};
  ValidationReport r;
  auto set = [&](TaskClass c, double predicted, double measured) {
    r.predicted.seconds[static_cast<int>(c)] = predicted;
    r.measured.seconds[static_cast<int>(c)] = measured;
  };
  // Memory-bound work (layers, gradient copies, optimizer) took 1.5x the prediction in all.
  set(TaskClass::kForwardMemory, 0.010, 0.016);
  set(TaskClass::kBackwardMemory, 0.020, 0.029);
  set(TaskClass::kGpuOptimizer, 0.030, 0.045);
  // Forward GEMMs 10 % slow, backward GEMMs 20 % fast.
  set(TaskClass::kForwardGemm, 0.050, 0.055);
  set(TaskClass::kBackwardGemm, 0.100, 0.080);
  auto cal = CalibratedProfile(base, r, "test");
  ASSERT_TRUE(cal.ok()) << cal.status().message();
  ASSERT_EQ(cal->gpu.streaming.size(), 2u);
  EXPECT_NEAR(cal->gpu.streaming[0].seconds, 1.5 * 3e-6, 1e-12);
  EXPECT_NEAR(cal->gpu.streaming[1].seconds, 1.5 * 2.5e-4, 1e-12);
  EXPECT_EQ(cal->gpu.streaming_source.kind, SourceKind::kMeasured);
  EXPECT_EQ(cal->gpu.memory_bound_efficiency, base.gpu.memory_bound_efficiency);
  EXPECT_NEAR(cal->gpu.gemm[0].flops_per_s, 700e12 * 0.050 / 0.055, 1e3);
  EXPECT_NEAR(cal->gpu.gemm[1].flops_per_s, 600e12 * 0.100 / 0.080, 1e3);
  EXPECT_NEAR(cal->gpu.gemm[2].flops_per_s, 500e12 * 0.100 / 0.080, 1e3);
}

TEST(Validation, CalibrationCorrectsTheRuntimeAttentionTableNotPyTorchsEfficiency) {
  auto hw = FindHardwareProfile("h200-measured", DSPLAN_TEST_DATA_DIR);
  ASSERT_TRUE(hw.ok()) << hw.status().message();
  HardwareProfile base = *hw;
  AttentionPoint pt;
  pt.head_dim = 64;
  pt.causal = true;
  pt.seq = 1024;
  pt.batch_heads = 200;
  pt.fwd_flops_per_s = 200e12;
  pt.bwd_flops_per_s = 150e12;
  base.gpu.attention = {pt};
  ValidationReport r;
  r.predicted.seconds[static_cast<int>(TaskClass::kForwardAttention)] = 0.010;
  r.measured.seconds[static_cast<int>(TaskClass::kForwardAttention)] = 0.008;
  r.predicted.seconds[static_cast<int>(TaskClass::kBackwardAttention)] = 0.020;
  r.measured.seconds[static_cast<int>(TaskClass::kBackwardAttention)] = 0.025;
  auto cal = CalibratedProfile(base, r, "test");
  ASSERT_TRUE(cal.ok()) << cal.status().message();
  ASSERT_EQ(cal->gpu.attention.size(), 1u);
  EXPECT_NEAR(cal->gpu.attention[0].fwd_flops_per_s, 200e12 * 0.010 / 0.008, 1e3);
  EXPECT_NEAR(cal->gpu.attention[0].bwd_flops_per_s, 150e12 * 0.020 / 0.025, 1e3);
  EXPECT_EQ(cal->gpu.attention_source.kind, SourceKind::kMeasured);
  EXPECT_EQ(cal->gpu.attention_efficiency, base.gpu.attention_efficiency);
}

TEST(Validation, CalibrationRefusesAnOomRun) {
  const Fixture f = Make(0, false);
  ValidationReport r;
  r.out_of_memory = true;
  auto cal = CalibratedProfile(f.profile, r, "test");
  ASSERT_FALSE(cal.ok());
  EXPECT_NE(cal.status().message().find("out of memory"), std::string::npos);
}

TEST(Validation, RuntimeStackDiffersOnlyInHostAndSoftwareTerms) {
  // The two stacks share the hardware terms: GEMMs cost the same at the GPU's clock; the clock
  // under sustained load follows each stack's tensor-core duty (docs/stack-costs.md 7), so the
  // GEMMs are compared at the table's rate, each divided by its stack's ratio. In a transformer
  // block the
  // runtime streams each op's least traffic at its measured rate, where eager PyTorch runs more
  // kernels (upcasts, one per Python tensor op) at the measured rates of PyTorch's kernels; the
  // runtime issues kernels at the measured launch cost, where PyTorch pays the family's
  // measured host time per block (simulator/stack_costs.cc).
  // The profile's GEMMs measured through PyTorch (stack.gemm) price only the PyTorch stack:
  // without them both stacks read gpu.gemm and their GEMMs agree at the table's rate.
  const Fixture f = Make(0, false);
  ASSERT_FALSE(f.profile.stack.gemm.empty());
  HardwareProfile shared = f.profile;
  shared.stack.gemm.clear();
  const std::vector<LayerCost> pt = CostModel(shared, f.plan.precision).Layers(f.workload);
  const double pt_ratio = CostModel(shared, f.plan.precision).WorkloadSustainedRatio(f.workload);
  const std::vector<LayerCost> pt_torch =
      CostModel(f.profile, f.plan.precision).Layers(f.workload);
  double gemm_shared = 0, gemm_torch = 0;
  for (size_t i = 0; i < pt.size(); ++i) {
    gemm_shared += pt[i].fwd_gemm_s + pt[i].bwd_gemm_s;
    gemm_torch += pt_torch[i].fwd_gemm_s + pt_torch[i].bwd_gemm_s;
  }
  EXPECT_NE(gemm_shared, gemm_torch);
  const double rt_ratio =
      CostModel(f.profile, f.plan.precision, SoftwareStack::kDsplanRuntime)
          .WorkloadSustainedRatio(f.workload);
  ASSERT_EQ(pt.size(), f.costs.size());
  double pt_host = 0, rt_host = 0;
  int blocks = 0;
  for (size_t i = 0; i < pt.size(); ++i) {
    const std::string& name = f.workload.layers[i].name;
    EXPECT_NEAR(f.costs[i].fwd_gemm_s / rt_ratio, pt[i].fwd_gemm_s / pt_ratio,
                1e-12 * pt[i].fwd_gemm_s) << name;
    EXPECT_NEAR(f.costs[i].bwd_gemm_s / rt_ratio, pt[i].bwd_gemm_s / pt_ratio,
                1e-12 * pt[i].bwd_gemm_s) << name;
    pt_host += pt[i].fwd_dispatch_s + pt[i].bwd_dispatch_s;
    rt_host += f.costs[i].fwd_dispatch_s + f.costs[i].bwd_dispatch_s;
    const LayerKind k = f.workload.layers[i].kind;
    if (k != LayerKind::kEncoderBlock && k != LayerKind::kDecoderBlock) continue;
    ++blocks;
    EXPECT_LT(f.costs[i].fwd_memory_s, pt[i].fwd_memory_s) << name;
    EXPECT_LT(f.costs[i].bwd_memory_s, pt[i].bwd_memory_s) << name;
    EXPECT_LT(f.costs[i].fwd_dispatch_s, pt[i].fwd_dispatch_s) << name;
  }
  EXPECT_GT(blocks, 0);
  EXPECT_GT(pt_host, 10 * rt_host);
}

TEST(Validation, RuntimeAttentionIsPricedAsItsTiledGemms) {
  // Without the profile's measured table for the runtime's fused kernel, its attention is
  // priced as the tiled stand-in: a causal 1024-token attention runs 8 blocks of 128 query
  // rows, so it costs more than the causal half of the fused FLOPs at the GEMM rate and less
  // than the full square, and the non-causal version costs more than the causal one.
  Fixture f = Make(0, false);
  f.profile.gpu.attention.clear();
  const CostModel rt(f.profile, f.plan.precision, SoftwareStack::kDsplanRuntime);
  Op op;
  op.kind = OpKind::kAttention;
  op.batch = 4 * 16;
  op.m = op.n = 1024;
  op.k = 64;
  op.causal = true;
  const double causal = rt.OpForwardSeconds(op);
  op.causal = false;
  const double full = rt.OpForwardSeconds(op);
  EXPECT_GT(full, causal * 1.5);
  EXPECT_LT(full, causal * 2.5);
  EXPECT_GT(rt.OpBackwardSeconds(op), 2 * full);
}


// --- the dry-run executor (runtime/executor.h MakeDryRunExecutor) ---------------------------------

// Its Execution is the prediction: each step the predicted step time, each task at its scheduled
// start for its predicted duration, the predicted memory; so every row of the comparison agrees.
TEST(DryRunExecutor, ReplaysThePredictionAndEveryRowAgrees) {
  for (const auto& [stage, offload] : {std::pair{0, false}, {1, true}, {2, false}}) {
    const Fixture f = Make(stage, offload);
    ASSERT_TRUE(f.pred.fits);
    const std::unique_ptr<Executor> ex = MakeDryRunExecutor(f.pred, f.costs);
    EXPECT_STREQ(ex->name(), "dry-run");
    EXPECT_TRUE(ex->available());
    ExecuteOptions o;
    o.steps = 3;
    auto e = ex->Run(f.pred.graph, f.workload, f.plan, o);
    ASSERT_TRUE(e.ok()) << e.status().message();
    ASSERT_EQ(e->step_s.size(), 3u);
    for (double s : e->step_s) EXPECT_EQ(s, f.pred.step_time_s);
    ASSERT_EQ(e->start_s.size(), static_cast<size_t>(f.pred.graph.size()));
    for (TaskId id = 0; id < f.pred.graph.size(); ++id) {
      EXPECT_EQ(e->start_s[id], f.pred.schedule.start_s[id]);
      EXPECT_NEAR(e->end_s[id] - e->start_s[id], f.pred.durations[id], 1e-12);
    }
    EXPECT_EQ(e->peak_allocated_bytes, f.pred.gpu_peak_allocated_bytes);
    EXPECT_EQ(e->device_used_peak_bytes, f.pred.gpu_total_bytes);
    EXPECT_FALSE(e->out_of_memory);

    const ValidationReport r =
        CompareExecution(f.pred, f.workload, f.costs, *e, ValidationThresholds{});
    EXPECT_TRUE(r.pass) << r.verdict;
    EXPECT_EQ(r.measured_step_s, r.predicted_step_s);
    // Step time, at least forward and backward GEMMs, and the four memory rows.
    EXPECT_GE(r.rows.size(), 7u);
    for (const ValidationRow& row : r.rows) {
      EXPECT_LT(std::abs(row.Error()), 1e-9) << "stage " << stage << ": " << row.quantity;
    }
    for (int c = 0; c < kNumTaskClasses; ++c) {
      EXPECT_EQ(r.predicted.tasks[c], r.measured.tasks[c]) << TaskClassName(TaskClass(c));
    }
  }
}

// Without the op profile the layer tasks are whole, as the GPU executor reports them then.
TEST(DryRunExecutor, NoOpProfileLeavesLayerTasksWhole) {
  const Fixture f = Make(0, false);
  ExecuteOptions o;
  o.profile_ops = false;
  auto e = MakeDryRunExecutor(f.pred, f.costs)->Run(f.pred.graph, f.workload, f.plan, o);
  ASSERT_TRUE(e.ok()) << e.status().message();
  EXPECT_TRUE(e->op_class.empty());
}

// A plan predicted not to fit "runs out of memory" at the GPU peak, which the report accepts as
// agreeing with the prediction.
TEST(DryRunExecutor, APlanThatDoesNotFitRunsOutOfMemoryAsPredicted) {
  Fixture f = Make(0, false);
  f.pred.fits = false;
  f.pred.reason = "needs more than the GPU has";
  auto e = MakeDryRunExecutor(f.pred, f.costs)->Run(f.pred.graph, f.workload, f.plan, {});
  ASSERT_TRUE(e.ok()) << e.status().message();
  EXPECT_TRUE(e->out_of_memory);
  EXPECT_EQ(e->oom_task, f.pred.memory.peak[static_cast<int>(MemSpace::kGpu)].task);
  const ValidationReport r =
      CompareExecution(f.pred, f.workload, f.costs, *e, ValidationThresholds{});
  EXPECT_TRUE(r.pass) << r.verdict;
  EXPECT_NE(r.verdict.find("as predicted"), std::string::npos) << r.verdict;
}

// The graph must be the prediction's: another graph is refused, naming both sizes.
TEST(DryRunExecutor, RefusesAGraphThatIsNotThePredictions) {
  const Fixture a = Make(0, false);
  const Fixture b = Make(2, true);
  ASSERT_NE(a.pred.graph.size(), b.pred.graph.size());
  auto e = MakeDryRunExecutor(a.pred, a.costs)->Run(b.pred.graph, b.workload, b.plan, {});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(e.status().message().find(std::to_string(b.pred.graph.size()) + " tasks"),
            std::string::npos)
      << e.status().message();
}

}  // namespace
}  // namespace dsplan
