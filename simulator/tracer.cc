#include "simulator/tracer.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <utility>

#include <fmt/format.h>

#include "core/checked_math.h"

namespace dsplan {

Tracer::Tracer(const ModelSpec& spec, const RunShape& options, AttentionImpl attention)
    : spec_(spec), opt_(options), attention_(attention) {
  switch (opt_.precision) {
    case Precision::kBf16: act_dtype_ = DType::kBF16; break;
    case Precision::kFp16: act_dtype_ = DType::kF16; break;
    case Precision::kFp32: act_dtype_ = DType::kF32; break;
  }
}

void Tracer::Fail(const std::string& what) {
  if (status_.ok()) {
    status_ = Status::InvalidArgument(fmt::format(
        "{}: the size of {} overflows a 64-bit count; reduce micro-batch, sequence length or "
        "model sizes",
        spec_.name, what));
  }
}

int64_t Tracer::Numel(const Shape& dims, const std::string& what) {
  if (dims.overflowed()) {
    Fail(what);
    return 0;
  }
  int64_t r = 1;
  for (int64_t d : dims) {
    auto p = CheckedMul(r, d);
    if (!p || d < 0) {
      Fail(what);
      return 0;
    }
    r = *p;
  }
  return r;
}

void Tracer::PushUnique(std::vector<int>& v, int s) {
  if (std::find(v.begin(), v.end(), s) == v.end()) v.push_back(s);
}

void Tracer::BeginLayer(const std::string& name, LayerKind kind, bool checkpointable) {
  Layer l;
  l.name = name;
  l.kind = kind;
  l.checkpointed = checkpointable && opt_.gradient_checkpointing;
  layers_.push_back(std::move(l));
  checkpointable_.push_back(checkpointable);
  layer_state_.emplace_back();
}

T Tracer::Input(const std::string& name, Shape shape, DType dtype) {
  T t = New(name, std::move(shape), dtype);
  storages_[t.storage].input = true;
  storages_[t.storage].layer = -1;
  return t;
}

T Tracer::New(std::string name, Shape shape, DType dtype) {
  T t;
  t.numel = Numel(shape, name);
  t.shape = std::move(shape);
  t.dtype = dtype;
  auto b = CheckedMul(t.numel, DTypeBytes(dtype));
  if (!b) Fail(name);
  t.storage = static_cast<int>(storages_.size());
  Storage& s = storages_.emplace_back();  // in place: a Storage is a name and a whole Shape
  s.name = std::move(name);
  s.bytes = b.value_or(0);
  s.layer = static_cast<int>(layers_.size()) - 1;
  s.shape = t.shape;
  s.dtype = dtype;
  s.created = ops_added_;
  return t;
}

T Tracer::Param(std::string name, Shape shape) {
  T t = New(name, std::move(shape), act_dtype_);
  if (!layers_.empty()) {
    auto sum = CheckedAdd(layers_.back().params, t.numel);
    if (!sum) Fail(name);
    layers_.back().params = sum.value_or(0);
  }
  Storage& s = storages_[t.storage];
  s.category = TensorCategory::kParameter;
  s.param_index = static_cast<int>(params_.size());
  TensorSpec p;
  p.name = std::move(name);
  p.shape = t.shape.ToVector();
  p.dtype = act_dtype_;
  p.category = TensorCategory::kParameter;
  p.numel = t.numel;
  p.bytes = s.bytes;
  p.layer = s.layer;
  params_.push_back(std::move(p));
  return t;
}

void Tracer::MarkWeightSave(const T& w, WeightSave save) {
  if (w.storage < 0 || w.storage >= static_cast<int>(storages_.size())) return;
  const int i = storages_[w.storage].param_index;
  if (i < 0 || i >= static_cast<int>(params_.size())) return;
  // A transposed view kept regardless of the script outranks one that zero.Init removes.
  WeightSave& cur = params_[i].weight_save;
  if (static_cast<int>(save) > static_cast<int>(cur)) cur = save;
}

T Tracer::View(const T& t, Shape shape) {
  T v = t;
  v.shape = std::move(shape);
  v.numel = Numel(v.shape, storages_[t.storage].name);
  return v;
}

void Tracer::Save(const T& t) {
  if (layer_state_.empty() || t.storage < 0) return;
  const Storage& s = storages_[t.storage];
  if (s.category == TensorCategory::kParameter || s.input) return;  // not an activation
  PushUnique(layer_state_.back().saved, t.storage);
  Storage& st = storages_[t.storage];
  if (st.save_first < 0) st.save_first = ops_added_;
  st.save_last = ops_added_;
}

void Tracer::SetBackwardExtraBuffers(const T& t, int n) {
  if (t.storage < 0) return;
  storages_[t.storage].backward_extra_buffers = n;
}

void Tracer::CheckpointArg(const T& t) {
  if (layer_state_.empty() || t.storage < 0) return;
  const Storage& s = storages_[t.storage];
  if (s.category == TensorCategory::kParameter || s.input) return;
  PushUnique(layer_state_.back().ckpt_args, t.storage);
}

void Tracer::KeepAsOutput(const T& t) {
  if (layer_state_.empty()) return;
  PushUnique(layer_state_.back().outputs, t.storage);
}

void Tracer::AddOp(Op op) {
  ++ops_added_;
  Layer& l = layers_.back();
  l.fwd_flops += op.fwd_flops;
  l.bwd_flops += op.bwd_flops;
  l.fwd_bytes += op.fwd_bytes;
  l.bwd_bytes += op.bwd_bytes;
  l.ops.push_back(std::move(op));
}

Result<Workload> Tracer::Finish(bool gradient_checkpointing) const {
  return FinishImpl(*this, gradient_checkpointing);
}

Result<Workload> Tracer::FinishAndConsume(bool gradient_checkpointing) {
  return FinishImpl(*this, gradient_checkpointing);
}

template <class Self>
Result<Workload> Tracer::FinishImpl(Self& self, bool gradient_checkpointing) {
  // A non-const Tracer is spent: its tables move into the workload instead of being copied.
  constexpr bool kConsume = !std::is_const_v<Self>;
  auto take = [](auto& x) -> decltype(auto) {
    if constexpr (kConsume) {
      return std::move(x);
    } else {
      return static_cast<const std::remove_reference_t<decltype(x)>&>(x);
    }
  };
  const auto& storages_ = self.storages_;
  const auto& layer_state_ = self.layer_state_;
  const auto& checkpointable_ = self.checkpointable_;
  DSPLAN_RETURN_IF_ERROR(self.status_);
  Workload w;
  w.spec = self.spec_;
  w.shape = self.opt_;
  w.shape.gradient_checkpointing = gradient_checkpointing;
  int64_t param_bytes = 0;
  for (const TensorSpec& p : self.params_) param_bytes += p.bytes;
  std::vector<Layer> layers = take(self.layers_);  // this variant's copy
  for (size_t i = 0; i < layers.size(); ++i) {
    layers[i].checkpointed = checkpointable_[i] && gradient_checkpointing;
  }
  w.attention = self.attention_;
  w.tensors = take(self.params_);
  const int n = static_cast<int>(layers.size());

  // For each storage: the first layer whose ops save it (the view without checkpointing), the
  // first layer that keeps it alive until backward under the options (a checkpointed layer keeps
  // only its arguments; storages made inside it are rematerialized), and whether the model output
  // holds it.
  std::vector<int> saved_by(storages_.size(), -1), kept_by(storages_.size(), -1);
  std::vector<bool> is_output(storages_.size(), false);
  for (int li = 0; li < n; ++li) {
    const LayerState& ls = layer_state_[li];
    for (int s : ls.saved)
      if (saved_by[s] < 0) saved_by[s] = li;
    for (int s : layers[li].checkpointed ? ls.ckpt_args : ls.saved)
      if (kept_by[s] < 0) kept_by[s] = li;
    for (int s : ls.outputs) {
      is_output[s] = true;
      if (kept_by[s] < 0) kept_by[s] = li;
    }
    if (layers[li].checkpointed) {
      for (int s : ls.saved)
        if (storages_[s].layer == li) layers[li].recompute_bytes += storages_[s].bytes;
      layers[li].recompute_flops = layers[li].fwd_flops;
    }
  }
  for (size_t s = 0; s < storages_.size(); ++s) {
    const Storage& st = storages_[s];
    // Outputs count in saved_bytes too, so that it is the full no-checkpointing picture.
    const int saver = saved_by[s] >= 0 ? saved_by[s] : (is_output[s] ? kept_by[s] : -1);
    if (saver < 0 && kept_by[s] < 0) {
      // Made and freed inside its layer's forward.
      if (st.layer >= 0 && st.layer < n && st.category != TensorCategory::kParameter && !st.input) {
        layers[st.layer].fwd_transient_bytes =
            std::max(layers[st.layer].fwd_transient_bytes, st.bytes);
      }
      continue;
    }
    if (saver >= 0) layers[saver].saved_bytes += st.bytes;
    if (kept_by[s] >= 0) layers[kept_by[s]].activation_bytes += st.bytes;
    TensorSpec t;
    if constexpr (kConsume) {
      t.name = std::move(self.storages_[s].name);
      t.shape = st.shape.ToVector();
    } else {
      t.name = st.name;
      t.shape = st.shape.ToVector();
    }
    t.dtype = st.dtype;
    t.category = is_output[s] ? TensorCategory::kOutput : TensorCategory::kActivation;
    t.numel = st.bytes / DTypeBytes(st.dtype);
    t.bytes = st.bytes;
    t.layer = kept_by[s] >= 0 ? kept_by[s] : saver;
    t.recomputed = kept_by[s] < 0;
    t.backward_extra_buffers = st.backward_extra_buffers;
    t.produced_layer = st.layer;
    t.created = st.created;
    t.save_first = st.save_first;
    t.save_last = st.save_last;
    w.tensors.push_back(std::move(t));
  }

  for (const Layer& l : layers) {
    w.params += l.params;
    w.fwd_flops += l.fwd_flops;
    w.bwd_flops += l.bwd_flops;
    w.recompute_flops += l.recompute_flops;
    w.activation_bytes += l.activation_bytes;
    w.recompute_peak_bytes = std::max(w.recompute_peak_bytes, l.recompute_bytes);
  }
  w.param_bytes = param_bytes;
  w.flops_per_step = w.fwd_flops + w.bwd_flops + w.recompute_flops;
  w.layers = std::move(layers);
  return w;
}

// ---------------------------------------------------------------------------------------------
// nn helpers

namespace {

double B(const T& t) { return static_cast<double>(t.numel) * DTypeBytes(t.dtype); }

// NumPy/PyTorch broadcasting of two shapes (sizes of 1 stretch; missing leading dims are 1).
Shape Broadcast(const Shape& a, const Shape& b) {
  Shape out;
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) out.push_back(1);
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
    int64_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
    out[out.size() - 1 - i] = std::max(da, db);
  }
  return out;
}

