// Gradient accumulation (docs/simulator.md "Gradient accumulation"): the compact step graph
// (micro-steps 0, 1, 2 and the last, micro-step 2 repeated GAS - 3 times) against the graph
// with every micro-step written out, for plans across stages, offload, overlap_comm and
// checkpointing:
//  * the compact graph unrolls to exactly the graph the builder writes out (task, dependency
//    and memory effect for each);
//  * the scheduler, memory timeline and allocator replay on the compact graph give the
//    unrolled graph's step time, busy time, peaks and reserved memory;
//  * the peak does not grow with GAS (no tensor allocated each micro-step without its free).
#include <algorithm>
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/hardware_profile.h"
#include "core/model_catalog.h"
#include "simulator/allocator.h"
#include "simulator/scheduler.h"
#include "simulator/simulate.h"
#include "simulator/step_builder.h"
#include "simulator/workload.h"

namespace dsplan {
namespace {

constexpr int kGpu = static_cast<int>(MemSpace::kGpu);

struct NamedPlan {
  std::string name;
  Plan plan;
  bool checkpointing = false;
};

Plan Base(int stage, int gpus = 4) {
  Plan p;
  p.gpus_per_node = gpus;
  p.micro_batch = 2;
  p.precision = Precision::kBf16;
  p.optimizer = OptimizerType::kAdamW;
  p.zero.stage = stage;
  p.seq_len = 128;
  return p;
}

std::vector<NamedPlan> Plans() {
  std::vector<NamedPlan> out;
  out.push_back({"stage 0 bf16", Base(0)});
  {
    Plan p = Base(0);
    p.precision = Precision::kFp16;
    out.push_back({"stage 0 fp16", p});
  }
  for (int stage : {1, 2}) {
    for (bool overlap : {false, true}) {
      Plan p = Base(stage);
      p.zero.overlap_comm = overlap;
      out.push_back({"stage " + std::to_string(stage) + (overlap ? " overlap" : " no overlap"), p});
    }
  }
  {
    Plan p = Base(2);
    p.zero.contiguous_gradients = false;
    out.push_back({"stage 2 no contiguous_gradients", p});
  }
  {
    Plan p = Base(2);
    p.zero.reduce_bucket_size = 3'000'000;  // several buckets per micro-step
    out.push_back({"stage 2 small buckets", p, true});
  }
  for (int stage : {1, 2}) {
    Plan p = Base(stage);
    p.zero.offload_optimizer.device = OffloadDevice::kCpu;
    out.push_back({"stage " + std::to_string(stage) + " cpu offload", p});
  }
  out.push_back({"stage 3", Base(3)});
  {
    Plan p = Base(3);
    p.zero.overlap_comm = false;
    out.push_back({"stage 3 no overlap checkpointing", p, true});
  }
  {
    Plan p = Base(3);
    p.zero.offload_optimizer.device = OffloadDevice::kCpu;
    p.zero.offload_param.device = OffloadDevice::kCpu;
    out.push_back({"stage 3 cpu offload", p});
  }
  {
    Plan p = Base(3);
    p.zero.offload_optimizer.device = OffloadDevice::kNvme;
    p.zero.offload_optimizer.nvme_path = "/local_nvme";
    p.zero.offload_param.device = OffloadDevice::kNvme;
    p.zero.offload_param.nvme_path = "/local_nvme";
    p.zero.offload_param.max_in_cpu = 1'000'000;
    p.zero.sub_group_size = 20'000'000;  // several sub-groups
    out.push_back({"stage 3 nvme offload", p});
  }
  {
    Plan p = Base(3, 8);
    p.nodes = 2;
    out.push_back({"stage 3 two nodes checkpointing", p, true});
  }
  return out;
}

class AccumulationTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto spec = LoadModel("gpt2", DSPLAN_TEST_DATA_DIR);
    ASSERT_TRUE(spec.ok()) << spec.status().ToString();
    for (bool gc : {false, true}) {
      RunShape o;
      o.micro_batch = 2;
      o.seq_len = 128;
      o.gradient_checkpointing = gc;
      auto w = BuildWorkload(*spec, o);
      ASSERT_TRUE(w.ok()) << w.status().ToString();
      (gc ? w_gc_ : w_) = new Workload(std::move(*w));
    }
    auto hw = FindHardwareProfile("h200-measured", DSPLAN_TEST_DATA_DIR);
    ASSERT_TRUE(hw.ok()) << hw.status().ToString();
    hw_ = new HardwareProfile(std::move(*hw));
  }
  static void TearDownTestSuite() {
    delete w_;
    delete w_gc_;
    delete hw_;
    w_ = w_gc_ = nullptr;
    hw_ = nullptr;
  }

