// Fits of measured points to the cost model's forms.
//
// Copies and collectives follow t(S) = alpha + S * factor / beta (factor 1 for copies, the
// collective's bus factor from core/collectives.h for collectives). The fit minimizes the
// *relative* error of t over the points (weighted least squares with weights 1/t_i^2), so
// latency-bound small sizes and bandwidth-bound large sizes both count; alpha is clamped at 0.
#ifndef DSPLAN_RUNTIME_PROFILER_FIT_H_
#define DSPLAN_RUNTIME_PROFILER_FIT_H_

#include <vector>

#include "core/hardware_profile.h"
#include "core/status.h"

namespace dsplan {

struct AlphaBeta {
  double alpha_s = 0;
  double bytes_per_s = 0;
  double max_rel_error = 0;  // max |t_fit - t| / t over the points
};

/// Fits t = alpha + x / beta to (x_i, t_i). REQUIRES nothing; errors when fewer than two points
/// or when the points do not give a positive bandwidth.
Result<AlphaBeta> FitAlphaBeta(const std::vector<double>& x, const std::vector<double>& t);

/// A copy curve's points (bytes, achieved bytes/s) fitted as t = alpha + S / beta.
Result<AlphaBeta> FitCopy(const std::vector<BandwidthPoint>& points);

/// A collective's points (S, busbw) fitted as t = alpha + S * BusFactor / busbw, returning busbw
/// in bytes_per_s.
Result<AlphaBeta> FitCollective(Collective op, int ranks,
                                const std::vector<BandwidthPoint>& points);

/// The large-GEMM efficiency: the median of flops / peak over the points of |dtype| whose m, n
/// and k are all >= |min_dim|. Errors when there is no such point or the peak is 0.
Result<double> GemmEfficiency(const std::vector<GemmPoint>& points, Precision dtype,
                              double peak_flops_per_s, int64_t min_dim = 4096);

}  // namespace dsplan

#endif  // DSPLAN_RUNTIME_PROFILER_FIT_H_
