// A model of PyTorch's CUDA caching allocator, to predict max_memory_reserved.
//
// Facts used (PyTorch c10/cuda/CUDACachingAllocator.cpp): requests round up to 512 B; requests
// of at most 1 MiB come from 2 MiB "small" segments, requests up to 10 MiB from 20 MiB
// segments, larger ones from a segment of their own size rounded up to 2 MiB. A request takes
// the best-fitting cached free block of its pool and splits off the remainder; a freed block
// merges with free neighbours in its segment; segments are never returned (no empty_cache in a
// training step). So memory freed as many medium blocks (activations) cannot serve one large
// request later (a flat gradient copy), and reserved grows past allocated.
//
// Blocks here are the StepGraph's memory effects: an allocation effect is one block; a free
// effect releases the most recent live block of the same category and size.
#ifndef DSPLAN_SIMULATOR_ALLOCATOR_H_
#define DSPLAN_SIMULATOR_ALLOCATOR_H_

#include <cstdint>

#include "simulator/step_graph.h"

namespace dsplan {

struct AllocatorResult {
  int64_t peak_allocated = 0;  // of the last iteration
  int64_t peak_reserved = 0;   // over all iterations
  /// A request could not be placed within the capacity even after releasing every cached
  /// segment with nothing allocated in it (what PyTorch does before raising OutOfMemoryError).
  bool out_of_memory = false;
};

/// Replays the GPU effects of |graph| |iterations| times (the first warms the cache, as
/// training's first steps do), starting from the graph's initial GPU state as one block per
/// category. |capacity| > 0: the bytes the allocator may reserve (device memory less the CUDA
/// context); when a new segment would exceed it, empty cached segments are released first.
AllocatorResult SimulateCachingAllocator(const StepGraph& graph, int iterations = 2,
                                         int64_t capacity = 0);

}  // namespace dsplan

#endif  // DSPLAN_SIMULATOR_ALLOCATOR_H_
