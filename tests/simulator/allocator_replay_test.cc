// The simulator's allocator replay (SimulateCachingAllocator) takes shortcuts that must not
// change its answers (docs/simulator.md, "Reserved memory"): a transient allocation freed by the
// next effect of its task is a query (CachingAllocator::TryTransient), as is such a pair inside
// an allocation freed right after it (TryTransientNested), and a compact graph's
// repeated micro-step stops once its copies cycle. This file checks both against a plain replay
// written here: every GPU effect of the unrolled graph, one by one, through EffectReplayer::Apply
// as the CUDA executor applies them, for built graphs across stages, offload, overlap_comm,
// checkpointing, accumulation, an encoder-decoder model, lazily created optimizer states and
// capacities that force cached segments out and overflow. TryTransient and TryTransientNested
// are also checked directly against Malloc and Free on random allocator states.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "core/model_catalog.h"
#include "simulator/allocator.h"
#include "simulator/caching_allocator.h"
#include "simulator/scheduler.h"
#include "simulator/step_builder.h"
#include "simulator/workload.h"

namespace dsplan {
namespace {

// The replay SimulateCachingAllocator stands for, without shortcuts. REQUIRES: |g| unrolled.
AllocatorResult PlainReplay(const StepGraph& g, int iterations, int64_t capacity, bool lazy) {
  CountingSegmentSource source(capacity);
  CachingAllocator a(&source);
  EffectReplayer replay(&a);
  int64_t lazy_bytes = 0;
  if (lazy) {
    for (const StepGraph::LazyState& l : g.lazy_gpu_states) lazy_bytes += l.bytes;
  }
  if (lazy_bytes > g.initial[static_cast<int>(MemSpace::kGpu)]
                            [static_cast<int>(MemCategory::kOptimizerStates)]) {
    lazy_bytes = 0;
  }
  bool lazy_pending = lazy_bytes > 0;
  bool any_optimizer_seen = false;
  std::vector<bool> created(g.lazy_gpu_states.size(), false);
  EXPECT_TRUE(replay.AllocateInitial(g, lazy_bytes).ok());
  AllocatorResult r;
  int64_t peak_reserved = 0;
  for (int it = 0; it < iterations; ++it) {
    if (it == iterations - 1) {
      peak_reserved = a.peak_reserved();
      a.ResetPeaks();
    }
    for (TaskId id = 0; id < g.size(); ++id) {
      // Lazy states come before the task's GPU effect number |after| (non-zero GPU effects,
      // start then end ones); those without a task at the first optimizer task's start.
      const bool first_optimizer = lazy_pending && !any_optimizer_seen &&
                                   g.task(id).kind == TaskKind::kGpuOptimizer;
      if (g.task(id).kind == TaskKind::kGpuOptimizer) any_optimizer_seen = true;
      auto create = [&](int32_t seen, bool all) {
        if (!lazy_pending) return;
        for (size_t i = 0; i < g.lazy_gpu_states.size(); ++i) {
          const StepGraph::LazyState& l = g.lazy_gpu_states[i];
          const bool here = l.task == id ? (all || l.after <= seen)
                                         : (l.task < 0 && first_optimizer);
          if (!created[i] && here) {
            created[i] = true;
            EXPECT_TRUE(a.Malloc(l.bytes).ok());
          }
        }
      };
      int32_t seen = 0;
      for (bool at_end : {false, true}) {
        for (const MemEffect* e = g.effects_begin(id); e != g.effects_end(id); ++e) {
          if (e->at_end == at_end) {
            if (e->space == MemSpace::kGpu && e->bytes != 0) create(seen++, false);
            EXPECT_TRUE(replay.Apply(*e).ok());
          }
        }
      }
      create(seen, true);
    }
    lazy_pending = false;
  }
  r.peak_allocated = a.peak_allocated();
  r.peak_reserved = std::max(peak_reserved, a.peak_reserved());
  r.out_of_memory = source.overflowed();
  return r;
}

struct Case {
  std::string name;
  Plan plan;
};

Plan Base(int stage, int64_t gas) {
  Plan p;
  p.gpus_per_node = 4;
  p.micro_batch = 2;
  p.precision = Precision::kBf16;
  p.optimizer = OptimizerType::kAdamW;
  p.zero.stage = stage;
  p.grad_accum = gas;
  return p;
}

std::vector<Case> Cases() {
  std::vector<Case> out;
  for (int64_t gas : {1, 2, 5}) {
    const std::string g = " gas " + std::to_string(gas);
    for (int stage : {0, 1, 2, 3}) {
      out.push_back({"stage " + std::to_string(stage) + g, Base(stage, gas)});
    }
    {
      Plan p = Base(2, gas);
      p.zero.overlap_comm = true;  // side-stream buckets
      p.zero.reduce_bucket_size = 3'000'000;
      out.push_back({"stage 2 overlap small buckets" + g, p});
    }
    {
      Plan p = Base(2, gas);
      p.zero.offload_optimizer.device = OffloadDevice::kCpu;
      out.push_back({"stage 2 cpu offload" + g, p});
    }
    {
      Plan p = Base(3, gas);
      p.zero.offload_optimizer.device = OffloadDevice::kCpu;
      p.zero.offload_param.device = OffloadDevice::kCpu;
      out.push_back({"stage 3 cpu offload" + g, p});
    }
    {
      Plan p = Base(3, gas);
      p.zero.offload_optimizer.device = OffloadDevice::kNvme;
      p.zero.offload_optimizer.nvme_path = "/local_nvme";
      p.zero.offload_param.device = OffloadDevice::kNvme;
      p.zero.offload_param.nvme_path = "/local_nvme";
      p.zero.sub_group_size = 20'000'000;
      out.push_back({"stage 3 nvme offload" + g, p});
    }
  }
  return out;
}

void ExpectReplaysAgree(const std::string& model, int64_t seq_len, int64_t target_len) {
  auto spec = LoadModel(model, DSPLAN_TEST_DATA_DIR);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  for (bool gc : {false, true}) {
    for (Case c : Cases()) {
      c.plan.seq_len = seq_len;
      c.plan.target_len = target_len;
      c.plan.gradient_checkpointing = gc;
      SCOPED_TRACE(testing::Message() << model << " " << c.name << (gc ? " checkpointing" : ""));
      auto w = BuildWorkload(*spec, c.plan.shape());
      ASSERT_TRUE(w.ok()) << w.status().ToString();
      const int64_t threshold =
          c.plan.zero.stage == 3 ? c.plan.zero.stage3_param_persistence_threshold : 0;
      const auto params = ComputeLayerParams(*w, threshold);
      auto compact = BuildStepGraph(*w, params, c.plan, 64 << 20, StepGraphForm::kCompact);
      auto unrolled = BuildStepGraph(*w, params, c.plan, 64 << 20, StepGraphForm::kUnrolled);
      ASSERT_TRUE(compact.ok() && unrolled.ok());
      const int64_t peak = ComputeMemory(unrolled->graph).peak[0].bytes;
      for (bool lazy : {false, true}) {
        for (int64_t capacity : {int64_t{0}, peak / 2, peak, peak + (peak >> 3)}) {
          SCOPED_TRACE(testing::Message() << "capacity " << capacity << " lazy " << lazy);
          const AllocatorResult want = PlainReplay(unrolled->graph, 2, capacity, lazy);
          for (const StepGraph* g : {&compact->graph, &unrolled->graph}) {
            const AllocatorResult got = SimulateCachingAllocator(*g, 2, capacity, lazy);
            EXPECT_EQ(got.peak_allocated, want.peak_allocated);
            EXPECT_EQ(got.peak_reserved, want.peak_reserved);
            EXPECT_EQ(got.out_of_memory, want.out_of_memory);
          }
          if (::testing::Test::HasFailure()) return;
        }
      }
    }
  }
}

TEST(AllocatorReplayTest, ShortcutsGiveThePlainReplaysAnswersGpt2) {
  ExpectReplaysAgree("gpt2", 128, 0);
}

TEST(AllocatorReplayTest, ShortcutsGiveThePlainReplaysAnswersT5) {
  ExpectReplaysAgree("t5-small", 128, 32);
}

// TryTransient on one allocator, Malloc then Free on its twin (and TryTransientNested against
// Malloc, Malloc, Free, Free): the same state (block for block, AppendStateKey) and the same
// peaks, from states built by random requests and frees of both pools, two streams, split and
// unsplit blocks.
TEST(AllocatorReplayTest, TransientRequestsLeaveTheStateMallocAndFreeLeave) {
  std::mt19937_64 rng(15);
  const int64_t kib = 1024;
  std::uniform_int_distribution<int> pick(0, 99);
  auto random_size = [&] {
    switch (pick(rng) % 4) {
      case 0: return int64_t{1} + static_cast<int64_t>(rng() % (64 * kib));        // small
      case 1: return 512 * kib + static_cast<int64_t>(rng() % (1024 * kib));      // either
      case 2: return 2048 * kib + static_cast<int64_t>(rng() % (12 * 1024 * kib));  // 20 MiB
      default: return 8 * 1024 * kib + static_cast<int64_t>(rng() % (64 * 1024 * kib));
    }
  };
  int served[2] = {0, 0};
  const int kRuns = 400;
  for (int run = 0; run < kRuns; ++run) {
    const bool nested = run % 2 == 1;
    SCOPED_TRACE(testing::Message() << "run " << run << (nested ? " nested" : ""));
    CountingSegmentSource sa, sb;
    CachingAllocator a(&sa), b(&sb);
    std::vector<int> live;  // the same ids in both (the same calls so far)
    const int steps = static_cast<int>(rng() % 400);
    for (int step = 0; step < steps; ++step) {
      if (pick(rng) < 55 || live.empty()) {
        const int64_t size = random_size();
        const int stream = pick(rng) < 20 ? 1 : 0;
        auto x = a.Malloc(size, stream);
        auto y = b.Malloc(size, stream);
        ASSERT_TRUE(x.ok() && y.ok());
        ASSERT_EQ(*x, *y);
        live.push_back(*x);
      } else {
        const size_t i = rng() % live.size();
        a.Free(live[i]);
        b.Free(live[i]);
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
      }
    }
    const int64_t outer = random_size();
    const int outer_stream = pick(rng) < 20 ? 1 : 0;
    // The inner request often fits in what the outer one leaves of a large block.
    const int64_t inner = pick(rng) < 50 ? random_size() : 1 + static_cast<int64_t>(rng() % (outer + 1));
    const int inner_stream = pick(rng) < 10 ? 1 - outer_stream : outer_stream;
    a.ResetPeaks();
    b.ResetPeaks();
    const bool shortcut = nested ? a.TryTransientNested(outer, outer_stream, inner, inner_stream)
                                 : a.TryTransient(outer, outer_stream);
    if (shortcut) {
      ++served[nested];
    } else {
      // No cached block for one of them: the caller makes the calls, as on the twin.
      auto x = a.Malloc(outer, outer_stream);
      ASSERT_TRUE(x.ok());
      if (nested) {
        auto x2 = a.Malloc(inner, inner_stream);
        ASSERT_TRUE(x2.ok());
        a.Free(*x2);
      }
      a.Free(*x);
    }
    auto y = b.Malloc(outer, outer_stream);
    ASSERT_TRUE(y.ok());
    if (nested) {
      auto y2 = b.Malloc(inner, inner_stream);
      ASSERT_TRUE(y2.ok());
      b.Free(*y2);
    }
    b.Free(*y);
    std::vector<int64_t> ka, kb;
    std::vector<int> na, nb;
    a.AppendStateKey(&ka, &na);
    b.AppendStateKey(&kb, &nb);
    ASSERT_EQ(ka, kb);
    ASSERT_EQ(a.peak_allocated(), b.peak_allocated());
    ASSERT_EQ(a.peak_reserved(), b.peak_reserved());
    ASSERT_EQ(a.allocated(), b.allocated());
  }
  // Both answers happen: cached blocks that serve the requests, and requests that need a segment.
  for (int nested : {0, 1}) {
    EXPECT_GE(served[nested], kRuns / 8) << nested;
    EXPECT_LE(served[nested], kRuns / 2 - 5) << nested;
  }
}

// The inner request of a nested pair served by what the outer one splits off its block: one
// cached 20 MiB block; 4 MiB of it for the outer request leaves 16 MiB, which serves 12 MiB.
TEST(AllocatorReplayTest, NestedRequestUsesTheOuterBlocksRemainder) {
  const int64_t mib = int64_t{1} << 20;
  CountingSegmentSource source;
  CachingAllocator a(&source);
  auto x = a.Malloc(3 * mib);  // a 20 MiB segment
  ASSERT_TRUE(x.ok());
  a.Free(*x);
  a.ResetPeaks();
  EXPECT_TRUE(a.TryTransientNested(4 * mib, 0, 12 * mib, 0));
  EXPECT_EQ(a.peak_allocated(), 16 * mib);
  EXPECT_EQ(a.reserved(), 20 * mib);
  // 17 MiB do not fit in the 16 MiB left, and nothing else is cached: a segment is needed.
  EXPECT_FALSE(a.TryTransientNested(4 * mib, 0, 17 * mib, 0));
  // On the other stream nothing is cached.
  EXPECT_FALSE(a.TryTransientNested(4 * mib, 0, 1 * mib, 1));
}

}  // namespace
}  // namespace dsplan