Shape WithLast(Shape shape, int64_t last) {
  shape.back() = last;
  return shape;
}

// An elementwise op over |out| reading |inputs|; backward reads grad + saved, writes grads.
// |eager|: the kernels eager PyTorch runs for it (empty: one kernel each way, priced by kind).
void Elementwise(Tracer& tr, const std::string& name, OpKind kind, const T& out,
                 std::initializer_list<const T*> inputs, double flops_per_elem,
                 const EagerWork& eager = {}) {
  Op op;
  op.eager = eager;
  op.name = name;
  op.kind = kind;
  double in_bytes = 0;
  for (const T* t : inputs) in_bytes += B(*t);
  op.fwd_flops = flops_per_elem * out.numel;
  op.bwd_flops = 2 * flops_per_elem * out.numel;
  op.fwd_bytes = in_bytes + B(out);
  op.bwd_bytes = 2 * (in_bytes + B(out));
  tr.AddOp(std::move(op));
}

}  // namespace

T Linear(Tracer& tr, const std::string& name, const T& x, int64_t out, bool bias,
         const T* tied_weight) {
  const int64_t in = x.shape.back();
  T w = tied_weight ? *tied_weight : tr.Param(Cat(name, ".weight"), {out, in});
  tr.MarkWeightSave(w, tr.LinearWeightSave());
  if (bias) tr.Param(Cat(name, ".bias"), {out});
  T y = tr.New(Cat(name, ".out"), WithLast(x.shape, out));
  tr.Save(x);
  Op op;
  op.name = name;
  op.kind = OpKind::kGemm;
  op.m = x.rows();
  op.n = out;
  op.k = in;
  const double mnk = static_cast<double>(op.m) * op.n * op.k;
  const double mn = static_cast<double>(op.m) * op.n;
  op.fwd_flops = 2 * mnk + (bias ? mn : 0);
  op.bwd_flops = 4 * mnk + (bias ? mn : 0);
  const double e = DTypeBytes(x.dtype);
  const double traffic = e * (static_cast<double>(op.m) * op.k + static_cast<double>(op.k) * op.n + mn);
  op.fwd_bytes = traffic;
  op.bwd_bytes = 2 * traffic;
  // The bias gradient is a separate reduction of the output gradient over the tokens (aten::sum
  // in autograd's AddmmBackward): it reads dY once, at the streaming rate (3.6-3.9 TB/s measured
  // in pythia-1.4b's block, tools/probes/block_ops.py). The forward's bias is fused into the GEMM.
  if (bias) op.eager.Bwd(KernelClass::kStream, e * (mn + static_cast<double>(out)));
  tr.AddOp(std::move(op));
  return y;
}

