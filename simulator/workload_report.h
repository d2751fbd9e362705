// Text and JSON renderings of a Workload (the `dsplan model` report).
#ifndef DSPLAN_SIMULATOR_WORKLOAD_REPORT_H_
#define DSPLAN_SIMULATOR_WORKLOAD_REPORT_H_

#include <string>

#include <nlohmann/json.hpp>

#include "simulator/workload.h"

namespace dsplan {

/// The JSON object documented in docs/cli.md (`dsplan model --json`): params, tokens,
/// flops_per_step, activation_bytes, layers[] with their ops, and the options used.
/// |with_tensors| adds the full tensor table.
nlohmann::json WorkloadToJson(const Workload& w, bool with_tensors);

/// A fixed-width per-layer table followed by totals. |all_layers| prints every block; otherwise
/// runs of identical blocks are folded into one row with a repeat count.
std::string WorkloadTable(const Workload& w, bool all_layers);

/// One-paragraph model summary (family, class, sizes, exact parameter count).
std::string ModelSummary(const ModelSpec& s, int64_t params);

}  // namespace dsplan

#endif  // DSPLAN_SIMULATOR_WORKLOAD_REPORT_H_
