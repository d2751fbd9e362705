// SimulateCachingAllocator (max_memory_reserved, through simulator/caching_allocator.h):
// PyTorch's rounding and segment sizes, best-fit reuse, splitting and merging, why freed medium
// blocks cannot serve one large request, how frees are matched to blocks, and the capacity.
// Each case is a hand-built StepGraph whose GPU effects are the requests.
#include <gtest/gtest.h>

#include <initializer_list>

#include "simulator/allocator.h"
#include "simulator/caching_allocator.h"
#include "simulator/step_graph.h"

namespace dsplan {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

MemEffect Alloc(int64_t bytes, MemCategory c = MemCategory::kTemporaries) {
  return MemEffect{bytes, MemSpace::kGpu, c, false};
}
MemEffect Free(int64_t bytes, MemCategory c = MemCategory::kTemporaries) {
  return MemEffect{-bytes, MemSpace::kGpu, c, false};
}

// One task per effect, in order.
StepGraph Graph(std::initializer_list<MemEffect> effects) {
  StepGraph g;
  for (const MemEffect& e : effects) g.Add(Task{}, {}, {e});
  return g;
}

AllocatorResult Once(std::initializer_list<MemEffect> effects) {
  return SimulateCachingAllocator(Graph(effects), 1);
}

TEST(AllocatorTest, RequestsRoundUpTo512Bytes) {
  AllocatorResult r = Once({Alloc(1)});
  EXPECT_EQ(r.peak_allocated, 512);
  r = Once({Alloc(513)});
  EXPECT_EQ(r.peak_allocated, 1024);
  r = Once({Alloc(1024)});
  EXPECT_EQ(r.peak_allocated, 1024);
}

// Requests up to 1 MiB come from 2 MiB segments, 1-10 MiB from 20 MiB segments, larger ones
// from a segment of their size rounded up to 2 MiB.
TEST(AllocatorTest, SegmentSizes) {
  EXPECT_EQ(Once({Alloc(1)}).peak_reserved, 2 * kMiB);
  EXPECT_EQ(Once({Alloc(kMiB)}).peak_reserved, 2 * kMiB);
  EXPECT_EQ(Once({Alloc(kMiB + 1)}).peak_reserved, 20 * kMiB);
  EXPECT_EQ(Once({Alloc(kMiB + 1)}).peak_allocated, kMiB + 512);
  EXPECT_EQ(Once({Alloc(10 * kMiB - 512)}).peak_reserved, 20 * kMiB);
  EXPECT_EQ(Once({Alloc(10 * kMiB)}).peak_reserved, 10 * kMiB);
  EXPECT_EQ(Once({Alloc(11 * kMiB + 1)}).peak_reserved, 12 * kMiB);
  EXPECT_EQ(Once({Alloc(100 * kMiB)}).peak_reserved, 100 * kMiB);
}

// Small requests split a 2 MiB segment: two 1 MiB requests share one.
TEST(AllocatorTest, SmallRequestsShareASegment) {
  const AllocatorResult r = Once({Alloc(kMiB), Alloc(kMiB, MemCategory::kActivations)});
  EXPECT_EQ(r.peak_reserved, 2 * kMiB);
  EXPECT_EQ(r.peak_allocated, 2 * kMiB);
  // A third needs a second segment.
  EXPECT_EQ(Once({Alloc(kMiB), Alloc(kMiB, MemCategory::kActivations),
                  Alloc(kMiB, MemCategory::kGradients)})
                .peak_reserved,
            4 * kMiB);
}

// Small and large pools are separate: a free 20 MiB segment does not serve a small request.
TEST(AllocatorTest, SmallAndLargePoolsAreSeparate) {
  const AllocatorResult r = Once({Alloc(5 * kMiB), Free(5 * kMiB), Alloc(4096)});
  EXPECT_EQ(r.peak_reserved, 22 * kMiB);
}

// Best fit: with free blocks of 30 and 50 MiB, a 28 MiB request takes the 30, so a later 45 MiB
// request still finds the 50 and nothing new is reserved.
TEST(AllocatorTest, BestFitReuse) {
  const AllocatorResult r =
      Once({Alloc(30 * kMiB), Alloc(50 * kMiB), Alloc(40 * kMiB), Free(30 * kMiB),
            Free(50 * kMiB), Alloc(28 * kMiB), Alloc(45 * kMiB)});
  EXPECT_EQ(r.peak_reserved, 120 * kMiB);
  EXPECT_EQ(r.peak_allocated, 120 * kMiB);
  // (First or worst fit would put the 28 MiB in the 50 MiB block and reserve a new 46 MiB
  // segment for the 45.) In the other order both requests fit as well.
  const AllocatorResult s = Once({Alloc(30 * kMiB), Alloc(50 * kMiB), Free(30 * kMiB),
                                  Free(50 * kMiB), Alloc(45 * kMiB), Alloc(28 * kMiB)});
  EXPECT_EQ(s.peak_reserved, 80 * kMiB);
}

// Split and merge: four 5 MiB requests split one 20 MiB segment; once all are freed, the
// neighbours merge back and serve a 20 MiB request without a new segment, whichever order the
// blocks are freed in.
TEST(AllocatorTest, SplitThenMergeForward) {
  // Frees release the most recent block of the same category and size: here 3, 2, 1, 0.
  const AllocatorResult r =
      Once({Alloc(5 * kMiB), Alloc(5 * kMiB), Alloc(5 * kMiB), Alloc(5 * kMiB), Free(5 * kMiB),
            Free(5 * kMiB), Free(5 * kMiB), Free(5 * kMiB), Alloc(20 * kMiB)});
  EXPECT_EQ(r.peak_reserved, 20 * kMiB);
  EXPECT_EQ(r.peak_allocated, 20 * kMiB);
}

TEST(AllocatorTest, SplitThenMergeBackward) {
  // Distinct categories free the blocks in address order 0, 1, 2, 3.
  using C = MemCategory;
  const AllocatorResult r = Once(
      {Alloc(5 * kMiB, C::kActivations), Alloc(5 * kMiB, C::kGradients),
       Alloc(5 * kMiB, C::kCommBuffers), Alloc(5 * kMiB, C::kTemporaries),
       Free(5 * kMiB, C::kActivations), Free(5 * kMiB, C::kGradients),
       Free(5 * kMiB, C::kCommBuffers), Free(5 * kMiB, C::kTemporaries), Alloc(20 * kMiB)});
  EXPECT_EQ(r.peak_reserved, 20 * kMiB);
}

// Without the last free, the three merged blocks (15 MiB) cannot hold 20 MiB: a new segment.
TEST(AllocatorTest, PartialMergeIsNotEnough) {
  const AllocatorResult r =
      Once({Alloc(5 * kMiB), Alloc(5 * kMiB), Alloc(5 * kMiB),
            Alloc(5 * kMiB, MemCategory::kActivations), Free(5 * kMiB), Free(5 * kMiB),
            Free(5 * kMiB), Alloc(20 * kMiB)});
  EXPECT_EQ(r.peak_reserved, 40 * kMiB);
  EXPECT_EQ(r.peak_allocated, 25 * kMiB);
}

// Memory freed as many medium blocks (two 20 MiB segments of 5 MiB blocks, as activations are)
// cannot serve one 40 MiB request (a flat gradient copy): reserved grows to 80 MiB although at
// most 40 MiB is ever allocated.
TEST(AllocatorTest, FreedMediumBlocksCannotServeOneLargerRequest) {
  StepGraph g;
  for (int i = 0; i < 8; ++i) g.Add(Task{}, {}, {Alloc(5 * kMiB, MemCategory::kActivations)});
  for (int i = 0; i < 8; ++i) g.Add(Task{}, {}, {Free(5 * kMiB, MemCategory::kActivations)});
  g.Add(Task{}, {}, {Alloc(40 * kMiB, MemCategory::kGradients)});
  g.Add(Task{}, {}, {Free(40 * kMiB, MemCategory::kGradients)});
  const AllocatorResult r = SimulateCachingAllocator(g, 1);
  EXPECT_EQ(r.peak_allocated, 40 * kMiB);
  EXPECT_EQ(r.peak_reserved, 80 * kMiB);
  // A second iteration reuses the cached segments: nothing more is reserved.
  const AllocatorResult r2 = SimulateCachingAllocator(g, 2);
  EXPECT_EQ(r2.peak_reserved, 80 * kMiB);
  EXPECT_EQ(r2.peak_allocated, 40 * kMiB);
}

// The initial GPU state is one block per category, present before the first effect.
TEST(AllocatorTest, InitialStateIsOneBlockPerCategory) {
  StepGraph g;
  g.initial[static_cast<int>(MemSpace::kGpu)][static_cast<int>(MemCategory::kParams16)] =
      100 * kMiB;
  g.initial[static_cast<int>(MemSpace::kGpu)][static_cast<int>(MemCategory::kContext)] =
      64 * kMiB;
  g.initial[static_cast<int>(MemSpace::kPinnedHost)][static_cast<int>(MemCategory::kMaster)] =
      1000 * kMiB;  // not GPU: ignored
  g.Add(Task{}, {}, {Alloc(30 * kMiB)});
  g.Add(Task{}, {}, {Free(30 * kMiB)});
  const AllocatorResult r = SimulateCachingAllocator(g, 2);
  EXPECT_EQ(r.peak_reserved, 194 * kMiB);
  EXPECT_EQ(r.peak_allocated, 194 * kMiB);
}

// A free larger than any single live block of its size releases the category's most recent
// blocks until covered (all parameter gradients freed at the step).
TEST(AllocatorTest, CategoryWideFree) {
  StepGraph g;
  g.Add(Task{}, {}, {Alloc(30 * kMiB, MemCategory::kGradients)});
  g.Add(Task{}, {}, {Alloc(20 * kMiB, MemCategory::kGradients)});
  g.Add(Task{}, {}, {Free(50 * kMiB, MemCategory::kGradients)});
  g.Add(Task{}, {}, {Alloc(30 * kMiB, MemCategory::kActivations)});
  g.Add(Task{}, {}, {Alloc(20 * kMiB, MemCategory::kActivations)});
  const AllocatorResult r = SimulateCachingAllocator(g, 1);
  EXPECT_EQ(r.peak_reserved, 50 * kMiB);
  EXPECT_EQ(r.peak_allocated, 50 * kMiB);
}

// A free smaller than the category's most recent block frees the block and allocates its
// remainder again (a tensor allocated as one and freed in pieces): allocated follows the
// timeline, 60 -> 45 MiB, rather than dropping to 0.
TEST(AllocatorTest, PartialFreeSplitsTheBlock) {
  StepGraph g;
  g.Add(Task{}, {}, {Alloc(60 * kMiB, MemCategory::kActivations)});
  g.Add(Task{}, {}, {Free(15 * kMiB, MemCategory::kActivations)});
  g.Add(Task{}, {}, {Alloc(40 * kMiB, MemCategory::kGradients)});
  const AllocatorResult r = SimulateCachingAllocator(g, 1);
  EXPECT_EQ(r.peak_allocated, 85 * kMiB);
}

// A free no live block covers comes out of the category's initial block (stage 0: the previous
// step's 16-bit gradients, freed at the next backward).
TEST(AllocatorTest, FreeOfInitialBytes) {
  StepGraph g;
  g.initial[static_cast<int>(MemSpace::kGpu)][static_cast<int>(MemCategory::kGradients)] =
      100 * kMiB;
  g.Add(Task{}, {}, {Free(100 * kMiB, MemCategory::kGradients)});
  g.Add(Task{}, {}, {Alloc(100 * kMiB, MemCategory::kGradients)});
  const AllocatorResult r = SimulateCachingAllocator(g, 2);
  EXPECT_EQ(r.peak_allocated, 100 * kMiB);
  EXPECT_EQ(r.peak_reserved, 100 * kMiB);
}

// At the capacity, cached segments with nothing allocated are released first; past it the plan
// is out of memory, and the replay goes on to report what it would reserve.
TEST(AllocatorTest, Capacity) {
  const StepGraph g = Graph({Alloc(60 * kMiB), Free(60 * kMiB), Alloc(70 * kMiB)});
  AllocatorResult r = SimulateCachingAllocator(g, 1, 100 * kMiB);
  EXPECT_FALSE(r.out_of_memory);
  EXPECT_EQ(r.peak_reserved, 70 * kMiB);
  r = SimulateCachingAllocator(g, 1, 0);  // no capacity: the 60 MiB segment stays cached
  EXPECT_EQ(r.peak_reserved, 130 * kMiB);
  r = SimulateCachingAllocator(g, 1, 50 * kMiB);
  EXPECT_TRUE(r.out_of_memory);
  EXPECT_EQ(r.peak_reserved, 70 * kMiB);
}

TEST(AllocatorTest, LazyOptimizerStatesTakeTheFirstStepsCachedSegment) {
  // A step that holds a 400 MiB activation, frees it, then steps the optimizer. The optimizer's
  // two 100 MiB states (Adam's exp_avg and exp_avg_sq) exist from the start in the steady state
  // (initial), but PyTorch creates them in the first step(): they are carved out of the cached
  // 400 MiB segment, so the second step's activation needs a new segment.
  StepGraph g;
  g.initial[static_cast<int>(MemSpace::kGpu)][static_cast<int>(MemCategory::kOptimizerStates)] =
      200 * kMiB;
  g.lazy_gpu_states = {{100 * kMiB}, {100 * kMiB}};
  g.Add(Task{}, {}, {Alloc(400 * kMiB, MemCategory::kActivations)});
  g.Add(Task{}, {}, {Free(400 * kMiB, MemCategory::kActivations)});
  Task opt;
  opt.kind = TaskKind::kGpuOptimizer;
  g.Add(opt, {}, {Alloc(2 * kMiB), Free(2 * kMiB)});
  // States allocated up front (dsplan's executor): 200 + 400 MiB, whatever the iterations.
  const AllocatorResult eager = SimulateCachingAllocator(g, 2);
  EXPECT_EQ(eager.peak_reserved, 600 * kMiB);
  // Created in the first step: the first iteration reserves 400 MiB (the states and the
  // optimizer's temporary fit in it); the second needs another 400 MiB segment.
  const AllocatorResult lazy = SimulateCachingAllocator(g, 2, 0, /*lazy_states=*/true);
  EXPECT_EQ(lazy.peak_reserved, 800 * kMiB);
  EXPECT_EQ(lazy.peak_allocated, eager.peak_allocated);
  // One iteration only: the first step, whose lazily created states fit in what it reserved.
  EXPECT_EQ(SimulateCachingAllocator(g, 1, 0, true).peak_reserved, 400 * kMiB);
}

}  // namespace
}  // namespace dsplan