T EmbeddingShared(Tracer& tr, const std::string& name, const T& ids, const T& weight) {
  Shape shape = ids.shape;
  shape.push_back(weight.shape.back());
  T y = tr.New(Cat(name, ".out"), shape);
  tr.Save(ids);  // embedding_backward needs the indices (model inputs are not activations)
  Op op;
  op.name = name;
  op.kind = OpKind::kEmbedding;
  op.fwd_bytes = B(ids) + 2 * B(y);
  op.bwd_bytes = B(ids) + 2 * B(y);  // scatter-add of the output gradient into the table
  op.bwd_flops = static_cast<double>(y.numel);
  tr.AddOp(std::move(op));
  return y;
}

T Embedding(Tracer& tr, const std::string& name, const T& ids, int64_t num, int64_t dim,
            T* weight_out) {
  T w = tr.Param(Cat(name, ".weight"), {num, dim});
  if (weight_out) *weight_out = w;
  return EmbeddingShared(tr, name, ids, w);
}

T LayerNorm(Tracer& tr, const std::string& name, const T& x, bool bias) {
  const int64_t d = x.shape.back();
  tr.Param(Cat(name, ".weight"), {d});
  if (bias) tr.Param(Cat(name, ".bias"), {d});
  T y = tr.New(Cat(name, ".out"), x.shape, x.dtype);
  T mean = tr.New(Cat(name, ".mean"), {x.rows()}, DType::kF32);
  T rstd = tr.New(Cat(name, ".rstd"), {x.rows()}, DType::kF32);
  tr.Save(x);
  tr.Save(mean);
  tr.Save(rstd);
  Op op;
  op.name = name;
  op.kind = OpKind::kNorm;
  op.fwd_flops = 8.0 * x.numel;
  op.bwd_flops = 16.0 * x.numel;
  op.fwd_bytes = B(x) + B(y);
  op.bwd_bytes = 3 * B(x);
  // One fused kernel forward; backward: the input gradient and the weight/bias reduction
  // (GammaBetaBackward), measured together as the norm class's backward rate.
  op.eager.Fwd(KernelClass::kNorm, op.fwd_bytes);
  op.eager.Bwd(KernelClass::kNorm, op.bwd_bytes);
  ++op.eager.bwd_kernels;
  tr.AddOp(std::move(op));
  return y;
}

namespace {

// The eager kernels of transformers' RMSNorms (LlamaRMSNorm, T5LayerNorm, GemmaRMSNorm) over
// |n| elements of |e| bytes: h = x.to(fp32); var = h.pow(2).mean(-1); h * rsqrt(var + eps);
// .to(x.dtype) and the weight multiply (Gemma: (1 + weight) in fp32, then the cast). Backward is
// autograd's: each op's gradient kernels plus the accumulation of h's two gradients.
EagerWork RmsNormEager(double n, double e, bool fp32_weight_mul) {
  const bool cast = e < 4;
  EagerWork w;
  if (cast) w.Fwd(KernelClass::kCastUp, n * (e + 4));      // x.to(float32)
  w.Fwd(KernelClass::kStream, 8 * n);                       // pow(2)
  w.Fwd(KernelClass::kReduce, 4 * n);                       // mean(-1, keepdim)
  w.Fwd(KernelClass::kStream, 0);                           // + eps
  w.Fwd(KernelClass::kStream, 0);                           // rsqrt
  w.Fwd(KernelClass::kStream, 8 * n);                       // h * rsqrt
  if (fp32_weight_mul) w.Fwd(KernelClass::kStream, 8 * n);  // * (1 + weight) in fp32
  if (cast) w.Fwd(KernelClass::kCastDown, n * (4 + e));     // .to(input dtype)
  if (!fp32_weight_mul) w.Fwd(KernelClass::kStream, 2 * n * e);  // weight * h
  const double we = fp32_weight_mul ? 4 : e;
  w.Bwd(KernelClass::kStream, 2 * n * we);                  // grad * weight
  w.Bwd(KernelClass::kStream, 3 * n * we);                  // grad * h (weight gradient) ...
  w.Bwd(KernelClass::kReduce, n * we);                      // ... summed over rows
  if (cast) w.Bwd(KernelClass::kCastUp, n * (e + 4));       // .to() backward
  w.Bwd(KernelClass::kStream, 8 * n);                       // grad * rsqrt
  w.Bwd(KernelClass::kStream, 12 * n);                      // grad * h ...
  w.Bwd(KernelClass::kReduce, 4 * n);                       // ... summed for rsqrt's gradient
  w.Bwd(KernelClass::kStream, 4 * n);                       // mean backward (expand / d)
  w.Bwd(KernelClass::kStream, 8 * n);                       // pow backward: 2 * h ...
  w.Bwd(KernelClass::kStream, 12 * n);                      // ... * grad
  w.Bwd(KernelClass::kStream, 12 * n);                      // h's two gradients accumulated
  if (cast) w.Bwd(KernelClass::kCastDown, n * (4 + e));     // .to(float32) backward
  return w;
}

// The Llama and T5 RMSNorms differ only in T5's `x * rsqrt` reading the bf16 input (promoting to
// fp32), which saves that input too.
T RmsNormFp32Variance(Tracer& tr, const std::string& name, const T& x, bool saves_input) {
  const int64_t d = x.shape.back();
  tr.Param(Cat(name, ".weight"), {d});
  // hidden_states.to(float32): a copy unless already fp32; saved by pow(2) (and by the mul).
  T h32 = x.dtype == DType::kF32 ? x : tr.New(Cat(name, ".x_fp32"), x.shape, DType::kF32);
  T r = tr.New(Cat(name, ".rsqrt"), {x.rows(), 1}, DType::kF32);
  T n32 = tr.New(Cat(name, ".normed_fp32"), x.shape, DType::kF32);
  // .to(input_dtype): a copy unless fp32; saved by weight * normed.
  T n = x.dtype == DType::kF32 ? n32 : tr.New(Cat(name, ".normed"), x.shape, x.dtype);
  T y = tr.New(Cat(name, ".out"), x.shape, x.dtype);
  tr.Save(h32);
  if (saves_input) tr.Save(x);
  tr.Save(r);
  tr.Save(n);
  Elementwise(tr, name, OpKind::kNorm, y, {&x}, 6.0,
              RmsNormEager(static_cast<double>(x.numel), DTypeBytes(x.dtype), false));
  return y;
}

}  // namespace

