// GPT-2 training on one GPU with kernels written here and GEMMs through cuBLASLt.
// See train_kernels.h for the interface and docs/runtime-math.md for the math and numbers.
//
// Storage type T (float or __nv_bfloat16) holds parameters' working copy and activations;
// statistics, attention scores, weight gradients, master weights and AdamW states are fp32.
// All kernel arithmetic is fp32.
#include "runtime/reference_trainers/train_kernels.h"

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <array>

namespace dsplan {
namespace train {
namespace {

using bf16 = __nv_bfloat16;

std::string Fmt(const char* file, int line, const char* expr, const char* what) {
  char buf[512];
  std::snprintf(buf, sizeof(buf), "%s:%d: %s: %s", file, line, expr, what);
  return buf;
}

#define TRY_CUDA(expr)                                                          \
  do {                                                                          \
    cudaError_t e_ = (expr);                                                    \
    if (e_ != cudaSuccess) return Fmt(__FILE__, __LINE__, #expr, cudaGetErrorString(e_)); \
  } while (0)

#define TRY_LAUNCH(what) TRY_CUDA(cudaGetLastError())

#define TRY_CUBLAS(expr)                                                        \
  do {                                                                          \
    cublasStatus_t e_ = (expr);                                                 \
    if (e_ != CUBLAS_STATUS_SUCCESS) {                                          \
      char b_[64];                                                              \
      std::snprintf(b_, sizeof(b_), "cuBLAS status %d", static_cast<int>(e_));  \
      return Fmt(__FILE__, __LINE__, #expr, b_);                                \
    }                                                                           \
  } while (0)

#define TRY(expr)                           \
  do {                                      \
    std::string s_ = (expr);                \
    if (!s_.empty()) return s_;             \
  } while (0)

// ---------------------------------------------------------------------------------------------
// Element helpers.

__device__ __forceinline__ float Ld(float x) { return x; }
__device__ __forceinline__ float Ld(bf16 x) { return __bfloat162float(x); }
template <class T> __device__ __forceinline__ T St(float x);
template <> __device__ __forceinline__ float St<float>(float x) { return x; }
template <> __device__ __forceinline__ bf16 St<bf16>(float x) { return __float2bfloat16(x); }

__device__ __forceinline__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Block-wide sum/max (blockDim.x a multiple of 32, <= 1024); every thread gets the result.
__device__ float BlockSum(float v, float* sh) {
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32, nw = blockDim.x / 32;
  v = WarpSum(v);
  __syncthreads();
  if (lane == 0) sh[w] = v;
  __syncthreads();
  float r = lane < nw ? sh[lane] : 0.f;
  return WarpSum(r);
}
__device__ float BlockMax(float v, float* sh) {
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32, nw = blockDim.x / 32;
  v = WarpMax(v);
  __syncthreads();
  if (lane == 0) sh[w] = v;
  __syncthreads();
  float r = lane < nw ? sh[lane] : -INFINITY;
  return WarpMax(r);
}

int Blocks(int64_t n, int threads) { return static_cast<int>((n + threads - 1) / threads); }

// ---------------------------------------------------------------------------------------------
// Kernels.

// out[b,t,:] = wte[tok[b,t],:] + wpe[t,:]
template <class T>
__global__ void EmbedFwdK(T* out, const int32_t* tok, const T* wte, const T* wpe, int bt, int t,
                          int c) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= static_cast<int64_t>(bt) * c) return;
  const int row = static_cast<int>(i / c), col = static_cast<int>(i % c);
  const int pos = row % t;
  out[i] = St<T>(Ld(wte[static_cast<int64_t>(tok[row]) * c + col]) +
                 Ld(wpe[static_cast<int64_t>(pos) * c + col]));
}

// dwte[tok] += dout; dwpe[t] += dout (fp32 atomics: rows with the same token or position collide)
template <class T>
__global__ void EmbedBwdK(float* dwte, float* dwpe, const int32_t* tok, const T* dout, int bt, int t,
                          int c) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= static_cast<int64_t>(bt) * c) return;
  const int row = static_cast<int>(i / c), col = static_cast<int>(i % c);
  const float d = Ld(dout[i]);
  atomicAdd(&dwte[static_cast<int64_t>(tok[row]) * c + col], d);
  atomicAdd(&dwpe[static_cast<int64_t>(row % t) * c + col], d);
}

// One warp per row: out = (x - mean) * rstd * w + b; two passes over the row for the variance.
template <class T>
__global__ void LnFwdK(T* out, float* mean, float* rstd, const T* x, const T* w, const T* b, int n,
                       int c, float eps) {
  const int row = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
  if (row >= n) return;
  const T* xr = x + static_cast<int64_t>(row) * c;
  float s = 0.f;
  for (int j = lane; j < c; j += 32) s += Ld(xr[j]);
  const float m = WarpSum(s) / c;
  float v = 0.f;
  for (int j = lane; j < c; j += 32) {
    const float d = Ld(xr[j]) - m;
    v += d * d;
  }
  const float rs = rsqrtf(WarpSum(v) / c + eps);
  T* o = out + static_cast<int64_t>(row) * c;
  for (int j = lane; j < c; j += 32) o[j] = St<T>((Ld(xr[j]) - m) * rs * Ld(w[j]) + Ld(b[j]));
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = rs;
  }
}

// One warp per row, rows strided over the grid; dw/db summed in shared memory per block, then one
// global atomic per column per block. dx = (accumulate ? dx : 0) + rstd (g - mean(g) - xhat
// mean(g xhat)) with g = dout * w.
template <class T>
__global__ void LnBwdK(T* dx, float* dw, float* db, const T* dout, const T* x, const T* w,
                       const float* mean, const float* rstd, int n, int c, int accumulate) {
  extern __shared__ float sh[];
  float* sdw = sh;
  float* sdb = sh + c;
  for (int j = threadIdx.x; j < 2 * c; j += blockDim.x) sh[j] = 0.f;
  __syncthreads();
  const int lane = threadIdx.x % 32, wpb = blockDim.x / 32;
  const int nw = gridDim.x * wpb;
  for (int row = blockIdx.x * wpb + threadIdx.x / 32; row < n; row += nw) {
    const int64_t off = static_cast<int64_t>(row) * c;
    const float m = mean[row], rs = rstd[row];
    float sg = 0.f, sgx = 0.f;
    for (int j = lane; j < c; j += 32) {
      const float xh = (Ld(x[off + j]) - m) * rs;
      const float dy = Ld(dout[off + j]);
      const float g = dy * Ld(w[j]);
      sg += g;
      sgx += g * xh;
      atomicAdd(&sdb[j], dy);
      atomicAdd(&sdw[j], dy * xh);
    }
    sg = WarpSum(sg) / c;
    sgx = WarpSum(sgx) / c;
    for (int j = lane; j < c; j += 32) {
      const float xh = (Ld(x[off + j]) - m) * rs;
      const float g = Ld(dout[off + j]) * Ld(w[j]);
      float v = rs * (g - sg - xh * sgx);
      if (accumulate) v += Ld(dx[off + j]);
      dx[off + j] = St<T>(v);
    }
  }
  __syncthreads();
  for (int j = threadIdx.x; j < c; j += blockDim.x) {
    atomicAdd(&dw[j], sdw[j]);
    atomicAdd(&db[j], sdb[j]);
  }
}

constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2/pi)

// gelu_new: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
template <class T>
__global__ void GeluFwdK(T* out, const T* x, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float v = Ld(x[i]);
  const float u = kGeluK * (v + 0.044715f * v * v * v);
  out[i] = St<T>(0.5f * v * (1.f + tanhf(u)));
}

// dx = dy * gelu'(x); dx may alias dy.
template <class T>
__global__ void GeluBwdK(T* dx, const T* x, const T* dy, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float v = Ld(x[i]);
  const float u = kGeluK * (v + 0.044715f * v * v * v);
  const float th = tanhf(u);
  const float du = kGeluK * (1.f + 3.f * 0.044715f * v * v);
  const float g = 0.5f * (1.f + th) + 0.5f * v * (1.f - th * th) * du;
  dx[i] = St<T>(Ld(dy[i]) * g);
}

// One warp per row of scores (already scaled); row r is query r % t; keys j > query get 0.
template <class T>
__global__ void SoftmaxFwdK(T* p, const float* s, int rows, int t) {
  const int row = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int q = row % t;
  const float* sr = s + static_cast<int64_t>(row) * t;
  float mx = -INFINITY;
  for (int j = lane; j <= q; j += 32) mx = fmaxf(mx, sr[j]);
  mx = WarpMax(mx);
  float sum = 0.f;
  for (int j = lane; j <= q; j += 32) sum += __expf(sr[j] - mx);
  const float inv = 1.f / WarpSum(sum);
  T* pr = p + static_cast<int64_t>(row) * t;
  for (int j = lane; j < t; j += 32) pr[j] = St<T>(j <= q ? __expf(sr[j] - mx) * inv : 0.f);
}

// ds = p * (dp - sum_j p_j dp_j) over the causal part; 0 above the diagonal.
template <class T>
__global__ void SoftmaxBwdK(T* ds, const T* p, const float* dp, int rows, int t) {
  const int row = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int q = row % t;
  const int64_t off = static_cast<int64_t>(row) * t;
  float dot = 0.f;
  for (int j = lane; j <= q; j += 32) dot += Ld(p[off + j]) * dp[off + j];
  dot = WarpSum(dot);
  for (int j = lane; j < t; j += 32)
    ds[off + j] = St<T>(j <= q ? Ld(p[off + j]) * (dp[off + j] - dot) : 0.f);
}