  static const Workload& W(const NamedPlan& p) { return p.checkpointing ? *w_gc_ : *w_; }
  static Plan WithGas(const NamedPlan& np, int64_t gas) {
    Plan p = np.plan;
    p.grad_accum = gas;
    p.gradient_checkpointing = np.checkpointing;
    return p;
  }
  static int64_t Threshold(const Plan& p) {
    return p.zero.stage == 3 ? p.zero.stage3_param_persistence_threshold : 0;
  }
  static BuiltStep Build(const NamedPlan& np, int64_t gas, StepGraphForm form) {
    const Plan p = WithGas(np, gas);
    auto b = BuildStepGraph(W(np), ComputeLayerParams(W(np), Threshold(p)), p, 64 << 20, form);
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    return b.ok() ? std::move(*b) : BuiltStep{};
  }
  static Prediction Sim(const NamedPlan& np, int64_t gas, bool unrolled,
                        std::optional<int> rank = std::nullopt) {
    const Plan p = WithGas(np, gas);
    const SimulationContext ctx = MakeSimulationContext(W(np), *hw_, p.precision, Threshold(p));
    SimulateOptions o;
    o.keep_graph = unrolled;  // a kept graph is the unrolled one
    o.rank = rank;
    auto r = Simulate(ctx, p, o);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(*r) : Prediction{};
  }

  static Workload* w_;
  static Workload* w_gc_;
  static HardwareProfile* hw_;
};
Workload* AccumulationTest::w_ = nullptr;
Workload* AccumulationTest::w_gc_ = nullptr;
HardwareProfile* AccumulationTest::hw_ = nullptr;

void ExpectSameGraph(const StepGraph& a, const StepGraph& b) {
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(a.initial, b.initial);
  for (TaskId id = 0; id < a.size(); ++id) {
    const Task& x = a.task(id);
    const Task& y = b.task(id);
    SCOPED_TRACE(testing::Message() << "task " << id);
    EXPECT_EQ(x.kind, y.kind);
    EXPECT_EQ(x.resource, y.resource);
    EXPECT_EQ(x.layer, y.layer);
    EXPECT_EQ(x.micro_step, y.micro_step);
    EXPECT_EQ(x.index, y.index);
    EXPECT_EQ(x.flops, y.flops);
    EXPECT_EQ(x.bytes, y.bytes);
    EXPECT_EQ(x.elements, y.elements);
    EXPECT_EQ(x.ranks, y.ranks);
    EXPECT_EQ(x.inter_node, y.inter_node);
    EXPECT_EQ(x.pinned, y.pinned);
    EXPECT_EQ(x.kernels, y.kernels);
    ASSERT_EQ(x.deps_count, y.deps_count);
    for (uint32_t i = 0; i < x.deps_count; ++i) EXPECT_EQ(a.deps_begin(id)[i], b.deps_begin(id)[i]);
    ASSERT_EQ(x.mem_count, y.mem_count);
    for (uint32_t i = 0; i < x.mem_count; ++i) {
      const MemEffect& e = a.effects_begin(id)[i];
      const MemEffect& f = b.effects_begin(id)[i];
      EXPECT_EQ(e.bytes, f.bytes);
      EXPECT_EQ(e.space, f.space);
      EXPECT_EQ(e.category, f.category);
      EXPECT_EQ(e.at_end, f.at_end);
    }
    if (::testing::Test::HasFailure()) return;  // one task's differences are enough to read
  }
}

