// Fused attention in the style of FlashAttention-2 (Dao, 2023): written here for dsplan's runtime
// (docs/runtime.md, "Fused attention"). Tensor cores through mma.sync.m16n8k16 (bf16 or fp16
// operands, fp32 accumulation), operands staged in shared memory by cp.async and read with
// ldmatrix; rows padded by 16 bytes so that ldmatrix is free of bank conflicts.
//
// Forward, one block per (query tile of 16 x WARPS rows, slice): each warp keeps its 16 query
// rows in registers and walks the key tiles (double-buffered), S = Q K^T in registers, the online
// softmax (running max and sum, in base 2), P re-packed as the A operand of O += P V without
// leaving registers; O and the log-sum-exp are written once.
//
// Backward, one block per (key tile of 16 x WARPS keys, slice): D = rowsum(dO * O) first (its own
// kernel), then each warp keeps the accumulators of dK and dV for its 16 keys and walks the query
// tiles (double-buffered): S^T = K Q^T, P^T = exp(scale S^T - lse), dP^T = V dO^T,
// dS^T = P^T (dP^T - D), dV += P^T dO, dK += dS^T Q; dS^T goes through shared memory so that the
// block computes dQ_tile = dS K and adds it with fp32 atomics into a workspace, which a last
// kernel scales and converts. Masks are bottom-right aligned (query i sees keys j <= i + sk - sq).
#include "runtime/cuda/flash_attention_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>

namespace dsplan {
namespace cuda {
namespace flash {
namespace {

constexpr int kPad = 8;  // elements added to each shared-memory row (16 bytes)
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// ---- PTX wrappers ----

template <typename T>
struct Ops;

template <>
struct Ops<__nv_bfloat16> {
  static __device__ __forceinline__ uint32_t Pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
  static __device__ __forceinline__ float2 Unpack(uint32_t u) {
    return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&u));
  }
  // c += a b: A 16x16 row-major, B 16x8 column-major, C 16x8 fp32.
  static __device__ __forceinline__ void Mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

template <>
struct Ops<__half> {
  static __device__ __forceinline__ uint32_t Pack(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
  static __device__ __forceinline__ float2 Unpack(uint32_t u) {
    return __half22float2(*reinterpret_cast<__half2*>(&u));
  }
  static __device__ __forceinline__ void Mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i; register i of lane l
// holds row l/4, columns 2(l%4), 2(l%4)+1 of matrix i (with .trans: of its transpose).
__device__ __forceinline__ void Ldsm4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddr(p)));
}
__device__ __forceinline__ void Ldsm4T(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddr(p)));
}

