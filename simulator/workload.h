// Workload: what one micro-batch of training does, layer by layer, for a ModelSpec.
//
// The workload is the single source of truth for memory and work (docs/architecture.md, "The
// main values"): a tensor table (parameters and the activations autograd keeps for backward, each
// with shape, dtype and category) and an op list per layer (GEMMs with (m, n, k), attention,
// norms, activations, dropout, embeddings, LM head, loss) with forward and backward FLOPs and
// bytes moved.
//
// It is built by tracing each family's forward pass as transformers' modeling code runs it in
// model.train() (simulator/families/), recording what PyTorch's autograd saves per op
// (docs/activations.md). Tensors that share storage (views, slices) are counted once.
//
// Thread safety: BuildWorkload is reentrant; a Workload is an immutable value.
#ifndef DSPLAN_SIMULATOR_WORKLOAD_H_
#define DSPLAN_SIMULATOR_WORKLOAD_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/model_spec.h"
#include "core/plan.h"
#include "core/status.h"

namespace dsplan {

enum class DType { kF32, kBF16, kF16, kI64, kBool };
int64_t DTypeBytes(DType t);
const char* DTypeName(DType t);

/// Whether transformers' modeling code for |f| offers the SDPA path.
bool FamilySupportsSdpa(Family f);

enum class TensorCategory {
  kParameter,   // a model parameter (in the training dtype)
  kActivation,  // saved by autograd for backward
  kOutput,      // kept alive by the model output object through backward (the logits)
};
const char* TensorCategoryName(TensorCategory c);

/// How autograd keeps a weight parameter for its module's backward. It decides whether ZeRO-3's
/// release of a gathered weight frees it (docs/deepspeed-facts.md, "What keeps a released
/// weight"): the release swaps `param.data` for an empty tensor, which frees the gathered
/// buffer only when nothing else refers to it.
enum class WeightSave : uint8_t {
  /// Autograd keeps the Parameter itself or nothing (GPT-2's Conv1D: addmm(bias, x, weight);
  /// embeddings, norms): the release frees the buffer.
  kParameter,
  /// nn.Linear through torch.nn.functional.linear: PyTorch's linear saves weight.t(), a view
  /// of the gathered buffer, which keeps it until the Linear's backward. Inside
  /// deepspeed.zero.Init, DeepSpeed replaces functional.linear with an autograd function that
  /// saves the Parameter instead (Plan::zero_init).
  kFunctionalLinear,
  /// A module that multiplies by weight.T itself (Falcon's FalconLinear: input @ weight.T): a
  /// view kept to the backward whatever the script does.
  kTransposedMatmul,
};

struct TensorSpec {
  std::string name;            // e.g. "decoder.block.3.layer.0.SelfAttention.q.weight"
  std::vector<int64_t> shape;
  DType dtype = DType::kBF16;
  TensorCategory category = TensorCategory::kActivation;
  int64_t numel = 0;
  int64_t bytes = 0;
  int layer = -1;              // index into Workload::layers of the owning layer
  /// Parameters only: how autograd keeps it for backward (the strongest use: a table used by an
  /// embedding and a tied nn.Linear head is kFunctionalLinear).
  WeightSave weight_save = WeightSave::kParameter;
  /// Activations only: true when the tensor is rematerialized in backward under activation
  /// checkpointing instead of staying alive from forward.
  bool recomputed = false;
  /// Activations only: buffers of this tensor's size that the backward of the op that saved it
  /// allocates besides the two gradients (its output's and its input's). CUDA's softmax
  /// backward computes `grad * output` into a temporary first (softmax_backward_cuda_out): 1
  /// for a saved softmax output.
  int32_t backward_extra_buffers = 0;
  /// Activations only: the layer whose forward made it (-1: a model input).
  int produced_layer = -1;
  /// Activations only: when the forward made it and first and last saved it, as the number of
  /// ops traced before (program order over the whole model; -1: never saved, an output). An
  /// op's output and the tensors it saves carry the op's number. The backward runs the ops in
  /// reverse, and autograd frees an op's saved tensors once its backward has run, so when the
  /// backward of the op that made a tensor runs, every tensor first saved after |created| is
  /// gone.
  int32_t created = -1, save_first = -1, save_last = -1;
};

enum class OpKind {
  kGemm,         // a Linear: C[m,n] = A[m,k] W[k,n] (+ bias)
  kBatchedGemm,  // attention score / context matmuls (batch = b*h)
  kAttention,    // a fused SDPA kernel (flash / memory-efficient)
  kNorm,         // LayerNorm / RMSNorm
  kActivation,   // GELU, ReLU, SiLU, ...
  kDropout,
  kElementwise,  // adds, muls, casts, rotary, softmax outside attention
  kEmbedding,    // gather from an embedding table
  kSoftmax,      // eager attention softmax
  kLoss,         // log_softmax + nll
};
inline constexpr int kOpKindCount = 10;
static_assert(static_cast<int>(OpKind::kLoss) + 1 == kOpKindCount, "kOpKindCount counts OpKind");
const char* OpKindName(OpKind k);

/// What prices an eager PyTorch kernel's bytes (read + written): the measured rate of its class
/// (simulator/stack_costs.cc; docs/simulator.md, "Eager kernels").
enum class KernelClass : uint8_t {
  kStream,      // vectorized elementwise (add, mul, pow, tanh, fill, cat) in one dtype
  kCastUp,      // dtype conversion to a wider type (bf16 -> fp32)
  kCastDown,    // dtype conversion to a narrower type (fp32 -> bf16)
  kReduce,      // a reduction over the last dimension (mean, sum)
  kNorm,        // fused LayerNorm (forward; backward with the weight-gradient reduction)
  kActivation,  // fused GELU / SiLU / ReLU
  kDropout,     // fused dropout (mask written in forward, read in backward)
  kSoftmax,     // softmax over attention rows
  kLogSoftmax,  // log_softmax over vocabulary rows (the loss)
  kPermuteCopy,   // a copy out of a permuted view (transpose(1, 2).contiguous())
  kStridedMul,    // elementwise over a narrow strided slice (x[..., :rotary_dim] * cos)
  kRotateHalf,    // rotate_half of a narrow slice: negate one half, concatenate
  kCatStrided,    // torch.cat along the last dimension with a piece that is a slice of a wider
                  // tensor (the partial rotary's pass-through part): the element-wise copy path
  kBroadcast,     // elementwise with a broadcast (stride-0) operand: not vectorized
  kMixedLayout,   // a binary op whose operands are laid out differently (one a transposed
                  // view): TensorIterator's generic strided kernel, not the vectorized one
};
inline constexpr int kKernelClassCount = 15;
const char* KernelClassName(KernelClass c);

/// The kernels eager PyTorch runs for one traced op, forward and backward: bytes by class and
/// kernel counts. Empty (no kernels) for ops priced otherwise (GEMMs, fused attention) or traced
/// before this was known: the cost model then prices fwd_bytes/bwd_bytes as one kernel of the
/// op kind's class.
struct EagerWork {
  std::array<double, kKernelClassCount> fwd{}, bwd{};
  int32_t fwd_kernels = 0, bwd_kernels = 0;
  bool empty() const { return fwd_kernels == 0 && bwd_kernels == 0; }
  void Fwd(KernelClass c, double bytes) {
    fwd[static_cast<int>(c)] += bytes;
    ++fwd_kernels;
  }
  void Bwd(KernelClass c, double bytes) {
    bwd[static_cast<int>(c)] += bytes;
    ++bwd_kernels;
  }
};

struct Op {
  std::string name;
  OpKind kind = OpKind::kElementwise;
  // GEMM shape (kGemm, kBatchedGemm, kAttention's two matmuls): C[m,n] = A[m,k] B[k,n], |batch|
  // independent products.
  int64_t m = 0, n = 0, k = 0, batch = 1;
  bool causal = false;          // kAttention: causal mask (kernels skip about half the work)
  bool fp32 = false;            // kBatchedGemm: operands upcast to fp32 (SDPA's math path)
  bool dropout = false;         // kAttention: the fused kernel applies attention dropout
  double fwd_flops = 0;         // FLOPs in forward
  double bwd_flops = 0;         // FLOPs in backward (input and weight gradients)
  double fwd_bytes = 0;         // bytes read + written in forward
  double bwd_bytes = 0;         // bytes read + written in backward
  /// What eager PyTorch runs for it (fwd_bytes/bwd_bytes are the least traffic, what dsplan's
  /// runtime moves; eager modules move more: upcasts, one kernel per Python tensor op).
  EagerWork eager;
};

enum class LayerKind { kEmbedding, kEncoderBlock, kDecoderBlock, kFinalNorm, kHead, kLoss };
const char* LayerKindName(LayerKind k);

struct Layer {
  std::string name;             // "embeddings", "encoder.block.0", "model.layers.17", ...
  LayerKind kind = LayerKind::kEmbedding;
  bool checkpointed = false;    // recomputed in backward (gradient checkpointing on, a block)
  int64_t params = 0;           // parameters owned by this layer (tied weights counted once)
  std::vector<Op> ops;
  double fwd_flops = 0;
  double bwd_flops = 0;
  double recompute_flops = 0;   // forward run again in backward (checkpointed layers)
  double fwd_bytes = 0;
  double bwd_bytes = 0;
  /// Activations (unique storages) this layer's ops save for backward, without checkpointing.
  int64_t saved_bytes = 0;
  /// Bytes this layer keeps alive from its forward to its backward under the options: with
  /// checkpointing, only the block inputs the checkpoint holds; else saved_bytes (plus outputs
  /// such as the logits, which the model output keeps).
  int64_t activation_bytes = 0;
  /// Bytes rematerialized when the layer is recomputed in backward (0 unless checkpointed).
  int64_t recompute_bytes = 0;
  /// The largest tensor the layer's forward makes and frees before it returns: saved by no
  /// layer and not an output (the loss's fp32 copy of the logits, alive while log_softmax
  /// writes its output). It is allocated beside the layer's kept bytes at the forward's end.
  int64_t fwd_transient_bytes = 0;
};

struct Workload {
  ModelSpec spec;
  RunShape shape;  // what it was built for
  AttentionImpl attention = AttentionImpl::kSdpa;  // the implementation actually modeled
  std::vector<TensorSpec> tensors;  // parameters first-come, then activations, in trace order
  std::vector<Layer> layers;

