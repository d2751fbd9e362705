// Host validation: `dsplan validate --executor host`. Trains a GPT-2 plan for real on CPU
// threads or MPI processes (runtime/reference_trainers/host_executor.h), trains the same data unpartitioned
// on one rank, and checks (a) the parameters agree within the floating-point tolerance of the
// precision and (b) the model-state bytes each rank holds at rest equal the StepGraph's, category
// by category.
// The tolerances are the ones tests/runtime/host_executor_test.cc states and explains.
#ifndef DSPLAN_RUNTIME_REFERENCE_TRAINERS_HOST_VALIDATION_H_
#define DSPLAN_RUNTIME_REFERENCE_TRAINERS_HOST_VALIDATION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "core/plan.h"
#include "core/status.h"
#include "runtime/reference_trainers/host_executor.h"
#include "simulator/step_graph.h"
#include "simulator/workload.h"

namespace dsplan {

struct HostMemoryRow {
  MemSpace space = MemSpace::kGpu;
  MemCategory category = MemCategory::kParams16;
  int64_t executor = 0;  // the largest rank's bytes at the start of the last step
  int64_t graph = 0;     // StepGraph::initial
};

struct HostValidation {
  HostRun run;
  HostRun reference;
  Plan reference_plan;      // stage 0, one rank, micro-batch x accumulation x world in one batch
  double max_abs_diff = 0;  // over all parameter elements (after HostRun::params_step)
  /// The fraction of elements beyond their tolerance (fp32: 1e-5; bf16: one bf16 ulp + 1e-4 of
  /// the reference), and the largest excess over it.
  double fraction_beyond_ulp = 0;
  double excess_beyond_ulp = 0;
  /// The largest difference of a step's mean loss from the reference's, relative to the
  /// reference's first-step loss.
  double max_loss_rel_diff = 0;
  /// Parameters (either run) and losses that are NaN or infinite: any fails the comparison.
  int64_t non_finite = 0;
  std::string tolerance;    // in words, for the report
  bool params_match = false;
  std::vector<HostMemoryRow> memory;  // model-state categories present on either side
  bool memory_match = false;
  bool pass = false;
};

/// REQUIRES: |graph| was built for |plan| on |w|. Errors: those of RunHostTraining.
/// Under options.comm (MPI) every rank calls it; rank 0 runs the reference on its own and
/// compares, and every rank returns the same error or verdict (params_match, memory_match,
/// pass); the other fields are filled on rank 0 only.
Result<HostValidation> ValidateOnHost(const Workload& w, const Plan& plan, const StepGraph& graph,
                                      const HostRunOptions& options);

/// The report: parameters line, memory table, verdict.
std::string HostValidationText(const HostValidation& v);

}  // namespace dsplan

#endif  // DSPLAN_RUNTIME_REFERENCE_TRAINERS_HOST_VALIDATION_H_
