// The host executor (host_executor.h; design and DeepSpeed facts in docs/runtime-host.md).
//
// Layout of this file: bf16 and the accounting allocator; the GPT-2 model (fp32 forward/backward
// per Workload layer); the data-parallel rank with DeepSpeed's optimizer wrappers (basic,
// BF16_Optimizer, ZeRO 1/2, ZeRO 3) and offload; gathering the ranks' results; RunHostTraining.
// The collectives are a Comm (runtime/comm.h): threads of this process, or MPI processes.
#include "runtime/reference_trainers/host_executor.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <thread>
#include <type_traits>

#include <fmt/format.h>

#include "runtime/comm.h"
#include "runtime/cpu_kernels/cpu_adam.h"

namespace dsplan {
namespace {

// ---------------------------------------------------------------------------------------------
// bf16 (round to nearest even) and the 16-bit storage type of a plan.

uint16_t FloatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN
  const uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;
  return static_cast<uint16_t>(u >> 16);
}
float Bf16ToFloat(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
int Idx(MemSpace s) { return static_cast<int>(s); }
int Idx(MemCategory c) { return static_cast<int>(c); }

// ---------------------------------------------------------------------------------------------
// Accounting allocator: every buffer of a rank is a Buf tagged with (space, category); the
// accountant keeps the current bytes and the peaks per (space, category).

class Accountant {
 public:
  void Add(MemSpace s, MemCategory c, int64_t bytes) {
    int64_t& cur = cur_[Idx(s)][Idx(c)];
    cur += bytes;
    if (cur > step_peak_[Idx(s)][Idx(c)]) step_peak_[Idx(s)][Idx(c)] = cur;
    if (in_micro_ && cur > micro_peak_[Idx(s)][Idx(c)]) micro_peak_[Idx(s)][Idx(c)] = cur;
    if (cur > run_peak_[Idx(s)][Idx(c)]) run_peak_[Idx(s)][Idx(c)] = cur;
  }
  void BeginStep() {
    at_step_start_ = cur_;
    step_peak_ = cur_;
    micro_peak_ = cur_;
  }
  void SetMicroSteps(bool on) { in_micro_ = on; }
  const SpaceCategoryBytes& current() const { return cur_; }
  HostRankMemory Report() const {
    HostRankMemory m;
    m.at_last_step_start = at_step_start_;
    m.peak_last_step = step_peak_;
    m.peak_last_micro_steps = micro_peak_;
    m.peak_run = run_peak_;
    return m;
  }

 private:
  SpaceCategoryBytes cur_{}, step_peak_{}, run_peak_{}, at_step_start_{}, micro_peak_{};
  bool in_micro_ = false;
};

class Buf {
 public:
  Buf() = default;
  Buf(Accountant* a, MemSpace s, MemCategory c, int64_t bytes, bool zero = true)
      : a_(a), s_(s), c_(c), bytes_(bytes) {
    if (bytes_ > 0) {
      data_.reset(zero ? new uint8_t[bytes_]() : new uint8_t[bytes_]);
      a_->Add(s_, c_, bytes_);
    }
  }
  Buf(Buf&& o) noexcept { *this = std::move(o); }
  Buf& operator=(Buf&& o) noexcept {
    if (this != &o) {
      Reset();
      a_ = o.a_;
      s_ = o.s_;
      c_ = o.c_;
      bytes_ = o.bytes_;
      data_ = std::move(o.data_);
      o.bytes_ = 0;
      o.a_ = nullptr;
    }
    return *this;
  }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  ~Buf() { Reset(); }
  void Reset() {
    if (a_ && bytes_ > 0) a_->Add(s_, c_, -bytes_);
    data_.reset();
    bytes_ = 0;
    a_ = nullptr;
  }
  bool live() const { return a_ != nullptr && bytes_ > 0; }
  int64_t bytes() const { return bytes_; }
  float* f32() { return reinterpret_cast<float*>(data_.get()); }
  const float* f32() const { return reinterpret_cast<const float*>(data_.get()); }
  uint8_t* raw() { return data_.get(); }

 private:
  Accountant* a_ = nullptr;
  MemSpace s_ = MemSpace::kGpu;
  MemCategory c_ = MemCategory::kTemporaries;
  int64_t bytes_ = 0;
  std::unique_ptr<uint8_t[]> data_;
};

// A buffer of |n| elements of the model dtype (bf16 bits or fp32).
struct Lp {
  int64_t e = 2;  // bytes per element
  float Get(const Buf& b, int64_t i) const {
    const uint8_t* p = const_cast<Buf&>(b).raw();
    if (e == 4) return reinterpret_cast<const float*>(p)[i];
    return Bf16ToFloat(reinterpret_cast<const uint16_t*>(p)[i]);
  }
  void Set(Buf& b, int64_t i, float v) const {
    if (e == 4) {
      b.f32()[i] = v;
    } else {
      reinterpret_cast<uint16_t*>(b.raw())[i] = FloatToBf16(v);
    }
  }
  float Round(float v) const { return e == 4 ? v : Bf16ToFloat(FloatToBf16(v)); }
};

// ---------------------------------------------------------------------------------------------
// The model: GPT-2 as dsplan's Workload traces it. Parameters come from the tensor table.

struct ParamInfo {
  std::string name;
  int64_t numel = 0;
  int layer = -1;
  int64_t offset = 0;    // in the flat (table-order) layout
};

struct ModelLayout {
  std::vector<ParamInfo> params;
  int64_t numel = 0;
  int64_t V = 0, D = 0, H = 0, I = 0, T = 0, Pos = 0;
  double eps = 1e-5;
  std::vector<std::vector<int>> layer_tensors;  // tensors owned by each layer
  std::vector<std::vector<int>> layer_uses;     // tensors each layer's compute reads
  std::vector<LayerKind> kinds;
  // Tensor ids by role.
  int wte = -1, wpe = -1, lnf_w = -1, lnf_b = -1, head = -1;
  struct Block {
    int ln1_w, ln1_b, attn_w, attn_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, mproj_w, mproj_b;
  };
  std::vector<Block> blocks;   // per block index
  std::vector<int> block_of;   // layer -> block index or -1
};

Result<ModelLayout> MakeLayout(const Workload& w) {
  if (w.spec.family != Family::kGpt2) {
    return Status::Unsupported(fmt::format(
        "host executor: model family '{}' ({}) is not implemented; only gpt2 (GPT2LMHeadModel) is",
        ModelTypeName(w.spec.family), ModelClassName(w.spec.family)));
  }
  if (w.spec.activation != Activation::kGeluNew) {
    return Status::Unsupported(fmt::format(
        "host executor: activation_function '{}' is not implemented; GPT-2's gelu_new is",
        ActivationName(w.spec.activation)));
  }
  if (w.shape.gradient_checkpointing) {
    return Status::Unsupported("host executor: activation checkpointing is not implemented");
  }
  ModelLayout m;
  m.V = w.spec.vocab_size;
  m.D = w.spec.hidden_size;
  m.H = w.spec.num_heads;
  m.I = w.spec.intermediate_size;
  m.T = w.shape.seq_len;
  m.Pos = w.spec.max_positions;
  m.eps = w.spec.norm_eps;
  if (m.T > m.Pos) {
    return Status::InvalidArgument(fmt::format(
        "host executor: seq_len {} exceeds n_positions {}", m.T, m.Pos));
  }
  std::map<std::string, int> by_name;
  for (const TensorSpec& t : w.tensors) {
    if (t.category != TensorCategory::kParameter) continue;
    ParamInfo p;
    p.name = t.name;
    p.numel = t.numel;
    p.layer = t.layer;
    p.offset = m.numel;
    m.numel += t.numel;
    by_name[t.name] = static_cast<int>(m.params.size());
    m.params.push_back(p);
  }
  if (m.numel != w.params) {
    return Status::Internal("host executor: tensor table parameters do not sum to Workload::params");
  }
  const int L = static_cast<int>(w.layers.size());
  m.layer_tensors.resize(L);
  m.layer_uses.resize(L);
  m.block_of.assign(L, -1);
  for (const Layer& l : w.layers) m.kinds.push_back(l.kind);
  for (size_t i = 0; i < m.params.size(); ++i) {
    if (m.params[i].layer >= 0 && m.params[i].layer < L) {
      m.layer_tensors[m.params[i].layer].push_back(static_cast<int>(i));
    }
  }
  auto get = [&](const std::string& n, int* out) -> Status {
    auto it = by_name.find(n);
    if (it == by_name.end()) return Status::Internal("host executor: no parameter " + n);
    *out = it->second;
    return Status();
  };
  DSPLAN_RETURN_IF_ERROR(get("transformer.wte.weight", &m.wte));
  DSPLAN_RETURN_IF_ERROR(get("transformer.wpe.weight", &m.wpe));
  DSPLAN_RETURN_IF_ERROR(get("transformer.ln_f.weight", &m.lnf_w));
  DSPLAN_RETURN_IF_ERROR(get("transformer.ln_f.bias", &m.lnf_b));
  m.head = by_name.count("lm_head.weight") ? by_name["lm_head.weight"] : m.wte;
  for (int l = 0; l < L; ++l) {
    const Layer& layer = w.layers[l];
    if (layer.kind == LayerKind::kDecoderBlock) {
      const std::string p = layer.name + ".";
      ModelLayout::Block b{};
      DSPLAN_RETURN_IF_ERROR(get(p + "ln_1.weight", &b.ln1_w));
      DSPLAN_RETURN_IF_ERROR(get(p + "ln_1.bias", &b.ln1_b));
      DSPLAN_RETURN_IF_ERROR(get(p + "attn.c_attn.weight", &b.attn_w));
      DSPLAN_RETURN_IF_ERROR(get(p + "attn.c_attn.bias", &b.attn_b));
      DSPLAN_RETURN_IF_ERROR(get(p + "attn.c_proj.weight", &b.proj_w));
      DSPLAN_RETURN_IF_ERROR(get(p + "attn.c_proj.bias", &b.proj_b));
      DSPLAN_RETURN_IF_ERROR(get(p + "ln_2.weight", &b.ln2_w));
      DSPLAN_RETURN_IF_ERROR(get(p + "ln_2.bias", &b.ln2_b));
      DSPLAN_RETURN_IF_ERROR(get(p + "mlp.c_fc.weight", &b.fc_w));
      DSPLAN_RETURN_IF_ERROR(get(p + "mlp.c_fc.bias", &b.fc_b));
      DSPLAN_RETURN_IF_ERROR(get(p + "mlp.c_proj.weight", &b.mproj_w));
      DSPLAN_RETURN_IF_ERROR(get(p + "mlp.c_proj.bias", &b.mproj_b));
      m.block_of[l] = static_cast<int>(m.blocks.size());
      m.blocks.push_back(b);
    }
    m.layer_uses[l] = m.layer_tensors[l];
    if (layer.kind == LayerKind::kHead && m.params[m.head].layer != l) {
      m.layer_uses[l].push_back(m.head);  // the tied wte
    }
  }
  return m;
}

// The synthetic dataset: sample |id| is an arithmetic sequence modulo V with a start and stride
// drawn from the seed; labels are the inputs (HF shifts them inside the loss).
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
void Sample(const ModelLayout& m, uint64_t seed, int64_t id, int32_t* out) {
  const uint64_t h = Mix(seed * 1000003ull + static_cast<uint64_t>(id));
  const int64_t start = static_cast<int64_t>(h % static_cast<uint64_t>(m.V));
  const int64_t stride = 1 + static_cast<int64_t>((h >> 32) % 3);
  for (int64_t t = 0; t < m.T; ++t) out[t] = static_cast<int32_t>((start + stride * t) % m.V);
}

// Initial value of element i of tensor |p| (GPT-2's init: N(0, 0.02) weights, LN 1/0, biases 0).
float InitValue(const ParamInfo& p, uint64_t seed, int64_t i, int tensor) {
  const std::string& n = p.name;
  auto ends = [&](const char* s) {
    const size_t k = std::strlen(s);
    return n.size() >= k && n.compare(n.size() - k, k, s) == 0;
  };
  const bool ln = n.find(".ln_") != std::string::npos;
  if (ends(".bias")) return 0.0f;
  if (ln) return 1.0f;
  const uint64_t a = Mix(seed ^ (static_cast<uint64_t>(tensor) << 40) ^ static_cast<uint64_t>(i));
  const uint64_t b = Mix(a);
  const double u1 = (static_cast<double>(a >> 11) + 1.0) / 9007199254740993.0;
  const double u2 = static_cast<double>(b >> 11) / 9007199254740992.0;
  return static_cast<float>(0.02 * std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

// --- fp32 kernels (row-major) -----------------------------------------------------------------

// y[r,o] = b[o] + sum_i x[r,i] W[o,i]   (nn.Linear layout [out, in], as the tensor table has it)
void LinearFwd(const float* x, const float* W, const float* b, float* y, int64_t R, int64_t in,
               int64_t out) {
  for (int64_t r = 0; r < R; ++r) {
    const float* xr = x + r * in;
    for (int64_t o = 0; o < out; ++o) {
      const float* wo = W + o * in;
      float s = b ? b[o] : 0.0f;
      for (int64_t i = 0; i < in; ++i) s += xr[i] * wo[i];
      y[r * out + o] = s;
    }
  }
}
// dx = dy W (overwrites, when dx != nullptr); dW += dy^T x; db += sum_r dy.
void LinearBwd(const float* x, const float* W, const float* dy, float* dx, float* dW, float* db,
               int64_t R, int64_t in, int64_t out) {
  if (dx) {
    for (int64_t r = 0; r < R; ++r) {
      float* dxr = dx + r * in;
      for (int64_t i = 0; i < in; ++i) dxr[i] = 0.0f;
      for (int64_t o = 0; o < out; ++o) {
        const float g = dy[r * out + o];
        const float* wo = W + o * in;
        for (int64_t i = 0; i < in; ++i) dxr[i] += g * wo[i];
      }
    }
  }
  for (int64_t o = 0; o < out; ++o) {
    float* dwo = dW + o * in;
    double sb = 0;
    for (int64_t i = 0; i < in; ++i) {
      double s = 0;
      for (int64_t r = 0; r < R; ++r) s += static_cast<double>(dy[r * out + o]) * x[r * in + i];
      dwo[i] += static_cast<float>(s);
    }
    if (db) {
      for (int64_t r = 0; r < R; ++r) sb += dy[r * out + o];
      db[o] += static_cast<float>(sb);
    }
  }
}
// LayerNorm over the last dimension D; saves mean and rstd per row.
void LayerNormFwd(const float* x, const float* g, const float* b, float* y, float* mean,
                  float* rstd, int64_t R, int64_t D, double eps) {
  for (int64_t r = 0; r < R; ++r) {
    const float* xr = x + r * D;
    double mu = 0, var = 0;
    for (int64_t i = 0; i < D; ++i) mu += xr[i];
    mu /= D;
    for (int64_t i = 0; i < D; ++i) var += (xr[i] - mu) * (xr[i] - mu);
    var /= D;
    const double rs = 1.0 / std::sqrt(var + eps);
    mean[r] = static_cast<float>(mu);
    rstd[r] = static_cast<float>(rs);
    for (int64_t i = 0; i < D; ++i) {
      y[r * D + i] = static_cast<float>((xr[i] - mu) * rs) * g[i] + b[i];
    }
  }
}
void LayerNormBwd(const float* x, const float* g, const float* mean, const float* rstd,
                  const float* dy, float* dx, float* dg, float* db, int64_t R, int64_t D) {
  std::vector<double> sg(D, 0.0), sb(D, 0.0);
  for (int64_t r = 0; r < R; ++r) {
    const float* xr = x + r * D;
    const float* dyr = dy + r * D;
    double a = 0, c = 0;  // sum(dxhat), sum(dxhat * xhat)
    for (int64_t i = 0; i < D; ++i) {
      const double xh = (xr[i] - mean[r]) * rstd[r];
      const double dxh = static_cast<double>(dyr[i]) * g[i];
      a += dxh;
      c += dxh * xh;
      sg[i] += static_cast<double>(dyr[i]) * xh;
      sb[i] += dyr[i];
    }
    for (int64_t i = 0; i < D; ++i) {
      const double xh = (xr[i] - mean[r]) * rstd[r];
      const double dxh = static_cast<double>(dyr[i]) * g[i];
      dx[r * D + i] = static_cast<float>(rstd[r] * (dxh - a / D - xh * c / D));
    }
  }
  for (int64_t i = 0; i < D; ++i) {
    dg[i] += static_cast<float>(sg[i]);
    db[i] += static_cast<float>(sb[i]);
  }
}
constexpr double kGeluC = 0.7978845608028654;  // sqrt(2/pi)
float GeluNew(float x) {
  const double t = std::tanh(kGeluC * (x + 0.044715 * x * x * x));
  return static_cast<float>(0.5 * x * (1.0 + t));
}
float GeluNewGrad(float x) {
  const double t = std::tanh(kGeluC * (x + 0.044715 * x * x * x));
  return static_cast<float>(0.5 * (1.0 + t) +
                            0.5 * x * (1.0 - t * t) * kGeluC * (1.0 + 3 * 0.044715 * x * x));
}

// ---------------------------------------------------------------------------------------------
// Forward/backward of one Workload layer on one micro-batch. Weights and gradients are fp32
// arrays per tensor id, provided by the rank for the tensors the layer uses.

struct Activations {
  std::vector<std::vector<Buf>> saved;  // per layer
};

class Model {
 public:
  Model(const ModelLayout& m, Accountant* acc, int64_t B) : m_(m), acc_(acc), B_(B) {
    R_ = B * m.T;
  }
  // |W| / |G|: fp32 weights / gradient accumulators by tensor id (null where unused).
  void Forward(int l, const std::vector<const float*>& W, const int32_t* ids, Buf& h,
               std::vector<Buf>& saved, double* loss, float loss_scale);
  void Backward(int l, const std::vector<const float*>& W, const std::vector<float*>& G,
                const int32_t* ids, Buf& dh, std::vector<Buf>& saved);

 private:
  Buf Act(int64_t n) { return Buf(acc_, MemSpace::kGpu, MemCategory::kActivations, 4 * n, false); }
  Buf Tmp(int64_t n) { return Buf(acc_, MemSpace::kGpu, MemCategory::kTemporaries, 4 * n, false); }
  const ModelLayout& m_;
  Accountant* acc_;
  int64_t B_, R_;
};

// Saved buffers per layer kind:
//   block: 0 in, 1 ln1 mean, 2 ln1 rstd, 3 x1, 4 qkv, 5 probs, 6 ctx, 7 h2, 8 ln2 mean,
//          9 ln2 rstd, 10 x2, 11 f (pre-activation), 12 g (post-activation)
//   ln_f: 0 in, 1 mean, 2 rstd, 3 y;  head: 0 y (copy of ln_f's output), 1 logits;
//   loss: 0 probabilities (softmax of the logits), 1 the loss scale.
void Model::Forward(int l, const std::vector<const float*>& W, const int32_t* ids, Buf& h,
                    std::vector<Buf>& saved, double* loss, float loss_scale) {
  const int64_t D = m_.D, T = m_.T, R = R_, V = m_.V;
  saved.clear();
  switch (m_.kinds[l]) {
    case LayerKind::kEmbedding: {
      h = Tmp(R * D);
      const float* wte = W[m_.wte];
      const float* wpe = W[m_.wpe];
      for (int64_t r = 0; r < R; ++r) {
        const int64_t t = r % T;
        for (int64_t i = 0; i < D; ++i) h.f32()[r * D + i] = wte[ids[r] * D + i] + wpe[t * D + i];
      }
      break;
    }
    case LayerKind::kDecoderBlock: {
      const ModelLayout::Block& b = m_.blocks[m_.block_of[l]];
      const int64_t H = m_.H, hd = D / H, I = m_.I;
      saved.push_back(std::move(h));  // 0 in
      saved.push_back(Act(R));
      saved.push_back(Act(R));
      saved.push_back(Act(R * D));
      LayerNormFwd(saved[0].f32(), W[b.ln1_w], W[b.ln1_b], saved[3].f32(), saved[1].f32(),
                   saved[2].f32(), R, D, m_.eps);
      saved.push_back(Act(R * 3 * D));
      LinearFwd(saved[3].f32(), W[b.attn_w], W[b.attn_b], saved[4].f32(), R, D, 3 * D);
      saved.push_back(Act(B_ * H * T * T));  // 5 probs
      saved.push_back(Act(R * D));            // 6 ctx
      const float* qkv = saved[4].f32();
      float* P = saved[5].f32();
      float* ctx = saved[6].f32();
      const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
      for (int64_t bb = 0; bb < B_; ++bb) {
        for (int64_t hh = 0; hh < H; ++hh) {
          float* Pbh = P + (bb * H + hh) * T * T;
          for (int64_t i = 0; i < T; ++i) {
            const float* q = qkv + (bb * T + i) * 3 * D + hh * hd;
            double mx = -1e300;
            std::vector<double> s(i + 1);
            for (int64_t j = 0; j <= i; ++j) {
              const float* k = qkv + (bb * T + j) * 3 * D + D + hh * hd;
              double dot = 0;
              for (int64_t d = 0; d < hd; ++d) dot += static_cast<double>(q[d]) * k[d];
              s[j] = dot * scale;
              mx = std::max(mx, s[j]);
            }
            double z = 0;
            for (int64_t j = 0; j <= i; ++j) z += (s[j] = std::exp(s[j] - mx));
            for (int64_t j = 0; j < T; ++j) Pbh[i * T + j] = j <= i ? static_cast<float>(s[j] / z) : 0.0f;
            float* c = ctx + (bb * T + i) * D + hh * hd;
            for (int64_t d = 0; d < hd; ++d) {
              double acc = 0;
              for (int64_t j = 0; j <= i; ++j) {
                acc += static_cast<double>(Pbh[i * T + j]) * qkv[(bb * T + j) * 3 * D + 2 * D + hh * hd + d];
              }
              c[d] = static_cast<float>(acc);
            }
          }
        }
      }
      saved.push_back(Act(R * D));  // 7 h2 = in + c_proj(ctx)
      float* h2 = saved[7].f32();
      LinearFwd(ctx, W[b.proj_w], W[b.proj_b], h2, R, D, D);
      for (int64_t i = 0; i < R * D; ++i) h2[i] += saved[0].f32()[i];
      saved.push_back(Act(R));
      saved.push_back(Act(R));
      saved.push_back(Act(R * D));
      LayerNormFwd(h2, W[b.ln2_w], W[b.ln2_b], saved[10].f32(), saved[8].f32(), saved[9].f32(),
                   R, D, m_.eps);
      saved.push_back(Act(R * I));  // 11 f
      saved.push_back(Act(R * I));  // 12 g
      LinearFwd(saved[10].f32(), W[b.fc_w], W[b.fc_b], saved[11].f32(), R, D, I);
      for (int64_t i = 0; i < R * I; ++i) saved[12].f32()[i] = GeluNew(saved[11].f32()[i]);
      h = Tmp(R * D);
      LinearFwd(saved[12].f32(), W[b.mproj_w], W[b.mproj_b], h.f32(), R, I, D);
      for (int64_t i = 0; i < R * D; ++i) h.f32()[i] += h2[i];
      break;
    }
    case LayerKind::kFinalNorm: {
      saved.push_back(std::move(h));
      saved.push_back(Act(R));
      saved.push_back(Act(R));
      saved.push_back(Act(R * D));
      LayerNormFwd(saved[0].f32(), W[m_.lnf_w], W[m_.lnf_b], saved[3].f32(), saved[1].f32(),
                   saved[2].f32(), R, D, m_.eps);
      h = Tmp(R * D);
      std::memcpy(h.f32(), saved[3].f32(), 4 * R * D);
      break;
    }
    case LayerKind::kHead: {
      saved.push_back(std::move(h));  // y
      saved.push_back(Act(R * V));    // logits
      LinearFwd(saved[0].f32(), W[m_.head], nullptr, saved[1].f32(), R, D, V);
      h = Tmp(R * V);
      std::memcpy(h.f32(), saved[1].f32(), 4 * R * V);
      break;
    }
    case LayerKind::kLoss: {
      // Cross-entropy of logits[:, :-1] against ids[:, 1:], mean over B*(T-1) tokens.
      saved.push_back(Act(R * V));
      float* probs = saved[0].f32();
      const float* logits = h.f32();
      double total = 0;
      for (int64_t r = 0; r < R; ++r) {
        const float* z = logits + r * V;
        double mx = -1e300, s = 0;
        for (int64_t v = 0; v < V; ++v) mx = std::max(mx, static_cast<double>(z[v]));
        for (int64_t v = 0; v < V; ++v) s += std::exp(z[v] - mx);
        for (int64_t v = 0; v < V; ++v) probs[r * V + v] = static_cast<float>(std::exp(z[v] - mx) / s);
        if (r % m_.T != m_.T - 1) total += -(z[ids[r + 1]] - mx - std::log(s));
      }
      *loss = total / static_cast<double>(B_ * (T - 1));
      saved.push_back(Tmp(1));
      saved[1].f32()[0] = loss_scale;
      h.Reset();
      break;
    }
    case LayerKind::kEncoderBlock:
      break;  // not in GPT-2 (MakeLayout rejects other families)
  }
}

void Model::Backward(int l, const std::vector<const float*>& W, const std::vector<float*>& G,
                     const int32_t* ids, Buf& dh, std::vector<Buf>& saved) {
  const int64_t D = m_.D, T = m_.T, R = R_, V = m_.V;
  switch (m_.kinds[l]) {
    case LayerKind::kLoss: {
      const float scale = saved[1].f32()[0] / static_cast<float>(B_ * (T - 1));
      dh = Tmp(R * V);
      for (int64_t r = 0; r < R; ++r) {
        for (int64_t v = 0; v < V; ++v) {
          float g = 0.0f;
          if (r % T != T - 1) g = (saved[0].f32()[r * V + v] - (v == ids[r + 1] ? 1.0f : 0.0f)) * scale;
          dh.f32()[r * V + v] = g;
        }
      }
      break;
    }
    case LayerKind::kHead: {
      Buf dy = Tmp(R * D);
      LinearBwd(saved[0].f32(), W[m_.head], dh.f32(), dy.f32(), G[m_.head], nullptr, R, D, V);
      dh = std::move(dy);
      break;
    }
    case LayerKind::kFinalNorm: {
      Buf dx = Tmp(R * D);
      LayerNormBwd(saved[0].f32(), W[m_.lnf_w], saved[1].f32(), saved[2].f32(), dh.f32(),
                   dx.f32(), G[m_.lnf_w], G[m_.lnf_b], R, D);
      dh = std::move(dx);
      break;
    }
    case LayerKind::kDecoderBlock: {
      const ModelLayout::Block& b = m_.blocks[m_.block_of[l]];
      const int64_t H = m_.H, hd = D / H, I = m_.I;
      // h_out = h2 + mproj(gelu(fc(ln2(h2))))
      Buf dg = Tmp(R * I);
      LinearBwd(saved[12].f32(), W[b.mproj_w], dh.f32(), dg.f32(), G[b.mproj_w], G[b.mproj_b], R,
                I, D);
      for (int64_t i = 0; i < R * I; ++i) dg.f32()[i] *= GeluNewGrad(saved[11].f32()[i]);
      Buf dx2 = Tmp(R * D);
      LinearBwd(saved[10].f32(), W[b.fc_w], dg.f32(), dx2.f32(), G[b.fc_w], G[b.fc_b], R, D, I);
      dg.Reset();
      Buf dh2 = Tmp(R * D);
      LayerNormBwd(saved[7].f32(), W[b.ln2_w], saved[8].f32(), saved[9].f32(), dx2.f32(),
                   dh2.f32(), G[b.ln2_w], G[b.ln2_b], R, D);
      for (int64_t i = 0; i < R * D; ++i) dh2.f32()[i] += dh.f32()[i];
      dx2.Reset();
      // h2 = in + proj(ctx)
      Buf dctx = Tmp(R * D);
      LinearBwd(saved[6].f32(), W[b.proj_w], dh2.f32(), dctx.f32(), G[b.proj_w], G[b.proj_b], R,
                D, D);
      Buf dqkv = Tmp(R * 3 * D);
      std::memset(dqkv.f32(), 0, 4 * R * 3 * D);
      const float* qkv = saved[4].f32();
      const float* P = saved[5].f32();
      const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
      std::vector<double> dP(T), dS(T);
      for (int64_t bb = 0; bb < B_; ++bb) {
        for (int64_t hh = 0; hh < H; ++hh) {
          const float* Pbh = P + (bb * H + hh) * T * T;
          for (int64_t i = 0; i < T; ++i) {
            const float* dc = dctx.f32() + (bb * T + i) * D + hh * hd;
            double dot = 0;
            for (int64_t j = 0; j <= i; ++j) {
              const float* v = qkv + (bb * T + j) * 3 * D + 2 * D + hh * hd;
              float* dv = dqkv.f32() + (bb * T + j) * 3 * D + 2 * D + hh * hd;
              double s = 0;
              for (int64_t d = 0; d < hd; ++d) {
                s += static_cast<double>(dc[d]) * v[d];
                dv[d] += Pbh[i * T + j] * dc[d];
              }
              dP[j] = s;
              dot += s * Pbh[i * T + j];
            }
            const float* q = qkv + (bb * T + i) * 3 * D + hh * hd;
            float* dq = dqkv.f32() + (bb * T + i) * 3 * D + hh * hd;
            for (int64_t j = 0; j <= i; ++j) {
              const double ds = Pbh[i * T + j] * (dP[j] - dot) * scale;
              const float* k = qkv + (bb * T + j) * 3 * D + D + hh * hd;
              float* dk = dqkv.f32() + (bb * T + j) * 3 * D + D + hh * hd;
              for (int64_t d = 0; d < hd; ++d) {
                dq[d] += static_cast<float>(ds * k[d]);
                dk[d] += static_cast<float>(ds * q[d]);
              }
            }
          }
        }
      }
      dctx.Reset();
      Buf dx1 = Tmp(R * D);
      LinearBwd(saved[3].f32(), W[b.attn_w], dqkv.f32(), dx1.f32(), G[b.attn_w], G[b.attn_b], R,
                D, 3 * D);
      dqkv.Reset();
      Buf din = Tmp(R * D);
      LayerNormBwd(saved[0].f32(), W[b.ln1_w], saved[1].f32(), saved[2].f32(), dx1.f32(),
                   din.f32(), G[b.ln1_w], G[b.ln1_b], R, D);
      for (int64_t i = 0; i < R * D; ++i) din.f32()[i] += dh2.f32()[i];
      dh = std::move(din);
      break;
    }
    case LayerKind::kEmbedding: {
      float* gwte = G[m_.wte];
      float* gwpe = G[m_.wpe];
      for (int64_t r = 0; r < R; ++r) {
        const int64_t t = r % T;
        for (int64_t i = 0; i < D; ++i) {
          gwte[ids[r] * D + i] += dh.f32()[r * D + i];
          gwpe[t * D + i] += dh.f32()[r * D + i];
        }
      }
      dh.Reset();
      break;
    }
    case LayerKind::kEncoderBlock:
      break;
  }
  saved.clear();
}


// ---------------------------------------------------------------------------------------------
// A data-parallel rank. The members follow DeepSpeed's optimizer wrappers; docs/runtime-host.md
// lists which DeepSpeed buffer each Buf stands for.

// What a Rank shares with the code that starts it and gathers its results (RunRankAndGather):
// what it reads (the model, the plan, its Comm) and what it leaves: its losses, its memory, its
// first error, and on rank 0 the final parameters. One per rank.
struct Shared {
  Shared(const ModelLayout& layout, const Plan& plan, const HostRunOptions& o, Comm& c)
      : m(layout), p(plan), opts(o), comm(c), N(c.size()) {}
  const ModelLayout& m;
  const Plan& p;
  HostRunOptions opts;
  Comm& comm;
  int N;
  std::string nvme_dir;
  std::vector<std::vector<double>> losses;  // [step][micro] of this rank
  HostRankMemory memory;
  std::vector<HostOp> last_step_ops;  // this rank's operations of the current (then last) step
  std::vector<std::vector<float>> final_params;  // rank 0 only
  int64_t partition_numel = 0, gip_numel = 0, largest_subgroup = 0;
  // The first error; the rank goes on (its collectives must match the others') and the ranks
  // agree on it after the run.
  Status error;
  void Fail(const Status& s) {
    if (error.ok()) error = s;
  }
};

class Rank {
 public:
  explicit Rank(Shared& sh) : sh_(sh), m_(sh.m), p_(sh.p), r_(sh.comm.rank()), N_(sh.N) {}
  void Run();

 private:
  Buf Alloc(MemSpace s, MemCategory c, int64_t bytes, bool zero = true) {
    return Buf(&acc_, s, c, bytes, zero);
  }
  Buf Gpu(MemCategory c, int64_t bytes) { return Alloc(MemSpace::kGpu, c, bytes); }
  MemSpace HostSpace(bool pinned) const {
    return pinned ? MemSpace::kPinnedHost : MemSpace::kPageableHost;
  }
  bool Zero12() const { return wrapper_ == OptimizerWrapper::kZero12; }
  bool Stage3() const { return wrapper_ == OptimizerWrapper::kZero3; }
  int L() const { return static_cast<int>(m_.kinds.size()); }
  int64_t Numel(int t) const { return m_.params[t].numel; }

  void Setup();
  int ParamsStep() const {
    const int n = sh_.opts.params_after_step;
    return n >= 1 && n <= sh_.opts.steps ? n : sh_.opts.steps;
  }
  void FetchLayer(int l, std::vector<Buf>& w32, std::vector<Buf>& gathered,
                  std::vector<const float*>& W);
  void GradReady(int t, int micro, Buf& g32);
  // ZeRO 1/2
  void Z12Add(int t, int micro);
  void Z12Flush(int micro);
  void Z12Reduced(int t, const float* grad, int micro);
  void Z12Epilogue(int micro);
  void Z12FlattenCopies(const std::vector<int>& tensors);
  // ZeRO 3
  void Z3Add(int t, int micro);
  void Z3Flush(int micro);
  void OptimizerStep();
  double ClipScale(double local_sumsq);
  void Adam(float* master, const float* g, float* states, int64_t n);
  Status NvmeIo(bool write, const char* what, void* data, int64_t bytes, int64_t offset);
  void FinalParams();

  Shared& sh_;
  const ModelLayout& m_;
  const Plan& p_;
  int r_, N_;
  Accountant acc_;
  Lp lp_;         // model dtype
  Lp accdt_;      // gradient accumulation dtype
  Lp commdt_;     // communication dtype
  OptimizerWrapper wrapper_ = OptimizerWrapper::kBasic;
  bool offload_ = false, nvme_ = false, pin_ = false;
  int gas_ = 1;
  int64_t rbs_ = 0, Pp_ = 0, part_ = 0, largest_ = 0;
  int64_t step_ = 0;

  // Stages 0-2: the flat 16-bit (model dtype) parameters, table order, padded to Pp_.
  Buf params16_;
  // Stage 3: this rank's partitions (tensor t at poff_[t], pn_[t] elements); persistent tensors
  // held whole (persist_off_) when N > 1.
  std::vector<int64_t> poff_, pn_, persist_off_;
  std::vector<char> persistent_;
  Buf persist_;

  std::vector<Buf> pgrad_;       // param.grad (model dtype), per tensor
  // Stage 1: reduced gradients of extra-large parameters outside the partition, which
  // DeepSpeed leaves as param.grad until the epilogue's zero_grad (memory only).
  std::vector<Buf> kept_grads_;
  std::vector<Buf> pending_;     // fp32 gradient contributions not complete yet (tied wte)
  Buf hp_accum_;                 // BF16_Optimizer: full fp32 gradient accumulation buffer
  Buf master_, states_;          // fp32 master partition; exp_avg and exp_avg_sq (2 x part)
  Buf host_grad32_;              // offload: fp32 gradient partition on the host (NVMe: one
                                 // buffer of the largest sub-group, shared by all sub-groups)
  std::vector<std::pair<int64_t, int64_t>> subgroups_;  // ZeRO 3: [begin, end) in the partition
  int64_t largest_subgroup_ = 0;

  // ZeRO 1/2 gradient path.
  Buf ipg_;
  int64_t ipg_elems_ = 0;
  std::vector<std::pair<int, int64_t>> ipg_tensors_;  // tensor, offset in the bucket
  std::vector<int> in_partition_;                     // params_in_partition (table order)
  std::vector<int64_t> gip_off_;                      // offset of a tensor in grads_in_partition
  int64_t gip_numel_ = 0;
  Buf gip_, averaged_;
  Buf cpu_accum_, tmp_gpu_, tmp_host_;
  // ZeRO 3 gradient path.
  Buf gradpart_;  // grad_partitions_flat_buffer (accumulation dtype)
  Buf nvme_pool_;
  std::string nvme_rank_dir_;
  std::vector<int> fds_;  // master, exp_avg, exp_avg_sq, grad
};

void Rank::Setup() {
  const ZeroConfig& z = p_.zero;
  wrapper_ = p_.Wrapper();
  lp_.e = PrecisionBytes(p_.precision);
  accdt_.e = PrecisionBytes(p_.GradAccumDtype());
  commdt_.e = PrecisionBytes(p_.CommDtype());
  offload_ = p_.OffloadsOptimizer();
  nvme_ = Stage3() && z.offload_optimizer.device == OffloadDevice::kNvme;
  pin_ = z.offload_optimizer.pin_memory;
  gas_ = static_cast<int>(p_.grad_accum);
  rbs_ = z.reduce_bucket_size;
  const int64_t P = m_.numel;
  for (const ParamInfo& pi : m_.params) largest_ = std::max(largest_, pi.numel);
  const size_t nt = m_.params.size();
  pgrad_.resize(nt);
  pending_.resize(nt);
  const uint64_t seed = sh_.opts.seed;
  if (!Stage3()) {
    // Flat buffer aligned to nccl_start_alignment_factor (2) x N (stage_1_and_2.py,
    // bf16_optimizer.py); the basic optimizer keeps the model unflattened (no padding).
    Pp_ = wrapper_ == OptimizerWrapper::kBasic ? P : CeilDiv(P, 2 * N_) * 2 * N_;
    part_ = wrapper_ == OptimizerWrapper::kBasic ? P : Pp_ / N_;
    params16_ = Gpu(MemCategory::kParams16, lp_.e * Pp_);
    for (size_t t = 0; t < nt; ++t) {
      for (int64_t i = 0; i < m_.params[t].numel; ++i) {
        lp_.Set(params16_, m_.params[t].offset + i, InitValue(m_.params[t], seed, i, int(t)));
      }
    }
  } else {
    poff_.resize(nt);
    pn_.resize(nt);
    persistent_.assign(nt, 0);
    persist_off_.assign(nt, -1);
    int64_t persisted = 0, persist_bytes = 0;
    for (size_t t = 0; t < nt; ++t) {
      pn_[t] = CeilDiv(Numel(int(t)), N_);
      poff_[t] = part_;
      part_ += pn_[t];
      if (Numel(int(t)) <= z.stage3_param_persistence_threshold &&
          persisted + Numel(int(t)) <= z.stage3_model_persistence_threshold) {
        persistent_[t] = 1;
        persisted += Numel(int(t));
        persist_off_[t] = persist_bytes;
        persist_bytes += Numel(int(t));
      }
    }
    Pp_ = part_ * N_;
    params16_ = Gpu(MemCategory::kParams16, lp_.e * part_);
    for (size_t t = 0; t < nt; ++t) {
      for (int64_t i = 0; i < pn_[t]; ++i) {
        const int64_t g = r_ * pn_[t] + i;
        const float v = g < Numel(int(t)) ? InitValue(m_.params[t], seed, g, int(t)) : 0.0f;
        lp_.Set(params16_, poff_[t] + i, v);
      }
    }
    if (N_ > 1 && persist_bytes > 0) {
      persist_ = Gpu(MemCategory::kGatheredParams, lp_.e * persist_bytes);
      for (size_t t = 0; t < nt; ++t) {
        if (!persistent_[t]) continue;
        for (int64_t i = 0; i < Numel(int(t)); ++i) {
          lp_.Set(persist_, persist_off_[t] + i, InitValue(m_.params[t], seed, i, int(t)));
        }
      }
    }
  }
  sh_.partition_numel = part_;
  if (Stage3()) {
    // _create_fp16_sub_groups: partitions are appended until the running numel reaches
    // sub_group_size, so sub-groups end at tensor boundaries.
    int64_t begin = 0, acc = 0;
    for (size_t t = 0; t < nt; ++t) {
      acc += pn_[t];
      if (acc >= z.sub_group_size || t + 1 == nt) {
        subgroups_.push_back({begin, poff_[t] + pn_[t]});
        largest_subgroup_ = std::max(largest_subgroup_, poff_[t] + pn_[t] - begin);
        begin = poff_[t] + pn_[t];
        acc = 0;
      }
    }
    sh_.largest_subgroup = largest_subgroup_;
  }
  // The fp32 master starts from the 16-bit values (DeepSpeed clones the 16-bit partition).
  auto master_value = [&](int64_t k) -> float {
    if (Stage3()) return lp_.Get(params16_, k);
    return lp_.Get(params16_, r_ * part_ + k);
  };
  switch (wrapper_) {
    case OptimizerWrapper::kBasic:
      states_ = Gpu(MemCategory::kOptimizerStates, 8 * part_);
      break;
    case OptimizerWrapper::kBf16Optimizer:
      hp_accum_ = Gpu(MemCategory::kGradients, accdt_.e * Pp_);
      master_ = Gpu(MemCategory::kMaster, 4 * part_);
      states_ = Gpu(MemCategory::kOptimizerStates, 8 * part_);
      break;
    case OptimizerWrapper::kZero12: {
      // params_in_partition: every tensor overlapping [r*part, (r+1)*part).
      gip_off_.assign(nt, -1);
      for (size_t t = 0; t < nt; ++t) {
        const int64_t b = m_.params[t].offset, e = b + Numel(int(t));
        if (e > r_ * part_ && b < (r_ + 1) * part_) {
          in_partition_.push_back(int(t));
          gip_off_[t] = gip_numel_;
          gip_numel_ += Numel(int(t));
        }
      }
      sh_.gip_numel = gip_numel_;
      if (!offload_) {
        master_ = Gpu(MemCategory::kMaster, 4 * part_);
        states_ = Gpu(MemCategory::kOptimizerStates, 8 * part_);
      } else {
        master_ = Alloc(MemSpace::kPinnedHost, MemCategory::kMaster, 4 * part_);
        host_grad32_ = Alloc(HostSpace(pin_), MemCategory::kGradients, 4 * part_);
        states_ = Alloc(MemSpace::kPageableHost, MemCategory::kOptimizerStates, 8 * part_);
        tmp_host_ = Alloc(HostSpace(pin_), MemCategory::kCommBuffers, lp_.e * largest_);
        if (gas_ > 1) {
          cpu_accum_ = Alloc(HostSpace(pin_), MemCategory::kGradients, lp_.e * gip_numel_);
        }
        tmp_gpu_ = Gpu(MemCategory::kCommBuffers, lp_.e * largest_);
      }
      break;
    }
    case OptimizerWrapper::kZero3: {
      if (z.contiguous_gradients) {
        ipg_ = Alloc(MemSpace::kGpu, MemCategory::kCommBuffers, lp_.e * rbs_, false);
      }
      if (!offload_) {
        gradpart_ = Gpu(MemCategory::kGradients, accdt_.e * part_);
        master_ = Gpu(MemCategory::kMaster, 4 * part_);
        states_ = Gpu(MemCategory::kOptimizerStates, 8 * part_);
      } else {
        gradpart_ = Alloc(HostSpace(pin_), MemCategory::kGradients, accdt_.e * part_);
        // initialize_optimizer_states: a sub-group on the CPU gets its own fp32 gradient buffer
        // (pinned with pin_memory); swappable (NVMe) sub-groups share one pageable buffer of the
        // largest sub-group (`gradient_buffer.narrow(0, 0, num_elements)`).
        host_grad32_ = nvme_ ? Alloc(MemSpace::kPageableHost, MemCategory::kGradients,
                                     4 * largest_subgroup_)
                             : Alloc(HostSpace(pin_), MemCategory::kGradients, 4 * part_);
        if (!nvme_) {
          master_ = Alloc(MemSpace::kPageableHost, MemCategory::kMaster, 4 * part_);
          states_ = Alloc(MemSpace::kPageableHost, MemCategory::kOptimizerStates, 8 * part_);
        } else {
          const int64_t sg = largest_subgroup_;
          nvme_pool_ = Alloc(MemSpace::kPinnedHost, MemCategory::kCommBuffers,
                             4 * z.offload_optimizer.buffer_count * sg);
        }
      }
      break;
    }
    default:
      break;
  }
  if (master_.live()) {
    for (int64_t k = 0; k < part_; ++k) master_.f32()[k] = master_value(k);
  }
  if (nvme_) {
    // One file per tensor kind under <nvme>/zero_stage_3/optimizer/rank<r>/ (DeepSpeed's path).
    std::string dir = sh_.nvme_dir + "/zero_stage_3";
    ::mkdir(dir.c_str(), 0755);
    dir += "/optimizer";
    ::mkdir(dir.c_str(), 0755);
    dir += fmt::format("/rank{}", r_);
    ::mkdir(dir.c_str(), 0755);
    nvme_rank_dir_ = dir;
    const char* names[4] = {"master", "exp_avg", "exp_avg_sq", "grad"};
    const MemCategory cats[4] = {MemCategory::kMaster, MemCategory::kOptimizerStates,
                                 MemCategory::kOptimizerStates, MemCategory::kGradients};
    for (int i = 0; i < 4; ++i) {
      const std::string path = dir + "/" + names[i] + ".swp";
      const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
      if (fd < 0) {
        sh_.Fail(Status::IoError(fmt::format("host executor: cannot create NVMe swap file {}: {}",
                                             path, std::strerror(errno))));
      }
      fds_.push_back(fd);
      acc_.Add(MemSpace::kNvme, cats[i], 4 * part_);
    }
    // Initial master from the 16-bit partition, zero Adam states.
    std::vector<float> buf(part_);
    for (int64_t k = 0; k < part_; ++k) buf[k] = master_value(k);
    NvmeIo(true, "master", buf.data(), 4 * part_, 0);
    std::fill(buf.begin(), buf.end(), 0.0f);
    NvmeIo(true, "exp_avg", buf.data(), 4 * part_, 0);
    NvmeIo(true, "exp_avg_sq", buf.data(), 4 * part_, 0);
    NvmeIo(true, "grad", buf.data(), 4 * part_, 0);
  }
}

Status Rank::NvmeIo(bool write, const char* what, void* data, int64_t bytes, int64_t offset) {
  int i = 0;
  const char* names[4] = {"master", "exp_avg", "exp_avg_sq", "grad"};
  while (i < 4 && std::strcmp(names[i], what) != 0) ++i;
  if (i >= static_cast<int>(fds_.size()) || fds_[i] < 0) return Status::IoError("no swap file");
  int64_t done = 0;
  while (done < bytes) {
    const ssize_t k = write ? ::pwrite(fds_[i], static_cast<uint8_t*>(data) + done, bytes - done,
                                       offset + done)
                            : ::pread(fds_[i], static_cast<uint8_t*>(data) + done, bytes - done,
                                      offset + done);
    if (k <= 0) {
      Status s = Status::IoError(fmt::format("host executor: {} of {}/{}.swp failed: {}",
                                             write ? "write" : "read", nvme_rank_dir_, what,
                                             k < 0 ? std::strerror(errno) : "short read"));
      sh_.Fail(s);
      return s;
    }
    done += k;
  }
  return Status();
}

// Makes fp32 copies (temporaries) of the tensors layer |l| reads. Stage 3 all-gathers the
// non-persistent ones first (into |gathered|, released by the caller after the layer runs).
void Rank::FetchLayer(int l, std::vector<Buf>& w32, std::vector<Buf>& gathered,
                      std::vector<const float*>& W) {
  W.assign(m_.params.size(), nullptr);
  w32.clear();
  gathered.clear();
  std::vector<int> need_gather;
  if (Stage3() && N_ > 1) {
    for (int t : m_.layer_uses[l]) {
      if (!persistent_[t]) need_gather.push_back(t);
    }
  }
  std::map<int, std::pair<int, int64_t>> gathered_at;  // tensor -> (gathered index, offset)
  if (!need_gather.empty()) {
    int64_t total = 0;
    for (int t : need_gather) total += pn_[t] * N_;
    // A coalesced all-gather lands in one flat buffer, split into the parameters after.
    Buf flat;
    if (need_gather.size() > 1) flat = Gpu(MemCategory::kCommBuffers, lp_.e * total);
    gathered.push_back(Gpu(MemCategory::kGatheredParams, lp_.e * total));
    int64_t off = 0;
    for (int t : need_gather) {
      uint8_t* dst = (flat.live() ? flat.raw() : gathered[0].raw()) + lp_.e * off;
      sh_.comm.AllGather(params16_.raw() + lp_.e * poff_[t], dst, lp_.e * pn_[t]);
      gathered_at[t] = {0, off};
      off += pn_[t] * N_;
    }
    if (flat.live()) std::memcpy(gathered[0].raw(), flat.raw(), lp_.e * total);
  }
  for (int t : m_.layer_uses[l]) {
    const int64_t n = Numel(t);
    w32.push_back(Gpu(MemCategory::kTemporaries, 4 * n));
    float* dst = w32.back().f32();
    if (!Stage3()) {
      for (int64_t i = 0; i < n; ++i) dst[i] = lp_.Get(params16_, m_.params[t].offset + i);
    } else if (N_ == 1) {
      for (int64_t i = 0; i < n; ++i) dst[i] = lp_.Get(params16_, poff_[t] + i);
    } else if (persistent_[t]) {
      for (int64_t i = 0; i < n; ++i) dst[i] = lp_.Get(persist_, persist_off_[t] + i);
    } else {
      const int64_t off = gathered_at[t].second;
      for (int64_t i = 0; i < n; ++i) dst[i] = lp_.Get(gathered[0], off + i);
    }
    W[t] = dst;
  }
}

// The gradient of tensor |t| is complete for this micro-step (autograd's AccumulateGrad): it
// becomes param.grad in the model dtype, then goes where the wrapper sends it.
void Rank::GradReady(int t, int micro, Buf& g32) {
  const int64_t n = Numel(t);
  const bool accumulate_in_place =
      wrapper_ == OptimizerWrapper::kBasic || (Zero12() && p_.zero.stage == 1);
  if (!pgrad_[t].live()) {
    pgrad_[t] = Gpu(MemCategory::kGradients, lp_.e * n);
    for (int64_t i = 0; i < n; ++i) lp_.Set(pgrad_[t], i, g32.f32()[i]);
  } else if (accumulate_in_place) {
    for (int64_t i = 0; i < n; ++i) lp_.Set(pgrad_[t], i, lp_.Get(pgrad_[t], i) + g32.f32()[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) lp_.Set(pgrad_[t], i, g32.f32()[i]);
  }
  g32.Reset();
  // Stage 2 reduces in hooks every micro-step; stage 1 with overlap_comm registers the hooks too
  // but they return early before the boundary (reduce_ready_partitions_and_remove_grads).
  if (Zero12() && (p_.zero.stage == 2 || (p_.zero.OverlapComm() && micro == gas_ - 1))) {
    Z12Add(t, micro);
  }
  if (Stage3()) Z3Add(t, micro);
}

// --- ZeRO 1/2: reduce_independent_p_g_buckets_and_remove_grads / reduce_ipg_grads -----------

// average_tensor -> allreduce_and_scatter: the bucket's gradients are cut at partition
// boundaries into slices (consecutive slices of one owner merged), grouped until a group
// exceeds reduce_bucket_size elements, and each group is flattened for its all-reduce
// (allreduce_bucket: self.flatten(bucket), a copy unless the group is a single tensor).
void Rank::Z12FlattenCopies(const std::vector<int>& tensors) {
  std::vector<int64_t> slices;
  int prev_owner = -1;
  for (int t : tensors) {
    const int64_t b = m_.params[t].offset, e = b + Numel(t);
    for (int64_t f = b; f < e;) {
      const int owner = static_cast<int>(std::min<int64_t>(f / part_, N_ - 1));
      const int64_t end = std::min(e, (owner + 1) * part_);
      if (owner == prev_owner && !slices.empty()) {
        slices.back() += end - f;
      } else {
        slices.push_back(end - f);
      }
      prev_owner = owner;
      f = end;
    }
  }
  int64_t numel = 0;
  int count = 0;
  auto flush = [&] {
    if (count > 1) Buf copy = Gpu(MemCategory::kCommBuffers, commdt_.e * numel);
    numel = 0;
    count = 0;
  };
  for (int64_t n : slices) {
    numel += n;
    ++count;
    if (numel > rbs_) flush();
  }
  if (count > 0) flush();
}

void Rank::Z12Add(int t, int micro) {
  const int64_t n = Numel(t);
  if (n > rbs_) {
    // extra_large_param_to_reduce: reduced alone from its own gradient.
    Z12Flush(micro);
    Z12FlattenCopies({t});
    std::vector<float> g(n);
    for (int64_t i = 0; i < n; ++i) g[i] = lp_.Get(pgrad_[t], i);
    sh_.comm.AllReduce(g.data(), n, 1.0f / N_);
    for (int64_t i = 0; i < n; ++i) g[i] = commdt_.Round(g[i]);
    Z12Reduced(t, g.data(), micro);
    // Stage 1 clears no gradient outside the rank's partition (reduce_ipg_grads), and this one
    // was never copied into the bucket: it stays until the epilogue's zero_grad.
    if (p_.zero.stage == 1 && gip_off_[t] < 0) kept_grads_.push_back(std::move(pgrad_[t]));
    pgrad_[t].Reset();
    return;
  }
  if (ipg_elems_ > 0 && ipg_elems_ + n > rbs_) Z12Flush(micro);
  // The hook copies the gradient into the bucket and frees param.grad.
  for (int64_t i = 0; i < n; ++i) lp_.Set(ipg_, ipg_elems_ + i, lp_.Get(pgrad_[t], i));
  ipg_tensors_.push_back({t, ipg_elems_});
  ipg_elems_ += n;
  pgrad_[t].Reset();
}

void Rank::Z12Flush(int micro) {
  if (ipg_elems_ == 0) return;
  // average_tensor: the bucket is all-reduced (use_multi_rank_bucket_allreduce) and averaged.
  {
    std::vector<int> tensors;
    for (const auto& tt : ipg_tensors_) tensors.push_back(tt.first);
    Z12FlattenCopies(tensors);
  }
  std::vector<float> g(ipg_elems_);
  for (int64_t i = 0; i < ipg_elems_; ++i) g[i] = lp_.Get(ipg_, i);
  sh_.comm.AllReduce(g.data(), ipg_elems_, 1.0f / N_);
  for (int64_t i = 0; i < ipg_elems_; ++i) g[i] = commdt_.Round(g[i]);
  for (const auto& [t, off] : ipg_tensors_) Z12Reduced(t, g.data() + off, micro);
  ipg_tensors_.clear();
  ipg_elems_ = 0;
}

// copy_grads_in_partition for a reduced gradient.
void Rank::Z12Reduced(int t, const float* grad, int micro) {
  if (gip_off_[t] < 0) return;  // not in this rank's partition
  const int64_t n = Numel(t);
  const bool boundary = micro == gas_ - 1;
  if (!offload_) {
    if (!gip_.live()) gip_ = Gpu(MemCategory::kGradients, lp_.e * gip_numel_);
    for (int64_t i = 0; i < n; ++i) lp_.Set(gip_, gip_off_[t] + i, grad[i]);
    return;
  }
  // CPU offload: with GAS > 1 the full gradient is accumulated in the host 16-bit buffer
  // (async_accumulate_grad_in_cpu_via_gpu); at the boundary the owned slice goes to the fp32
  // host gradient (async_inplace_copy_grad_to_fp32_buffer_from_gpu).
  std::vector<float> full(grad, grad + n);
  if (gas_ > 1 && p_.zero.stage == 2) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t k = gip_off_[t] + i;
      const float v = micro == 0 ? full[i] : lp_.Round(lp_.Get(cpu_accum_, k) + full[i]);
      lp_.Set(cpu_accum_, k, v);
      full[i] = lp_.Get(cpu_accum_, k);
    }
  }
  if (!boundary) return;
  const int64_t b = std::max<int64_t>(m_.params[t].offset, r_ * part_);
  const int64_t e = std::min<int64_t>(m_.params[t].offset + n, (r_ + 1) * part_);
  Buf tmp = Gpu(MemCategory::kTemporaries, 4 * (e - b));  // the fp32 cast on the GPU
  for (int64_t f = b; f < e; ++f) {
    tmp.f32()[f - b] = full[f - m_.params[t].offset];
  }
  std::memcpy(host_grad32_.f32() + (b - r_ * part_), tmp.f32(), 4 * (e - b));
}

// independent_gradient_partition_epilogue + _release_ipg_buffers.
void Rank::Z12Epilogue(int micro) {
  Z12Flush(micro);
  if (!offload_ && gip_.live()) {
    if (!averaged_.live()) {
      averaged_ = std::move(gip_);  // averaged_gradients keeps views into it
    } else {
      for (int64_t i = 0; i < gip_numel_; ++i) {
        lp_.Set(averaged_, i, lp_.Get(averaged_, i) + lp_.Get(gip_, i));
      }
      gip_.Reset();
    }
  }
  ipg_.Reset();
  kept_grads_.clear();  // zero_grad(set_to_none=True)
}

// --- ZeRO 3: __add_grad_to_ipg_bucket / __reduce_and_partition_ipg_grads ----------------------

void Rank::Z3Add(int t, int micro) {
  const int64_t n = Numel(t);
  if (ipg_elems_ > 0 && ipg_elems_ + n > rbs_) Z3Flush(micro);
  if (ipg_.live() && n <= rbs_) {
    for (int64_t i = 0; i < n; ++i) lp_.Set(ipg_, ipg_elems_ + i, lp_.Get(pgrad_[t], i));
    pgrad_[t].Reset();
  }
  ipg_tensors_.push_back({t, ipg_elems_});
  ipg_elems_ += n;
}

void Rank::Z3Flush(int micro) {
  if (ipg_elems_ == 0) return;
  const bool boundary = micro == gas_ - 1;
  int64_t padded = 0;
  for (const auto& tt : ipg_tensors_) padded += pn_[tt.first] * N_;
  // reduce_scatter_coalesced interleaves the ranks' chunks with torch.cat.
  Buf cat;
  if (N_ > 1) cat = Gpu(MemCategory::kCommBuffers, commdt_.e * padded);
  for (const auto& [t, off] : ipg_tensors_) {
    const int64_t n = Numel(t), pn = pn_[t];
    std::vector<float> full(pn * N_, 0.0f), mine(pn);
    for (int64_t i = 0; i < n; ++i) {
      full[i] = pgrad_[t].live() ? lp_.Get(pgrad_[t], i) : lp_.Get(ipg_, off + i);
    }
    pgrad_[t].Reset();
    if (N_ > 1) {
      sh_.comm.ReduceScatter(full.data(), mine.data(), pn, 1.0f / N_);
      for (int64_t i = 0; i < pn; ++i) mine[i] = commdt_.Round(mine[i]);
    } else {
      std::copy(full.begin(), full.begin() + pn, mine.begin());
    }
    // partition_grads: copy (first micro-step) or add into grad_partitions_flat_buffer; at the
    // boundary with offload, the fp32 copy into the host gradient of the sub-group.
    for (int64_t i = 0; i < pn; ++i) {
      const int64_t k = poff_[t] + i;
      const float v = micro == 0 ? mine[i] : accdt_.Get(gradpart_, k) + mine[i];
      accdt_.Set(gradpart_, k, v);
    }
    if (offload_ && boundary) {
      Buf tmp = Gpu(MemCategory::kTemporaries, 4 * pn);
      for (int64_t i = 0; i < pn; ++i) tmp.f32()[i] = accdt_.Get(gradpart_, poff_[t] + i);
      if (nvme_) {
        // swap_out_gradients: the fp32 gradient goes to the sub-group's swap file.
        NvmeIo(true, "grad", tmp.f32(), 4 * pn, 4 * poff_[t]);
      } else {
        std::memcpy(host_grad32_.f32() + poff_[t], tmp.f32(), 4 * pn);
      }
    }
  }
  ipg_tensors_.clear();
  ipg_elems_ = 0;
}

double Rank::ClipScale(double local_sumsq) {
  const double clip = p_.gradient_clipping;
  if (clip <= 0) return 1.0;
  const double norm = std::sqrt(sh_.comm.AllReduceScalar(local_sumsq));
  const double c = (norm + 1e-6) / clip;
  return c > 1.0 ? 1.0 / c : 1.0;
}

void Rank::Adam(float* master, const float* g, float* states, int64_t n) {
  const OptimizerHyperparams& h = p_.optimizer_params;
  AdamParams a;
  a.lr = static_cast<float>(h.lr.value_or(sh_.opts.default_lr));
  a.beta1 = static_cast<float>(h.beta1.value_or(0.9));
  a.beta2 = static_cast<float>(h.beta2.value_or(0.999));
  a.eps = static_cast<float>(h.eps.value_or(1e-8));
  a.weight_decay = static_cast<float>(h.weight_decay.value_or(sh_.opts.default_weight_decay));
  a.step = step_;
  a.adamw = p_.optimizer == OptimizerType::kAdamW || p_.adam_w_mode;
  AdamStep(a, master, g, states, states + n, n, 1);
}

void Rank::OptimizerStep() {
  ++step_;
  switch (wrapper_) {
    case OptimizerWrapper::kBasic: {
      // engine.allreduce_gradients: flattened buckets of (at most 5e8) gradient elements.
      const int64_t P = m_.numel;
      std::vector<float> g(P, 0.0f);
      for (size_t t = 0; t < m_.params.size(); ++t) {
        if (!pgrad_[t].live()) continue;
        for (int64_t i = 0; i < Numel(int(t)); ++i) g[m_.params[t].offset + i] = lp_.Get(pgrad_[t], i);
      }
      if (N_ > 1) {
        Buf flat = Gpu(MemCategory::kCommBuffers, lp_.e * std::min<int64_t>(P, 500'000'000));
        sh_.comm.AllReduce(g.data(), P, 1.0f / N_);
      }
      double ss = 0;
      for (float v : g) ss += static_cast<double>(v) * v;
      const double clip = p_.gradient_clipping;
      if (clip > 0) {
        const double c = (std::sqrt(ss) + 1e-6) / clip;
        if (c > 1) for (float& v : g) v = static_cast<float>(v / c);
      }
      for (Buf& b : pgrad_) b.Reset();
      Adam(params16_.f32(), g.data(), states_.f32(), P);
      break;
    }
    case OptimizerWrapper::kBf16Optimizer: {
      // The fp32 accumulation buffer is cast to the communication dtype and all-reduced.
      Buf comm = Gpu(MemCategory::kCommBuffers, commdt_.e * Pp_);
      std::vector<float> g(Pp_);
      for (int64_t i = 0; i < Pp_; ++i) g[i] = commdt_.Round(accdt_.Get(hp_accum_, i));
      sh_.comm.AllReduce(g.data(), Pp_, 1.0f / N_);
      for (int64_t i = 0; i < Pp_; ++i) accdt_.Set(hp_accum_, i, commdt_.Round(g[i]));
      comm.Reset();
      std::vector<float> mine(part_);
      double ss = 0;
      for (int64_t k = 0; k < part_; ++k) {
        mine[k] = accdt_.Get(hp_accum_, r_ * part_ + k);
        ss += static_cast<double>(mine[k]) * mine[k];
      }
      const double s = ClipScale(ss);
      if (s != 1.0) for (float& v : mine) v = static_cast<float>(v * s);
      Adam(master_.f32(), mine.data(), states_.f32(), part_);
      for (int64_t k = 0; k < part_; ++k) lp_.Set(params16_, r_ * part_ + k, master_.f32()[k]);
      std::memset(hp_accum_.raw(), 0, hp_accum_.bytes());  // clear_hp_grads
      sh_.comm.AllGather(params16_.raw() + lp_.e * r_ * part_, params16_.raw(), lp_.e * part_);
      break;
    }
    case OptimizerWrapper::kZero12: {
      std::vector<float> g;  // the fp32 gradient partition
      Buf g32;
      float* grad = nullptr;
      if (!offload_) {
        // single_grad_partition = flatten(averaged_gradients).to(fp32)
        Buf flat = Gpu(MemCategory::kTemporaries, lp_.e * part_);
        g32 = Gpu(MemCategory::kGradients, 4 * part_);
        for (int t : in_partition_) {
          const int64_t b = std::max<int64_t>(m_.params[t].offset, r_ * part_);
          const int64_t e = std::min<int64_t>(m_.params[t].offset + Numel(t), (r_ + 1) * part_);
          for (int64_t f = b; f < e; ++f) {
            g32.f32()[f - r_ * part_] =
                averaged_.live() ? lp_.Get(averaged_, gip_off_[t] + f - m_.params[t].offset) : 0.f;
          }
        }
        flat.Reset();
        averaged_.Reset();
        grad = g32.f32();
      } else {
        grad = host_grad32_.f32();
      }
      double ss = 0;
      for (int64_t k = 0; k < part_; ++k) ss += static_cast<double>(grad[k]) * grad[k];
      const double s = ClipScale(ss);
      if (s != 1.0) for (int64_t k = 0; k < part_; ++k) grad[k] = static_cast<float>(grad[k] * s);
      Adam(master_.f32(), grad, states_.f32(), part_);
      g32.Reset();
      {
        // Offload: the fp32 partition comes to the GPU (a transient copy), then the 16-bit cast.
        Buf up;
        const float* src = master_.f32();
        if (offload_) {
          up = Gpu(MemCategory::kTemporaries, 4 * part_);
          std::memcpy(up.f32(), master_.f32(), 4 * part_);
          src = up.f32();
        }
        for (int64_t k = 0; k < part_; ++k) lp_.Set(params16_, r_ * part_ + k, src[k]);
      }
      sh_.comm.AllGather(params16_.raw() + lp_.e * r_ * part_, params16_.raw(), lp_.e * part_);
      break;
    }
    case OptimizerWrapper::kZero3: {
      // The norm comes from the reduced 16-bit partitions (norm_for_param_grads at the boundary).
      double ss = 0;
      for (int64_t k = 0; k < part_; ++k) {
        const double v = accdt_.Get(gradpart_, k);
        ss += v * v;
      }
      const double s = ClipScale(ss);
      for (const auto& [b, end] : subgroups_) {
        const int64_t n = end - b;
        if (!offload_) {
          Buf flat = Gpu(MemCategory::kTemporaries, accdt_.e * n);
          Buf g32 = Gpu(MemCategory::kGradients, 4 * n);
          for (int64_t k = 0; k < n; ++k) g32.f32()[k] = accdt_.Get(gradpart_, b + k);
          flat.Reset();
          if (s != 1.0) for (int64_t k = 0; k < n; ++k) g32.f32()[k] = static_cast<float>(g32.f32()[k] * s);
          // states_ holds exp_avg then exp_avg_sq per sub-group, contiguous.
          Adam(master_.f32() + b, g32.f32(), states_.f32() + 2 * b, n);
          for (int64_t k = 0; k < n; ++k) lp_.Set(params16_, b + k, master_.f32()[b + k]);
          continue;
        }
        float* g = host_grad32_.f32() + b;
        if (s != 1.0) for (int64_t k = 0; k < n; ++k) g[k] = static_cast<float>(g[k] * s);
        if (!nvme_) {
          Adam(master_.f32() + b, g, states_.f32() + 2 * b, n);
          for (int64_t k = 0; k < n; ++k) lp_.Set(params16_, b + k, master_.f32()[b + k]);
          continue;
        }
        // Swap in master, exp_avg, exp_avg_sq and the gradient through the pinned pool.
        float* pool = nvme_pool_.f32();
        const int64_t slot = largest_subgroup_;
        float* pm = pool;
        float* st = pool + slot;  // exp_avg then exp_avg_sq, contiguous (n each)
        float* pg = host_grad32_.f32();  // the shared fp32 gradient buffer
        NvmeIo(false, "master", pm, 4 * n, 4 * b);
        NvmeIo(false, "exp_avg", st, 4 * n, 4 * b);
        NvmeIo(false, "exp_avg_sq", st + n, 4 * n, 4 * b);
        NvmeIo(false, "grad", pg, 4 * n, 4 * b);
        if (s != 1.0) for (int64_t k = 0; k < n; ++k) pg[k] = static_cast<float>(pg[k] * s);
        Adam(pm, pg, st, n);
        NvmeIo(true, "master", pm, 4 * n, 4 * b);
        NvmeIo(true, "exp_avg", st, 4 * n, 4 * b);
        NvmeIo(true, "exp_avg_sq", st + n, 4 * n, 4 * b);
        for (int64_t k = 0; k < n; ++k) lp_.Set(params16_, b + k, pm[k]);
      }
      // Persistent parameters are all-gathered again after the step.
      if (persist_.live()) {
        for (size_t t = 0; t < m_.params.size(); ++t) {
          if (!persistent_[t]) continue;
          std::vector<uint8_t> full(lp_.e * pn_[t] * N_);
          sh_.comm.AllGather(params16_.raw() + lp_.e * poff_[t], full.data(), lp_.e * pn_[t]);
          std::memcpy(persist_.raw() + lp_.e * persist_off_[t], full.data(), lp_.e * Numel(int(t)));
        }
      }
      break;
    }
    default:
      break;
  }
}

void Rank::Run() {
  Setup();
  const int64_t mb = p_.micro_batch, T = m_.T;
  const int L = this->L();
  sh_.comm.Barrier();
  std::vector<int32_t> ids(mb * T + 1);
  for (int step = 0; step < sh_.opts.steps; ++step) {
    acc_.BeginStep();
    acc_.SetMicroSteps(true);
    sh_.last_step_ops.clear();
    for (int micro = 0; micro < gas_; ++micro) {
      for (int64_t j = 0; j < mb; ++j) {
        Sample(m_, sh_.opts.seed, (static_cast<int64_t>(micro) * N_ + r_) * mb + j, &ids[j * T]);
      }
      ids[mb * T] = 0;
      Model model(m_, &acc_, mb);
      std::vector<std::vector<Buf>> saved(L);
      Buf h;
      double loss = 0;
      std::vector<Buf> w32, gathered;
      std::vector<const float*> W;
      for (int l = 0; l < L; ++l) {
        FetchLayer(l, w32, gathered, W);
        sh_.last_step_ops.push_back({TaskKind::kForward, l, micro});
        model.Forward(l, W, ids.data(), h, saved[l], &loss, 1.0f / gas_);
        w32.clear();
        gathered.clear();
      }
      sh_.losses[step][micro] = loss;
      // Start of backward: BF16_Optimizer frees the previous bf16 grads; ZeRO 1/2 allocates the
      // ipg bucket(s) when contiguous_gradients.
      if (wrapper_ == OptimizerWrapper::kBf16Optimizer) {
        for (Buf& b : pgrad_) b.Reset();
      }
      if (Zero12() && p_.zero.contiguous_gradients) {
        ipg_ = Alloc(MemSpace::kGpu, MemCategory::kCommBuffers,
                     (p_.zero.OverlapComm() ? 2 : 1) * lp_.e * rbs_, false);
      }
      for (int l = L - 1; l >= 0; --l) {
        FetchLayer(l, w32, gathered, W);
        std::vector<float*> G(m_.params.size(), nullptr);
        for (int t : m_.layer_uses[l]) {
          if (!pending_[t].live()) pending_[t] = Gpu(MemCategory::kTemporaries, 4 * Numel(t));
          G[t] = pending_[t].f32();
        }
        sh_.last_step_ops.push_back({TaskKind::kBackward, l, micro});
        model.Backward(l, W, G, ids.data(), h, saved[l]);
        w32.clear();
        gathered.clear();
        for (int t : m_.layer_tensors[l]) GradReady(t, micro, pending_[t]);
      }
      if (wrapper_ == OptimizerWrapper::kBf16Optimizer) {
        // update_hp_grads: the bf16 grads are added into the fp32 accumulation buffer.
        for (size_t t = 0; t < m_.params.size(); ++t) {
          for (int64_t i = 0; i < Numel(int(t)); ++i) {
            const int64_t k = m_.params[t].offset + i;
            accdt_.Set(hp_accum_, k, accdt_.Get(hp_accum_, k) + lp_.Get(pgrad_[t], i));
          }
        }
      }
      if (Zero12()) {
        if (p_.zero.stage == 1 && micro == gas_ - 1) {
          // reduce_gradients() after the last backward: every gradient through the buckets.
          for (int t = static_cast<int>(m_.params.size()) - 1; t >= 0; --t) {
            if (pgrad_[t].live()) Z12Add(t, micro);
          }
        }
        if (p_.zero.stage == 2 || micro == gas_ - 1) {
          Z12Epilogue(micro);
        } else {
          ipg_.Reset();
        }
      }
      if (Stage3()) Z3Flush(micro);
    }
    acc_.SetMicroSteps(false);
    sh_.last_step_ops.push_back({p_.zero.offload_optimizer.device != OffloadDevice::kNone
                                     ? TaskKind::kCpuOptimizer
                                     : TaskKind::kGpuOptimizer,
                                 -1, -1});
    OptimizerStep();
    sh_.comm.Barrier();
    // Every rank takes the parameters at the same step (stage 3 gathers them).
    if (step + 1 == ParamsStep()) FinalParams();
  }
  if (sh_.opts.steps == 0) FinalParams();
  sh_.memory = acc_.Report();
  for (int fd : fds_)
    if (fd >= 0) ::close(fd);
}

void Rank::FinalParams() {
  const size_t nt = m_.params.size();
  for (size_t t = 0; t < nt; ++t) {
    std::vector<float> out(Numel(int(t)));
    if (!Stage3()) {
      for (int64_t i = 0; i < Numel(int(t)); ++i) out[i] = lp_.Get(params16_, m_.params[t].offset + i);
    } else {
      std::vector<uint8_t> full(lp_.e * pn_[t] * N_);
      if (N_ > 1) {
        sh_.comm.AllGather(params16_.raw() + lp_.e * poff_[t], full.data(), lp_.e * pn_[t]);
      } else {
        std::memcpy(full.data(), params16_.raw() + lp_.e * poff_[t], lp_.e * pn_[t]);
      }
      // Decode through Lp on a temporary untracked copy. |scratch| is declared first so that it
      // outlives |view|, whose destructor reports the freed bytes to it (ASan:
      // stack-use-after-scope when the order was the other way round).
      Accountant scratch;
      Buf view(&scratch, MemSpace::kPageableHost, MemCategory::kTemporaries, full.size());
      std::memcpy(view.raw(), full.data(), full.size());
      for (int64_t i = 0; i < Numel(int(t)); ++i) out[i] = lp_.Get(view, i);
    }
    if (r_ == 0) sh_.final_params[t] = std::move(out);
  }
}

// The checks every rank makes alike before it starts, and the layout; |nvme_dir| gets the swap
// folder when the plan offloads to NVMe.
Result<ModelLayout> PrepareRun(const Workload& w, const Plan& plan, const HostRunOptions& opts,
                               std::string* nvme_dir) {
  DSPLAN_RETURN_IF_ERROR(ValidatePlan(plan));
  DSPLAN_ASSIGN_OR_RETURN(ModelLayout m, MakeLayout(w));
  const int N = plan.world_size();
  if (opts.comm == nullptr && N > 64) {
    return Status::Unsupported(fmt::format(
        "host executor: world size {} is above 64 (ranks are threads of one process; under "
        "mpirun or srun they are processes)", N));
  }
  if (opts.comm != nullptr && opts.comm->size() != N) {
    return Status::InvalidArgument(fmt::format(
        "host executor: the plan has {} ranks ({} node(s) x {} GPU(s)) but the MPI job has {} "
        "processes; start {} processes (mpirun -np {}) or plan for {} ranks (--nodes x --gpus)",
        N, plan.nodes, plan.gpus_per_node, opts.comm->size(), N, N, opts.comm->size()));
  }
  // Every rank holds full-size fp32 buffers (gradients, the basic optimizer's flat copy): bound
  // them so that no allocation fails inside a rank (an exception there would strand the others
  // in a collective).
  if (m.numel > 250'000'000) {
    return Status::Unsupported(fmt::format(
        "host executor: {} parameters; it trains small models on the CPU (at most 250 million)",
        m.numel));
  }
  if (opts.comm != nullptr && m.numel > INT_MAX / 4) {
    return Status::Unsupported(fmt::format(
        "host executor: {} parameters are more than its MPI messages carry (2^31 bytes); it is "
        "meant for small models", m.numel));
  }
  if (w.shape.micro_batch != plan.micro_batch) {
    return Status::InvalidArgument(fmt::format(
        "host executor: the workload's micro-batch {} differs from the plan's {}",
        w.shape.micro_batch, plan.micro_batch));
  }
  if (w.shape.seq_len < 2) {
    return Status::InvalidArgument("host executor: seq_len must be at least 2 (shifted labels)");
  }
  if (plan.precision == Precision::kFp16) {
    return Status::Unsupported(
        "host executor: fp16 (loss scaling, FP16_Optimizer) is not implemented; use bf16 or fp32");
  }
  if (plan.optimizer != OptimizerType::kAdamW && plan.optimizer != OptimizerType::kAdam) {
    return Status::Unsupported(fmt::format(
        "host executor: optimizer {} is not implemented; Adam and AdamW are",
        OptimizerTypeName(plan.optimizer)));
  }
  if (plan.OffloadsParams()) {
    return Status::Unsupported("host executor: offload_param is not implemented");
  }
  if (plan.OffloadsOptimizer() && plan.zero.offload_optimizer.ratio < 1.0) {
    return Status::Unsupported("host executor: offload_optimizer.ratio < 1 is not implemented");
  }
  if (plan.Wrapper() == OptimizerWrapper::kFp16Optimizer) {
    return Status::Unsupported("host executor: FP16_Optimizer is not implemented");
  }
  if (plan.zero.stage >= 1 && !plan.zero.contiguous_gradients) {
    return Status::Unsupported("host executor: contiguous_gradients=false is not implemented");
  }
  if (plan.zero.reduce_bucket_size <= 0) {
    return Status::InvalidArgument("host executor: reduce_bucket_size must be positive");
  }
  if (opts.steps < 0) return Status::InvalidArgument("host executor: steps must be >= 0");
  if (plan.zero.stage == 3 && plan.zero.offload_optimizer.device == OffloadDevice::kNvme) {
    if (plan.zero.offload_optimizer.buffer_count < 4) {
      return Status::InvalidArgument(fmt::format(
          "host executor: offload_optimizer.buffer_count is {}; swapping Adam needs at least 4 "
          "(parameter, gradient, momentum, variance)", plan.zero.offload_optimizer.buffer_count));
    }
    *nvme_dir = opts.nvme_dir.empty() ? plan.zero.offload_optimizer.nvme_path : opts.nvme_dir;
    struct stat st{};
    if (nvme_dir->empty() || ::stat(nvme_dir->c_str(), &st) != 0 || !S_ISDIR(st.st_mode) ||
        ::access(nvme_dir->c_str(), W_OK) != 0) {
      return Status::InvalidArgument(fmt::format(
          "host executor: NVMe directory '{}' (offload_optimizer.nvme_path) does not exist or is "
          "not writable", *nvme_dir));
    }
  }
  return m;
}

// What a rank sends rank 0 after the run: its HostRankMemory (plain int64 arrays), then its
// losses, step by step. The ranks of one job run the same build on the same kind of machine, so
// the bytes need no conversion.
static_assert(std::is_trivially_copyable_v<HostRankMemory>);
std::string PackRankResult(const Shared& sh) {
  std::string out(reinterpret_cast<const char*>(&sh.memory), sizeof(HostRankMemory));
  for (const std::vector<double>& step : sh.losses) {
    out.append(reinterpret_cast<const char*>(step.data()), step.size() * sizeof(double));
  }
  return out;
}

// Runs rank sh.comm.rank(), then the ranks agree on the first error and rank 0 gathers the run:
// every rank's memory, the mean loss per step (summed in rank order, then micro-step order) and
// its own view of the final parameters. The other ranks return the layout facts only.
Result<HostRun> RunRankAndGather(Shared& sh) {
  const int gas = static_cast<int>(sh.p.grad_accum);
  sh.losses.assign(sh.opts.steps, std::vector<double>(gas, 0.0));
  sh.final_params.resize(sh.m.params.size());
  {
    Rank rank(sh);
    rank.Run();
  }
  DSPLAN_RETURN_IF_ERROR(AgreeOnStatus(sh.comm, sh.error));
  const std::vector<std::string> all = sh.comm.Gather(PackRankResult(sh), 0);
  HostRun out;
  const int n_after = sh.opts.params_after_step;
  out.params_step = n_after >= 1 && n_after <= sh.opts.steps ? n_after : sh.opts.steps;
  for (const ParamInfo& p : sh.m.params) out.param_names.push_back(p.name);
  out.numel = sh.m.numel;
  out.partition_numel = sh.partition_numel;
  out.grads_in_partition_numel = sh.gip_numel;
  out.largest_subgroup_numel = sh.largest_subgroup;
  if (sh.comm.rank() != 0) return out;
  const size_t want = sizeof(HostRankMemory) + sizeof(double) * gas * sh.opts.steps;
  for (const std::string& r : all) {
    if (r.size() != want) {
      return Status::Internal(fmt::format(
          "host executor: a rank sent {} bytes of results, rank 0 expected {}", r.size(), want));
    }
    HostRankMemory mem;
    std::memcpy(&mem, r.data(), sizeof(HostRankMemory));
    out.rank_memory.push_back(mem);
  }
  for (int step = 0; step < sh.opts.steps; ++step) {
    double s = 0;
    for (const std::string& r : all) {
      const char* base = r.data() + sizeof(HostRankMemory) + sizeof(double) * gas * step;
      for (int micro = 0; micro < gas; ++micro) {
        double v;
        std::memcpy(&v, base + sizeof(double) * micro, sizeof(double));
        s += v;
      }
    }
    out.losses.push_back(s / static_cast<double>(all.size() * gas));
  }
  out.params = std::move(sh.final_params);
  out.last_step_ops = std::move(sh.last_step_ops);
  return out;
}

}  // namespace

std::vector<HostOp> GraphHostOps(const StepGraph& graph) {
  std::vector<HostOp> out;
  // The optimizer step's entry goes where its first task is; it is a CPU step when Adam runs on
  // the host (its GPU tasks are then the gradient norm and the copies around it).
  size_t optimizer_at = 0;
  bool optimizer = false, on_cpu = false;
  for (TaskId id = 0; id < graph.size(); ++id) {
    const Task& t = graph.task(id);
    switch (t.kind) {
      case TaskKind::kForward:
      case TaskKind::kRecompute:
      case TaskKind::kBackward:
        out.push_back({t.kind, t.layer, t.micro_step});
        break;
      case TaskKind::kGpuOptimizer:
      case TaskKind::kCpuOptimizer:
        if (!optimizer) optimizer_at = out.size();
        optimizer = true;
        on_cpu = on_cpu || t.kind == TaskKind::kCpuOptimizer;
        break;
      default:
        break;
    }
  }
  if (optimizer) {
    out.insert(out.begin() + static_cast<std::ptrdiff_t>(optimizer_at),
               HostOp{on_cpu ? TaskKind::kCpuOptimizer : TaskKind::kGpuOptimizer, -1, -1});
  }
  return out;
}

std::string HostOpsText(const std::vector<HostOp>& ops) {
  std::string s;
  for (const HostOp& o : ops) {
    if (!s.empty()) s += ", ";
    s += o.layer >= 0 ? fmt::format("{} L{} m{}", TaskKindName(o.kind), o.layer, o.micro_step)
                      : std::string(TaskKindName(o.kind));
  }
  return s;
}

SpaceCategoryBytes GraphCategoryPeaks(const StepGraph& graph, bool micro_steps_only) {
  SpaceCategoryBytes cur = graph.initial, peak = graph.initial;
  for (TaskId id = 0; id < graph.size(); ++id) {
    const bool counts = !micro_steps_only || graph.task(id).micro_step >= 0;
    for (int pass = 0; pass < 2; ++pass) {
      for (const MemEffect* e = graph.effects_begin(id); e != graph.effects_end(id); ++e) {
        if (e->at_end != (pass == 1)) continue;
        int64_t& c = cur[Idx(e->space)][Idx(e->category)];
        c += e->bytes;
        int64_t& p = peak[Idx(e->space)][Idx(e->category)];
        if (counts) p = std::max(p, c);
      }
    }
  }
  return peak;
}

Result<HostRun> RunHostTraining(const Workload& w, const Plan& plan, const HostRunOptions& opts) {
  Comm* const comm = opts.comm;
  std::string nvme_dir;
  Result<ModelLayout> m = PrepareRun(w, plan, opts, &nvme_dir);
  // Under MPI every rank checks on its own (an NVMe folder may be missing on one node only):
  // agree before the first collective, so that no rank waits for one that has given up.
  if (comm != nullptr) {
    DSPLAN_RETURN_IF_ERROR(AgreeOnStatus(*comm, m.status()));
  } else if (!m.ok()) {
    return m.status();
  }
  if (comm != nullptr) {
    Shared sh(*m, plan, opts, *comm);
    sh.nvme_dir = nvme_dir;
    return RunRankAndGather(sh);
  }
  const int N = plan.world_size();
  std::vector<std::unique_ptr<Comm>> comms = MakeThreadComms(N);
  std::vector<std::unique_ptr<Shared>> shared;
  std::vector<Result<HostRun>> results(N, Status::Internal("host executor: rank did not run"));
  for (int r = 0; r < N; ++r) {
    shared.push_back(std::make_unique<Shared>(*m, plan, opts, *comms[r]));
    shared.back()->nvme_dir = nvme_dir;
  }
  {
    std::vector<std::thread> threads;
    for (int r = 0; r < N; ++r) {
      // No exception may leave a rank's thread (std::terminate); PrepareRun bounds the sizes so
      // that allocations do not fail, and anything else becomes this rank's error.
      threads.emplace_back([&, r] {
        try {
          results[r] = RunRankAndGather(*shared[r]);
        } catch (const std::exception& e) {
          results[r] = Status::Internal(fmt::format("host executor rank {}: {}", r, e.what()));
        }
      });
    }
    for (std::thread& t : threads) t.join();
  }
  return std::move(results[0]);
}

Result<HostGradCheck> HostForwardBackward(const Workload& w, uint64_t seed, int perturb_tensor,
                                          int64_t perturb_index, double delta) {
  DSPLAN_ASSIGN_OR_RETURN(ModelLayout m, MakeLayout(w));
  const int64_t B = w.shape.micro_batch, T = m.T;
  Accountant acc;
  std::vector<std::vector<float>> params(m.params.size()), grads(m.params.size());
  for (size_t t = 0; t < m.params.size(); ++t) {
    params[t].resize(m.params[t].numel);
    grads[t].assign(m.params[t].numel, 0.0f);
    for (int64_t i = 0; i < m.params[t].numel; ++i) {
      params[t][i] = InitValue(m.params[t], seed, i, static_cast<int>(t));
    }
  }
  if (perturb_tensor >= 0) {
    if (perturb_tensor >= static_cast<int>(params.size()) || perturb_index < 0 ||
        perturb_index >= m.params[perturb_tensor].numel) {
      return Status::InvalidArgument("HostForwardBackward: perturbation out of range");
    }
    params[perturb_tensor][perturb_index] += static_cast<float>(delta);
  }
  std::vector<int32_t> ids(B * T + 1, 0);
  for (int64_t j = 0; j < B; ++j) Sample(m, seed, j, &ids[j * T]);
  std::vector<const float*> W(params.size());
  std::vector<float*> G(params.size());
  for (size_t t = 0; t < params.size(); ++t) {
    W[t] = params[t].data();
    G[t] = grads[t].data();
  }
  Model model(m, &acc, B);
  const int L = static_cast<int>(m.kinds.size());
  std::vector<std::vector<Buf>> saved(L);
  Buf h;
  HostGradCheck out;
  for (int l = 0; l < L; ++l) model.Forward(l, W, ids.data(), h, saved[l], &out.loss, 1.0f);
  for (int l = L - 1; l >= 0; --l) model.Backward(l, W, G, ids.data(), h, saved[l]);
  out.grads = std::move(grads);
  return out;
}

}  // namespace dsplan
