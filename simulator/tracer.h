// Tracer: records a forward pass as transformers runs it, op by op, into a Workload.
//
// Internal to the simulator. Family builders (simulator/families/) call the nn-style helpers
// below in the order the HF modeling code runs; each helper adds its op (FLOPs, bytes) and marks
// the storages PyTorch autograd saves for that op's backward. A view shares its base's storage,
// so a storage saved by several ops (or through several views) is counted once.
#ifndef DSPLAN_SIMULATOR_TRACER_H_
#define DSPLAN_SIMULATOR_TRACER_H_

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "simulator/workload.h"

namespace dsplan {

/// |a| followed by |b|, allocated once: `name + ".weight"` copies |name| into a string of its
/// own size and then grows it for the suffix (two allocations and a free per name, about a tenth
/// of a search's instructions when every traced tensor and op is named that way).
inline std::string Cat(const std::string& a, std::string_view b) {
  std::string s;
  s.reserve(a.size() + b.size());
  s.append(a);
  s.append(b);
  return s;
}

/// A traced tensor's dims, held inline: a trace makes tens of thousands of tensors and views,
/// and a heap vector per shape was a good part of its cost. At most kMaxDims dims; a shape
/// given more keeps the first kMaxDims and reports overflowed() (the Tracer then fails).
class Shape {
 public:
  static constexpr size_t kMaxDims = 8;
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) {  // NOLINT: a list of dims, as a vector takes
    for (int64_t d : dims) push_back(d);
  }
  Shape(const std::vector<int64_t>& dims) {  // NOLINT: implicit, as the vector it replaces
    for (int64_t d : dims) push_back(d);
  }
  void push_back(int64_t d) {
    if (size_ == kMaxDims) {
      overflowed_ = true;
      return;
    }
    dims_[size_++] = d;
  }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  bool overflowed() const { return overflowed_; }
  int64_t& operator[](size_t i) { return dims_[i]; }
  int64_t operator[](size_t i) const { return dims_[i]; }
  int64_t& back() { return dims_[size_ - 1]; }
  int64_t back() const { return dims_[size_ - 1]; }
  const int64_t* begin() const { return dims_.data(); }
  const int64_t* end() const { return dims_.data() + size_; }
  std::vector<int64_t> ToVector() const { return {begin(), end()}; }

 private:
  std::array<int64_t, kMaxDims> dims_{};
  uint8_t size_ = 0;
  bool overflowed_ = false;
};

/// A traced tensor: a shape and dtype over a storage (storages are owned by the Tracer).
struct T {
  int storage = -1;
  Shape shape;
  DType dtype = DType::kBF16;
  int64_t numel = 0;
  int64_t dim(int i) const { return shape[i < 0 ? shape.size() + i : i]; }
  int64_t rows() const { return shape.empty() ? 0 : numel / shape.back(); }
};

class Tracer {
 public:
  Tracer(const ModelSpec& spec, const RunShape& options, AttentionImpl attention);

  const ModelSpec& spec() const { return spec_; }
  const RunShape& options() const { return opt_; }
  AttentionImpl attention() const { return attention_; }
  /// Dtype of parameters, buffers and (so) activations.
  DType act_dtype() const { return act_dtype_; }
  bool sdpa() const { return attention_ == AttentionImpl::kSdpa; }

  /// Starts a layer; ops, parameters and saves go to it until the next BeginLayer.
  /// |checkpointable| layers are recomputed when gradient checkpointing is on.
  void BeginLayer(const std::string& name, LayerKind kind, bool checkpointable);

  /// A model input that is not an activation (input ids, labels, position ids).
  T Input(const std::string& name, Shape shape, DType dtype);
  /// A parameter of the current layer in the training dtype.
  T Param(std::string name, Shape shape);
  /// Records that the module using parameter |w| keeps it for backward as |save| (the stronger
  /// of that and what it had: a tied table used by an embedding and an nn.Linear head).
  void MarkWeightSave(const T& w, WeightSave save);
  /// How the Linear modules traced from now keep their weights (Linear() marks each weight):
  /// nn.Linear by default; a family sets its own module's kind around its blocks.
  WeightSave LinearWeightSave() const { return linear_save_; }
  void SetLinearWeightSave(WeightSave s) { linear_save_ = s; }
  /// A new storage produced by the current op.
  T New(std::string name, Shape shape, DType dtype);
  T New(std::string name, Shape shape) { return New(std::move(name), shape, act_dtype_); }
  /// A view or slice of |t| (same storage): reshape, transpose, split, chunk.
  T View(const T& t, Shape shape);

  /// Marks |t|'s storage as saved for backward by the current op.
  void Save(const T& t);
  /// Marks |t| (saved) as the output of an op whose backward allocates |n| more buffers of its
  /// size (TensorSpec::backward_extra_buffers).
  void SetBackwardExtraBuffers(const T& t, int n);
  /// Marks |t| as an input held by the activation checkpoint of the current layer.
  void CheckpointArg(const T& t);
  /// Marks |t| as kept alive by the model output until backward (the logits).
  void KeepAsOutput(const T& t);

  /// Appends an op to the current layer.
  void AddOp(Op op);