T RmsNormLlama(Tracer& tr, const std::string& name, const T& x) {
  return RmsNormFp32Variance(tr, name, x, false);
}

T RmsNormT5(Tracer& tr, const std::string& name, const T& x) {
  return RmsNormFp32Variance(tr, name, x, true);
}

T RmsNormGemma(Tracer& tr, const std::string& name, const T& x) {
  const int64_t d = x.shape.back();
  tr.Param(Cat(name, ".weight"), {d});
  T x32 = x.dtype == DType::kF32 ? x : tr.New(Cat(name, ".x_fp32"), x.shape, DType::kF32);
  T r = tr.New(Cat(name, ".rsqrt"), {x.rows(), 1}, DType::kF32);
  T n32 = tr.New(Cat(name, ".normed_fp32"), x.shape, DType::kF32);
  T y32 = tr.New(Cat(name, ".scaled_fp32"), x.shape, DType::kF32);
  T y = x.dtype == DType::kF32 ? y32 : tr.New(Cat(name, ".out"), x.shape, x.dtype);
  T one_plus_w = tr.New(Cat(name, ".one_plus_weight"), {d}, DType::kF32);  // (1 + weight.float())
  tr.Save(x32);
  tr.Save(r);
  tr.Save(n32);
  tr.Save(one_plus_w);
  Elementwise(tr, name, OpKind::kNorm, y, {&x}, 7.0,
              RmsNormEager(static_cast<double>(x.numel), DTypeBytes(x.dtype), true));
  return y;
}

T Dropout(Tracer& tr, const std::string& name, const T& x, double p) {
  if (p <= 0) return x;  // F.dropout with p == 0 returns its input (no kernel, no mask)
  T mask = tr.New(Cat(name, ".mask"), x.shape, DType::kBool);
  T y = tr.New(Cat(name, ".out"), x.shape, x.dtype);
  tr.Save(mask);
  // Fused: reads x, writes y and the bool mask; backward reads grad and mask, writes one grad.
  EagerWork w;
  w.Fwd(KernelClass::kDropout, B(x) + B(y) + B(mask));
  w.Bwd(KernelClass::kDropout, 2 * B(y) + B(mask));
  Elementwise(tr, name, OpKind::kDropout, y, {&x}, 2.0, w);
  return y;
}

