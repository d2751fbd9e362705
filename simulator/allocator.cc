#include "simulator/allocator.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <unordered_map>
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
  bool small;
  int segment;
  int prev;  // neighbours in the segment (address order), -1 at the ends
  int next;
};

class Allocator {
 public:
  explicit Allocator(int64_t capacity) : capacity_(capacity) { blocks_.reserve(1024); }

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
      const int seg_id = static_cast<int>(segment_head_.size());
      best = NewBlock(seg, seg_id, small, -1, -1);
      segment_head_.push_back(best);
    }
    RemoveFree(best);
    // Split off the remainder (PyTorch splits small blocks with >= 512 B left, large ones with
    // > 1 MiB left).
    const int64_t rest = blocks_[best].size - size;
    if ((small && rest >= kRound) || (!small && rest > kSmallSize)) {
      blocks_[best].size = size;
      const int r = NewBlock(rest, blocks_[best].segment, small, best, blocks_[best].next);
      if (blocks_[r].next >= 0) blocks_[blocks_[r].next].prev = r;
      blocks_[best].next = r;
    }
    blocks_[best].free = false;
    allocated_ += blocks_[best].size;
    peak_allocated_ = std::max(peak_allocated_, allocated_);
    return best;
  }

  void FreeBlock(int id) {
    allocated_ -= blocks_[id].size;
    blocks_[id].free = true;
    // Merge with free neighbours in the segment.
    const int p = blocks_[id].prev;
    if (p >= 0 && blocks_[p].free) {
      RemoveFree(p);
      Absorb(p, id);
      id = p;
    }
    const int n = blocks_[id].next;
    if (n >= 0 && blocks_[n].free) {
      RemoveFree(n);
      Absorb(id, n);
    }
    free_[blocks_[id].small].insert({blocks_[id].size, id});
  }

  void ReleaseCachedSegments() {
    for (int& head : segment_head_) {
      if (head < 0) continue;
      const Block& b = blocks_[head];
      if (!b.free || b.next >= 0) continue;
      RemoveFree(head);
      reserved_ -= b.size;
      head = -1;
    }
  }

  void ResetPeaks() { peak_allocated_ = allocated_; }
  bool oom() const { return oom_; }
  int64_t peak_allocated() const { return peak_allocated_; }
  int64_t peak_reserved() const { return peak_reserved_; }

 private:
  int NewBlock(int64_t size, int seg, bool small, int prev, int next) {
    const int id = static_cast<int>(blocks_.size());
    blocks_.push_back({size, true, small, seg, prev, next});
    free_[small].insert({size, id});
    return id;
  }
  // Block |b| (right after |a|) merges into |a|.
  void Absorb(int a, int b) {
    blocks_[a].size += blocks_[b].size;
    blocks_[a].next = blocks_[b].next;
    if (blocks_[b].next >= 0) blocks_[blocks_[b].next].prev = a;
    if (segment_head_[blocks_[b].segment] == b) segment_head_[blocks_[b].segment] = a;
    blocks_[b].size = 0;
  }
  // REQUIRES: the block's size is the one it was inserted with.
  void RemoveFree(int id) { free_[blocks_[id].small].erase({blocks_[id].size, id}); }

  std::vector<Block> blocks_;
  std::vector<int> segment_head_;  // first block of each segment, -1 once released
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
  struct KeyHash {
    size_t operator()(const std::pair<int, int64_t>& k) const {
      return std::hash<int64_t>()(k.second * 31 + k.first);
    }
  };
  std::unordered_map<std::pair<int, int64_t>, std::vector<int>, KeyHash> live;
  live.reserve(256);
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
            // Largest blocks first, as the ordered walk over sizes did.
            int64_t left = -e->bytes;
            std::vector<std::pair<int64_t, std::vector<int>*>> same;
            for (auto& [k, v] : live) {
              if (k.first == key.first && !v.empty()) same.push_back({k.second, &v});
            }
            std::sort(same.begin(), same.end(),
                      [](const auto& x, const auto& y) { return x.first > y.first; });
            for (auto& [size, v] : same) {
              while (!v->empty() && left > 0) {
                a.FreeBlock(v->back());
                v->pop_back();
                left -= size;
              }
              if (left <= 0) break;
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
