// The GPT-2 trainer's kernels (runtime/reference_trainers/train_kernels.h) against CPU fp64 references, in
// fp32 and bf16 storage, on fresh random inputs (never zeros) with outputs poisoned with NaN
// before each launch; then the copy task end to end. Every test skips when no CUDA device is
// visible (CI has none); run it on a GPU machine.
#include "runtime/reference_trainers/train_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "runtime/reference_trainers/copy_task.h"

namespace dsplan::train {
namespace {

using Vec = std::vector<float>;
using DVec = std::vector<double>;

float RoundBf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u += 0x7FFF + ((u >> 16) & 1);  // round to nearest even
  u &= 0xFFFF0000u;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

class KernelTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  }
  bool bf16() const { return GetParam(); }
  // Elementwise kernels: fp32 arithmetic, so fp32 storage lands near rounding; bf16 output
  // rounding alone is ~2e-3 relative.
  double Tol() const { return bf16() ? 1e-2 : 1e-5; }
  double GemmTol() const { return bf16() ? 1e-2 : 1e-4; }
  // Random values mean + scale * N(0,1), rounded to the storage type.
  Vec Rand(size_t n, float scale = 1.f, float mean = 0.f) {
    std::normal_distribution<float> d(mean, scale);
    Vec v(n);
    for (auto& x : v) {
      x = d(rng_);
      if (x == 0.f) x = 0.5f * scale;
      if (bf16()) x = RoundBf16(x);
    }
    return v;
  }
  std::vector<int32_t> Tokens(size_t n, int v) {
    std::uniform_int_distribution<int> d(0, v - 1);
    std::vector<int32_t> t(n);
    for (auto& x : t) x = d(rng_);
    return t;
  }
  std::mt19937 rng_{12345};
};

double RelErr(const Vec& out, const DVec& ref) {
  if (out.size() != ref.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(out[i])) return INFINITY;
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-300);
}

