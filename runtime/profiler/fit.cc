#include "runtime/profiler/fit.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "runtime/profiler/device_probe.h"

namespace dsplan {

Timing Summarize(std::vector<double> samples) {
  Timing t;
  std::sort(samples.begin(), samples.end());
  const size_t n = samples.size();
  t.repeats = static_cast<int>(n);
  t.min_s = samples.front();
  t.max_s = samples.back();
  t.median_s = n % 2 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
  return t;
}

const char* CopyKindName(CopyKind k) {
  switch (k) {
    case CopyKind::kH2DPinned: return "h2d_pinned";
    case CopyKind::kH2DPageable: return "h2d_pageable";
    case CopyKind::kD2HPinned: return "d2h_pinned";
    case CopyKind::kD2HPageable: return "d2h_pageable";
  }
  return "?";
}

Result<AlphaBeta> FitAlphaBeta(const std::vector<double>& x, const std::vector<double>& t) {
  if (x.size() != t.size() || x.size() < 2) {
    return Status::InvalidArgument(
        fmt::format("an alpha-beta fit needs at least two points, got {}", x.size()));
  }
  // Minimize sum ((alpha + x_i * g - t_i) / t_i)^2 over alpha and g = 1/beta: normal equations of
  // the rows (1/t_i, x_i/t_i) -> 1.
  double s11 = 0, s12 = 0, s22 = 0, r1 = 0, r2 = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!(t[i] > 0) || !(x[i] > 0)) {
      return Status::InvalidArgument(fmt::format(
          "alpha-beta fit: point {} has size {} and time {}; both must be positive", i, x[i], t[i]));
    }
    const double a = 1 / t[i], b = x[i] / t[i];
    s11 += a * a;
    s12 += a * b;
    s22 += b * b;
    r1 += a;
    r2 += b;
  }
  double alpha = 0, g = 0;
  const double det = s11 * s22 - s12 * s12;
  if (det > 1e-12 * s11 * s22) {
    alpha = (r1 * s22 - r2 * s12) / det;
    g = (s11 * r2 - s12 * r1) / det;
  }
  if (alpha < 0 || !(g > 0)) {
    // Latency not resolvable (or negative): fit the bandwidth alone through the origin.
    alpha = 0;
    g = r2 / s22;
  }
  if (!(g > 0) || !std::isfinite(g)) {
    return Status::InvalidArgument("alpha-beta fit: the points give no positive bandwidth");
  }
  AlphaBeta out;
  out.alpha_s = alpha;
  out.bytes_per_s = 1 / g;
  for (size_t i = 0; i < x.size(); ++i) {
    out.max_rel_error = std::max(out.max_rel_error, std::abs(alpha + x[i] * g - t[i]) / t[i]);
  }
  return out;
}

Result<AlphaBeta> FitCopy(const std::vector<BandwidthPoint>& points) {
  std::vector<double> x, t;
  for (const BandwidthPoint& p : points) {
    x.push_back(p.bytes);
    t.push_back(p.bytes_per_s > 0 ? p.bytes / p.bytes_per_s : 0);
  }
  return FitAlphaBeta(x, t);
}

Result<AlphaBeta> FitCollective(Collective op, int ranks,
                                const std::vector<BandwidthPoint>& points) {
  const double factor = BusFactor(op, ranks);
  if (!(factor > 0)) {
    return Status::InvalidArgument(
        fmt::format("{} on {} rank(s) moves nothing; no fit", CollectiveName(op), ranks));
  }
  // busbw = S / t * factor, so t = S * factor / busbw: fit on x = S * factor.
  std::vector<double> x, t;
  for (const BandwidthPoint& p : points) {
    x.push_back(p.bytes * factor);
    t.push_back(p.bytes_per_s > 0 ? p.bytes * factor / p.bytes_per_s : 0);
  }
  return FitAlphaBeta(x, t);
}

Result<double> GemmEfficiency(const std::vector<GemmPoint>& points, Precision dtype,
                              double peak_flops_per_s, int64_t min_dim) {
  if (!(peak_flops_per_s > 0)) {
    return Status::InvalidArgument(
        fmt::format("no {} peak in the profile to relate GEMM rates to", PrecisionName(dtype)));
  }
  std::vector<double> eff;
  for (const GemmPoint& p : points) {
    if (p.dtype == dtype && p.m >= min_dim && p.n >= min_dim && p.k >= min_dim) {
      eff.push_back(p.flops_per_s / peak_flops_per_s);
    }
  }
  if (eff.empty()) {
    return Status::NotFound(fmt::format("no {} GEMM with m, n, k >= {} was measured",
                                        PrecisionName(dtype), min_dim));
  }
  return Summarize(eff).median_s;
}

}  // namespace dsplan
