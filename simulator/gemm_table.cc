#include "simulator/gemm_table.h"

#include <algorithm>
#include <limits>
#include <map>
#include <mutex>

#include "simulator/cost_model.h"

namespace dsplan {
namespace {

// exp(|log x/y|): the log-space distance of two sizes without a logarithm (sums of log distances
// compare as products of these ratios).
double SizeRatio(double x, double y) { return x > y ? x / y : y / x; }

bool InRange(Precision p, GemmLayout l) {
  const int pi = static_cast<int>(p), li = static_cast<int>(l);
  return pi >= 0 && pi < 3 && li >= 0 && li < 3;
}

// The rows each lookup considers (the scans' filters).
bool Unbatched(const GemmPoint& pt, Precision p) {
  return !(pt.dtype != p || pt.flops_per_s <= 0 || pt.batch > 1);
}
bool Batched(const GemmPoint& pt, Precision p, GemmLayout layout) {
  return !(pt.dtype != p || pt.layout != layout || pt.batch <= 1 || pt.flops_per_s <= 0);
}
bool LinearRow(const GemmPoint& pt, Precision p, GemmLayout layout) {
  return !(pt.dtype != p || pt.layout != layout || pt.flops_per_s <= 0 || pt.batch > 1);
}

// A Linear row's layer dimensions and token count in |layout| (tn: (m, n), tokens k; nt, nn:
// (n, k), tokens m).
int64_t LayerA(const GemmPoint& pt, bool tn) { return tn ? pt.m : pt.n; }
int64_t LayerB(const GemmPoint& pt, bool tn) { return tn ? pt.n : pt.k; }
int64_t Tokens(const GemmPoint& pt, bool tn) { return tn ? pt.k : pt.m; }

}  // namespace

GemmTable::GemmTable(const std::vector<GemmPoint>& rows) {
  for (int pi = 0; pi < kPrecisions; ++pi) {
    const Precision p = static_cast<Precision>(pi);
    const int64_t elem_bytes = PrecisionBytes(p);
    // Unbatched shapes of any layout, first row of each (m, n, k) kept: a later row of the same
    // shape is as near as the first and never replaces it in the scan.
    std::map<std::tuple<int64_t, int64_t, int64_t>, bool> seen;
    for (const GemmPoint& pt : rows) {
      if (!Unbatched(pt, p)) continue;
      if (seen.emplace(std::make_tuple(pt.m, pt.n, pt.k), true).second) {
        unbatched_[pi].push_back({pt.m, pt.n, pt.k, pt.flops_per_s});
      }
    }
    for (int li = 0; li < kLayouts; ++li) {
      const GemmLayout layout = static_cast<GemmLayout>(li);
      const bool tn = layout == GemmLayout::kTN;
      std::map<std::tuple<int64_t, int64_t, int64_t>, bool> seen_batched;
      std::map<std::pair<int64_t, int64_t>, int32_t> linear_index;
      LinearGroup& group = linear_[pi][li];
      for (const GemmPoint& pt : rows) {
        if (Batched(pt, p, layout) &&
            seen_batched.emplace(std::make_tuple(pt.m, pt.n, pt.k), true).second) {
          batched_[pi][li].push_back({pt.m, pt.n, pt.k, pt.flops_per_s});
        }
        if (!LinearRow(pt, p, layout)) continue;
        const int64_t a = LayerA(pt, tn), b = LayerB(pt, tn);
        auto [it, fresh] =
            linear_index.emplace(std::make_pair(a, b), static_cast<int32_t>(group.shapes.size()));
        if (fresh) {
          LinearEntry e;
          e.a = a;
          e.b = b;
          e.align_a = GemmAlignmentClass(a, elem_bytes);
          e.align_b = GemmAlignmentClass(b, elem_bytes);
          group.shapes.push_back(std::move(e));
        }
        group.shapes[it->second].series.push_back(
            {static_cast<double>(Tokens(pt, tn)), pt.flops_per_s});
      }
      for (int32_t i = 0; i < static_cast<int32_t>(group.shapes.size()); ++i) {
        LinearEntry& e = group.shapes[i];
        std::sort(e.series.begin(), e.series.end());
        const std::pair<int, int> cls{e.align_a, e.align_b};
        auto bucket = std::find_if(group.by_alignment.begin(), group.by_alignment.end(),
                                   [&](const auto& x) { return x.first == cls; });
        if (bucket == group.by_alignment.end()) {
          group.by_alignment.push_back({cls, {}});
          bucket = group.by_alignment.end() - 1;
        }
        bucket->second.push_back(i);
      }
    }
  }
}

double GemmTable::NearestRate(Precision p, double m, double n, double k) const {
  if (!InRange(p, GemmLayout::kNT)) return 0;
  double best = std::numeric_limits<double>::infinity(), rate = 0;
  for (const Shape& s : unbatched_[static_cast<int>(p)]) {
    const double d = SizeRatio(m, s.m) * SizeRatio(n, s.n) * SizeRatio(k, s.k);
    if (d < best) {
      best = d;
      rate = s.flops_per_s;
    }
  }
  return rate;
}

double GemmTable::NearestBatchedRate(Precision p, GemmLayout layout, double m, double n,
                                     double k) const {
  if (!InRange(p, layout)) return 0;
  double best = std::numeric_limits<double>::infinity(), rate = 0;
  for (const Shape& s : batched_[static_cast<int>(p)][static_cast<int>(layout)]) {
    const double d = SizeRatio(m, s.m) * SizeRatio(n, s.n) * SizeRatio(k, s.k);
    if (d < best) {
      best = d;
      rate = s.flops_per_s;
    }
  }
  return rate;
}

LinearShape GemmTable::NearestLinearShape(
    Precision p, GemmLayout layout, double a, double b,
    const std::vector<std::pair<double, double>>** series) const {
  if (series) *series = nullptr;
  if (!InRange(p, layout)) return {};
  const LinearGroup& group = linear_[static_cast<int>(p)][static_cast<int>(layout)];
  const int64_t elem_bytes = PrecisionBytes(p);
  const std::pair<int, int> cls{GemmAlignmentClass(static_cast<int64_t>(a), elem_bytes),
                                GemmAlignmentClass(static_cast<int64_t>(b), elem_bytes)};
  const LinearEntry* chosen = nullptr;
  double best = std::numeric_limits<double>::infinity();
  auto bucket = std::find_if(group.by_alignment.begin(), group.by_alignment.end(),
                             [&](const auto& x) { return x.first == cls; });
  if (bucket != group.by_alignment.end()) {
    // Shapes of the same alignment class: the scan takes the first unconditionally, then any
    // strictly nearer one.
    for (int32_t i : bucket->second) {
      const LinearEntry& e = group.shapes[i];
      const double d =
          SizeRatio(a, static_cast<double>(e.a)) * SizeRatio(b, static_cast<double>(e.b));
      if (chosen == nullptr || d < best) {
        best = d;
        chosen = &e;
      }
    }
  } else {
    for (const LinearEntry& e : group.shapes) {
      const double d =
          SizeRatio(a, static_cast<double>(e.a)) * SizeRatio(b, static_cast<double>(e.b));
      if (d < best) {
        best = d;
        chosen = &e;
      }
    }
  }
  if (chosen == nullptr) return {};
  if (series) *series = &chosen->series;
  return {chosen->a, chosen->b};
}

std::shared_ptr<const GemmTable> SharedGemmTable(const std::vector<GemmPoint>& rows) {
  // Keyed by the rows themselves (not the profile's address, which a later profile may reuse).
  // Comparing a few thousand rows costs far less than indexing them.
  static std::mutex mu;
  static std::vector<std::pair<std::vector<GemmPoint>, std::shared_ptr<const GemmTable>>> cache;
  constexpr size_t kMaxTables = 8;
  {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& [key, table] : cache) {
      if (key == rows) return table;
    }
  }
  auto table = std::make_shared<const GemmTable>(rows);
  std::lock_guard<std::mutex> lock(mu);
  if (cache.size() >= kMaxTables) cache.erase(cache.begin());
  cache.push_back({rows, table});
  return table;
}