// qkv [B,T,3,NH,hd] <-> q,k,v [B,NH,T,hd]
template <class T>
__global__ void PermuteK(T* q, T* k, T* v, const T* qkv, int b, int t, int nh, int hd) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t total = static_cast<int64_t>(b) * nh * t * hd;
  if (i >= total) return;
  const int d = i % hd;
  const int ti = (i / hd) % t;
  const int h = (i / (static_cast<int64_t>(hd) * t)) % nh;
  const int bi = i / (static_cast<int64_t>(hd) * t * nh);
  const int64_t c = static_cast<int64_t>(nh) * hd;
  const int64_t src = (static_cast<int64_t>(bi) * t + ti) * 3 * c + h * hd + d;
  q[i] = qkv[src];
  k[i] = qkv[src + c];
  v[i] = qkv[src + 2 * c];
}
template <class T>
__global__ void PermuteBwdK(T* dqkv, const T* dq, const T* dk, const T* dv, int b, int t, int nh,
                            int hd) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t total = static_cast<int64_t>(b) * nh * t * hd;
  if (i >= total) return;
  const int d = i % hd;
  const int ti = (i / hd) % t;
  const int h = (i / (static_cast<int64_t>(hd) * t)) % nh;
  const int bi = i / (static_cast<int64_t>(hd) * t * nh);
  const int64_t c = static_cast<int64_t>(nh) * hd;
  const int64_t dst = (static_cast<int64_t>(bi) * t + ti) * 3 * c + h * hd + d;
  dqkv[dst] = dq[i];
  dqkv[dst + c] = dk[i];
  dqkv[dst + 2 * c] = dv[i];
}
// y [B,NH,T,hd] <-> out [B,T,NH*hd]; dir 0: y -> out, dir 1: out -> y (the backward).
template <class T>
__global__ void UnpermuteK(T* y, T* out, int b, int t, int nh, int hd, int dir) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t total = static_cast<int64_t>(b) * nh * t * hd;
  if (i >= total) return;
  const int d = i % hd;
  const int ti = (i / hd) % t;
  const int h = (i / (static_cast<int64_t>(hd) * t)) % nh;
  const int bi = i / (static_cast<int64_t>(hd) * t * nh);
  const int64_t o = (static_cast<int64_t>(bi) * t + ti) * nh * hd + h * hd + d;
  if (dir == 0) out[o] = y[i]; else y[i] = out[o];
}

template <class T>
__global__ void AddK(T* out, const T* a, const T* b, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = St<T>(Ld(a[i]) + Ld(b[i]));
}

// db[j] += sum over rows of dout[row, j]. Block (32, 8): 32 columns, 8 row lanes; grid.y splits
// the rows; one atomic per column per block.
template <class T>
__global__ void BiasGradK(float* db, const T* dout, int n, int oc) {
  __shared__ float sh[8][33];
  const int col = blockIdx.x * 32 + threadIdx.x;
  float s = 0.f;
  if (col < oc) {
    for (int r = blockIdx.y * 8 + threadIdx.y; r < n; r += 8 * gridDim.y)
      s += Ld(dout[static_cast<int64_t>(r) * oc + col]);
  }
  sh[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && col < oc) {
    float t = 0.f;
    for (int y = 0; y < 8; ++y) t += sh[y][threadIdx.x];
    atomicAdd(&db[col], t);
  }
}

// One block per row: loss = logsumexp(logits[:V]) - logits[target]; the logits are overwritten
// by dloss/dlogits = (softmax - onehot) * scale (0 on padding columns and ignored rows).
template <class T>
__global__ void CrossEntropyK(T* logits, float* losses, const int32_t* targets, int v, int vp,
                              float scale) {
  __shared__ float sh[32];
  const int row = blockIdx.x;
  T* lg = logits + static_cast<int64_t>(row) * vp;
  const int tgt = targets[row];
  if (tgt < 0) {
    for (int j = threadIdx.x; j < vp; j += blockDim.x) lg[j] = St<T>(0.f);
    if (threadIdx.x == 0) losses[row] = 0.f;
    return;
  }
  const float lt = Ld(lg[tgt]);
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < v; j += blockDim.x) mx = fmaxf(mx, Ld(lg[j]));
  mx = BlockMax(mx, sh);
  float s = 0.f;
  for (int j = threadIdx.x; j < v; j += blockDim.x) s += __expf(Ld(lg[j]) - mx);
  s = BlockSum(s, sh);
  const float lse = mx + logf(s);
  if (threadIdx.x == 0) losses[row] = lse - lt;
  __syncthreads();  // every thread has read lg[tgt] before it is overwritten
  for (int j = threadIdx.x; j < vp; j += blockDim.x) {
    const float p = j < v ? __expf(Ld(lg[j]) - lse) : 0.f;
    lg[j] = St<T>((p - (j == tgt ? 1.f : 0.f)) * scale);
  }
}

template <class T>
__global__ void AdamWK(T* param, float* master, const float* g, float* m, float* v, int64_t n,
                       float lr, float b1, float b2, float eps, float wd, float bc1, float bc2) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float gi = g[i];
  const float mi = b1 * m[i] + (1.f - b1) * gi;
  const float vi = b2 * v[i] + (1.f - b2) * gi * gi;
  m[i] = mi;
  v[i] = vi;
  float w = master[i];
  w -= lr * ((mi / bc1) / (sqrtf(vi / bc2) + eps) + wd * w);
  master[i] = w;
  param[i] = St<T>(w);
}

__device__ __forceinline__ uint64_t SplitMix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
// Normal(0, std) by Box-Muller from a counter hash; std == 0 with |fill| fills a constant.
__global__ void InitK(float* p, int64_t n, float std, float fill, uint64_t seed) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  if (std == 0.f) {
    p[i] = fill;
    return;
  }
  const uint64_t r = SplitMix(seed * 0x100000001B3ull + static_cast<uint64_t>(i));
  const float u1 = (static_cast<float>(r >> 40) + 1.f) / 16777217.f;  // (0, 1]
  const float u2 = static_cast<float>((r >> 16) & 0xFFFFFF) / 16777216.f;
  p[i] = std * sqrtf(-2.f * logf(u1)) * cospif(2.f * u2);
}

template <class T>
__global__ void CastK(T* out, const float* in, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = St<T>(in[i]);
}
template <class T>
__global__ void ToFloatK(float* out, const T* in, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = Ld(in[i]);
}

// ---------------------------------------------------------------------------------------------
// Launchers (all return "" or an error).

constexpr int kThreads = 256;

template <class T>
std::string LayerNormFwd(T* out, float* mean, float* rstd, const T* x, const T* w, const T* b,
                         int n, int c, float eps, cudaStream_t s) {
  LnFwdK<T><<<Blocks(static_cast<int64_t>(n) * 32, kThreads), kThreads, 0, s>>>(out, mean, rstd,
                                                                                 x, w, b, n, c, eps);
  TRY_LAUNCH("ln fwd");
  return "";
}

int g_num_sms = 0;

template <class T>
std::string LayerNormBwd(T* dx, float* dw, float* db, const T* dout, const T* x, const T* w,
                         const float* mean, const float* rstd, int n, int c, bool accumulate,
                         cudaStream_t s) {
  const size_t smem = 2 * static_cast<size_t>(c) * sizeof(float);
  if (smem > 48 * 1024) {
    TRY_CUDA(cudaFuncSetAttribute(LnBwdK<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(smem)));
  }
  const int sms = g_num_sms > 0 ? g_num_sms : 32;
  int blocks = std::min((n + 7) / 8, 2 * sms);
  if (blocks < 1) blocks = 1;
  LnBwdK<T><<<blocks, kThreads, smem, s>>>(dx, dw, db, dout, x, w, mean, rstd, n, c,
                                            accumulate ? 1 : 0);
  TRY_LAUNCH("ln bwd");
  return "";
}

template <class T>
std::string BiasGrad(float* db, const T* dout, int n, int oc, cudaStream_t s) {
  dim3 block(32, 8);
  int gy = std::min(std::max(n / 256, 1), 64);
  dim3 grid((oc + 31) / 32, gy);
  BiasGradK<T><<<grid, block, 0, s>>>(db, dout, n, oc);
  TRY_LAUNCH("bias grad");
  return "";
}

// ---------------------------------------------------------------------------------------------
// cuBLASLt GEMMs in row-major terms with a plan cache.

template <class T> cudaDataType_t DType();
template <> cudaDataType_t DType<float>() { return CUDA_R_32F; }
template <> cudaDataType_t DType<bf16>() { return CUDA_R_16BF; }

class Gemmer {
 public:
  ~Gemmer() {
    for (auto& kv : plans_) {
      Plan& p = kv.second;
      if (p.op) cublasLtMatmulDescDestroy(p.op);
      if (p.la) cublasLtMatrixLayoutDestroy(p.la);
      if (p.lb) cublasLtMatrixLayoutDestroy(p.lb);
      if (p.ld) cublasLtMatrixLayoutDestroy(p.ld);
    }
    if (ws_) cudaFree(ws_);
    if (lt_) cublasLtDestroy(lt_);
  }
  std::string Init() {
    TRY_CUBLAS(cublasLtCreate(&lt_));
    TRY_CUDA(cudaMalloc(&ws_, kWs));
    return "";
  }

