// cuBLASLt loaded on first use instead of at program start.
//
// Linking libcublasLt.so (541 MB) into dsplan made every start of the program map and
// initialise it: about 0.13 s of CPU time and 25,000 page faults before main, on every command,
// `dsplan --version` included, though only the GPU commands (validate, profile) call it. This
// file defines the cuBLASLt entry points dsplan uses, each forwarding to the function of the
// same name in the library, which the first call opens with dlopen (the path CMake found at
// build time, else the versioned name through the loader's search path). If the library cannot
// be opened or lacks the function, the call returns CUBLAS_STATUS_NOT_INITIALIZED (0 for
// cublasLtGetVersion) and the caller reports it as it reports any cuBLASLt failure; the first
// failure also prints the loader's reason to stderr once.
//
// Thread safety: the library is opened once (a function-local static).
#include <cublasLt.h>
#include <dlfcn.h>

#include <cstdio>

namespace {

void* Library() {
  static void* const lib = [] {
    void* h = nullptr;
    for (const char* name : {DSPLAN_CUBLASLT_PATH, DSPLAN_CUBLASLT_SONAME}) {
      if (name[0] == '\0') continue;
      h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (h) break;
    }
    if (!h) {
      std::fprintf(stderr, "dsplan: cannot load cuBLASLt (%s): %s\n", DSPLAN_CUBLASLT_SONAME,
                   dlerror());
    }
    return h;
  }();
  return lib;
}

template <typename Fn>
Fn Resolve(const char* name) {
  void* lib = Library();
  return lib ? reinterpret_cast<Fn>(dlsym(lib, name)) : nullptr;
}

}  // namespace

// One forwarding definition per entry point; the prototypes are cublasLt.h's.
#define DSPLAN_LT_FORWARD(name, params, args)                                    \
  cublasStatus_t CUBLASWINAPI name params {                                      \
    static const auto fn = Resolve<cublasStatus_t(CUBLASWINAPI*) params>(#name); \
    return fn ? fn args : CUBLAS_STATUS_NOT_INITIALIZED;                         \
  }

extern "C" {

DSPLAN_LT_FORWARD(cublasLtCreate, (cublasLtHandle_t * handle), (handle))
DSPLAN_LT_FORWARD(cublasLtDestroy, (cublasLtHandle_t handle), (handle))
DSPLAN_LT_FORWARD(cublasLtMatmul,
                  (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                   const void* A, cublasLtMatrixLayout_t Adesc, const void* B,
                   cublasLtMatrixLayout_t Bdesc, const void* beta, const void* C,
                   cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc,
                   const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspaceSize,
                   cudaStream_t stream),
                  (handle, desc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo,
                   workspace, workspaceSize, stream))
DSPLAN_LT_FORWARD(cublasLtMatmulAlgoGetHeuristic,
                  (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                   cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                   cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                   cublasLtMatmulPreference_t pref, int requested,
                   cublasLtMatmulHeuristicResult_t heuristicResultsArray[], int* returnAlgoCount),
                  (handle, desc, Adesc, Bdesc, Cdesc, Ddesc, pref, requested,
                   heuristicResultsArray, returnAlgoCount))
DSPLAN_LT_FORWARD(cublasLtMatmulDescCreate,
                  (cublasLtMatmulDesc_t * desc, cublasComputeType_t computeType,
                   cudaDataType_t scaleType),
                  (desc, computeType, scaleType))
DSPLAN_LT_FORWARD(cublasLtMatmulDescDestroy, (cublasLtMatmulDesc_t desc), (desc))
DSPLAN_LT_FORWARD(cublasLtMatmulDescSetAttribute,
                  (cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                   const void* buf, size_t sizeInBytes),
                  (desc, attr, buf, sizeInBytes))
DSPLAN_LT_FORWARD(cublasLtMatmulPreferenceCreate, (cublasLtMatmulPreference_t * pref), (pref))
DSPLAN_LT_FORWARD(cublasLtMatmulPreferenceDestroy, (cublasLtMatmulPreference_t pref), (pref))
DSPLAN_LT_FORWARD(cublasLtMatmulPreferenceSetAttribute,
                  (cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
                   const void* buf, size_t sizeInBytes),
                  (pref, attr, buf, sizeInBytes))
DSPLAN_LT_FORWARD(cublasLtMatrixLayoutCreate,
                  (cublasLtMatrixLayout_t * layout, cudaDataType type, uint64_t rows,
                   uint64_t cols, int64_t ld),
                  (layout, type, rows, cols, ld))
DSPLAN_LT_FORWARD(cublasLtMatrixLayoutDestroy, (cublasLtMatrixLayout_t layout), (layout))
DSPLAN_LT_FORWARD(cublasLtMatrixLayoutSetAttribute,
                  (cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr,
                   const void* buf, size_t sizeInBytes),
                  (layout, attr, buf, sizeInBytes))

size_t CUBLASWINAPI cublasLtGetVersion(void) {
  static const auto fn = Resolve<size_t(CUBLASWINAPI*)(void)>("cublasLtGetVersion");
  return fn ? fn() : 0;
}

}  // extern "C"
