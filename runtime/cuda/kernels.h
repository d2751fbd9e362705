// Small CUDA kernels of the profiler (and later the CUDA executor), callable from host C++.
// Each launches on |stream| and returns the launch's cudaError_t (as int, so that this header
// needs no CUDA include).
#ifndef DSPLAN_RUNTIME_CUDA_KERNELS_H_
#define DSPLAN_RUNTIME_CUDA_KERNELS_H_

#include <cstdint>

namespace dsplan {
namespace cuda {

/// Fills |n| elements with uniform values in [-1, 1) from a counter hash of |seed|:
/// dtype 0 = fp32, 1 = bf16, 2 = fp16.
int FillUniform(void* p, int64_t n, int dtype, uint32_t seed, void* stream);
/// y[i] = a * x[i] + b over |n| fp32 elements (16-byte vector loads when aligned).
int Axpb(const float* x, float* y, int64_t n, float a, float b, void* stream);
/// One launch of an empty kernel (1 block, 32 threads).
int EmptyKernel(void* stream);

}  // namespace cuda
}  // namespace dsplan

#endif  // DSPLAN_RUNTIME_CUDA_KERNELS_H_
