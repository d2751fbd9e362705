// Fused attention on the GPU (FlashAttention-2 style, written here; kernels in
// flash_attention.cu, method and measured speed in docs/runtime.md "Fused attention").
//
//   O = softmax(scale Q K^T + mask) V,  lse = log(sum(exp(scale Q K^T + mask)))  per query row
//
// Operands are contiguous [batch_heads, seq, head_dim] row-major tensors of one dtype (bf16 or
// fp16; fp32 accumulation inside), device memory 16-byte aligned. The causal mask is bottom-right
// aligned: query i sees keys j <= i + (sk - sq), which is the usual lower triangle when sq == sk
// (flash-attn >= 2.1's convention; PyTorch's SDPA is_causal is top-left aligned when sq != sk).
// A query row that sees no key (causal with sq > sk) gets O = 0 and lse = +inf, and passes no
// gradient. All work is enqueued on |stream|; nothing synchronizes.
//
// Supported: kFusedAttentionSupport (core/fused_attention.h) on compute capability 8.0 or newer.
// Thread safety: calls from several threads (one per GPU) are safe.
#ifndef DSPLAN_RUNTIME_CUDA_FLASH_ATTENTION_H_
#define DSPLAN_RUNTIME_CUDA_FLASH_ATTENTION_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "core/plan.h"
#include "core/status.h"
#include "runtime/cuda/flash_attention_kernels.h"

namespace dsplan {
namespace cuda {

struct AttentionShape {
  int64_t batch_heads = 0;  // B x H slices
  int64_t sq = 0;           // query rows per slice
  int64_t sk = 0;           // key (and value) rows per slice
  int64_t head_dim = 0;
  bool causal = false;
  double scale = 0;         // softmax scale; 0 means 1 / sqrt(head_dim)

  /// Forward FLOPs as the literature counts them: 4 B H sq sk d (two products), halved when
  /// causal. The backward counts 2.5 times this.
  double ForwardFlops() const;
};

/// Tile configurations (flash_attention_kernels.h, Config); the default is what the runtime
/// runs; others exist for the benchmark.
using FlashAttentionTiles = flash::Config;

/// OK when the kernel runs |dtype| with |head_dim| on a GPU; else Unsupported naming what is
/// supported. Needs no device.
Status FlashAttentionSupported(Precision dtype, int64_t head_dim);

/// O [bh, sq, d] and lse [bh, sq] (fp32, natural log) from Q [bh, sq, d], K, V [bh, sk, d].
/// Errors: Unsupported (dtype, head dim, or a device older than compute capability 8.0),
/// InvalidArgument (sizes not positive or too large, null or misaligned pointers), CudaError.
Status FlashAttentionForward(Precision dtype, const AttentionShape& shape, const void* q,
                             const void* k, const void* v, void* o, float* lse,
                             cudaStream_t stream, const FlashAttentionTiles& tiles = {});

/// Bytes of fp32 workspace FlashAttentionBackward needs (dQ accumulators and rowsum(dO O)).
int64_t FlashAttentionWorkspaceBytes(const AttentionShape& shape);

/// dQ [bh, sq, d], dK, dV [bh, sk, d] from the forward's inputs, its O and lse, and dO.
/// |workspace|: FlashAttentionWorkspaceBytes(shape) bytes of device memory, 16-byte aligned; its
/// contents need not be initialized. Errors as FlashAttentionForward.
Status FlashAttentionBackward(Precision dtype, const AttentionShape& shape, const void* q,
                              const void* k, const void* v, const void* o, const void* dout,
                              const float* lse, void* dq, void* dk, void* dv, void* workspace,
                              cudaStream_t stream, const FlashAttentionTiles& tiles = {});

}  // namespace cuda
}  // namespace dsplan

#endif  // DSPLAN_RUNTIME_CUDA_FLASH_ATTENTION_H_