// The compact graph holds four micro-steps whatever GAS is, and writing out its repeated block
// gives the builder's own unrolled graph, task for task.
TEST_F(AccumulationTest, CompactGraphUnrollsToTheUnrolledGraph) {
  for (const NamedPlan& np : Plans()) {
    for (int64_t gas : {1, 2, 3, 4, 5, 6, 7, 8, 13}) {
      SCOPED_TRACE(testing::Message() << np.name << " gas " << gas);
      const BuiltStep compact = Build(np, gas, StepGraphForm::kCompact);
      const BuiltStep unrolled = Build(np, gas, StepGraphForm::kUnrolled);
      EXPECT_EQ(compact.graph.repeat.active(), gas > 4);
      if (gas > 4) {
        EXPECT_EQ(compact.graph.repeat.count, gas - 3);
      }
      EXPECT_FALSE(unrolled.graph.repeat.active());
      EXPECT_EQ(compact.graph.unrolled_size(), unrolled.graph.size());
      EXPECT_EQ(compact.facts.buckets_per_micro_step, unrolled.facts.buckets_per_micro_step);
      auto written = Unroll(compact.graph, int64_t{1} << 30);
      ASSERT_TRUE(written.ok()) << written.status().ToString();
      ExpectSameGraph(*written, unrolled.graph);
      if (HasFailure()) return;
    }
  }
}

// The same durations for the compact and the unrolled graph (each unrolled task takes its
// compact task's), random so that the streams overlap in many ways: the schedules agree.
TEST_F(AccumulationTest, CompactScheduleMatchesUnrolledSchedule) {
  std::mt19937_64 rng(7);
  for (const NamedPlan& np : Plans()) {
    for (int64_t gas : {5, 6, 8, 13}) {
      SCOPED_TRACE(testing::Message() << np.name << " gas " << gas);
      const BuiltStep compact = Build(np, gas, StepGraphForm::kCompact);
      const BuiltStep unrolled = Build(np, gas, StepGraphForm::kUnrolled);
      const RepeatedBlock& r = compact.graph.repeat;
      ASSERT_TRUE(r.active());
      for (int trial = 0; trial < 3; ++trial) {
        std::uniform_real_distribution<double> u(0.0, trial == 0 ? 1e-3 : 1e-2);
        std::vector<double> dc(compact.graph.size());
        for (double& d : dc) d = u(rng);
        if (trial == 2) {
          // Communication-bound: collectives and copies ten times longer.
          for (TaskId id = 0; id < compact.graph.size(); ++id) {
            if (compact.graph.task(id).resource != Resource::kCompute) dc[id] *= 10;
          }
        }
        std::vector<double> du;
        for (TaskId id = 0; id < r.begin; ++id) du.push_back(dc[id]);
        for (int64_t k = 0; k < r.count; ++k) {
          for (TaskId id = r.begin; id < r.end; ++id) du.push_back(dc[id]);
        }
        for (TaskId id = r.end; id < compact.graph.size(); ++id) du.push_back(dc[id]);
        ASSERT_EQ(du.size(), static_cast<size_t>(unrolled.graph.size()));
        const Schedule a = ScheduleGraph(compact.graph, dc);
        const Schedule b = ScheduleGraph(unrolled.graph, du);
        EXPECT_NEAR(a.makespan_s, b.makespan_s, 1e-12 * b.makespan_s);
        for (int res = 0; res < kNumResources; ++res) {
          EXPECT_NEAR(a.busy_s[res], b.busy_s[res], 1e-12 * b.makespan_s + 1e-15) << res;
        }
        double on_path = 0;
        for (double s : a.critical_s) on_path += s;
        EXPECT_NEAR(on_path, a.makespan_s, 1e-12 * a.makespan_s);
        // The tail (last micro-step and optimizer step) starts and ends at the same times.
        const TaskId shift = static_cast<TaskId>((r.count - 1) * r.size());
        for (TaskId id = r.end; id < compact.graph.size(); ++id) {
          EXPECT_NEAR(a.end_s[id], b.end_s[id + shift], 1e-12 * b.makespan_s) << id;
        }
        if (HasFailure()) return;
      }
    }
  }
}