T Activate(Tracer& tr, const std::string& name, const T& x, Activation a) {
  switch (a) {
    case Activation::kRelu: {
      T y = tr.New(Cat(name, ".out"), x.shape, x.dtype);
      tr.Save(y);  // threshold_backward uses the result
      Elementwise(tr, name, OpKind::kActivation, y, {&x}, 1.0);
      return y;
    }
    case Activation::kBloomGelu: {
      // transformers' BloomGelu in training mode is GeLUFunction, a Python autograd Function
      // that saves only x. Forward, bloom_gelu_forward as tensor ops: x * 0.5, x * x, * 0.044715,
      // 1 +, 0.79788456 * x, the product, tanh, 1.0 +, the final product (9 kernels).
      // Backward, bloom_gelu_back recomputes tanh from x (6 kernels), builds ff (11) and
      // multiplies by the gradient (1). Unary ops move 2 B(x), binary ones 3 B(x).
      T y = tr.New(Cat(name, ".out"), x.shape, x.dtype);
      tr.Save(x);
      const double b = B(x);
      EagerWork w;
      for (double k : {2.0, 3.0, 2.0, 2.0, 2.0, 3.0, 2.0, 2.0, 3.0}) w.Fwd(KernelClass::kStream, k * b);
      for (double k : {3.0, 2.0, 2.0, 2.0, 3.0, 2.0,                              // tanh_out
                       2.0, 3.0, 2.0, 3.0, 2.0, 2.0, 3.0, 3.0, 2.0, 2.0, 3.0,  // ff
                       3.0}) {                                                 // ff * g
        w.Bwd(KernelClass::kStream, k * b);
      }
      Elementwise(tr, name, OpKind::kActivation, y, {&x}, 9.0, w);
      return y;
    }
    case Activation::kGelu:
    case Activation::kGeluTanh:
    case Activation::kSilu: {
      T y = tr.New(Cat(name, ".out"), x.shape, x.dtype);
      tr.Save(x);
      // One fused kernel each way: backward reads grad and x, writes the input gradient.
      EagerWork w;
      w.Fwd(KernelClass::kActivation, 2 * B(x));
      w.Bwd(KernelClass::kActivation, 3 * B(x));
      Elementwise(tr, name, OpKind::kActivation, y, {&x}, 8.0, w);
      return y;
    }
    case Activation::kGeluNew: {
      // 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))) as Python tensor ops:
      // pow saves x; tanh saves its output t; the final mul saves h = 0.5*x and u = 1 + t.
      T t = tr.New(Cat(name, ".tanh"), x.shape, x.dtype);
      T h = tr.New(Cat(name, ".half_x"), x.shape, x.dtype);
      T u = tr.New(Cat(name, ".one_plus_tanh"), x.shape, x.dtype);
      T y = tr.New(Cat(name, ".out"), x.shape, x.dtype);
      tr.Save(x);
      tr.Save(t);
      tr.Save(h);
      tr.Save(u);
      // Eight Python tensor ops forward: pow, mul, add, mul, tanh, add, mul (0.5 * x), mul;
      // backward, autograd's kernels for each and the three accumulations into x's gradient.
      const double b = B(x);
      EagerWork w;
      for (double k : {2.0, 2.0, 3.0, 2.0, 2.0, 2.0, 2.0, 3.0}) w.Fwd(KernelClass::kStream, k * b);
      for (double k : {3.0, 3.0, 3.0, 2.0, 2.0, 2.0, 3.0, 2.0, 3.0, 3.0}) w.Bwd(KernelClass::kStream, k * b);
      Elementwise(tr, name, OpKind::kActivation, y, {&x}, 9.0, w);
      return y;
    }
    case Activation::kGeluFast: {
      // 0.5 * x * (1 + tanh(x * 0.7978845608 * (1 + 0.044715 * x * x))): mul(c, x) saves c and
      // x; mul(a, d) saves a and d; tanh saves t; the final mul saves h and u.
      std::vector<T> saved;
      for (const char* part : {".c", ".a", ".d", ".tanh", ".half_x", ".one_plus_tanh"})
        saved.push_back(tr.New(name + part, x.shape, x.dtype));
      T y = tr.New(Cat(name, ".out"), x.shape, x.dtype);
      tr.Save(x);
      for (const T& s : saved) tr.Save(s);
      // Ten Python tensor ops forward (four muls, add, mul, tanh, add, mul, mul); backward,
      // autograd's kernels for each and the accumulations into x's gradient.
      const double b = B(x);
      EagerWork w;
      for (double k : {2.0, 3.0, 2.0, 2.0, 3.0, 3.0, 2.0, 2.0, 2.0, 3.0}) w.Fwd(KernelClass::kStream, k * b);
      for (int i = 0; i < 7; ++i) w.Bwd(KernelClass::kStream, 3.0 * b);
      for (int i = 0; i < 4; ++i) w.Bwd(KernelClass::kStream, 2.0 * b);
      Elementwise(tr, name, OpKind::kActivation, y, {&x}, 10.0, w);
      return y;
    }
  }
  return x;
}

T MulSaveBoth(Tracer& tr, const std::string& name, const T& a, const T& b) {
  T y = tr.New(Cat(name, ".out"), Broadcast(a.shape, b.shape), a.dtype);
  tr.Save(a);
  tr.Save(b);
  // Backward: grad * b and grad * a, one kernel each.
  const double bytes = B(a) + B(b) + B(y);
  EagerWork w;
  w.Fwd(KernelClass::kStream, bytes);
  w.Bwd(KernelClass::kStream, 3 * B(y));
  w.Bwd(KernelClass::kStream, 3 * B(y));
  Elementwise(tr, name, OpKind::kElementwise, y, {&a, &b}, 1.0, w);
  return y;
}

T AddT(Tracer& tr, const std::string& name, const T& a, const T& b) {
  T y = tr.New(Cat(name, ".out"), Broadcast(a.shape, b.shape), a.dtype);
  // Backward passes the gradient to both inputs without a kernel; where the two branches
  // meet again, autograd adds their gradients: one add.
  EagerWork w;
  w.Fwd(KernelClass::kStream, B(a) + B(b) + B(y));
  w.Bwd(KernelClass::kStream, 3 * B(y));
  Elementwise(tr, name, OpKind::kElementwise, y, {&a, &b}, 1.0, w);
  return y;
}

T Copy(Tracer& tr, const std::string& name, const T& x, DType dtype, bool permuted) {
  T y = tr.New(name, x.shape, dtype);
  // A cast (or a layout copy); backward converts the gradient back. Out of a permuted view
  // (|permuted|) the forward copy reads strided memory at the permuted-copy rate; its backward
  // is a view (the gradient's copy is priced as the cast's, if any).
  const double bytes = B(x) + B(y);
  const KernelClass up = DTypeBytes(dtype) > DTypeBytes(x.dtype)   ? KernelClass::kCastUp
                         : DTypeBytes(dtype) < DTypeBytes(x.dtype) ? KernelClass::kCastDown
                                                                   : KernelClass::kStream;
  const KernelClass down = up == KernelClass::kCastUp     ? KernelClass::kCastDown
                           : up == KernelClass::kCastDown ? KernelClass::kCastUp
                                                          : KernelClass::kStream;
  EagerWork w;
  w.Fwd(permuted ? KernelClass::kPermuteCopy : up, bytes);
  w.Bwd(down, bytes);
  Elementwise(tr, name, OpKind::kElementwise, y, {&x}, 0.0, w);
  return y;
}

