// What the CUDA probe (cuda_probe.cc) and the CUDA executor (executor.cc) share: error macros
// that turn CUDA/cuBLAS returns into Status, a cuBLASLt matmul with cached descriptors, and NCCL
// loaded with dlopen (a machine without libnccl still runs everything else).
#ifndef DSPLAN_RUNTIME_CUDA_CUDA_COMMON_H_
#define DSPLAN_RUNTIME_CUDA_CUDA_COMMON_H_

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdint>
#include <map>
#include <string>
#include <tuple>

#include <fmt/format.h>

#include "core/plan.h"
#include "core/status.h"

#define DSPLAN_CUDA_TRY(expr)                                                            \
  do {                                                                                   \
    cudaError_t e_ = (expr);                                                             \
    if (e_ != cudaSuccess) {                                                             \
      return ::dsplan::Status::CudaError(                                                \
          fmt::format("{}:{}: {}: {}", __FILE__, __LINE__, #expr, cudaGetErrorString(e_))); \
    }                                                                                    \
  } while (0)

#define DSPLAN_CUBLAS_TRY(expr)                                                               \
  do {                                                                                        \
    cublasStatus_t e_ = (expr);                                                               \
    if (e_ != CUBLAS_STATUS_SUCCESS) {                                                        \
      return ::dsplan::Status::CudaError(fmt::format("{}:{}: {}: cuBLAS status {}", __FILE__, \
                                                     __LINE__, #expr, static_cast<int>(e_))); \
    }                                                                                         \
  } while (0)

namespace dsplan {
namespace cuda {

/// cuBLASLt GEMMs in row-major terms: C[m,n] = op(A)[m,k] · op(B)[k,n], |batch| products at the
/// given element strides. op(A) = A stored [m,k], or A stored [k,m] when |ta|; op(B) = B stored
/// [k,n], or B stored [n,k] when |tb| (torch.nn.Linear's weight). bf16/fp16 data accumulate in
/// fp32; fp32 data compute in plain fp32 (no TF32, PyTorch's default). Descriptors and the
/// heuristic's algorithm are cached per shape.
class LtMatmul {
 public:
  LtMatmul() = default;
  ~LtMatmul();
  LtMatmul(const LtMatmul&) = delete;
  LtMatmul& operator=(const LtMatmul&) = delete;

  /// Creates the handle. |workspace| (device memory, |workspace_bytes|) stays the caller's.
  Status Init(void* workspace, size_t workspace_bytes);
  Status Run(Precision dtype, bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t batch,
             const void* a, int64_t stride_a, const void* b, int64_t stride_b, void* c,
             int64_t stride_c, cudaStream_t stream);
  cublasLtHandle_t handle() const { return lt_; }

 private:
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
    cublasLtMatmulAlgo_t algo;
  };
  using Key = std::tuple<int, bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                         int64_t>;
  Status Build(const Key& key, Plan* plan);

  cublasLtHandle_t lt_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<Key, Plan> plans_;
};

/// NCCL through dlopen: the entry points dsplan uses.
struct Nccl {
  void* lib = nullptr;
  ncclResult_t (*CommInitAll)(ncclComm_t*, int, const int*) = nullptr;
  // One process per GPU (MPI): rank 0 creates the id, every rank joins with it.
  ncclResult_t (*GetUniqueId)(ncclUniqueId*) = nullptr;
  ncclResult_t (*CommInitRank)(ncclComm_t*, int, ncclUniqueId, int) = nullptr;
  ncclResult_t (*CommDestroy)(ncclComm_t) = nullptr;
  ncclResult_t (*CommAbort)(ncclComm_t) = nullptr;
  ncclResult_t (*GroupStart)() = nullptr;
  ncclResult_t (*GroupEnd)() = nullptr;
  ncclResult_t (*AllReduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                            cudaStream_t) = nullptr;
  ncclResult_t (*ReduceScatter)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t,
                                ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*AllGather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t,
                            cudaStream_t) = nullptr;
  const char* (*GetErrorString)(ncclResult_t) = nullptr;
  ncclResult_t (*GetVersion)(int*) = nullptr;

  /// Loads libnccl.so.2 once. Unsupported (with what to do) when it is missing.
  Status Load();
  /// "2.27.3" from ncclGetVersion's integer.
  std::string VersionString() const;
  /// A Status for a failed NCCL call.
  Status Error(const char* what, ncclResult_t r) const;
};

}  // namespace cuda
}  // namespace dsplan

#endif  // DSPLAN_RUNTIME_CUDA_CUDA_COMMON_H_
