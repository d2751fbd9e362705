// The CUDA DeviceProbe: cuBLASLt GEMMs, cudaMemcpyAsync copies, the runtime's small kernels and
// NCCL collectives (NCCL loaded with dlopen, only when two or more GPUs are visible).
// Method and facts: docs/profiler.md.
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "core/units.h"
#include "runtime/cuda/cuda_common.h"
#include "runtime/cuda/flash_attention.h"
#include "runtime/cuda/kernels.h"
#include "runtime/profiler/device_probe.h"

namespace dsplan {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kWorkspaceBytes = 32u << 20;

// A device (or pinned/pageable host) buffer that only grows.
struct DeviceBuffer {
  void* p = nullptr;
  size_t bytes = 0;
  Status Ensure(size_t want, int fill_dtype, uint32_t seed, cudaStream_t s) {
    if (want <= bytes) return Status();
    if (p) cudaFree(p);
    p = nullptr;
    bytes = 0;
    DSPLAN_CUDA_TRY(cudaMalloc(&p, want));
    bytes = want;
    if (fill_dtype >= 0) {
      const int64_t elem = fill_dtype == 0 ? 4 : 2;
      int rc = cuda::FillUniform(p, static_cast<int64_t>(want) / elem, fill_dtype, seed, s);
      if (rc != 0) {
        return Status::CudaError(fmt::format("fill kernel: {}",
                                             cudaGetErrorString(static_cast<cudaError_t>(rc))));
      }
    }
    return Status();
  }
  void Release() {
    if (p) cudaFree(p);
    p = nullptr;
    bytes = 0;
  }
};

using cuda::Nccl;

#define DSPLAN_NCCL_TRY(expr)                                                                  \
  do {                                                                                         \
    ncclResult_t e_ = (expr);                                                                  \
    if (e_ != ncclSuccess) {                                                                   \
      return Status::NcclError(fmt::format("{}:{}: {}: {}", __FILE__, __LINE__, #expr,        \
                                           nccl_.GetErrorString(e_)));                         \
    }                                                                                          \
  } while (0)

class CudaProbe : public DeviceProbe {
 public:
  CudaProbe() {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      reason_ = fmt::format("cudaGetDeviceCount: {}", cudaGetErrorString(e));
      count_ = 0;
    } else {
      count_ = n;
      if (n == 0) reason_ = "cudaGetDeviceCount found no GPU";
    }
  }

  ~CudaProbe() override {
    for (auto* b : {&a_, &b_, &c_, &flush_, &src_, &dst_, &dev_}) b->Release();
    for (DeviceBuffer& b : attn_) b.Release();
    if (pinned_) cudaFreeHost(pinned_);
    std::free(pageable_);
    if (workspace_) cudaFree(workspace_);
    for (auto& r : ranks_) {
      if (nccl_.CommDestroy && r.comm) nccl_.CommDestroy(r.comm);
      cudaSetDevice(r.device);
      if (r.send) cudaFree(r.send);
      if (r.recv) cudaFree(r.recv);
      if (r.stream) cudaStreamDestroy(r.stream);
    }
    if (count_ > 0) {
      cudaSetDevice(0);
      for (cudaEvent_t ev : events_) cudaEventDestroy(ev);
      if (stream_) cudaStreamDestroy(stream_);
    }
  }

  int DeviceCount() override { return count_; }
  std::string UnavailableReason() override { return reason_; }