// 16 bytes global -> shared, asynchronously; zeros when !valid (nothing is read then).
__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem, bool valid) {
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(SmemAddr(smem)),
               "l"(gmem), "r"(n)
               : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
__device__ __forceinline__ void CpAsyncWaitAll() {
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

__device__ __forceinline__ void AtomicAdd2(float* p, float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(p), make_float2(a, b));
#else
  atomicAdd(p, a);
  atomicAdd(p + 1, b);
#endif
}

// Rows [row0, row0 + ROWS) of a [rows, D] tensor into a shared tile with row stride D + kPad;
// rows at or past |rows| are zero-filled.
template <int ROWS, int D, int THREADS, typename T>
__device__ __forceinline__ void LoadTile(T* smem, const T* g, int row0, int rows, int tid) {
  constexpr int kChunks = D / 8;  // 16-byte chunks per row
  constexpr int kTotal = ROWS * kChunks;
  static_assert(kTotal % THREADS == 0, "tile chunks must divide among the threads");
#pragma unroll
  for (int it = 0; it < kTotal / THREADS; ++it) {
    const int i = tid + it * THREADS;
    const int r = i / kChunks;
    const int c = (i % kChunks) * 8;
    const int gr = row0 + r;
    const bool ok = gr < rows;
    CpAsync16(smem + r * (D + kPad) + c, g + static_cast<int64_t>(ok ? gr : 0) * D + c, ok);
  }
}

struct FwdParams {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;
  int64_t bh;
  int sq, sk;
  float scale;
  bool causal;
};

struct BwdParams {
  const void* q;
  const void* k;
  const void* v;
  const void* o;
  const void* dout;
  const float* lse;
  float* delta;     // [bh, sq]
  float* dq_accum;  // [bh, sq, d]
  void* dq;
  void* dk;
  void* dv;
  int64_t bh;
  int sq, sk;
  float scale;
  bool causal;
};

// ---- forward ----

template <typename T, int D, int WARPS, int BN>
constexpr int FwdSmemBytes() {
  return (16 * WARPS + 4 * BN) * (D + kPad) * static_cast<int>(sizeof(T));
}

template <typename T, int D, int WARPS, int BN>
__global__ void __launch_bounds__(WARPS * 32) FwdKernel(const FwdParams p) {
  using O = Ops<T>;
  constexpr int BM = 16 * WARPS;
  constexpr int THREADS = WARPS * 32;
  constexpr int LD = D + kPad;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* qs = reinterpret_cast<T*>(smem_raw);  // [BM][LD]
  T* ks = qs + BM * LD;                    // [2][BN][LD]
  T* vs = ks + 2 * BN * LD;                // [2][BN][LD]

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane >> 2, tq = lane & 3;
  const int m_blocks = (p.sq + BM - 1) / BM;
  // The longest causal tiles (last rows) first, across all slices.
  const int64_t bh = blockIdx.x % p.bh;
  const int m_block = m_blocks - 1 - static_cast<int>(blockIdx.x / p.bh);
  const int m0 = m_block * BM;
  const int sq = p.sq, sk = p.sk, off = sk - sq;
  const T* q = static_cast<const T*>(p.q) + bh * sq * D;
  const T* k = static_cast<const T*>(p.k) + bh * sk * D;
  const T* v = static_cast<const T*>(p.v) + bh * sk * D;
  T* o = static_cast<T*>(p.o) + bh * sq * D;
  float* lse = p.lse + bh * sq;

  const int m_last = min(m0 + BM, sq) - 1;
  const int n_end = p.causal ? min(sk, m_last + off + 1) : sk;
  const int n_blocks = n_end > 0 ? (n_end + BN - 1) / BN : 0;

  LoadTile<BM, D, THREADS>(qs, q, m0, sq, tid);
  if (n_blocks > 0) {
    LoadTile<BN, D, THREADS>(ks, k, 0, sk, tid);
    LoadTile<BN, D, THREADS>(vs, v, 0, sk, tid);
  }
  CpAsyncCommit();
  CpAsyncWaitAll();
  __syncthreads();

  uint32_t qf[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    Ldsm4(qf[kk], qs + (warp * 16 + (lane % 16)) * LD + kk * 16 + (lane / 16) * 8);
  }

  float acc[D / 8][4];
#pragma unroll
  for (int t = 0; t < D / 8; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY};  // running max of scale*log2(e)*s, rows g and g+8
  float l_run[2] = {0.f, 0.f};              // this thread's part of the row sums
  const float sl2 = p.scale * kLog2e;
  const int row_a = m0 + warp * 16 + g;

  for (int j = 0; j < n_blocks; ++j) {
    const int st = j & 1;
    if (j + 1 < n_blocks) {
      LoadTile<BN, D, THREADS>(ks + (st ^ 1) * BN * LD, k, (j + 1) * BN, sk, tid);
      LoadTile<BN, D, THREADS>(vs + (st ^ 1) * BN * LD, v, (j + 1) * BN, sk, tid);
    }
    CpAsyncCommit();
    const T* kt = ks + st * BN * LD;
    const T* vt = vs + st * BN * LD;
    const int n0 = j * BN;

    // S = Q K^T for this warp's 16 rows and BN keys.
    float s[BN / 8][4];
#pragma unroll
    for (int t = 0; t < BN / 8; ++t) s[t][0] = s[t][1] = s[t][2] = s[t][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
      for (int np = 0; np < BN / 16; ++np) {
        uint32_t b[4];
        Ldsm4(b, kt + (np * 16 + (lane % 8) + (lane / 16) * 8) * LD + kk * 16 +
                     ((lane / 8) % 2) * 8);
        O::Mma(s[2 * np], qf[kk], b[0], b[1]);
        O::Mma(s[2 * np + 1], qf[kk], b[2], b[3]);
      }
    }

    if (n0 + BN > sk || (p.causal && n0 + BN - 1 > m0 + off)) {
#pragma unroll
      for (int t = 0; t < BN / 8; ++t) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = n0 + t * 8 + 2 * tq + (e & 1);
          const int row = row_a + (e >= 2 ? 8 : 0);
          if (key >= sk || (p.causal && key > row + off)) s[t][e] = -INFINITY;
        }
      }
    }

    // Online softmax in base 2.
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int t = 0; t < BN / 8; ++t) {
      mx[0] = fmaxf(mx[0], fmaxf(s[t][0], s[t][1]));
      mx[1] = fmaxf(mx[1], fmaxf(s[t][2], s[t][3]));
    }
    float mu[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      const float m_new = fmaxf(m_run[r], mx[r] * sl2);
      mu[r] = m_new == -INFINITY ? 0.f : m_new;  // a row with no key yet: exp2 of -inf is 0
      const float alpha = exp2f(m_run[r] - mu[r]);
      m_run[r] = m_new;
      l_run[r] *= alpha;
#pragma unroll
      for (int t = 0; t < D / 8; ++t) {
        acc[t][2 * r] *= alpha;
        acc[t][2 * r + 1] *= alpha;
      }
    }
