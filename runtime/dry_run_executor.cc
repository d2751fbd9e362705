// The dry-run executor (runtime/executor.h): runs nothing and returns the simulator's schedule
// of the graph as its Execution, so `dsplan validate --dry-run` prints the comparison a GPU run
// would print, with the "measured" side equal to the prediction, on any machine.
#include <algorithm>

#include <fmt/format.h>

#include "runtime/executor.h"
#include "simulator/cost_model.h"
#include "simulator/simulate.h"

namespace dsplan {
namespace {

class DryRunExecutor final : public Executor {
 public:
  DryRunExecutor(const Prediction& prediction, std::vector<LayerCost> layer_costs)
      : prediction_(prediction), layer_costs_(std::move(layer_costs)) {}

  const char* name() const override { return "dry-run"; }
  bool available() const override { return true; }

  Result<Execution> Run(const StepGraph& graph, const Workload& /*workload*/, const Plan& plan,
                        const ExecuteOptions& options) override {
    const Prediction& p = prediction_;
    const size_t n = static_cast<size_t>(graph.size());
    if (static_cast<size_t>(p.graph.size()) != n || p.durations.size() != n ||
        p.schedule.start_s.size() != n) {
      return Status::InvalidArgument(fmt::format(
          "the dry-run executor replays the prediction of the graph it is given: the graph has "
          "{} tasks, the prediction (kept with keep_graph) {} with {} durations and {} scheduled "
          "start times",
          n, p.graph.size(), p.durations.size(), p.schedule.start_s.size()));
    }
    if (options.steps < 1) {
      return Status::InvalidArgument(
          fmt::format("the dry-run executor needs at least one step (got {})", options.steps));
    }
    Execution e;
    e.device_name = "dry run (no device: the simulator's schedule)";
    e.driver = "none";
    e.libraries = "none loaded";
    e.attention_path = "none ran (the cost model's attention)";
    e.device_total_bytes = p.gpu_capacity_bytes;
    e.world_size = plan.world_size();

    if (!p.fits) {
      // The run a prediction says does not fit stops where the memory peaks.
      e.out_of_memory = true;
      e.oom_task = p.memory.peak[static_cast<int>(MemSpace::kGpu)].task;
      e.oom_allocated_bytes = p.gpu_peak_allocated_bytes;
      e.oom_message = "dry run: predicted not to fit (" + p.reason + ")";
      return e;
    }

    // Every measured step takes the predicted step time; every task starts when the schedule
    // starts it and lasts its predicted duration.
    e.step_s.assign(static_cast<size_t>(options.steps), p.step_time_s);
    e.start_s = p.schedule.start_s;
    e.end_s.resize(n);
    for (size_t i = 0; i < n; ++i) e.end_s[i] = e.start_s[i] + p.durations[i];
    if (options.profile_ops) {
      // The per-op-class split of each layer task is the cost model's.
      e.op_class.assign(n, OpClassSeconds{});
      for (TaskId id = 0; id < graph.size(); ++id) {
        const Task& t = graph.task(id);
        if (t.layer < 0 || t.layer >= static_cast<int>(layer_costs_.size())) continue;
        const LayerCost& lc = layer_costs_[t.layer];
        OpClassSeconds& c = e.op_class[id];
        if (t.kind == TaskKind::kForward || t.kind == TaskKind::kRecompute) {
          c = {lc.fwd_gemm_s, lc.fwd_attention_s, lc.fwd_memory_s};
        } else if (t.kind == TaskKind::kBackward) {
          c = {lc.bwd_gemm_s, lc.bwd_attention_s, lc.bwd_memory_s};
        }
      }
    }

    // Memory of rank 0 as predicted; the host and NVMe bytes are the node's share per GPU.
    e.peak_allocated_bytes = p.gpu_peak_allocated_bytes;
    e.peak_reserved_bytes = p.gpu_peak_reserved_bytes;
    e.context_bytes = p.gpu_context_bytes;
    e.device_used_peak_bytes = p.gpu_total_bytes;
    e.scratch_bytes = 0;
    const int64_t gpus = std::max(1, plan.gpus_per_node);
    e.host_pinned_bytes = p.host_pinned_bytes_per_node / gpus;
    e.host_pageable_bytes = (p.host_peak_bytes_per_node - p.host_pinned_bytes_per_node) / gpus;
    e.nvme_bytes = p.nvme_bytes_per_node / gpus;
    return e;
  }

 private:
  const Prediction& prediction_;
  std::vector<LayerCost> layer_costs_;
};

}  // namespace

std::unique_ptr<Executor> MakeDryRunExecutor(const Prediction& prediction,
                                             std::vector<LayerCost> layer_costs) {
  return std::make_unique<DryRunExecutor>(prediction, std::move(layer_costs));
}

}  // namespace dsplan
