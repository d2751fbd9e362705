// PyTorch's CUDA caching allocator policy, over an abstract segment source, and a replayer of
// StepGraph memory effects through it: the one mechanism behind both the simulator's
// max_memory_reserved (simulator/allocator.h, SimulateCachingAllocator: a counting source that
// allocates nothing) and the CUDA executor's real device memory (runtime/cuda/executor.cc: a
// cudaMalloc/cudaFree source). Tested without a GPU (tests/runtime/device_allocator_test.cc with
// a fake source, tests/simulator/allocator_test.cc through SimulateCachingAllocator).
//
// Policy (c10/cuda/CUDACachingAllocator.cpp, default settings: no max_split_size, no
// expandable segments, no garbage-collection threshold, no roundup_power2_divisions):
//  * requests round up to 512 B;
//  * requests of at most 1 MiB are served from the small pool, whose segments are 2 MiB;
//  * larger requests come from the large pool: a request under 10 MiB gets a 20 MiB segment,
//    a larger one a segment of its own size rounded up to 2 MiB;
//  * a request takes the best-fitting free block of its pool (smallest sufficient; ties go to the
//    older block, PyTorch breaks them by address) and splits off the remainder when it is at
//    least 512 B (small pool) or more than 1 MiB (large pool);
//  * a freed block merges with its free neighbours in the same segment;
//  * when the source cannot supply a segment (or the limit would be exceeded), every cached
//    segment with nothing allocated in it is released and the request retried once; if that
//    fails too, the request reports out-of-memory.
//  * blocks belong to the CUDA stream that allocated them: a free block is reused only by a
//    request on the same stream, and a segment is carved up only for its stream (PyTorch's
//    block pools order blocks by (stream, size, address)). DeepSpeed allocates some buffers on
//    its side streams (with overlap_comm, ZeRO-1/2's grads_in_partition and the flattened
//    buckets under reduction_stream): they get segments of their own that the default stream's
//    requests never reuse (docs/simulator.md, "Reserved memory").
//
// Thread safety: none; one owner (the simulation, or the executor's issuing thread).
#ifndef DSPLAN_SIMULATOR_CACHING_ALLOCATOR_H_
#define DSPLAN_SIMULATOR_CACHING_ALLOCATOR_H_

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "simulator/free_bins.h"
#include "simulator/step_graph.h"

namespace dsplan {

/// Where segments come from: cudaMalloc in the executor, a counter in the simulator and tests.
class SegmentSource {
 public:
  virtual ~SegmentSource() = default;
  /// Reserves |bytes|. On success sets *ptr (non-null). Out of memory: returns OK with
  /// *ptr == nullptr and *oom_message set (the driver's words). Other failures: an error Status.
  virtual Status Allocate(int64_t bytes, void** ptr, std::string* oom_message) = 0;
  /// Gives back a segment returned by Allocate.
  virtual void Release(void* ptr, int64_t bytes) = 0;
};

/// A source that allocates nothing: it hands out distinct fake addresses (never to be
/// dereferenced) and counts the bytes reserved. With |capacity| > 0 a segment past it is refused
/// once, so that the allocator releases its cached segments and retries as PyTorch does; a retry
/// still past it is granted anyway and recorded in overflowed(), so that a simulation runs to the
/// end and reports how far past the capacity the plan would reserve.
class CountingSegmentSource : public SegmentSource {
 public:
  explicit CountingSegmentSource(int64_t capacity = 0) : capacity_(capacity) {}
  Status Allocate(int64_t bytes, void** ptr, std::string* oom_message) override;
  void Release(void* ptr, int64_t bytes) override { reserved_ -= bytes; }
  int64_t reserved() const { return reserved_; }
  bool overflowed() const { return overflowed_; }
  /// Appends what later calls depend on (see CachingAllocator::AppendStateKey).
  void AppendStateKey(std::vector<int64_t>* key) const {
    key->insert(key->end(), {capacity_, reserved_, refused_ ? 1 : 0, overflowed_ ? 1 : 0});
  }

