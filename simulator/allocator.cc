#include "simulator/allocator.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <vector>

namespace dsplan {
namespace {

constexpr int64_t kRound = 512;
constexpr int64_t kSmallSize = 1 << 20;          // 1 MiB
constexpr int64_t kSmallBuffer = 2 << 20;        // 2 MiB segments for small requests
constexpr int64_t kMinLargeAlloc = 10 << 20;     // 10 MiB
constexpr int64_t kLargeBuffer = 20 << 20;       // 20 MiB segments for medium requests
constexpr int64_t kRoundLarge = 2 << 20;         // large segments round to 2 MiB

int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

struct Block {
  int64_t size;
  bool free;
  int segment;
  int64_t offset;
};

class Allocator {
 public:
  explicit Allocator(int64_t capacity) : capacity_(capacity) {}

  // Returns a block id.
  int Malloc(int64_t request) {
    const int64_t size = std::max<int64_t>(kRound, RoundUp(request, kRound));
    const bool small = size <= kSmallSize;
    // Best fit among free blocks of the same pool.
    int best = -1;
    auto fit = free_[small].lower_bound({size, -1});
    if (fit != free_[small].end()) best = fit->second;
    if (best < 0) {
      int64_t seg = small ? kSmallBuffer
                          : (size < kMinLargeAlloc ? kLargeBuffer : RoundUp(size, kRoundLarge));
      if (capacity_ > 0 && reserved_ + seg > capacity_) {
        // cudaMalloc would fail: PyTorch releases every cached segment with nothing allocated
        // in it and retries; if that is not enough, the allocation raises OutOfMemoryError.
        ReleaseCachedSegments();
        if (reserved_ + seg > capacity_) oom_ = true;
      }
      reserved_ += seg;
      peak_reserved_ = std::max(peak_reserved_, reserved_);
      const int seg_id = static_cast<int>(segments_.size());
      segments_.push_back({});
      best = NewBlock(seg, seg_id, 0, small);
    }
    RemoveFree(best, small);
    Block& b = blocks_[best];
    // Split off the remainder (PyTorch splits small blocks with >= 512 B left, large ones with
    // > 1 MiB left).
    const int64_t rest = b.size - size;
    if ((small && rest >= kRound) || (!small && rest > kSmallSize)) {
      b.size = size;
      NewBlock(rest, blocks_[best].segment, blocks_[best].offset + size, small);
    }
    blocks_[best].free = false;
    allocated_ += blocks_[best].size;
    peak_allocated_ = std::max(peak_allocated_, allocated_);
    return best;
  }

  void FreeBlock(int id) {
    Block& b = blocks_[id];
    allocated_ -= b.size;
    b.free = true;
    const bool small = IsSmall(id);
    // Merge with free neighbours in the segment.
    auto& seg = segments_[b.segment];
    auto it = seg.find(b.offset);
    if (it != seg.begin()) {
      auto prev = std::prev(it);
      if (blocks_[prev->second].free) {
        const int p = prev->second;
        RemoveFree(p, small);
        blocks_[p].size += b.size;
        seg.erase(it);
        b.size = 0;
        id = p;
        it = seg.find(blocks_[p].offset);
      }
    }
    auto next = std::next(it);
    if (next != seg.end() && blocks_[next->second].free) {
      const int nx = next->second;
      RemoveFree(nx, small);
      blocks_[id].size += blocks_[nx].size;
      blocks_[nx].size = 0;
      seg.erase(next);
    }
    free_[small].insert({blocks_[id].size, id});
  }

  void ReleaseCachedSegments() {
    for (size_t sid = 0; sid < segments_.size(); ++sid) {
      auto& seg = segments_[sid];
      if (seg.size() != 1) continue;
      const int id = seg.begin()->second;
      if (!blocks_[id].free) continue;
      RemoveFree(id, IsSmall(id));
      reserved_ -= blocks_[id].size;
      blocks_[id].size = 0;
      seg.clear();
    }
  }

  void ResetPeaks() { peak_allocated_ = allocated_; }
  bool oom() const { return oom_; }
  int64_t peak_allocated() const { return peak_allocated_; }
  int64_t peak_reserved() const { return peak_reserved_; }

 private:
  bool IsSmall(int id) const { return small_[id]; }
  int NewBlock(int64_t size, int seg, int64_t offset, bool small) {
    const int id = static_cast<int>(blocks_.size());
    blocks_.push_back({size, true, seg, offset});
    small_.push_back(small);
    segments_[seg][offset] = id;
    free_[small].insert({size, id});
    return id;
  }
  // REQUIRES: the block's size is the one it was inserted with.
  void RemoveFree(int id, bool small) { free_[small].erase({blocks_[id].size, id}); }

  std::vector<Block> blocks_;
  std::vector<char> small_;
  std::vector<std::map<int64_t, int>> segments_;
  std::set<std::pair<int64_t, int>> free_[2];  // free blocks by (size, id): best fit first
  int64_t capacity_ = 0;
  bool oom_ = false;
  int64_t allocated_ = 0, reserved_ = 0, peak_allocated_ = 0, peak_reserved_ = 0;
};

}  // namespace

AllocatorResult SimulateCachingAllocator(const StepGraph& graph, int iterations,
                                         int64_t capacity) {
  Allocator a(capacity);
  // Initial state: model states as allocated at initialization, one block per category.
  for (int64_t b : graph.initial[static_cast<int>(MemSpace::kGpu)]) {
    if (b > 0) a.Malloc(b);
  }
  // Live blocks by (category, size), most recent last.
  std::map<std::pair<int, int64_t>, std::vector<int>> live;
  for (int it = 0; it < iterations; ++it) {
    if (it == iterations - 1) a.ResetPeaks();
    for (TaskId id = 0; id < graph.size(); ++id) {
      for (int phase = 0; phase < 2; ++phase) {
        for (const MemEffect* e = graph.effects_begin(id); e != graph.effects_end(id); ++e) {
          if (e->space != MemSpace::kGpu || e->at_end != (phase == 1) || e->bytes == 0) continue;
          const auto key = std::make_pair(static_cast<int>(e->category), std::abs(e->bytes));
          if (e->bytes > 0) {
            live[key].push_back(a.Malloc(e->bytes));
          } else {
            auto f = live.find(key);
            if (f != live.end() && !f->second.empty()) {
              a.FreeBlock(f->second.back());
              f->second.pop_back();
              continue;
            }
            // A free that releases several blocks of the category at once (e.g. all parameter
            // gradients at the step): release the category's most recent blocks until covered.
            int64_t left = -e->bytes;
            for (auto k = live.rbegin(); k != live.rend() && left > 0; ++k) {
              if (k->first.first != key.first) continue;
              while (!k->second.empty() && left > 0) {
                a.FreeBlock(k->second.back());
                k->second.pop_back();
                left -= k->first.second;
              }
            }
          }
        }
      }
    }
  }
  AllocatorResult r;
  r.peak_allocated = a.peak_allocated();
  r.peak_reserved = a.peak_reserved();
  r.out_of_memory = a.oom();
  return r;
}

}  // namespace dsplan
