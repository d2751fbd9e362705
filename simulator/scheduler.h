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
  /// Per task; for a compact graph's repeated block (StepGraph::repeat), its last copy's.
  std::vector<double> start_s, end_s;
  double makespan_s = 0;
  std::array<double, kNumResources> busy_s{};  // summed task time per resource, every copy
  /// First to last. Empty for a compact graph whose block repeats: the path runs through
  /// every copy; critical_s has its time by kind.
  std::vector<TaskId> critical_path;
  /// Seconds on the critical path by task kind (they sum to the makespan).
  std::array<double, kNumTaskKinds> critical_s{};
};

/// The thread that issues the kernels, as a stage of its own (experimental, off by default:
/// docs/research/host-pipeline.md). A task with host work here is queued by the host in
/// |host_s| seconds, starting when the host has issued the previous such task and has stopped
/// waiting; its kernels start no earlier than the host starts issuing them and end no earlier
/// than it finishes, so the host can run ahead of the GPU between waits. The host waits:
/// for the end of a dependency on a copy engine, the CPU or NVMe (blocking copies, CPU Adam,
/// swaps), for every resource to drain where |sync| is set (a synchronize, or a host read of a
/// GPU value), and for the end of |waits_for| (an event synchronize).
struct HostPipeline {
  std::vector<double> host_s;     // per task; < 0: not issued through the pipeline (its
                                  // duration covers its host work)
  std::vector<uint8_t> sync;      // per task
  std::vector<TaskId> waits_for;  // per task; -1: none; else a smaller id
};

/// REQUIRES: durations.size() == graph.size().
/// A compact graph is scheduled as the graph it stands for (Unroll), without writing it out:
/// the prefix, the last two copies of the block and the tail are scheduled task by task; the
/// copies before them are one max-plus linear map of the times the block reads from before it
/// (resources' free times, the previous copy's tasks), raised to its power by squaring, so the
/// cost grows with log(copies). Times agree with the unrolled schedule to rounding; the
/// critical path's split by kind may differ where two paths are exactly as long.
Schedule ScheduleGraph(const StepGraph& graph, const std::vector<double>& durations,
                       bool critical_path = true);
/// The same with the host as a pipeline stage (|host| null: as above). REQUIRES: each of
/// |host|'s vectors has graph.size() entries, and the graph is not compact
/// (!graph.repeat.active()).
Schedule ScheduleGraph(const StepGraph& graph, const std::vector<double>& durations,
                       const HostPipeline* host, bool critical_path);

struct MemoryPeak {
  int64_t bytes = 0;
  TaskId task = -1;        // the task during which the peak was reached (-1: initial state)
  int64_t copy = 0;        // which copy of a repeated block |task| is in (compact graphs)
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

/// The GPU effects of nonzero bytes in the order the allocator replay applies them (each task's
/// effects at its start, then those at its end), as ComputeMemory meets them on its walk:
/// SimulateCachingAllocator (simulator/allocator.h) takes them from there instead of walking
/// the graph again.
struct GpuEffectOrder {
  std::vector<MemEffect> effects;
  std::vector<int> first;  // per task, the index of its first effect; one more: the count
};

/// A compact graph's repeated block is walked once when it frees what it allocates (every copy
/// then repeats the first one's timeline, so no later copy sets a new peak); otherwise its
/// first and last copies are walked, the copies between adding the block's net bytes each
/// (a peak inside the block grows linearly with the copy, so it is highest in one of the two).
/// gpu_curve holds the walked copies only.
/// |gpu_order| (optional): receives the graph's GPU effects in replay order (GpuEffectOrder).
MemoryTimeline ComputeMemory(const StepGraph& graph, bool record_curve = false,
                             GpuEffectOrder* gpu_order = nullptr);

}  // namespace dsplan

#endif  // DSPLAN_SIMULATOR_SCHEDULER_H_
