// Validation: a Prediction of the simulator next to an Execution of the runtime, for the same
// StepGraph, task class by task class; the pass/fail verdict; the measured timeline as a trace;
// and a hardware profile corrected from the measured task times (`dsplan validate --calibrate`).
//
// No CUDA here: this compares values, so it is tested everywhere with made-up Executions.
#ifndef DSPLAN_RUNTIME_VALIDATION_H_
#define DSPLAN_RUNTIME_VALIDATION_H_

#include <array>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/hardware_profile.h"
#include "core/status.h"
#include "runtime/executor.h"
#include "simulator/simulate.h"
#include "simulator/workload.h"

namespace dsplan {

/// The classes of work the report compares. Layer tasks split by op class when the execution
/// profiled ops (ExecuteOptions::profile_ops); every other task is one class by kind.
enum class TaskClass : uint8_t {
  kForwardGemm, kForwardAttention, kForwardMemory,
  kBackwardGemm, kBackwardAttention, kBackwardMemory,
  kRecompute,
  kGradCopy, kGpuOptimizer,
  kAllReduce, kReduceScatter, kAllGather,
  kCopyD2H, kCopyH2D, kCpuOptimizer, kNvmeRead, kNvmeWrite,
};
inline constexpr int kNumTaskClasses = 17;
const char* TaskClassName(TaskClass c);  // "forward GEMMs", "CPU Adam", ...

/// Busy seconds per class (the sum of the class's work over one step, overlapped or not) and
/// how many tasks contributed.
struct ClassSeconds {
  std::array<double, kNumTaskClasses> seconds{};
  std::array<int, kNumTaskClasses> tasks{};
};

struct ValidationThresholds {
  double time = 0.10;    // |error| of the step time
  double memory = 0.05;  // |error| of peak allocated and of device memory
};

struct ValidationRow {
  std::string quantity;  // "step time", "forward GEMMs", "peak allocated", ...
  bool bytes = false;    // a memory row (values in bytes), else seconds
  double predicted = 0;
  double measured = 0;
  bool judged = false;   // counts toward the verdict
  /// (predicted - measured) / measured; 0 when both are 0.
  double Error() const;
};

struct ValidationReport {
  std::vector<ValidationRow> rows;  // step time, task classes, memory
  ClassSeconds predicted, measured;
  double predicted_step_s = 0;
  double measured_step_s = 0;       // median over measured steps
  bool out_of_memory = false;
  /// "OOM at bwd h.17 (micro-step 0): 2.0 GiB requested with 80.1 GiB allocated; predicted peak
  /// was 79.6 GiB (fits)".
  std::string oom_line;
  bool pass = false;
  std::string verdict;              // "PASS: ..." or "FAIL: ..."
};

/// Per-class busy seconds of a prediction kept with keep_graph (durations and layer costs).
ClassSeconds PredictedClassSeconds(const Prediction& p, const Workload& w,
                                   const std::vector<LayerCost>& layer_costs);
/// Per-class busy seconds measured (task end - start; layer tasks split by op_class when
/// present, else counted whole as their op class "memory").
ClassSeconds MeasuredClassSeconds(const StepGraph& g, const Execution& e);

/// REQUIRES: |p| was simulated with keep_graph for the graph that |e| executed.
ValidationReport CompareExecution(const Prediction& p, const Workload& w,
                                  const std::vector<LayerCost>& layer_costs, const Execution& e,
                                  const ValidationThresholds& t);

/// A profile whose numbers are corrected by the measured/predicted ratio of the classes that
/// ran enough work to measure (GEMM table and efficiency, memory-bound efficiency, attention
/// efficiency, PCIe copies, CPU Adam, NVMe, collectives). Corrected numbers become "measured"
/// with |method| as their detail; the rest are kept as they were. Errors: nothing to correct.
Result<HardwareProfile> CalibratedProfile(const HardwareProfile& base, const ValidationReport& r,
                                          const std::string& method);

nlohmann::json ValidationToJson(const ValidationReport& r, const Execution& e);
/// The nccl-tests-style table (rows and verdict), without the header lines.
std::string ValidationTable(const ValidationReport& r);
/// Measured and predicted timelines side by side (two processes), Chrome trace format.
nlohmann::json ValidationTrace(const Prediction& p, const Workload& w, const Execution& e);

}  // namespace dsplan

#endif  // DSPLAN_RUNTIME_VALIDATION_H_