#pragma unroll
    for (int t = 0; t < BN / 8; ++t) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float pe = exp2f(fmaf(s[t][e], sl2, -mu[e >> 1]));
        l_run[e >> 1] += pe;
        s[t][e] = pe;
      }
    }

    // O += P V, P straight from the accumulators (two n8 tiles = one k16 A fragment).
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      const uint32_t pa[4] = {O::Pack(s[2 * kk][0], s[2 * kk][1]),
                              O::Pack(s[2 * kk][2], s[2 * kk][3]),
                              O::Pack(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                              O::Pack(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t b[4];
        Ldsm4T(b, vt + (kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8) * LD + dp * 16 +
                      (lane / 16) * 8);
        O::Mma(acc[2 * dp], pa, b[0], b[1]);
        O::Mma(acc[2 * dp + 1], pa, b[2], b[3]);
      }
    }
    CpAsyncWaitAll();
    __syncthreads();
  }

  // Normalize, stage this warp's rows in its own rows of qs, write 16-byte chunks. The barrier
  // orders this warp's ldmatrix reads of those rows (Q) before the writes when no key tile ran.
  __syncwarp();
  float inv[2], lsum[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = l_run[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    lsum[r] = l;
    inv[r] = l > 0.f ? 1.f / l : 0.f;
  }
  T* os = qs + warp * 16 * LD;
#pragma unroll
  for (int t = 0; t < D / 8; ++t) {
    const int c = t * 8 + 2 * tq;
    *reinterpret_cast<uint32_t*>(os + g * LD + c) = O::Pack(acc[t][0] * inv[0], acc[t][1] * inv[0]);
    *reinterpret_cast<uint32_t*>(os + (g + 8) * LD + c) =
        O::Pack(acc[t][2] * inv[1], acc[t][3] * inv[1]);
  }
  __syncwarp();
#pragma unroll
  for (int i = lane; i < 16 * (D / 8); i += 32) {
    const int r = i / (D / 8), c = (i % (D / 8)) * 8;
    const int row = m0 + warp * 16 + r;
    if (row < sq) {
      *reinterpret_cast<uint4*>(o + static_cast<int64_t>(row) * D + c) =
          *reinterpret_cast<const uint4*>(os + r * LD + c);
    }
  }
  if (tq == 0) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = row_a + 8 * r;
      if (row < sq) lse[row] = lsum[r] > 0.f ? (m_run[r] + log2f(lsum[r])) * kLn2 : INFINITY;
    }
  }
}

// ---- backward ----

// D[row] = sum_c dO[row, c] O[row, c], one warp per row.
template <typename T, int D>
__global__ void __launch_bounds__(256) BwdDeltaKernel(const BwdParams p) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * 8 + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= p.bh * p.sq) return;
  const uint32_t* o = reinterpret_cast<const uint32_t*>(static_cast<const T*>(p.o) + row * D);
  const uint32_t* d = reinterpret_cast<const uint32_t*>(static_cast<const T*>(p.dout) + row * D);
  float sum = 0.f;
