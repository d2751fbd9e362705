// The launchers of the fused attention kernels (flash_attention.cu), for flash_attention.cc and
// the benchmark. nvcc compiles the kernels as C++17, so this header has no CUDA include and no
// core/status.h: launchers return a cudaError_t as int (0 = success) or kNoVariant. Callers
// check shapes, pointers and the device first (flash_attention.cc does; the public API is
// flash_attention.h).
#ifndef DSPLAN_RUNTIME_CUDA_FLASH_ATTENTION_KERNELS_H_
#define DSPLAN_RUNTIME_CUDA_FLASH_ATTENTION_KERNELS_H_

#include <cstdint>
#include <vector>

namespace dsplan {
namespace cuda {
namespace flash {

enum class Dtype { kBf16, kFp16 };

/// Returned when no kernel is compiled for the (dtype, head dim, tile configuration).
inline constexpr int kNoVariant = -1;

/// One attention problem: |bh| independent (batch x head) slices, each Q [sq, d], K and V
/// [sk, d], O [sq, d], contiguous and in that order ([bh, s, d] row-major). Causal masks are
/// bottom-right aligned: query i sees keys j <= i + (sk - sq).
struct Shape {
  int64_t bh = 0;
  int sq = 0, sk = 0, d = 0;
  bool causal = false;
  float scale = 0;  // softmax scale (> 0)
};

/// Tile configuration; 0 = the default for the head dim. Forward: |fwd_warps| warps of 16 query
/// rows each, key tiles of |fwd_block_n|. Backward: |bwd_warps| warps of 16 keys each, query
/// tiles of |bwd_block_q|.
struct Config {
  int fwd_warps = 0;
  int fwd_block_n = 0;
  int bwd_warps = 0;
  int bwd_block_q = 0;
};

/// Every tile configuration compiled for head dim |d|, the default first (empty when none):
/// the benchmark times them and the test checks each.
std::vector<Config> CompiledConfigs(int d);

/// O = softmax(scale Q K^T, mask) V and the fp32 log-sum-exp per query row (natural log; +inf
/// for a row that sees no key, whose O is 0).
int Forward(Dtype t, const Shape& s, const Config& c, const void* q, const void* k,
            const void* v, void* o, float* lse, void* stream);

/// fp32 workspace bytes Backward needs: dQ accumulators [bh, sq, d] and D = rowsum(dO * O)
/// [bh, sq].
int64_t BackwardWorkspaceBytes(const Shape& s);

/// dQ, dK, dV from Q, K, V, O, dO and the forward's log-sum-exp; |workspace| holds
/// BackwardWorkspaceBytes(s) bytes (16-byte aligned). Four launches: D, the dK/dV/dQ kernel
/// (dQ by fp32 atomics into the workspace), dQ's conversion; plus one memset.
int Backward(Dtype t, const Shape& s, const Config& c, const void* q, const void* k,
             const void* v, const void* o, const void* dout, const float* lse, void* dq,
             void* dk, void* dv, void* workspace, void* stream);

}  // namespace flash
}  // namespace cuda
}  // namespace dsplan

#endif  // DSPLAN_RUNTIME_CUDA_FLASH_ATTENTION_KERNELS_H_
