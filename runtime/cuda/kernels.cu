#include "runtime/cuda/kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace dsplan {
namespace cuda {
namespace {

__device__ __forceinline__ float Uniform(uint64_t i, uint32_t seed) {
  // splitmix64 of (index, seed): independent of the launch shape.
  uint64_t z = i + 0x9E3779B97F4A7C15ull * (seed + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

template <typename T>
__device__ __forceinline__ T FromFloat(float f);
template <>
__device__ __forceinline__ float FromFloat<float>(float f) { return f; }
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float f) {
  return __float2bfloat16(f);
}
template <>
__device__ __forceinline__ __half FromFloat<__half>(float f) { return __float2half(f); }

template <typename T>
__global__ void FillKernel(T* p, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    p[i] = FromFloat<T>(Uniform(static_cast<uint64_t>(i), seed));
  }
}

__global__ void AxpbKernel4(const float4* x, float4* y, int64_t n4, float a, float b) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n4;
       i += int64_t{gridDim.x} * blockDim.x) {
    float4 v = x[i];
    v.x = a * v.x + b;
    v.y = a * v.y + b;
    v.z = a * v.z + b;
    v.w = a * v.w + b;
    y[i] = v;
  }
}

__global__ void AxpbKernel(const float* x, float* y, int64_t begin, int64_t n, float a, float b) {
  for (int64_t i = begin + blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    y[i] = a * x[i] + b;
  }
}

__global__ void Empty() {}

int Blocks(int64_t n, int threads) {
  int64_t b = (n + threads - 1) / threads;
  // Enough blocks to fill any current GPU several times over; grid-stride loops do the rest.
  return static_cast<int>(b < 65536 ? (b > 0 ? b : 1) : 65536);
}

}  // namespace

int FillUniform(void* p, int64_t n, int dtype, uint32_t seed, void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const int t = 256;
  if (dtype == 0) FillKernel<<<Blocks(n, t), t, 0, s>>>(static_cast<float*>(p), n, seed);
  if (dtype == 1) FillKernel<<<Blocks(n, t), t, 0, s>>>(static_cast<__nv_bfloat16*>(p), n, seed);
  if (dtype == 2) FillKernel<<<Blocks(n, t), t, 0, s>>>(static_cast<__half*>(p), n, seed);
  return static_cast<int>(cudaGetLastError());
}

int Axpb(const float* x, float* y, int64_t n, float a, float b, void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const int t = 256;
  const bool aligned = (reinterpret_cast<uintptr_t>(x) % 16 == 0) &&
                       (reinterpret_cast<uintptr_t>(y) % 16 == 0);
  int64_t done = 0;
  if (aligned && n >= 4) {
    const int64_t n4 = n / 4;
    AxpbKernel4<<<Blocks(n4, t), t, 0, s>>>(reinterpret_cast<const float4*>(x),
                                             reinterpret_cast<float4*>(y), n4, a, b);
    done = n4 * 4;
  }
  if (done < n) AxpbKernel<<<Blocks(n - done, t), t, 0, s>>>(x, y, done, n, a, b);
  return static_cast<int>(cudaGetLastError());
}

int EmptyKernel(void* stream) {
  Empty<<<1, 32, 0, static_cast<cudaStream_t>(stream)>>>();
  return static_cast<int>(cudaGetLastError());
}

}  // namespace cuda
}  // namespace dsplan
