// CPU AdamW: the vectorized fp32 optimizer step that the host executor runs for ZeRO-Offload
// and that `dsplan profile` times (so the profile's CPU Adam rate is this kernel's rate).
//
// Semantics equal torch.optim.AdamW (and DeepSpeed's DeepSpeedCPUAdam with adamw_mode=True):
//   p <- p * (1 - lr * weight_decay)            (decoupled weight decay; skipped when adamw=false,
//                                                 where weight_decay is added to the gradient)
//   m <- beta1 * m + (1 - beta1) * g
//   v <- beta2 * v + (1 - beta2) * g^2
//   p <- p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// The kernel picks AVX-512F, AVX2+FMA or scalar code at run time (the CPU's flags), and splits
// the elements over |threads| std::threads in contiguous 64-element-aligned chunks.
// Thread safety: AdamStep writes only the ranges it is given; distinct calls on disjoint ranges
// may run concurrently.
#ifndef DSPLAN_RUNTIME_CPU_KERNELS_CPU_ADAM_H_
#define DSPLAN_RUNTIME_CPU_KERNELS_CPU_ADAM_H_

#include <cstdint>

namespace dsplan {

struct AdamParams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.01f;
  int64_t step = 1;      // t, starting at 1 (bias correction)
  bool adamw = true;     // decoupled weight decay (AdamW) vs L2 added to the gradient (Adam)
};

enum class SimdLevel { kScalar, kAvx2, kAvx512 };
const char* SimdLevelName(SimdLevel s);
/// The best level this CPU supports (what AdamStep uses by default).
SimdLevel DetectSimdLevel();

/// One optimizer step over |n| elements of fp32 params |p|, grads |g| and moments |m|, |v|
/// (updated in place). REQUIRES: threads >= 1; |level| <= DetectSimdLevel().
void AdamStep(const AdamParams& params, float* p, const float* g, float* m, float* v, int64_t n,
              int threads, SimdLevel level);
/// Same with the best SIMD level.
void AdamStep(const AdamParams& params, float* p, const float* g, float* m, float* v, int64_t n,
              int threads);

}  // namespace dsplan

#endif  // DSPLAN_RUNTIME_CPU_KERNELS_CPU_ADAM_H_
