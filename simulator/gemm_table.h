// GemmTable: an index over a profile's measured GEMM rows for the cost model's nearest-shape
// lookups (simulator/cost_model.h). The measured table holds a few thousand rows (every catalog
// Linear shape at several token counts, in three layouts and two dtypes); pricing a workload
// asks for the nearest measured shape hundreds of times. A linear scan over all rows per lookup
// made building a simulation context cost about a millisecond.
//
// The index groups the rows once: by dtype and layout, the distinct shapes in the order the
// table first lists them; for Linear layer shapes also by the alignment class of both layer
// dimensions, with each shape's (tokens, FLOP/s) series pre-sorted. Every lookup returns exactly
// what the scan over the rows returns (the same row, the same tie-break: the first of equally
// near shapes in table order). The scans themselves stay here as the reference
// (ScanNearest*), and tests/simulator/gemm_table_test.cc checks the two agree.
#ifndef DSPLAN_SIMULATOR_GEMM_TABLE_H_
#define DSPLAN_SIMULATOR_GEMM_TABLE_H_

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "core/hardware_profile.h"
#include "core/plan.h"

namespace dsplan {

/// A measured layer shape of a Linear layout: the two layer dimensions (a, b) as the cost model
/// names them (nt, nn: (n, k); tn: (m, n)); a == 0 when none was found.
struct LinearShape {
  int64_t a = 0, b = 0;
  bool operator==(const LinearShape&) const = default;
};

class GemmTable {
 public:
  explicit GemmTable(const std::vector<GemmPoint>& rows);

  /// FLOP/s of the unbatched row of |p| nearest to C[m,n] = A[m,k] B[k,n] (log distance over
  /// m, n, k, any layout); 0 when the table has none.
  double NearestRate(Precision p, double m, double n, double k) const;
  /// FLOP/s of the batched (batch > 1) row of |p| and |layout| nearest to (m, n, k); 0 when the
  /// table has none.
  double NearestBatchedRate(Precision p, GemmLayout layout, double m, double n, double k) const;
  /// The measured Linear layer shape of |p| and |layout| nearest to (a, b) among the shapes of
  /// the same alignment class in both dimensions when there are any, else among all; a == 0
  /// when none. |series|, when given, receives that shape's (tokens, FLOP/s) points sorted
  /// (null when none).
  LinearShape NearestLinearShape(Precision p, GemmLayout layout, double a, double b,
                                 const std::vector<std::pair<double, double>>** series) const;

 private:
  struct Shape {
    int64_t m = 0, n = 0, k = 0;
    double flops_per_s = 0;  // the first row's of this shape
  };
  struct LinearEntry {
    int64_t a = 0, b = 0;
    int align_a = 1, align_b = 1;
    std::vector<std::pair<double, double>> series;  // (tokens, FLOP/s), sorted
  };
  struct LinearGroup {
    std::vector<LinearEntry> shapes;  // in table order of first appearance
    // Per (alignment class of a, of b): indices into |shapes|, in table order.
    std::vector<std::pair<std::pair<int, int>, std::vector<int32_t>>> by_alignment;
  };
  static constexpr int kPrecisions = 3, kLayouts = 3;

  std::vector<Shape> unbatched_[kPrecisions];
  std::vector<Shape> batched_[kPrecisions][kLayouts];
  LinearGroup linear_[kPrecisions][kLayouts];
};

/// The index of |rows|, shared by every cost model of a table with the same rows (built once per
/// distinct table and kept for the process; a few tables at most are alive at once).
std::shared_ptr<const GemmTable> SharedGemmTable(const std::vector<GemmPoint>& rows);

/// The rows the cost model prices |pytorch_stack|'s GEMMs from, the one place that chooses: for
/// the PyTorch + DeepSpeed stack, the profile's stack.gemm (measured through PyTorch,
/// tools/probes/torch_gemm.py) when it has rows, plus gpu.gemm's rows of every dtype stack.gemm
/// has none of; otherwise (dsplan's runtime, or no stack.gemm) gpu.gemm (dsplan's cuBLASLt
/// probe).
std::vector<GemmPoint> StackGemmRows(const HardwareProfile& profile, bool pytorch_stack);
/// SharedGemmTable(StackGemmRows(profile, pytorch_stack)), without copying the rows when they
/// are gpu.gemm's.
std::shared_ptr<const GemmTable> StackGemmTable(const HardwareProfile& profile,
                                                bool pytorch_stack);

/// The reference scans over every row the index must agree with.
double ScanNearestRate(const std::vector<GemmPoint>& rows, Precision p, double m, double n,
                       double k);
double ScanNearestBatchedRate(const std::vector<GemmPoint>& rows, Precision p, GemmLayout layout,
                              double m, double n, double k);
LinearShape ScanNearestLinearShape(const std::vector<GemmPoint>& rows, Precision p,
                                   GemmLayout layout, double a, double b);

}  // namespace dsplan

#endif  // DSPLAN_SIMULATOR_GEMM_TABLE_H_
