// FreeBins (simulator/free_bins.h), the caching allocator's per-pool index of free blocks: the
// size classes are ordered, and BestFit gives exactly what a scan of every free block gives (the
// smallest sufficient size, ties to the lower id; also with one entry left out) through inserts
// and removes; and the allocator built on it picks the best-fitting block, keeps streams apart
// and re-files merged blocks. AnyFit answers whether BestFit finds an entry.
#include "simulator/free_bins.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "simulator/caching_allocator.h"

namespace dsplan {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

TEST(FreeBinsTest, BinsAreOrderedBySize) {
  // Every 512-byte size up to 64 MiB, then powers of two and their neighbours to 2^62: the bin
  // never decreases, stays in range, and sizes below 32 KiB each have their own bin.
  int prev = -1;
  for (int64_t s = 512; s <= 64 * kMiB; s += 512) {
    const int b = FreeBins::BinOf(s);
    ASSERT_GE(b, prev) << s;
    ASSERT_LT(b, FreeBins::kBins) << s;
    if (s < 64 * 512) {
      EXPECT_EQ(b, s / 512);
    }
    prev = b;
  }
  for (int k = 27; k < 63; ++k) {
    const int64_t p = int64_t{1} << k;
    for (int64_t s : {p - 512, p, p + 512}) {
      const int b = FreeBins::BinOf(s);
      ASSERT_GE(b, prev) << s;
      ASSERT_LT(b, FreeBins::kBins) << s;
      prev = b;
    }
  }
  EXPECT_LT(FreeBins::BinOf(INT64_MAX), FreeBins::kBins);
  // 16 bins per doubling: 1 MiB and 1 MiB + 64 KiB apart, 1 MiB and 1 MiB + 512 B together.
  EXPECT_EQ(FreeBins::BinOf(kMiB + 64 * 1024), FreeBins::BinOf(kMiB) + 1);
  EXPECT_EQ(FreeBins::BinOf(kMiB + 512), FreeBins::BinOf(kMiB));
}

TEST(FreeBinsTest, BestFitIsTheSmallestSufficientThenTheLowerId) {
  FreeBins f;
  EXPECT_EQ(f.BestFit(512), -1);
  // Three sizes in the bin of 1 MiB (its bin covers 1 MiB to 1 MiB + 64 KiB).
  f.Insert(kMiB + 8192, 7);
  f.Insert(kMiB + 4096, 9);
  f.Insert(kMiB + 4096, 3);  // same size, lower id, inserted later
  f.Insert(kMiB, 1);
  f.Insert(8 * kMiB, 2);
  EXPECT_EQ(f.BestFit(kMiB), 1);
  EXPECT_EQ(f.BestFit(kMiB + 512), 3);
  EXPECT_EQ(f.BestFit(kMiB + 4096), 3);
  EXPECT_EQ(f.BestFit(kMiB + 4608), 7);
  // The request's bin holds only smaller blocks: the next non-empty bin answers.
  EXPECT_EQ(f.BestFit(kMiB + 8704), 2);
  EXPECT_EQ(f.BestFit(8 * kMiB), 2);
  EXPECT_EQ(f.BestFit(8 * kMiB + 512), -1);
  EXPECT_EQ(f.BestFit(512), 1);
  EXPECT_EQ(f.size(), 5);
}

TEST(FreeBinsTest, RemoveReportsTheMovedEntry) {
  FreeBins f;
  const FreeBins::Where a = f.Insert(4 * kMiB, 10);
  const FreeBins::Where b = f.Insert(4 * kMiB, 11);
  const FreeBins::Where c = f.Insert(4 * kMiB, 12);
  ASSERT_EQ(a.bin, b.bin);
  ASSERT_EQ(b.bin, c.bin);
  EXPECT_EQ(f.Remove(a), 12);  // the last entry moved into a's place
  EXPECT_EQ(f.BestFit(4 * kMiB), 11);
  EXPECT_EQ(f.Remove({c.bin, b.pos}), -1);  // 11 was last: nothing moves
  EXPECT_EQ(f.BestFit(4 * kMiB), 12);
  EXPECT_EQ(f.Remove({c.bin, a.pos}), -1);
  EXPECT_EQ(f.BestFit(512), -1);
  EXPECT_EQ(f.size(), 0);
}

// A live entry of the random walks below: its size, id and where FreeBins keeps it.
struct Entry {
  int64_t bytes;
  int id;
  FreeBins::Where at;
};

TEST(FreeBinsTest, MatchesAFullScanThroughRandomInsertsAndRemoves) {
  // The reference: the smallest (bytes, id) of at least the request over every entry.
  std::mt19937_64 rng(15);
  FreeBins f;
  std::vector<Entry> live;
  std::vector<int> index_of(20000, -1);  // id -> index in live
  auto random_size = [&rng]() -> int64_t {
    switch (rng() % 4) {
      case 0: return static_cast<int64_t>(1 + rng() % 64) * 512;                 // exact bins
      case 1: return static_cast<int64_t>(1 + rng() % 4096) * 512;               // to 2 MiB
      case 2: return static_cast<int64_t>(1 + rng() % 40) * 2 * kMiB;            // segments
      default: return static_cast<int64_t>(1 + rng() % (int64_t{1} << 24)) * 512;  // to 8 GiB
    }
  };
  int next_id = 0;
  for (int step = 0; step < 20000; ++step) {
    if (live.empty() || rng() % 3 != 0) {
      // Sometimes a duplicate size, so that ties are exercised.
      const int64_t bytes = !live.empty() && rng() % 4 == 0 ? live[rng() % live.size()].bytes
                                                            : random_size();
      const int id = next_id++;
      index_of[static_cast<size_t>(id)] = static_cast<int>(live.size());
      live.push_back({bytes, id, f.Insert(bytes, id)});
    } else {
      const size_t k = rng() % live.size();
      const int moved = f.Remove(live[k].at);
      if (moved >= 0) {
        // The moved entry now sits where the removed one was.
        Entry& m = live[static_cast<size_t>(index_of[static_cast<size_t>(moved)])];
        ASSERT_EQ(m.at.bin, live[k].at.bin);
        m.at.pos = live[k].at.pos;
      }
      index_of[static_cast<size_t>(live[k].id)] = -1;
      live[k] = live.back();
      live.pop_back();
      if (k < live.size()) index_of[static_cast<size_t>(live[k].id)] = static_cast<int>(k);
    }
    ASSERT_EQ(f.size(), static_cast<int>(live.size()));
    for (int q = 0; q < 4; ++q) {
      const int64_t want = q == 0 && !live.empty() ? live[rng() % live.size()].bytes
                                                   : random_size();
      int best = -1;
      int64_t best_bytes = 0;
      for (const Entry& e : live) {
        if (e.bytes < want) continue;
        if (best < 0 || e.bytes < best_bytes || (e.bytes == best_bytes && e.id < best)) {
          best = e.id;
          best_bytes = e.bytes;
        }
      }
      ASSERT_EQ(f.BestFit(want), best) << "step " << step << " request " << want;
      // Without one entry (the best one, or another): the reference without it.
      if (live.empty()) continue;
      const int except = q % 2 == 0 && best >= 0 ? best : live[rng() % live.size()].id;
      int best_except = -1;
      best_bytes = 0;
      for (const Entry& e : live) {
        if (e.bytes < want || e.id == except) continue;
        if (best_except < 0 || e.bytes < best_bytes ||
            (e.bytes == best_bytes && e.id < best_except)) {
          best_except = e.id;
          best_bytes = e.bytes;
        }
      }
      ASSERT_EQ(f.BestFit(want, except), best_except)
          << "step " << step << " request " << want << " except " << except;
    }
  }
}

TEST(FreeBinsTest, AllocatorTakesTheBestFittingCachedBlock) {
  // Four blocks of their own segments (>= 10 MiB each), freed: 24 MiB takes the 26 MiB block
  // allocated first, the next 24 MiB the other 26 MiB one, 26 MiB the 30 MiB one; nothing new
  // is reserved.
  CountingSegmentSource source;
  CachingAllocator a(&source);
  std::vector<int> ids;
  for (int64_t mib : {30, 26, 26, 40}) {
    auto b = a.Malloc(mib * kMiB);
    ASSERT_TRUE(b.ok());
    ids.push_back(*b);
  }
  const int64_t reserved = a.reserved();
  std::vector<void*> ptr;
  for (int id : ids) ptr.push_back(a.Ptr(id));
  for (int id : {ids[3], ids[2], ids[0], ids[1]}) a.Free(id);
  auto x = a.Malloc(24 * kMiB);
  auto y = a.Malloc(24 * kMiB);
  auto z = a.Malloc(26 * kMiB);
  ASSERT_TRUE(x.ok() && y.ok() && z.ok());
  EXPECT_EQ(a.Ptr(*x), ptr[1]);
  EXPECT_EQ(a.Ptr(*y), ptr[2]);
  EXPECT_EQ(a.Ptr(*z), ptr[0]);
  EXPECT_EQ(a.reserved(), reserved);
  // The same on a side stream reuses none of the default stream's blocks.
  auto side = a.Malloc(40 * kMiB, 1);
  ASSERT_TRUE(side.ok());
  EXPECT_NE(a.Ptr(*side), ptr[3]);
  EXPECT_EQ(a.reserved(), reserved + 40 * kMiB);
}

TEST(FreeBinsTest, AMergedBlockIsFiledUnderItsNewSize) {
  // 2, 3 and 4 MiB from one 20 MiB segment; freeing the first two merges them into 5 MiB at the
  // segment's start, which then serves a 5 MiB request with no new segment, where neither
  // piece alone could.
  CountingSegmentSource source;
  CachingAllocator a(&source);
  auto p = a.Malloc(2 * kMiB);
  auto q = a.Malloc(3 * kMiB);
  auto r = a.Malloc(4 * kMiB);
  ASSERT_TRUE(p.ok() && q.ok() && r.ok());
  EXPECT_EQ(a.reserved(), 20 * kMiB);
  void* start = a.Ptr(*p);
  a.Free(*q);
  a.Free(*p);
  // The tail of the segment (11 MiB) is larger; best fit takes the merged 5 MiB.
  auto m = a.Malloc(5 * kMiB);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(a.Ptr(*m), start);
  EXPECT_EQ(a.reserved(), 20 * kMiB);
}

TEST(FreeBinsTest, AnyFitIsWhetherBestFitFindsOne) {
  // AnyFit (the allocator's transient queries below the peak) answers BestFit(...) >= 0, with
  // and without an entry left out, through random inserts and removes.
  std::mt19937_64 rng(151);
  FreeBins f;
  std::vector<Entry> live;
  auto random_size = [&rng]() -> int64_t {
    return rng() % 2 == 0 ? static_cast<int64_t>(1 + rng() % 4096) * 512
                          : static_cast<int64_t>(1 + rng() % 40) * 2 * kMiB;
  };
  for (int step = 0; step < 5000; ++step) {
    if (live.empty() || rng() % 3 != 0) {
      const int64_t bytes = !live.empty() && rng() % 4 == 0 ? live[rng() % live.size()].bytes
                                                            : random_size();
      const int id = step;
      live.push_back({bytes, id, f.Insert(bytes, id)});
    } else {
      const size_t k = rng() % live.size();
      const int moved = f.Remove(live[k].at);
      for (Entry& e : live) {
        if (e.id == moved) e.at.pos = live[k].at.pos;
      }
      live[k] = live.back();
      live.pop_back();
    }
    for (int q = 0; q < 4; ++q) {
      const int64_t want = q == 0 && !live.empty() ? live[rng() % live.size()].bytes
                                                   : random_size();
      ASSERT_EQ(f.AnyFit(want), f.BestFit(want) >= 0) << "step " << step << " request " << want;
      const int except = live.empty() ? -1
                         : q % 2 == 0 ? f.BestFit(want)
                                      : live[rng() % live.size()].id;
      ASSERT_EQ(f.AnyFit(want, except), f.BestFit(want, except) >= 0)
          << "step " << step << " request " << want << " except " << except;
    }
  }
}

}  // namespace
}  // namespace dsplan
