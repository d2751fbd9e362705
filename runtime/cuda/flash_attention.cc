// The checked entry points of the fused attention kernels (flash_attention.h): arguments and
// device are verified here, in C++20 with Status; flash_attention.cu only launches.
#include "runtime/cuda/flash_attention.h"

#include <cmath>
#include <cstdint>
#include <limits>

#include <fmt/format.h>

#include "core/fused_attention.h"

namespace dsplan {
namespace cuda {
namespace {

bool Aligned(const void* p, uintptr_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

// Checks everything but the pointers; fills the kernels' shape.
Status Check(Precision dtype, const AttentionShape& s, flash::Shape* out) {
  DSPLAN_RETURN_IF_ERROR(FlashAttentionSupported(dtype, s.head_dim));
  if (s.batch_heads <= 0 || s.sq <= 0 || s.sk <= 0) {
    return Status::InvalidArgument(fmt::format(
        "fused attention: batch_heads, sq and sk must be positive (got {}, {}, {})",
        s.batch_heads, s.sq, s.sk));
  }
  // Rows are indexed with 32-bit ints inside a slice, blocks with a 32-bit grid.
  constexpr int64_t kMaxRows = int64_t{1} << 24;
  if (s.sq > kMaxRows || s.sk > kMaxRows || s.batch_heads > (int64_t{1} << 24)) {
    return Status::InvalidArgument(fmt::format(
        "fused attention: sequence lengths up to {} and up to {} slices are supported (got sq "
        "{}, sk {}, batch_heads {})",
        kMaxRows, int64_t{1} << 24, s.sq, s.sk, s.batch_heads));
  }
  if (s.scale < 0 || !std::isfinite(s.scale)) {
    return Status::InvalidArgument(fmt::format("fused attention: scale {} is not valid", s.scale));
  }
  int dev = 0, major = 0, minor = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  if (e != cudaSuccess) {
    return Status::CudaError(fmt::format("fused attention: device query: {}",
                                         cudaGetErrorString(e)));
  }
  if (major < 8) {
    return Status::Unsupported(fmt::format(
        "fused attention needs a GPU of compute capability 8.0 or newer (bf16 tensor cores); "
        "device {} is {}.{}",
        dev, major, minor));
  }
  out->bh = s.batch_heads;
  out->sq = static_cast<int>(s.sq);
  out->sk = static_cast<int>(s.sk);
  out->d = static_cast<int>(s.head_dim);
  out->causal = s.causal;
  out->scale = static_cast<float>(s.scale > 0 ? s.scale : 1.0 / std::sqrt(double(s.head_dim)));
  return Status();
}

Status Pointers(std::initializer_list<std::pair<const char*, const void*>> tensors) {
  for (const auto& [name, p] : tensors) {
    if (p == nullptr || !Aligned(p, 16)) {
      return Status::InvalidArgument(fmt::format(
          "fused attention: {} must be device memory aligned to 16 bytes (got {})", name, p));
    }
  }
  return Status();
}

Status LaunchStatus(int rc, const char* what, const FlashAttentionTiles& t) {
  if (rc == 0) return Status();
  if (rc == flash::kNoVariant) {
    return Status::InvalidArgument(fmt::format(
        "fused attention {}: no kernel compiled for tiles fwd {} warps x {} keys, bwd {} warps x "
        "{} queries (0 = default)",
        what, t.fwd_warps, t.fwd_block_n, t.bwd_warps, t.bwd_block_q));
  }
  return Status::CudaError(fmt::format("fused attention {}: {}", what,
                                       cudaGetErrorString(static_cast<cudaError_t>(rc))));
}

flash::Dtype KernelDtype(Precision p) {
  return p == Precision::kFp16 ? flash::Dtype::kFp16 : flash::Dtype::kBf16;
}

}  // namespace

double AttentionShape::ForwardFlops() const {
  const double f = 4.0 * static_cast<double>(batch_heads) * static_cast<double>(sq) *
                   static_cast<double>(sk) * static_cast<double>(head_dim);
  return causal ? f / 2 : f;
}

Status FlashAttentionSupported(Precision dtype, int64_t head_dim) {
  if (FusedAttentionSupports(dtype, head_dim)) return Status();
  return Status::Unsupported(fmt::format("fused attention supports {}; got {} with head dim {}",
                                         kFusedAttentionSupport, PrecisionName(dtype), head_dim));
}

Status FlashAttentionForward(Precision dtype, const AttentionShape& shape, const void* q,
                             const void* k, const void* v, void* o, float* lse,
                             cudaStream_t stream, const FlashAttentionTiles& tiles) {
  flash::Shape s;
  DSPLAN_RETURN_IF_ERROR(Check(dtype, shape, &s));
  DSPLAN_RETURN_IF_ERROR(Pointers({{"q", q}, {"k", k}, {"v", v}, {"o", o}, {"lse", lse}}));
  return LaunchStatus(flash::Forward(KernelDtype(dtype), s, tiles, q, k, v, o, lse, stream),
                      "forward", tiles);
}

int64_t FlashAttentionWorkspaceBytes(const AttentionShape& shape) {
  flash::Shape s;
  s.bh = shape.batch_heads;
  s.sq = static_cast<int>(shape.sq);
  s.d = static_cast<int>(shape.head_dim);
  return flash::BackwardWorkspaceBytes(s);
}

Status FlashAttentionBackward(Precision dtype, const AttentionShape& shape, const void* q,
                              const void* k, const void* v, const void* o, const void* dout,
                              const float* lse, void* dq, void* dk, void* dv, void* workspace,
                              cudaStream_t stream, const FlashAttentionTiles& tiles) {
  flash::Shape s;
  DSPLAN_RETURN_IF_ERROR(Check(dtype, shape, &s));
  DSPLAN_RETURN_IF_ERROR(Pointers({{"q", q}, {"k", k}, {"v", v}, {"o", o}, {"dout", dout},
                                   {"lse", lse}, {"dq", dq}, {"dk", dk}, {"dv", dv},
                                   {"workspace", workspace}}));
  return LaunchStatus(flash::Backward(KernelDtype(dtype), s, tiles, q, k, v, o, dout, lse, dq,
                                      dk, dv, workspace, stream),
                      "backward", tiles);
}

}  // namespace cuda
}  // namespace dsplan
