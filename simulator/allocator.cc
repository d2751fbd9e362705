#include "simulator/allocator.h"

#include <algorithm>

#include "simulator/caching_allocator.h"

namespace dsplan {

AllocatorResult SimulateCachingAllocator(const StepGraph& graph, int iterations,
                                         int64_t capacity) {
  CountingSegmentSource source(capacity);
  CachingAllocator a(&source);
  EffectReplayer replay(&a);
  AllocatorResult r;
  // A counting source never fails for a reason other than memory, and grants a segment past the
  // capacity on the allocator's retry (recording the overflow), so neither call returns an
  // error or -1.
  (void)replay.AllocateInitial(graph);
  int64_t peak_reserved = 0;
  for (int it = 0; it < iterations; ++it) {
    if (it == iterations - 1) {
      peak_reserved = a.peak_reserved();
      a.ResetPeaks();
    }
    for (TaskId id = 0; id < graph.size(); ++id) {
      const MemEffect* begin = graph.effects_begin(id);
      const MemEffect* end = graph.effects_end(id);
      for (int phase = 0; phase < 2; ++phase) {
        for (const MemEffect* e = begin; e != end; ++e) {
          if (e->space != MemSpace::kGpu || e->at_end != (phase == 1) || e->bytes == 0) continue;
          (void)replay.Apply(*e);
        }
      }
    }
  }
  r.peak_allocated = a.peak_allocated();
  r.peak_reserved = std::max(peak_reserved, a.peak_reserved());
  r.out_of_memory = source.overflowed();
  return r;
}

}  // namespace dsplan