 private:
  int64_t capacity_;
  int64_t reserved_ = 0;
  uintptr_t next_ = uintptr_t{1} << 20;
  bool refused_ = false;  // the last request was refused: this one is the allocator's retry
  bool overflowed_ = false;
};

class CachingAllocator {
 public:
  static constexpr int64_t kRound = 512;
  static constexpr int64_t kSmallSize = int64_t{1} << 20;
  static constexpr int64_t kSmallBuffer = int64_t{2} << 20;
  static constexpr int64_t kMinLargeAlloc = int64_t{10} << 20;
  static constexpr int64_t kLargeBuffer = int64_t{20} << 20;
  static constexpr int64_t kRoundLarge = int64_t{2} << 20;

  /// |limit| > 0: the most bytes the allocator may reserve (a request past it behaves as a
  /// failed cudaMalloc). REQUIRES: |source| outlives the allocator.
  explicit CachingAllocator(SegmentSource* source, int64_t limit = 0);
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  static int64_t RoundSize(int64_t request);
  static int64_t SegmentSize(int64_t rounded);
  /// Whether a request of |size| (rounded) taking a free block of |block| bytes splits the
  /// remainder off: at least 512 B in the small pool, more than 1 MiB in the large one.
  static bool Splits(int64_t size, int64_t block) {
    const int64_t rest = block - size;
    return size <= kSmallSize ? rest >= kRound : rest > kSmallSize;
  }
  /// The bytes that request takes: |size| when the remainder splits off, else the whole block.
  static int64_t Taken(int64_t size, int64_t block) { return Splits(size, block) ? size : block; }
  /// The most a request of |size| (rounded) can take from any block that serves it: a block
  /// whose remainder does not split off is taken whole, and that remainder is under 512 B
  /// (small pool) or at most 1 MiB (large pool).
  static int64_t MostTaken(int64_t size) {
    return size + (size <= kSmallSize ? kRound - 1 : kSmallSize);
  }

  /// A block id >= 0, or -1 when out of memory (oom_message() says why). Errors: the source
  /// failed for a reason other than memory.
  /// |stream|: 0 the default stream, other values other streams (pools are per stream).
  Result<int> Malloc(int64_t request, int stream = 0);
  /// Malloc for a caller that replays many requests: the block id, or -1 when out of memory or
  /// when the source failed (then *error, which must be OK on entry, says why).
  int TryMalloc(int64_t request, int stream, Status* error);
  /// REQUIRES: |block| is allocated.
  void Free(int block);
  /// A request freed again before any other call (a transient tensor): when a cached free
  /// block can serve it, counts its bytes into the peak allocated and returns true, changing
  /// nothing else. TryMalloc followed by Free of that block would leave an equal state (the
  /// block taken and its split remainder merge back into the free block they came from, which
  /// keeps its id), so only the peak remembers it. False when no cached block fits (the request
  /// would reserve a segment): the caller then makes both calls.
  bool TryTransient(int64_t request, int stream);
  /// Two transient requests, the second freed before the first (a task's workspace allocated
  /// while another of its temporaries is live): like TryTransient, the peak allocated with both
  /// blocks taken, when cached blocks serve both (the second one's from the state the first
  /// leaves: the first block taken, its split remainder free with the newest id).
  bool TryTransientNested(int64_t outer, int outer_stream, int64_t inner, int inner_stream);
  /// Releases every segment that is one free block (except kept ones). Returns the bytes
  /// released.
  int64_t ReleaseCachedSegments();
  /// Never releases the segment holding |block| before ReleaseAll (the executor's operand
  /// memory lives in the model-state blocks' segments).
  void KeepSegment(int block) { segments_[blocks_[block].segment].keep = true; }
  /// Frees every block and releases every segment (after an OOM, at the end of a run).
  void ReleaseAll();
  /// ReleaseAll, then starts over as a new allocator over |source| would (peaks zero), keeping
  /// the memory of its tables (a simulation reuses one allocator per thread).
  /// REQUIRES: |source| outlives the allocator's use of it.
  void Reset(SegmentSource* source, int64_t limit = 0);

