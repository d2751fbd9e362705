// Judgements on an existing configuration beyond what the ds_config reader warns about: values
// that waste memory or time for this model and cluster, in numbers.
#ifndef DSPLAN_PLANNER_CHECK_H_
#define DSPLAN_PLANNER_CHECK_H_

#include <string>
#include <vector>

#include "core/hardware_profile.h"
#include "core/plan.h"
#include "simulator/simulate.h"

namespace dsplan {

/// One line per finding, e.g. "reduce_bucket_size 5e8 elements is larger than the model (124 M
/// parameters): ...". |pred| is the simulation of |plan| on |profile|.
std::vector<std::string> CheckPlan(const Plan& plan, const Prediction& pred,
                                   const HardwareProfile& profile);

}  // namespace dsplan

#endif  // DSPLAN_PLANNER_CHECK_H_