#pragma unroll
  for (int c = lane; c < D / 2; c += 32) {
    const float2 a = Ops<T>::Unpack(o[c]);
    const float2 b = Ops<T>::Unpack(d[c]);
    sum += a.x * b.x + a.y * b.y;
  }
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, m);
  if (lane == 0) p.delta[row] = sum;
}

// dQ = scale * accumulator, 4 elements per thread.
template <typename T>
__global__ void BwdConvertKernel(const float* acc, T* dq, int64_t n4, float scale) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n4;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float4 a = reinterpret_cast<const float4*>(acc)[i];
    uint2 out;
    out.x = Ops<T>::Pack(a.x * scale, a.y * scale);
    out.y = Ops<T>::Pack(a.z * scale, a.w * scale);
    reinterpret_cast<uint2*>(dq)[i] = out;
  }
}

template <typename T, int D, int WARPS, int BQ>
constexpr int BwdSmemBytes() {
  // K, V [BN][LD]; Q, dO [2][BQ][LD]; dS^T [BN][BQ + kPad]; lse, D [2][BQ] fp32.
  return (2 * 16 * WARPS * (D + kPad) + 4 * BQ * (D + kPad) + 16 * WARPS * (BQ + kPad)) *
             static_cast<int>(sizeof(T)) +
         4 * BQ * static_cast<int>(sizeof(float));
}