// Full simulations: step time, memory peaks (GPU allocated and reserved, host, NVMe) and fit of
// the compact graph against the unrolled one, GAS 2 to 8.
TEST_F(AccumulationTest, CompactSimulationMatchesUnrolledSimulation) {
  for (const NamedPlan& np : Plans()) {
    for (int64_t gas = 2; gas <= 8; ++gas) {
      SCOPED_TRACE(testing::Message() << np.name << " gas " << gas);
      const Prediction a = Sim(np, gas, false);
      const Prediction b = Sim(np, gas, true);
      EXPECT_NEAR(a.step_time_s, b.step_time_s, 1e-9 * b.step_time_s);
      EXPECT_EQ(a.gpu_peak_allocated_bytes, b.gpu_peak_allocated_bytes);
      EXPECT_EQ(a.gpu_peak_reserved_bytes, b.gpu_peak_reserved_bytes);
      EXPECT_EQ(a.gpu_breakdown_at_peak, b.gpu_breakdown_at_peak);
      EXPECT_EQ(a.gpu_peak_task, b.gpu_peak_task);
      EXPECT_EQ(a.host_peak_bytes_per_node, b.host_peak_bytes_per_node);
      EXPECT_EQ(a.host_pinned_bytes_per_node, b.host_pinned_bytes_per_node);
      EXPECT_EQ(a.nvme_bytes_per_node, b.nvme_bytes_per_node);
      EXPECT_EQ(a.fits, b.fits);
      for (int res = 0; res < kNumResources; ++res) {
        EXPECT_NEAR(a.busy_s[res], b.busy_s[res], 1e-9 * b.step_time_s) << res;
      }
      if (HasFailure()) return;
    }
  }
}

// The memory timeline and the allocator replay of a compact graph, directly.
TEST_F(AccumulationTest, CompactMemoryMatchesUnrolledMemory) {
  for (const NamedPlan& np : Plans()) {
    for (int64_t gas : {5, 9}) {
      SCOPED_TRACE(testing::Message() << np.name << " gas " << gas);
      const BuiltStep compact = Build(np, gas, StepGraphForm::kCompact);
      const BuiltStep unrolled = Build(np, gas, StepGraphForm::kUnrolled);
      const MemoryTimeline a = ComputeMemory(compact.graph);
      const MemoryTimeline b = ComputeMemory(unrolled.graph);
      for (int sp = 0; sp < kNumMemSpaces; ++sp) {
        EXPECT_EQ(a.peak[sp].bytes, b.peak[sp].bytes) << sp;
        EXPECT_EQ(a.peak[sp].breakdown, b.peak[sp].breakdown) << sp;
        EXPECT_EQ(a.final_bytes[sp], b.final_bytes[sp]) << sp;
      }
      // A small capacity too: the replay releases cached segments and overflows.
      const int64_t peak = b.peak[kGpu].bytes;
      for (int64_t capacity : {int64_t{0}, peak, peak + (peak >> 3)}) {
        const AllocatorResult x = SimulateCachingAllocator(compact.graph, 2, capacity);
        const AllocatorResult y = SimulateCachingAllocator(unrolled.graph, 2, capacity);
        EXPECT_EQ(x.peak_allocated, y.peak_allocated) << capacity;
        EXPECT_EQ(x.peak_reserved, y.peak_reserved) << capacity;
        EXPECT_EQ(x.out_of_memory, y.out_of_memory) << capacity;
      }
      if (HasFailure()) return;
    }
  }
}

// The allocator replay of a compact graph stops replaying copies once they cycle: a few
// copies per iteration, whatever GAS is.
TEST_F(AccumulationTest, AllocatorReplaysAFewCopies) {
  for (const NamedPlan& np : Plans()) {
    SCOPED_TRACE(np.name);
    const BuiltStep b = Build(np, 1'000'000, StepGraphForm::kCompact);
    const AllocatorResult r = SimulateCachingAllocator(b.graph, 2, 0);
    EXPECT_LE(r.copies_replayed, 8);
    EXPECT_GE(r.copies_replayed, 2);
  }
}

