// Prediction output: the JSON object of `dsplan simulate --json` (schema in docs/cli.md), the
// readable report, and the timeline in Chrome trace format (opens in Perfetto).
#ifndef DSPLAN_SIMULATOR_PREDICTION_REPORT_H_
#define DSPLAN_SIMULATOR_PREDICTION_REPORT_H_

#include <string>

#include <nlohmann/json.hpp>

#include "simulator/simulate.h"

namespace dsplan {

nlohmann::json PredictionToJson(const Prediction& p, const Workload& w);
/// "fits, with 9.1 GiB to spare (...)", "fits with 1.2 GiB to spare: at risk (...)",
/// "does NOT fit: ...".
std::string VerdictText(const Prediction& p);
/// For a step band on more than one GPU (|world_size| > 1) with exposed communication: a
/// clause saying that part is outside the band's evidence ("; on 4 GPUs its exposed
/// communication, 3% of the step, is outside that record: every run in it used one GPU"); else
/// empty.
std::string UnvalidatedCommNote(const TimeBand& band, int world_size);
std::string PredictionText(const Prediction& p, const Workload& w);
/// REQUIRES: |p| was simulated with keep_graph.
nlohmann::json ChromeTrace(const Prediction& p, const Workload& w);

}  // namespace dsplan

#endif  // DSPLAN_SIMULATOR_PREDICTION_REPORT_H_
