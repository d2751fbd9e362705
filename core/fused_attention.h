// What dsplan's fused attention kernel (runtime/cuda/flash_attention.h) runs, in one place: the
// CUDA executor picks its attention path with it and the cost model prices the same path
// (simulator/cost_model.cc, RuntimeAttentionSeconds).
#ifndef DSPLAN_CORE_FUSED_ATTENTION_H_
#define DSPLAN_CORE_FUSED_ATTENTION_H_

#include <cstdint>

#include "core/plan.h"

namespace dsplan {

/// The dtypes and head dimensions the fused kernel has, for error messages and reports.
inline constexpr const char* kFusedAttentionSupport = "bf16 or fp16 with head dim 64 or 128";

/// True when the fused kernel runs |dtype| at |head_dim| (on a GPU of compute capability 8.0 or
/// newer; the kernel itself checks the device).
inline bool FusedAttentionSupports(Precision dtype, int64_t head_dim) {
  return (dtype == Precision::kBf16 || dtype == Precision::kFp16) &&
         (head_dim == 64 || head_dim == 128);
}

}  // namespace dsplan

#endif  // DSPLAN_CORE_FUSED_ATTENTION_H_