// The predicted peak does not grow with accumulation: from GAS 2 on every micro-step starts
// from the same memory (each frees what it allocates, and the caller's output object of the
// previous micro-step is the only one held). GAS 1 differs: its one forward holds no earlier
// output. The caching allocator's reserved memory may take a few micro-steps to settle (a
// block freed early in a backward, BackwardWorkingSets, or a tied head's gradient held through
// the backward, is placed differently in the first micro-steps than in later ones): from GAS 4
// on it is the same, and no smaller GAS reserves more than the most of GAS 3 and 4 (stage 0
// with gpt2's tied head: GAS 3 reserves 14 MiB more than GAS 4 and on).
TEST_F(AccumulationTest, PeakDoesNotGrowWithAccumulation) {
  for (const NamedPlan& np : Plans()) {
    // Per rank: the ranks of stages 1-2 differ, and the prediction of each GAS reports the rank
    // that decides its fit, which need not be the same rank for GAS 1 and GAS 2.
    for (int rank : {0, np.plan.dp_size() - 1}) {
      SCOPED_TRACE(testing::Message() << np.name << ", rank " << rank);
      const Prediction two = Sim(np, 2, false, rank);
      const Prediction three = Sim(np, 3, false, rank);
      const Prediction four = Sim(np, 4, false, rank);
      const int64_t settling =
          std::max(three.gpu_peak_reserved_bytes, four.gpu_peak_reserved_bytes);
      EXPECT_LE(two.gpu_peak_reserved_bytes, settling);
      for (int64_t gas : {3, 4, 64, 1024, 1'000'000}) {
        const Prediction p = Sim(np, gas, false, rank);
        EXPECT_EQ(p.gpu_peak_allocated_bytes, two.gpu_peak_allocated_bytes) << gas;
        if (gas >= 4) EXPECT_EQ(p.gpu_peak_reserved_bytes, four.gpu_peak_reserved_bytes) << gas;
        EXPECT_EQ(p.host_peak_bytes_per_node, two.host_peak_bytes_per_node) << gas;
      }
      const Prediction one = Sim(np, 1, false, rank);
      // At most the previous micro-step's logits more than GAS 1 (plus what accumulation itself
      // keeps: stage 2's second partition buffer, stage 1's held gradients).
      EXPECT_LE(one.gpu_peak_allocated_bytes, two.gpu_peak_allocated_bytes);
    }
  }
}

// The step time grows linearly with accumulation once the micro-steps are steady: the time of
// GAS + 1 minus that of GAS is the same from GAS 5 on, and GAS 10^6 costs no more to simulate.
TEST_F(AccumulationTest, StepTimeGrowsByOneMicroStepPerStep) {
  for (const NamedPlan& np : Plans()) {
    SCOPED_TRACE(np.name);
    const double t8 = Sim(np, 8, false).step_time_s;
    const double t9 = Sim(np, 9, false).step_time_s;
    const double t10 = Sim(np, 10, false).step_time_s;
    const double big = Sim(np, 1'000'008, false).step_time_s;
    EXPECT_NEAR(t10 - t9, t9 - t8, 1e-9 * t10);
    EXPECT_NEAR(big, t8 + 1e6 * (t9 - t8), 1e-6 * big);
  }
}

TEST_F(AccumulationTest, UnrolledGraphIsBounded) {
  const NamedPlan np = Plans()[0];
  const Plan p = WithGas(np, kMaxUnrolledMicroSteps + 1);
  auto b = BuildStepGraph(W(np), ComputeLayerParams(W(np), 0), p, 0, StepGraphForm::kUnrolled);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("gradient_accumulation_steps"), std::string::npos);
  // The compact graph of the largest GAS a plan may have is four micro-steps.
  const Plan q = WithGas(np, kMaxGradAccum);
  auto c = BuildStepGraph(W(np), ComputeLayerParams(W(np), 0), q, 0);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->graph.repeat.count, kMaxGradAccum - 3);
  auto w = Unroll(c->graph, 1'000'000);
  EXPECT_FALSE(w.ok());
}

TEST_F(AccumulationTest, AbsurdAccumulationIsRefused) {
  const NamedPlan np = Plans()[0];
  for (int64_t gas : {int64_t{0}, kMaxGradAccum + 1, int64_t{1} << 40}) {
    const Plan p = WithGas(np, gas);
    auto b = BuildStepGraph(W(np), ComputeLayerParams(W(np), 0), p, 0);
    ASSERT_FALSE(b.ok()) << gas;
    EXPECT_NE(b.status().message().find("gradient_accumulation_steps"), std::string::npos);
    EXPECT_NE(b.status().message().find("1000000000"), std::string::npos) << b.status().message();
  }
}

}  // namespace
}  // namespace dsplan

