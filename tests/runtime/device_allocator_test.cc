// The caching allocator policy the CUDA executor allocates with and the simulator predicts
// reserved memory with (simulator/caching_allocator.h), with a fake segment source: rounding and
// pools, split and merge, fragmentation, release-on-OOM, the replay of StepGraphs against the
// memory timeline, and SimulateCachingAllocator (simulator/allocator.h) giving the same peaks.
#include "simulator/caching_allocator.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>

#include "core/model_catalog.h"
#include "simulator/allocator.h"
#include "simulator/scheduler.h"
#include "simulator/step_builder.h"
#include "simulator/workload.h"

namespace dsplan {
namespace {

constexpr int64_t MiB = int64_t{1} << 20;

// Hands out fake addresses; fails (as an out-of-memory cudaMalloc) past |capacity|.
class FakeSource : public SegmentSource {
 public:
  explicit FakeSource(int64_t capacity = 0) : capacity_(capacity) {}
  Status Allocate(int64_t bytes, void** ptr, std::string* oom) override {
    ++calls;
    if (capacity_ > 0 && live + bytes > capacity_) {
      *ptr = nullptr;
      *oom = "out of memory (fake)";
      return Status();
    }
    next_ += bytes + 4096;
    *ptr = reinterpret_cast<void*>(next_);
    segs_[next_] = bytes;
    live += bytes;
    return Status();
  }
  void Release(void* ptr, int64_t bytes) override {
    auto it = segs_.find(reinterpret_cast<uintptr_t>(ptr));
    ASSERT_NE(it, segs_.end());
    ASSERT_EQ(it->second, bytes);
    segs_.erase(it);
    live -= bytes;
    ++releases;
  }
  int64_t live = 0;
  int calls = 0, releases = 0;