std::vector<GemmPoint> StackGemmRows(const HardwareProfile& profile, bool pytorch_stack) {
  const std::vector<GemmPoint>& device = profile.gpu.gemm;
  const std::vector<GemmPoint>& torch = profile.stack.gemm;
  if (!pytorch_stack || torch.empty()) return device;
  std::vector<GemmPoint> rows = torch;
  bool covered[3] = {false, false, false};
  for (const GemmPoint& pt : torch) covered[static_cast<int>(pt.dtype)] = true;
  for (const GemmPoint& pt : device) {
    if (!covered[static_cast<int>(pt.dtype)]) rows.push_back(pt);
  }
  return rows;
}

std::shared_ptr<const GemmTable> StackGemmTable(const HardwareProfile& profile,
                                                bool pytorch_stack) {
  if (!pytorch_stack || profile.stack.gemm.empty()) return SharedGemmTable(profile.gpu.gemm);
  return SharedGemmTable(StackGemmRows(profile, pytorch_stack));
}

double ScanNearestRate(const std::vector<GemmPoint>& rows, Precision p, double m, double n,
                       double k) {
  double best = std::numeric_limits<double>::infinity(), rate = 0;
  for (const GemmPoint& pt : rows) {
    if (pt.dtype != p || pt.flops_per_s <= 0 || pt.batch > 1) continue;
    const double d = SizeRatio(m, pt.m) * SizeRatio(n, pt.n) * SizeRatio(k, pt.k);
    if (d < best) {
      best = d;
      rate = pt.flops_per_s;
    }
  }
  return rate;
}