  void* Ptr(int block) const;
  int64_t BlockSize(int block) const { return blocks_[block].size; }
  int BlockStream(int block) const { return blocks_[block].stream; }

  int64_t allocated() const { return allocated_; }
  int64_t reserved() const { return reserved_; }
  int64_t peak_allocated() const { return peak_allocated_; }
  int64_t peak_reserved() const { return peak_reserved_; }
  int segments() const;
  /// Peaks restart from the current values (torch.cuda.reset_peak_memory_stats).
  void ResetPeaks();
  /// Appends a description of the state to |key|: two allocators with equal keys answer every
  /// later sequence of calls the same way, block for block (blocks and segments are numbered
  /// in id order, since only their order decides ties). |number| receives each block id's
  /// number in the key (-1: not a live block). Peaks are not part of it.
  void AppendStateKey(std::vector<int64_t>* key, std::vector<int>* number) const;
  const std::string& oom_message() const { return oom_message_; }

 private:
  struct Block {
    int64_t size = 0;
    int64_t offset = 0;  // from the segment's base
    bool free = true;
    bool small = false;
    int stream = 0;
    int segment = -1;
    int prev = -1, next = -1;  // neighbours in the segment, address order
    int pool = -1;             // index in pools_ (its stream's small or large pool)
    FreeBins::Where free_at;   // where its pool's free bins hold it; bin -1 when not there
  };
  struct Segment {
    void* base = nullptr;
    int64_t bytes = 0;
    int head = -1;  // first block; -1 once released
    bool keep = false;
  };

