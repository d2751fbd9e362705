#include "simulator/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <utility>

#include "core/fused_attention.h"
#include "simulator/gemm_table.h"
#include "simulator/stack_costs.h"

namespace dsplan {
namespace {

// The one interpolation of the measured curves: y at |x| on the piecewise curve through |pts|
// (ascending in x(p)), linear in log x, and in log y too when |log_y|; clamped to the end
// values outside. 0 when there are no points.
template <typename P, typename X, typename Y>
double InterpLogX(const std::vector<P>& pts, double x, X xof, Y yof, bool log_y = false) {
  if (pts.empty()) return 0;
  if (x <= xof(pts.front())) return yof(pts.front());
  if (x >= xof(pts.back())) return yof(pts.back());
  size_t i = 1;
  while (xof(pts[i]) < x) ++i;
  const double x0 = xof(pts[i - 1]), x1 = xof(pts[i]), y0 = yof(pts[i - 1]), y1 = yof(pts[i]);
  if (x1 == x0) return y0;
  const double t = std::log(x / x0) / std::log(x1 / x0);
  return log_y ? std::exp(std::log(y0) + t * (std::log(y1) - std::log(y0))) : y0 + t * (y1 - y0);
}
double PairX(const std::pair<double, double>& p) { return p.first; }
double PairY(const std::pair<double, double>& p) { return p.second; }

// A Linear's FLOP/s at |tokens| on its measured series ((tokens, FLOP/s), ascending). Inside the
// series: InterpLogX. Above its last point the GEMM is the same kernel over more row tiles: its
// time grows by the same amount per token as between the series' last two points (a fixed part,
// the first and last partial waves, plus a cost per token), so the rate tends to that marginal
// rate instead of staying at the last point's (docs/simulator.md, "GEMMs beyond the measured token
// counts"), never above |peak| (the GPU's dense peak; 0: none known). Where the last two points do
// not show time growing with tokens (noise), the last point's rate.
double LinearSeriesRate(const std::vector<std::pair<double, double>>& series, double tokens,
                        double peak) {
  if (series.size() < 2 || tokens <= series.back().first) {
    return InterpLogX(series, tokens, PairX, PairY, /*log_y=*/true);
  }
  const auto& [x1, r1] = series[series.size() - 2];
  const auto& [x2, r2] = series.back();
  // Time per unit of the shape's FLOPs per token: tau(x) = x / r(x).
  const double tau1 = x1 / r1, tau2 = x2 / r2;
  if (!(x2 > x1) || !(tau2 > tau1) || !(r1 > 0) || !(r2 > 0)) return r2;
  const double per_token = (tau2 - tau1) / (x2 - x1);
  const double rate = tokens / (tau2 + (tokens - x2) * per_token);
  return peak > 0 ? std::max(r2, std::min(rate, peak)) : rate;
}

// A size-dependent bandwidth curve at |bytes|; 0 when the curve has no points.
double CurveBandwidth(const std::vector<BandwidthPoint>& points, double bytes) {
  return InterpLogX(points, bytes, [](const BandwidthPoint& p) { return p.bytes; },
                    [](const BandwidthPoint& p) { return p.bytes_per_s; });
}

double CopyCurveSeconds(const CopyCurve& c, double bytes) {
  if (bytes <= 0) return 0;
  // Measured points describe the curve best; the alpha-beta fit covers sizes outside them.
  if (c.points.size() >= 2 && bytes >= c.points.front().bytes && bytes <= c.points.back().bytes) {
    return bytes / CurveBandwidth(c.points, bytes);
  }
  const double bw = c.bytes_per_s.value > 0 ? c.bytes_per_s.value : 1e9;
  return c.latency_s.value + bytes / bw;
}

}  // namespace

int GemmAlignmentClass(int64_t dim, int64_t elem_bytes) {
  // The largest of 16, 8, 4 and 2 bytes that the dimension's row stride is a multiple of (1 if
  // none).
  const int64_t bytes = dim * std::max<int64_t>(1, elem_bytes);
  for (int c : {16, 8, 4, 2}) {
    if (bytes % c == 0) return c;
  }
  return 1;
}

const char* SoftwareStackName(SoftwareStack s) {
  switch (s) {
    case SoftwareStack::kPyTorchDeepSpeed: return "pytorch-deepspeed";
    case SoftwareStack::kDsplanRuntime: return "dsplan-runtime";
  }
  return "?";
}

// The profile's GEMM index, fetched on the first GEMM a cost model prices (most cost models, the
// one of each Simulate() among them, price none).
struct CostModel::GemmTableSlot {
  std::once_flag once;
  std::shared_ptr<const GemmTable> table;
};

CostModel::CostModel(const HardwareProfile& profile, Precision precision, SoftwareStack stack)
    : profile_(&profile), precision_(precision), stack_(stack),
      stack_costs_(StackCostsOf(profile)), gemm_slot_(std::make_shared<GemmTableSlot>()) {}

const GemmTable& CostModel::gemm_table() const {
  std::call_once(gemm_slot_->once, [this] {
    gemm_slot_->table = StackGemmTable(*profile_, stack_ == SoftwareStack::kPyTorchDeepSpeed);
  });
  return *gemm_slot_->table;
}

double CostModel::PeakFlops(Precision p) const {
  const GpuProfile& g = profile_->gpu;
  switch (p) {
    case Precision::kBf16: return g.peak_flops_bf16.value > 0 ? g.peak_flops_bf16.value
                                                              : g.peak_flops_fp16.value;
    case Precision::kFp16: return g.peak_flops_fp16.value;
    case Precision::kFp32:
      // PyTorch's default allow_tf32 is off for matmuls; fp32 training runs on the FP32 units.
      return g.peak_flops_fp32.value;
  }
  return g.peak_flops_fp16.value;
}

double CostModel::GemmSeconds(Precision p, double m, double n, double k, double batch) const {
  if (m <= 0 || n <= 0 || k <= 0 || batch <= 0) return 0;
  const double flops = 2.0 * m * n * k * batch;
  const double elem = static_cast<double>(PrecisionBytes(p));
  const double bytes = elem * batch * (m * k + k * n + m * n);
  const GpuProfile& g = profile_->gpu;
  // Nearest measured shape of this dtype (log distance over m, n, k).
  double rate = gemm_table().NearestRate(p, m * batch, n, k);
  if (rate <= 0) rate = PeakFlops(p) * (g.gemm_efficiency.value > 0 ? g.gemm_efficiency.value : 0.7);
  const double compute_s = flops / rate;
  return std::max(compute_s, RooflineSeconds(bytes));
}

double CostModel::RooflineSeconds(double bytes) const {
  const GpuProfile& g = profile_->gpu;
  const double eff = g.memory_bound_efficiency.value > 0 ? g.memory_bound_efficiency.value : 0.8;
  const double bw = g.hbm_bytes_per_s.value > 0 ? g.hbm_bytes_per_s.value : 1e12;
  return bytes / (bw * eff);
}

double CostModel::LinearGemmSeconds(GemmLayout layout, double m, double n, double k) const {
  if (m <= 0 || n <= 0 || k <= 0) return 0;
  // The table holds the shapes of Linear layers at several token counts, in the three layouts
  // of a Linear's forward and backward. The token count is m for nt and nn, k for tn; the two
  // other dimensions are the layer's (out, in) or (in, out). Take the measured layer shape
  // nearest in log space, then interpolate log FLOP/s in log tokens along its series (clamped
  // at the series' ends).
  //
  // cuBLAS chooses its kernels by the operands' alignment as well as their size: a layer
  // dimension that is not a multiple of 16 bytes (GPT-2's vocabulary of 50257) rules out the
  // vectorized tensor-core kernels and runs several times slower (docs/simulator.md, "GEMM
  // alignment"). So a shape is compared only with measured shapes of the same alignment class
  // in both layer dimensions, when the table has any.
  const bool tn = layout == GemmLayout::kTN;
  const double tokens = tn ? k : m, a = tn ? m : n, b = tn ? n : k;
  const std::vector<std::pair<double, double>>* series = nullptr;  // (tokens, FLOP/s) of it
  const LinearShape best = gemm_table().NearestLinearShape(precision_, layout, a, b, &series);
  // Tables without this layout (profiles written before layouts were measured): the nearest
  // shape of any layout.
  if (best.a == 0 || series == nullptr) return GemmSeconds(precision_, m, n, k, 1);
  const double rate = LinearSeriesRate(*series, tokens, PeakFlops(precision_));
  const double elem = static_cast<double>(PrecisionBytes(precision_));
  return std::max(2.0 * m * n * k / rate, RooflineSeconds(elem * (m * k + k * n + m * n)));
}

GemmCoverage CostModel::LinearGemmCoverage(const Workload& w) const {
  // The layer shapes repeat block after block: one table lookup per distinct (n, k), with the
  // forward FLOPs of all its ops (a planner's search builds a context per run shape).
  struct Pair {
    int64_t n, k;
    double flops;
  };
  std::vector<Pair> pairs;
  for (const dsplan::Layer& layer : w.layers) {
    for (const Op& op : layer.ops) {
      if (op.kind != OpKind::kGemm || op.n <= 0 || op.k <= 0 || op.m <= 0) continue;
      const double flops = 2.0 * static_cast<double>(op.m) * static_cast<double>(op.n) *
                           static_cast<double>(op.k) *
                           static_cast<double>(std::max<int64_t>(1, op.batch));
      auto it = std::find_if(pairs.begin(), pairs.end(),
                             [&](const Pair& p) { return p.n == op.n && p.k == op.k; });
      if (it == pairs.end()) {
        pairs.push_back({op.n, op.k, flops});
      } else {
        it->flops += flops;
      }
    }
  }
  GemmCoverage c;
  double all = 0, far = 0, other_alignment = 0;
  const int64_t elem_bytes = PrecisionBytes(precision_);
  auto same_class = [elem_bytes](int64_t x, int64_t y) {
    return GemmAlignmentClass(x, elem_bytes) == GemmAlignmentClass(y, elem_bytes);
  };
  for (const Pair& p : pairs) {
    const std::vector<std::pair<double, double>>* series = nullptr;
    const double a = static_cast<double>(p.n), b = static_cast<double>(p.k);
    const LinearShape best =
        gemm_table().NearestLinearShape(precision_, GemmLayout::kNT, a, b, &series);
    if (best.a == 0) return GemmCoverage{};
    c.measured = true;
    const double ma = static_cast<double>(best.a), mb = static_cast<double>(best.b);
    const double ratio =
        std::max(std::max(a, ma) / std::min(a, ma), std::max(b, mb) / std::min(b, mb));
    all += p.flops;
    const bool aligned_alike = same_class(p.n, best.a) && same_class(p.k, best.b);
    if (ratio > kGemmFarRatio || !aligned_alike) far += p.flops;
    if (!aligned_alike) other_alignment += p.flops;
    if (ratio > c.worst_ratio) {
      c.worst_ratio = ratio;
      c.want_a = p.n;
      c.want_b = p.k;
      c.have_a = best.a;
      c.have_b = best.b;
    }
  }
  c.far_flops_share = all > 0 ? far / all : 0;
  c.other_alignment_share = all > 0 ? other_alignment / all : 0;
  return c;
}

double CostModel::BatchedGemmSeconds(GemmLayout layout, double m, double n, double k,
                                     double batch) const {
  return BatchedGemmSeconds(layout, m, n, k, batch, precision_);
}

double CostModel::BatchedGemmSeconds(GemmLayout layout, double m, double n, double k,
                                     double batch, Precision p) const {
  if (m <= 0 || n <= 0 || k <= 0 || batch <= 0) return 0;
  // The measured batched product of this layout nearest in log space (per product; the
  // measured batches fill the GPU as a step's batch x heads does).
  const double rate = gemm_table().NearestBatchedRate(p, layout, m, n, k);
  if (rate <= 0) return GemmSeconds(p, m, n, k, batch);
  const double elem = static_cast<double>(PrecisionBytes(p));
  return std::max(2.0 * m * n * k * batch / rate,
                  RooflineSeconds(elem * batch * (m * k + k * n + m * n)));
}

double CostModel::StreamLaunchSeconds(double bytes) const {
  const std::vector<StreamPoint>& c = profile_->gpu.streaming;
  if (bytes <= 0) return 0;
  if (c.empty()) return RooflineSeconds(bytes);
  // Below the smallest point a launch costs what the smallest did; above the largest the rate
  // is the largest point's; in between, log-log interpolation.
  if (bytes >= c.back().bytes) return c.back().seconds * bytes / c.back().bytes;
  return InterpLogX(c, bytes, [](const StreamPoint& p) { return p.bytes; },
                    [](const StreamPoint& p) { return p.seconds; }, /*log_y=*/true);
}

double CostModel::StreamSeconds(double bytes, int launches) const {
  if (bytes <= 0) return 0;
  if (stack_ != SoftwareStack::kDsplanRuntime) return MemoryBoundSeconds(bytes);
  const int n = std::clamp(launches, 1, kRuntimeMaxStreamLaunches);
  return n * StreamLaunchSeconds(bytes / n);
}

double CostModel::MemoryBoundSeconds(double bytes) const {
  // dsplan's runtime: one streaming kernel, at the measured per-launch curve.
  if (stack_ == SoftwareStack::kDsplanRuntime) return StreamLaunchSeconds(bytes);
  // PyTorch's (and DeepSpeed's fused) streaming kernels, at their measured rate.
  return bytes / EagerRate(KernelClass::kStream, false);
}

double CostModel::EagerRate(KernelClass c, bool backward) const {
  // The measured rate of PyTorch's kernels of this class on the machine of the stack
  // measurement, scaled by this profile's streaming rate over that machine's.
  const StackCosts& s = *stack_costs_;
  const GpuProfile& g = profile_->gpu;
  const double eff = g.memory_bound_efficiency.value > 0 ? g.memory_bound_efficiency.value : 0.8;
  const double bw = g.hbm_bytes_per_s.value > 0 ? g.hbm_bytes_per_s.value : 1e12;
  const double scale = bw * eff / s.reference_stream_bytes_per_s;
  const int i = static_cast<int>(c);
  return (backward ? s.bwd_bytes_per_s[i] : s.fwd_bytes_per_s[i]) * scale;
}

double CostModel::PyTorchOptimizerSeconds(const Task& t, double dispatch) const {
  // The step's kernels at PyTorch's rates for each: the fp64 copies and norms of the gradient
  // norm, the widening copies at their class's, the inner optimizer's kernel and the passes
  // over flat tensors (flatten, unscale, the copy back) at their measured rates
  // (StackCosts::step_flat_bytes_per_s and the Adam ones). The host walks the partition's parameter
  // tensors in Python (measured per tensor); the kernels run while it does, so the step takes the
  // longer of the two.
  const StackCosts& s = *stack_costs_;
  const double stream = EagerRate(KernelClass::kStream, false);
  const double scale = stream / s.fwd_bytes_per_s[static_cast<int>(KernelClass::kStream)];
  // A kernel measured on the stack's machine at its own rate, scaled to this profile; one not
  // measured at the streaming class's.
  const auto rate = [&](double measured) { return measured > 0 ? measured * scale : stream; };
  const double flat_rate = rate(s.step_flat_bytes_per_s);
  const double adam_rate = rate(t.torch_adam ? s.torch_adam_bytes_per_s : s.fused_adam_bytes_per_s);
  // |bytes| split into Adam's and the flat passes' (the rest).
  const auto flat_and_adam = [&](double bytes, double adam) {
    adam = std::min(adam, bytes);
    return (bytes - adam) / flat_rate + adam / adam_rate;
  };
  const double rest =
      std::max(0.0, t.bytes - t.fp64_cast_bytes - t.fp64_norm_bytes - t.cast_up_bytes);
  double gpu = flat_and_adam(rest, t.adam_bytes) +
               t.cast_up_bytes / EagerRate(KernelClass::kCastUp, false) +
               t.fp64_cast_bytes / rate(s.fp64_cast_bytes_per_s) +
               t.fp64_norm_bytes / rate(s.fp64_norm_bytes_per_s);
  if (t.flops > 0) gpu += t.flops / PeakFlops(Precision::kFp32);
  double host = t.kernels * dispatch;
  double after_host = 0;
  if (t.step_param_tensors > 0) {
    const int n = t.step_param_tensors;
    if (t.step_stage == 3) {
      host = s.z3_step_s + n * s.z3_step_per_param_s;
    } else if (t.step_stage == 0) {
      // BF16_Optimizer: the host's loops, then the kernels it issues after its last
      // synchronisation (Adam, the copy back, the fill) run on their own.
      host = t.step_clip ? s.bf16_clip_step_s + n * s.bf16_clip_step_per_param_s
                         : s.bf16_step_s + n * s.bf16_step_per_param_s;
      after_host = flat_and_adam(t.after_sync_bytes, t.adam_bytes);
    } else {
      host = s.z12_step_s + n * s.z12_step_per_param_s;
    }
  }
  return std::max(gpu, host + after_host);
}

double CostModel::EagerSeconds(const Op& op, bool backward) const {
  if (stack_ == SoftwareStack::kDsplanRuntime) {
    return MemoryBoundSeconds(backward ? op.bwd_bytes : op.fwd_bytes);
  }
  if (op.eager.empty()) {
    return (backward ? op.bwd_bytes : op.fwd_bytes) /
           EagerRate(DefaultKernelClass(op.kind), backward);
  }
  double t = 0;
  const auto& bytes = backward ? op.eager.bwd : op.eager.fwd;
  for (int c = 0; c < kKernelClassCount; ++c) {
    if (bytes[c] > 0) t += bytes[c] / EagerRate(static_cast<KernelClass>(c), backward);
  }
  return t;
}

double CostModel::OpForwardSeconds(const Op& op) const {
  switch (op.kind) {
    case OpKind::kGemm:
      return LinearGemmSeconds(GemmLayout::kNT, op.m * std::max<int64_t>(1, op.batch), op.n, op.k);
    case OpKind::kBatchedGemm:
      return BatchedGemmSeconds(GemmLayout::kNN, op.m, op.n, op.k, op.batch,
                                op.fp32 ? Precision::kFp32 : precision_);
    case OpKind::kAttention: {
      if (stack_ == SoftwareStack::kDsplanRuntime) return RuntimeAttentionSeconds(op, false);
      return StackAttentionSeconds(op, false);
    }
    default:
      return EagerSeconds(op, false);
  }
}

double CostModel::OpBackwardSeconds(const Op& op) const {
  switch (op.kind) {
    case OpKind::kGemm:
      // Linear: dX[m,k] = dY[m,n] W[n,k] (nn) and dW[n,k] = dY^T X (tn, reducing over tokens);
      // in eager PyTorch, the bias gradient's reduction (the op's eager backward bytes).
      return LinearGemmSeconds(GemmLayout::kNN, op.m, op.k, op.n) +
             LinearGemmSeconds(GemmLayout::kTN, op.n, op.k, op.m) +
             BackwardMemoryBoundPart(op);
    case OpKind::kBatchedGemm:
      // C = A B: dA = dC B^T (nt: m, k, n) and dB = A^T dC (tn: k, n, m).
      return BatchedGemmSeconds(GemmLayout::kNT, op.m, op.k, op.n, op.batch,
                                op.fp32 ? Precision::kFp32 : precision_) +
             BatchedGemmSeconds(GemmLayout::kTN, op.k, op.n, op.m, op.batch,
                                op.fp32 ? Precision::kFp32 : precision_);
    case OpKind::kAttention: {
      if (stack_ == SoftwareStack::kDsplanRuntime) return RuntimeAttentionSeconds(op, true);
      return StackAttentionSeconds(op, true);
    }
    default:
      return EagerSeconds(op, true);
  }
}

namespace {

// Linear interpolation of y in log x through (x, y) points sorted by x; clamped at the ends.
double LogInterp(const std::vector<std::pair<double, double>>& pts, double x) {
  return InterpLogX(pts, x, PairX, PairY);
}

}  // namespace

double FusedAttentionRate(const std::vector<AttentionPoint>& table, Precision dtype,
                          int64_t head_dim, bool causal, double seq, double rows,
                          bool backward) {
  // The points of this head dim and mask, in |dtype| when the table has it, else in the other
  // 16-bit dtype (the same kernel).
  std::vector<const AttentionPoint*> pts;
  for (int pass = 0; pass < 2 && pts.empty(); ++pass) {
    for (const AttentionPoint& p : table) {
      const bool dtype_ok = pass == 0 ? p.dtype == dtype : p.dtype != Precision::kFp32;
      if (dtype_ok && p.head_dim == head_dim && p.causal == causal && p.seq > 0 &&
          p.batch_heads > 0) {
        pts.push_back(&p);
      }
    }
  }
  if (pts.empty() || seq <= 0) return 0;
  // One series per amount of work (slices x seq rows): the rate at |seq| along each, then
  // across the series at |rows|.
  std::map<double, std::vector<std::pair<double, double>>> series;
  for (const AttentionPoint* p : pts) {
    series[static_cast<double>(p->batch_heads) * static_cast<double>(p->seq)].push_back(
        {static_cast<double>(p->seq), backward ? p->bwd_flops_per_s : p->fwd_flops_per_s});
  }
  std::vector<std::pair<double, double>> by_rows;
  for (auto& [r, s] : series) {
    std::sort(s.begin(), s.end());
    by_rows.push_back({r, LogInterp(s, seq)});
  }
  return LogInterp(by_rows, rows > 0 ? rows : by_rows.back().first);
}

double CostModel::BackwardMemoryBoundPart(const Op& op) const {
  if (op.kind != OpKind::kGemm || stack_ == SoftwareStack::kDsplanRuntime || op.eager.empty()) {
    return 0;
  }
  return EagerSeconds(op, true);
}

double CostModel::StackAttentionSeconds(const Op& op, bool backward) const {
  const GpuProfile& g = profile_->gpu;
  const double bytes = backward ? op.bwd_bytes : op.fwd_bytes;
  if (!g.sdpa.empty()) {
    // The measured head dim nearest the op's (the kernels are tiled by head dim; a head dim
    // between two measured ones runs the larger one's tiles, so ties go up).
    int64_t hd = 0;
    for (const AttentionPoint& p : g.sdpa) {
      const int64_t d = std::llabs(p.head_dim - op.k), best = std::llabs(hd - op.k);
      if (hd == 0 || d < best || (d == best && p.head_dim > hd)) hd = p.head_dim;
    }
    const double B = static_cast<double>(std::max<int64_t>(1, op.batch));
    const double seq = std::sqrt(static_cast<double>(op.m) * static_cast<double>(op.n));
    const double rate = FusedAttentionRate(g.sdpa, precision_, hd, op.causal, seq, B * seq,
                                           backward);
    if (rate > 0) {
      // FLOPs as the table counts them: forward 4 b h sq sk d (halved when causal), backward
      // 2.5x the forward.
      const double fwd = 4.0 * B * static_cast<double>(op.m) * static_cast<double>(op.n) *
                         static_cast<double>(op.k) / (op.causal ? 2.0 : 1.0);
      // The table was measured without dropout; with it, the forward kernel generates the
      // Philox mask inline and runs slower by a measured ratio (StackCosts).
      const double dropout = !backward && op.dropout ? stack_costs_->sdpa_dropout_fwd_ratio : 1.0;
      return std::max(dropout * (backward ? 2.5 * fwd : fwd) / rate, MemoryBoundSeconds(bytes));
    }
  }
  const double eff = g.attention_efficiency.value > 0 ? g.attention_efficiency.value : 0.5;
  const double flops = (op.causal ? 0.5 : 1.0) * (backward ? op.bwd_flops : op.fwd_flops);
  // Fused backward kernels recompute the scores: about 2.5x the forward's work.
  return std::max((backward ? 1.25 : 1.0) * flops / (PeakFlops(precision_) * eff),
                  MemoryBoundSeconds(bytes));
}

double CostModel::RuntimeAttentionSeconds(const Op& op, bool backward) const {
  const double B = static_cast<double>(std::max<int64_t>(1, op.batch));
  const int64_t sq = op.m, sk = op.n;
  const double d = static_cast<double>(op.k);
  // The runtime's fused kernel (runtime/cuda/flash_attention.h) runs what it supports; it is
  // priced from the profile's measured table at the geometric mean of the query and key
  // lengths (the sequence length of self-attention) and that many rows per slice.
  if (FusedAttentionSupports(precision_, op.k)) {
    const double seq = std::sqrt(static_cast<double>(sq) * static_cast<double>(sk));
    const double rate = FusedAttentionRate(profile_->gpu.attention, precision_, op.k, op.causal,
                                           seq, B * seq, backward);
    if (rate > 0) {
      const double fwd = 4.0 * B * static_cast<double>(sq) * static_cast<double>(sk) * d /
                         (op.causal ? 2.0 : 1.0);
      return (backward ? 2.5 * fwd : fwd) / rate;
    }
  }
  // Otherwise (a dtype or head dim the kernel lacks, or a profile without the table) it runs,
  // or is priced as, the tiled stand-in (docs/runtime.md): per block of kRuntimeAttentionBlock
  // query rows, strided-batched GEMMs over the keys the causal mask keeps, the block's scores
  // going through HBM. Forward: S = Q Kt, O = S V. Backward: S again, dP = dO Vt, dV = St dO,
  // dQ = dP K, dK = dPt Q. Each is priced as a GEMM.
  constexpr int64_t kRuntimeAttentionBlock = 128;
  double t = 0;
  for (int64_t r0 = 0; r0 < sq; r0 += kRuntimeAttentionBlock) {
    const double rows = static_cast<double>(std::min(kRuntimeAttentionBlock, sq - r0));
    const double keys = static_cast<double>(
        op.causal ? std::clamp<int64_t>(r0 + static_cast<int64_t>(rows) + (sk - sq), 1, sk) : sk);
    t += GemmSeconds(precision_, rows, keys, d, B);              // S
    if (!backward) {
      t += GemmSeconds(precision_, rows, d, keys, B);            // O
    } else {
      t += GemmSeconds(precision_, rows, keys, d, B) +           // dP
           2 * GemmSeconds(precision_, keys, d, rows, B) +       // dV, dK
           GemmSeconds(precision_, rows, d, keys, B);            // dQ
    }
  }
  return t;
}

double CostModel::DispatchSeconds() const {
  // Host time of one kernel issued from a Python loop over tensors (DeepSpeed's gradient
  // copies, optimizer and collective calls): a plain eager tensor op, measured
  // (the profile's stack costs), never below the measured bare kernel launch. dsplan's runtime issues
  // each kernel from C++ at the measured launch cost.
  const double launch = profile_->gpu.kernel_launch_s.value > 0 ? profile_->gpu.kernel_launch_s.value
                                                                 : 5e-6;
  if (stack_ == SoftwareStack::kDsplanRuntime) return launch;
  return std::max(stack_costs_->kernel_fwd_s, launch);
}

LayerCost CostModel::Layer(const dsplan::Layer& layer) const {
  // A layer of no known family: the scale over every measured family.
  return LayerWithMemo(layer, {}, stack_costs_->ScaleForUnmeasured({}), nullptr);
}

LayerCost CostModel::LayerWithMemo(const dsplan::Layer& layer, std::string_view model_type,
                                   const UnmeasuredHostScale& scale, OpMemo* memo) const {
  LayerCost c;
  const StackCosts& stack = *stack_costs_;
  // The ops as the per-op host estimate counts them (used when the layer's family was not
  // measured whole).
  TracedOps traced;
  int32_t module_ops = 0;
  for (const Op& op : layer.ops) {
    traced.Add(op);
    switch (op.kind) {
      case OpKind::kGemm:
      case OpKind::kNorm:
      case OpKind::kEmbedding:
      case OpKind::kActivation:
      case OpKind::kDropout:
        ++module_ops;  // ops that are nn.Module calls in transformers' code
        break;
      default:
        break;
    }
    // Transformer blocks repeat the same ops: price each distinct op once per Layers() call
    // (the table lookups scan the profile's measured rows).
    OpSeconds t;
    double eager_sig = 0;
    for (int k = 0; k < kKernelClassCount; ++k) {
      eager_sig += op.eager.fwd[k] * (k + 1) + op.eager.bwd[k] * (k + 1 + kKernelClassCount);
    }
    const int flags = (op.causal ? 1 : 0) | (op.fp32 ? 2 : 0) | (op.dropout ? 4 : 0);
    const OpMemoKey key{static_cast<int>(op.kind), op.m, op.n, op.k, op.batch, flags,
                        op.fwd_bytes, op.bwd_bytes, eager_sig};
    auto hit = memo ? memo->find(key) : OpMemo::iterator{};
    if (memo && hit != memo->end()) {
      t = hit->second;
    } else {
      t = {OpForwardSeconds(op), OpBackwardSeconds(op), BackwardMemoryBoundPart(op)};
      if (memo) memo->emplace(key, t);
    }
    const double f = t.fwd, b = t.bwd;
    switch (op.kind) {
      case OpKind::kGemm:
      case OpKind::kBatchedGemm:
        // A Linear's bias-gradient reduction is memory-bound, not a GEMM (no sustained-load
        // scaling).
        c.fwd_gemm_s += f;
        c.bwd_gemm_s += b - t.bwd_memory;
        c.bwd_memory_s += t.bwd_memory;
        break;
      case OpKind::kAttention:
        c.fwd_attention_s += f;
        c.bwd_attention_s += b;
        break;
      default:
        c.fwd_memory_s += f;
        c.bwd_memory_s += b;
        break;
    }
  }
  const double op_fwd_host = stack.PerOpFwd(traced), op_bwd_host = stack.PerOpBwd(traced);
  double recompute_host = 0;
  const bool block =
      layer.kind == LayerKind::kEncoderBlock || layer.kind == LayerKind::kDecoderBlock;
  if (stack_ == SoftwareStack::kDsplanRuntime) {
    // dsplan's runtime: one launch per op forward, about two in backward.
    const double n = static_cast<double>(layer.ops.size());
    c.fwd_dispatch_s = n * DispatchSeconds();
    c.bwd_dispatch_s = 2 * n * DispatchSeconds();
    recompute_host = c.fwd_dispatch_s;
    c.modules = module_ops;
  } else if (const FamilyBlockHost* fam = block ? stack.Block(model_type, layer.kind) : nullptr) {
    // The family's block, measured whole (transformers' module code, views, the checkpoint
    // wrapper): forward; backward; under checkpointing the backward's extra host time is the
    // recomputation's.
    c.fwd_dispatch_s = layer.checkpointed ? fam->ckpt_fwd_s : fam->fwd_s;
    c.bwd_dispatch_s = fam->bwd_s;
    recompute_host = layer.checkpointed ? std::max(0.0, fam->ckpt_bwd_s - fam->bwd_s) : 0;
    c.modules = fam->modules;
  } else if (block) {
    // No measurement of the family's block: its per-op estimate; the forward's scaled by what
    // the measured families' blocks took against theirs (the estimate leaves out transformers'
    // views, reshapes and module code, and the checkpoint wrapper's work, all Python that runs
    // in forward and recomputation; the backward runs in autograd's engine).
    c.fwd_dispatch_s = op_fwd_host * (layer.checkpointed ? scale.ckpt_fwd : scale.fwd);
    c.bwd_dispatch_s = op_bwd_host;
    recompute_host = op_fwd_host * scale.recompute;
    // The block itself and its attention and MLP containers are modules too.
    c.modules = module_ops + 3;
  } else {
    // Outside the blocks (embeddings, masks, head, loss), likewise against the measured rests.
    c.fwd_dispatch_s = op_fwd_host * scale.rest_fwd;
    c.bwd_dispatch_s = op_bwd_host;
    recompute_host = c.fwd_dispatch_s;
    c.modules = module_ops;
  }
  c.recompute_dispatch_s = layer.checkpointed ? recompute_host : 0;
  c.fwd_s = std::max(c.FwdGpuSeconds(), c.fwd_dispatch_s);
  c.bwd_s = std::max(c.BwdGpuSeconds(), c.bwd_dispatch_s);
  c.recompute_s = layer.checkpointed ? std::max(c.FwdGpuSeconds(), recompute_host) : 0;
  return c;
}

std::vector<LayerCost> CostModel::Layers(const Workload& w) const { return Layers(w, true); }

std::vector<LayerCost> CostModel::Layers(const Workload& w, bool family_measured) const {
  std::vector<LayerCost> out = LayersAlone(w, family_measured);
  ApplySustainedLoad(w, SustainedLoadRatio(out), &out);
  return out;
}

double CostModel::WorkloadSustainedRatio(const Workload& w, bool family_measured) const {
  return SustainedLoadRatio(LayersAlone(w, family_measured));
}

std::vector<LayerCost> CostModel::LayersAlone(const Workload& w, bool family_measured) const {
  const std::string_view family = family_measured ? std::string_view(w.spec.model_type) : "";
  std::vector<LayerCost> out;
  out.reserve(w.layers.size());
  OpMemo memo;
  // Layers without their family's measurement (all of them with |family_measured| false, which
  // holds the model's family out): the scale over the other measured families. Only computed
  // when some layer needs it (a measured family's blocks and rest do not).
  const StackCosts& sc = *stack_costs_;
  bool measured = !family.empty() && sc.Rest(family) != nullptr;
  for (const dsplan::Layer& l : w.layers) {
    const bool block = l.kind == LayerKind::kEncoderBlock || l.kind == LayerKind::kDecoderBlock;
    if (measured && block && sc.Block(family, l.kind) == nullptr) measured = false;
  }
  const UnmeasuredHostScale scale =
      measured ? UnmeasuredHostScale{} : sc.ScaleForUnmeasured(w.spec.model_type);
  for (const dsplan::Layer& l : w.layers) out.push_back(LayerWithMemo(l, family, scale, &memo));
  // The measured host time of the model outside its blocks (masks, position tables, head and
  // loss code) replaces the per-op estimate of those layers: it is charged to the first
  // embedding layer, the others keep only their kernels.
  const FamilyRestHost* rest = stack_ == SoftwareStack::kDsplanRuntime
                                   ? nullptr
                                   : stack_costs_->Rest(family);
  if (rest) {
    bool first = true;
    for (size_t i = 0; i < out.size(); ++i) {
      const LayerKind k = w.layers[i].kind;
      if (k == LayerKind::kEncoderBlock || k == LayerKind::kDecoderBlock) continue;
      LayerCost& c = out[i];
      const bool charge = first && k == LayerKind::kEmbedding;
      c.fwd_dispatch_s = charge ? rest->fwd_s : 0;
      c.bwd_dispatch_s = charge ? rest->bwd_s : 0;
      if (charge) first = false;
      c.fwd_s = std::max(c.FwdGpuSeconds(), c.fwd_dispatch_s);
      c.bwd_s = std::max(c.BwdGpuSeconds(), c.bwd_dispatch_s);
    }
  }
  return out;
}

double CostModel::SustainedGemmRatio(double duty) const {
  const std::vector<DutyPoint>& pts = profile_->gpu.sustained_gemm;
  if (pts.empty() || duty <= 0) return 1;
  if (duty <= pts.front().duty) return 1 + (pts.front().time_ratio - 1) * duty / pts.front().duty;
  for (size_t i = 1; i < pts.size(); ++i) {
    if (duty <= pts[i].duty) {
      const DutyPoint& a = pts[i - 1];
      const DutyPoint& b = pts[i];
      return a.time_ratio + (b.time_ratio - a.time_ratio) * (duty - a.duty) / (b.duty - a.duty);
    }
  }
  return pts.back().time_ratio;
}

double CostModel::SustainedLoadRatio(const std::vector<LayerCost>& alone) const {
  // GEMMs that keep the tensor cores busy most of the time bring the GPU to its power limit,
  // which lowers its clock; the profile's GEMM table was measured one call at a time
  // (docs/stack-costs.md section 7). The duty is the share of the layers' time (forward,
  // backward and recompute, each the longer of its kernels and its host work) in GEMMs and fused
  // attention; their kernels take the profile's measured ratio at that duty.
  if (profile_->gpu.sustained_gemm.empty()) return 1;
  double tensor = 0, total = 0;
  for (const LayerCost& c : alone) {
    const double fwd_tc = c.fwd_gemm_s + c.fwd_attention_s;
    tensor += fwd_tc + c.bwd_gemm_s + c.bwd_attention_s + (c.recompute_s > 0 ? fwd_tc : 0);
    total += c.fwd_s + c.bwd_s + c.recompute_s;
  }
  return total > 0 ? SustainedGemmRatio(tensor / total) : 1;
}

void CostModel::ApplySustainedLoad(const Workload& w, double r,
                                   std::vector<LayerCost>* layers) const {
  if (r == 1) return;
  for (size_t i = 0; i < layers->size(); ++i) {
    LayerCost& c = (*layers)[i];
    c.fwd_gemm_s *= r;
    c.bwd_gemm_s *= r;
    c.fwd_attention_s *= r;
    c.bwd_attention_s *= r;
    c.fwd_s = std::max(c.FwdGpuSeconds(), c.fwd_dispatch_s);
    c.bwd_s = std::max(c.BwdGpuSeconds(), c.bwd_dispatch_s);
    if (w.layers[i].checkpointed) {
      c.recompute_s = std::max(c.FwdGpuSeconds(), c.recompute_dispatch_s);
    }
  }
}

double CostModel::CollectiveSeconds(Collective c, int ranks, bool inter_node, double bytes) const {
  if (ranks <= 1 || bytes <= 0) return 0;
  if (fake_process_group_) {
    // The fake backend's all-gather: output.chunk(N)[i].copy_(input) for every i; the rank's
    // own chunk is the input itself in DeepSpeed's calls (a view of the flat buffer), which
    // copy_ skips. Other collectives leave the data where it is (docs/deepspeed-facts.md).
    if (c != Collective::kAllGather) return 0;
    const double moved = bytes * (ranks - 1) / ranks;
    return MemoryBoundSeconds(2.0 * moved);
  }
  // The curve for this op, scope and the nearest rank count; else the all-reduce curve of the
  // scope (same links), else any curve of the scope.
  const CollectiveCurve* best = nullptr;
  int best_score = std::numeric_limits<int>::max();
  for (const CollectiveCurve& cc : profile_->links.collectives) {
    if (cc.inter_node != inter_node) continue;
    const int score = (cc.op == c ? 0 : (cc.op == Collective::kAllReduce ? 1000 : 2000)) +
                      std::abs(cc.ranks - ranks);
    if (score < best_score) {
      best_score = score;
      best = &cc;
    }
  }
  if (best == nullptr) return dsplan::CollectiveSeconds(c, ranks, bytes, 20e-6, 50e9);
  double busbw = best->busbw_bytes_per_s.value;
  if (best->op == c && best->ranks == ranks && best->points.size() >= 2) {
    // Measured points already include latency effects at their sizes.
    if (bytes >= best->points.front().bytes && bytes <= best->points.back().bytes) {
      const double bw = CurveBandwidth(best->points, bytes);
      const double factor = BusFactor(c, ranks);
      return bw > 0 ? bytes * factor / bw : 0;
    }
  }
  if (busbw <= 0) busbw = 50e9;
  return dsplan::CollectiveSeconds(c, ranks, bytes, best->alpha_s.value, busbw);
}

double CostModel::CopySeconds(bool h2d, bool pinned, double bytes) const {
  const LinkProfile& l = profile_->links;
  const CopyCurve& c = h2d ? (pinned ? l.h2d_pinned : l.h2d_pageable)
                           : (pinned ? l.d2h_pinned : l.d2h_pageable);
  return CopyCurveSeconds(c, bytes);
}

double CostModel::HostFaultSeconds(double bytes) const {
  if (bytes <= 0) return 0;
  const double rate = profile_->host.pageable_alloc_bytes_per_s.value;
  return rate > 0 ? bytes / rate : 0;
}

double CostModel::CastCopyFaultSeconds(double bytes) const {
  // A cast copy's fresh temporary is faulted in inside the copy: the measured curve's
  // fresh-mapping points include it; a curve without them is the heap regime's, so the faults
  // go on top at the host's one-thread page-fault rate.
  if (stack_ == SoftwareStack::kPyTorchDeepSpeed && stack_costs_->FreshCastCopyMeasured()) {
    return 0;
  }
  return HostFaultSeconds(bytes);
}

double CostModel::ParallelFaultSeconds(double bytes) const {
  if (bytes <= 0) return 0;
  const double rate = profile_->host.parallel_alloc_bytes_per_s.value;
  return rate > 0 ? bytes / rate : HostFaultSeconds(bytes);
}

double CostModel::CpuAdamSeconds(double elements, int threads) const {
  if (elements <= 0) return 0;
  return elements / CpuAdamRate(threads);
}

double CostModel::HostStreamSeconds(double bytes, int threads) const {
  if (bytes <= 0) return 0;
  // The measured CPU Adam kernel streams 28 bytes per element (reads p, g, m, v; writes p, m,
  // v) and is memory-bound at the rank's thread count, so 28 x its rate is the host memory
  // bandwidth a PyTorch CPU elementwise pass (TensorIterator over the same threads) reaches.
  return bytes / (28.0 * CpuAdamRate(threads));
}

double CostModel::CpuAdamRate(int threads) const {
  const std::vector<CpuAdamPoint>& pts = profile_->host.cpu_adam;
  double rate = 0;
  if (!pts.empty()) {
    // The best point at or below |threads| (more threads than measured do not help past the
    // memory bandwidth); scale linearly below the first point.
    const CpuAdamPoint* below = nullptr;
    for (const CpuAdamPoint& p : pts) {
      if (p.threads <= threads && (below == nullptr || p.threads > below->threads)) below = &p;
    }
    if (below != nullptr) {
      rate = below->elements_per_s;
    } else {
      rate = pts.front().elements_per_s * threads / std::max(1, pts.front().threads);
    }
  }
  if (rate <= 0) rate = 2e8 * std::max(1, threads);
  return rate;
}

double CostModel::NvmeSeconds(bool read, double bytes) const {
  const NvmeProfile& n = profile_->nvme;
  const double bw = read ? n.read_bytes_per_s.value : n.write_bytes_per_s.value;
  return bytes / (bw > 0 ? bw : 2e9);
}

double CostModel::HostLoopSeconds(const Task& t, double dispatch) const {
  // DeepSpeed's per-parameter loop at an offloaded boundary (Task::host_loop): the host issues
  // a tensor's ops, then waits for the GPU (stage 1/2: the overflow check's read, behind the
  // previous tensor's copy on the same stream; ZeRO-3: the blocking cast copy, behind the
  // tensor's copies to the host buffer and back). So each tensor takes the longer of its host
  // ops and the work they queue, plus ZeRO-3's blocking copy itself: small tensors cost their
  // host ops, large ones their copies, and the two do not hide each other across tensors.
  // Per size class, each tensor at its class's mean size.
  int tensors = 0;
  double all = 0;
  for (int k = 0; k < Task::kCastCopyClasses; ++k) {
    tensors += t.cast_copies[k];
    all += t.cast_copy_bytes[k];
  }
  if (tensors <= 0 || all <= 0) {
    return std::max(StreamSeconds(t.bytes, t.kernels), t.kernels * dispatch);
  }
  const bool z3 = t.host_loop == HostLoop::kZero3PartitionGrads;
  // Host ops per tensor before its wait (ZeRO-3's blocking copy is timed on its own curve).
  const double ops = std::max(0.0, static_cast<double>(t.kernels) / tensors - (z3 ? 1.0 : 0.0));
  const StackCosts& sc = *stack_costs_;
  double s = z3 ? CastCopyFaultSeconds(t.host_fault_bytes) : HostFaultSeconds(t.host_fault_bytes);
  for (int k = 0; k < Task::kCastCopyClasses; ++k) {
    const int n = t.cast_copies[k];
    if (n <= 0) continue;
    const double share = t.cast_copy_bytes[k] / all;
    double queued = MemoryBoundSeconds(t.bytes * share);
    if (t.loop_d2h_bytes > 0) queued += n * CopySeconds(false, t.pinned, t.loop_d2h_bytes * share / n);
    if (t.loop_h2d_bytes > 0) queued += n * CopySeconds(true, t.pinned, t.loop_h2d_bytes * share / n);
    s += std::max(n * ops * dispatch, queued);
    if (z3) {
      const double each = t.cast_copy_bytes[k] / n;
      s += n * (sc.cast_copy_d2h.empty()
                    ? CopySeconds(false, false, each)
                    : sc.CastCopyD2HSeconds(each, k != Task::kFreshCastCopyClass));
    }
  }
  return s;
}

double CostModel::HookSeconds(const Task& t, const LayerCost& c) const {
  if (stack_ == SoftwareStack::kDsplanRuntime) return 0;
  // Stages 1-2: the tensor ops the gradient hooks' flushes issue in Python on this thread.
  const double ops = t.hook_kernels * DispatchSeconds();
  if (!t.zero3_hooks) return ops;
  // DeepSpeed ZeRO-3's hooks on every submodule of the layer and per partitioned parameter
  // tensor (fetch and release in forward and recompute; the backward hooks and gradient
  // reduction bookkeeping in backward), measured (the profile's stack section or the built-in).
  // Each gather call (one all_gather_coalesced handle: its stream switch, wait and event) costs
  // the same in any phase: the fetch path is shared.
  const StackCosts& s = *stack_costs_;
  const double calls = t.gather_calls * s.z3_per_gather_call_s;
  if (t.kind == TaskKind::kBackward) {
    // The reduce-bucket flushes its gradient hooks run (stream waits, the reduce-scatter call,
    // partitioning the bucket's gradients in Python), on the same thread.
    return c.modules * s.z3_bwd_per_module_s + t.gathered_tensors * s.z3_bwd_per_param_s + calls +
           t.bucket_flushes * s.z3_per_bucket_flush_s + ops;
  }
  return c.modules * s.z3_fwd_per_module_s + t.gathered_tensors * s.z3_fwd_per_param_s + calls;
}

bool CostModel::LayerTaskParts(const Task& t, const std::vector<LayerCost>& layers,
                               double* gpu_s, double* host_s) const {
  if (t.kind != TaskKind::kForward && t.kind != TaskKind::kRecompute &&
      t.kind != TaskKind::kBackward) {
    return false;
  }
  *gpu_s = *host_s = 0;
  if (t.layer < 0) return true;
  const LayerCost& c = layers[t.layer];
  const double parts = std::max(1, t.parts);
  *gpu_s = (t.kind == TaskKind::kBackward ? c.BwdGpuSeconds() : c.FwdGpuSeconds()) / parts;
  const double host = t.kind == TaskKind::kForward    ? c.fwd_dispatch_s
                      : t.kind == TaskKind::kRecompute ? c.recompute_dispatch_s
                                                       : c.bwd_dispatch_s;
  *host_s = host / parts + HookSeconds(t, c);
  return true;
}

double CostModel::TaskSeconds(const Task& t, const std::vector<LayerCost>& layers,
                              int cpu_threads) const {
  return TaskSeconds(t, layers, cpu_threads, nullptr);
}

double CostModel::TaskSeconds(const Task& t, const std::vector<LayerCost>& layers,
                              int cpu_threads, bool* host_bound) const {
  if (host_bound != nullptr) *host_bound = false;
  const double dispatch = DispatchSeconds();
  switch (t.kind) {
    // A layer's kernels run no faster than the Python thread issues them. ZeRO-3's hooks are
    // more work on that same thread, not a wait for the GPU: the parameter coordinator blocks
    // the host only when more than two all-gather events are outstanding, and those complete on
    // the all-gather stream, not behind the compute queue (partitioned_param_coordinator.py,
    // fetch_sub_module; docs/stack-costs.md). So a layer takes the longer of its kernels and its
    // host work with the hooks. dsplan's runtime has no Python hooks: its gathers are the graph's
    // own collective tasks.
    case TaskKind::kForward:
    case TaskKind::kRecompute:
    case TaskKind::kBackward: {
      if (t.layer < 0) return 0;
      const LayerCost& c = layers[t.layer];
      // A tiled layer's task is one of |parts| tiles: 1/parts of its kernels and host work.
      const double parts = std::max(1, t.parts);
      const bool bwd = t.kind == TaskKind::kBackward;
      const double gpu = bwd ? c.BwdGpuSeconds() : c.FwdGpuSeconds();
      const double host = t.kind == TaskKind::kForward    ? c.fwd_dispatch_s
                          : t.kind == TaskKind::kRecompute ? c.recompute_dispatch_s
                                                           : c.bwd_dispatch_s;
      const double plain = t.kind == TaskKind::kForward    ? c.fwd_s
                           : t.kind == TaskKind::kRecompute ? c.recompute_s
                                                            : c.bwd_s;
      const double hooks = HookSeconds(t, c);
      if (host_bound != nullptr) *host_bound = host / parts + hooks > gpu / parts;
      return hooks > 0 ? std::max(gpu / parts, host / parts + hooks) : plain / parts;
    }
    case TaskKind::kGpuOptimizer:
      if (stack_ == SoftwareStack::kPyTorchDeepSpeed) return PyTorchOptimizerSeconds(t, dispatch);
      [[fallthrough]];
    case TaskKind::kGradCopy:
      if (t.host_loop != HostLoop::kNone && stack_ == SoftwareStack::kPyTorchDeepSpeed) {
        return HostLoopSeconds(t, dispatch);
      }
      // Memory-bound kernels issued from Python loops (per parameter or per tensor list): the
      // host's dispatch bounds them when the tensors are small. dsplan's runtime issues the
      // task's bytes as |kernels| streaming launches. On PyTorch, dtype conversions within the
      // bytes run at their own classes' rates.
      if (stack_ == SoftwareStack::kPyTorchDeepSpeed &&
          (t.cast_up_bytes > 0 || t.cast_down_bytes > 0)) {
        const double rest = std::max(0.0, t.bytes - t.cast_up_bytes - t.cast_down_bytes);
        return std::max(rest / EagerRate(KernelClass::kStream, false) +
                            t.cast_up_bytes / EagerRate(KernelClass::kCastUp, false) +
                            t.cast_down_bytes / EagerRate(KernelClass::kCastDown, false),
                        t.kernels * dispatch);
      }
      return std::max(StreamSeconds(t.bytes, t.kernels) +
                          (t.flops > 0 ? t.flops / PeakFlops(Precision::kFp32) : 0),
                      t.kernels * dispatch);
    case TaskKind::kAllReduce:
    case TaskKind::kReduceScatter:
    case TaskKind::kAllGather:
      return CollectiveSeconds(CollectiveOf(t.kind), t.ranks, t.inter_node, t.bytes) +
             t.kernels * dispatch;
    case TaskKind::kCopyD2H:
      if (std::accumulate(t.cast_copies.begin(), t.cast_copies.end(), 0) > 0 &&
          stack_ == SoftwareStack::kPyTorchDeepSpeed && !stack_costs_->cast_copy_d2h.empty()) {
        // PyTorch's blocking cast copies, one per tensor, at the stack's measured cost by
        // size (each class at its mean size; the fresh temporaries' page faults are in the
        // curve's fresh-mapping points, or priced on top when it has none).
        double s = CastCopyFaultSeconds(t.host_fault_bytes);
        for (int k = 0; k < Task::kCastCopyClasses; ++k) {
          if (t.cast_copies[k] > 0) {
            s += t.cast_copies[k] *
                 stack_costs_->CastCopyD2HSeconds(t.cast_copy_bytes[k] / t.cast_copies[k],
                                                  k != Task::kFreshCastCopyClass);
          }
        }
        return s;
      }
      return CopySeconds(false, t.pinned, t.bytes) +
             HostStreamSeconds(t.host_convert_bytes, cpu_threads) +
             HostFaultSeconds(t.host_fault_bytes);
    case TaskKind::kCopyH2D:
      return CopySeconds(true, t.pinned, t.bytes) +
             HostStreamSeconds(t.host_convert_bytes, cpu_threads) +
             HostFaultSeconds(t.host_fault_bytes);
    case TaskKind::kCpuOptimizer:
      // DeepSpeedCPUAdam over the partition plus the host's other elementwise passes over the
      // fp32 tensors (|bytes| read + written: unscale_and_clip_grads' mul_, the fp32 -> 16-bit
      // cast of the updated partition), on the same threads.
      // A fresh temporary the cast writes is faulted in by the cast's threads, one mapping.
      return CpuAdamSeconds(t.elements, cpu_threads) + HostStreamSeconds(t.bytes, cpu_threads) +
             ParallelFaultSeconds(t.host_fault_bytes);
    case TaskKind::kNvmeRead:
      return NvmeSeconds(true, t.bytes);
    case TaskKind::kNvmeWrite:
      return NvmeSeconds(false, t.bytes);
  }
  return 0;
}

}  // namespace dsplan
