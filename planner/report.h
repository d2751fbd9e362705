// PlanReport and StepDetail: the planner's and simulator's results as plain values, for views
// that show them (the Qt GUI, gui/). Nothing here computes a number of its own: every field is
// copied from RunPlanner (planner/search.h), Simulate (simulator/simulate.h), the StepGraph's
// schedule, or a replay of the StepGraph's GPU effects through the same caching allocator the
// simulator uses (simulator/caching_allocator.h).
//
// Thread safety: all functions are reentrant; the results are immutable values.
#ifndef DSPLAN_PLANNER_REPORT_H_
#define DSPLAN_PLANNER_REPORT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/hardware_profile.h"
#include "core/model_spec.h"
#include "core/plan.h"
#include "core/status.h"
#include "planner/search.h"
#include "simulator/simulate.h"

namespace dsplan {

/// Everything one planner request produced: ranked plans, the recommendation table, the Pareto
/// front and the rejected choices with their reasons.
struct PlanReport {
  std::string model_name;
  int64_t params = 0;                 // exact parameter count
  int nodes = 1;
  int gpus_per_node = 1;
  int64_t seq_len = 0;
  int64_t target_len = 0;
  std::string profile_name;
  std::string profile_sources;        // HardwareProfile::SourceSummary()
  int64_t gpu_capacity_bytes = 0;     // the profile's device memory
  /// The device less the headroom: what a plan's reserved peak x (1 + band) + context + NCCL
  /// may use (docs/planner.md "Memory headroom").
  double usable_gpu_bytes = 0;
  std::vector<ScoredPlan> recommendations;  // best per choice, best first
  std::vector<ScoredPlan> ranked;           // every fitting plan simulated, best first
  std::vector<ScoredPlan> pareto;           // throughput vs peak memory, fastest first
  std::vector<RejectedFamily> rejected;     // per choice: why nothing fits, or its limit
  int64_t plans_considered = 0;
  int64_t plans_simulated = 0;
  double seconds = 0;
};

/// Runs the planner for |request| (REQUIRES: request.profile set) and collects its results.
/// Errors: those of RunPlanner (bad requests) and of counting the model's parameters.
Result<PlanReport> BuildPlanReport(const PlannerRequest& request);

/// One task of a simulated step, as scheduled.
struct TimelineTask {
  std::string name;                   // TaskName(): "fwd h.3 (micro-step 0)", ...
  Resource resource = Resource::kCompute;
  TaskKind kind = TaskKind::kForward;
  double start_s = 0;
  double end_s = 0;
  double bytes = 0;                   // bytes moved (collectives: S, nccl-tests convention)
  double flops = 0;
};

/// GPU memory in host program order (what PyTorch's allocator counts), placed at the scheduled
/// start of the task whose effects produced it.
struct MemorySample {
  int32_t task = 0;
  double time_s = 0;
  int64_t allocated_bytes = 0;        // the memory timeline (ComputeMemory)
  int64_t reserved_bytes = 0;         // the caching-allocator replay, second iteration
};

/// One plan simulated in full, with its timeline and memory curve.
struct StepDetail {
  Prediction prediction;              // graph, schedule and curve cleared
  std::vector<TimelineTask> tasks;    // in task id order
  std::vector<MemorySample> memory;   // in program order
  int32_t peak_task = -1;             // the task at the allocated peak (-1: at rest)
  double peak_time_s = 0;             // its scheduled start
  /// The fit line for the nominal peak (reserved + context): the device less the headroom,
  /// the band's share of reserved and NCCL (a peak under it fits).
  double usable_gpu_bytes = 0;
};

/// Builds |plan|'s workload for |spec|, simulates it on |profile| with |options| (keep_graph is
/// forced on) and extracts the detail. Errors: those of BuildWorkload and Simulate.
Result<StepDetail> SimulateStepDetail(const ModelSpec& spec, const HardwareProfile& profile,
                                      const Plan& plan, const SimulateOptions& options = {});

}  // namespace dsplan

#endif  // DSPLAN_PLANNER_REPORT_H_
