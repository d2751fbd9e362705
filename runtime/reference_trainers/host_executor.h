// Host executor: runs a Plan's training steps for real on the CPU, with ranks as std::threads
// of this process or as the processes of an MPI job (mpirun, srun), real tensors in host memory
// and real fp32 math on small shapes (docs/runtime-host.md).
//
// Purpose: correctness, in CI, without a GPU. For a tiny GPT-2 the executor trains the exact
// parameters dsplan's Workload counts (names and shapes from its tensor table, the lm_head tied
// to wte) under the Plan's ZeRO stage, gradient accumulation, optimizer offload (CPU: host
// buffers and memcpy; NVMe: real files) and gradient clipping, so a test can check that
//   * the parameters after N steps equal unpartitioned single-rank training on the same data;
//   * the bytes it allocates per memory space and category equal what the simulator's StepGraph
//     (BuildStepGraph) says for the same Plan (model states; activations differ by design).
//
// Precision: all math is fp32. With a bf16 Plan the model parameters, their gradients and the
// 16-bit buffers (buckets, partitions) are stored as bf16 (round to nearest even) as DeepSpeed
// stores them, with the fp32 master and Adam states in the optimizer partition. fp32 Plans keep
// every buffer in fp32. fp16 (loss scaling) is not implemented.
//
// Ranks: the collectives go through a Comm (runtime/comm.h). Without HostRunOptions::comm,
// RunHostTraining starts world_size threads and joins them (reentrant); with one, this process
// is that Comm's rank and every rank of the job calls RunHostTraining with the same arguments.
// Both give the same bits (the Comm's reductions sum in rank order).
#ifndef DSPLAN_RUNTIME_REFERENCE_TRAINERS_HOST_EXECUTOR_H_
#define DSPLAN_RUNTIME_REFERENCE_TRAINERS_HOST_EXECUTOR_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/plan.h"
#include "core/status.h"
#include "runtime/comm.h"
#include "simulator/step_graph.h"
#include "simulator/workload.h"