  /// Product of |dims| with overflow detection: on overflow records an error naming |what|
  /// and returns 0.
  int64_t Numel(const Shape& dims, const std::string& what);
  int64_t Mul(int64_t a, int64_t b, const std::string& what) { return Numel({a, b}, what); }

  Status status() const { return status_; }
  /// Computes per-layer totals and the activation accounting; the Tracer is spent after.
  Result<Workload> Finish() { return Finish(opt_.gradient_checkpointing); }
  /// The workload of the trace with gradient checkpointing |gradient_checkpointing|, whatever
  /// the options said: checkpointing changes only which saved storages stay alive and what is
  /// recomputed, not the ops, so one trace gives both. May be called more than once.
  Result<Workload> Finish(bool gradient_checkpointing) const;
  /// The same workload, moving the trace's tables into it instead of copying them (the last
  /// Finish of a trace); the Tracer is spent after.
  Result<Workload> FinishAndConsume(bool gradient_checkpointing);

 private:
  struct Storage {
    std::string name;
    int64_t bytes = 0;
    int layer = -1;  // producing layer (-1: model input)
    bool input = false;
    TensorCategory category = TensorCategory::kActivation;
    int tensor_index = -1;  // index in tensors_ once recorded
    int param_index = -1;   // parameters: index in params_
    Shape shape;
    DType dtype = DType::kBF16;
    int32_t backward_extra_buffers = 0;  // TensorSpec::backward_extra_buffers
    int32_t created = -1, save_first = -1, save_last = -1;  // TensorSpec's
  };
  struct LayerState {
    std::vector<int> saved;       // storages saved by this layer's ops, in order, unique
    std::vector<int> ckpt_args;   // storages held by the checkpoint
    std::vector<int> outputs;     // storages kept by the model output
  };
  // Finish's body; |Self| is const Tracer (copies the tables) or Tracer (moves them out).
  template <class Self>
  static Result<Workload> FinishImpl(Self& self, bool gradient_checkpointing);
  void Fail(const std::string& what);
  static void PushUnique(std::vector<int>& v, int s);

  const ModelSpec& spec_;
  RunShape opt_;
  AttentionImpl attention_;
  DType act_dtype_;
  std::vector<Storage> storages_;
  std::vector<TensorSpec> params_;
  std::vector<Layer> layers_;
  std::vector<bool> checkpointable_;  // per layer (BeginLayer)
  std::vector<LayerState> layer_state_;
  int32_t ops_added_ = 0;  // ops appended so far, over all layers (program order of the forward)
  WeightSave linear_save_ = WeightSave::kFunctionalLinear;
  Status status_;
};

// ---- nn-style helpers: each mirrors one PyTorch module or functional as transformers uses it.

/// nn.Linear (or Conv1D): weight [out, in] (+ bias [out]); saves its input. |tied| reuses an
/// existing weight (tied LM head) instead of creating a parameter. The weight is marked with
/// the tracer's LinearWeightSave() (how the module keeps it for backward).
T Linear(Tracer& tr, const std::string& name, const T& x, int64_t out, bool bias,
         const T* tied_weight = nullptr);
/// nn.Embedding lookup of |ids|: weight [num, dim]; saves the indices.
T Embedding(Tracer& tr, const std::string& name, const T& ids, int64_t num, int64_t dim,
            T* weight_out = nullptr);
/// Embedding lookup reusing an existing table (tied encoder/decoder embeddings).
T EmbeddingShared(Tracer& tr, const std::string& name, const T& ids, const T& weight);
/// nn.LayerNorm over the last dim: saves input, mean and rstd (fp32 per row).
T LayerNorm(Tracer& tr, const std::string& name, const T& x, bool bias = true);
/// LlamaRMSNorm-style (fp32 upcast, weight * normed.to(dtype)).
T RmsNormLlama(Tracer& tr, const std::string& name, const T& x);
/// T5LayerNorm (variance in fp32, x * rsqrt promotes to fp32, cast back, weight *).
T RmsNormT5(Tracer& tr, const std::string& name, const T& x);
/// GemmaRMSNorm (all in fp32, output * (1 + weight.float()), cast back).
T RmsNormGemma(Tracer& tr, const std::string& name, const T& x);
/// nn.Dropout in train mode: no-op when p == 0, else saves a bool mask.
T Dropout(Tracer& tr, const std::string& name, const T& x, double p);
/// The activation function as transformers' ACT2FN implements it.
T Activate(Tracer& tr, const std::string& name, const T& x, Activation a);
/// a * b of two activations (saves both).
T MulSaveBoth(Tracer& tr, const std::string& name, const T& a, const T& b);
/// a + b (saves nothing).
T AddT(Tracer& tr, const std::string& name, const T& a, const T& b);
/// A copy of |x| into a new contiguous storage (transpose(...).contiguous(), cat, cast).
T Copy(Tracer& tr, const std::string& name, const T& x, DType dtype, bool permuted = false);

