#include "runtime/cpu_kernels/cpu_adam.h"

#include <immintrin.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <thread>
#include <vector>

namespace dsplan {

const char* SimdLevelName(SimdLevel s) {
  switch (s) {
    case SimdLevel::kScalar: return "scalar";
    case SimdLevel::kAvx2: return "avx2";
    case SimdLevel::kAvx512: return "avx512";
  }
  return "?";
}

SimdLevel DetectSimdLevel() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return SimdLevel::kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return SimdLevel::kAvx2;
#endif
  return SimdLevel::kScalar;
}

namespace {

// Per-step constants shared by the three kernels.
struct Coeffs {
  float b1, b2, one_minus_b1, one_minus_b2, eps;
  float step_size;     // -lr / (1 - beta1^t)
  float bc2_inv_sqrt;  // 1 / sqrt(1 - beta2^t)
  float decay;         // p *= decay (AdamW), 1 otherwise
  float l2;            // g += l2 * p (Adam), 0 otherwise
};

Coeffs MakeCoeffs(const AdamParams& a) {
  Coeffs c;
  c.b1 = a.beta1;
  c.b2 = a.beta2;
  c.one_minus_b1 = 1 - a.beta1;
  c.one_minus_b2 = 1 - a.beta2;
  c.eps = a.eps;
  const double bc1 = 1 - std::pow(static_cast<double>(a.beta1), static_cast<double>(a.step));
  const double bc2 = 1 - std::pow(static_cast<double>(a.beta2), static_cast<double>(a.step));
  c.step_size = static_cast<float>(-a.lr / bc1);
  c.bc2_inv_sqrt = static_cast<float>(1 / std::sqrt(bc2));
  c.decay = a.adamw ? 1 - a.lr * a.weight_decay : 1.0f;
  c.l2 = a.adamw ? 0.0f : a.weight_decay;
  return c;
}

void ScalarRange(const Coeffs& c, float* p, const float* g, float* m, float* v, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float grad = g[i] + c.l2 * p[i];
    float mi = c.b1 * m[i] + c.one_minus_b1 * grad;
    float vi = c.b2 * v[i] + c.one_minus_b2 * grad * grad;
    float denom = std::sqrt(vi) * c.bc2_inv_sqrt + c.eps;
    p[i] = p[i] * c.decay + c.step_size * (mi / denom);
    m[i] = mi;
    v[i] = vi;
  }
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) void Avx2Range(const Coeffs& c, float* p, const float* g,
                                                    float* m, float* v, int64_t n) {
  const __m256 b1 = _mm256_set1_ps(c.b1), b2 = _mm256_set1_ps(c.b2);
  const __m256 omb1 = _mm256_set1_ps(c.one_minus_b1), omb2 = _mm256_set1_ps(c.one_minus_b2);
  const __m256 eps = _mm256_set1_ps(c.eps), step = _mm256_set1_ps(c.step_size);
  const __m256 bc2 = _mm256_set1_ps(c.bc2_inv_sqrt), decay = _mm256_set1_ps(c.decay);
  const __m256 l2 = _mm256_set1_ps(c.l2);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 pi = _mm256_loadu_ps(p + i);
    __m256 gi = _mm256_fmadd_ps(l2, pi, _mm256_loadu_ps(g + i));
    __m256 mi = _mm256_fmadd_ps(b1, _mm256_loadu_ps(m + i), _mm256_mul_ps(omb1, gi));
    __m256 vi = _mm256_fmadd_ps(b2, _mm256_loadu_ps(v + i), _mm256_mul_ps(omb2, _mm256_mul_ps(gi, gi)));
    __m256 denom = _mm256_fmadd_ps(_mm256_sqrt_ps(vi), bc2, eps);
    pi = _mm256_fmadd_ps(pi, decay, _mm256_mul_ps(step, _mm256_div_ps(mi, denom)));
    _mm256_storeu_ps(p + i, pi);
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
  }
  ScalarRange(c, p + i, g + i, m + i, v + i, n - i);
}

__attribute__((target("avx512f"))) void Avx512Range(const Coeffs& c, float* p, const float* g,
                                                     float* m, float* v, int64_t n) {
  const __m512 b1 = _mm512_set1_ps(c.b1), b2 = _mm512_set1_ps(c.b2);
  const __m512 omb1 = _mm512_set1_ps(c.one_minus_b1), omb2 = _mm512_set1_ps(c.one_minus_b2);
  const __m512 eps = _mm512_set1_ps(c.eps), step = _mm512_set1_ps(c.step_size);
  const __m512 bc2 = _mm512_set1_ps(c.bc2_inv_sqrt), decay = _mm512_set1_ps(c.decay);
  const __m512 l2 = _mm512_set1_ps(c.l2);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 pi = _mm512_loadu_ps(p + i);
    __m512 gi = _mm512_fmadd_ps(l2, pi, _mm512_loadu_ps(g + i));
    __m512 mi = _mm512_fmadd_ps(b1, _mm512_loadu_ps(m + i), _mm512_mul_ps(omb1, gi));
    __m512 vi = _mm512_fmadd_ps(b2, _mm512_loadu_ps(v + i), _mm512_mul_ps(omb2, _mm512_mul_ps(gi, gi)));
    __m512 denom = _mm512_fmadd_ps(_mm512_sqrt_ps(vi), bc2, eps);
    pi = _mm512_fmadd_ps(pi, decay, _mm512_mul_ps(step, _mm512_div_ps(mi, denom)));
    _mm512_storeu_ps(p + i, pi);
    _mm512_storeu_ps(m + i, mi);
    _mm512_storeu_ps(v + i, vi);
  }
  ScalarRange(c, p + i, g + i, m + i, v + i, n - i);
}
#endif

void Range(SimdLevel level, const Coeffs& c, float* p, const float* g, float* m, float* v,
           int64_t n) {
#if defined(__x86_64__)
  if (level == SimdLevel::kAvx512) return Avx512Range(c, p, g, m, v, n);
  if (level == SimdLevel::kAvx2) return Avx2Range(c, p, g, m, v, n);
#endif
  ScalarRange(c, p, g, m, v, n);
}

}  // namespace

void AdamStep(const AdamParams& params, float* p, const float* g, float* m, float* v, int64_t n,
              int threads, SimdLevel level) {
  assert(threads >= 1);
  const Coeffs c = MakeCoeffs(params);
  // Chunks are multiples of 64 elements (a cache line of each array is owned by one thread).
  const int64_t per = ((n + threads - 1) / threads + 63) / 64 * 64;
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) {
    const int64_t begin = t * per;
    if (begin >= n) break;
    const int64_t len = std::min(per, n - begin);
    pool.emplace_back([=, &c] { Range(level, c, p + begin, g + begin, m + begin, v + begin, len); });
  }
  Range(level, c, p, g, m, v, std::min(per, n));
  for (auto& t : pool) t.join();
}

void AdamStep(const AdamParams& params, float* p, const float* g, float* m, float* v, int64_t n,
              int threads) {
  static const SimdLevel level = DetectSimdLevel();
  AdamStep(params, p, g, m, v, n, threads, level);
}

}  // namespace dsplan
