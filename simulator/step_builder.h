// BuildStepGraph: one optimizer step of DeepSpeed training (GAS micro-steps plus the step) for
// one rank, as DeepSpeed's code runs it (docs/deepspeed-facts.md; docs/simulator.md lists the
// facts used, with the calibration evidence).
//
// The graph is built per rank class: data-parallel ranks are symmetric, so one rank's graph
// stands for all (docs/simulator.md, "The pieces"). Memory effects cover the GPU, pinned and
// pageable host memory and NVMe of that rank; the prediction scales host and NVMe to a node.
#ifndef DSPLAN_SIMULATOR_STEP_BUILDER_H_
#define DSPLAN_SIMULATOR_STEP_BUILDER_H_

#include <cstdint>
#include <vector>

#include "core/plan.h"
#include "core/status.h"
#include "simulator/step_graph.h"
#include "simulator/workload.h"

namespace dsplan {

/// Parameter facts per layer that ZeRO's mechanisms depend on (from the tensor table).
struct LayerParams {
  int64_t numel = 0;             // == Layer::params
  int32_t tensors = 0;           // parameter tensors (hooks and per-param copies)
  int64_t largest = 0;           // largest tensor numel
  int64_t persistent_numel = 0;  // ZeRO-3: tensors at or under the persistence threshold
  int32_t gathered_tensors = 0;  // ZeRO-3: tensors above it (and a tied head's shared table)
  /// The backward's working memory: |backward_work_buffers| buffers of |largest_saved_bytes|
  /// (the gradients of a saved tensor's op's output and input, plus
  /// TensorSpec::backward_extra_buffers), allocated after |backward_early_free_bytes| of the
  /// layer's saved tensors are freed (those only ops later in the forward saved). The saved
  /// tensor is the one whose working set reaches the highest (BackwardWorkingSets).
  int64_t largest_saved_bytes = 0;
  int32_t backward_work_buffers = 2;
  int64_t backward_early_free_bytes = 0;
  std::vector<int64_t> early_free_blocks;  // those tensors' sizes, in forward order
  int64_t output_bytes = 0;      // tensors the model output keeps (the logits)
  // Parameter tensors in model.parameters() order, which is the order of DeepSpeed's flat
  // 16-bit buffer (stage 1/2) and of ZeRO-3's sub-groups: this layer's first element in that
  // order and each tensor's numel. Precomputed per workload so that the per-plan mechanisms
  // that depend on tensor boundaries (partition overhang, sub-groups) need no pass over the
  // tensor table.
  int64_t offset = 0;
  std::vector<int64_t> tensor_numels;
  // A tied LM head: the word-embedding table it multiplies with, which another layer owns
  // (0 otherwise). ZeRO-3's fetch hook gathers it for this module too (the module's own
  // parameters include the shared Parameter).
  int64_t tied_numel = 0;
  /// Tied word embeddings, whatever the persistence threshold: on the head, the table's numel
  /// (its backward makes a gradient of the whole table, which autograd holds until the
  /// embedding's backward adds its own); on the embedding that owns the table, the same numel
  /// (where the two gradients are summed). 0 elsewhere.
  int64_t tied_grad_numel = 0;
  bool owns_tied_table = false;
  /// ZeRO-3: gathered elements (above the persistence threshold, a tied head's table included)
  /// that this layer's modules keep for backward as a view of the gathered buffer
  /// (WeightSave): through torch.nn.functional.linear (none inside deepspeed.zero.Init), and
  /// through a module's own weight.T (always).
  int64_t linear_view_numel = 0;
  int64_t matmul_view_numel = 0;
};

/// Per-layer parameter facts of |w| for |persistence_threshold| (ZeRO-3; pass 0 otherwise).
std::vector<LayerParams> ComputeLayerParams(const Workload& w, int64_t persistence_threshold);

/// ZeRO 1/2: elements of the `grads_in_partition` buffer DeepSpeed allocates on |rank| of
/// |ranks| (stage_1_and_2.copy_grads_in_partition): the whole numel of every parameter that
/// overlaps the rank's partition of the flat buffer (get_partition_info), so the tensors cut by
/// the partition's two edges count in full. |params| = Psi. The flat buffer is padded to a
/// multiple of 2 x ranks; the partitions are equal slices of it.
int64_t GradsInPartitionNumel(const std::vector<LayerParams>& lp, int64_t params, int ranks,
                              int rank);
/// Bytes per element PyTorch's foreach Adam/AdamW moves in one GPU step (optimizer.params
/// torch_adam): 72, plus 8 for AdamW's decoupled weight decay or 12 for Adam's coupled one when
/// the decay is not zero. The decay the config gives, else torch.optim's default (AdamW 0.01,
/// Adam 0), also for one left to the HF Trainer ("auto"), which dsplan cannot see.
double TorchAdamBytesPerElement(const Plan& plan);
/// The largest GradsInPartitionNumel over the ranks (the graph's rank class uses it).
int64_t MaxGradsInPartitionNumel(const std::vector<LayerParams>& lp, int64_t params, int ranks);
/// ZeRO stage 1 with contiguous_gradients on |ranks| > 1: per layer, the elements of the
/// parameters whose gradients the backward keeps until its end on |rank| (|partition| elements
/// per rank): those larger than reduce_bucket_size (extra_large_param_to_reduce, not copied into
/// the bucket) that do not overlap the rank's partition (stage 1 clears no gradient there).
/// Empty for other stages.
std::vector<int64_t> RetainedGradNumels(const std::vector<LayerParams>& lp, const ZeroConfig& z,
                                        int ranks, int64_t partition, int rank = 0);

/// Which data-parallel rank a graph stands for (BuildStepGraph's |rank|). At ZeRO stages 1-2
/// ranks differ: in the whole tensors their grads_in_partition holds (the partition's edges cut
/// tensors), in when it is allocated (at the first bucket holding one of the partition's
/// gradients: the last rank's come first in the backward, rank 0's last) and, at stage 1, in
/// which extra-large gradients they keep. kRankClass builds one graph for all ranks that takes
/// each of those at its worst rank (an upper bound); a rank in [0, N) builds that rank's.
inline constexpr int kRankClass = -1;

/// What the graph builder derived beyond the tasks, for reports.
struct StepFacts {
  OptimizerWrapper wrapper = OptimizerWrapper::kZero12;
  int64_t params = 0;             // trainable elements (Psi)
  int64_t partition_numel = 0;    // Psi / N rounded up (ZeRO partition per rank)
  /// ZeRO 1/2: the rank's grads_in_partition elements (the rank class: the largest rank's).
  int64_t grads_in_partition_numel = 0;
  /// The rank the graph stands for (kRankClass: every rank, each part at its worst).
  int rank = kRankClass;
  int64_t subgroups = 1;          // ZeRO-3 optimizer sub-groups
  int64_t largest_subgroup = 0;
  int64_t persistent_numel = 0;   // ZeRO-3 persistent parameters (fully held on every rank)
  int64_t buckets_per_micro_step = 0;
  /// Stage 1: the gradient elements the rank keeps until the backward's end
  /// (RetainedGradNumels; the rank class: rank 0's, the most at every point of the backward);
  /// a reduce_bucket_size of at least |largest_param_numel| keeps none.
  int64_t kept_grad_numel = 0;
  int64_t largest_param_numel = 0;
  bool overlap_comm = false;
  /// Memory-centric tiling: tiles per block (1 = none) and the GPU bytes of the largest tile
  /// one ZeRO-3 gather brings in (0 without tiling).
  int64_t linear_tiles = 1;
  int64_t largest_tile_gather_bytes = 0;
  /// Activation checkpoints kept in host memory (cpu_checkpointing): bytes per micro-step.
  int64_t host_checkpoint_bytes = 0;
  /// The largest flat fp32 tensor DeepSpeed's FusedAdam steps (optimizer Adam or AdamW from the
  /// config, not torch_adam, on the GPU): the rank's partition of the parameter group (stages
  /// 1-2, BF16_Optimizer), the whole group (FP16_Optimizer), a sub-group (stage 3) or the largest
  /// parameter (fp32 stage 0); 0 with another optimizer. One group of every trainable parameter
  /// is assumed (the HF Trainer's second group holds only biases and norms).
  int64_t fused_adam_flat_numel = 0;
  /// DeepSpeed 0.14.5's FusedAdam stores each tensor's size in a 32-bit int
  /// (csrc/adam/multi_tensor_apply.cuh): a tensor of more than 2^31 - 1 elements gets a negative
  /// size and its update never runs, silently (DeepSpeed issue #7640, fixed by PR #7639, opened
  /// 2025-10-21). docs/deepspeed-facts.md#fused-adam-int32.
  static constexpr int64_t kFusedAdamMaxNumel = 2147483647;
  bool FusedAdamSkipsUpdate() const { return fused_adam_flat_numel > kFusedAdamMaxNumel; }
  /// The same flat tensor when PyTorch's AdamW steps it (optimizer.params.torch_adam), else 0.
  int64_t torch_adam_flat_numel = 0;
  /// torch_adam is what lets this step train: FusedAdam would skip its flat tensor.
  bool TorchAdamAvoidsFusedLimit() const { return torch_adam_flat_numel > kFusedAdamMaxNumel; }
};

/// How a graph stands for the step's GAS micro-steps.
enum class StepGraphForm {
  /// At most four micro-steps: the first two, one repeated GAS - 3 times (StepGraph::repeat)
  /// and the last; the simulator's form, whose cost does not grow with GAS.
  kCompact,
  /// Every micro-step written out (executors that run each task, traces); at most
  /// kMaxUnrolledMicroSteps.
  kUnrolled,
};
inline constexpr int64_t kMaxUnrolledMicroSteps = 1024;

struct BuiltStep {
  StepGraph graph;
  StepFacts facts;
};

/// Builds the graph for |plan| on |w| (whose options must match the plan's micro-batch and
/// lengths). |params| from ComputeLayerParams (threshold = the plan's
/// stage3_param_persistence_threshold when stage 3). Errors: a plan the graph cannot express.
/// |workspace_bytes|: library workspaces PyTorch allocates through its caching allocator and
/// never frees (cuBLAS: one per thread and stream), present at every instant.
/// |form|: compact (the default) or unrolled (errors past kMaxUnrolledMicroSteps).
/// |rank|: kRankClass or a rank in [0, data-parallel size) (see kRankClass).
Result<BuiltStep> BuildStepGraph(const Workload& w, const std::vector<LayerParams>& params,
                                 const Plan& plan, int64_t workspace_bytes = 0,
                                 StepGraphForm form = StepGraphForm::kCompact,
                                 int rank = kRankClass);
/// BuildStepGraph into |out|, whose graph's storage is reused (its contents are replaced): a
/// caller that builds many graphs in turn keeps one BuiltStep. On error |out| is unspecified.
Status BuildStepGraphInto(const Workload& w, const std::vector<LayerParams>& params,
                          const Plan& plan, int64_t workspace_bytes, StepGraphForm form,
                          BuiltStep* out, int rank = kRankClass);

}  // namespace dsplan

#endif  // DSPLAN_SIMULATOR_STEP_BUILDER_H_