double ScanNearestBatchedRate(const std::vector<GemmPoint>& rows, Precision p, GemmLayout layout,
                              double m, double n, double k) {
  double best = std::numeric_limits<double>::infinity(), rate = 0;
  for (const GemmPoint& pt : rows) {
    if (pt.dtype != p || pt.layout != layout || pt.batch <= 1 || pt.flops_per_s <= 0) {
      continue;
    }
    const double d = SizeRatio(m, pt.m) * SizeRatio(n, pt.n) * SizeRatio(k, pt.k);
    if (d < best) {
      best = d;
      rate = pt.flops_per_s;
    }
  }
  return rate;
}

LinearShape ScanNearestLinearShape(const std::vector<GemmPoint>& rows, Precision p,
                                   GemmLayout layout, double a, double b) {
  const bool tn = layout == GemmLayout::kTN;
  const int64_t elem_bytes = PrecisionBytes(p);
  const int align_a = GemmAlignmentClass(static_cast<int64_t>(a), elem_bytes);
  const int align_b = GemmAlignmentClass(static_cast<int64_t>(b), elem_bytes);
  double best = std::numeric_limits<double>::infinity();
  int64_t best_a = 0, best_b = 0;
  bool best_aligned_alike = false;
  for (const GemmPoint& pt : rows) {
    if (pt.dtype != p || pt.layout != layout || pt.flops_per_s <= 0 || pt.batch > 1) continue;
    const int64_t pa = LayerA(pt, tn), pb = LayerB(pt, tn);
    const bool alike = GemmAlignmentClass(pa, elem_bytes) == align_a &&
                       GemmAlignmentClass(pb, elem_bytes) == align_b;
    if (best_aligned_alike && !alike) continue;
    const double d = SizeRatio(a, static_cast<double>(pa)) * SizeRatio(b, static_cast<double>(pb));
    if ((alike && !best_aligned_alike) || d < best) {
      best = d;
      best_a = pa;
      best_b = pb;
      best_aligned_alike = alike;
    }
  }
  return {best_a, best_b};
}

}  // namespace dsplan
