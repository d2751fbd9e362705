// Where a layer's predicted time goes: each traced op's kernel time, forward and backward, as
// the cost model prices it, beside the layer's host time. `dsplan model --times` prints it, to
// set a block's prediction beside a kernel profile of the same shape (tools/probes/step_kernels.py).
#ifndef DSPLAN_SIMULATOR_LAYER_TIMES_H_
#define DSPLAN_SIMULATOR_LAYER_TIMES_H_

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "simulator/cost_model.h"
#include "simulator/workload.h"

namespace dsplan {

struct OpTime {
  const Op* op = nullptr;
  // kernels (CostModel::OpForwardSeconds / OpBackwardSeconds; GEMMs and attention times the
  // sustained-load ratio, as in the layer's cost)
  double fwd_s = 0, bwd_s = 0;
};

struct LayerTimes {
  /// The sustained-load ratio the GEMM and attention kernels carry (CostModel::
  /// WorkloadSustainedRatio; 1 without the profile's curve), in every op's time below.
  double sustained_ratio = 1;
  const Layer* layer = nullptr;
  LayerCost cost;  // CostModel::Layers: kernels by class, host time, what the task takes
  std::vector<OpTime> ops;
};

/// Every layer of |w| (|all_layers| false: the first of each run of blocks with the same ops,
/// and every other layer), priced by |cost| with the family's measured block host time where
/// the stack costs hold it.
std::vector<LayerTimes> PriceLayers(const Workload& w, const CostModel& cost, bool all_layers);

/// A text table per layer: its ops with forward and backward kernel milliseconds, then the
/// layer's kernel total by class and its host time.
std::string LayerTimesText(const std::vector<LayerTimes>& layers);
nlohmann::json LayerTimesJson(const std::vector<LayerTimes>& layers);

}  // namespace dsplan

#endif  // DSPLAN_SIMULATOR_LAYER_TIMES_H_
