// Simulate: Workload + Plan + HardwareProfile -> Prediction (DESIGN.md "Prediction").
//
// Builds the StepGraph, prices each task with the CostModel, schedules it, and walks the memory
// timeline. A plan that does not fit is a Prediction with fits = false and a reason, never an
// error.
#ifndef DSPLAN_SIMULATOR_SIMULATE_H_
#define DSPLAN_SIMULATOR_SIMULATE_H_

#include <array>
#include <string>
#include <vector>

#include "core/hardware_profile.h"
#include "core/plan.h"
#include "core/status.h"
#include "simulator/cost_model.h"
#include "simulator/scheduler.h"
#include "simulator/step_builder.h"
#include "simulator/workload.h"

namespace dsplan {

/// What a simulation reuses across plans with the same workload and profile (the planner
/// simulates many plans per workload).
struct SimulationContext {
  const Workload* workload = nullptr;
  const HardwareProfile* profile = nullptr;
  std::vector<LayerCost> layer_costs;   // CostModel::Layers(*workload)
  std::vector<LayerParams> layer_params;  // ComputeLayerParams(*workload, threshold)
  int64_t persistence_threshold = 0;
  SoftwareStack stack = SoftwareStack::kPyTorchDeepSpeed;
};

/// REQUIRES: |w| and |profile| outlive the context.
SimulationContext MakeSimulationContext(
    const Workload& w, const HardwareProfile& profile, Precision precision,
    int64_t persistence_threshold, SoftwareStack stack = SoftwareStack::kPyTorchDeepSpeed);

struct SimulateOptions {
  /// Keep the graph, schedule and curve (for traces, reports, executors). The kept graph is
  /// the unrolled one (StepGraphForm::kUnrolled: at most kMaxUnrolledMicroSteps micro-steps),
  /// and so is what the prediction is computed from.
  bool keep_graph = false;
  bool model_allocator = true;      // predict max_memory_reserved with the allocator model
  /// Fraction of device memory kept free when judging fit (fragmentation spikes, other
  /// processes).
  double safety_margin = 0.02;
  /// Fraction of each GPU's memory the plan may use (the planner's --max-gpu-memory-fraction).
  double memory_fraction = 1.0;
  /// Host RAM and NVMe space per node to judge against; 0 = the profile's (NVMe: no limit when
  /// the profile has none).
  int64_t host_memory_bytes = 0;
  int64_t nvme_bytes = 0;
};

struct StepBreakdown {
  double forward_s = 0;        // compute stream: forward (incl. recompute? no: recompute below)
  double backward_s = 0;
  double recompute_s = 0;
  double optimizer_s = 0;      // GPU optimizer and CPU optimizer on the critical path
  double exposed_comm_s = 0;   // collectives on the critical path
  double offload_s = 0;        // PCIe copies on the critical path
  double nvme_s = 0;           // NVMe on the critical path
  double other_s = 0;          // gradient copies and casts on the critical path
};

struct Prediction {
  bool fits = true;
  std::string reason;            // why it does not fit ("" when it fits)
  std::vector<std::string> warnings;
  StepFacts facts;
  Plan plan;
  std::string profile_name;
  std::string profile_sources;   // HardwareProfile::SourceSummary()
  int64_t tokens_per_micro_batch = 0;

  // GPU, per rank.
  int64_t gpu_capacity_bytes = 0;
  int64_t gpu_peak_allocated_bytes = 0;  // torch.cuda.max_memory_allocated
  int64_t gpu_peak_reserved_bytes = 0;   // torch.cuda.max_memory_reserved
  int64_t gpu_context_bytes = 0;         // outside the allocator
  int64_t gpu_total_bytes = 0;           // reserved + context: what nvidia-smi shows
  CategoryBytes gpu_breakdown_at_peak{}; // incl. context and allocator overhead
  std::string gpu_peak_task;             // the task at the peak
  // Host and NVMe, per node.
  int64_t host_peak_bytes_per_node = 0;
  int64_t host_pinned_bytes_per_node = 0;
  int64_t host_capacity_bytes_per_node = 0;
  int64_t nvme_bytes_per_node = 0;

  // Time.
  double step_time_s = 0;
  double samples_per_s = 0;
  double tokens_per_s = 0;
  double tflops_per_gpu = 0;
  double mfu = 0;
  StepBreakdown breakdown;
  std::array<double, kNumResources> busy_s{};
  std::string bottleneck;

  // Kept with SimulateOptions::keep_graph.
  StepGraph graph;
  Schedule schedule;
  MemoryTimeline memory;
  std::vector<double> durations;
};

/// The workload a plan trains: its micro-batch, lengths, precision, attention and checkpointing.
WorkloadOptions WorkloadOptionsForPlan(const Plan& plan);

Result<Prediction> Simulate(const SimulationContext& ctx, const Plan& plan,
                            const SimulateOptions& options = {});

}  // namespace dsplan

#endif  // DSPLAN_SIMULATOR_SIMULATE_H_
