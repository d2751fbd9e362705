// ZeRO-3 with offload_param.device cpu: the host waits for the copies of the offloaded
// parameter partitions that its fetches issue (docs/deepspeed-facts.md, "Fetching offloaded
// parameters"; docs/simulator.md).
//
// DeepSpeed 0.14.5's PartitionedParameterCoordinator issues each fetch and prefetch on its
// all-gather stream, one batch (one all_gather_coalesced handle) per call. At world size 1 a
// batch is one non-blocking copy per parameter from the pinned flat CPU buffer, and the first
// module that needs a parameter of the batch waits for the handle with a synchronize of that
// stream, which drains every copy queued on it so far. At larger world sizes each batch's
// copies are blocking `.to(device)` calls made when the batch is issued. The prefetcher tops up
// at every module's pre-hook (up to stage3_prefetch_bucket_size elements, at most
// stage3_max_live_parameters available), so the host runs ahead of the copies only by the work
// between one waiting module and the next. Graph edges at layer granularity cannot say that; this
// pass emulates the coordinator over the layers' modules and lengthens each layer task by the
// time its host spends waiting.
#ifndef DSPLAN_SIMULATOR_PARAM_FETCH_H_
#define DSPLAN_SIMULATOR_PARAM_FETCH_H_

#include <vector>

#include "core/plan.h"
#include "simulator/cost_model.h"
#include "simulator/step_builder.h"
#include "simulator/step_graph.h"
#include "simulator/workload.h"

namespace dsplan {

/// Per task of |graph|, the seconds its host waits on offloaded parameter copies (0 for tasks
/// that are not layer tasks, and for every task unless |plan| is ZeRO-3 with offload_param on
/// the CPU). A layer task's host work (CostModel::LayerTaskParts) is spread evenly over its
/// layer's ops; each partitioned tensor is fetched at the layer's weight op that uses it (its
/// GEMM or embedding ops in order; evenly over the ops where the counts differ). Tiled layers
/// (Plan::linear_tiles) wait nothing here.
std::vector<double> OffloadedFetchWaits(const StepGraph& graph, const Workload& workload,
                                        const std::vector<LayerParams>& layer_params,
                                        const Plan& plan, const CostModel& cost,
                                        const std::vector<LayerCost>& layers);

}  // namespace dsplan

#endif  // DSPLAN_SIMULATOR_PARAM_FETCH_H_
