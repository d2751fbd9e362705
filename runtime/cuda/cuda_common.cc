#include "runtime/cuda/cuda_common.h"

#include <dlfcn.h>

#include <type_traits>

namespace dsplan {
namespace cuda {

LtMatmul::~LtMatmul() {
  for (auto& [key, p] : plans_) {
    if (p.lc) cublasLtMatrixLayoutDestroy(p.lc);
    if (p.lb) cublasLtMatrixLayoutDestroy(p.lb);
    if (p.la) cublasLtMatrixLayoutDestroy(p.la);
    if (p.op) cublasLtMatmulDescDestroy(p.op);
  }
  if (lt_) cublasLtDestroy(lt_);
}

Status LtMatmul::Init(void* workspace, size_t workspace_bytes) {
  if (!lt_) DSPLAN_CUBLAS_TRY(cublasLtCreate(&lt_));
  workspace_ = workspace;
  workspace_bytes_ = workspace_bytes;
  return Status();
}

Status LtMatmul::Build(const Key& key, Plan* p) {
  const auto [dt, ta, tb, m, n, k, batch, sa, sb, sc] = key;
  const Precision dtype = static_cast<Precision>(dt);
  const cudaDataType_t t = dtype == Precision::kBf16   ? CUDA_R_16BF
                           : dtype == Precision::kFp16 ? CUDA_R_16F
                                                       : CUDA_R_32F;
  // Row-major C[m,n] = op(A) op(B) is column-major C^T[n,m] = op(B)^T op(A)^T: cuBLAS's A is our
  // B, its B our A.
  DSPLAN_CUBLAS_TRY(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t opa = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t opb = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  DSPLAN_CUBLAS_TRY(
      cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)));
  DSPLAN_CUBLAS_TRY(
      cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)));
  // Stored shapes (column-major rows x cols, leading dimension = rows).
  const uint64_t a_rows = tb ? k : n, a_cols = tb ? n : k;
  const uint64_t b_rows = ta ? m : k, b_cols = ta ? k : m;
  DSPLAN_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&p->la, t, a_rows, a_cols, a_rows));
  DSPLAN_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&p->lb, t, b_rows, b_cols, b_rows));
  DSPLAN_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&p->lc, t, n, m, n));
  if (batch > 1) {
    const int32_t count = static_cast<int32_t>(batch);
    const int64_t strides[3] = {sb, sa, sc};  // cuBLAS's A is our B
    cublasLtMatrixLayout_t ls[3] = {p->la, p->lb, p->lc};
    for (int i = 0; i < 3; ++i) {
      DSPLAN_CUBLAS_TRY(cublasLtMatrixLayoutSetAttribute(
          ls[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
      DSPLAN_CUBLAS_TRY(cublasLtMatrixLayoutSetAttribute(
          ls[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &strides[i], sizeof(strides[i])));
    }
  }
  cublasLtMatmulPreference_t pref = nullptr;
  DSPLAN_CUBLAS_TRY(cublasLtMatmulPreferenceCreate(&pref));
  size_t ws = workspace_bytes_;
  cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  cublasLtMatmulHeuristicResult_t heur;
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = cublasLtMatmulAlgoGetHeuristic(lt_, p->op, p->la, p->lb, p->lc, p->lc, pref, 1, &heur,
                                        &found);
  }
  cublasLtMatmulPreferenceDestroy(pref);
  DSPLAN_CUBLAS_TRY(st);
  if (found == 0) {
    return Status::Unsupported(fmt::format("cuBLASLt has no algorithm for {}x{}x{} (batch {}) {}",
                                           m, n, k, batch, PrecisionName(dtype)));
  }
  p->algo = heur.algo;
  return Status();
}

Status LtMatmul::Run(Precision dtype, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                     int64_t batch, const void* a, int64_t stride_a, const void* b,
                     int64_t stride_b, void* c, int64_t stride_c, cudaStream_t stream) {
  if (m <= 0 || n <= 0 || k <= 0 || batch <= 0) return Status();
  const Key key{static_cast<int>(dtype), ta, tb, m, n, k, batch,
                batch > 1 ? stride_a : 0, batch > 1 ? stride_b : 0, batch > 1 ? stride_c : 0};
  auto it = plans_.find(key);
  if (it == plans_.end()) {
    Plan p;
    Status s = Build(key, &p);
    if (!s.ok()) {
      if (p.lc) cublasLtMatrixLayoutDestroy(p.lc);
      if (p.lb) cublasLtMatrixLayoutDestroy(p.lb);
      if (p.la) cublasLtMatrixLayoutDestroy(p.la);
      if (p.op) cublasLtMatmulDescDestroy(p.op);
      return s;
    }
    it = plans_.emplace(key, p).first;
  }
  const Plan& p = it->second;
  const float alpha = 1, beta = 0;
  DSPLAN_CUBLAS_TRY(cublasLtMatmul(lt_, p.op, &alpha, b, p.la, a, p.lb, &beta, c, p.lc, c, p.lc,
                                   &p.algo, workspace_, workspace_bytes_, stream));
  return Status();
}

Status Nccl::Load() {
  if (lib) return Status();
  for (const char* name : {"libnccl.so.2", "libnccl.so"}) {
    lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib) break;
  }
  if (!lib) {
    return Status::Unsupported(fmt::format(
        "NCCL not found (dlopen libnccl.so.2: {}); add its folder to LD_LIBRARY_PATH", dlerror()));
  }
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
    return fn != nullptr;
  };
  if (!(sym(CommInitAll, "ncclCommInitAll") && sym(GetUniqueId, "ncclGetUniqueId") &&
        sym(CommInitRank, "ncclCommInitRank") && sym(CommDestroy, "ncclCommDestroy") &&
        sym(CommAbort, "ncclCommAbort") && sym(GroupStart, "ncclGroupStart") &&
        sym(GroupEnd, "ncclGroupEnd") && sym(AllReduce, "ncclAllReduce") &&
        sym(ReduceScatter, "ncclReduceScatter") && sym(AllGather, "ncclAllGather") &&
        sym(GetErrorString, "ncclGetErrorString") && sym(GetVersion, "ncclGetVersion"))) {
    return Status::Unsupported("libnccl.so.2 lacks an expected entry point");
  }
  return Status();
}

std::string Nccl::VersionString() const {
  int v = 0;
  if (!GetVersion || GetVersion(&v) != ncclSuccess) return "unknown";
  // NCCL >= 2.9: major*10000 + minor*100 + patch.
  return fmt::format("{}.{}.{}", v / 10000, v % 10000 / 100, v % 100);
}

Status Nccl::Error(const char* what, ncclResult_t r) const {
  return Status::NcclError(
      fmt::format("{}: {}", what, GetErrorString ? GetErrorString(r) : "NCCL error"));
}

}  // namespace cuda
}  // namespace dsplan
