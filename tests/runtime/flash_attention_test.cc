// The fused attention kernels (runtime/cuda/flash_attention.h) against an fp64 CPU reference, on
// fresh random inputs (never zeros) rounded to the storage dtype, outputs poisoned with NaN
// before every launch. Each case runs every compiled tile configuration. Skips without a CUDA
// device (CI has none); run it on a GPU machine.
//
// Errors are ||out - ref|| / ||ref|| over the whole tensor. Tolerances: bf16 (8-bit mantissa,
// rounding 2^-9) O 1e-2, dQ/dK/dV 2e-2; fp16 (11-bit, 2^-12) O 2e-3, gradients 4e-3. The
// kernel rounds P and dS to the dtype before the tensor-core products, as FlashAttention does,
// so gradients carry about twice the output's rounding. lse: fp32 throughout, |err| < 1e-3.
#include "runtime/cuda/flash_attention.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/fused_attention.h"

namespace dsplan::cuda {
namespace {

int DeviceCount() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

uint16_t ToBits(float x, Precision p) {
  if (p == Precision::kFp16) {
    const __half_raw r = __float2half_rn(x);
    return r.x;
  }
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u += 0x7FFF + ((u >> 16) & 1);  // bf16: round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

float FromBits(uint16_t u, Precision p) {
  if (p == Precision::kFp16) {
    __half_raw r;
    r.x = u;
    return __half2float(__half(r));
  }
  const uint32_t w = static_cast<uint32_t>(u) << 16;
  float f;
  std::memcpy(&f, &w, 4);
  return f;
}

struct Case {
  const char* name;
  Precision dtype;
  int64_t bh, sq, sk, d;
  bool causal;
  float q_std = 1.f;  // larger: peakier softmax
};

// fp64 reference of the forward and backward on the rounded inputs.
struct Reference {
  std::vector<double> o, lse, dq, dk, dv;
};

Reference Compute(const Case& c, const std::vector<float>& q, const std::vector<float>& k,
                  const std::vector<float>& v, const std::vector<float>& dout) {
  const int64_t sq = c.sq, sk = c.sk, d = c.d, off = sk - sq;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  Reference r;
  r.o.assign(c.bh * sq * d, 0);
  r.lse.assign(c.bh * sq, 0);
  r.dq.assign(c.bh * sq * d, 0);
  r.dk.assign(c.bh * sk * d, 0);
  r.dv.assign(c.bh * sk * d, 0);
  std::vector<double> s(sk), dp(sk);
  for (int64_t b = 0; b < c.bh; ++b) {
    const float* Q = q.data() + b * sq * d;
    const float* K = k.data() + b * sk * d;
    const float* V = v.data() + b * sk * d;
    const float* dO = dout.data() + b * sq * d;
    for (int64_t i = 0; i < sq; ++i) {
      const int64_t keys = c.causal ? std::min(sk, std::max<int64_t>(0, i + off + 1)) : sk;
      if (keys == 0) {
        r.lse[b * sq + i] = INFINITY;
        continue;  // O, dQ stay 0; no gradient reaches K, V
      }
      double m = -INFINITY;
      for (int64_t j = 0; j < keys; ++j) {
        double acc = 0;
        for (int64_t x = 0; x < d; ++x) acc += double(Q[i * d + x]) * K[j * d + x];
        s[j] = acc * scale;
        m = std::max(m, s[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j < keys; ++j) sum += std::exp(s[j] - m);
      const double lse = m + std::log(sum);
      r.lse[b * sq + i] = lse;
      double dsum = 0;
      for (int64_t j = 0; j < keys; ++j) {
        s[j] = std::exp(s[j] - lse);  // P
        double acc = 0;
        for (int64_t x = 0; x < d; ++x) acc += double(dO[i * d + x]) * V[j * d + x];
        dp[j] = acc;
        dsum += s[j] * dp[j];
      }
      double* o = r.o.data() + (b * sq + i) * d;
      double* dq = r.dq.data() + (b * sq + i) * d;
      for (int64_t j = 0; j < keys; ++j) {
        const double ds = s[j] * (dp[j] - dsum);
        double* dk = r.dk.data() + (b * sk + j) * d;
        double* dv = r.dv.data() + (b * sk + j) * d;
        for (int64_t x = 0; x < d; ++x) {
          o[x] += s[j] * V[j * d + x];
          dq[x] += scale * ds * K[j * d + x];
          dk[x] += scale * ds * Q[i * d + x];
          dv[x] += s[j] * dO[i * d + x];
        }
      }
    }
  }
  return r;
}

double RelErr(const std::vector<float>& out, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(out[i])) return INFINITY;  // unwritten (NaN poison) or broken
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-300);
}

// Device buffer of |n| elements of |bytes_per| bytes, freed on scope exit.
struct Buffer {
  void* p = nullptr;
  size_t bytes = 0;
  explicit Buffer(size_t b) : bytes(b) {
    if (cudaMalloc(&p, b) != cudaSuccess) p = nullptr;
  }
  ~Buffer() {
    if (p) cudaFree(p);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void Poison() { cudaMemset(p, 0xFF, bytes); }  // NaN in bf16, fp16 and fp32
};

class FlashAttentionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  }

  std::vector<float> Random(int64_t n, float stddev, Precision p) {
    std::normal_distribution<float> dist(0.f, stddev);
    std::vector<float> v(n);
    for (float& x : v) {
      x = dist(rng_);
      if (x == 0.f) x = 0.25f * stddev;
      x = FromBits(ToBits(x, p), p);
    }
    return v;
  }

  static std::vector<uint16_t> Bits(const std::vector<float>& v, Precision p) {
    std::vector<uint16_t> out(v.size());
    for (size_t i = 0; i < v.size(); ++i) out[i] = ToBits(v[i], p);
    return out;
  }

  static std::vector<float> Download(const Buffer& b, int64_t n, Precision p) {
    std::vector<uint16_t> bits(n);
    EXPECT_EQ(cudaMemcpy(bits.data(), b.p, n * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    std::vector<float> out(n);
    for (int64_t i = 0; i < n; ++i) out[i] = FromBits(bits[i], p);
    return out;
  }

  void Run(const Case& c) {
    const Precision p = c.dtype;
    const bool bf16 = p == Precision::kBf16;
    const double tol_o = bf16 ? 1e-2 : 2e-3;
    const double tol_g = bf16 ? 2e-2 : 4e-3;
    const int64_t nq = c.bh * c.sq * c.d, nk = c.bh * c.sk * c.d;
    const std::vector<float> q = Random(nq, c.q_std, p), k = Random(nk, 1.f, p),
                             v = Random(nk, 1.f, p), dout = Random(nq, 1.f, p);
    const Reference ref = Compute(c, q, k, v, dout);

    AttentionShape shape{c.bh, c.sq, c.sk, c.d, c.causal, 0.0};
    Buffer dq_(nq * 2), dk_(nk * 2), dv_(nk * 2), q_(nq * 2), k_(nk * 2), v_(nk * 2),
        o_(nq * 2), do_(nq * 2), lse_(c.bh * c.sq * 4),
        ws_(FlashAttentionWorkspaceBytes(shape));
    for (Buffer* b : {&dq_, &dk_, &dv_, &q_, &k_, &v_, &o_, &do_, &lse_, &ws_}) {
      ASSERT_NE(b->p, nullptr) << "cudaMalloc";
    }
    auto up = [&](Buffer& b, const std::vector<float>& x) {
      const std::vector<uint16_t> bits = Bits(x, p);
      ASSERT_EQ(cudaMemcpy(b.p, bits.data(), bits.size() * 2, cudaMemcpyHostToDevice),
                cudaSuccess);
    };
    up(q_, q);
    up(k_, k);
    up(v_, v);
    up(do_, dout);

    for (const FlashAttentionTiles& t : flash::CompiledConfigs(static_cast<int>(c.d))) {
      SCOPED_TRACE(::testing::Message() << "tiles fwd " << t.fwd_warps << "x" << t.fwd_block_n
                                        << " bwd " << t.bwd_warps << "x" << t.bwd_block_q);
      for (Buffer* b : {&o_, &lse_, &dq_, &dk_, &dv_, &ws_}) b->Poison();
      Status s = FlashAttentionForward(p, shape, q_.p, k_.p, v_.p, o_.p,
                                       static_cast<float*>(lse_.p), nullptr, t);
      ASSERT_TRUE(s.ok()) << s.ToString();
      s = FlashAttentionBackward(p, shape, q_.p, k_.p, v_.p, o_.p, do_.p,
                                 static_cast<const float*>(lse_.p), dq_.p, dk_.p, dv_.p, ws_.p,
                                 nullptr, t);
      ASSERT_TRUE(s.ok()) << s.ToString();
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

      const std::vector<float> o = Download(o_, nq, p), dq = Download(dq_, nq, p),
                               dk = Download(dk_, nk, p), dv = Download(dv_, nk, p);
      std::vector<float> lse(c.bh * c.sq);
      ASSERT_EQ(cudaMemcpy(lse.data(), lse_.p, lse.size() * 4, cudaMemcpyDeviceToHost),
                cudaSuccess);
      const double eo = RelErr(o, ref.o), eq = RelErr(dq, ref.dq), ek = RelErr(dk, ref.dk),
                   ev = RelErr(dv, ref.dv);
      double lse_err = 0;
      int64_t empty_rows = 0;
      for (size_t i = 0; i < lse.size(); ++i) {
        if (std::isinf(ref.lse[i])) {
          // A row that sees no key: lse +inf, O and dQ exactly 0.
          ++empty_rows;
          EXPECT_TRUE(std::isinf(lse[i]) && lse[i] > 0) << "row " << i << " lse " << lse[i];
          for (int64_t x = 0; x < c.d; ++x) {
            EXPECT_EQ(o[i * c.d + x], 0.f) << "row " << i;
            EXPECT_EQ(dq[i * c.d + x], 0.f) << "row " << i;
          }
          continue;
        }
        lse_err = std::max(lse_err, std::isfinite(lse[i]) ? std::abs(lse[i] - ref.lse[i]) : INFINITY);
      }
      std::printf("  %-28s %s tiles %dx%d/%dx%d: rel err O %.2e dQ %.2e dK %.2e dV %.2e; "
                  "max |lse err| %.1e; %lld rows without keys\n",
                  c.name, PrecisionName(p), t.fwd_warps, t.fwd_block_n, t.bwd_warps,
                  t.bwd_block_q, eo, eq, ek, ev, lse_err, static_cast<long long>(empty_rows));
      EXPECT_LT(eo, tol_o) << "O";
      EXPECT_LT(eq, tol_g) << "dQ";
      EXPECT_LT(ek, tol_g) << "dK";
      EXPECT_LT(ev, tol_g) << "dV";
      EXPECT_LT(lse_err, 1e-3) << "lse";
    }
  }

  std::mt19937 rng_{20261202};
};

TEST_F(FlashAttentionTest, CausalTileAligned) {
  Run({"causal 128x128 d64", Precision::kBf16, 3, 128, 128, 64, true});
}
TEST_F(FlashAttentionTest, NonCausalRaggedLength) {
  Run({"non-causal 200x200 d64", Precision::kBf16, 2, 200, 200, 64, false});
}
TEST_F(FlashAttentionTest, CausalHeadDim128Ragged) {
  Run({"causal 257x257 d128", Precision::kBf16, 2, 257, 257, 128, true});
}
TEST_F(FlashAttentionTest, CrossAttentionShorterQueries) {
  Run({"non-causal 77x300 d128", Precision::kFp16, 2, 77, 300, 128, false});
}
TEST_F(FlashAttentionTest, CausalMoreQueriesThanKeys) {
  // Bottom-right alignment: the first 223 query rows see no key.
  Run({"causal 300x77 d64", Precision::kBf16, 2, 300, 77, 64, true});
}
TEST_F(FlashAttentionTest, CausalFewerQueriesThanKeys) {
  Run({"causal 64x200 d64", Precision::kFp16, 2, 64, 200, 64, true});
}
TEST_F(FlashAttentionTest, LongCausalPeakySoftmax) {
  Run({"causal 1024x1024 d128 q*3", Precision::kBf16, 1, 1024, 1024, 128, true, 3.f});
}
TEST_F(FlashAttentionTest, LongNonCausalFp16) {
  Run({"non-causal 1000x1000 d64", Precision::kFp16, 2, 1000, 1000, 64, false});
}
TEST_F(FlashAttentionTest, SingleQueryRow) {
  // One query sees all five keys (bottom-right). With a single key the gradients of Q and K are
  // exactly zero, which a relative error cannot judge, hence five.
  Run({"causal 1x5 d64", Precision::kBf16, 4, 1, 5, 64, true});
}
TEST_F(FlashAttentionTest, CausalFp16HeadDim128) {
  Run({"causal 129x129 d128", Precision::kFp16, 3, 129, 129, 128, true, 2.f});
}

// The forward is deterministic (no atomics): two runs give the same bits.
TEST_F(FlashAttentionTest, ForwardIsDeterministic) {
  const Precision p = Precision::kBf16;
  AttentionShape shape{4, 333, 333, 64, true, 0.0};
  const int64_t n = 4 * 333 * 64;
  Buffer q(n * 2), k(n * 2), v(n * 2), o1(n * 2), o2(n * 2), lse(4 * 333 * 4);
  const std::vector<uint16_t> bits = Bits(Random(n, 1.f, p), p);
  for (Buffer* b : {&q, &k, &v}) {
    ASSERT_EQ(cudaMemcpy(b->p, bits.data(), n * 2, cudaMemcpyHostToDevice), cudaSuccess);
  }
  for (Buffer* o : {&o1, &o2}) {
    o->Poison();
    Status s = FlashAttentionForward(p, shape, q.p, k.p, v.p, o->p, static_cast<float*>(lse.p),
                                     nullptr);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint16_t> a(n), b(n);
  ASSERT_EQ(cudaMemcpy(a.data(), o1.p, n * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(b.data(), o2.p, n * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(a, b);
}

TEST_F(FlashAttentionTest, RejectsMisalignedPointers) {
  Buffer buf(1 << 20);
  AttentionShape shape{1, 16, 16, 64, false, 0.0};
  char* base = static_cast<char*>(buf.p);
  Status s = FlashAttentionForward(Precision::kBf16, shape, base + 2, base, base, base,
                                   reinterpret_cast<float*>(base), nullptr);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("q must be device memory aligned to 16 bytes"), std::string::npos)
      << s.message();
  shape.sq = 0;
  s = FlashAttentionForward(Precision::kBf16, shape, base, base, base, base,
                            reinterpret_cast<float*>(base), nullptr);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
}

// Needs no device.
TEST(FlashAttentionSupport, NamesWhatIsSupported) {
  EXPECT_TRUE(FlashAttentionSupported(Precision::kBf16, 64).ok());
  EXPECT_TRUE(FlashAttentionSupported(Precision::kFp16, 128).ok());
  for (auto [p, d] : {std::pair{Precision::kBf16, int64_t{96}},
                      std::pair{Precision::kFp32, int64_t{64}},
                      std::pair{Precision::kFp16, int64_t{256}}}) {
    Status s = FlashAttentionSupported(p, d);
    EXPECT_EQ(s.code(), Status::Code::kUnsupported);
    EXPECT_NE(s.message().find(kFusedAttentionSupport), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(std::to_string(d)), std::string::npos) << s.message();
    EXPECT_FALSE(FusedAttentionSupports(p, d));
  }
  // Every supported head dim has compiled kernels.
  for (int64_t d : {64, 128}) {
    EXPECT_FALSE(flash::CompiledConfigs(static_cast<int>(d)).empty());
    EXPECT_TRUE(FusedAttentionSupports(Precision::kBf16, d));
  }
}

}  // namespace
}  // namespace dsplan::cuda