  // Row-major D[M,N] (ld ldd) = alpha op(A) op(B) + beta D (+ bias[N]); op(A) is M x K,
  // op(B) is K x N; A stored [M,K] (ta false) or [K,M] (ta true), likewise B. Batched with
  // strides sa, sb, sd (elements). ab: operand type; dt: D type.
  std::string Run(bool ta, bool tb, int m, int n, int k, const void* a, int64_t lda,
                  const void* b, int64_t ldb, void* d, int64_t ldd, float alpha, float beta,
                  cudaDataType_t ab, cudaDataType_t dt, const void* bias, int batch, int64_t sa,
                  int64_t sb, int64_t sd, cudaStream_t s) {
    std::array<int64_t, 16> key = {ta, tb, m, n, k, lda, ldb, ldd, static_cast<int64_t>(ab),
                                   static_cast<int64_t>(dt), bias != nullptr, batch, sa, sb, sd,
                                   0};
    auto it = plans_.find(key);
    if (it == plans_.end()) {
      Plan p;
      TRY(MakePlan(ta, tb, m, n, k, lda, ldb, ldd, ab, dt, bias != nullptr, batch, sa, sb, sd, &p));
      it = plans_.emplace(key, p).first;
    }
    Plan& p = it->second;
    if (bias) {
      TRY_CUBLAS(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                sizeof(bias)));
    }
    // Column-major: D^T (N x M) = op(B)^T (N x K) * op(A)^T (K x M).
    TRY_CUBLAS(cublasLtMatmul(lt_, p.op, &alpha, b, p.la, a, p.lb, &beta, d, p.ld, d, p.ld,
                              &p.algo, ws_, kWs, s));
    return "";
  }

 private:
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
    cublasLtMatmulAlgo_t algo;
  };
  static constexpr size_t kWs = 64u << 20;

  std::string MakePlan(bool ta, bool tb, int m, int n, int k, int64_t lda, int64_t ldb,
                       int64_t ldd, cudaDataType_t ab, cudaDataType_t dt, bool bias, int batch,
                       int64_t sa, int64_t sb, int64_t sd, Plan* p) {
    TRY_CUBLAS(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    // Column-major operands: first = B (op tb), second = A (op ta).
    const cublasOperation_t oa = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t ob = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    TRY_CUBLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof(oa)));
    TRY_CUBLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof(ob)));
    if (bias) {
      cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
      TRY_CUBLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                                sizeof(epi)));
      TRY_CUBLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &dt,
                                                sizeof(dt)));
    }
    // Stored shapes (column-major views of the row-major buffers).
    if (tb) TRY_CUBLAS(cublasLtMatrixLayoutCreate(&p->la, ab, k, n, ldb));
    else TRY_CUBLAS(cublasLtMatrixLayoutCreate(&p->la, ab, n, k, ldb));
    if (ta) TRY_CUBLAS(cublasLtMatrixLayoutCreate(&p->lb, ab, m, k, lda));
    else TRY_CUBLAS(cublasLtMatrixLayoutCreate(&p->lb, ab, k, m, lda));
    TRY_CUBLAS(cublasLtMatrixLayoutCreate(&p->ld, dt, n, m, ldd));
    if (batch > 1) {
      struct {
        cublasLtMatrixLayout_t l;
        int64_t stride;
      } ls[3] = {{p->la, sb}, {p->lb, sa}, {p->ld, sd}};
      for (auto& x : ls) {
        int32_t bc = batch;
        TRY_CUBLAS(cublasLtMatrixLayoutSetAttribute(x.l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc,
                                                    sizeof(bc)));
        TRY_CUBLAS(cublasLtMatrixLayoutSetAttribute(
            x.l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &x.stride, sizeof(x.stride)));
      }
    }
    cublasLtMatmulPreference_t pref = nullptr;
    TRY_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = kWs;
    cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    if (st == CUBLAS_STATUS_SUCCESS) {
      st = cublasLtMatmulAlgoGetHeuristic(lt_, p->op, p->la, p->lb, p->ld, p->ld, pref, 1, &heur,
                                          &found);
    }
    cublasLtMatmulPreferenceDestroy(pref);
    TRY_CUBLAS(st);
    if (found == 0) {
      char buf[256];
      std::snprintf(buf, sizeof(buf),
                    "cuBLASLt has no algorithm for row-major %s%s GEMM M=%d N=%d K=%d batch=%d",
                    ta ? "T" : "N", tb ? "T" : "N", m, n, k, batch);
      return buf;
    }
    p->algo = heur.algo;
    return "";
  }

  cublasLtHandle_t lt_ = nullptr;
  void* ws_ = nullptr;
  std::map<std::array<int64_t, 16>, Plan> plans_;
};

std::string InitSms(int device) {
  if (g_num_sms == 0) {
    TRY_CUDA(cudaDeviceGetAttribute(&g_num_sms, cudaDevAttrMultiProcessorCount, device));
  }
  return "";
}

}  // namespace

int CudaDeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

// ---------------------------------------------------------------------------------------------
// The trainer.

namespace {

struct Tensor {
  int64_t off = 0;  // elements into the parameter buffer
  int64_t n = 0;
};

struct Layer {
  Tensor ln1w, ln1b, qkvw, qkvb, projw, projb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
};

struct ParamLayout {
  Tensor wte, wpe, lnfw, lnfb;
  std::vector<Layer> layers;
  int64_t total = 0;
  int64_t decay_end = 0;  // [0, decay_end): weight matrices and embeddings
};

ParamLayout Layout(const GptConfig& c, int vp) {
  ParamLayout p;
  int64_t off = 0;
  auto take = [&](int64_t n) {
    Tensor t{off, n};
    off += n;
    return t;
  };
  const int64_t C = c.hidden, F = c.ffn;
  p.layers.resize(c.layers);
  p.wte = take(static_cast<int64_t>(vp) * C);
  p.wpe = take(static_cast<int64_t>(c.max_pos) * C);
  for (auto& l : p.layers) {
    l.qkvw = take(3 * C * C);
    l.projw = take(C * C);
    l.fcw = take(F * C);
    l.fcprojw = take(C * F);
  }
  p.decay_end = off;
  p.lnfw = take(C);
  p.lnfb = take(C);
  for (auto& l : p.layers) {
    l.ln1w = take(C);
    l.ln1b = take(C);
    l.qkvb = take(3 * C);
    l.projb = take(C);
    l.ln2w = take(C);
    l.ln2b = take(C);
    l.fcb = take(F);
    l.fcprojb = take(C);
  }
  p.total = off;
  return p;
}

}  // namespace

struct GptTrainer::Impl {
  virtual ~Impl() = default;
  virtual std::string Step(const int32_t* in, const int32_t* tg, const AdamWParams& o,
                           float* loss) = 0;
  virtual std::string Sync() = 0;
  virtual std::string Phases(double* f, double* b, double* o) = 0;
  virtual std::vector<GptTrainer::ParamInfo> Params() const = 0;
  virtual std::string Evaluate(const int32_t* in, const int32_t* tg, float* loss,
                               std::vector<float>* grad) = 0;
  virtual std::string Master(std::vector<float>* get, const std::vector<float>* set) = 0;
  std::string name;
  int64_t nparams = 0;
  int64_t bytes = 0;
};

namespace {

template <class T>
class Trainer : public GptTrainer::Impl {
 public:
  ~Trainer() override {
    for (void* p : allocs_) cudaFree(p);
    for (cudaEvent_t e : ev_)
      if (e) cudaEventDestroy(e);
    if (stream_) cudaStreamDestroy(stream_);
  }

  std::string Init(const GptConfig& c, int device) {
    cfg_ = c;
    TRY_CUDA(cudaSetDevice(device));
    TRY(InitSms(device));
    cudaDeviceProp prop;
    TRY_CUDA(cudaGetDeviceProperties(&prop, device));
    name = prop.name;
    TRY_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    for (cudaEvent_t& e : ev_) TRY_CUDA(cudaEventCreate(&e));
    TRY(gemm_.Init());
    B_ = c.batch;
    T_ = c.seq;
    C_ = c.hidden;
    NH_ = c.heads;
    HD_ = C_ / NH_;
    L_ = c.layers;
    V_ = c.vocab;
    VP_ = (V_ + 63) / 64 * 64;
    F_ = c.ffn;
    BT_ = static_cast<int64_t>(B_) * T_;
    p_ = Layout(c, VP_);
    nparams = p_.total - static_cast<int64_t>(VP_ - V_) * C_;

    TRY(Alloc(&param_, p_.total));
    TRY(Alloc(&master_, p_.total));
    TRY(Alloc(&grad_, p_.total));
    TRY(Alloc(&m_, p_.total));
    TRY(Alloc(&v_, p_.total));
    TRY_CUDA(cudaMemsetAsync(m_, 0, p_.total * sizeof(float), stream_));
    TRY_CUDA(cudaMemsetAsync(v_, 0, p_.total * sizeof(float), stream_));
    // Init the fp32 master weights, then copy them into the working parameters.
    uint64_t seed = c.seed;
    auto init = [&](const Tensor& t, float std, float fill) -> std::string {
      InitK<<<Blocks(t.n, kThreads), kThreads, 0, stream_>>>(master_ + t.off, t.n, std, fill,
                                                              seed++);
      TRY_LAUNCH("init");
      return "";
    };
    const float proj_std = 0.02f / std::sqrt(2.f * L_);
    TRY(init(p_.wte, 0.02f, 0));
    // Padding rows of wte stay 0 (never looked up; their gradient is 0).
    TRY_CUDA(cudaMemsetAsync(master_ + p_.wte.off + static_cast<int64_t>(V_) * C_, 0,
                             static_cast<size_t>(VP_ - V_) * C_ * sizeof(float), stream_));
    TRY(init(p_.wpe, 0.02f, 0));
    TRY(init(p_.lnfw, 0, 1.f));
    TRY(init(p_.lnfb, 0, 0.f));
    for (auto& l : p_.layers) {
      TRY(init(l.qkvw, 0.02f, 0));
      TRY(init(l.projw, proj_std, 0));
      TRY(init(l.fcw, 0.02f, 0));
      TRY(init(l.fcprojw, proj_std, 0));
      TRY(init(l.ln1w, 0, 1.f));
      TRY(init(l.ln2w, 0, 1.f));
      for (const Tensor* t : {&l.ln1b, &l.ln2b, &l.qkvb, &l.projb, &l.fcb, &l.fcprojb})
        TRY(init(*t, 0, 0.f));
    }
    CastK<T><<<Blocks(p_.total, kThreads), kThreads, 0, stream_>>>(param_, master_, p_.total);
    TRY_LAUNCH("cast");

    // Activations saved for the backward pass.
    const int64_t btc = BT_ * C_, att = static_cast<int64_t>(B_) * NH_ * T_ * T_;
    TRY(Alloc(&x_, (L_ + 1) * btc));
    TRY(Alloc(&xmid_, L_ * btc));
    TRY(Alloc(&ln1_, L_ * btc));
    TRY(Alloc(&ln2_, L_ * btc));
    TRY(Alloc(&q_, L_ * btc));
    TRY(Alloc(&k_, L_ * btc));
    TRY(Alloc(&vv_, L_ * btc));
    TRY(Alloc(&p_att_, L_ * att));
    TRY(Alloc(&atty_, L_ * btc));
    TRY(Alloc(&fch_, L_ * BT_ * F_));
    TRY(Alloc(&fcg_, L_ * BT_ * F_));
    TRY(Alloc(&stats_, (4 * L_ + 2) * BT_));
    TRY(Alloc(&lnf_, btc));
    // Scratch.
    TRY(Alloc(&s32_, att));
    TRY(Alloc(&ds_, att));
    TRY(Alloc(&qkv_, 3 * btc));
    TRY(Alloc(&yh_, btc));
    TRY(Alloc(&tmp_, btc));
    TRY(Alloc(&dres_, btc));
    TRY(Alloc(&df_, BT_ * F_));
    TRY(Alloc(&dq_, btc));
    TRY(Alloc(&dk_, btc));
    TRY(Alloc(&dv_, btc));
    TRY(Alloc(&logits_, BT_ * VP_));
    TRY(Alloc(&losses_, BT_));
    TRY(Alloc(&tok_, BT_));
    TRY(Alloc(&tgt_, BT_));
    TRY_CUDA(cudaStreamSynchronize(stream_));
    bytes = bytes_;
    return "";
  }

