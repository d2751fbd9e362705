// Scheduler and memory timeline over a StepGraph.
//
// Scheduling: each resource runs one task at a time in id order (a CUDA stream, a copy engine
// and the CPU optimizer are FIFO in DeepSpeed); a task starts when its resource is free and all
// its dependencies have ended. Because ids are program order, this list schedule is
// deterministic and overlap between streams emerges from the graph alone. The critical path
// follows, from the last task back, whichever predecessor (dependency or the previous task on
// the same resource) determined each start.
//
// Memory: PyTorch's allocator counts bytes when the host allocates and frees, i.e. in program
// order, so the timeline applies effects in id order (each task's start effects, then its end
// effects, each in listed order), from the graph's initial state. The peak per memory space is recorded with its task and the breakdown
// by category at that instant.
#ifndef DSPLAN_SIMULATOR_SCHEDULER_H_
#define DSPLAN_SIMULATOR_SCHEDULER_H_

#include <array>
#include <vector>

#include "simulator/step_graph.h"

namespace dsplan {

struct Schedule {
  std::vector<double> start_s, end_s;   // per task
  double makespan_s = 0;
  std::array<double, kNumResources> busy_s{};  // summed task time per resource
  std::vector<TaskId> critical_path;    // first to last
};

/// REQUIRES: durations.size() == graph.size().
Schedule ScheduleGraph(const StepGraph& graph, const std::vector<double>& durations,
                       bool critical_path = true);

struct MemoryPeak {
  int64_t bytes = 0;
  TaskId task = -1;        // the task during which the peak was reached (-1: initial state)
  bool at_end = false;     // reached by the task's end effects
  CategoryBytes breakdown{};
};

struct MemoryTimeline {
  std::array<MemoryPeak, kNumMemSpaces> peak{};
  std::array<int64_t, kNumMemSpaces> final_bytes{};  // after the last task
  /// Optional GPU curve in program order: (task, bytes after its start effects, after its end).
  struct Point {
    TaskId task;
    int64_t after_start;
    int64_t after_end;
  };
  std::vector<Point> gpu_curve;
};

MemoryTimeline ComputeMemory(const StepGraph& graph, bool record_curve = false);

}  // namespace dsplan

#endif  // DSPLAN_SIMULATOR_SCHEDULER_H_
