// The GEMM index (simulator/gemm_table.h) must return what the scan over every row returns: the
// same nearest row, the same tie-break. Checked on the measured table (every catalog Linear
// shape, exactly and perturbed, in every layout and dtype), on random shapes, and on small
// tables built to exercise ties, duplicate shapes and alignment classes.
#include "simulator/gemm_table.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "core/hardware_profile.h"
#include "simulator/cost_model.h"

namespace dsplan {
namespace {

constexpr Precision kPrecisions[] = {Precision::kBf16, Precision::kFp16, Precision::kFp32};
constexpr GemmLayout kLayouts[] = {GemmLayout::kNT, GemmLayout::kNN, GemmLayout::kTN};

// Index == scan for the three lookups at (m, n, k) in |p| and |layout|; counts the queries.
void ExpectAgree(const std::vector<GemmPoint>& rows, const GemmTable& t, Precision p,
                 GemmLayout layout, double m, double n, double k, int* checked) {
  ++*checked;
  EXPECT_EQ(t.NearestRate(p, m, n, k), ScanNearestRate(rows, p, m, n, k))
      << PrecisionName(p) << " " << m << "x" << n << "x" << k;
  EXPECT_EQ(t.NearestBatchedRate(p, layout, m, n, k),
            ScanNearestBatchedRate(rows, p, layout, m, n, k))
      << PrecisionName(p) << " " << GemmLayoutName(layout) << " " << m << "x" << n << "x" << k;
  const std::vector<std::pair<double, double>>* series = nullptr;
  const LinearShape got = t.NearestLinearShape(p, layout, m, n, &series);
  EXPECT_EQ(got, ScanNearestLinearShape(rows, p, layout, m, n))
      << PrecisionName(p) << " " << GemmLayoutName(layout) << " " << m << "x" << n;
  if (got.a != 0) {
    // The series is that shape's rows, sorted by token count.
    ASSERT_NE(series, nullptr);
    std::vector<std::pair<double, double>> expect;
    const bool tn = layout == GemmLayout::kTN;
    for (const GemmPoint& pt : rows) {
      if (pt.dtype == p && pt.layout == layout && pt.flops_per_s > 0 && pt.batch <= 1 &&
          (tn ? pt.m : pt.n) == got.a && (tn ? pt.n : pt.k) == got.b) {
        expect.push_back({static_cast<double>(tn ? pt.k : pt.m), pt.flops_per_s});
      }
    }
    std::sort(expect.begin(), expect.end());
    EXPECT_EQ(*series, expect);
  }
}

TEST(GemmTable, AgreesWithTheScanOnTheMeasuredTable) {
  auto hw = FindHardwareProfile("h200-measured", DSPLAN_TEST_DATA_DIR);
  ASSERT_TRUE(hw.ok()) << hw.status().message();
  const std::vector<GemmPoint>& rows = hw->gpu.gemm;
  ASSERT_GT(rows.size(), 1000u);
  const GemmTable t(rows);
  int checked = 0;
  // Every measured shape (the catalog's Linear layers at several token counts, the batched
  // attention products), exactly, one off (another alignment class) and in between two sizes.
  // (The perturbed queries on every third row keep the test well under a second.)
  for (size_t i = 0; i < rows.size(); ++i) {
    const GemmPoint& pt = rows[i];
    const double m = static_cast<double>(pt.m), n = static_cast<double>(pt.n),
                 k = static_cast<double>(pt.k);
    ExpectAgree(rows, t, pt.dtype, pt.layout, m, n, k, &checked);
    if (i % 3 == 0) ExpectAgree(rows, t, pt.dtype, pt.layout, m + 1, n + 1, k, &checked);
    if (i % 3 == 1) {
      ExpectAgree(rows, t, pt.dtype, pt.layout, m, std::floor(n * 1.37), k + 3, &checked);
    }
  }
  // Random shapes over the whole range, every dtype (fp32 has no rows: both say none) and layout.
  std::mt19937_64 rng(15);
  std::uniform_real_distribution<double> log_dim(0.0, std::log(1 << 17));
  for (int i = 0; i < 1000; ++i) {
    const double m = std::floor(std::exp(log_dim(rng))), n = std::floor(std::exp(log_dim(rng))),
                 k = std::floor(std::exp(log_dim(rng)));
    ExpectAgree(rows, t, kPrecisions[i % 3], kLayouts[(i / 3) % 3], m, n, k, &checked);
  }
  EXPECT_GT(checked, 5000);
}

TEST(GemmTable, AgreesWithTheScanOnTiesDuplicatesAndAlignmentClasses) {
  // Equally near shapes (2048 x 1024 and 512 x 4096 from 1024 x 2048), the same shape listed
  // twice at other rates, odd (unaligned) dimensions, a batched row, rows the lookups must skip
  // (rate 0) and a shape with a zero dimension.
  const std::vector<GemmPoint> rows = {
      {Precision::kBf16, 4096, 2048, 1024, 400e12, GemmLayout::kNT},
      {Precision::kBf16, 4096, 512, 4096, 300e12, GemmLayout::kNT},
      {Precision::kBf16, 8192, 2048, 1024, 500e12, GemmLayout::kNT},
      {Precision::kBf16, 4096, 2048, 1024, 100e12, GemmLayout::kNT},  // duplicate shape
      {Precision::kBf16, 4096, 50257, 1600, 90e12, GemmLayout::kNT},   // unaligned layer dim
      {Precision::kBf16, 4096, 50257, 1601, 80e12, GemmLayout::kNT},   // both unaligned
      {Precision::kBf16, 4096, 777, 1024, 0, GemmLayout::kNT},         // no rate: skipped
      {Precision::kBf16, 4096, 0, 1024, 50e12, GemmLayout::kNT},       // zero dimension
      {Precision::kBf16, 1024, 2048, 4096, 350e12, GemmLayout::kTN},
      {Precision::kFp16, 4096, 2048, 1024, 420e12, GemmLayout::kNN},
      {Precision::kBf16, 512, 512, 64, 200e12, GemmLayout::kNN, 96},  // batched
      {Precision::kBf16, 512, 64, 512, 210e12, GemmLayout::kNN, 96},
  };
  const GemmTable t(rows);
  int checked = 0;
  const double dims[] = {0, 1, 7, 64, 511, 512, 777, 1024, 1600, 1601, 2048, 4096, 50257, 65536};
  for (Precision p : kPrecisions) {
    for (GemmLayout l : kLayouts) {
      for (double m : dims) {
        for (double n : dims) {
          for (double k : {1.0, 64.0, 1024.0, 1601.0}) {
            ExpectAgree(rows, t, p, l, m, n, k, &checked);
          }
        }
      }
    }
  }
  EXPECT_EQ(checked, 3 * 3 * 14 * 14 * 4);
  // The tie goes to the first of the two shapes in table order, as the scan's strict < does.
  EXPECT_EQ(t.NearestLinearShape(Precision::kBf16, GemmLayout::kNT, 1024, 2048, nullptr),
            (LinearShape{2048, 1024}));
  // The first row of a shape gives its rate (the duplicate's 100e12 is never used).
  EXPECT_EQ(t.NearestRate(Precision::kBf16, 4096, 2048, 1024), 400e12);
}

TEST(GemmTable, SharedTablesAreKeyedByTheRowsNotTheProfile) {
  std::vector<GemmPoint> rows = {{Precision::kBf16, 4096, 2048, 1024, 400e12, GemmLayout::kNT}};
  const auto a = SharedGemmTable(rows);
  EXPECT_EQ(a.get(), SharedGemmTable(rows).get());
  rows[0].flops_per_s = 300e12;
  const auto b = SharedGemmTable(rows);
  EXPECT_NE(a.get(), b.get());
  EXPECT_EQ(b->NearestRate(Precision::kBf16, 4096, 2048, 1024), 300e12);
  EXPECT_EQ(a->NearestRate(Precision::kBf16, 4096, 2048, 1024), 400e12);
}

}  // namespace
}  // namespace dsplan