T Rotary(Tracer& tr, const std::string& name, const T& x, int64_t rotary_dim, const T& cos,
         const T& sin, Layout in, bool cat) {
  // q * cos + rotate_half(q) * sin: the muls save cos and sin (q's grad needs them; they do not
  // require grad, so q is not saved); slices, neg and cat save nothing.
  tr.Save(cos);
  tr.Save(sin);
  T y = tr.New(Cat(name, ".out"), x.shape, x.dtype);
  // The eager kernels of transformers' apply_rotary_pos_emb, each in the kernel class its
  // operands' layout sends it to (measured op by op: tools/probes/rotary_kernels.py,
  // docs/stack-costs.md section 8). b: bytes of the rotated part; B: of the whole tensor.
  // PyTorch vectorizes an elementwise op only when every operand is contiguous in one layout:
  // q arrives as a transposed view of its projection (|in| kBshd or kFused) or contiguous
  // (kBhsd); the rotated part of a partial rotary is a slice of it either way.
  const int64_t hd = x.shape.back();
  const double r = rotary_dim > 0 && rotary_dim < hd ? static_cast<double>(rotary_dim) / hd : 1.0;
  const double whole = B(x), b = whole * r;
  const bool partial = r < 1 || cat;         // ends in a cat with the pass-through part
  const bool strided = in != Layout::kBhsd;  // a transposed view of the projection
  EagerWork w;
  // Forward: x_rot * cos (broadcast cos; strided when x_rot is a slice or a transposed view),
  // neg of one half (a slice), cat(-x2, x1) (rotate_half), * sin (broadcast), the add (the
  // first product keeps x's layout: mixed with the contiguous second one when x is strided),
  // and for a partial rotary the cat of the rotated part with the pass-through slice.
  w.Fwd(partial || strided ? KernelClass::kStridedMul : KernelClass::kBroadcast, 2.0 * b);
  w.Fwd(KernelClass::kStridedMul, b);
  w.Fwd(KernelClass::kRotateHalf, 2.0 * b);
  w.Fwd(KernelClass::kBroadcast, 2.0 * b);
  w.Fwd(strided ? KernelClass::kMixedLayout : KernelClass::kStream, 3.0 * b);
  if (partial) w.Fwd(KernelClass::kCatStrided, 2.0 * whole);
  // Backward (autograd): the gradient times cos and times sin (broadcast), neg, the two half
  // slices' gradients (zero-filled, then the half copied into its slice), the three
  // contributions to x_rot's gradient accumulated (two adds, mixed layouts when x is strided);
  // for a partial rotary the rotated and pass-through slices' gradients (zero-filled whole,
  // copied in) and their sum; the gradient of a transposed view of a separate projection is
  // copied back to the projection's layout (a fused projection's split is FusedQkvSplit's).
  w.Bwd(KernelClass::kBroadcast, 2.0 * b);
  w.Bwd(KernelClass::kBroadcast, 2.0 * b);
  w.Bwd(KernelClass::kStridedMul, b);
  for (int i = 0; i < 2; ++i) {
    w.Bwd(KernelClass::kStream, b);
    w.Bwd(KernelClass::kStridedMul, b);
    w.Bwd(strided ? KernelClass::kMixedLayout : KernelClass::kStream, 3.0 * b);
  }
  if (partial) {
    w.Bwd(KernelClass::kStream, 2.0 * whole);
    w.Bwd(KernelClass::kStridedMul, 2.0 * whole);
    w.Bwd(KernelClass::kStream, 3.0 * whole);
  }
  if (in == Layout::kBshd) w.Bwd(KernelClass::kPermuteCopy, 2.0 * whole);
  Elementwise(tr, name, OpKind::kElementwise, y, {&x}, 3.0, w);
  return y;
}

void FusedQkvSplit(Tracer& tr, const std::string& name, const T& qkv) {
  // A fused projection viewed per head, transposed and chunked into q, k and v (GPT-NeoX) has
  // no forward kernel; its backward concatenates the three gradients (pieces strided as the
  // attention and rotary return them: the element-wise cat path) and copies the result back to
  // the projection's [b, s, heads, 3 hd] layout. Measured in pythia-1.4b's block (tools/probes/
  // block_ops.py): the cat at 0.80 TB/s, the copy at 1.16 over 780 MB each.
  EagerWork w;
  w.Bwd(KernelClass::kCatStrided, 2.0 * B(qkv));
  w.Bwd(KernelClass::kPermuteCopy, 2.0 * B(qkv));
  Elementwise(tr, name, OpKind::kElementwise, qkv, {&qkv}, 0.0, w);
}

void SlicedSplit(Tracer& tr, const std::string& name, const T& fused, int pieces) {
  // SliceBackward per piece: zeros of the whole (written) and the piece copied in (read and
  // written); then the pieces' gradients summed, one add fewer than pieces.
  EagerWork w;
  for (int i = 0; i < pieces; ++i) {
    w.Bwd(KernelClass::kStream, B(fused));
    w.Bwd(KernelClass::kStridedMul, 2.0 * B(fused) / pieces);
  }
  for (int i = 1; i < pieces; ++i) w.Bwd(KernelClass::kStream, 3.0 * B(fused));
  Elementwise(tr, name, OpKind::kElementwise, fused, {&fused}, 0.0, w);
}

void ChunkSplit(Tracer& tr, const std::string& name, const T& fused) {
  EagerWork w;
  w.Bwd(KernelClass::kCatStrided, 2.0 * B(fused));
  Elementwise(tr, name, OpKind::kElementwise, fused, {&fused}, 0.0, w);
}

namespace {

// The kernel input as the attention op sees it: fused views and (for eager matmuls) anything
// not contiguous in [b, h, s, d] is copied first; |copy| says whether it must be.
T KernelInput(Tracer& tr, const std::string& name, const T& x, bool copy, DType dtype) {
  if (!copy && x.dtype == dtype) return x;
  return Copy(tr, name, x, dtype, copy);
}

Op AttentionGemm(const std::string& name, OpKind kind, int64_t batch, int64_t m, int64_t n,
                 int64_t k, double bytes) {
  Op op;
  op.name = name;
  op.kind = kind;
  op.m = m;
  op.n = n;
  op.k = k;
  op.batch = batch;
  op.fwd_flops = 2.0 * batch * m * n * k;
  op.bwd_flops = 2 * op.fwd_flops;
  op.fwd_bytes = bytes;
  op.bwd_bytes = 2 * bytes;
  return op;
}

}  // namespace

