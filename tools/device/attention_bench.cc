// dsplan_attention_bench: times the fused attention kernels (runtime/cuda/flash_attention.h) in
// every compiled tile configuration, forward and backward, and prints TFLOP/s.
//
//   dsplan_attention_bench [CASE ...]     CASE = dtype:batch_heads:sq:sk:head_dim:causal
//                                        e.g. bf16:200:1024:1024:64:1 (gpt2-xl, micro-batch 8)
//
// FLOPs: forward 4 bh sq sk d, halved when causal; backward 2.5 x forward. Inputs uniform random
// in [-1, 1) (never zeros); L2 flushed (a memset of 2 x L2) before every timed repeat; CUDA events
// around the kernels alone; 3 warm-up + 10 timed, median. The backward's time includes its four
// launches and the workspace memset. Device only: a CUDA build on a GPU machine.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/plan.h"
#include "runtime/cuda/flash_attention.h"
#include "runtime/cuda/kernels.h"

namespace {

using dsplan::Precision;
using dsplan::Status;
using dsplan::cuda::AttentionShape;
using dsplan::cuda::FlashAttentionTiles;

#define CHECK_CUDA(x)                                                                \
  do {                                                                               \
    cudaError_t e_ = (x);                                                            \
    if (e_ != cudaSuccess) {                                                         \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,                \
                   cudaGetErrorString(e_));                                          \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)
#define CHECK_OK(x)                                                                  \
  do {                                                                               \
    Status s_ = (x);                                                                 \
    if (!s_.ok()) {                                                                  \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, s_.ToString().c_str()); \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

struct Case {
  Precision dtype = Precision::kBf16;
  AttentionShape shape;
};

bool Parse(const std::string& text, Case* c) {
  char dt[16] = {0};
  long long bh = 0, sq = 0, sk = 0, d = 0;
  int causal = 0;
  if (std::sscanf(text.c_str(), "%15[^:]:%lld:%lld:%lld:%lld:%d", dt, &bh, &sq, &sk, &d,
                  &causal) != 6) {
    return false;
  }
  auto p = dsplan::ParsePrecision(dt);
  if (!p.ok()) return false;
  c->dtype = *p;
  c->shape = AttentionShape{bh, sq, sk, d, causal != 0, 0.0};
  return true;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    args = {"bf16:200:1024:1024:64:1",   // gpt2-xl, micro-batch 8 (25 heads)
            "bf16:32:4096:4096:128:1",   // llama-2-7b, micro-batch 1 (32 heads)
            "bf16:128:2048:2048:128:1",  "bf16:256:1024:1024:64:0",
            "fp16:200:1024:1024:64:1",   "bf16:512:128:512:64:0"};  // T5 cross-attention (128 x 512)
  }
  CHECK_CUDA(cudaSetDevice(0));
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("# dsplan_attention_bench on %s (%d SMs, cc %d.%d); 3 warm-up + 10 timed, median, "
              "L2 flushed\n",
              prop.name, prop.multiProcessorCount, prop.major, prop.minor);
  cudaStream_t st;
  CHECK_CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  void* flush = nullptr;
  const size_t flush_bytes = 2 * static_cast<size_t>(prop.l2CacheSize);
  CHECK_CUDA(cudaMalloc(&flush, flush_bytes));
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  std::string table = fmt::format("{:<28} {:>13} {:>10} {:>10} {:>10} {:>10}\n", "case",
                                  "tiles", "fwd ms", "fwd TF/s", "bwd ms", "bwd TF/s");

  for (const std::string& text : args) {
    Case c;
    if (!Parse(text, &c)) {
      std::fprintf(stderr, "bad case '%s' (dtype:batch_heads:sq:sk:head_dim:causal)\n",
                   text.c_str());
      return 2;
    }
    const AttentionShape& s = c.shape;
    const int64_t nq = s.batch_heads * s.sq * s.head_dim, nk = s.batch_heads * s.sk * s.head_dim;
    const int fill = c.dtype == Precision::kFp16 ? 2 : 1;
    std::vector<void*> bufs;
    auto alloc = [&](int64_t bytes, bool random) {
      void* p = nullptr;
      CHECK_CUDA(cudaMalloc(&p, bytes));
      if (random) {
        CHECK_CUDA(static_cast<cudaError_t>(dsplan::cuda::FillUniform(
            p, bytes / 2, fill, static_cast<uint32_t>(bufs.size() + 1), st)));
      }
      bufs.push_back(p);
      return p;
    };
    void* q = alloc(nq * 2, true);
    void* k = alloc(nk * 2, true);
    void* v = alloc(nk * 2, true);
    void* dout = alloc(nq * 2, true);
    void* o = alloc(nq * 2, false);
    auto* lse = static_cast<float*>(alloc(s.batch_heads * s.sq * 4, false));
    void* dq = alloc(nq * 2, false);
    void* dk = alloc(nk * 2, false);
    void* dv = alloc(nk * 2, false);
    void* ws = alloc(dsplan::cuda::FlashAttentionWorkspaceBytes(s), false);
    const double fwd_flops = s.ForwardFlops();

    for (const FlashAttentionTiles& t : dsplan::cuda::flash::CompiledConfigs(s.head_dim)) {
      auto time = [&](bool backward) {
        auto launch = [&]() {
          if (backward) {
            CHECK_OK(dsplan::cuda::FlashAttentionBackward(c.dtype, s, q, k, v, o, dout, lse, dq,
                                                          dk, dv, ws, st, t));
          } else {
            CHECK_OK(dsplan::cuda::FlashAttentionForward(c.dtype, s, q, k, v, o, lse, st, t));
          }
        };
        for (int i = 0; i < 3; ++i) launch();
        std::vector<double> ms;
        for (int i = 0; i < 10; ++i) {
          CHECK_CUDA(cudaMemsetAsync(flush, i & 0xff, flush_bytes, st));
          CHECK_CUDA(cudaEventRecord(e0, st));
          launch();
          CHECK_CUDA(cudaEventRecord(e1, st));
          CHECK_CUDA(cudaEventSynchronize(e1));
          float x = 0;
          CHECK_CUDA(cudaEventElapsedTime(&x, e0, e1));
          ms.push_back(x);
        }
        return Median(ms);
      };
      const double fms = time(false);  // also leaves O and lse for the backward
      const double bms = time(true);
      const std::string name = fmt::format("{} {}x{}x{} d{}{}", dsplan::PrecisionName(c.dtype),
                                           s.batch_heads, s.sq, s.sk, s.head_dim,
                                           s.causal ? " causal" : "");
      const std::string tiles =
          fmt::format("{}x{}/{}x{}", t.fwd_warps, t.fwd_block_n, t.bwd_warps, t.bwd_block_q);
      const std::string row =
          fmt::format("{:<28} {:>13} {:>10.3f} {:>10.1f} {:>10.3f} {:>10.1f}\n", name, tiles, fms,
                      fwd_flops / fms / 1e9, bms, 2.5 * fwd_flops / bms / 1e9);
      std::printf("%s", row.c_str());
      table += row;
    }
    CHECK_CUDA(cudaStreamSynchronize(st));
    for (void* p : bufs) CHECK_CUDA(cudaFree(p));
  }
  std::printf("\n# summary (the first tiles of each case are the runtime's default)\n%s",
              table.c_str());
  return 0;
}