namespace dsplan {
namespace {

TEST(AllocatorTest, ASideStreamsBlockIsNeverReusedByTheDefaultStream) {
  // PyTorch keeps free blocks per stream. A 100 MiB buffer allocated on DeepSpeed's reduction
  // stream and freed, then a 100 MiB request on the default stream: a second segment (200 MiB
  // reserved). The same two requests on one stream reuse the freed block (100 MiB).
  const int64_t mib = int64_t{1} << 20;
  CountingSegmentSource source;
  CachingAllocator a(&source);
  auto side = a.Malloc(100 * mib, 1);
  ASSERT_TRUE(side.ok());
  a.Free(*side);
  auto main = a.Malloc(100 * mib, 0);
  ASSERT_TRUE(main.ok());
  EXPECT_EQ(a.reserved(), 200 * mib);
  // Back on the side stream, its own cached block serves it: no new segment.
  auto again = a.Malloc(100 * mib, 1);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(a.reserved(), 200 * mib);

  CountingSegmentSource source1;
  CachingAllocator one(&source1);
  auto x = one.Malloc(100 * mib, 0);
  ASSERT_TRUE(x.ok());
  one.Free(*x);
  ASSERT_TRUE(one.Malloc(100 * mib, 0).ok());
  EXPECT_EQ(one.reserved(), 100 * mib);
}

TEST(AllocatorTest, GraphEffectsMarkedSideStreamComeFromTheirOwnPool) {
  // The same effects, once with the first buffer on the side stream: 64 MiB more reserved.
  const int64_t mib = int64_t{1} << 20;
  MemEffect side{64 * mib, MemSpace::kGpu, MemCategory::kGradients};
  side.side_stream = true;
  MemEffect plain{64 * mib, MemSpace::kGpu, MemCategory::kGradients};
  const MemEffect free{-64 * mib, MemSpace::kGpu, MemCategory::kGradients};
  const MemEffect act{64 * mib, MemSpace::kGpu, MemCategory::kActivations};
  EXPECT_EQ(Once({plain, free, act}).peak_reserved, 64 * mib);
  EXPECT_EQ(Once({side, free, act}).peak_reserved, 128 * mib);
}

TEST(AllocatorTest, LazyStatesComeWhereTheirTaskCreatesThem) {
  // A 400 MiB activation, freed; then an optimizer task with a 300 MiB temporary, after which
  // the step creates a 300 MiB state (as DeepSpeed's step makes the norm's fp64 copy, then the
  // states). Created after the temporary, the state takes the cached 400 MiB segment once the
  // temporary is gone: 400 MiB reserved in the first iteration; the second one's activation
  // needs a new 400 MiB segment, where the temporary then fits: 800 MiB.
  StepGraph g;
  g.initial[static_cast<int>(MemSpace::kGpu)][static_cast<int>(MemCategory::kOptimizerStates)] =
      300 * kMiB;
  g.Add(Task{}, {}, {Alloc(400 * kMiB, MemCategory::kActivations)});
  g.Add(Task{}, {}, {Free(400 * kMiB, MemCategory::kActivations)});
  Task opt;
  opt.kind = TaskKind::kGpuOptimizer;
  const TaskId step = g.Add(opt, {}, {Alloc(300 * kMiB), Free(300 * kMiB)});
  g.lazy_gpu_states = {{300 * kMiB, step, 2}};
  EXPECT_EQ(SimulateCachingAllocator(g, 2, 0, /*lazy_states=*/true).peak_reserved, 800 * kMiB);
  // Created at the task's start instead, the state leaves 100 MiB of that segment, so the
  // temporary needs its own 300 MiB segment and the second activation another 400: 1100 MiB.
  g.lazy_gpu_states = {{300 * kMiB, step, 0}};
  EXPECT_EQ(SimulateCachingAllocator(g, 2, 0, true).peak_reserved, 1100 * kMiB);
  g.lazy_gpu_states = {{300 * kMiB}};  // no task: the first optimizer task's start, the same
  EXPECT_EQ(SimulateCachingAllocator(g, 2, 0, true).peak_reserved, 1100 * kMiB);
}

}  // namespace
}  // namespace dsplan