T Attention(Tracer& tr, const AttentionArgs& a) {
  const int64_t b = a.q.dim(0), h = a.q.dim(1), sq = a.q.dim(2), hd = a.q.dim(3);
  const int64_t sk = a.k.dim(2), hdv = a.v.dim(3);
  const double bh = static_cast<double>(b) * h;
  const double qk_flops = 2.0 * bh * sq * sk * hd;
  const double pv_flops = 2.0 * bh * sq * sk * hdv;
  const DType e = a.q.dtype;
  if (tr.sdpa() && a.backend == SdpaBackend::kCudnn) {
    // cuDNN SDPA saves q, k, v, its output, the fp32 logsumexp [b, h, s, 1], the Philox seed and
    // offset (dropout regenerates its mask) and attn_bias when a mask is passed. Q, K and V that
    // are strided views into a fused projection (last dimension contiguous) are taken as they
    // are, not copied, so a saved view keeps the whole fused projection alive. Measured on the
    // H200 (PyTorch 2.11): GPT-2's fused q|k|v saves 3 [b, s, h] tensors per block, not 5, and
    // GPT-NeoX's strided V keeps all 3 alive (docs/validation/deepspeed/README.md).
    T q = a.q;
    T k = KernelInput(tr, Cat(a.name, ".k_contiguous"), a.k, false, e);
    T v = KernelInput(tr, Cat(a.name, ".v_contiguous"), a.v, false, e);
    // The output takes Q's memory layout: [b, s, h, d] unless Q is contiguous [b, h, s, d].
    T out = tr.New(Cat(a.name, ".sdpa_out"), {b, sq, h, hdv}, e);
    T lse = tr.New(Cat(a.name, ".logsumexp"), {b, h, sq, 1}, DType::kF32);
    T philox = tr.New(Cat(a.name, ".philox_seed_offset"), {2}, DType::kI64);
    for (const T* t : {&q, &k, &v, &out, &lse, &philox}) tr.Save(*t);
    if (a.float_mask) tr.Save(*a.float_mask);
    Op op = AttentionGemm(Cat(a.name, ".sdpa"), OpKind::kAttention, b * h, sq, sk, hd, 0);
    op.fwd_flops = qk_flops + pv_flops;
    op.bwd_flops = 2 * op.fwd_flops;
    // SDPA is told is_causal only when no mask is passed (transformers' sdpa_attention_forward:
    // `is_causal = q_len > 1 and attention_mask is None and ...`; Falcon's own SDPA call the
    // same): with a mask the kernel computes every score of the square and reads the bias, so
    // it runs, and is priced, as a non-causal kernel (docs/simulator.md, Time).
    op.causal = a.causal && a.float_mask == nullptr;
    op.dropout = a.dropout > 0;
    op.fwd_bytes = B(q) + B(k) + B(v) + B(out) + (a.float_mask ? B(*a.float_mask) : 0);
    op.bwd_bytes = 2 * op.fwd_bytes + B(out);
    tr.AddOp(std::move(op));
    if (a.q_layout == Layout::kBhsd) {
      return tr.View(Copy(tr, Cat(a.name, ".context_merged"), out, e, /*permuted=*/true),
                     {b, sq, h * hdv});
    }
    return tr.View(out, {b, sq, h * hdv});
  }
  // Eager attention, and SDPA's math fallback (which upcasts bf16/fp16 inputs to fp32 and runs
  // the same matmul-softmax-dropout-matmul sequence). Matmuls save contiguous copies of operands
  // that are transposed views; K^T is always one.
  const bool math = tr.sdpa();
  const DType work = (math || a.eager_upcast_qk) ? DType::kF32 : e;
  const DType vwork = math ? DType::kF32 : e;
  T q = KernelInput(tr, Cat(a.name, ".q_matmul"), a.q, a.q_layout != Layout::kBhsd, work);
  T k = KernelInput(tr, Cat(a.name, ".k_matmul"), a.k, true, work);
  T v = KernelInput(tr, Cat(a.name, ".v_matmul"), a.v, a.v_layout != Layout::kBhsd, vwork);
  if (k.dim(1) != h) k = tr.New(Cat(a.name, ".k_heads"), {b, h, sk, hd}, work);  // K/V broadcast
  if (v.dim(1) != h) v = tr.New(Cat(a.name, ".v_heads"), {b, h, sk, hdv}, vwork);
  T scores = tr.New(Cat(a.name, ".scores"), {b, h, sq, sk}, work);
  tr.Save(q);
  tr.Save(k);
  {
    Op qk = AttentionGemm(Cat(a.name, ".qk"), OpKind::kBatchedGemm, b * h, sq, sk, hd,
                          B(q) + B(k) + B(scores));
    qk.fp32 = work == DType::kF32;
    tr.AddOp(std::move(qk));
  }
  if (a.score_bias) {
    // bias.baddbmm(q, k^T, beta, alpha): the bias ([b*h, 1, s_k]) is expanded into the output
    // (a copy from a stride-0 view) and the GEMM reads it back as C; the scale is its alpha.
    // Backward: the bias takes no gradient, q's and k's come from the GEMM's backward.
    Op op;
    op.name = Cat(a.name, ".bias_baddbmm");
    op.kind = OpKind::kElementwise;
    op.fwd_bytes = 2 * B(scores);
    op.eager.Fwd(KernelClass::kBroadcast, op.fwd_bytes);
    tr.AddOp(std::move(op));
  }
  if (a.softcap > 0) scores = SoftCap(tr, Cat(a.name, ".softcap"), scores);
  T masked = tr.New(Cat(a.name, ".masked_scores"), scores.shape, scores.dtype);
  if (a.eager_mask) {
    // scores + mask: the mask ([b, 1, s_q, s_k]) broadcasts over heads, so PyTorch runs the
    // unvectorized elementwise kernel. Backward: the scores' gradient is the incoming one (no
    // kernel); the mask takes none. SDPA's math path does the same in place (attn.add_(mask),
    // after converting a bool mask to a float one) on its fp32 scores.
    const T& m = *a.eager_mask;
    const bool broadcast = m.numel < scores.numel;
    Op op;
    op.name = Cat(a.name, ".mask_add");
    op.kind = OpKind::kElementwise;
    op.fwd_bytes = B(scores) + B(m) + B(masked);
    op.eager.Fwd(broadcast ? KernelClass::kBroadcast : KernelClass::kStream, op.fwd_bytes);
    if (a.mask_takes_grad && broadcast) {
      // grad.sum_to_size(mask's shape) in the scores' dtype (fp32 on the math path), then the
      // cast to the mask's dtype (small: the mask is the reduced shape).
      op.bwd_bytes = B(scores) + static_cast<double>(m.numel) * DTypeBytes(scores.dtype);
      op.eager.Bwd(KernelClass::kReduce, op.bwd_bytes);
    } else if (a.mask_takes_grad && m.dtype != scores.dtype) {
      // A full-size mask takes the scores' gradient as it is, cast to its own dtype.
      op.bwd_bytes = B(scores) + B(m);
      op.eager.Bwd(KernelClass::kCastDown, op.bwd_bytes);
    }
    tr.AddOp(std::move(op));
  } else {
    Elementwise(tr, Cat(a.name, ".scale_mask"), OpKind::kElementwise, masked, {&scores}, 2.0);
  }
  const DType sm_dtype = (math || a.eager_softmax_fp32) ? DType::kF32 : masked.dtype;
  T probs = tr.New(Cat(a.name, ".probs"), scores.shape, sm_dtype);
  tr.Save(probs);
  tr.SetBackwardExtraBuffers(probs, 1);  // CUDA's softmax backward: tmp = grad * output
  {
    Op op;
    op.name = Cat(a.name, ".softmax");
    op.kind = OpKind::kSoftmax;
    op.fwd_flops = 5.0 * probs.numel;
    op.bwd_flops = 4.0 * probs.numel;
    op.fwd_bytes = B(masked) + B(probs);
    op.bwd_bytes = 3 * B(probs);
    op.eager.Fwd(KernelClass::kSoftmax, op.fwd_bytes);
    op.eager.Bwd(KernelClass::kSoftmax, op.bwd_bytes);
    tr.AddOp(std::move(op));
  }
  if (math && e != DType::kF32) {
    // The math path returns (matmul(attn, v).to(dtype), attn.to(dtype)): the attention weights
    // are cast back to the input dtype as a second output even though SDPA's caller drops it
    // (PyTorch 2.11, _scaled_dot_product_attention_math). One cast kernel in forward, nothing in
    // backward (the output takes no gradient); the copy is freed at once (not in the memory
    // model). Measured in falcon-7b's block at micro-batch 9: 0.92 ms, a vectorized
    // bfloat16_copy_kernel (docs/stack-costs.md section 8b).
    Op op;
    op.name = Cat(a.name, ".weights_cast");
    op.kind = OpKind::kElementwise;
    op.fwd_bytes = B(probs) + static_cast<double>(probs.numel) * DTypeBytes(e);
    op.eager.Fwd(KernelClass::kCastDown, op.fwd_bytes);
    tr.AddOp(std::move(op));
  }
  T p = probs;
  if (sm_dtype != v.dtype) p = Copy(tr, Cat(a.name, ".probs_cast"), probs, v.dtype);
  p = Dropout(tr, Cat(a.name, ".attn_dropout"), p, a.dropout);
  T ctx = tr.New(Cat(a.name, ".context"), {b, h, sq, hdv}, v.dtype);
  tr.Save(p);
  tr.Save(v);
  Op pv = AttentionGemm(Cat(a.name, ".pv"), OpKind::kBatchedGemm, b * h, sq, hdv, sk,
                        B(p) + B(v) + B(ctx));
  pv.fp32 = v.dtype == DType::kF32;
  tr.AddOp(std::move(pv));
  // transpose(1, 2).contiguous() (and the cast back from fp32 on the math path): a real copy.
  T merged = Copy(tr, Cat(a.name, ".context_merged"), ctx, e, /*permuted=*/true);
  return tr.View(merged, {b, sq, h * hdv});
}