namespace dsplan {
namespace {

// Stage 2 without offload, a micro-step after the window's first: the epilogue adds that
// micro-step's gradient partition into averaged_gradients, one add_ per owned tensor (read both,
// write one). Its grad-copy task carries those bytes and kernels; the first micro-step's does
// not, and stage 1 (which accumulates in .grad through autograd) has no such add. Measured on
// an H100 (accum-1210, gpt2-xl stage 2, 8 micro-steps): the backward ran 11 ms per micro-step
// longer than priced without it.
TEST_F(AccumulationTest, StageTwoEpilogueAddsEachLaterMicroStepsPartition) {
  for (int stage : {1, 2}) {
    NamedPlan np{"stage", Base(stage)};
    np.plan.zero.contiguous_gradients = true;
    const BuiltStep b = Build(np, 3, StepGraphForm::kUnrolled);
    const StepGraph& g = b.graph;
    std::vector<double> epilogue_bytes(3, -1);
    for (TaskId id = 0; id < g.size(); ++id) {
      const Task& t = g.task(id);
      // The epilogue's task: a grad copy on the compute stream that frees the ipg buffers.
      if (t.kind != TaskKind::kGradCopy || t.resource != Resource::kCompute) continue;
      bool frees_ipg = false;
      for (uint32_t i = 0; i < t.mem_count; ++i) {
        const MemEffect& e = g.effects_begin(id)[i];
        frees_ipg = frees_ipg || (e.bytes < 0 && e.category == MemCategory::kCommBuffers);
      }
      if (frees_ipg) epilogue_bytes[t.micro_step] = t.bytes;
    }
    SCOPED_TRACE(testing::Message() << "stage " << stage);
    if (stage == 1) {
      // Stage 1 runs its epilogue at the boundary only, and adds nothing there.
      EXPECT_EQ(epilogue_bytes[2], 0);
      continue;
    }
    EXPECT_EQ(epilogue_bytes[0], 0);
    EXPECT_GT(epilogue_bytes[1], 0);
    EXPECT_EQ(epilogue_bytes[1], epilogue_bytes[2]);
    // 3 x 2 bytes over this rank's partition (bf16 accumulation).
    EXPECT_NEAR(epilogue_bytes[1], 6.0 * static_cast<double>(b.facts.partition_numel),
                6.0 * 64);
  }
}

}  // namespace
}  // namespace dsplan

namespace dsplan {
namespace {

// Stages 1-2 with the optimizer on the CPU round-trip each owned gradient's 16-bit host
// accumulator through the GPU at every flush (async_accumulate_grad_in_cpu_via_gpu): from the
// second micro-step on a copy in and an add_, before the boundary a copy out. Stage 2 flushes
// every micro-step; stage 1 only at the boundary (one copy in per step, no copy out); without
// offload there are no such copies before the boundary. Measured on an H100 (accum-1210,
// llama-3.2-1b stage 2, CPU Adam, 8 micro-steps): the backward ran 0.39 s per step longer than
// priced without them.
TEST_F(AccumulationTest, CpuOffloadRoundTripsTheHostAccumulatorEachMicroStep) {
  for (int stage : {1, 2}) {
    for (bool offload : {false, true}) {
      NamedPlan np{"stage", Base(stage)};
      if (offload) np.plan.zero.offload_optimizer.device = OffloadDevice::kCpu;
      const BuiltStep b = Build(np, 4, StepGraphForm::kUnrolled);
      const StepGraph& g = b.graph;
      std::vector<double> h2d(4, 0), d2h(4, 0);
      for (TaskId id = 0; id < g.size(); ++id) {
        const Task& t = g.task(id);
        if (t.micro_step < 0) continue;
        if (t.kind == TaskKind::kCopyH2D) h2d[t.micro_step] += t.bytes;
        if (t.kind == TaskKind::kCopyD2H) d2h[t.micro_step] += t.bytes;
      }
      SCOPED_TRACE(testing::Message() << "stage " << stage << (offload ? " offload" : ""));
      const double part16 = 2.0 * static_cast<double>(b.facts.partition_numel);
      if (!offload) {
        for (int m = 0; m < 4; ++m) EXPECT_EQ(h2d[m] + d2h[m], 0) << "micro-step " << m;
        continue;
      }
      // The boundary's own fp32 copy out (4 bytes per element) is there with or without
      // accumulation; before the boundary only the 16-bit accumulator moves.
      EXPECT_EQ(h2d[0], 0);
      if (stage == 2) {
        EXPECT_NEAR(d2h[0], part16, 2.0 * 64);
        for (int m = 1; m < 3; ++m) {
          EXPECT_NEAR(h2d[m], part16, 2.0 * 64) << "micro-step " << m;
          EXPECT_NEAR(d2h[m], part16, 2.0 * 64) << "micro-step " << m;
        }
      } else {
        for (int m = 0; m < 3; ++m) EXPECT_EQ(h2d[m] + d2h[m], 0) << "micro-step " << m;
      }
      EXPECT_NEAR(h2d[3], part16, 2.0 * 64);
      EXPECT_NEAR(d2h[3], 2.0 * part16, 4.0 * 64);
    }
  }
}

// The host issues those copies and adds in the gradient hook that runs the flush: with buckets
// smaller than the model, the backward tasks whose hooks flush carry them as tensor ops (a copy
// out in micro-step 0; a copy in, an add and a copy out in a middle one), which their host time
// prices at the cost of an eager op; the flush after the last backward is the epilogue's. None
// without offload.
TEST_F(AccumulationTest, CpuOffloadRoundTripsAreHostWorkOfTheFlushingBackward) {
  for (bool offload : {false, true}) {
    NamedPlan np{"stage 2", Base(2)};
    np.plan.zero.reduce_bucket_size = 3'000'000;  // several flushes per micro-step
    if (offload) np.plan.zero.offload_optimizer.device = OffloadDevice::kCpu;
    const BuiltStep b = Build(np, 3, StepGraphForm::kUnrolled);
    const StepGraph& g = b.graph;
    std::vector<int> ops(3, 0);
    int flushing_tasks = 0;
    for (TaskId id = 0; id < g.size(); ++id) {
      const Task& t = g.task(id);
      if (t.kind != TaskKind::kBackward) continue;
      ops[t.micro_step] += t.hook_kernels;
      if (t.hook_kernels > 0 && t.micro_step == 1) ++flushing_tasks;
    }
    SCOPED_TRACE(offload ? "offload" : "no offload");
    if (!offload) {
      EXPECT_EQ(ops[0] + ops[1] + ops[2], 0);
      continue;
    }
    int tensors = 0;
    for (const LayerParams& lp : ComputeLayerParams(W(np), 0)) tensors += lp.tensors;
    EXPECT_GT(flushing_tasks, 1);
    EXPECT_GT(ops[0], 0);
    EXPECT_LT(ops[0], tensors);     // the epilogue's flush holds the rest
    EXPECT_EQ(ops[1], 3 * ops[0]);  // in, add, out for the same tensors
    EXPECT_EQ(ops[2], 2 * ops[0]);  // the boundary: in and add
  }
}

}  // namespace
}  // namespace dsplan

