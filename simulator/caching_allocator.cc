#include "simulator/caching_allocator.h"

#include <algorithm>
#include <cstdlib>

#include <fmt/format.h>

namespace dsplan {

Status CountingSegmentSource::Allocate(int64_t bytes, void** ptr, std::string* oom_message) {
  if (capacity_ > 0 && reserved_ + bytes > capacity_) {
    if (!refused_) {
      refused_ = true;
      *ptr = nullptr;
      *oom_message = "the simulated capacity would be exceeded";
      return Status();
    }
    overflowed_ = true;
  }
  refused_ = false;
  reserved_ += bytes;
  *ptr = reinterpret_cast<void*>(next_);
  next_ += static_cast<uintptr_t>(bytes);
  return Status();
}

CachingAllocator::CachingAllocator(SegmentSource* source, int64_t limit)
    : source_(source), limit_(limit) {
  blocks_.reserve(1024);
}

CachingAllocator::~CachingAllocator() { ReleaseAll(); }

int64_t CachingAllocator::RoundSize(int64_t request) {
  // (request + 511) rounded down to a multiple of 512, as (request + 511) / 512 * 512 for any
  // request > -512 (requests below 512 B come out as 512 B either way).
  return std::max<int64_t>(kRound, (request + kRound - 1) & ~(kRound - 1));
}

int64_t CachingAllocator::SegmentSize(int64_t size) {
  if (size <= kSmallSize) return kSmallBuffer;
  if (size < kMinLargeAlloc) return kLargeBuffer;
  return (size + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

int CachingAllocator::NewBlock(int64_t size, int64_t offset, int seg, int pool, int prev,
                               int next) {
  const int id = static_cast<int>(blocks_.size());
  Block b;
  b.size = size;
  b.offset = offset;
  b.segment = seg;
  b.small = pools_[pool].small;
  b.stream = pools_[pool].stream;
  b.prev = prev;
  b.next = next;
  b.pool = pool;
  blocks_.push_back(b);
  InsertFree(id);
  return id;
}

void CachingAllocator::Absorb(int a, int b) {
  blocks_[a].size += blocks_[b].size;
  blocks_[a].next = blocks_[b].next;
  if (blocks_[b].next >= 0) blocks_[blocks_[b].next].prev = a;
  blocks_[b].size = 0;
  blocks_[b].segment = -1;
}

Result<int> CachingAllocator::Malloc(int64_t request, int stream) {
  Status error;
  const int b = TryMalloc(request, stream, &error);
  if (!error.ok()) return error;
  return b;
}

int CachingAllocator::TryMalloc(int64_t request, int stream, Status* error) {
  const int64_t size = RoundSize(request);
  const bool small = size <= kSmallSize;
  int pool = FindPool(small, stream);
  int best = pool < 0 ? -1 : pools_[pool].free.BestFit(size);
  if (best < 0) {
    const int64_t seg_bytes = SegmentSize(size);
    void* base = nullptr;
    std::string why;
    for (int attempt = 0; attempt < 2 && base == nullptr; ++attempt) {
      if (attempt == 1) ReleaseCachedSegments();
      if (limit_ > 0 && reserved_ + seg_bytes > limit_) {
        why = fmt::format("the allocator's limit of {} bytes would be exceeded", limit_);
        continue;
      }
      Status allocated = source_->Allocate(seg_bytes, &base, &why);
      if (!allocated.ok()) {
        *error = std::move(allocated);
        return -1;
      }
    }
    if (base == nullptr) {
      oom_message_ = fmt::format(
          "tried to allocate {} bytes (a {}-byte segment); {} allocated, {} reserved: {}", request,
          seg_bytes, allocated_, reserved_, why);
      return -1;
    }
    reserved_ += seg_bytes;
    peak_reserved_ = std::max(peak_reserved_, reserved_);
    const int seg_id = static_cast<int>(segments_.size());
    if (pool < 0) pool = PoolOf(small, stream);
    best = NewBlock(seg_bytes, 0, seg_id, pool, -1, -1);
    segments_.push_back({base, seg_bytes, best});
  }
  RemoveFree(best);
  const int64_t rest = blocks_[best].size - size;
  if (Splits(size, blocks_[best].size)) {
    blocks_[best].size = size;
    const int r =
        NewBlock(rest, blocks_[best].offset + size, blocks_[best].segment, pool, best,
                 blocks_[best].next);
    if (blocks_[r].next >= 0) blocks_[blocks_[r].next].prev = r;
    blocks_[best].next = r;
  }
  blocks_[best].free = false;
  allocated_ += blocks_[best].size;
  peak_allocated_ = std::max(peak_allocated_, allocated_);
  return best;
}

bool CachingAllocator::TryTransient(int64_t request, int stream) {
  const int64_t size = RoundSize(request);
  const bool small = size <= kSmallSize;
  const int pool = FindPool(small, stream);
  if (pool < 0) return false;
  const FreeBins& free = pools_[pool].free;
  // Below the peak by more than the request could take, only whether a block serves it
  // matters (which one does not: the peak stays).
  if (allocated_ + MostTaken(size) <= peak_allocated_) return free.AnyFit(size);
  const int best = free.BestFit(size);
  if (best < 0) return false;
  peak_allocated_ = std::max(peak_allocated_, allocated_ + Taken(size, blocks_[best].size));
  return true;
}

bool CachingAllocator::TryTransientNested(int64_t outer, int outer_stream, int64_t inner,
                                          int inner_stream) {
  const int64_t size1 = RoundSize(outer);
  const int pool1 = FindPool(size1 <= kSmallSize, outer_stream);
  const int64_t size2 = RoundSize(inner);
  const int pool2 = FindPool(size2 <= kSmallSize, inner_stream);
  if (pool1 < 0 || pool2 < 0) return false;
  // Below the peak by more than both requests could take, only whether blocks serve them
  // matters; from another pool, the second request's answer does not depend on the first's.
  const bool below_peak = allocated_ + MostTaken(size1) + MostTaken(size2) <= peak_allocated_;
  if (below_peak && pool2 != pool1) {
    return pools_[pool1].free.AnyFit(size1) && pools_[pool2].free.AnyFit(size2);
  }
  const int best1 = pools_[pool1].free.BestFit(size1);
  if (best1 < 0) return false;
  const int64_t taken1 = Taken(size1, blocks_[best1].size);
  const int64_t rest1 = blocks_[best1].size - taken1;  // split off as a free block when > 0
  // The second request sees best1 taken and its remainder free; the remainder's id would be
  // the newest, so it loses ties.
  const int except = pool2 == pool1 ? best1 : -1;
  if (below_peak) {
    return (pool2 == pool1 && rest1 >= size2) || pools_[pool2].free.AnyFit(size2, except);
  }
  const int best2 = pools_[pool2].free.BestFit(size2, except);
  int64_t block2 = best2 < 0 ? -1 : blocks_[best2].size;
  if (pool2 == pool1 && rest1 >= size2 && (block2 < 0 || rest1 < block2)) block2 = rest1;
  if (block2 < 0) return false;
  // Freeing the second then the first merges every piece back: the state is as before.
  peak_allocated_ = std::max(peak_allocated_, allocated_ + taken1 + Taken(size2, block2));
  return true;
}

void CachingAllocator::Free(int id) {
  allocated_ -= blocks_[id].size;
  blocks_[id].free = true;
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
  InsertFree(id);
}

int64_t CachingAllocator::ReleaseCachedSegments() {
  int64_t released = 0;
  for (Segment& s : segments_) {
    if (s.head < 0) continue;
    const Block& b = blocks_[s.head];
    if (!b.free || b.next >= 0 || s.keep) continue;
    RemoveFree(s.head);
    source_->Release(s.base, s.bytes);
    reserved_ -= s.bytes;
    released += s.bytes;
    s.head = -1;
    s.base = nullptr;
  }
  return released;
}

void CachingAllocator::ReleaseAll() {
  for (Segment& s : segments_) {
    if (s.head < 0) continue;
    source_->Release(s.base, s.bytes);
    s.head = -1;
    s.base = nullptr;
  }
  segments_.clear();
  blocks_.clear();
  for (Pool& p : pools_) p.free.Clear();  // kept, empty: their bins keep their capacity
  allocated_ = reserved_ = 0;
}

void CachingAllocator::Reset(SegmentSource* source, int64_t limit) {
  ReleaseAll();
  source_ = source;
  limit_ = limit;
  peak_allocated_ = peak_reserved_ = 0;
  oom_message_.clear();
}

void* CachingAllocator::Ptr(int block) const {
  const Block& b = blocks_[block];
  return static_cast<char*>(segments_[b.segment].base) + b.offset;
}

int CachingAllocator::segments() const {
  int n = 0;
  for (const Segment& s : segments_) n += s.head >= 0;
  return n;
}

void CachingAllocator::ResetPeaks() {
  peak_allocated_ = allocated_;
  peak_reserved_ = reserved_;
}

void CachingAllocator::AppendStateKey(std::vector<int64_t>* key,
                                      std::vector<int>* number) const {
  std::vector<int> seg_number(segments_.size(), -1);
  int segs = 0;
  key->insert(key->end(), {limit_, allocated_, reserved_});
  for (size_t i = 0; i < segments_.size(); ++i) {
    if (segments_[i].head < 0) continue;
    seg_number[i] = segs++;
  }
  number->assign(blocks_.size(), -1);
  int live = 0;
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const Block& b = blocks_[i];
    if (b.segment < 0 || seg_number[b.segment] < 0) continue;
    (*number)[i] = live++;
  }
  for (size_t i = 0; i < segments_.size(); ++i) {
    if (seg_number[i] < 0) continue;
    const Segment& sg = segments_[i];
    key->insert(key->end(), {-1, sg.bytes, sg.keep ? 1 : 0, (*number)[sg.head]});
  }
  for (size_t i = 0; i < blocks_.size(); ++i) {
    if ((*number)[i] < 0) continue;
    const Block& b = blocks_[i];
    key->insert(key->end(), {-2, seg_number[b.segment], b.offset, b.size, b.free ? 1 : 0,
                             b.small ? 1 : 0, b.stream, b.prev < 0 ? -1 : (*number)[b.prev],
                             b.next < 0 ? -1 : (*number)[b.next]});
  }
}

std::vector<int64_t> EffectReplayer::StateKey() const {
  std::vector<int64_t> key;
  std::vector<int> number;
  a_->AppendStateKey(&key, &number);
  auto num = [&number](int block) -> int64_t {
    return block < 0 || block >= static_cast<int>(number.size()) ? -1 : number[block];
  };
  for (int b : initial_) key.push_back(num(b));
  for (const auto& cat : live_) {
    key.push_back(-3);
    for (const auto& [bytes, block] : cat) key.insert(key.end(), {bytes, num(block)});
  }
  return key;
}

Result<int> EffectReplayer::AllocateInitial(const StepGraph& graph, int64_t deferred_states) {
  initial_.assign(kNumMemCategories, -1);
  const CategoryBytes& init = graph.initial[static_cast<int>(MemSpace::kGpu)];
  for (int c = 0; c < kNumMemCategories; ++c) {
    const int64_t bytes =
        init[c] - (c == static_cast<int>(MemCategory::kOptimizerStates) ? deferred_states : 0);
    if (bytes <= 0) continue;
    DSPLAN_ASSIGN_OR_RETURN(int b, a_->Malloc(bytes));
    if (b < 0) return -1;
    initial_[c] = b;
  }
  first_initial_ = initial_;
  return 0;
}

Result<int> EffectReplayer::Apply(const MemEffect& e) {
  Status error;
  const int b = TryApply(e, &error);
  if (!error.ok()) return error;
  return b;
}

void EffectReplayer::TryApplyTransient(const MemEffect& alloc, const MemEffect& free,
                                       Status* error) {
  if (a_->TryTransient(alloc.bytes, alloc.side_stream ? 1 : 0)) return;
  (void)TryApply(alloc, error);
  if (!error->ok()) return;
  (void)TryApply(free, error);
}

void EffectReplayer::TryApplyTransientNested(const MemEffect& alloc,
                                             const MemEffect& inner_alloc,
                                             const MemEffect& inner_free, const MemEffect& free,
                                             Status* error) {
  if (a_->TryTransientNested(alloc.bytes, alloc.side_stream ? 1 : 0, inner_alloc.bytes,
                             inner_alloc.side_stream ? 1 : 0)) {
    return;
  }
  (void)TryApply(alloc, error);
  if (!error->ok()) return;
  TryApplyTransient(inner_alloc, inner_free, error);
  if (!error->ok()) return;
  (void)TryApply(free, error);
}

int EffectReplayer::TryApply(const MemEffect& e, Status* error) {
  if (e.space != MemSpace::kGpu || e.bytes == 0) return -2;
  std::vector<std::pair<int64_t, int>>& live = live_[static_cast<size_t>(e.category)];
  if (e.bytes > 0) {
    const int b = a_->TryMalloc(e.bytes, e.side_stream ? 1 : 0, error);
    if (!error->ok()) return -1;
    if (b >= 0) live.push_back({e.bytes, b});
    return b;
  }
  int64_t left = -e.bytes;
  // 1. The most recent live block of exactly this size (one tensor freed).
  for (size_t i = live.size(); i-- > 0;) {
    if (live[i].first == left) {
      a_->Free(live[i].second);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
      return -2;
    }
  }
  // 2. Otherwise the category's most recent blocks until the bytes are covered (a free of many
  // tensors at once; or part of a block the builder allocated as one but frees in pieces, as
  // the LM head's saved input and its logits): a block larger than what is left is freed and its
  // remainder allocated again, so that allocated bytes follow the memory timeline exactly.
  while (left > 0 && !live.empty()) {
    auto [size, block] = live.back();
    live.pop_back();
    const int stream = a_->BlockStream(block);
    a_->Free(block);
    if (size > left) {
      const int b = a_->TryMalloc(size - left, stream, error);
      if (!error->ok() || b < 0) return -1;
      live.push_back({size - left, b});
    }
    left -= size;
  }
  // 3. What no live block covered comes out of the category's initial block, likewise.
  if (left <= 0 || initial_.empty() || initial_[static_cast<int>(e.category)] < 0) return -2;
  int& init = initial_[static_cast<int>(e.category)];
  const int64_t rest = a_->BlockSize(init) - left;
  a_->Free(init);
  init = -1;
  if (rest > 0) {
    const int b = a_->TryMalloc(rest, 0, error);
    if (!error->ok() || b < 0) return -1;
    init = b;
  }
  return -2;
}

}  // namespace dsplan