  int NewBlock(int64_t size, int64_t offset, int seg, int pool, int prev, int next);
  void Absorb(int a, int b);
  // The free blocks of each pool (small or large, per stream) in size bins (simulator/
  // free_bins.h), each block knowing its bin and position (Block::free_at): inserting and
  // removing are O(1) (the replay does both for nearly every memory effect), and Malloc's
  // best-fit query looks at the request's own bin and the next non-empty one, giving the block
  // an ordered set's lower_bound would give.
  struct Pool {
    int stream = 0;
    bool small = false;
    FreeBins free;
  };
  // The pool of (small, stream): its index in pools_, -1 when there is none yet (FindPool), or
  // a new one (PoolOf). A replay has two to four pools.
  int FindPool(bool small, int stream) const {
    if (stream == 0 || stream == 1) return pool_index_[stream][small ? 1 : 0];
    for (size_t i = 0; i < pools_.size(); ++i) {
      if (pools_[i].stream == stream && pools_[i].small == small) return static_cast<int>(i);
    }
    return -1;
  }
  int PoolOf(bool small, int stream) {
    const int p = FindPool(small, stream);
    if (p >= 0) return p;
    pools_.push_back({stream, small, {}});
    const int made = static_cast<int>(pools_.size()) - 1;
    if (stream == 0 || stream == 1) pool_index_[stream][small ? 1 : 0] = made;
    return made;
  }
  // Inlined into Free and NewBlock (the replay files a block nearly every effect; as a call,
  // with FreeBins::Insert's, it cost about 0.5 us of a t5-3b simulation).
  [[gnu::always_inline]] void InsertFree(int id) {
    Block& b = blocks_[id];
    b.free_at = pools_[b.pool].free.Insert(b.size, id);
  }
  void RemoveFree(int id) {
    Block& b = blocks_[id];
    if (b.free_at.bin < 0) return;
    const int moved = pools_[b.pool].free.Remove(b.free_at);
    if (moved >= 0) blocks_[moved].free_at.pos = b.free_at.pos;
    b.free_at = {};
  }
  SegmentSource* source_;
  int64_t limit_;
  std::vector<Block> blocks_;
  std::vector<Segment> segments_;
  std::vector<Pool> pools_;  // a block is reused only by its own stream
  // FindPool's answer for the default stream and the side stream (0, 1), [stream][small].
  int pool_index_[2][2] = {{-1, -1}, {-1, -1}};
  int64_t allocated_ = 0, reserved_ = 0, peak_allocated_ = 0, peak_reserved_ = 0;
  std::string oom_message_;
};

/// Applies a StepGraph's GPU memory effects to a CachingAllocator in program order, so that
/// its allocated bytes follow the memory timeline (simulator/scheduler.h ComputeMemory) up to
/// rounding: an allocation is one block; a free releases the most recent live block of its
/// category with exactly its size, else the category's most recent blocks until the bytes are
/// covered, a larger block being freed and its remainder allocated again (the builder allocates
/// some tensors as one effect and frees them in pieces: the LM head's saved input and logits),
/// and what no live block covers comes out of the category's initial block the same way.
///
/// SimulateCachingAllocator (simulator/allocator.h) replays graphs with it, so the simulator's
/// reserved memory and the executor's come from the same code.
class EffectReplayer {
 public:
  explicit EffectReplayer(CachingAllocator* allocator) : a_(allocator) {}
  /// The graph's initial GPU state, one block per category, less |deferred_states| bytes of
  /// the optimizer-state category (tensors the caller allocates later). Returns -1 on OOM.
  Result<int> AllocateInitial(const StepGraph& graph, int64_t deferred_states = 0);
  /// Applies one GPU effect. For an allocation: the new block id (or -1 on OOM); for a free:
  /// -2. Non-GPU effects are ignored (returns -2).
  Result<int> Apply(const MemEffect& e);
  /// Apply without the Result (the simulator's replay): the same answer, and -1 with *error
  /// set (OK on entry) when the allocator failed for a reason other than memory.
  int TryApply(const MemEffect& e, Status* error);
  /// TryApply(alloc) then TryApply(free) for a transient pair (IsTransientPair): the same
  /// state and peaks, without touching the allocator's tables when a cached block can serve
  /// the allocation (CachingAllocator::TryTransient).
  void TryApplyTransient(const MemEffect& alloc, const MemEffect& free, Status* error);
  /// Apply of alloc, TryApplyTransient(inner_alloc, inner_free), Apply of free for a nested
  /// transient group (four effects of one task: an allocation, a transient pair, the free of
  /// the first allocation), without touching the tables when cached blocks serve both
  /// (CachingAllocator::TryTransientNested).
  void TryApplyTransientNested(const MemEffect& alloc, const MemEffect& inner_alloc,
                               const MemEffect& inner_free, const MemEffect& free,
                               Status* error);
  /// Whether |free|, applied right after |alloc|, frees the block |alloc| allocated: both on
  /// the GPU, the same category, an allocation and the free of exactly its bytes (the replay's
  /// rule 1 then picks that block, the category's most recent).
  static bool IsTransientPair(const MemEffect& alloc, const MemEffect& free) {
    return alloc.space == MemSpace::kGpu && free.space == MemSpace::kGpu && alloc.bytes > 0 &&
           free.bytes == -alloc.bytes && alloc.category == free.category;
  }
  /// Forgets every live block (after ReleaseAll).
  void Clear() {
    for (auto& l : live_) l.clear();
  }
  /// The block ids of the initial state, by category (-1 where none or freed), as allocated
  /// (AllocateInitial's; later frees of initial bytes do not change this list).
  const std::vector<int>& initial_blocks() const { return first_initial_; }
  /// The state of the allocator and of the replay as a key: equal keys replay every later
  /// effect the same way (a compact graph's repeated block is replayed until its copies come
  /// back to a state seen before).
  std::vector<int64_t> StateKey() const;

 private:
  CachingAllocator* a_;
  std::vector<int> initial_;  // live initial block per category, -1 when none
  std::vector<int> first_initial_;
  // Live blocks per category as (bytes requested, block), in allocation order.
  std::array<std::vector<std::pair<int64_t, int>>, kNumMemCategories> live_;
};

}  // namespace dsplan

#endif  // DSPLAN_SIMULATOR_CACHING_ALLOCATOR_H_
