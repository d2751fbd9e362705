// The simulator's prediction of max_memory_reserved: the StepGraph's GPU memory effects
// replayed through PyTorch's caching-allocator policy (simulator/caching_allocator.h, the same
// CachingAllocator and EffectReplayer the CUDA executor allocates its device memory with) over a
// segment source that only counts bytes.
//
// Why reserved exceeds allocated: requests of at most 1 MiB come from 2 MiB segments, up to
// 10 MiB from 20 MiB segments, larger ones from a segment of their own size; a request takes the
// best-fitting cached free block of its pool and splits off the remainder; segments are never
// returned (no empty_cache in a training step). So memory freed as many medium blocks
// (activations) cannot serve one large request later (a flat gradient copy).
//
// Blocks are the StepGraph's memory effects: an allocation effect is one block; a free releases
// the most recent live block of its category and size, else the category's most recent blocks
// (splitting the last one) and then its initial block, so allocated follows the memory
// timeline (EffectReplayer).
#ifndef DSPLAN_SIMULATOR_ALLOCATOR_H_
#define DSPLAN_SIMULATOR_ALLOCATOR_H_

#include <cstdint>

#include "simulator/scheduler.h"
#include "simulator/step_graph.h"

namespace dsplan {

struct AllocatorResult {
  int64_t peak_allocated = 0;  // of the last iteration
  int64_t peak_reserved = 0;   // over all iterations
  /// A request could not be placed within the capacity even after releasing every cached
  /// segment with nothing allocated in it (what PyTorch does before raising OutOfMemoryError).
  bool out_of_memory = false;
  /// Copies of a compact graph's repeated block replayed, over all iterations (the rest were
  /// skipped as repeats of a cycle).
  int64_t copies_replayed = 0;
  /// The largest activation or temporary allocation of the last iteration that the replay did
  /// not serve with a new segment (it came from cached memory, or, inside a nested transient
  /// group that reserved, could have): the block whose place reality might not find.
  int64_t largest_cached_transient = 0;
};

/// A segment the replay reserved: in which iteration (0 is the first step, which warms the
/// cache), during which task (and which copy of a compact graph's repeated block), its bytes,
/// the reserved total after it, and whether one of Adam's lazily created states asked for it.
/// To set beside a real run's allocator trace (DSBENCH_MEMHIST, tools/dev/alloc_trace_replay):
/// where the two sequences part is where a reserved-memory miss comes from.
struct ReplaySegment {
  int iteration = 0;
  TaskId task = -1;
  int64_t copy = 0;
  int64_t bytes = 0;
  int64_t reserved_after = 0;
  bool lazy_state = false;
};

/// Replays the GPU effects of |graph| |iterations| times (the first warms the cache, as
/// training's first steps do), starting from the graph's initial GPU state as one block per
/// category. |capacity| > 0: the bytes the allocator may reserve (device memory less the CUDA
/// context); when a new segment would exceed it, empty cached segments are released first, and
/// if it still would, out_of_memory is set and the replay goes on past the capacity.
/// A compact graph (StepGraph::repeat) is replayed as the graph it stands for: its repeated
/// block copy after copy until the allocator and the replay return to a state they were in
/// after an earlier copy (EffectReplayer::StateKey); the copies then cycle, so the remaining
/// ones are skipped but for the cycle's remainder. Every copy frees what it allocates, so the
/// state cycles after a few copies.
/// |lazy_states|: the optimizer states of StepGraph::lazy_gpu_states are created at the first
/// optimizer task of the first iteration, as PyTorch's optimizers do, instead of with the
/// initial state (as dsplan's executor allocates them).
/// |gpu_order|: the graph's GPU effects in replay order, as ComputeMemory gives them (the
/// simulation has walked the graph once already); null: gathered here the same way.
/// |segments|: if not null, receives every growth of the reserved memory, in order.
AllocatorResult SimulateCachingAllocator(const StepGraph& graph, int iterations = 2,
                                         int64_t capacity = 0, bool lazy_states = false,
                                         const GpuEffectOrder* gpu_order = nullptr,
                                         std::vector<ReplaySegment>* segments = nullptr);

}  // namespace dsplan

#endif  // DSPLAN_SIMULATOR_ALLOCATOR_H_
