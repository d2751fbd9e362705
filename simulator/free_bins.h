// The free blocks of one caching-allocator pool (one stream, small or large), indexed for the
// best-fit query the allocator makes on every request: the smallest free block of at least
// |size| bytes, ties to the lower id (PyTorch's block pools are ordered by (size, address); dsplan
// numbers blocks in creation order, so the lower id is the older block).
//
// Layout: size classes ("bins") in the manner of a two-level segregated fit. A block of u units
// of 512 B goes to bin u when u < 64 (one bin per size up to 32 KiB), else to the bin of its
// power of two and the next 4 bits below it (16 bins per doubling, each covering 1/16 of it).
// Bins are ordered: every size in bin b is smaller than every size in bin b + 1. A bitmap says
// which bins hold a block. Each bin is an unordered vector of (bytes, id) with O(1) insert and
// remove (swap with the last); the caller keeps each block's (bin, position) and is told which
// block moved on a remove.
//
// BestFit scans the request's own bin for the smallest sufficient (bytes, id) (a bin holds
// sizes within 1/16 of each other, few blocks); when none is there, the next non-empty bin (a
// bitmap scan) holds only larger sizes, and its smallest (bytes, id) is the answer. So the
// answer is exactly the one a scan of every free block, or an ordered set's lower_bound, gives.
//
// Thread safety: none (one allocator owns it).
#ifndef DSPLAN_SIMULATOR_FREE_BINS_H_
#define DSPLAN_SIMULATOR_FREE_BINS_H_

#include <array>
#include <bit>
#include <cstddef>
#include <climits>
#include <cstdint>
#include <utility>
#include <vector>

namespace dsplan {

class FreeBins {
 public:
  static constexpr int kUnitShift = 9;  // 512 B
  static constexpr int kExactBins = 64;
  static constexpr int kSubBits = 4;
  static constexpr int kSubBins = 1 << kSubBits;
  // Units up to 2^63 / 512 = 2^54: top bit index at most 54.
  static constexpr int kBins = kExactBins + (54 - 6 + 1) * kSubBins;
  static constexpr int kWords = (kBins + 63) / 64;

  /// Where an entry is: its bin and its index in that bin.
  struct Where {
    int bin = -1;
    int pos = -1;
  };

  /// The bin of a block of |bytes| (> 0). Non-decreasing in |bytes|.
  static int BinOf(int64_t bytes) {
    const uint64_t u = static_cast<uint64_t>(bytes) >> kUnitShift;
    if (u < static_cast<uint64_t>(kExactBins)) return static_cast<int>(u);
    const int top = 63 - std::countl_zero(u);  // >= 6
    const int sub = static_cast<int>((u >> (top - kSubBits)) & (kSubBins - 1));
    return kExactBins + (top - 6) * kSubBins + sub;
  }

  /// Files (bytes, id); returns where. Always inlined (the caching allocator's hot path).
  [[gnu::always_inline]] Where Insert(int64_t bytes, int id) {
    const int b = BinOf(bytes);
    if (b >= static_cast<int>(bins_.size())) bins_.resize(static_cast<std::size_t>(b) + 1);
    auto& bin = bins_[static_cast<std::size_t>(b)];
    if (bin.empty()) used_[static_cast<std::size_t>(b) >> 6] |= uint64_t{1} << (b & 63);
    bin.push_back({bytes, id});
    ++count_;
    return {b, static_cast<int>(bin.size()) - 1};
  }

  /// Removes the entry at |w|. Returns the id of the entry that moved into w.pos (the bin's
  /// last one), whose position is now w.pos; -1 when none moved.
  int Remove(Where w) {
    auto& bin = bins_[static_cast<std::size_t>(w.bin)];
    int moved = -1;
    const std::size_t last = bin.size() - 1;
    if (static_cast<std::size_t>(w.pos) != last) {
      bin[static_cast<std::size_t>(w.pos)] = bin[last];
      moved = bin[static_cast<std::size_t>(w.pos)].second;
    }
    bin.pop_back();
    if (bin.empty()) used_[static_cast<std::size_t>(w.bin) >> 6] &= ~(uint64_t{1} << (w.bin & 63));
    --count_;
    return moved;
  }

  /// The id of the smallest entry of at least |size| bytes, ties to the lower id; -1 when none.
  /// |except| >= 0: as if that entry were not there (the caching allocator asks what a second
  /// request would get once a first one took that block).
  int BestFit(int64_t size, int except = -1) const {
    if (count_ == 0) return -1;
    const int b = BinOf(size);
    if (b < static_cast<int>(bins_.size())) {
      int best = INT_MAX;
      int64_t best_bytes = INT64_MAX;
      for (const auto& [bytes, id] : bins_[static_cast<std::size_t>(b)]) {
        if (bytes >= size && (bytes < best_bytes || (bytes == best_bytes && id < best)) &&
            id != except) {
          best = id;
          best_bytes = bytes;
        }
      }
      if (best != INT_MAX) return best;
    }
    // Every size in a later bin exceeds every size in bin b: the next non-empty bin's smallest
    // (the one after, when that bin holds only |except|).
    for (int next = NextUsed(b + 1); next >= 0; next = NextUsed(next + 1)) {
      int best = INT_MAX;
      int64_t best_bytes = INT64_MAX;
      for (const auto& [bytes, id] : bins_[static_cast<std::size_t>(next)]) {
        if ((bytes < best_bytes || (bytes == best_bytes && id < best)) && id != except) {
          best = id;
          best_bytes = bytes;
        }
      }
      if (best != INT_MAX) return best;
    }
    return -1;
  }

  /// Whether BestFit(size, except) would find an entry, answered without looking for the
  /// smallest one: the first sufficient entry of the request's bin, or any of a later bin.
  bool AnyFit(int64_t size, int except = -1) const {
    if (count_ == 0) return false;
    const int b = BinOf(size);
    if (b < static_cast<int>(bins_.size())) {
      for (const auto& [bytes, id] : bins_[static_cast<std::size_t>(b)]) {
        if (bytes >= size && id != except) return true;
      }
    }
    for (int next = NextUsed(b + 1); next >= 0; next = NextUsed(next + 1)) {
      const auto& bin = bins_[static_cast<std::size_t>(next)];
      if (bin.size() > 1 || bin[0].second != except) return true;
    }
    return false;
  }

  int size() const { return count_; }
  void Clear() {
    // Only the non-empty bins (the bitmap's): a pool has hundreds of bins, a few in use.
    for (int b = NextUsed(0); b >= 0; b = NextUsed(b + 1)) {
      bins_[static_cast<std::size_t>(b)].clear();
    }
    used_.fill(0);
    count_ = 0;
  }

 private:
  // The first non-empty bin at or after |from|; -1 when none.
  int NextUsed(int from) const {
    if (from >= kBins) return -1;
    std::size_t w = static_cast<std::size_t>(from) >> 6;
    uint64_t bits = used_[w] & (~uint64_t{0} << (from & 63));
    while (bits == 0) {
      if (++w == used_.size()) return -1;
      bits = used_[w];
    }
    return static_cast<int>(w * 64) + std::countr_zero(bits);
  }

  std::array<uint64_t, kWords> used_{};
  std::vector<std::vector<std::pair<int64_t, int>>> bins_;
  int count_ = 0;
};

}  // namespace dsplan

#endif  // DSPLAN_SIMULATOR_FREE_BINS_H_
