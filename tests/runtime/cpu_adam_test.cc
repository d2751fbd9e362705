#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/cpu_kernels/cpu_adam.h"

namespace dsplan {
namespace {

// torch.optim.AdamW's step written out in double precision: the reference.
void ReferenceStep(const AdamParams& a, std::vector<double>& p, const std::vector<double>& g,
                   std::vector<double>& m, std::vector<double>& v) {
  const double bc1 = 1 - std::pow(double{a.beta1}, double(a.step));
  const double bc2 = 1 - std::pow(double{a.beta2}, double(a.step));
  for (size_t i = 0; i < p.size(); ++i) {
    double grad = g[i];
    if (a.adamw) {
      p[i] *= 1 - double{a.lr} * a.weight_decay;
    } else {
      grad += a.weight_decay * p[i];
    }
    m[i] = a.beta1 * m[i] + (1 - double{a.beta1}) * grad;
    v[i] = a.beta2 * v[i] + (1 - double{a.beta2}) * grad * grad;
    p[i] -= a.lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + a.eps);
  }
}

struct Case {
  SimdLevel level;
  int threads;
  bool adamw;
};

class CpuAdamTest : public ::testing::TestWithParam<Case> {};

TEST_P(CpuAdamTest, MatchesDoublePrecisionReferenceOverSteps) {
  const Case c = GetParam();
  if (static_cast<int>(c.level) > static_cast<int>(DetectSimdLevel())) {
    GTEST_SKIP() << SimdLevelName(c.level) << " not supported by this CPU";
  }
  // An odd length exercises the vector tails and uneven thread chunks.
  const int64_t n = 1000 + 37;
  std::mt19937 rng(c.threads * 7 + static_cast<int>(c.level));
  std::normal_distribution<float> dist(0, 1);
  std::vector<float> p(n), m(n, 0), v(n, 0), g(n);
  std::vector<double> pr(n), mr(n, 0), vr(n, 0), gr(n);
  for (int64_t i = 0; i < n; ++i) pr[i] = p[i] = dist(rng);
  AdamParams a;
  a.lr = 1e-2f;
  a.weight_decay = 0.1f;
  a.adamw = c.adamw;
  for (int step = 1; step <= 5; ++step) {
    for (int64_t i = 0; i < n; ++i) gr[i] = g[i] = 0.1f * dist(rng);
    a.step = step;
    AdamStep(a, p.data(), g.data(), m.data(), v.data(), n, c.threads, c.level);
    ReferenceStep(a, pr, gr, mr, vr);
  }
  double err = 0, norm = 0;
  for (int64_t i = 0; i < n; ++i) {
    err += (p[i] - pr[i]) * (p[i] - pr[i]);
    norm += pr[i] * pr[i];
    ASSERT_TRUE(std::isfinite(p[i])) << i;
  }
  EXPECT_LT(std::sqrt(err / norm), 1e-5) << SimdLevelName(c.level);
  // Every element moved (no chunk skipped): parameters differ from where they started.
  double moved = 0;
  for (int64_t i = 0; i < n; ++i) moved += std::abs(mr[i]) > 0 && m[i] != 0;
  EXPECT_EQ(moved, n);
}

INSTANTIATE_TEST_SUITE_P(Levels, CpuAdamTest,
                         ::testing::Values(Case{SimdLevel::kScalar, 1, true},
                                           Case{SimdLevel::kAvx2, 3, true},
                                           Case{SimdLevel::kAvx512, 4, true},
                                           Case{SimdLevel::kAvx512, 2, false},
                                           Case{SimdLevel::kAvx2, 1, false}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(SimdLevelName(info.param.level)) + "_" +
                                  std::to_string(info.param.threads) + "threads_" +
                                  (info.param.adamw ? "adamw" : "adam");
                         });

TEST(CpuAdamDispatchTest, DefaultLevelEqualsExplicitBestLevel) {
  const int64_t n = 4099;
  std::vector<float> p1(n), p2(n), g(n), m1(n, 0), m2(n, 0), v1(n, 0), v2(n, 0);
  for (int64_t i = 0; i < n; ++i) {
    p1[i] = p2[i] = std::sin(0.1 * i);
    g[i] = std::cos(0.3 * i);
  }
  AdamParams a;
  AdamStep(a, p1.data(), g.data(), m1.data(), v1.data(), n, 2);
  AdamStep(a, p2.data(), g.data(), m2.data(), v2.data(), n, 2, DetectSimdLevel());
  EXPECT_EQ(p1, p2);
}

}  // namespace
}  // namespace dsplan