 private:
  int64_t capacity_;
  uintptr_t next_ = 1 << 20;
  std::map<uintptr_t, int64_t> segs_;
};

int Ok(Result<int> r) {
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : -3;
}

TEST(DeviceAllocator, RoundingAndSegmentSizes) {
  EXPECT_EQ(CachingAllocator::RoundSize(1), 512);
  EXPECT_EQ(CachingAllocator::RoundSize(513), 1024);
  EXPECT_EQ(CachingAllocator::SegmentSize(MiB), 2 * MiB);
  EXPECT_EQ(CachingAllocator::SegmentSize(MiB + 512), 20 * MiB);
  EXPECT_EQ(CachingAllocator::SegmentSize(10 * MiB - 512), 20 * MiB);
  EXPECT_EQ(CachingAllocator::SegmentSize(10 * MiB), 10 * MiB);
  EXPECT_EQ(CachingAllocator::SegmentSize(11 * MiB + 1), 12 * MiB);
}

TEST(DeviceAllocator, SmallPoolPacksOneSegment) {
  FakeSource src;
  CachingAllocator a(&src);
  for (int i = 0; i < 2048; ++i) ASSERT_GE(Ok(a.Malloc(1000)), 0);
  EXPECT_EQ(a.reserved(), 2 * MiB);
  EXPECT_EQ(a.allocated(), 2048 * 1024);
  ASSERT_GE(Ok(a.Malloc(1)), 0);  // the segment is full: a second one
  EXPECT_EQ(a.reserved(), 4 * MiB);
  // Addresses are distinct and inside their segment.
  EXPECT_NE(a.Ptr(0), a.Ptr(1));
}

TEST(DeviceAllocator, SplitAndMergeInOneSegment) {
  FakeSource src;
  CachingAllocator a(&src);
  int big = Ok(a.Malloc(30 * MiB));
  a.Free(big);
  int x = Ok(a.Malloc(10 * MiB));  // best fit: the cached 30 MiB block, split 10 + 20
  int y = Ok(a.Malloc(20 * MiB));  // the 20 MiB remainder
  EXPECT_EQ(a.reserved(), 30 * MiB);
  EXPECT_EQ(static_cast<char*>(a.Ptr(y)) - static_cast<char*>(a.Ptr(x)), 10 * MiB);
  a.Free(x);
  a.Free(y);  // merges back into one 30 MiB block
  EXPECT_EQ(a.segments(), 1);
  EXPECT_EQ(a.ReleaseCachedSegments(), 30 * MiB);
  EXPECT_EQ(a.reserved(), 0);
  EXPECT_EQ(src.live, 0);
}

TEST(DeviceAllocator, LargeRemainderOfOneMiBIsNotSplit) {
  FakeSource src;
  CachingAllocator a(&src);
  int b = Ok(a.Malloc(12 * MiB));
  a.Free(b);
  int c = Ok(a.Malloc(11 * MiB));  // 1 MiB left: not more than 1 MiB, so the block is whole
  EXPECT_EQ(a.BlockSize(c), 12 * MiB);
  EXPECT_EQ(a.allocated(), 12 * MiB);
}

TEST(DeviceAllocator, FragmentationGrowsReserved) {
  // Four 12 MiB tensors, every other one freed: 24 MiB are free but in two segments, so a
  // 24 MiB request needs a new segment (what activations freed in backward do to a flat copy).
  FakeSource src;
  CachingAllocator a(&src);
  int b[4];
  for (int& x : b) x = Ok(a.Malloc(12 * MiB));
  a.Free(b[0]);
  a.Free(b[2]);
  EXPECT_EQ(a.allocated(), 24 * MiB);
  ASSERT_GE(Ok(a.Malloc(24 * MiB)), 0);
  EXPECT_EQ(a.reserved(), 72 * MiB);
  EXPECT_EQ(a.allocated(), 48 * MiB);
  // Medium requests come from 20 MiB segments, which the freed 12 MiB blocks can serve.
  ASSERT_GE(Ok(a.Malloc(5 * MiB)), 0);
  EXPECT_EQ(a.reserved(), 72 * MiB);
}

TEST(DeviceAllocator, ReleasesCachedSegmentsBeforeReportingOom) {
  FakeSource src(100 * MiB);
  CachingAllocator a(&src);
  int x = Ok(a.Malloc(60 * MiB));
  a.Free(x);  // cached
  int y = Ok(a.Malloc(70 * MiB));  // 60 + 70 > 100: the cached segment goes, then it fits
  ASSERT_GE(y, 0);
  EXPECT_EQ(src.releases, 1);
  EXPECT_EQ(a.reserved(), 70 * MiB);
  EXPECT_EQ(Ok(a.Malloc(40 * MiB)), -1);  // nothing cached to release: out of memory
  EXPECT_NE(a.oom_message().find("out of memory (fake)"), std::string::npos);
  EXPECT_EQ(a.allocated(), 70 * MiB);
  // Still usable afterwards, and everything goes back.
  ASSERT_GE(Ok(a.Malloc(20 * MiB)), 0);
  a.ReleaseAll();
  EXPECT_EQ(src.live, 0);
}

TEST(DeviceAllocator, LimitActsAsCapacity) {
  FakeSource src;
  CachingAllocator a(&src, 50 * MiB);
  ASSERT_GE(Ok(a.Malloc(40 * MiB)), 0);
  EXPECT_EQ(Ok(a.Malloc(12 * MiB)), -1);
  EXPECT_NE(a.oom_message().find("limit"), std::string::npos);
}

struct Replayed {
  int64_t peak_allocated = 0;  // of the second iteration
  int64_t peak_reserved = 0;   // over both
};

// Replays |graph| twice through the runtime allocator with a fake source.
Replayed Replay(const StepGraph& g) {
  FakeSource src;
  CachingAllocator a(&src);
  EffectReplayer r(&a);
  EXPECT_EQ(Ok(r.AllocateInitial(g)), 0);
  int64_t peak_reserved = 0;
  for (int it = 0; it < 2; ++it) {
    if (it == 1) {
      peak_reserved = a.peak_reserved();
      a.ResetPeaks();
    }
    for (TaskId id = 0; id < g.size(); ++id) {
      for (int phase = 0; phase < 2; ++phase) {
        for (const MemEffect* e = g.effects_begin(id); e != g.effects_end(id); ++e) {
          if (e->at_end != (phase == 1)) continue;
          EXPECT_NE(Ok(r.Apply(*e)), -1);
        }
      }
    }
  }
  EXPECT_EQ(a.reserved(), src.live);
  return {a.peak_allocated(), std::max(peak_reserved, a.peak_reserved())};
}

TEST(DeviceAllocator, FreeOfInitialBytesComesOutOfTheInitialBlock) {
  StepGraph g;
  g.initial[static_cast<int>(MemSpace::kGpu)][static_cast<int>(MemCategory::kGradients)] =
      60 * MiB;
  Task t;
  MemEffect f;
  f.bytes = -20 * MiB;
  f.category = MemCategory::kGradients;
  g.Add(t, {}, {f});
  FakeSource src;
  CachingAllocator a(&src);
  EffectReplayer r(&a);
  ASSERT_EQ(Ok(r.AllocateInitial(g)), 0);
  ASSERT_EQ(Ok(r.Apply(*g.effects_begin(0))), -2);
  EXPECT_EQ(a.allocated(), 40 * MiB);
  EXPECT_EQ(a.reserved(), 60 * MiB);
  // The simulator replays the same way: the second iteration frees another 20 MiB of it, so its
  // peak allocated is the 40 MiB it starts with.
  EXPECT_EQ(SimulateCachingAllocator(g, 2).peak_allocated, 40 * MiB);
}

// The replay's peak allocated is the memory timeline's (up to 512-byte rounding and unsplit
// remainders, < 1 %), for every stage, and SimulateCachingAllocator (the simulator's reserved
// memory) gives exactly the replay's peaks.
TEST(DeviceAllocator, ReplayMatchesTimeline) {
  auto spec = LoadModel("gpt2", DSPLAN_TEST_DATA_DIR);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  for (bool gc : {false, true}) {
    RunShape o;
    o.micro_batch = 4;
    o.seq_len = 512;
    o.gradient_checkpointing = gc;
    auto w = BuildWorkload(*spec, o);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    for (int stage : {0, 1, 2, 3}) {
      for (bool offload : {false, true}) {
        if (stage == 0 && offload) continue;
        Plan p;
        p.gpus_per_node = stage == 0 ? 1 : 4;
        p.micro_batch = 4;
        p.grad_accum = 2;
        p.precision = Precision::kBf16;
        p.optimizer = OptimizerType::kAdamW;
        p.zero.stage = stage;
        p.seq_len = 512;
        p.gradient_checkpointing = gc;
        if (offload) p.zero.offload_optimizer.device = OffloadDevice::kCpu;
        const int64_t threshold = stage == 3 ? p.zero.stage3_param_persistence_threshold : 0;
        auto built = BuildStepGraph(*w, ComputeLayerParams(*w, threshold), p, 64 * MiB);
        ASSERT_TRUE(built.ok()) << built.status().ToString();
        const StepGraph& g = built->graph;
        const std::string what = fmt::format("stage {} offload {} gc {}", stage, offload, gc);
        const Replayed mine = Replay(g);
        const AllocatorResult sim = SimulateCachingAllocator(g, 2);
        const int64_t timeline = ComputeMemory(g).peak[static_cast<int>(MemSpace::kGpu)].bytes;
        EXPECT_GE(mine.peak_allocated, timeline) << what;
        EXPECT_LE(mine.peak_allocated, timeline + timeline / 100) << what;
        EXPECT_GE(mine.peak_reserved, mine.peak_allocated) << what;
        EXPECT_EQ(sim.peak_allocated, mine.peak_allocated) << what;
        EXPECT_EQ(sim.peak_reserved, mine.peak_reserved) << what;
        EXPECT_FALSE(sim.out_of_memory) << what;
      }
    }
  }
}

}  // namespace
}  // namespace dsplan
