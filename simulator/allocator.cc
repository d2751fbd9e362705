#include "simulator/allocator.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "simulator/caching_allocator.h"

namespace dsplan {

AllocatorResult SimulateCachingAllocator(const StepGraph& graph, int iterations, int64_t capacity,
                                         bool lazy_states, const GpuEffectOrder* gpu_order,
                                         std::vector<ReplaySegment>* segments) {
  CountingSegmentSource source(capacity);
  // One allocator, replayer and effect list per thread, reset for each call: a search replays
  // thousands of graphs, and building them afresh each time was a good part of the replay's
  // heap traffic. Reset leaves them as new ones would be.
  struct Scratch {
    CountingSegmentSource none;
    CachingAllocator allocator{&none};
    EffectReplayer replay{&allocator};
    GpuEffectOrder order;
    std::vector<uint8_t> role;
  };
  thread_local Scratch scratch;
  CachingAllocator& a = scratch.allocator;
  a.Reset(&source);
  EffectReplayer& replay = scratch.replay;
  replay.Clear();
  // Whatever happens below, the allocator lets go of |source| before it goes out of scope.
  struct ReleaseAtEnd {
    CachingAllocator* a;
    ~ReleaseAtEnd() { a->Reset(nullptr); }
  } release_at_end{&a};
  AllocatorResult r;
  // A counting source never fails for a reason other than memory, and grants a segment past the
  // capacity on the allocator's retry (recording the overflow), so neither call returns an
  // error or -1.
  // The optimizer's lazily created state tensors (StepGraph::lazy_gpu_states) are not there
  // when the first step starts: they are allocated inside the optimizer tasks of the first
  // iteration, from whatever the step's activations and the step's own temporaries left
  // cached, and stay.
  int64_t lazy_bytes = 0;
  if (lazy_states) {
    for (const StepGraph::LazyState& l : graph.lazy_gpu_states) lazy_bytes += l.bytes;
  }
  const int64_t initial_states = graph.initial[static_cast<int>(MemSpace::kGpu)]
                                              [static_cast<int>(MemCategory::kOptimizerStates)];
  if (lazy_bytes > initial_states) lazy_bytes = 0;  // not a split of the initial states
  bool lazy_pending = lazy_bytes > 0;
  (void)replay.AllocateInitial(graph, lazy_bytes);
  // Each task's GPU effects in replay order (those at its start, then those at its end),
  // gathered once (by the memory timeline's walk): the replay walks every task at least
  // |iterations| times. Transient effects within one task are replayed as queries (role[k]):
  // an allocation the next effect frees (a temporary, a collective's flat copy;
  // EffectReplayer::TryApplyTransient), and such a pair inside an allocation that the effect
  // after it frees (a backward's two workspaces; TryApplyTransientNested).
  if (gpu_order == nullptr) {
    (void)ComputeMemory(graph, false, &scratch.order);
    gpu_order = &scratch.order;
  }
  const std::vector<MemEffect>& gpu = gpu_order->effects;
  const std::vector<int>& first = gpu_order->first;
  // Where each lazy state is created: its task and the index, in |gpu|, of the effect it
  // comes before. A state without a task comes at the start of the first optimizer task.
  struct LazyAt {
    TaskId task;
    size_t at;
    int64_t bytes;
  };
  std::vector<LazyAt> lazy_at;
  if (lazy_pending) {
    TaskId first_optimizer = -1;
    for (TaskId id = 0; id < graph.size(); ++id) {
      if (graph.task(id).kind == TaskKind::kGpuOptimizer) {
        first_optimizer = id;
        break;
      }
    }
    for (const StepGraph::LazyState& l : graph.lazy_gpu_states) {
      const bool own = l.task >= 0 && l.task < graph.size();
      const TaskId t = own ? l.task : first_optimizer;
      if (t < 0) continue;  // no optimizer task: never created (nor are they in the peak)
      const size_t b = static_cast<size_t>(first[static_cast<size_t>(t)]);
      const size_t e = static_cast<size_t>(first[static_cast<size_t>(t) + 1]);
      lazy_at.push_back({t, own ? std::min(b + static_cast<size_t>(std::max(0, l.after)), e) : b,
                         l.bytes});
    }
    std::stable_sort(lazy_at.begin(), lazy_at.end(),
                     [](const LazyAt& x, const LazyAt& y) { return x.at < y.at; });
  }
  // No transient pair or nested group is formed across a point where lazy states come in.
  std::vector<uint8_t> split;
  if (!lazy_at.empty()) {
    split.assign(gpu.size() + 1, 0);
    for (const LazyAt& l : lazy_at) split[l.at] = 1;
  }
  auto split_at = [&](size_t n) { return !split.empty() && split[n] != 0; };
  enum Role : uint8_t { kPlain, kPairFirst, kNestedFirst, kInGroup };
  std::vector<uint8_t>& role = scratch.role;
  role.assign(gpu.size(), kPlain);
  for (TaskId id = 0; id < graph.size(); ++id) {
    const size_t task_first = static_cast<size_t>(first[static_cast<size_t>(id)]);
    const size_t task_end = static_cast<size_t>(first[static_cast<size_t>(id) + 1]);
    for (size_t n = task_first + 1; n < task_end; ++n) {
      if (role[n - 1] == kPlain && !split_at(n) &&
          EffectReplayer::IsTransientPair(gpu[n - 1], gpu[n])) {
        role[n - 1] = kPairFirst;
        role[n] = kInGroup;
      } else if (n >= task_first + 3 && role[n - 3] == kPlain && role[n - 2] == kPairFirst &&
                 !split_at(n - 2) && !split_at(n - 1) && !split_at(n) &&
                 EffectReplayer::IsTransientPair(gpu[n - 3], gpu[n])) {
        role[n - 3] = kNestedFirst;
        role[n - 2] = kInGroup;
        role[n] = kInGroup;
      }
    }
  }
  Status never;  // a counting source fails only for memory, which is not an error
  // In the last iteration: the largest step transient served without a new segment.
  bool track = false;
  auto transient = [](const MemEffect& e) {
    return e.space == MemSpace::kGpu && e.bytes > 0 &&
           (e.category == MemCategory::kActivations || e.category == MemCategory::kTemporaries);
  };
  auto note = [&](const MemEffect& e, bool cached) {
    if (cached && transient(e))
      r.largest_cached_transient = std::max(r.largest_cached_transient, e.bytes);
  };
  // Where the replay is, for |segments|.
  int iteration = 0;
  int64_t copy = 0;
  auto log_growth = [&](int64_t before, TaskId task, bool lazy_state) {
    if (segments == nullptr || a.reserved() <= before) return;
    segments->push_back({iteration, task, copy, a.reserved() - before, a.reserved(), lazy_state});
  };
  auto task_of = [&](size_t effect) {
    return static_cast<TaskId>(
        std::upper_bound(first.begin(), first.end(), static_cast<int>(effect)) - first.begin() - 1);
  };
  auto run = [&](size_t from, size_t to) {
    for (size_t k = from; k < to; ++k) {
      const int64_t before = track || segments != nullptr ? a.reserved() : 0;
      const size_t effect = k;  // the group's first: the cases below move k past the group
      switch (role[k]) {
        case kPairFirst:
          replay.TryApplyTransient(gpu[k], gpu[k + 1], &never);
          if (track) note(gpu[k], a.reserved() <= before);
          k += 1;
          break;
        case kNestedFirst:
          replay.TryApplyTransientNested(gpu[k], gpu[k + 1], gpu[k + 2], gpu[k + 3], &never);
          if (track) {
            note(gpu[k], true);
            note(gpu[k + 1], true);
          }
          k += 3;
          break;
        default:
          (void)replay.TryApply(gpu[k], &never);
          if (track) note(gpu[k], a.reserved() <= before);
          break;
      }
      if (segments != nullptr) log_growth(before, task_of(effect), false);
    }
  };
  // Tasks [t0, t1): their effects in order, the lazy states created where they come the first
  // time their task does.
  size_t next_lazy = 0;
  auto apply = [&](TaskId t0, TaskId t1) {
    size_t from = static_cast<size_t>(first[static_cast<size_t>(t0)]);
    const size_t to = static_cast<size_t>(first[static_cast<size_t>(t1)]);
    while (lazy_pending && next_lazy < lazy_at.size() && lazy_at[next_lazy].task >= t0 &&
           lazy_at[next_lazy].task < t1) {
      const size_t at = lazy_at[next_lazy].at;
      run(from, at);
      from = at;
      const int64_t before = a.reserved();
      (void)a.Malloc(lazy_at[next_lazy].bytes);
      log_growth(before, lazy_at[next_lazy].task, true);
      lazy_pending = ++next_lazy < lazy_at.size();
    }
    run(from, to);
  };
  auto key = [&] {
    std::vector<int64_t> k = replay.StateKey();
    source.AppendStateKey(&k);
    return k;
  };
  const RepeatedBlock& rep = graph.repeat;
  const bool compact = rep.active() && graph.CheckRepeat().ok();
  int64_t peak_reserved = 0;
  for (int it = 0; it < iterations; ++it) {
    iteration = it;
    copy = 0;
    if (it == iterations - 1) {
      peak_reserved = a.peak_reserved();
      a.ResetPeaks();
      track = true;
    }
    if (!compact) {
      apply(0, graph.size());
      continue;
    }
    apply(0, rep.begin);
    // The repeated block, copy after copy until the allocator comes back to a state it was in
    // after an earlier copy: from there the copies cycle, every state and peak repeating, so
    // only the copies that bring the cycle to where the last copy leaves it are replayed.
    std::vector<std::vector<int64_t>> seen = {key()};  // seen[k]: after k copies
    for (int64_t done = 0; done < rep.count;) {
      copy = done;
      apply(rep.begin, rep.end);
      ++done;
      ++r.copies_replayed;
      if (done == rep.count) break;
      std::vector<int64_t> now = key();
      auto hit = std::find(seen.begin(), seen.end(), now);
      if (hit != seen.end()) {
        const int64_t period = done - (hit - seen.begin());
        const int64_t left = (rep.count - done) % period;
        for (int64_t k = 0; k < left; ++k) {
          copy = rep.count - left + k;
          apply(rep.begin, rep.end);
        }
        r.copies_replayed += left;
        break;
      }
      seen.push_back(std::move(now));
    }
    copy = 0;
    apply(rep.end, graph.size());
  }
  r.peak_allocated = a.peak_allocated();
  r.peak_reserved = std::max(peak_reserved, a.peak_reserved());
  r.out_of_memory = source.overflowed();
  return r;
}

}  // namespace dsplan