template <typename T, int D, int WARPS, int BQ>
__global__ void __launch_bounds__(WARPS * 32, 1) BwdKernel(const BwdParams p) {
  using O = Ops<T>;
  constexpr int BN = 16 * WARPS;  // keys per block, 16 per warp
  constexpr int THREADS = WARPS * 32;
  constexpr int LD = D + kPad;
  constexpr int LDS = BQ + kPad;
  // dQ tile [BQ, D] split among the warps: RG row groups of 16 rows, CG column groups.
  constexpr int RG = BQ / 16;
  static_assert(WARPS % RG == 0, "warps must split the dQ tile's rows");
  constexpr int CG = WARPS / RG;
  constexpr int DC = D / CG;
  static_assert(DC % 16 == 0, "dQ column groups must be multiples of 16");

  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* ks = reinterpret_cast<T*>(smem_raw);  // [BN][LD]
  T* vs = ks + BN * LD;                    // [BN][LD]
  T* qs = vs + BN * LD;                    // [2][BQ][LD]
  T* dos = qs + 2 * BQ * LD;               // [2][BQ][LD]
  T* dst = dos + 2 * BQ * LD;              // [BN][LDS]: dS^T
  float* lse_s = reinterpret_cast<float*>(dst + BN * LDS);  // [2][BQ], times log2(e)
  float* dl_s = lse_s + 2 * BQ;                             // [2][BQ]

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane >> 2, tq = lane & 3;
  const int64_t bh = blockIdx.x % p.bh;
  const int n_block = static_cast<int>(blockIdx.x / p.bh);
  const int n0 = n_block * BN;
  const int sq = p.sq, sk = p.sk, off = sk - sq;
  const T* q = static_cast<const T*>(p.q) + bh * sq * D;
  const T* k = static_cast<const T*>(p.k) + bh * sk * D;
  const T* v = static_cast<const T*>(p.v) + bh * sk * D;
  const T* dout = static_cast<const T*>(p.dout) + bh * sq * D;
  const float* lse = p.lse + bh * sq;
  const float* delta = p.delta + bh * sq;
  float* dqa = p.dq_accum + bh * sq * D;

  // Queries that see a key of this tile: i >= n0 - off (causal).
  const int q_begin = p.causal ? max(0, n0 - off) : 0;
  const int qb_begin = q_begin / BQ;
  const int qb_end = (sq + BQ - 1) / BQ;

  auto load_q = [&](int qb, int st) {
    LoadTile<BQ, D, THREADS>(qs + st * BQ * LD, q, qb * BQ, sq, tid);
    LoadTile<BQ, D, THREADS>(dos + st * BQ * LD, dout, qb * BQ, sq, tid);
    for (int i = tid; i < BQ; i += THREADS) {
      const int row = qb * BQ + i;
      lse_s[st * BQ + i] = row < sq ? lse[row] * kLog2e : INFINITY;
      dl_s[st * BQ + i] = row < sq ? delta[row] : 0.f;
    }
  };

  LoadTile<BN, D, THREADS>(ks, k, n0, sk, tid);
  LoadTile<BN, D, THREADS>(vs, v, n0, sk, tid);
  if (qb_begin < qb_end) load_q(qb_begin, 0);
  CpAsyncCommit();
  CpAsyncWaitAll();
  __syncthreads();

  float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
  for (int t = 0; t < D / 8; ++t) {
    dk[t][0] = dk[t][1] = dk[t][2] = dk[t][3] = 0.f;
    dv[t][0] = dv[t][1] = dv[t][2] = dv[t][3] = 0.f;
  }
  const float sl2 = p.scale * kLog2e;
  const int key_a = n0 + warp * 16 + g;  // and key_a + 8
  const T* kw = ks + warp * 16 * LD;     // this warp's 16 keys
  const T* vw = vs + warp * 16 * LD;

  for (int qb = qb_begin; qb < qb_end; ++qb) {
    const int st = (qb - qb_begin) & 1;
    if (qb + 1 < qb_end) load_q(qb + 1, st ^ 1);
    CpAsyncCommit();
    const int q0 = qb * BQ;
    const T* qt = qs + st * BQ * LD;
    const T* dot = dos + st * BQ * LD;
    const float* lt = lse_s + st * BQ;
    const float* dlt = dl_s + st * BQ;

    // S^T = K Q^T and dP^T = V dO^T for this warp's 16 keys and BQ queries.
    float s[BQ / 8][4], dp[BQ / 8][4];
#pragma unroll
    for (int t = 0; t < BQ / 8; ++t) {
      s[t][0] = s[t][1] = s[t][2] = s[t][3] = 0.f;
      dp[t][0] = dp[t][1] = dp[t][2] = dp[t][3] = 0.f;
    }
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t ka[4], va[4];
      Ldsm4(ka, kw + (lane % 16) * LD + kk * 16 + (lane / 16) * 8);
      Ldsm4(va, vw + (lane % 16) * LD + kk * 16 + (lane / 16) * 8);
#pragma unroll
      for (int np = 0; np < BQ / 16; ++np) {
        const int off_b = (np * 16 + (lane % 8) + (lane / 16) * 8) * LD + kk * 16 +
                          ((lane / 8) % 2) * 8;
        uint32_t b[4];
        Ldsm4(b, qt + off_b);
        O::Mma(s[2 * np], ka, b[0], b[1]);
        O::Mma(s[2 * np + 1], ka, b[2], b[3]);
        Ldsm4(b, dot + off_b);
        O::Mma(dp[2 * np], va, b[0], b[1]);
        O::Mma(dp[2 * np + 1], va, b[2], b[3]);
      }
    }

    // P^T and dS^T = P^T (dP^T - D).
    const bool mask = q0 + BQ > sq || n0 + BN > sk || (p.causal && n0 + BN - 1 > q0 + off);
#pragma unroll
    for (int t = 0; t < BQ / 8; ++t) {
      const int qi = t * 8 + 2 * tq;
      const float2 l2 = *reinterpret_cast<const float2*>(lt + qi);
      const float2 d2 = *reinterpret_cast<const float2*>(dlt + qi);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float lv = (e & 1) ? l2.y : l2.x;
        const float dv_ = (e & 1) ? d2.y : d2.x;
        float pe = exp2f(fmaf(s[t][e], sl2, -lv));
        if (mask) {
          const int query = q0 + qi + (e & 1);
          const int key = key_a + (e >= 2 ? 8 : 0);
          if (query >= sq || key >= sk || (p.causal && key > query + off)) pe = 0.f;
        }
        s[t][e] = pe;
        dp[t][e] = pe * (dp[t][e] - dv_);
      }
    }

    // dV += P^T dO and dK += dS^T Q; dS^T also to shared memory for dQ.