namespace dsplan {

struct HostRunOptions {
  int steps = 5;          // optimizer steps (each: grad_accum micro-steps per rank, then the step)
  uint64_t seed = 1;      // parameter initialization and the synthetic dataset
  /// Directory for NVMe swap files when the plan offloads the optimizer to "nvme" (stage 3);
  /// empty = the plan's offload_optimizer.nvme_path. Must exist and be writable.
  std::string nvme_dir;
  /// Optimizer hyperparameters the Plan leaves unset (DeepSpeed's would come from the client).
  double default_lr = 1e-3;
  double default_weight_decay = 0.0;
  /// Ranks as processes: null = world_size threads in this process. Otherwise this process runs
  /// rank comm->rank() of comm->size() (an MpiSession's Comm); REQUIRES the same options and
  /// plan on every rank. Not owned.
  Comm* comm = nullptr;
  /// The step after which HostRun::params are taken (1-based); 0 or beyond |steps| = the last.
  int params_after_step = 0;
};

/// Bytes per memory space and category (indexed by MemSpace, then MemCategory).
using SpaceCategoryBytes = std::array<CategoryBytes, kNumMemSpaces>;

struct HostRankMemory {
  /// What was allocated when the last step began (steady state: comparable to StepGraph::initial).
  SpaceCategoryBytes at_last_step_start{};
  /// The largest value each (space, category) reached during the last step, independently.
  SpaceCategoryBytes peak_last_step{};
  /// Same, during the last step's micro-steps only (forward, backward and the gradient
  /// reductions, not the optimizer step): comparable to GraphCategoryPeaks(graph, true).
  SpaceCategoryBytes peak_last_micro_steps{};
  /// Same over the whole run (includes the first step).
  SpaceCategoryBytes peak_run{};
};

/// One operation the host executor ran, in the StepGraph's terms (one StepGraph, two executors:
/// docs/architecture.md): the task kind, the Workload layer (-1: none) and the micro-step (-1:
/// the optimizer step). The executor records its layers' forward and backward passes and the
/// optimizer step; GraphHostOps gives the same view of a StepGraph, and a test requires the two
/// to be equal, so the executor cannot drift from the graph's order of work unnoticed.
struct HostOp {
  TaskKind kind = TaskKind::kForward;
  int32_t layer = -1;
  int32_t micro_step = -1;
  bool operator==(const HostOp&) const = default;
};

/// |graph|'s tasks of the kinds the host executor records, in program order (task id order):
/// every forward, recompute and backward task, and one entry for the optimizer step where its
/// first task is (kCpuOptimizer when any of its tasks runs Adam on the host, else
/// kGpuOptimizer). REQUIRES: an unrolled graph (StepGraphForm::kUnrolled) or GAS <= 2.
std::vector<HostOp> GraphHostOps(const StepGraph& graph);

/// "forward L3 m0" ... for messages.
std::string HostOpsText(const std::vector<HostOp>& ops);

/// Rank 0's result holds the whole run; under HostRunOptions::comm the other ranks' results hold
/// only the layout facts (numel and below) and param_names.
struct HostRun {
  /// Parameters in fp32 (for a bf16 plan: the 16-bit model parameters decoded), full tensors as
  /// rank 0 sees them after step params_step, in the Workload's tensor-table order.
  std::vector<std::string> param_names;
  std::vector<std::vector<float>> params;
  int params_step = 0;  // the step after which |params| were taken (1-based)
  /// Mean loss per step over all ranks and micro-steps (equal to the global batch's mean loss).
  std::vector<double> losses;
  std::vector<HostRankMemory> rank_memory;  // one per rank
  /// Rank 0's operations of the last step, in the order it ran them (every rank runs the same).
  std::vector<HostOp> last_step_ops;
  /// Facts of the run's layout, for reports and tests.
  int64_t numel = 0;                  // trainable elements (== Workload::params)
  int64_t partition_numel = 0;        // per-rank partition the optimizer updates
  int64_t grads_in_partition_numel = 0;  // stage 1/2: rank 0's grads_in_partition elements
  int64_t largest_subgroup_numel = 0;    // stage 3: rank 0's largest optimizer sub-group
};

/// Trains |w| (GPT-2 family only; options.micro_batch must equal plan.micro_batch) under |plan|
/// for opts.steps steps with plan.world_size() ranks (threads, or opts.comm's processes). Errors:
/// a family other than gpt2 (named), fp16 precision, optimizers other than Adam/AdamW, activation
/// checkpointing, parameter offload, offload_optimizer.ratio < 1, world size above 64 (threads),
/// an MPI job whose size differs from the plan's world size (naming both), an NVMe directory that
/// does not exist or is not writable (named), the workload's micro-batch differing from the
/// plan's. Under opts.comm every rank returns the same error (the first rank's that failed).
Result<HostRun> RunHostTraining(const Workload& w, const Plan& plan, const HostRunOptions& opts);

/// The largest value each (space, category) reaches when |graph|'s memory effects are applied in
/// program order from graph.initial (what the executor's peak_last_step is compared with).
/// With |micro_steps_only|, only the effects of tasks with micro_step >= 0 raise the peaks (the
/// optimizer step's still change the running bytes).
SpaceCategoryBytes GraphCategoryPeaks(const StepGraph& graph, bool micro_steps_only = false);

/// Runs the model's fp32 forward and backward once on one micro-batch of the synthetic dataset
/// (sample ids 0..micro_batch-1) at the parameters RunHostTraining starts from (|seed|): the loss
/// and the full gradient per parameter, tensor-table order. For finite-difference checks:
/// |perturb| (optional) adds |delta| to element perturb_index of tensor perturb_tensor first.
struct HostGradCheck {
  double loss = 0;
  std::vector<std::vector<float>> grads;
};
Result<HostGradCheck> HostForwardBackward(const Workload& w, uint64_t seed, int perturb_tensor = -1,
                                          int64_t perturb_index = 0, double delta = 0);

}  // namespace dsplan

#endif  // DSPLAN_RUNTIME_REFERENCE_TRAINERS_HOST_EXECUTOR_H_