T SoftCap(Tracer& tr, const std::string& name, const T& x) {
  // x / cap: backward grad / cap.
  T d = tr.New(Cat(name, ".div"), x.shape, x.dtype);
  EagerWork wd;
  wd.Fwd(KernelClass::kStream, B(x) + B(d));
  wd.Bwd(KernelClass::kStream, 2.0 * B(d));
  Elementwise(tr, Cat(name, ".div"), OpKind::kElementwise, d, {&x}, 1.0, wd);
  // tanh: backward grad * (1 - y^2) from the saved output.
  T t = tr.New(Cat(name, ".tanh"), x.shape, x.dtype);
  tr.Save(t);
  EagerWork wt;
  wt.Fwd(KernelClass::kStream, B(d) + B(t));
  wt.Bwd(KernelClass::kStream, 3.0 * B(t));
  Elementwise(tr, Cat(name, ".tanh"), OpKind::kActivation, t, {&d}, 4.0, wt);
  // * cap.
  T y = tr.New(Cat(name, ".mul"), x.shape, x.dtype);
  EagerWork wm;
  wm.Fwd(KernelClass::kStream, B(t) + B(y));
  wm.Bwd(KernelClass::kStream, 2.0 * B(y));
  Elementwise(tr, Cat(name, ".mul"), OpKind::kElementwise, y, {&t}, 1.0, wm);
  return y;
}

void CrossEntropy(Tracer& tr, const std::string& name, const T& logits, bool upcast) {
  T src = logits;
  if (upcast && logits.dtype != DType::kF32) {
    // logits.float(): a transient fp32 copy (log_softmax saves its output, not its input).
    src = Copy(tr, Cat(name, ".logits_fp32"), logits, DType::kF32);
  }
  T logp = tr.New(Cat(name, ".log_softmax"), src.shape, src.dtype);
  // nll_loss saves the log-probabilities, the int64 targets (the shifted label copy, or the
  // labels themselves) and the fp32 total weight.
  T target = tr.New(Cat(name, ".target"), {src.rows()}, DType::kI64);
  T total_weight = tr.New(Cat(name, ".total_weight"), {1}, DType::kF32);
  tr.Save(logp);
  tr.Save(target);
  tr.Save(total_weight);
  Op op;
  op.name = name;
  op.kind = OpKind::kLoss;
  op.fwd_flops = 5.0 * src.numel;
  op.bwd_flops = 4.0 * src.numel;
  op.fwd_bytes = B(src) + B(logp);
  op.bwd_bytes = 3 * B(logp);
  // log_softmax and nll_loss (a gather); backward: nll_loss_backward zero-fills a dense fp32
  // gradient and scatters into it, then log_softmax_backward.
  op.eager.Fwd(KernelClass::kLogSoftmax, op.fwd_bytes);
  op.eager.Fwd(KernelClass::kStream, 0);
  op.eager.Bwd(KernelClass::kStream, B(logp));
  op.eager.Bwd(KernelClass::kStream, 0);
  op.eager.Bwd(KernelClass::kLogSoftmax, op.bwd_bytes);
  tr.AddOp(std::move(op));
}

}  // namespace dsplan