#define EXPECT_REL(out, ref, tol)                                          \
  do {                                                                     \
    const double e_ = RelErr(out, ref);                                    \
    EXPECT_LT(e_, tol) << #out;                                            \
    std::printf("  %-34s rel err %.3e (%s)\n", #out, e_, bf16() ? "bf16" : "fp32"); \
  } while (0)

TEST_P(KernelTest, LayerNormForward) {
  const int n = 77, c = 200;
  Vec x = Rand(n * c, 2.f, 0.7f), w = Rand(c, 0.5f, 1.f), b = Rand(c, 0.3f);
  Vec out, mean, rstd;
  ASSERT_EQ(check::LayerNormFwd(bf16(), n, c, x, w, b, 1e-5f, &out, &mean, &rstd), "");
  DVec ro(n * c), rm(n), rr(n);
  for (int i = 0; i < n; ++i) {
    double m = 0, v = 0;
    for (int j = 0; j < c; ++j) m += x[i * c + j];
    m /= c;
    for (int j = 0; j < c; ++j) v += (x[i * c + j] - m) * (x[i * c + j] - m);
    v /= c;
    const double rs = 1 / std::sqrt(v + 1e-5);
    rm[i] = m;
    rr[i] = rs;
    for (int j = 0; j < c; ++j) ro[i * c + j] = (x[i * c + j] - m) * rs * w[j] + b[j];
  }
  EXPECT_REL(out, ro, Tol());
  EXPECT_REL(mean, rm, 1e-5);
  EXPECT_REL(rstd, rr, 1e-5);
}

TEST_P(KernelTest, LayerNormBackward) {
  const int n = 300, c = 200;
  Vec x = Rand(n * c, 2.f, 0.7f), w = Rand(c, 0.5f, 1.f), dout = Rand(n * c);
  Vec mean(n), rstd(n);
  for (int i = 0; i < n; ++i) {
    double m = 0, v = 0;
    for (int j = 0; j < c; ++j) m += x[i * c + j];
    m /= c;
    for (int j = 0; j < c; ++j) v += (x[i * c + j] - m) * (x[i * c + j] - m);
    mean[i] = static_cast<float>(m);
    rstd[i] = static_cast<float>(1 / std::sqrt(v / c + 1e-5));
  }
  for (bool acc : {false, true}) {
    Vec dx_in = Rand(n * c, 0.5f);
    Vec dx, dw, db;
    ASSERT_EQ(check::LayerNormBwd(bf16(), n, c, dout, x, w, mean, rstd, dx_in, acc, &dx, &dw, &db),
              "");
    DVec rdx(n * c), rdw(c, 0), rdb(c, 0);
    for (int i = 0; i < n; ++i) {
      double sg = 0, sgx = 0;
      for (int j = 0; j < c; ++j) {
        const double xh = (x[i * c + j] - static_cast<double>(mean[i])) * rstd[i];
        const double g = static_cast<double>(dout[i * c + j]) * w[j];
        sg += g;
        sgx += g * xh;
        rdw[j] += dout[i * c + j] * xh;
        rdb[j] += dout[i * c + j];
      }
      sg /= c;
      sgx /= c;
      for (int j = 0; j < c; ++j) {
        const double xh = (x[i * c + j] - static_cast<double>(mean[i])) * rstd[i];
        const double g = static_cast<double>(dout[i * c + j]) * w[j];
        rdx[i * c + j] = rstd[i] * (g - sg - xh * sgx) + (acc ? dx_in[i * c + j] : 0.0);
      }
    }
    EXPECT_REL(dx, rdx, Tol());
    EXPECT_REL(dw, rdw, 1e-5);
    EXPECT_REL(db, rdb, 1e-5);
  }
}

double GeluRef(double x) {
  const double k = std::sqrt(2 / M_PI);
  return 0.5 * x * (1 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

TEST_P(KernelTest, Gelu) {
  const int n = 10007;
  Vec x = Rand(n, 2.f), dy = Rand(n);
  Vec out, dx;
  ASSERT_EQ(check::GeluFwd(bf16(), x, &out), "");
  ASSERT_EQ(check::GeluBwd(bf16(), x, dy, &dx), "");
  DVec ro(n), rd(n);
  for (int i = 0; i < n; ++i) {
    ro[i] = GeluRef(x[i]);
    const double h = 1e-5;
    rd[i] = dy[i] * (GeluRef(x[i] + h) - GeluRef(x[i] - h)) / (2 * h);
  }
  EXPECT_REL(out, ro, Tol());
  EXPECT_REL(dx, rd, Tol());
}

TEST_P(KernelTest, CausalSoftmax) {
  const int t = 70, rows = 3 * t;
  std::normal_distribution<float> d(0.f, 3.f);
  Vec s(rows * t);
  for (auto& x : s) x = d(rng_);  // scores are fp32 in both modes
  Vec p;
  ASSERT_EQ(check::CausalSoftmaxFwd(bf16(), rows, t, s, &p), "");
  DVec rp(rows * t, 0);
  Vec pin(rows * t);
  for (int r = 0; r < rows; ++r) {
    const int q = r % t;
    double mx = -INFINITY, sum = 0;
    for (int j = 0; j <= q; ++j) mx = std::max(mx, static_cast<double>(s[r * t + j]));
    for (int j = 0; j <= q; ++j) sum += std::exp(s[r * t + j] - mx);
    for (int j = 0; j < t; ++j) rp[r * t + j] = j <= q ? std::exp(s[r * t + j] - mx) / sum : 0;
  }
  EXPECT_REL(p, rp, Tol());
  // Backward on the reference probabilities (rounded to storage).
  for (int i = 0; i < rows * t; ++i) pin[i] = bf16() ? RoundBf16(rp[i]) : static_cast<float>(rp[i]);
  Vec dp(rows * t);
  for (auto& x : dp) x = d(rng_);
  Vec ds;
  ASSERT_EQ(check::CausalSoftmaxBwd(bf16(), rows, t, pin, dp, &ds), "");
  DVec rds(rows * t, 0);
  for (int r = 0; r < rows; ++r) {
    const int q = r % t;
    double dot = 0;
    for (int j = 0; j <= q; ++j) dot += static_cast<double>(pin[r * t + j]) * dp[r * t + j];
    for (int j = 0; j <= q; ++j) rds[r * t + j] = pin[r * t + j] * (dp[r * t + j] - dot);
  }
  EXPECT_REL(ds, rds, Tol());
}

TEST_P(KernelTest, Embedding) {
  const int b = 3, t = 7, c = 40, v = 11;
  auto tok = Tokens(b * t, v);
  Vec wte = Rand(v * c), wpe = Rand(t * c, 0.5f), dout = Rand(b * t * c);
  Vec out, dwte, dwpe;
  ASSERT_EQ(check::EmbeddingFwd(bf16(), b, t, c, tok, wte, wpe, &out), "");
  ASSERT_EQ(check::EmbeddingBwd(bf16(), b, t, c, v, tok, dout, &dwte, &dwpe), "");
  DVec ro(b * t * c), rte(v * c, 0), rpe(t * c, 0);
  for (int r = 0; r < b * t; ++r) {
    for (int j = 0; j < c; ++j) {
      ro[r * c + j] = static_cast<double>(wte[tok[r] * c + j]) + wpe[(r % t) * c + j];
      rte[tok[r] * c + j] += dout[r * c + j];
      rpe[(r % t) * c + j] += dout[r * c + j];
    }
  }
  EXPECT_REL(out, ro, Tol());
  EXPECT_REL(dwte, rte, 1e-5);
  EXPECT_REL(dwpe, rpe, 1e-5);
}

TEST_P(KernelTest, ResidualAddAndBiasGrad) {
  const int n = 1000, oc = 70;
  Vec a = Rand(n * oc), b = Rand(n * oc, 0.3f);
  Vec out, db;
  ASSERT_EQ(check::ResidualAdd(bf16(), a, b, &out), "");
  ASSERT_EQ(check::BiasGrad(bf16(), n, oc, a, &db), "");
  DVec ro(n * oc), rdb(oc, 0);
  for (int i = 0; i < n * oc; ++i) {
    ro[i] = static_cast<double>(a[i]) + b[i];
    rdb[i % oc] += a[i];
  }
  EXPECT_REL(out, ro, Tol());
  EXPECT_REL(db, rdb, 1e-5);
}

TEST_P(KernelTest, CrossEntropy) {
  const int n = 20, v = 50, vp = 64;
  Vec logits = Rand(n * vp, 3.f);
  auto tg = Tokens(n, v);
  tg[3] = -1;
  tg[11] = -1;
  Vec losses, dl;
  ASSERT_EQ(check::CrossEntropy(bf16(), n, v, vp, logits, tg, &losses, &dl), "");
  DVec rl(n, 0), rd(n * vp, 0);
  const int valid = n - 2;
  for (int r = 0; r < n; ++r) {
    if (tg[r] < 0) continue;
    double mx = -INFINITY, s = 0;
    for (int j = 0; j < v; ++j) mx = std::max(mx, static_cast<double>(logits[r * vp + j]));
    for (int j = 0; j < v; ++j) s += std::exp(logits[r * vp + j] - mx);
    const double lse = mx + std::log(s);
    rl[r] = lse - logits[r * vp + tg[r]];
    for (int j = 0; j < v; ++j)
      rd[r * vp + j] = (std::exp(logits[r * vp + j] - lse) - (j == tg[r])) / valid;
  }
  EXPECT_REL(losses, rl, 1e-5);
  EXPECT_REL(dl, rd, Tol());
}

TEST_P(KernelTest, AdamW) {
  const int n = 1000, t = 3;
  AdamWParams p;
  p.lr = 1e-2f;
  p.weight_decay = 0.1f;
  Vec master = Rand(n), grad = Rand(n, 0.1f), m = Rand(n, 0.01f), v = Rand(n, 0.001f);
  for (auto& x : v) x = std::fabs(x);
  Vec m0 = m, v0 = v, w0 = master;
  Vec param;
  ASSERT_EQ(check::AdamW(bf16(), p, t, &master, grad, &m, &v, &param), "");
  DVec rw(n), rm(n), rv(n);
  const double bc1 = 1 - std::pow(0.9, t), bc2 = 1 - std::pow(0.95, t);
  for (int i = 0; i < n; ++i) {
    rm[i] = 0.9 * m0[i] + 0.1 * grad[i];
    rv[i] = 0.95 * v0[i] + 0.05 * static_cast<double>(grad[i]) * grad[i];
    rw[i] = w0[i] - 1e-2 * ((rm[i] / bc1) / (std::sqrt(rv[i] / bc2) + 1e-8) + 0.1 * w0[i]);
  }
  EXPECT_REL(master, rw, 1e-5);
  EXPECT_REL(m, rm, 1e-5);
  EXPECT_REL(v, rv, 1e-5);
  EXPECT_REL(param, rw, Tol());
}

TEST_P(KernelTest, GemmAllTransposesBatched) {
  const int m = 40, n = 48, k = 56, batch = 3;
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      Vec a = Rand(batch * m * k), b = Rand(batch * k * n);
      Vec d;
      ASSERT_EQ(check::Gemm(bf16(), ta, tb, m, n, k, batch, 0.5f, a, b, nullptr, true, &d), "");
      DVec r(batch * m * n, 0);
      for (int z = 0; z < batch; ++z)
        for (int i = 0; i < m; ++i)
          for (int j = 0; j < n; ++j) {
            double s = 0;
            for (int l = 0; l < k; ++l) {
              const double av = ta ? a[z * m * k + l * m + i] : a[z * m * k + i * k + l];
              const double bv = tb ? b[z * k * n + j * k + l] : b[z * k * n + l * n + j];
              s += av * bv;
            }
            r[z * m * n + i * n + j] = 0.5 * s;
          }
      std::printf("  ta=%d tb=%d:", ta, tb);
      EXPECT_REL(d, r, GemmTol());
    }
  }
  // Linear layer: D (storage type) = A B^T + bias through the epilogue.
  Vec a = Rand(m * k), b = Rand(n * k), bias = Rand(n);
  Vec d;
  ASSERT_EQ(check::Gemm(bf16(), false, true, m, n, k, 1, 1.f, a, b, &bias, false, &d), "");
  DVec r(m * n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double s = bias[j];
      for (int l = 0; l < k; ++l) s += static_cast<double>(a[i * k + l]) * b[j * k + l];
      r[i * n + j] = s;
    }
  EXPECT_REL(d, r, GemmTol());
}

TEST_P(KernelTest, CausalAttentionForwardBackward) {
  const int b = 2, t = 24, c = 48, nh = 3, hd = c / nh;
  Vec qkv = Rand(b * t * 3 * c), dy = Rand(b * t * c);
  Vec y, dqkv;
  ASSERT_EQ(check::Attention(bf16(), b, t, c, nh, qkv, dy, &y, &dqkv), "");
  DVec ry(b * t * c, 0), rd(b * t * 3 * c, 0);
  const double sc = 1 / std::sqrt(static_cast<double>(hd));
  auto Q = [&](int bi, int ti, int h, int d) { return qkv[(bi * t + ti) * 3 * c + h * hd + d]; };
  auto K = [&](int bi, int ti, int h, int d) { return qkv[(bi * t + ti) * 3 * c + c + h * hd + d]; };
  auto V = [&](int bi, int ti, int h, int d) { return qkv[(bi * t + ti) * 3 * c + 2 * c + h * hd + d]; };
  for (int bi = 0; bi < b; ++bi)
    for (int h = 0; h < nh; ++h) {
      std::vector<DVec> p(t, DVec(t, 0)), dp(t, DVec(t, 0)), ds(t, DVec(t, 0));
      for (int i = 0; i < t; ++i) {
        double mx = -INFINITY;
        DVec s(t);
        for (int j = 0; j <= i; ++j) {
          double x = 0;
          for (int d = 0; d < hd; ++d) x += static_cast<double>(Q(bi, i, h, d)) * K(bi, j, h, d);
          s[j] = x * sc;
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (int j = 0; j <= i; ++j) sum += std::exp(s[j] - mx);
        for (int j = 0; j <= i; ++j) p[i][j] = std::exp(s[j] - mx) / sum;
        for (int d = 0; d < hd; ++d) {
          double x = 0;
          for (int j = 0; j <= i; ++j) x += p[i][j] * V(bi, j, h, d);
          ry[(bi * t + i) * c + h * hd + d] = x;
        }
      }
      auto DY = [&](int i, int d) { return static_cast<double>(dy[(bi * t + i) * c + h * hd + d]); };
      for (int i = 0; i < t; ++i) {
        double dot = 0;
        for (int j = 0; j <= i; ++j) {
          double x = 0;
          for (int d = 0; d < hd; ++d) x += DY(i, d) * V(bi, j, h, d);
          dp[i][j] = x;
          dot += p[i][j] * x;
        }
        for (int j = 0; j <= i; ++j) ds[i][j] = p[i][j] * (dp[i][j] - dot);
      }
      for (int i = 0; i < t; ++i)
        for (int d = 0; d < hd; ++d) {
          double dq = 0, dk = 0, dv = 0;
          for (int j = 0; j < t; ++j) {
            dq += ds[i][j] * K(bi, j, h, d);   // dQ_i = sc sum_j dS_ij K_j
            dk += ds[j][i] * Q(bi, j, h, d);   // dK_i = sc sum_j dS_ji Q_j
            dv += p[j][i] * DY(j, d);          // dV_i = sum_j P_ji dY_j
          }
          const int base = (bi * t + i) * 3 * c + h * hd + d;
          rd[base] = sc * dq;
          rd[base + c] = sc * dk;
          rd[base + 2 * c] = dv;
        }
    }
  EXPECT_REL(y, ry, GemmTol());
  EXPECT_REL(dqkv, rd, bf16() ? 2e-2 : 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Storage, KernelTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? std::string("bf16") : std::string("fp32");
                         });

// The whole model's backward pass against central differences of its forward loss, in fp32:
// for each parameter tensor, the derivative of the loss along a random +-1 direction inside
// that tensor (g . u) against (L(w + h u) - L(w - h u)) / 2h.
TEST(GptTrainer, GradientsMatchFiniteDifferences) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  GptConfig c;
  c.batch = 2;
  c.seq = 8;
  c.hidden = 32;
  c.layers = 2;
  c.heads = 2;
  c.vocab = 16;
  c.ffn = 128;
  c.max_pos = 8;
  c.bf16 = false;
  c.seed = 3;
  std::unique_ptr<GptTrainer> tr;
  ASSERT_EQ(GptTrainer::Create(c, 0, &tr), "");
  std::mt19937 rng(99);
  std::uniform_int_distribution<int> tok(0, c.vocab - 1);
  std::vector<int32_t> in(c.batch * c.seq), tg(c.batch * c.seq);
  for (size_t i = 0; i < in.size(); ++i) {
    in[i] = tok(rng);
    tg[i] = i % 5 == 2 ? -1 : tok(rng);
  }
  // Larger weights than the GPT-2 init so that every tensor's gradient stands above fp32 noise.
  Vec w;
  ASSERT_EQ(tr->GetMaster(&w), "");
  std::normal_distribution<float> nd(0.f, 1.f);
  for (const auto& p : tr->Params()) {
    const bool gain = p.name.find("_w") != std::string::npos && p.name.find("ln") != std::string::npos;
    for (int64_t i = 0; i < p.size; ++i) {
      w[p.offset + i] = gain ? 1.f + 0.2f * nd(rng) : 0.3f * nd(rng);
    }
  }
  ASSERT_EQ(tr->SetMaster(w), "");
  float loss = 0;
  Vec grad;
  ASSERT_EQ(tr->Evaluate(in.data(), tg.data(), &loss, &grad), "");
  ASSERT_TRUE(std::isfinite(loss));
  const float h = 1e-3f;
  double worst = 0;
  for (const auto& p : tr->Params()) {
    std::uniform_int_distribution<int> sign(0, 1);
    Vec u(p.size);
    double an = 0;
    for (int64_t i = 0; i < p.size; ++i) {
      u[i] = sign(rng) ? 1.f : -1.f;
      an += static_cast<double>(grad[p.offset + i]) * u[i];
    }
    Vec wp = w, wm = w;
    for (int64_t i = 0; i < p.size; ++i) {
      wp[p.offset + i] += h * u[i];
      wm[p.offset + i] -= h * u[i];
    }
    float lp = 0, lm = 0;
    ASSERT_EQ(tr->SetMaster(wp), "");
    ASSERT_EQ(tr->Evaluate(in.data(), tg.data(), &lp, nullptr), "");
    ASSERT_EQ(tr->SetMaster(wm), "");
    ASSERT_EQ(tr->Evaluate(in.data(), tg.data(), &lm, nullptr), "");
    const double fd = (static_cast<double>(lp) - lm) / (2.0 * h);
    const double err = std::fabs(fd - an) / std::max(std::fabs(an), 1e-3);
    worst = std::max(worst, err);
    std::printf("  grad check %-12s g.u %+.5e  finite diff %+.5e  rel %.2e\n", p.name.c_str(), an,
                fd, err);
    EXPECT_LT(std::fabs(fd - an), 0.03 * std::fabs(an) + 2e-3) << p.name;
  }
  std::printf("  grad check worst relative error %.2e (loss %.4f)\n", worst, loss);
}

// End to end: the tiny GPT-2 learns to copy (loss on the copied half from ~ln 63 to < 0.5).
TEST(CopyTask, TinyGpt2LearnsToCopy) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  CopyTaskOptions o;
  auto r = RunCopyTask(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::printf("  copy task: loss %.3f -> %.4f in %d steps (%.2f s), first < 0.5 at step %d\n",
              r->initial_loss, r->final_loss, o.steps, r->seconds, r->first_step_below);
  EXPECT_NEAR(r->initial_loss, r->chance_loss, 0.5);
  EXPECT_TRUE(r->learned);
}

TEST(CopyTask, RejectsOtherFamilies) {
  CopyTaskOptions o;
  o.spec.family = Family::kLlama;
  o.spec.model_type = "llama";
  auto r = RunCopyTask(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kUnsupported);
}

}  // namespace
}  // namespace dsplan::train
