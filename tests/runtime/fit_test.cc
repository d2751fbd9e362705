#include <cmath>

#include <gtest/gtest.h>

#include "runtime/profiler/device_probe.h"
#include "runtime/profiler/fit.h"

namespace dsplan {
namespace {

TEST(FitTest, RecoversAlphaBetaFromSyntheticCopyPoints) {
  const double alpha = 8e-6, beta = 53e9;
  std::vector<BandwidthPoint> pts;
  for (double s = 4096; s <= (1 << 30); s *= 4) {
    // +-1% alternating noise, as repeated measurements scatter.
    const double noise = (pts.size() % 2 ? 1.01 : 0.99);
    const double t = (alpha + s / beta) * noise;
    pts.push_back({s, s / t});
  }
  auto fit = FitCopy(pts);
  ASSERT_TRUE(fit.ok()) << fit.status().ToString();
  EXPECT_NEAR(fit->alpha_s, alpha, 0.05 * alpha);
  EXPECT_NEAR(fit->bytes_per_s, beta, 0.03 * beta);
  EXPECT_LT(fit->max_rel_error, 0.03);
}

TEST(FitTest, CollectiveFitReturnsBusBandwidthThroughTheFormulaTable) {
  const Collective op = Collective::kAllReduce;
  const int n = 8;
  const double alpha = 20e-6, busbw = 360e9;
  std::vector<BandwidthPoint> pts;
  for (double s = 1024; s <= (1 << 30); s *= 8) {
    const double t = CollectiveSeconds(op, n, s, alpha, busbw);
    pts.push_back({s, BusBandwidth(op, n, s, t)});
  }
  auto fit = FitCollective(op, n, pts);
  ASSERT_TRUE(fit.ok()) << fit.status().ToString();
  EXPECT_NEAR(fit->alpha_s, alpha, 1e-3 * alpha);
  EXPECT_NEAR(fit->bytes_per_s, busbw, 1e-3 * busbw);
  EXPECT_FALSE(FitCollective(Collective::kAllGather, 1, pts).ok());  // one rank moves nothing
}

TEST(FitTest, BandwidthOnlyWhenLatencyIsNotResolvable) {
  // Pure bandwidth points (no latency): alpha must come out 0, not negative.
  std::vector<BandwidthPoint> pts = {{1e6, 1e10}, {1e8, 1e10}, {1e9, 1e10}};
  auto fit = FitCopy(pts);
  ASSERT_TRUE(fit.ok());
  EXPECT_GE(fit->alpha_s, 0);
  EXPECT_NEAR(fit->bytes_per_s, 1e10, 1e6);
}

TEST(FitTest, RejectsTooFewOrNonPositivePoints) {
  EXPECT_FALSE(FitCopy({{4096, 1e9}}).ok());
  EXPECT_FALSE(FitCopy({{4096, 1e9}, {8192, 0}}).ok());
  EXPECT_FALSE(FitAlphaBeta({1, 2}, {1}).ok());
}

TEST(FitTest, GemmEfficiencyIsTheMedianOfLargeShapesOfTheDtype) {
  const double peak = 1000e12;
  std::vector<GemmPoint> pts = {
      {Precision::kBf16, 8192, 8192, 8192, 800e12},
      {Precision::kBf16, 4096, 16384, 4096, 700e12},
      {Precision::kBf16, 16384, 4096, 4096, 760e12},
      {Precision::kBf16, 4096, 1024, 1024, 300e12},  // small: excluded
      {Precision::kFp16, 8192, 8192, 8192, 100e12},  // other dtype: excluded
  };
  auto eff = GemmEfficiency(pts, Precision::kBf16, peak);
  ASSERT_TRUE(eff.ok());
  EXPECT_DOUBLE_EQ(*eff, 0.76);
  EXPECT_FALSE(GemmEfficiency(pts, Precision::kBf16, 0).ok());
  EXPECT_FALSE(GemmEfficiency({pts[3]}, Precision::kBf16, peak).ok());
}

TEST(FitTest, SummarizeGivesMedianAndSpread) {
  Timing t = Summarize({3, 1, 2, 10});
  EXPECT_DOUBLE_EQ(t.median_s, 2.5);
  EXPECT_DOUBLE_EQ(t.min_s, 1);
  EXPECT_DOUBLE_EQ(t.max_s, 10);
  EXPECT_EQ(t.repeats, 4);
  EXPECT_DOUBLE_EQ(t.Spread(), 9 / 2.5);
}

}  // namespace
}  // namespace dsplan