#pragma unroll
    for (int kk = 0; kk < BQ / 16; ++kk) {
      const uint32_t pa[4] = {O::Pack(s[2 * kk][0], s[2 * kk][1]),
                              O::Pack(s[2 * kk][2], s[2 * kk][3]),
                              O::Pack(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                              O::Pack(s[2 * kk + 1][2], s[2 * kk + 1][3])};
      const uint32_t da[4] = {O::Pack(dp[2 * kk][0], dp[2 * kk][1]),
                              O::Pack(dp[2 * kk][2], dp[2 * kk][3]),
                              O::Pack(dp[2 * kk + 1][0], dp[2 * kk + 1][1]),
                              O::Pack(dp[2 * kk + 1][2], dp[2 * kk + 1][3])};
      T* drow = dst + (warp * 16 + g) * LDS + kk * 16 + 2 * tq;
      *reinterpret_cast<uint32_t*>(drow) = da[0];
      *reinterpret_cast<uint32_t*>(drow + 8 * LDS) = da[1];
      *reinterpret_cast<uint32_t*>(drow + 8) = da[2];
      *reinterpret_cast<uint32_t*>(drow + 8 * LDS + 8) = da[3];
#pragma unroll
      for (int dd = 0; dd < D / 16; ++dd) {
        const int off_b = (kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8) * LD + dd * 16 +
                          (lane / 16) * 8;
        uint32_t b[4];
        Ldsm4T(b, dot + off_b);
        O::Mma(dv[2 * dd], pa, b[0], b[1]);
        O::Mma(dv[2 * dd + 1], pa, b[2], b[3]);
        Ldsm4T(b, qt + off_b);
        O::Mma(dk[2 * dd], da, b[0], b[1]);
        O::Mma(dk[2 * dd + 1], da, b[2], b[3]);
      }
    }
    __syncthreads();  // every warp's dS^T is in shared memory

    // dQ_tile[BQ, D] += dS K: this warp's 16 rows (group rg) and DC columns (group cg).
    {
      const int rg = warp % RG, cg = warp / RG;
      float dq[DC / 8][4];
#pragma unroll
      for (int t = 0; t < DC / 8; ++t) dq[t][0] = dq[t][1] = dq[t][2] = dq[t][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) {
        uint32_t a[4];
        Ldsm4T(a, dst + (kk * 16 + (lane % 8) + (lane / 16) * 8) * LDS + rg * 16 +
                      ((lane / 8) % 2) * 8);
#pragma unroll
        for (int dd = 0; dd < DC / 16; ++dd) {
          uint32_t b[4];
          Ldsm4T(b, ks + (kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8) * LD + cg * DC + dd * 16 +
                        (lane / 16) * 8);
          O::Mma(dq[2 * dd], a, b[0], b[1]);
          O::Mma(dq[2 * dd + 1], a, b[2], b[3]);
        }
      }
      const int ra = q0 + rg * 16 + g;
#pragma unroll
      for (int t = 0; t < DC / 8; ++t) {
        const int c = cg * DC + t * 8 + 2 * tq;
        if (ra < sq) AtomicAdd2(dqa + static_cast<int64_t>(ra) * D + c, dq[t][0], dq[t][1]);
        if (ra + 8 < sq) {
          AtomicAdd2(dqa + static_cast<int64_t>(ra + 8) * D + c, dq[t][2], dq[t][3]);
        }
      }
    }
    CpAsyncWaitAll();
    __syncthreads();  // the next tile is loaded; nobody reads dS^T or this stage any more
  }

  // dK = scale dS^T Q and dV: stage in this warp's own rows of ks / vs, write 16-byte chunks.
  T* kso = ks + warp * 16 * LD;
  T* vso = vs + warp * 16 * LD;
#pragma unroll
  for (int t = 0; t < D / 8; ++t) {
    const int c = t * 8 + 2 * tq;
    *reinterpret_cast<uint32_t*>(kso + g * LD + c) =
        O::Pack(dk[t][0] * p.scale, dk[t][1] * p.scale);
    *reinterpret_cast<uint32_t*>(kso + (g + 8) * LD + c) =
        O::Pack(dk[t][2] * p.scale, dk[t][3] * p.scale);
    *reinterpret_cast<uint32_t*>(vso + g * LD + c) = O::Pack(dv[t][0], dv[t][1]);
    *reinterpret_cast<uint32_t*>(vso + (g + 8) * LD + c) = O::Pack(dv[t][2], dv[t][3]);
  }
  __syncwarp();
  T* dkg = static_cast<T*>(p.dk) + bh * sk * D;
  T* dvg = static_cast<T*>(p.dv) + bh * sk * D;