namespace dsplan {
namespace {

// Where param.grad accumulates across micro-steps (stage 1; FP16_Optimizer at stage 0), every
// micro-step after the first adds each layer's new gradients into it in place: a grad-copy task
// per layer after its backward, 3 x 2 bytes per parameter over the step's micro-steps 1..GAS-1,
// a kernel per tensor. Stage 2 (its hooks free the gradients each micro-step) and BF16_Optimizer
// (it moves them into its fp32 buffer) have none, and no plan has one in its first micro-step.
TEST_F(AccumulationTest, InPlaceGradientAddAfterTheFirstMicroStep) {
  struct Case {
    const char* name;
    Plan plan;
    bool adds;
  };
  Plan fp16 = Base(0);
  fp16.precision = Precision::kFp16;
  const std::vector<Case> cases = {{"stage 1", Base(1), true},
                                   {"stage 0 fp16", fp16, true},
                                   {"stage 2", Base(2), false},
                                   {"stage 0 bf16", Base(0), false}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const BuiltStep b = Build(NamedPlan{c.name, c.plan}, 3, StepGraphForm::kUnrolled);
    const StepGraph& g = b.graph;
    std::vector<double> bytes(3, 0);
    std::vector<int> kernels(3, 0);
    for (TaskId id = 0; id < g.size(); ++id) {
      const Task& t = g.task(id);
      if (t.kind != TaskKind::kGradCopy || t.layer < 0 || t.micro_step < 0) continue;
      bytes[t.micro_step] += t.bytes;
      kernels[t.micro_step] += t.kernels;
    }
    // Micro-step 1 is neither the first nor the boundary: what it adds beyond micro-step 0 (whose
    // hooks, if any, copy the same gradients into the same buckets) is the in-place add alone.
    const double p = static_cast<double>(b.facts.params);
    if (!c.adds) {
      EXPECT_EQ(bytes[1], bytes[0]);
      continue;
    }
    EXPECT_EQ(bytes[0], 0);  // stage 1 reduces at the boundary only; stage 0 in the step
    EXPECT_DOUBLE_EQ(bytes[1], 6.0 * p);
    EXPECT_GE(kernels[1], static_cast<int>(W(NamedPlan{c.name, c.plan}).layers.size()) - 2);
  }
}

}  // namespace
}  // namespace dsplan