  // Checks and uploads one batch; |valid| = targets kept.
  std::string Upload(const int32_t* in, const int32_t* tg, int64_t* valid) {
    *valid = 0;
    for (int64_t i = 0; i < BT_; ++i) {
      if (in[i] < 0 || in[i] >= V_) return "input token out of range [0, vocab)";
      if (tg[i] >= V_) return "target token out of range";
      *valid += tg[i] >= 0;
    }
    if (*valid == 0) return "no target is kept (all < 0)";
    TRY_CUDA(cudaMemcpyAsync(tok_, in, BT_ * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
    TRY_CUDA(cudaMemcpyAsync(tgt_, tg, BT_ * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
    return "";
  }
  std::string ReadLoss(int64_t valid, float* loss) {
    host_losses_.resize(BT_);
    TRY_CUDA(cudaMemcpyAsync(host_losses_.data(), losses_, BT_ * sizeof(float),
                             cudaMemcpyDeviceToHost, stream_));
    TRY_CUDA(cudaStreamSynchronize(stream_));
    double s = 0;
    for (float x : host_losses_) s += x;
    *loss = static_cast<float>(s / static_cast<double>(valid));
    return "";
  }

  std::string Evaluate(const int32_t* in, const int32_t* tg, float* loss,
                       std::vector<float>* grad) override {
    int64_t valid = 0;
    TRY(Upload(in, tg, &valid));
    TRY(Forward(1.f / static_cast<float>(valid)));
    if (grad) {
      TRY(Backward());
      grad->resize(p_.total);
      TRY_CUDA(cudaMemcpyAsync(grad->data(), grad_, p_.total * sizeof(float),
                               cudaMemcpyDeviceToHost, stream_));
    }
    return ReadLoss(valid, loss);
  }

  std::string Master(std::vector<float>* get, const std::vector<float>* set) override {
    if (get) {
      get->resize(p_.total);
      TRY_CUDA(cudaMemcpyAsync(get->data(), master_, p_.total * sizeof(float),
                               cudaMemcpyDeviceToHost, stream_));
    }
    if (set) {
      if (static_cast<int64_t>(set->size()) != p_.total) return "master weights: wrong size";
      TRY_CUDA(cudaMemcpyAsync(master_, set->data(), p_.total * sizeof(float),
                               cudaMemcpyHostToDevice, stream_));
      CastK<T><<<Blocks(p_.total, kThreads), kThreads, 0, stream_>>>(param_, master_, p_.total);
      TRY_LAUNCH("cast");
    }
    TRY_CUDA(cudaStreamSynchronize(stream_));
    return "";
  }

  std::vector<GptTrainer::ParamInfo> Params() const override {
    std::vector<GptTrainer::ParamInfo> r;
    auto add = [&](const std::string& n, const Tensor& t, int64_t size) {
      r.push_back({n, t.off, size});
    };
    add("wte", p_.wte, static_cast<int64_t>(V_) * C_);
    add("wpe", p_.wpe, p_.wpe.n);
    add("lnf_w", p_.lnfw, p_.lnfw.n);
    add("lnf_b", p_.lnfb, p_.lnfb.n);
    for (int l = 0; l < L_; ++l) {
      const Layer& w = p_.layers[l];
      const std::string h = "h" + std::to_string(l) + ".";
      add(h + "ln1_w", w.ln1w, w.ln1w.n);
      add(h + "ln1_b", w.ln1b, w.ln1b.n);
      add(h + "qkv_w", w.qkvw, w.qkvw.n);
      add(h + "qkv_b", w.qkvb, w.qkvb.n);
      add(h + "proj_w", w.projw, w.projw.n);
      add(h + "proj_b", w.projb, w.projb.n);
      add(h + "ln2_w", w.ln2w, w.ln2w.n);
      add(h + "ln2_b", w.ln2b, w.ln2b.n);
      add(h + "fc_w", w.fcw, w.fcw.n);
      add(h + "fc_b", w.fcb, w.fcb.n);
      add(h + "fcproj_w", w.fcprojw, w.fcprojw.n);
      add(h + "fcproj_b", w.fcprojb, w.fcprojb.n);
    }
    return r;
  }

  std::string Step(const int32_t* in, const int32_t* tg, const AdamWParams& o,
                   float* loss) override {
    int64_t valid = 0;
    TRY(Upload(in, tg, &valid));
    TRY_CUDA(cudaEventRecord(ev_[0], stream_));
    TRY(Forward(1.f / static_cast<float>(valid)));
    TRY_CUDA(cudaEventRecord(ev_[1], stream_));
    TRY(Backward());
    TRY_CUDA(cudaEventRecord(ev_[2], stream_));
    ++step_;
    const float bc1 = 1.f - std::pow(o.beta1, static_cast<float>(step_));
    const float bc2 = 1.f - std::pow(o.beta2, static_cast<float>(step_));
    AdamWK<T><<<Blocks(p_.decay_end, kThreads), kThreads, 0, stream_>>>(
        param_, master_, grad_, m_, v_, p_.decay_end, o.lr, o.beta1, o.beta2, o.eps,
        o.weight_decay, bc1, bc2);
    TRY_LAUNCH("adamw");
    const int64_t rest = p_.total - p_.decay_end;
    const int64_t d = p_.decay_end;
    AdamWK<T><<<Blocks(rest, kThreads), kThreads, 0, stream_>>>(
        param_ + d, master_ + d, grad_ + d, m_ + d, v_ + d, rest, o.lr, o.beta1, o.beta2, o.eps,
        0.f, bc1, bc2);
    TRY_LAUNCH("adamw");
    TRY_CUDA(cudaEventRecord(ev_[3], stream_));
    if (loss) TRY(ReadLoss(valid, loss));
    return "";
  }

  std::string Sync() override {
    TRY_CUDA(cudaStreamSynchronize(stream_));
    return "";
  }

  std::string Phases(double* f, double* b, double* o) override {
    if (step_ == 0) return "no step has run";
    TRY_CUDA(cudaEventSynchronize(ev_[3]));
    float ms[3];
    for (int i = 0; i < 3; ++i) TRY_CUDA(cudaEventElapsedTime(&ms[i], ev_[i], ev_[i + 1]));
    *f = ms[0] * 1e-3;
    *b = ms[1] * 1e-3;
    *o = ms[2] * 1e-3;
    return "";
  }

 private:
  template <class U>
  std::string Alloc(U** p, int64_t n) {
    void* q = nullptr;
    TRY_CUDA(cudaMalloc(&q, static_cast<size_t>(n) * sizeof(U)));
    allocs_.push_back(q);
    bytes_ += n * static_cast<int64_t>(sizeof(U));
    *p = static_cast<U*>(q);
    return "";
  }
  T* P(const Tensor& t) { return param_ + t.off; }
  float* G(const Tensor& t) { return grad_ + t.off; }

  // Row-major helpers. Linear: out[BT, oc] = in[BT, ic] W[oc, ic]^T + b.
  std::string Linear(T* out, const T* in, const Tensor& w, const Tensor* b, int64_t rows, int ic,
                     int oc) {
    return gemm_.Run(false, true, static_cast<int>(rows), oc, ic, in, ic, P(w), ic, out, oc, 1.f,
                     0.f, DType<T>(), DType<T>(), b ? P(*b) : nullptr, 1, 0, 0, 0, stream_);
  }
  // dW[oc, ic] = dout^T in; dbias = colsum(dout); din[BT, ic] = dout W.
  std::string LinearBwd(T* din, const T* dout, const T* in, const Tensor& w, const Tensor* b,
                        int64_t rows, int ic, int oc) {
    TRY(gemm_.Run(true, false, oc, ic, static_cast<int>(rows), dout, oc, in, ic, G(w), ic, 1.f,
                  0.f, DType<T>(), CUDA_R_32F, nullptr, 1, 0, 0, 0, stream_));
    if (b) TRY(BiasGrad<T>(G(*b), dout, static_cast<int>(rows), oc, stream_));
    return gemm_.Run(false, false, static_cast<int>(rows), ic, oc, dout, oc, P(w), ic, din, ic,
                     1.f, 0.f, DType<T>(), DType<T>(), nullptr, 1, 0, 0, 0, stream_);
  }

  float* Mean1(int l) { return stats_ + (4 * l + 0) * BT_; }
  float* Rstd1(int l) { return stats_ + (4 * l + 1) * BT_; }
  float* Mean2(int l) { return stats_ + (4 * l + 2) * BT_; }
  float* Rstd2(int l) { return stats_ + (4 * l + 3) * BT_; }
  float* MeanF() { return stats_ + 4 * L_ * BT_; }
  float* RstdF() { return stats_ + (4 * L_ + 1) * BT_; }

  std::string Forward(float scale) {
    const int64_t btc = BT_ * C_, att = static_cast<int64_t>(B_) * NH_ * T_ * T_;
    const int bt = static_cast<int>(BT_);
    EmbedFwdK<T><<<Blocks(btc, kThreads), kThreads, 0, stream_>>>(x_, tok_, P(p_.wte), P(p_.wpe),
                                                                  bt, T_, C_);
    TRY_LAUNCH("embed");
    const float sc = 1.f / std::sqrt(static_cast<float>(HD_));
    const int64_t bh = static_cast<int64_t>(B_) * NH_;
    for (int l = 0; l < L_; ++l) {
      const Layer& w = p_.layers[l];
      T* x = x_ + l * btc;
      T* ln1 = ln1_ + l * btc;
      T *q = q_ + l * btc, *k = k_ + l * btc, *v = vv_ + l * btc;
      T* pa = p_att_ + l * att;
      T* atty = atty_ + l * btc;
      T* xmid = xmid_ + l * btc;
      T* ln2 = ln2_ + l * btc;
      T* fch = fch_ + l * BT_ * F_;
      T* fcg = fcg_ + l * BT_ * F_;
      TRY(LayerNormFwd<T>(ln1, Mean1(l), Rstd1(l), x, P(w.ln1w), P(w.ln1b), bt, C_, cfg_.eps,
                          stream_));
      TRY(Linear(qkv_, ln1, w.qkvw, &w.qkvb, BT_, C_, 3 * C_));
      PermuteK<T><<<Blocks(btc, kThreads), kThreads, 0, stream_>>>(q, k, v, qkv_, B_, T_, NH_,
                                                                   HD_);
      TRY_LAUNCH("permute");
      // S = sc Q K^T (fp32), batched over B*NH.
      TRY(gemm_.Run(false, true, T_, T_, HD_, q, HD_, k, HD_, s32_, T_, sc, 0.f, DType<T>(),
                    CUDA_R_32F, nullptr, static_cast<int>(bh), static_cast<int64_t>(T_) * HD_,
                    static_cast<int64_t>(T_) * HD_, static_cast<int64_t>(T_) * T_, stream_));
      SoftmaxFwdK<T><<<Blocks(bh * T_ * 32, kThreads), kThreads, 0, stream_>>>(
          pa, s32_, static_cast<int>(bh * T_), T_);
      TRY_LAUNCH("softmax");
      TRY(gemm_.Run(false, false, T_, HD_, T_, pa, T_, v, HD_, yh_, HD_, 1.f, 0.f, DType<T>(),
                    DType<T>(), nullptr, static_cast<int>(bh), static_cast<int64_t>(T_) * T_,
                    static_cast<int64_t>(T_) * HD_, static_cast<int64_t>(T_) * HD_, stream_));
      UnpermuteK<T><<<Blocks(btc, kThreads), kThreads, 0, stream_>>>(yh_, atty, B_, T_, NH_, HD_,
                                                                     0);
      TRY_LAUNCH("unpermute");
      TRY(Linear(tmp_, atty, w.projw, &w.projb, BT_, C_, C_));
      AddK<T><<<Blocks(btc, kThreads), kThreads, 0, stream_>>>(xmid, x, tmp_, btc);
      TRY_LAUNCH("residual");
      TRY(LayerNormFwd<T>(ln2, Mean2(l), Rstd2(l), xmid, P(w.ln2w), P(w.ln2b), bt, C_, cfg_.eps,
                          stream_));
      TRY(Linear(fch, ln2, w.fcw, &w.fcb, BT_, C_, F_));
      GeluFwdK<T><<<Blocks(BT_ * F_, kThreads), kThreads, 0, stream_>>>(fcg, fch, BT_ * F_);
      TRY_LAUNCH("gelu");
      TRY(Linear(tmp_, fcg, w.fcprojw, &w.fcprojb, BT_, F_, C_));
      AddK<T><<<Blocks(btc, kThreads), kThreads, 0, stream_>>>(x_ + (l + 1) * btc, xmid, tmp_,
                                                                btc);
      TRY_LAUNCH("residual");
    }
    TRY(LayerNormFwd<T>(lnf_, MeanF(), RstdF(), x_ + L_ * btc, P(p_.lnfw), P(p_.lnfb), bt, C_,
                        cfg_.eps, stream_));
    // Tied LM head: logits[BT, VP] = lnf wte^T.
    TRY(gemm_.Run(false, true, bt, VP_, C_, lnf_, C_, P(p_.wte), C_, logits_, VP_, 1.f, 0.f,
                  DType<T>(), DType<T>(), nullptr, 1, 0, 0, 0, stream_));
    CrossEntropyK<T><<<bt, V_ >= 1024 ? 1024 : 256, 0, stream_>>>(logits_, losses_, tgt_, V_, VP_,
                                                                   scale);
    TRY_LAUNCH("cross entropy");
    return "";
  }

  std::string Backward() {
    const int64_t btc = BT_ * C_, att = static_cast<int64_t>(B_) * NH_ * T_ * T_;
    const int bt = static_cast<int>(BT_);
    const float sc = 1.f / std::sqrt(static_cast<float>(HD_));
    const int bh = B_ * NH_;
    const int64_t sth = static_cast<int64_t>(T_) * HD_, stt = static_cast<int64_t>(T_) * T_;
    TRY_CUDA(cudaMemsetAsync(grad_, 0, p_.total * sizeof(float), stream_));
    // LM head: dwte = dlogits^T lnf (overwrites; the embedding adds to it at the end);
    // dlnf = dlogits wte.
    TRY(gemm_.Run(true, false, VP_, C_, bt, logits_, VP_, lnf_, C_, G(p_.wte), C_, 1.f, 0.f,
                  DType<T>(), CUDA_R_32F, nullptr, 1, 0, 0, 0, stream_));
    TRY(gemm_.Run(false, false, bt, C_, VP_, logits_, VP_, P(p_.wte), C_, tmp_, C_, 1.f, 0.f,
                  DType<T>(), DType<T>(), nullptr, 1, 0, 0, 0, stream_));
    TRY(LayerNormBwd<T>(dres_, G(p_.lnfw), G(p_.lnfb), tmp_, x_ + L_ * btc, P(p_.lnfw), MeanF(),
                        RstdF(), bt, C_, false, stream_));
    for (int l = L_ - 1; l >= 0; --l) {
      const Layer& w = p_.layers[l];
      T* x = x_ + l * btc;
      T* ln1 = ln1_ + l * btc;
      T *q = q_ + l * btc, *k = k_ + l * btc, *v = vv_ + l * btc;
      T* pa = p_att_ + l * att;
      T* atty = atty_ + l * btc;
      T* xmid = xmid_ + l * btc;
      T* ln2 = ln2_ + l * btc;
      T* fch = fch_ + l * BT_ * F_;
      T* fcg = fcg_ + l * BT_ * F_;
      // MLP.
      TRY(LinearBwd(df_, dres_, fcg, w.fcprojw, &w.fcprojb, BT_, F_, C_));
      GeluBwdK<T><<<Blocks(BT_ * F_, kThreads), kThreads, 0, stream_>>>(df_, fch, df_, BT_ * F_);
      TRY_LAUNCH("gelu bwd");
      TRY(LinearBwd(tmp_, df_, ln2, w.fcw, &w.fcb, BT_, C_, F_));
      TRY(LayerNormBwd<T>(dres_, G(w.ln2w), G(w.ln2b), tmp_, xmid, P(w.ln2w), Mean2(l), Rstd2(l),
                          bt, C_, true, stream_));
      // Attention.
      TRY(LinearBwd(tmp_, dres_, atty, w.projw, &w.projb, BT_, C_, C_));
      UnpermuteK<T><<<Blocks(btc, kThreads), kThreads, 0, stream_>>>(yh_, tmp_, B_, T_, NH_, HD_,
                                                                     1);
      TRY_LAUNCH("unpermute bwd");
      // dP = dY V^T (fp32), dV = P^T dY.
      TRY(gemm_.Run(false, true, T_, T_, HD_, yh_, HD_, v, HD_, s32_, T_, 1.f, 0.f, DType<T>(),
                    CUDA_R_32F, nullptr, bh, sth, sth, stt, stream_));
      TRY(gemm_.Run(true, false, T_, HD_, T_, pa, T_, yh_, HD_, dv_, HD_, 1.f, 0.f, DType<T>(),
                    DType<T>(), nullptr, bh, stt, sth, sth, stream_));
      SoftmaxBwdK<T><<<Blocks(static_cast<int64_t>(bh) * T_ * 32, kThreads), kThreads, 0,
                       stream_>>>(ds_, pa, s32_, bh * T_, T_);
      TRY_LAUNCH("softmax bwd");
      // dQ = sc dS K, dK = sc dS^T Q.
      TRY(gemm_.Run(false, false, T_, HD_, T_, ds_, T_, k, HD_, dq_, HD_, sc, 0.f, DType<T>(),
                    DType<T>(), nullptr, bh, stt, sth, sth, stream_));
      TRY(gemm_.Run(true, false, T_, HD_, T_, ds_, T_, q, HD_, dk_, HD_, sc, 0.f, DType<T>(),
                    DType<T>(), nullptr, bh, stt, sth, sth, stream_));
      PermuteBwdK<T><<<Blocks(btc, kThreads), kThreads, 0, stream_>>>(qkv_, dq_, dk_, dv_, B_, T_,
                                                                      NH_, HD_);
      TRY_LAUNCH("permute bwd");
      TRY(LinearBwd(tmp_, qkv_, ln1, w.qkvw, &w.qkvb, BT_, C_, 3 * C_));
      TRY(LayerNormBwd<T>(dres_, G(w.ln1w), G(w.ln1b), tmp_, x, P(w.ln1w), Mean1(l), Rstd1(l), bt,
                          C_, true, stream_));
    }
    EmbedBwdK<T><<<Blocks(btc, kThreads), kThreads, 0, stream_>>>(G(p_.wte), G(p_.wpe), tok_,
                                                                  dres_, bt, T_, C_);
    TRY_LAUNCH("embed bwd");
    return "";
  }

  GptConfig cfg_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ev_[4] = {nullptr, nullptr, nullptr, nullptr};
  Gemmer gemm_;
  std::vector<void*> allocs_;
  int64_t bytes_ = 0;
  int B_ = 0, T_ = 0, C_ = 0, NH_ = 0, HD_ = 0, L_ = 0, V_ = 0, VP_ = 0, F_ = 0;
  int64_t BT_ = 0;
  int64_t step_ = 0;
  ParamLayout p_;
  T* param_ = nullptr;
  float *master_ = nullptr, *grad_ = nullptr, *m_ = nullptr, *v_ = nullptr;
  T *x_ = nullptr, *xmid_ = nullptr, *ln1_ = nullptr, *ln2_ = nullptr, *q_ = nullptr,
    *k_ = nullptr, *vv_ = nullptr, *p_att_ = nullptr, *atty_ = nullptr, *fch_ = nullptr,
    *fcg_ = nullptr, *lnf_ = nullptr;
  float* stats_ = nullptr;
  float* s32_ = nullptr;
  T *ds_ = nullptr, *qkv_ = nullptr, *yh_ = nullptr, *tmp_ = nullptr, *dres_ = nullptr,
    *df_ = nullptr, *dq_ = nullptr, *dk_ = nullptr, *dv_ = nullptr, *logits_ = nullptr;
  float* losses_ = nullptr;
  int32_t *tok_ = nullptr, *tgt_ = nullptr;
  std::vector<float> host_losses_;
};

}  // namespace

GptTrainer::GptTrainer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GptTrainer::~GptTrainer() = default;

std::string GptTrainer::Create(const GptConfig& c, int device, std::unique_ptr<GptTrainer>* out) {
  if (c.batch < 1 || c.seq < 1 || c.hidden < 1 || c.layers < 1 || c.heads < 1 || c.vocab < 2 ||
      c.ffn < 1)
    return "GptConfig: every size must be positive (vocab >= 2)";
  if (c.hidden % c.heads != 0) return "GptConfig: hidden size is not divisible by the heads";
  if (c.seq > c.max_pos) return "GptConfig: seq is longer than the position table (max_pos)";
  int n = CudaDeviceCount();
  if (n == 0) return "no CUDA device is visible";
  if (device < 0 || device >= n) return "CUDA device index out of range";
  std::unique_ptr<Impl> impl;
  std::string err;
  if (c.bf16) {
    auto t = std::make_unique<Trainer<bf16>>();
    err = t->Init(c, device);
    impl = std::move(t);
  } else {
    auto t = std::make_unique<Trainer<float>>();
    err = t->Init(c, device);
    impl = std::move(t);
  }
  if (!err.empty()) return err;
  out->reset(new GptTrainer(std::move(impl)));
  return "";
}

std::string GptTrainer::Step(const int32_t* in, const int32_t* tg, const AdamWParams& o,
                             float* loss) {
  return impl_->Step(in, tg, o, loss);
}
std::string GptTrainer::Synchronize() { return impl_->Sync(); }
std::vector<GptTrainer::ParamInfo> GptTrainer::Params() const { return impl_->Params(); }
std::string GptTrainer::Evaluate(const int32_t* in, const int32_t* tg, float* loss,
                                 std::vector<float>* grad) {
  return impl_->Evaluate(in, tg, loss, grad);
}
std::string GptTrainer::GetMaster(std::vector<float>* m) { return impl_->Master(m, nullptr); }
std::string GptTrainer::SetMaster(const std::vector<float>& m) { return impl_->Master(nullptr, &m); }
std::string GptTrainer::LastStepPhases(double* f, double* b, double* o) {
  return impl_->Phases(f, b, o);
}
std::string GptTrainer::device_name() const { return impl_->name; }
int64_t GptTrainer::num_params() const { return impl_->nparams; }
int64_t GptTrainer::device_bytes() const { return impl_->bytes; }

// ---------------------------------------------------------------------------------------------
// Host-vector checks for the tests.

namespace check {
namespace {

// Device buffers freed at scope exit.
struct Scope {
  std::vector<void*> ps;
  ~Scope() {
    for (void* p : ps) cudaFree(p);
  }
  template <class U>
  std::string Alloc(U** p, size_t n) {
    void* q = nullptr;
    TRY_CUDA(cudaMalloc(&q, std::max<size_t>(n, 1) * sizeof(U)));
    ps.push_back(q);
    *p = static_cast<U*>(q);
    return "";
  }
  // Uploads floats as U.
  template <class U>
  std::string Up(U** p, const std::vector<float>& h) {
    TRY(Alloc(p, h.size()));
    float* tmp = nullptr;
    TRY(Alloc(&tmp, h.size()));
    TRY_CUDA(cudaMemcpy(tmp, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
    CastK<U><<<Blocks(h.size(), kThreads), kThreads>>>(*p, tmp, static_cast<int64_t>(h.size()));
    TRY_LAUNCH("cast");
    return "";
  }
  std::string UpI(int32_t** p, const std::vector<int32_t>& h) {
    TRY(Alloc(p, h.size()));
    TRY_CUDA(cudaMemcpy(*p, h.data(), h.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
    return "";
  }
  // Allocates n elements filled with NaN (all bits set: NaN in fp32 and bf16).
  template <class U>
  std::string Poison(U** p, size_t n) {
    TRY(Alloc(p, n));
    TRY_CUDA(cudaMemset(*p, 0xFF, std::max<size_t>(n, 1) * sizeof(U)));
    return "";
  }
  template <class U>
  std::string Down(const U* p, size_t n, std::vector<float>* h) {
    float* tmp = nullptr;
    TRY(Alloc(&tmp, n));
    ToFloatK<U><<<Blocks(n, kThreads), kThreads>>>(tmp, p, static_cast<int64_t>(n));
    TRY_LAUNCH("to float");
    h->resize(n);
    TRY_CUDA(cudaMemcpy(h->data(), tmp, n * sizeof(float), cudaMemcpyDeviceToHost));
    return "";
  }
};

std::string Ready() {
  if (CudaDeviceCount() == 0) return "no CUDA device";
  TRY(InitSms(0));
  return "";
}

template <class T>
std::string LnFwdT(int n, int c, const std::vector<float>& x, const std::vector<float>& w,
                   const std::vector<float>& b, float eps, std::vector<float>* out,
                   std::vector<float>* mean, std::vector<float>* rstd) {
  Scope s;
  T *dx = nullptr, *dw = nullptr, *db = nullptr, *o = nullptr;
  float *m = nullptr, *r = nullptr;
  TRY(s.Up(&dx, x));
  TRY(s.Up(&dw, w));
  TRY(s.Up(&db, b));
  TRY(s.Poison(&o, x.size()));
  TRY(s.Poison(&m, n));
  TRY(s.Poison(&r, n));
  TRY(::dsplan::train::LayerNormFwd<T>(o, m, r, dx, dw, db, n, c, eps, 0));
  TRY_CUDA(cudaDeviceSynchronize());
  TRY(s.Down(o, x.size(), out));
  TRY(s.Down(m, n, mean));
  TRY(s.Down(r, n, rstd));
  return "";
}

template <class T>
std::string LnBwdT(int n, int c, const std::vector<float>& dout, const std::vector<float>& x,
                   const std::vector<float>& w, const std::vector<float>& mean,
                   const std::vector<float>& rstd, const std::vector<float>& dx_in,
                   bool accumulate, std::vector<float>* dx, std::vector<float>* dw,
                   std::vector<float>* db) {
  Scope s;
  T *ddo = nullptr, *dxx = nullptr, *dww = nullptr, *ddx = nullptr;
  float *dm = nullptr, *dr = nullptr, *gw = nullptr, *gb = nullptr;
  TRY(s.Up(&ddo, dout));
  TRY(s.Up(&dxx, x));
  TRY(s.Up(&dww, w));
  TRY(s.Up(&dm, mean));
  TRY(s.Up(&dr, rstd));
  if (accumulate) {
    TRY(s.Up(&ddx, dx_in));
  } else {
    TRY(s.Poison(&ddx, x.size()));
  }
  TRY(s.Alloc(&gw, c));
  TRY(s.Alloc(&gb, c));
  TRY_CUDA(cudaMemset(gw, 0, c * sizeof(float)));
  TRY_CUDA(cudaMemset(gb, 0, c * sizeof(float)));
  TRY(::dsplan::train::LayerNormBwd<T>(ddx, gw, gb, ddo, dxx, dww, dm, dr, n, c, accumulate, 0));
  TRY_CUDA(cudaDeviceSynchronize());
  TRY(s.Down(ddx, x.size(), dx));
  TRY(s.Down(gw, c, dw));
  TRY(s.Down(gb, c, db));
  return "";
}

template <class T>
std::string GeluT(bool bwd, const std::vector<float>& x, const std::vector<float>* dy,
                  std::vector<float>* out) {
  Scope s;
  T *dx = nullptr, *o = nullptr, *ddy = nullptr;
  const int64_t n = x.size();
  TRY(s.Up(&dx, x));
  TRY(s.Poison(&o, n));
  if (bwd) {
    TRY(s.Up(&ddy, *dy));
    GeluBwdK<T><<<Blocks(n, kThreads), kThreads>>>(o, dx, ddy, n);
  } else {
    GeluFwdK<T><<<Blocks(n, kThreads), kThreads>>>(o, dx, n);
  }
  TRY_LAUNCH("gelu");
  TRY_CUDA(cudaDeviceSynchronize());
  return s.Down(o, n, out);
}

template <class T>
std::string SoftmaxT(bool bwd, int rows, int t, const std::vector<float>& a,
                     const std::vector<float>* dp, std::vector<float>* out) {
  Scope s;
  const int64_t n = static_cast<int64_t>(rows) * t;
  T* o = nullptr;
  TRY(s.Poison(&o, n));
  if (!bwd) {
    float* ds;
    TRY(s.Up(&ds, a));
    SoftmaxFwdK<T><<<Blocks(n * 32 / t, kThreads), kThreads>>>(o, ds, rows, t);
  } else {
    T* dpp;
    float* ddp;
    TRY(s.Up(&dpp, a));
    TRY(s.Up(&ddp, *dp));
    SoftmaxBwdK<T><<<Blocks(static_cast<int64_t>(rows) * 32, kThreads), kThreads>>>(o, dpp, ddp,
                                                                                    rows, t);
  }
  TRY_LAUNCH("softmax");
  TRY_CUDA(cudaDeviceSynchronize());
  return s.Down(o, n, out);
}

template <class T>
std::string EmbedT(bool bwd, int b, int t, int c, int vocab, const std::vector<int32_t>& tokens,
                   const std::vector<float>& a, const std::vector<float>* wpe,
                   std::vector<float>* out, std::vector<float>* out2) {
  Scope s;
  int32_t* dt = nullptr;
  TRY(s.UpI(&dt, tokens));
  const int64_t btc = static_cast<int64_t>(b) * t * c;
  if (!bwd) {
    T *wte = nullptr, *pe = nullptr, *o = nullptr;
    TRY(s.Up(&wte, a));
    TRY(s.Up(&pe, *wpe));
    TRY(s.Poison(&o, btc));
    EmbedFwdK<T><<<Blocks(btc, kThreads), kThreads>>>(o, dt, wte, pe, b * t, t, c);
    TRY_LAUNCH("embed");
    TRY_CUDA(cudaDeviceSynchronize());
    return s.Down(o, btc, out);
  }
  T* dout = nullptr;
  float *gte = nullptr, *gpe = nullptr;
  TRY(s.Up(&dout, a));
  TRY(s.Alloc(&gte, static_cast<size_t>(vocab) * c));
  TRY(s.Alloc(&gpe, static_cast<size_t>(t) * c));
  TRY_CUDA(cudaMemset(gte, 0, static_cast<size_t>(vocab) * c * sizeof(float)));
  TRY_CUDA(cudaMemset(gpe, 0, static_cast<size_t>(t) * c * sizeof(float)));
  EmbedBwdK<T><<<Blocks(btc, kThreads), kThreads>>>(gte, gpe, dt, dout, b * t, t, c);
  TRY_LAUNCH("embed bwd");
  TRY_CUDA(cudaDeviceSynchronize());
  TRY(s.Down(gte, static_cast<size_t>(vocab) * c, out));
  return s.Down(gpe, static_cast<size_t>(t) * c, out2);
}

template <class T>
std::string AddT(const std::vector<float>& a, const std::vector<float>& b,
                 std::vector<float>* out) {
  Scope s;
  T *da = nullptr, *db = nullptr, *o = nullptr;
  TRY(s.Up(&da, a));
  TRY(s.Up(&db, b));
  TRY(s.Poison(&o, a.size()));
  AddK<T><<<Blocks(a.size(), kThreads), kThreads>>>(o, da, db, static_cast<int64_t>(a.size()));
  TRY_LAUNCH("add");
  TRY_CUDA(cudaDeviceSynchronize());
  return s.Down(o, a.size(), out);
}

template <class T>
std::string BiasGradT(int n, int oc, const std::vector<float>& dout, std::vector<float>* db) {
  Scope s;
  T* d = nullptr;
  float* g = nullptr;
  TRY(s.Up(&d, dout));
  TRY(s.Alloc(&g, oc));
  TRY_CUDA(cudaMemset(g, 0, oc * sizeof(float)));
  TRY(::dsplan::train::BiasGrad<T>(g, d, n, oc, 0));
  TRY_CUDA(cudaDeviceSynchronize());
  return s.Down(g, oc, db);
}

template <class T>
std::string CeT(int n, int v, int vp, const std::vector<float>& logits,
                const std::vector<int32_t>& targets, std::vector<float>* losses,
                std::vector<float>* dlogits) {
  Scope s;
  T* lg = nullptr;
  int32_t* tg = nullptr;
  float* ls = nullptr;
  int valid = 0;
  for (int32_t x : targets) valid += x >= 0;
  TRY(s.Up(&lg, logits));
  TRY(s.UpI(&tg, targets));
  TRY(s.Poison(&ls, n));
  CrossEntropyK<T><<<n, v >= 1024 ? 1024 : 256>>>(lg, ls, tg, v, vp,
                                                   1.f / static_cast<float>(std::max(valid, 1)));
  TRY_LAUNCH("cross entropy");
  TRY_CUDA(cudaDeviceSynchronize());
  TRY(s.Down(ls, n, losses));
  return s.Down(lg, static_cast<size_t>(n) * vp, dlogits);
}

template <class T>
std::string AdamWT(const AdamWParams& p, int t, std::vector<float>* master,
                   const std::vector<float>& grad, std::vector<float>* m, std::vector<float>* v,
                   std::vector<float>* param) {
  Scope s;
  const int64_t n = master->size();
  float *dm = nullptr, *dg = nullptr, *d1 = nullptr, *d2 = nullptr;
  T* dp = nullptr;
  TRY(s.Up(&dm, *master));
  TRY(s.Up(&dg, grad));
  TRY(s.Up(&d1, *m));
  TRY(s.Up(&d2, *v));
  TRY(s.Poison(&dp, n));
  const float bc1 = 1.f - std::pow(p.beta1, static_cast<float>(t));
  const float bc2 = 1.f - std::pow(p.beta2, static_cast<float>(t));
  AdamWK<T><<<Blocks(n, kThreads), kThreads>>>(dp, dm, dg, d1, d2, n, p.lr, p.beta1, p.beta2,
                                               p.eps, p.weight_decay, bc1, bc2);
  TRY_LAUNCH("adamw");
  TRY_CUDA(cudaDeviceSynchronize());
  TRY(s.Down(dm, n, master));
  TRY(s.Down(d1, n, m));
  TRY(s.Down(d2, n, v));
  return s.Down(dp, n, param);
}

template <class T>
std::string GemmT(bool ta, bool tb, int m, int n, int k, int batch, float alpha,
                  const std::vector<float>& a, const std::vector<float>& b,
                  const std::vector<float>* bias, bool d_fp32, std::vector<float>* d) {
  Scope s;
  Gemmer g;
  TRY(g.Init());
  T *da, *db, *dbias = nullptr;
  TRY(s.Up(&da, a));
  TRY(s.Up(&db, b));
  if (bias) TRY(s.Up(&dbias, *bias));
  const int64_t nd = static_cast<int64_t>(batch) * m * n;
  void* dd = nullptr;
  cudaDataType_t dt = CUDA_R_32F;
  if (d_fp32) {
    float* x = nullptr;
    TRY(s.Poison(&x, nd));
    dd = x;
    dt = CUDA_R_32F;
  } else {
    T* x = nullptr;
    TRY(s.Poison(&x, nd));
    dd = x;
    dt = DType<T>();
  }
  const int64_t lda = ta ? m : k, ldb = tb ? k : n;
  TRY(g.Run(ta, tb, m, n, k, da, lda, db, ldb, dd, n, alpha, 0.f, DType<T>(), dt, dbias, batch,
            static_cast<int64_t>(m) * k, static_cast<int64_t>(k) * n,
            static_cast<int64_t>(m) * n, 0));
  TRY_CUDA(cudaDeviceSynchronize());
  if (d_fp32) return s.Down(static_cast<float*>(dd), nd, d);
  return s.Down(static_cast<T*>(dd), nd, d);
}

// The trainer's attention sequence, forward then backward.
template <class T>
std::string AttentionT(int b, int t, int c, int nh, const std::vector<float>& qkv,
                       const std::vector<float>& dy, std::vector<float>* y,
                       std::vector<float>* dqkv) {
  Scope s;
  Gemmer g;
  TRY(g.Init());
  const int hd = c / nh, bh = b * nh;
  const int64_t btc = static_cast<int64_t>(b) * t * c, att = static_cast<int64_t>(bh) * t * t;
  const int64_t sth = static_cast<int64_t>(t) * hd, stt = static_cast<int64_t>(t) * t;
  const float sc = 1.f / std::sqrt(static_cast<float>(hd));
  T *dqkv_in = nullptr, *q = nullptr, *k = nullptr, *v = nullptr, *p = nullptr, *yh = nullptr, *out = nullptr, *ddy = nullptr, *ds = nullptr, *dq = nullptr, *dk = nullptr, *dv = nullptr, *dout = nullptr;
  float* s32;
  TRY(s.Up(&dqkv_in, qkv));
  TRY(s.Up(&ddy, dy));
  for (T** x : {&q, &k, &v, &yh, &dq, &dk, &dv}) TRY(s.Poison(x, btc));
  TRY(s.Poison(&p, att));
  TRY(s.Poison(&ds, att));
  TRY(s.Poison(&s32, att));
  TRY(s.Poison(&out, btc));
  TRY(s.Poison(&dout, 3 * btc));
  const cudaDataType_t ty = DType<T>();
  PermuteK<T><<<Blocks(btc, kThreads), kThreads>>>(q, k, v, dqkv_in, b, t, nh, hd);
  TRY_LAUNCH("permute");
  TRY(g.Run(false, true, t, t, hd, q, hd, k, hd, s32, t, sc, 0.f, ty, CUDA_R_32F, nullptr, bh,
            sth, sth, stt, 0));
  SoftmaxFwdK<T><<<Blocks(static_cast<int64_t>(bh) * t * 32, kThreads), kThreads>>>(p, s32, bh * t,
                                                                                    t);
  TRY_LAUNCH("softmax");
  TRY(g.Run(false, false, t, hd, t, p, t, v, hd, yh, hd, 1.f, 0.f, ty, ty, nullptr, bh, stt, sth,
            sth, 0));
  UnpermuteK<T><<<Blocks(btc, kThreads), kThreads>>>(yh, out, b, t, nh, hd, 0);
  TRY_LAUNCH("unpermute");
  TRY_CUDA(cudaDeviceSynchronize());
  TRY(s.Down(out, btc, y));
  UnpermuteK<T><<<Blocks(btc, kThreads), kThreads>>>(yh, ddy, b, t, nh, hd, 1);
  TRY_LAUNCH("unpermute bwd");
  TRY(g.Run(false, true, t, t, hd, yh, hd, v, hd, s32, t, 1.f, 0.f, ty, CUDA_R_32F, nullptr, bh,
            sth, sth, stt, 0));
  TRY(g.Run(true, false, t, hd, t, p, t, yh, hd, dv, hd, 1.f, 0.f, ty, ty, nullptr, bh, stt, sth,
            sth, 0));
  SoftmaxBwdK<T><<<Blocks(static_cast<int64_t>(bh) * t * 32, kThreads), kThreads>>>(ds, p, s32,
                                                                                    bh * t, t);
  TRY_LAUNCH("softmax bwd");
  TRY(g.Run(false, false, t, hd, t, ds, t, k, hd, dq, hd, sc, 0.f, ty, ty, nullptr, bh, stt, sth,
            sth, 0));
  TRY(g.Run(true, false, t, hd, t, ds, t, q, hd, dk, hd, sc, 0.f, ty, ty, nullptr, bh, stt, sth,
            sth, 0));
  PermuteBwdK<T><<<Blocks(btc, kThreads), kThreads>>>(dout, dq, dk, dv, b, t, nh, hd);
  TRY_LAUNCH("permute bwd");
  TRY_CUDA(cudaDeviceSynchronize());
  return s.Down(dout, 3 * btc, dqkv);
}

}  // namespace

std::string LayerNormFwd(bool bf, int n, int c, const std::vector<float>& x,
                         const std::vector<float>& w, const std::vector<float>& b, float eps,
                         std::vector<float>* out, std::vector<float>* mean,
                         std::vector<float>* rstd) {
  TRY(Ready());
  if (bf) return LnFwdT<bf16>(n, c, x, w, b, eps, out, mean, rstd);
  return LnFwdT<float>(n, c, x, w, b, eps, out, mean, rstd);
}
std::string LayerNormBwd(bool bf, int n, int c, const std::vector<float>& dout,
                         const std::vector<float>& x, const std::vector<float>& w,
                         const std::vector<float>& mean, const std::vector<float>& rstd,
                         const std::vector<float>& dx_in, bool accumulate, std::vector<float>* dx,
                         std::vector<float>* dw, std::vector<float>* db) {
  TRY(Ready());
  if (bf) return LnBwdT<bf16>(n, c, dout, x, w, mean, rstd, dx_in, accumulate, dx, dw, db);
  return LnBwdT<float>(n, c, dout, x, w, mean, rstd, dx_in, accumulate, dx, dw, db);
}
std::string GeluFwd(bool bf, const std::vector<float>& x, std::vector<float>* out) {
  TRY(Ready());
  return bf ? GeluT<bf16>(false, x, nullptr, out) : GeluT<float>(false, x, nullptr, out);
}
std::string GeluBwd(bool bf, const std::vector<float>& x, const std::vector<float>& dy,
                    std::vector<float>* dx) {
  TRY(Ready());
  return bf ? GeluT<bf16>(true, x, &dy, dx) : GeluT<float>(true, x, &dy, dx);
}
std::string CausalSoftmaxFwd(bool bf, int rows, int t, const std::vector<float>& s,
                             std::vector<float>* p) {
  TRY(Ready());
  return bf ? SoftmaxT<bf16>(false, rows, t, s, nullptr, p)
            : SoftmaxT<float>(false, rows, t, s, nullptr, p);
}
std::string CausalSoftmaxBwd(bool bf, int rows, int t, const std::vector<float>& p,
                             const std::vector<float>& dp, std::vector<float>* ds) {
  TRY(Ready());
  return bf ? SoftmaxT<bf16>(true, rows, t, p, &dp, ds) : SoftmaxT<float>(true, rows, t, p, &dp, ds);
}
std::string EmbeddingFwd(bool bf, int b, int t, int c, const std::vector<int32_t>& tokens,
                         const std::vector<float>& wte, const std::vector<float>& wpe,
                         std::vector<float>* out) {
  TRY(Ready());
  return bf ? EmbedT<bf16>(false, b, t, c, 0, tokens, wte, &wpe, out, nullptr)
            : EmbedT<float>(false, b, t, c, 0, tokens, wte, &wpe, out, nullptr);
}
std::string EmbeddingBwd(bool bf, int b, int t, int c, int vocab,
                         const std::vector<int32_t>& tokens, const std::vector<float>& dout,
                         std::vector<float>* dwte, std::vector<float>* dwpe) {
  TRY(Ready());
  return bf ? EmbedT<bf16>(true, b, t, c, vocab, tokens, dout, nullptr, dwte, dwpe)
            : EmbedT<float>(true, b, t, c, vocab, tokens, dout, nullptr, dwte, dwpe);
}
std::string ResidualAdd(bool bf, const std::vector<float>& a, const std::vector<float>& b,
                        std::vector<float>* out) {
  TRY(Ready());
  return bf ? AddT<bf16>(a, b, out) : AddT<float>(a, b, out);
}
std::string BiasGrad(bool bf, int n, int oc, const std::vector<float>& dout,
                     std::vector<float>* db) {
  TRY(Ready());
  return bf ? BiasGradT<bf16>(n, oc, dout, db) : BiasGradT<float>(n, oc, dout, db);
}
std::string CrossEntropy(bool bf, int n, int v, int vp, const std::vector<float>& logits,
                         const std::vector<int32_t>& targets, std::vector<float>* losses,
                         std::vector<float>* dlogits) {
  TRY(Ready());
  return bf ? CeT<bf16>(n, v, vp, logits, targets, losses, dlogits)
            : CeT<float>(n, v, vp, logits, targets, losses, dlogits);
}
std::string AdamW(bool bf, const AdamWParams& p, int t, std::vector<float>* master,
                  const std::vector<float>& grad, std::vector<float>* m, std::vector<float>* v,
                  std::vector<float>* param) {
  TRY(Ready());
  return bf ? AdamWT<bf16>(p, t, master, grad, m, v, param)
            : AdamWT<float>(p, t, master, grad, m, v, param);
}
std::string Gemm(bool bf, bool ta, bool tb, int m, int n, int k, int batch, float alpha,
                 const std::vector<float>& a, const std::vector<float>& b,
                 const std::vector<float>* bias, bool d_fp32, std::vector<float>* d) {
  TRY(Ready());
  return bf ? GemmT<bf16>(ta, tb, m, n, k, batch, alpha, a, b, bias, d_fp32, d)
            : GemmT<float>(ta, tb, m, n, k, batch, alpha, a, b, bias, d_fp32, d);
}
std::string Attention(bool bf, int b, int t, int c, int nh, const std::vector<float>& qkv,
                      const std::vector<float>& dy, std::vector<float>* y,
                      std::vector<float>* dqkv) {
  TRY(Ready());
  return bf ? AttentionT<bf16>(b, t, c, nh, qkv, dy, y, dqkv)
            : AttentionT<float>(b, t, c, nh, qkv, dy, y, dqkv);
}

}  // namespace check
}  // namespace train
}  // namespace dsplan
