#include "simulator/scheduler.h"

#include <algorithm>
#include <cassert>

namespace dsplan {

Schedule ScheduleGraph(const StepGraph& graph, const std::vector<double>& durations,
                       bool critical_path) {
  assert(durations.size() == static_cast<size_t>(graph.size()));
  const int n = graph.size();
  Schedule s;
  s.start_s.resize(n);
  s.end_s.resize(n);
  std::array<double, kNumResources> free_at{};
  std::array<TaskId, kNumResources> last_on{};
  last_on.fill(-1);
  // For the critical path: which predecessor set each task's start.
  std::vector<TaskId> pred(critical_path ? n : 0, -1);
  for (TaskId id = 0; id < n; ++id) {
    const Task& t = graph.task(id);
    const int r = static_cast<int>(t.resource);
    double start = free_at[r];
    TaskId from = last_on[r];
    for (const TaskId* d = graph.deps_begin(id); d != graph.deps_end(id); ++d) {
      if (s.end_s[*d] > start) {
        start = s.end_s[*d];
        from = *d;
      }
    }
    s.start_s[id] = start;
    s.end_s[id] = start + durations[id];
    free_at[r] = s.end_s[id];
    last_on[r] = id;
    s.busy_s[r] += durations[id];
    if (critical_path) pred[id] = from;
    s.makespan_s = std::max(s.makespan_s, s.end_s[id]);
  }
  if (critical_path && n > 0) {
    TaskId last = 0;
    for (TaskId id = 0; id < n; ++id) {
      if (s.end_s[id] >= s.end_s[last]) last = id;  // ties: the later id
    }
    for (TaskId id = last; id >= 0; id = pred[id]) s.critical_path.push_back(id);
    std::reverse(s.critical_path.begin(), s.critical_path.end());
  }
  return s;
}

MemoryTimeline ComputeMemory(const StepGraph& graph, bool record_curve) {
  MemoryTimeline m;
  std::array<CategoryBytes, kNumMemSpaces> cur = graph.initial;
  std::array<int64_t, kNumMemSpaces> total{};
  for (int sp = 0; sp < kNumMemSpaces; ++sp) {
    for (int64_t b : cur[sp]) total[sp] += b;
    m.peak[sp].bytes = total[sp];
    m.peak[sp].breakdown = cur[sp];
  }
  const int n = graph.size();
  if (record_curve) m.gpu_curve.reserve(n);
  for (TaskId id = 0; id < n; ++id) {
    const MemEffect* b = graph.effects_begin(id);
    const MemEffect* e = graph.effects_end(id);
    int64_t after_start = 0;
    // Effects apply in their listed order (start effects, then end effects); the peak is checked
    // after every allocation, so a task's transient allocations and frees sequence correctly.
    for (int phase = 0; phase < 2; ++phase) {
      const bool at_end = phase == 1;
      for (const MemEffect* x = b; x != e; ++x) {
        if (x->at_end != at_end) continue;
        const int sp = static_cast<int>(x->space);
        cur[sp][static_cast<int>(x->category)] += x->bytes;
        total[sp] += x->bytes;
        if (x->bytes > 0 && total[sp] > m.peak[sp].bytes) {
          m.peak[sp].bytes = total[sp];
          m.peak[sp].task = id;
          m.peak[sp].at_end = at_end;
          m.peak[sp].breakdown = cur[sp];
        }
      }
      if (phase == 0) after_start = total[0];
    }
    if (record_curve) m.gpu_curve.push_back({id, after_start, total[0]});
  }
  m.final_bytes = total;
  return m;
}

}  // namespace dsplan