  int64_t params = 0;               // == transformers' sum(p.numel() for p in parameters())
  int64_t tokens = 0;               // tokens per micro-batch (encoder + decoder for T5)
  double fwd_flops = 0;
  double bwd_flops = 0;
  double recompute_flops = 0;
  double flops_per_step = 0;        // fwd + bwd + recompute for one micro-batch
  int64_t activation_bytes = 0;     // sum of Layer::activation_bytes
  int64_t recompute_peak_bytes = 0; // largest Layer::recompute_bytes
  int64_t param_bytes = 0;          // parameters in the training dtype
};

/// Traces |spec| for |shape| (the model and the run shape are all a workload depends on).
/// Errors: non-positive sizes, a T5 model without a target length, an attention implementation
/// the family lacks, or sizes whose products overflow.
Result<Workload> BuildWorkload(const ModelSpec& spec, const RunShape& shape);

/// BuildWorkload(spec, shape) with gradient checkpointing off (first) and on (second), from one
/// trace: checkpointing changes which saved tensors stay alive and what is recomputed, not the
/// ops, so both equal what BuildWorkload gives for either setting (the Simulator: one only).
Result<std::pair<Workload, Workload>> BuildWorkloadsWithAndWithoutCheckpointing(
    const ModelSpec& spec, const RunShape& shape);

/// BuildWorkload's checks of |shape| against |spec| alone (sizes, a target length only for
/// encoder-decoder models, learned position tables, the attention implementation), without
/// tracing: what a caller checks before loading anything else.
Status CheckRunShape(const ModelSpec& spec, const RunShape& shape);

/// The one rule for sequence lengths (the CLI's commands, the GUI and `dsplan model` all use
/// it): a given length wins; otherwise 512 for T5 and BERT, else 1024 capped at a learned
/// position table (GPT-2, OPT); the decoder length of an encoder-decoder model 128, else 0.
/// Sets shape->seq_len and shape->target_len.
void ResolveRunLengths(const ModelSpec& spec, std::optional<int64_t> seq_len,
                       std::optional<int64_t> target_len, RunShape* shape);

/// The exact parameter count (transformers' sum of numel, tied weights once).
Result<int64_t> CountParameters(const ModelSpec& spec);

}  // namespace dsplan

#endif  // DSPLAN_SIMULATOR_WORKLOAD_H_