  Result<GpuInfo> Info() override {
    DSPLAN_RETURN_IF_ERROR(Init());
    GpuInfo g;
    cudaDeviceProp prop;
    DSPLAN_CUDA_TRY(cudaGetDeviceProperties(&prop, 0));
    g.name = prop.name;
    g.sm_count = prop.multiProcessorCount;
    g.l2_bytes = prop.l2CacheSize;
    g.cc_major = prop.major;
    g.cc_minor = prop.minor;
    size_t free_b = 0, total_b = 0;
    DSPLAN_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b));
    g.total_bytes = static_cast<int64_t>(total_b);
    int rt = 0, drv = 0;
    cudaRuntimeGetVersion(&rt);
    cudaDriverGetVersion(&drv);
    g.versions = fmt::format("CUDA runtime {}.{}, driver API {}.{}, cuBLASLt {}", rt / 1000,
                             rt % 1000 / 10, drv / 1000, drv % 1000 / 10, cublasLtGetVersion());
    if (count_ > 1 && nccl_.Load().ok()) {
      int v = 0;
      nccl_.GetVersion(&v);
      g.versions += fmt::format(", NCCL {}", v);
    }
    l2_bytes_ = g.l2_bytes;
    return g;
  }

  Result<int64_t> ContextBytes() override {
    DSPLAN_RETURN_IF_ERROR(Init());
    size_t free_b = 0, total_b = 0;
    DSPLAN_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b));
    return static_cast<int64_t>(total_b - free_b) - static_cast<int64_t>(allocated_);
  }

  Result<Timing> Gemm(Precision dtype, GemmLayout layout, int64_t m, int64_t n, int64_t k,
                      int64_t batch, const Repeats& r) override {
    DSPLAN_RETURN_IF_ERROR(Init());
    if (dtype == Precision::kFp32) return Status::Unsupported("fp32 GEMMs are not profiled");
    const int fill = dtype == Precision::kBf16 ? 1 : 2;
    DSPLAN_RETURN_IF_ERROR(EnsureFlush());  // reads the L2 size
    // Operands as a training step meets them: not in L2 (other kernels ran since they were
    // written), without a flush that leaves L2 full of dirty lines to write back during the
    // GEMM. Consecutive repeats use different copies of A, B and C spanning 3x the L2.
    const int64_t sa = k * m * 2 * batch, sb = k * n * 2 * batch, sc = m * n * 2 * batch;
    const int copies = static_cast<int>(
        std::clamp<int64_t>((3 * l2_bytes_ + sa + sb + sc - 1) / (sa + sb + sc), 1, 64));
    DSPLAN_RETURN_IF_ERROR(a_.Ensure(sb * copies, fill, 1, stream_));
    DSPLAN_RETURN_IF_ERROR(b_.Ensure(sa * copies, fill, 2, stream_));
    DSPLAN_RETURN_IF_ERROR(c_.Ensure(sc * copies, fill, 3, stream_));
    // torch.nn.Linear's three products, as the CUDA executor issues them: the forward X[m,k]
    // times W[n,k] transposed (nt); the input gradient dY[m,k'] W (nn); the weight gradient
    // dY^T X with A stored [k,m] (tn).
    const bool ta = layout == GemmLayout::kTN, tb = layout == GemmLayout::kNT;
    int i = 0;
    auto launch = [&]() -> Status {
      const int j = i++ % copies;
      return gemm_.Run(dtype, ta, tb, m, n, k, batch, static_cast<char*>(b_.p) + j * sa, m * k,
                       static_cast<char*>(a_.p) + j * sb, k * n,
                       static_cast<char*>(c_.p) + j * sc, m * n, stream_);
    };
    return TimeWithEvents(r, launch, /*flush=*/false);
  }

  Result<Timing> StreamLaunches(int64_t bytes, int launches, const Repeats& r) override {
    DSPLAN_RETURN_IF_ERROR(Init());
    // Each launch reads bytes/2 and writes bytes/2 (whole 16-byte vectors) at a fresh offset of
    // a buffer at least 4x the L2 and 4x the launch, as the executor's operand ring does.
    DSPLAN_RETURN_IF_ERROR(EnsureFlush());  // also reads the L2 size
    const int64_t half = std::max<int64_t>(16, bytes / 2 / 16 * 16);
    const int64_t cap = std::max<int64_t>({4 * l2_bytes_, 8 * half, int64_t{64} << 20});
    DSPLAN_RETURN_IF_ERROR(src_.Ensure(cap, 0, 4, stream_));
    int64_t off = 0;
    char* base = static_cast<char*>(src_.p);
    return TimeWithEvents(r, [&]() -> Status {
      for (int i = 0; i < launches; ++i) {
        if (off + 2 * half > cap) off = 0;
        int rc = cuda::Axpb(reinterpret_cast<const float*>(base + off),
                            reinterpret_cast<float*>(base + off + half), half / 4, 1.0001f, 0.5f,
                            stream_);
        DSPLAN_CUDA_TRY(static_cast<cudaError_t>(rc));
        off += 2 * half;
      }
      return Status();
    }, false);
  }

  Result<Timing> DeviceCopy(int64_t bytes, const Repeats& r) override {
    DSPLAN_RETURN_IF_ERROR(Init());
    DSPLAN_RETURN_IF_ERROR(src_.Ensure(bytes, 0, 4, stream_));
    DSPLAN_RETURN_IF_ERROR(dst_.Ensure(bytes, 0, 5, stream_));
    return TimeWithEvents(r, [&]() -> Status {
      DSPLAN_CUDA_TRY(cudaMemcpyAsync(dst_.p, src_.p, bytes, cudaMemcpyDeviceToDevice, stream_));
      return Status();
    }, false);
  }

  Result<Timing> Elementwise(int64_t bytes, const Repeats& r) override {
    DSPLAN_RETURN_IF_ERROR(Init());
    DSPLAN_RETURN_IF_ERROR(src_.Ensure(bytes, 0, 4, stream_));
    DSPLAN_RETURN_IF_ERROR(dst_.Ensure(bytes, 0, 5, stream_));
    return TimeWithEvents(r, [&]() -> Status {
      int rc = cuda::Axpb(static_cast<const float*>(src_.p), static_cast<float*>(dst_.p),
                          bytes / 4, 1.0001f, 0.5f, stream_);
      DSPLAN_CUDA_TRY(static_cast<cudaError_t>(rc));
      return Status();
    }, false);
  }

  Result<Timing> HostCopy(CopyKind kind, int64_t bytes, const Repeats& r) override {
    DSPLAN_RETURN_IF_ERROR(Init());
    const bool pinned = kind == CopyKind::kH2DPinned || kind == CopyKind::kD2HPinned;
    const bool h2d = kind == CopyKind::kH2DPinned || kind == CopyKind::kH2DPageable;
    DSPLAN_RETURN_IF_ERROR(dev_.Ensure(bytes, 0, 6, stream_));
    void* host = nullptr;
    if (pinned) {
      if (pinned_bytes_ < static_cast<size_t>(bytes)) {
        if (pinned_) cudaFreeHost(pinned_);
        pinned_ = nullptr;
        pinned_bytes_ = 0;
        DSPLAN_CUDA_TRY(cudaHostAlloc(&pinned_, bytes, cudaHostAllocDefault));
        pinned_bytes_ = bytes;
        std::memset(pinned_, 1, bytes);
      }
      host = pinned_;
    } else {
      if (pageable_bytes_ < static_cast<size_t>(bytes)) {
        std::free(pageable_);
        pageable_ = std::malloc(bytes);
        if (!pageable_) return Status::IoError("cannot allocate pageable host memory");
        pageable_bytes_ = bytes;
        std::memset(pageable_, 1, bytes);  // first touch outside the timing
      }
      host = pageable_;
    }
    return TimeWithEvents(r, [&]() -> Status {
      DSPLAN_CUDA_TRY(h2d ? cudaMemcpyAsync(dev_.p, host, bytes, cudaMemcpyHostToDevice, stream_)
                          : cudaMemcpyAsync(host, dev_.p, bytes, cudaMemcpyDeviceToHost, stream_));
      return Status();
    }, false);
  }

  Result<Timing> KernelLaunch(const Repeats& r) override {
    DSPLAN_RETURN_IF_ERROR(Init());
    constexpr int kLaunches = 1000;
    std::vector<double> samples;
    for (int i = 0; i < r.warmup + r.timed; ++i) {
      auto t0 = Clock::now();
      for (int j = 0; j < kLaunches; ++j) {
        DSPLAN_CUDA_TRY(static_cast<cudaError_t>(cuda::EmptyKernel(stream_)));
      }
      DSPLAN_CUDA_TRY(cudaStreamSynchronize(stream_));
      if (i >= r.warmup) {
        samples.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / kLaunches);
      }
    }
    return Summarize(samples);
  }

  Result<double> PinnedAllocBytesPerS(int64_t bytes) override {
    DSPLAN_RETURN_IF_ERROR(Init());
    std::vector<double> samples;
    for (int i = 0; i < 4; ++i) {
      auto t0 = Clock::now();
      void* p = nullptr;
      DSPLAN_CUDA_TRY(cudaHostAlloc(&p, bytes, cudaHostAllocDefault));
      DSPLAN_CUDA_TRY(cudaFreeHost(p));
      if (i > 0) samples.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    return bytes / Summarize(samples).median_s;
  }

  Result<Timing> Collective(dsplan::Collective coll, int ranks, int64_t bytes,
                            const Repeats& r) override {
    DSPLAN_RETURN_IF_ERROR(Init());
    if (ranks < 2 || ranks > count_) {
      return Status::InvalidArgument(fmt::format("{} ranks requested, {} GPUs visible", ranks, count_));
    }
    DSPLAN_RETURN_IF_ERROR(InitNccl(ranks));
    const size_t unit = 2 * static_cast<size_t>(ranks);  // bf16 elements, divisible by ranks
    const size_t s = std::max(unit, static_cast<size_t>(bytes) / unit * unit);
    for (auto& rk : ranks_) {
      if (rk.bytes < s) {
        DSPLAN_CUDA_TRY(cudaSetDevice(rk.device));
        if (rk.send) cudaFree(rk.send);
        if (rk.recv) cudaFree(rk.recv);
        rk.send = rk.recv = nullptr;
        DSPLAN_CUDA_TRY(cudaMalloc(&rk.send, s));
        DSPLAN_CUDA_TRY(cudaMalloc(&rk.recv, s));
        DSPLAN_CUDA_TRY(cudaMemset(rk.send, 0x3c, s));  // bf16 ~1.1: no denormals, not zero
        rk.bytes = s;
      }
    }
    const size_t count = s / 2;
    auto once = [&]() -> Status {
      DSPLAN_NCCL_TRY(nccl_.GroupStart());
      for (auto& rk : ranks_) {
        switch (coll) {
          case dsplan::Collective::kAllReduce:
            DSPLAN_NCCL_TRY(nccl_.AllReduce(rk.send, rk.recv, count, ncclBfloat16, ncclSum, rk.comm,
                                            rk.stream));
            break;
          case dsplan::Collective::kReduceScatter:
            DSPLAN_NCCL_TRY(nccl_.ReduceScatter(rk.send, rk.recv, count / ranks, ncclBfloat16,
                                                ncclSum, rk.comm, rk.stream));
            break;
          case dsplan::Collective::kAllGather:
            DSPLAN_NCCL_TRY(nccl_.AllGather(rk.send, rk.recv, count / ranks, ncclBfloat16, rk.comm,
                                            rk.stream));
            break;
          default:
            nccl_.GroupEnd();
            return Status::Unsupported(fmt::format("{} is not profiled", CollectiveName(coll)));
        }
      }
      DSPLAN_NCCL_TRY(nccl_.GroupEnd());
      return Status();
    };
    auto sync = [&]() -> Status {
      for (auto& rk : ranks_) {
        DSPLAN_CUDA_TRY(cudaSetDevice(rk.device));
        DSPLAN_CUDA_TRY(cudaStreamSynchronize(rk.stream));
      }
      return Status();
    };
    for (int i = 0; i < r.warmup; ++i) DSPLAN_RETURN_IF_ERROR(once());
    DSPLAN_RETURN_IF_ERROR(sync());
    // As nccl-tests: launch |timed| iterations back to back, wait for every stream, divide. Three
    // such batches give the spread.
    std::vector<double> samples;
    for (int b = 0; b < 3; ++b) {
      auto t0 = Clock::now();
      for (int i = 0; i < std::max(1, r.timed); ++i) DSPLAN_RETURN_IF_ERROR(once());
      DSPLAN_RETURN_IF_ERROR(sync());
      samples.push_back(std::chrono::duration<double>(Clock::now() - t0).count() /
                        std::max(1, r.timed));
    }
    cudaSetDevice(0);
    return Summarize(samples);
  }

  Result<AttentionTiming> Attention(Precision dtype, int64_t head_dim, bool causal, int64_t seq,
                                    int64_t batch_heads, const Repeats& r) override {
    DSPLAN_RETURN_IF_ERROR(Init());
    DSPLAN_RETURN_IF_ERROR(cuda::FlashAttentionSupported(dtype, head_dim));
    DSPLAN_RETURN_IF_ERROR(EnsureFlush());
    const cuda::AttentionShape shape{batch_heads, seq, seq, head_dim, causal, 0.0};
    const size_t t = static_cast<size_t>(batch_heads * seq * head_dim * 2);
    const int fill = dtype == Precision::kFp16 ? 2 : 1;
    // q, k, v, dO random; o, lse from the forward; dq, dk, dv, workspace written.
    enum { kQ, kK, kV, kDo, kO, kLse, kDq, kDk, kDv, kWs };
    for (int i : {kQ, kK, kV, kDo}) {
      // Fresh contents whenever the buffer grows (Ensure fills only then).
      DSPLAN_RETURN_IF_ERROR(attn_[i].Ensure(t, fill, 10 + i, stream_));
    }
    for (int i : {kO, kDq, kDk, kDv}) DSPLAN_RETURN_IF_ERROR(attn_[i].Ensure(t, -1, 0, stream_));
    DSPLAN_RETURN_IF_ERROR(
        attn_[kLse].Ensure(static_cast<size_t>(batch_heads * seq * 4), -1, 0, stream_));
    DSPLAN_RETURN_IF_ERROR(attn_[kWs].Ensure(
        static_cast<size_t>(cuda::FlashAttentionWorkspaceBytes(shape)), -1, 0, stream_));
    auto* lse = static_cast<float*>(attn_[kLse].p);
    AttentionTiming out;
    DSPLAN_ASSIGN_OR_RETURN(out.forward, TimeWithEvents(r, [&]() -> Status {
      return cuda::FlashAttentionForward(dtype, shape, attn_[kQ].p, attn_[kK].p, attn_[kV].p,
                                         attn_[kO].p, lse, stream_);
    }, /*flush=*/true));
    DSPLAN_ASSIGN_OR_RETURN(out.backward, TimeWithEvents(r, [&]() -> Status {
      return cuda::FlashAttentionBackward(dtype, shape, attn_[kQ].p, attn_[kK].p, attn_[kV].p,
                                          attn_[kO].p, attn_[kDo].p, lse, attn_[kDq].p,
                                          attn_[kDk].p, attn_[kDv].p, attn_[kWs].p, stream_);
    }, /*flush=*/true));
    return out;
  }

 private:
  struct Rank {
    int device = 0;
    ncclComm_t comm = nullptr;
    cudaStream_t stream = nullptr;
    void* send = nullptr;
    void* recv = nullptr;
    size_t bytes = 0;
  };

  Status Init() {
    if (count_ == 0) return Status::Unsupported(reason_);
    if (ready_) return Status();
    DSPLAN_CUDA_TRY(cudaSetDevice(0));
    DSPLAN_CUDA_TRY(cudaFree(nullptr));  // creates the primary context
    DSPLAN_CUDA_TRY(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    // The workspace is an ordinary allocation; ContextBytes subtracts what this probe allocated.
    DSPLAN_CUDA_TRY(cudaMalloc(&workspace_, kWorkspaceBytes));
    allocated_ += kWorkspaceBytes;
    DSPLAN_RETURN_IF_ERROR(gemm_.Init(workspace_, kWorkspaceBytes));
    ready_ = true;
    return Status();
  }

  Status EnsureFlush() {
    if (l2_bytes_ == 0) {
      int l2 = 0;
      DSPLAN_CUDA_TRY(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
      l2_bytes_ = l2 > 0 ? l2 : 64 << 20;
    }
    return flush_.Ensure(static_cast<size_t>(2 * l2_bytes_), -1, 0, stream_);
  }

  Status InitNccl(int ranks) {
    if (static_cast<int>(ranks_.size()) == ranks) return Status();
    if (!ranks_.empty()) return Status::Unsupported("NCCL communicator already built for another size");
    DSPLAN_RETURN_IF_ERROR(nccl_.Load());
    // NVLink SHARP multicast stays off unless the user set it (shared machines: KINDS.md).
    setenv("NCCL_NVLS_ENABLE", "0", 0);
    std::vector<int> devs(ranks);
    std::vector<ncclComm_t> comms(ranks);
    for (int i = 0; i < ranks; ++i) devs[i] = i;
    DSPLAN_NCCL_TRY(nccl_.CommInitAll(comms.data(), ranks, devs.data()));
    ranks_.resize(ranks);
    for (int i = 0; i < ranks; ++i) {
      ranks_[i].device = i;
      ranks_[i].comm = comms[i];
      DSPLAN_CUDA_TRY(cudaSetDevice(i));
      DSPLAN_CUDA_TRY(cudaStreamCreateWithFlags(&ranks_[i].stream, cudaStreamNonBlocking));
    }
    DSPLAN_CUDA_TRY(cudaSetDevice(0));
    return Status();
  }

  // Warm-up launches, then |timed| repeats, each between two events (optionally after an L2
  // flush outside the events); the median of the per-repeat times.
  template <typename F>
  Result<Timing> TimeWithEvents(const Repeats& r, F&& launch, bool flush) {
    for (int i = 0; i < r.warmup; ++i) DSPLAN_RETURN_IF_ERROR(launch());
    const size_t need = 2 * static_cast<size_t>(r.timed);
    while (events_.size() < need) {
      cudaEvent_t ev;
      DSPLAN_CUDA_TRY(cudaEventCreate(&ev));
      events_.push_back(ev);
    }
    for (int i = 0; i < r.timed; ++i) {
      if (flush) {
        DSPLAN_CUDA_TRY(cudaMemsetAsync(flush_.p, i & 0xff, flush_.bytes, stream_));
      }
      DSPLAN_CUDA_TRY(cudaEventRecord(events_[2 * i], stream_));
      DSPLAN_RETURN_IF_ERROR(launch());
      DSPLAN_CUDA_TRY(cudaEventRecord(events_[2 * i + 1], stream_));
    }
    DSPLAN_CUDA_TRY(cudaStreamSynchronize(stream_));
    std::vector<double> samples;
    for (int i = 0; i < r.timed; ++i) {
      float ms = 0;
      DSPLAN_CUDA_TRY(cudaEventElapsedTime(&ms, events_[2 * i], events_[2 * i + 1]));
      samples.push_back(ms * 1e-3);
    }
    if (samples.empty()) return Status::InvalidArgument("no timed repeats");
    return Summarize(samples);
  }

  int count_ = 0;
  std::string reason_;
  bool ready_ = false;
  cuda::LtMatmul gemm_;
  cudaStream_t stream_ = nullptr;
  void* workspace_ = nullptr;
  size_t allocated_ = 0;
  int64_t l2_bytes_ = 0;
  DeviceBuffer a_, b_, c_, flush_, src_, dst_, dev_;
  DeviceBuffer attn_[10];  // fused attention's operands (Attention)
  void* pinned_ = nullptr;
  size_t pinned_bytes_ = 0;
  void* pageable_ = nullptr;
  size_t pageable_bytes_ = 0;
  std::vector<cudaEvent_t> events_;
  Nccl nccl_;
  std::vector<Rank> ranks_;
};

}  // namespace

std::unique_ptr<DeviceProbe> MakeGpuProbe() { return std::make_unique<CudaProbe>(); }

}  // namespace dsplan