#pragma unroll
  for (int i = lane; i < 16 * (D / 8); i += 32) {
    const int r = i / (D / 8), c = (i % (D / 8)) * 8;
    const int key = n0 + warp * 16 + r;
    if (key < sk) {
      *reinterpret_cast<uint4*>(dkg + static_cast<int64_t>(key) * D + c) =
          *reinterpret_cast<const uint4*>(kso + r * LD + c);
      *reinterpret_cast<uint4*>(dvg + static_cast<int64_t>(key) * D + c) =
          *reinterpret_cast<const uint4*>(vso + r * LD + c);
    }
  }
}

// ---- launchers ----

// Raises |kernel|'s dynamic shared-memory limit to |bytes| once per device (function attributes
// belong to the device's context; ranks of several GPUs launch from their own threads).
template <typename K>
int AllowSmem(K kernel, int bytes, std::atomic<uint64_t>& done) {
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return static_cast<int>(e);
  const uint64_t bit = uint64_t{1} << (dev & 63);
  if (done.load(std::memory_order_acquire) & bit) return 0;
  e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e != cudaSuccess) return static_cast<int>(e);
  done.fetch_or(bit, std::memory_order_acq_rel);
  return 0;
}

template <typename T, int D, int WARPS, int BN>
int LaunchForward(const Shape& s, const void* q, const void* k, const void* v, void* o,
                  float* lse, cudaStream_t stream) {
  constexpr int kSmem = FwdSmemBytes<T, D, WARPS, BN>();
  static std::atomic<uint64_t> configured{0};  // per instantiation: a bit per device
  if (int e = AllowSmem(FwdKernel<T, D, WARPS, BN>, kSmem, configured)) return e;
  FwdParams p{q, k, v, o, lse, s.bh, s.sq, s.sk, s.scale, s.causal};
  const int64_t blocks = s.bh * ((s.sq + 16 * WARPS - 1) / (16 * WARPS));
  FwdKernel<T, D, WARPS, BN><<<static_cast<unsigned>(blocks), WARPS * 32, kSmem, stream>>>(p);
  return static_cast<int>(cudaGetLastError());
}

template <typename T, int D, int WARPS, int BQ>
int LaunchBackward(const Shape& s, const BwdParams& p, cudaStream_t stream) {
  constexpr int kSmem = BwdSmemBytes<T, D, WARPS, BQ>();
  static std::atomic<uint64_t> configured{0};
  if (int e = AllowSmem(BwdKernel<T, D, WARPS, BQ>, kSmem, configured)) return e;
  const int64_t rows = s.bh * s.sq;
  cudaError_t e = cudaMemsetAsync(p.dq_accum, 0, rows * D * sizeof(float), stream);
  if (e != cudaSuccess) return static_cast<int>(e);
  BwdDeltaKernel<T, D><<<static_cast<unsigned>((rows + 7) / 8), 256, 0, stream>>>(p);
  if ((e = cudaGetLastError()) != cudaSuccess) return static_cast<int>(e);
  const int64_t blocks = s.bh * ((s.sk + 16 * WARPS - 1) / (16 * WARPS));
  BwdKernel<T, D, WARPS, BQ><<<static_cast<unsigned>(blocks), WARPS * 32, kSmem, stream>>>(p);
  if ((e = cudaGetLastError()) != cudaSuccess) return static_cast<int>(e);
  const int64_t n4 = rows * D / 4;
  const int threads = 256;
  const int64_t grid = std::min<int64_t>((n4 + threads - 1) / threads, 132 * 16);
  BwdConvertKernel<T><<<static_cast<unsigned>(grid), threads, 0, stream>>>(
      p.dq_accum, static_cast<T*>(p.dq), n4, s.scale);
  return static_cast<int>(cudaGetLastError());
}

