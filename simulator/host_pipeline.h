// The host thread as a pipeline stage ahead of the GPU (experimental, off by default:
// `--host-pipeline`; docs/research/host-pipeline.md). Where it waits, from DeepSpeed 0.14.5,
// transformers and the training loop; the scheduler (ScheduleGraph with a HostPipeline) does
// the rest.
#ifndef DSPLAN_SIMULATOR_HOST_PIPELINE_H_
#define DSPLAN_SIMULATOR_HOST_PIPELINE_H_

#include <vector>

#include "simulator/cost_model.h"
#include "simulator/scheduler.h"
#include "simulator/step_graph.h"
#include "simulator/workload.h"

namespace dsplan {

struct HostPipelineOptions {
  /// The loop synchronizes after each phase (forward, backward, step), as dsplan's DeepSpeed
  /// harness does when it times phases (a record's phase_sync); a training loop does not.
  bool sync_each_phase = false;
  /// ZeRO stage of the plan (3: the reduce-event cap applies).
  int zero_stage = 0;
};

/// The pipeline of |graph| (not compact): each layer task's host work (dispatch and ZeRO-3
/// hooks, CostModel::LayerTaskParts) moves out of |*durations|, which keeps its kernels. The
/// host waits, besides what ScheduleGraph always applies (blocking copies, CPU work, NVMe):
///  * before each micro-step's forward: the loop reads the loss on the host each micro-step
///    (HF Trainer's NaN/Inf check, a logged loss);
///  * with |sync_each_phase|, before each micro-step's backward as well;
///  * before the forward of every embedding layer after the first: a second stack (T5's
///    decoder) builds its attention masks from an all-ones tensor, and transformers' mask helpers
///    read it on the host (`padding_mask.all()`);
///  * ZeRO-3: before a backward whose hooks flush reduce buckets, for the flush three before its
///    first one (`__reduce_and_partition_ipg_grads` keeps at most max_param_reduce_events = 2
///    events in flight and synchronizes on the oldest when a third is pending).
/// Only layer tasks (forward, recompute, backward) are pipelined; other tasks keep their
/// durations, which include their host work.
HostPipeline BuildHostPipeline(const StepGraph& graph, const Workload& workload,
                               const CostModel& cost, const std::vector<LayerCost>& layers,
                               const HostPipelineOptions& options, std::vector<double>* durations);

}  // namespace dsplan

#endif  // DSPLAN_SIMULATOR_HOST_PIPELINE_H_