/// How a q/k/v tensor sits in memory; it decides which tensors the attention kernels copy and
/// so which storages stay alive (docs/activations.md, "attention").
enum class Layout {
  kBshd,   // its own storage laid out [b, s, heads, hd]: a transposed view of a projection, or
           // an elementwise result on one (Llama RoPE keeps the layout)
  kFused,  // a strided view into a fused q/k/v projection (GPT-2 c_attn, NeoX, BLOOM)
  kBhsd,   // a contiguous [b, heads, s, hd] tensor (after a RoPE cat, repeat_kv, broadcast)
};

/// Which SDPA kernel PyTorch 2.11 picks on an H100/H200 (cuDNN >= 9.15): cuDNN attention for
/// every case dsplan models except a float mask with a non-contiguous last dim (T5's permuted
/// position bias) or K/V with fewer heads than Q and no enable_gqa (Falcon-7B), which fall back
/// to the fp32 math path.
enum class SdpaBackend { kCudnn, kMath };

struct AttentionArgs {
  std::string name;
  T q, k, v;               // [b, heads, s_q, hd], [b, kv_heads, s_k, hd]
  Layout q_layout = Layout::kBshd;
  Layout k_layout = Layout::kBshd;
  Layout v_layout = Layout::kBshd;
  bool causal = true;
  double dropout = 0;      // attention-probability dropout in train mode
  /// Additive float mask or bias the kernel reads ([b or 1, h or 1, s_q, s_k]); SDPA saves it as
  /// attn_bias, eager adds it to the scores (nothing saved).
  const T* float_mask = nullptr;
  /// Eager only: a bias the score GEMM takes as its C (bias.baddbmm(q, k^T): BLOOM's ALiBi,
  /// [b * h, 1, s_k]), and a mask added to the scores (+ mask, broadcast as its shape says)
  /// instead of the generic scale-and-mask op.
  const T* score_bias = nullptr;
  const T* eager_mask = nullptr;
  /// The eager mask is a tensor that takes a gradient (T5's relative position bias): autograd
  /// sums the scores' gradient over the dimensions the mask broadcasts along (a reduction that
  /// reads the whole gradient), where a constant mask takes none.
  bool mask_takes_grad = false;
  SdpaBackend backend = SdpaBackend::kCudnn;
  bool eager_softmax_fp32 = true;  // eager: softmax(dtype=float32): fp32 probs saved, then cast
  bool eager_upcast_qk = false;    // eager: q and k cast to fp32 before the score matmul (GPT-J)
  /// Eager: scores -> tanh(scores / c) * c before the mask (Gemma 2's attn_logit_softcapping;
  /// the tanh saves its output). SDPA ignores it, as transformers 5.17's SDPA path does. 0: none.
  double softcap = 0;
};
/// Self/cross attention core: softmax(q k^T + mask) v with dropout, the SDPA or eager way.
/// Returns the context as [b, s_q, heads * hd] as the output projection reads it: shared with
/// the kernel output when that is already [b, s, h, d] in memory, else a transposed copy.
T Attention(Tracer& tr, const AttentionArgs& a);

/// Rotary embedding applied to the first |rotary_dim| dims of |x| ([b, h, s, hd]); returns the
/// new tensor (q*cos + rotate_half(q)*sin, concatenated with the pass-through part). |in| is how
/// |x| is laid out (a transposed view of a separate projection, a view into a fused one, or
/// contiguous): it decides which of PyTorch's kernels the eager ops run.
/// |cat|: the rotated part is concatenated with the pass-through part even when that is empty
/// (Phi-3's apply_rotary_pos_emb), so a full rotary also ends in a contiguous copy.
T Rotary(Tracer& tr, const std::string& name, const T& x, int64_t rotary_dim, const T& cos,
         const T& sin, Layout in = Layout::kBshd, bool cat = false);

/// The backward of a fused q|k|v projection split per head (view, transpose, chunk: GPT-NeoX):
/// the gradients' cat and the copy back to the projection's layout; no forward kernel.
void FusedQkvSplit(Tracer& tr, const std::string& name, const T& qkv);
/// The backward of |pieces| slices of a fused projection's last dim (Phi-3's q/k/v taken with
/// qkv[..., a:b]): each slice's gradient is a zero-filled tensor of the projection's size with
/// the slice copied in, and autograd sums them; no forward kernel.
void SlicedSplit(Tracer& tr, const std::string& name, const T& fused, int pieces);
/// The backward of chunk(2, dim=-1) of a fused projection (Phi-3's gate_up_proj): the two
/// gradients concatenated into one of the projection's size; no forward kernel.
void ChunkSplit(Tracer& tr, const std::string& name, const T& fused);

/// tanh(x / cap) * cap (Gemma 2's soft-capping): the division and the product save nothing, the
/// tanh saves its output; each makes a new tensor of |x|'s shape.
T SoftCap(Tracer& tr, const std::string& name, const T& x);

/// Cross entropy as transformers' ForCausalLMLoss does it (logits.float(), shift, CE) when
/// |upcast| is true, else nn.CrossEntropyLoss on the logits as they are.
void CrossEntropy(Tracer& tr, const std::string& name, const T& logits, bool upcast);

}  // namespace dsplan

#endif  // DSPLAN_SIMULATOR_TRACER_H_