// The compiled tile configurations. The defaults (Config fields 0) are the fastest measured on
// an H200 (docs/runtime.md, "Fused attention"): 8 warps everywhere; the backward of head dim 128
// with query tiles of 32 (fewer registers than 64).
template <typename T>
int ForwardT(const Shape& s, const Config& c, const void* q, const void* k, const void* v,
             void* o, float* lse, cudaStream_t st) {
  const int w = c.fwd_warps ? c.fwd_warps : 8;
  const int bn = c.fwd_block_n ? c.fwd_block_n : 64;
  if (s.d == 64) {
    if (w == 4 && bn == 64) return LaunchForward<T, 64, 4, 64>(s, q, k, v, o, lse, st);
    if (w == 8 && bn == 64) return LaunchForward<T, 64, 8, 64>(s, q, k, v, o, lse, st);
    if (w == 4 && bn == 128) return LaunchForward<T, 64, 4, 128>(s, q, k, v, o, lse, st);
  } else if (s.d == 128) {
    if (w == 4 && bn == 64) return LaunchForward<T, 128, 4, 64>(s, q, k, v, o, lse, st);
    if (w == 8 && bn == 64) return LaunchForward<T, 128, 8, 64>(s, q, k, v, o, lse, st);
    if (w == 4 && bn == 32) return LaunchForward<T, 128, 4, 32>(s, q, k, v, o, lse, st);
  }
  return kNoVariant;
}

template <typename T>
int BackwardT(const Shape& s, const Config& c, const BwdParams& p, cudaStream_t st) {
  if (s.d == 64) {
    const int w = c.bwd_warps ? c.bwd_warps : 8;
    const int bq = c.bwd_block_q ? c.bwd_block_q : 64;
    if (w == 4 && bq == 64) return LaunchBackward<T, 64, 4, 64>(s, p, st);
    if (w == 8 && bq == 64) return LaunchBackward<T, 64, 8, 64>(s, p, st);
    if (w == 4 && bq == 32) return LaunchBackward<T, 64, 4, 32>(s, p, st);
  } else if (s.d == 128) {
    const int w = c.bwd_warps ? c.bwd_warps : 8;
    const int bq = c.bwd_block_q ? c.bwd_block_q : 32;
    if (w == 4 && bq == 32) return LaunchBackward<T, 128, 4, 32>(s, p, st);
    if (w == 4 && bq == 64) return LaunchBackward<T, 128, 4, 64>(s, p, st);
    if (w == 8 && bq == 32) return LaunchBackward<T, 128, 8, 32>(s, p, st);
  }
  return kNoVariant;
}

}  // namespace

int Forward(Dtype t, const Shape& s, const Config& c, const void* q, const void* k,
            const void* v, void* o, float* lse, void* stream) {
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  return t == Dtype::kBf16 ? ForwardT<__nv_bfloat16>(s, c, q, k, v, o, lse, st)
                           : ForwardT<__half>(s, c, q, k, v, o, lse, st);
}

std::vector<Config> CompiledConfigs(int d) {
  // Keep in step with ForwardT / BackwardT above.
  if (d == 64) return {{8, 64, 8, 64}, {4, 64, 4, 64}, {4, 128, 4, 32}};
  if (d == 128) return {{8, 64, 8, 32}, {4, 64, 4, 32}, {4, 32, 4, 64}};
  return {};
}

int64_t BackwardWorkspaceBytes(const Shape& s) {
  // dQ accumulators, then D (16-byte aligned: d is a multiple of 4).
  return s.bh * s.sq * (static_cast<int64_t>(s.d) + 1) * static_cast<int64_t>(sizeof(float));
}

int Backward(Dtype t, const Shape& s, const Config& c, const void* q, const void* k,
             const void* v, const void* o, const void* dout, const float* lse, void* dq,
             void* dk, void* dv, void* workspace, void* stream) {
  float* acc = static_cast<float*>(workspace);
  BwdParams p{q,   k,   v,  o,  dout, lse,  acc + s.bh * s.sq * s.d, acc,
              dq,  dk,  dv, s.bh, s.sq, s.sk, s.scale, s.causal};
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  return t == Dtype::kBf16 ? BackwardT<__nv_bfloat16>(s, c, p, st) : BackwardT<__half>(s, c, p, st);
}

}  // namespace flash
}  // namespace cuda
}  // namespace dsplan
