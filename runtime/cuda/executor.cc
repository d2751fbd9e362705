// The CUDA executor (runtime/executor.h): runs a StepGraph's tasks on the GPU, the host and the
// NVMe drive, and measures them. What each task runs, what is real and what stands in for
// PyTorch/DeepSpeed, the operand memory and the timing method: docs/runtime.md.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "core/fused_attention.h"
#include "core/text.h"
#include "runtime/comm.h"
#include "runtime/cuda/cuda_common.h"
#include "runtime/cuda/flash_attention.h"
#include "runtime/cuda/kernels.h"
#include "runtime/execution_io.h"
#include "runtime/executor.h"
#include "runtime/cpu_kernels/cpu_adam.h"
#include "runtime/cpu_kernels/direct_io.h"
#include "simulator/caching_allocator.h"
#include "simulator/cost_model.h"

namespace dsplan {
namespace {

// The CUDA executor: MakeGpuExecutor's answer in a build with CUDA.
class CudaExecutor final : public Executor {
 public:
  const char* name() const override { return "cuda"; }
  bool available() const override { return true; }
  Result<Execution> Run(const StepGraph& graph, const Workload& workload, const Plan& plan,
                        const ExecuteOptions& options) override;
};

using Clock = std::chrono::steady_clock;
using cuda::Nccl;

// PyTorch's cuBLAS workspace on Hopper (CUBLAS_WORKSPACE_CONFIG default :4096:8 = 32 MiB).
constexpr size_t kWorkspaceBytes = size_t{32} << 20;
constexpr int64_t kAlign = 256;
constexpr int kMaxLaunches = kRuntimeMaxStreamLaunches;  // the cost model splits tasks alike

int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

bool IsHost(Resource r) { return r == Resource::kCpu || r == Resource::kNvme; }
int StreamOf(Resource r) {
  switch (r) {
    case Resource::kCompute: return 0;
    case Resource::kComm: return 1;
    case Resource::kH2D: return 2;
    case Resource::kD2H: return 3;
    default: return -1;
  }
}
bool IsLayerTask(TaskKind k) {
  return k == TaskKind::kForward || k == TaskKind::kRecompute || k == TaskKind::kBackward;
}
int64_t ElementBytes(Precision p) { return p == Precision::kFp32 ? 4 : 2; }
int FillDtype(Precision p) { return p == Precision::kFp32 ? 0 : p == Precision::kBf16 ? 1 : 2; }

// Executing a step needs this machine's GPUs; say so, and where the prediction alone comes from.
Status NoDevice(cudaError_t e) {
  return Status::Unsupported(fmt::format(
      "no CUDA device ({}): executing the plan's step needs this machine's GPUs; run the same "
      "command on the GPU machine, or 'dsplan simulate' for the prediction alone",
      e != cudaSuccess ? cudaGetErrorString(e) : "none found"));
}

Status KernelStatus(int rc, const char* what) {
  if (rc == 0) return Status();
  return Status::CudaError(
      fmt::format("{}: {}", what, cudaGetErrorString(static_cast<cudaError_t>(rc))));
}


// cudaMalloc segments for the caching allocator; an out-of-memory cudaMalloc is reported, not an
// error.
class CudaSegments : public SegmentSource {
 public:
  Status Allocate(int64_t bytes, void** ptr, std::string* oom) override {
    *ptr = nullptr;
    const cudaError_t e = cudaMalloc(ptr, static_cast<size_t>(bytes));
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // not sticky: clear it
      *ptr = nullptr;
      *oom = fmt::format("cudaMalloc({} bytes): {}", bytes, cudaGetErrorString(e));
      return Status();
    }
    if (e != cudaSuccess) {
      return Status::CudaError(fmt::format("cudaMalloc({} bytes): {}", bytes,
                                           cudaGetErrorString(e)));
    }
    return Status();
  }
  void Release(void* ptr, int64_t) override { cudaFree(ptr); }
};

// NVML through dlopen, only to read the device's used memory before this process creates its
// CUDA context (cudaMemGetInfo needs one).
struct NvmlMemory {
  unsigned long long total, free, used;
};
Result<int64_t> UsedBeforeContext(int device) {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return Status::Unsupported("libnvidia-ml.so.1 not found");
  using InitFn = int (*)();
  using ByBusFn = int (*)(const char*, void**);
  using MemFn = int (*)(void*, NvmlMemory*);
  auto init = reinterpret_cast<InitFn>(dlsym(lib, "nvmlInit_v2"));
  auto shutdown = reinterpret_cast<InitFn>(dlsym(lib, "nvmlShutdown"));
  auto by_bus = reinterpret_cast<ByBusFn>(dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
  auto mem = reinterpret_cast<MemFn>(dlsym(lib, "nvmlDeviceGetMemoryInfo"));
  Result<int64_t> out = Status::Unsupported("NVML lacks an expected entry point");
  char bus[64] = {0};
  if (init && shutdown && by_bus && mem && cudaDeviceGetPCIBusId(bus, sizeof(bus), device) ==
                                               cudaSuccess) {
    if (init() == 0) {
      void* h = nullptr;
      NvmlMemory m{};
      if (by_bus(bus, &h) == 0 && mem(h, &m) == 0) {
        out = static_cast<int64_t>(m.total - m.free);
      } else {
        out = Status::Unsupported("NVML could not read the device's memory");
      }
      shutdown();
    }
  }
  dlclose(lib);
  return out;
}

// Device memory the kernels use as operands: spans handed out round-robin through a set of
// regions, so that consecutive operands are distinct memory (no artificial L2 hits).
class OperandRing {
 public:
  void Add(char* p, int64_t bytes) {
    if (p && bytes >= kAlign) regions_.push_back({p, bytes / kAlign * kAlign});
  }
  int64_t largest() const {
    int64_t l = 0;
    for (auto& r : regions_) l = std::max(l, r.second);
    return l;
  }
  char* Take(int64_t bytes) {
    bytes = RoundUp(std::max<int64_t>(bytes, 1), kAlign);
    for (size_t tries = 0; tries <= regions_.size() && !regions_.empty(); ++tries) {
      auto& [p, size] = regions_[cur_];
      if (off_ + bytes <= size) {
        char* out = p + off_;
        off_ += bytes;
        return out;
      }
      cur_ = (cur_ + 1) % regions_.size();
      off_ = 0;
    }
    return nullptr;
  }
  void Reset() { cur_ = 0, off_ = 0; }

 private:
  std::vector<std::pair<char*, int64_t>> regions_;
  size_t cur_ = 0;
  int64_t off_ = 0;
};

// Which attention path the workload's fused-attention ops take on this device (Execution's
// attention_path): the fused kernel for the dtypes and head dims it supports, else the tiled
// stand-in, with the reason.
std::string AttentionPath(const Workload& w, Precision p, bool device_ok,
                          const cudaDeviceProp& prop) {
  std::vector<int64_t> dims;
  for (const Layer& L : w.layers) {
    for (const Op& op : L.ops) {
      if (op.kind == OpKind::kAttention &&
          std::find(dims.begin(), dims.end(), op.k) == dims.end()) {
        dims.push_back(op.k);
      }
    }
  }
  if (dims.empty()) return "none (the workload has no fused-attention op)";
  std::string fused, tiled;
  for (int64_t d : dims) {
    std::string& into = device_ok && FusedAttentionSupports(p, d) ? fused : tiled;
    into += fmt::format("{}{}", into.empty() ? "" : ", ", d);
  }
  std::string out;
  if (!fused.empty()) {
    out = fmt::format("fused kernel (runtime/cuda/flash_attention, {}, head dim {})",
                      PrecisionName(p), fused);
  }
  if (!tiled.empty()) {
    const std::string why =
        device_ok ? fmt::format("the fused kernel supports {}", kFusedAttentionSupport)
                  : fmt::format("the fused kernel needs compute capability 8.0, this GPU is {}.{}",
                                prop.major, prop.minor);
    out += fmt::format("{}tiled-GEMM stand-in without softmax ({}, head dim {}: {})",
                       out.empty() ? "" : "; ", PrecisionName(p), tiled, why);
  }
  return out;
}

// Everything one rank (one GPU, one issuing thread) needs.
class Rank {
 public:
  Rank(const StepGraph& g, const Workload& w, const Plan& plan, const ExecuteOptions& o, int rank,
       int device, Nccl* nccl, ncclComm_t comm, std::atomic<bool>* abort, int64_t used_before)
      : g_(g), w_(w), plan_(plan), o_(o), rank_(rank), device_(device), nccl_(nccl),
        comm_(comm), abort_(abort), used_before_(used_before) {}
  ~Rank() { Teardown(); }

  Result<Execution> Run();

 private:
  struct Worker {
    std::thread th;
    std::mutex mu;
    std::condition_variable cv;
    std::deque<TaskId> q;
    bool stop = false;
  };

  Status Setup();
  Status SetupHost();
  Status SetupNvme();
  // Returns true when the step ran out of memory (e.oom_* filled).
  Result<bool> RunStep(bool measure, bool instrument, Execution& e);
  Status IssueGpuTask(TaskId id, cudaStream_t s, bool instrument);
  Status RunLayer(const Task& t, cudaStream_t s, bool instrument);
  Status RunOp(const Op& op, int layer, bool backward, cudaStream_t s);
  Status Gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t batch, const void* a,
              const void* b, void* c, cudaStream_t s);
  Status Attention(const Op& op, bool backward, cudaStream_t s);
  Status FusedAttention(const Op& op, bool backward, cudaStream_t s);
  Status StreamBytes(double bytes, int launches, cudaStream_t s);
  Status Collective(const Task& t, cudaStream_t s);
  Status Copy(const Task& t, cudaStream_t s);
  Status RunHostTask(TaskId id);
  void HostStream(double bytes);
  char* TakeOrFail(int64_t bytes);
  char* Weight(int layer, int64_t offset, int64_t bytes);
  void WorkerLoop(Worker* wk);
  void MarkDone(TaskId id);
  void WaitDone(TaskId id);
  void Teardown();
  void SetError(const Status& s);

  const StepGraph& g_;
  const Workload& w_;
  const Plan& plan_;
  const ExecuteOptions& o_;
  const int rank_, device_;
  Nccl* nccl_;
  ncclComm_t comm_;
  std::atomic<bool>* abort_;

  bool context_ready_ = false;
  cudaStream_t streams_[4] = {nullptr, nullptr, nullptr, nullptr};
  void* workspace_ = nullptr;
  cuda::LtMatmul gemm_;
  std::vector<cudaEvent_t> start_ev_, end_ev_, op_ev_;
  cudaEvent_t step_ev_ = nullptr;
  size_t op_ev_used_ = 0;
  struct OpMark {
    TaskId task;
    int cls;  // 0 gemm, 1 attention, 2 memory
    size_t ev;
  };
  std::vector<OpMark> op_marks_;

  CudaSegments segments_;
  std::unique_ptr<CachingAllocator> alloc_;
  std::unique_ptr<EffectReplayer> replay_;
  void* scratch_ = nullptr;
  int64_t scratch_bytes_ = 0;
  OperandRing ring_;
  char* params_ = nullptr;  // the params16 block (weights)
  int64_t params_bytes_ = 0;
  std::vector<int64_t> layer_offset_;  // bytes into params16
  // Query rows per block of the attention stand-in; DSPLAN_ATTENTION_BLOCK overrides (a knob for
  // studying the stand-in, docs/runtime.md).
  int64_t attention_block_ = 128;
  // The fused attention kernel runs on this device (compute capability 8.0 or newer); each op
  // still needs a dtype and head dim it supports (core/fused_attention.h).
  bool fused_attention_ok_ = false;
  int64_t op_weight_offset_ = 0;  // bytes into the current layer's weights
  TaskId current_task_ = -1;

  // Host.
  char* pinned_ = nullptr;
  int64_t pinned_bytes_ = 0;
  char* pageable_ = nullptr;
  int64_t pageable_bytes_ = 0;
  int64_t pinned_cursor_ = 0, pageable_cursor_ = 0;            // CPU Adam's carve-out
  int64_t pinned_cursor_copy_ = 0, pageable_cursor_copy_ = 0;  // where the next copy lands
  std::vector<char*> extra_host_;
  int64_t extra_host_bytes_ = 0;
  float* adam_[4] = {nullptr, nullptr, nullptr, nullptr};  // p, g, m, v
  int64_t adam_elements_ = 0;
  int cpu_threads_ = 1;
  int64_t adam_step_ = 1;

  // NVMe.
  std::string nvme_file_;
  int nvme_fd_ = -1;
  int64_t nvme_file_bytes_ = 0;
  char* nvme_buf_ = nullptr;
  int64_t nvme_block_ = 1 << 20;
  int nvme_qd_ = 8;
  bool uring_ok_ = true;
  std::vector<int64_t> nvme_offset_;  // per task
  int64_t nvme_written_ = 0;

  // Host workers (kCpu, kNvme) and the step's bookkeeping.
  Worker workers_[2];
  bool workers_started_ = false;
  std::mutex done_mu_;
  std::condition_variable done_cv_;
  std::vector<int> done_gen_;
  int gen_ = 0;
  Clock::time_point host_t0_;
  std::vector<double> host_start_, host_end_;
  std::mutex err_mu_;
  Status host_error_;
  bool stop_step_ = false;

  // Measurements.
  std::vector<std::vector<double>> starts_, ends_;
  int64_t used_before_ = 0;
  int64_t used_peak_ = 0;
};

void Rank::SetError(const Status& s) {
  std::lock_guard<std::mutex> l(err_mu_);
  if (host_error_.ok()) host_error_ = s;
  abort_->store(true);
}

char* Rank::TakeOrFail(int64_t bytes) { return ring_.Take(bytes); }

char* Rank::Weight(int layer, int64_t offset, int64_t bytes) {
  if (params_ && bytes <= params_bytes_) {
    int64_t off = RoundUp(layer_offset_[layer] + offset, kAlign) % params_bytes_;
    if (off + bytes > params_bytes_) off = 0;
    return params_ + off;
  }
  return ring_.Take(bytes);
}

Status Rank::Setup() {
  if (const char* b = std::getenv("DSPLAN_ATTENTION_BLOCK")) {
    attention_block_ = std::max(16, std::atoi(b));
  }
  DSPLAN_CUDA_TRY(cudaSetDevice(device_));
  DSPLAN_CUDA_TRY(cudaFree(nullptr));  // the primary context
  context_ready_ = true;
  int cc_major = 0;
  DSPLAN_CUDA_TRY(cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, device_));
  fused_attention_ok_ = cc_major >= 8;
  for (auto& s : streams_) DSPLAN_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  DSPLAN_CUDA_TRY(cudaMalloc(&workspace_, kWorkspaceBytes));
  DSPLAN_RETURN_IF_ERROR(gemm_.Init(workspace_, kWorkspaceBytes));
  const int n = g_.size();
  start_ev_.resize(n, nullptr);
  end_ev_.resize(n, nullptr);
  for (int i = 0; i < n; ++i) {
    DSPLAN_CUDA_TRY(cudaEventCreate(&start_ev_[i]));
    DSPLAN_CUDA_TRY(cudaEventCreate(&end_ev_[i]));
  }
  DSPLAN_CUDA_TRY(cudaEventCreate(&step_ev_));
  done_gen_.assign(n, -1);
  host_start_.assign(n, 0);
  host_end_.assign(n, 0);
  starts_.assign(n, {});
  ends_.assign(n, {});
  // Weights: each layer's parameters at its offset in the params16 block.
  layer_offset_.assign(w_.layers.size() + 1, 0);
  for (size_t l = 0; l < w_.layers.size(); ++l) {
    layer_offset_[l + 1] = layer_offset_[l] + w_.layers[l].params * ElementBytes(plan_.precision);
  }
  return Status();
}

Status Rank::SetupHost() {
  // Host buffers sized from the graph's pinned / pageable peaks (initial state + effects in
  // program order), plus what the copies and CPU Adam need beyond them.
  int64_t cur[2] = {0, 0}, peak[2] = {0, 0};
  const int sp[2] = {static_cast<int>(MemSpace::kPinnedHost),
                     static_cast<int>(MemSpace::kPageableHost)};
  for (int i = 0; i < 2; ++i) {
    for (int64_t b : g_.initial[sp[i]]) cur[i] += b;
    peak[i] = cur[i];
  }
  int64_t copy_bytes[2] = {0, 0};
  for (TaskId id = 0; id < g_.size(); ++id) {
    const Task& t = g_.task(id);
    for (int ph = 0; ph < 2; ++ph) {
      for (const MemEffect* e = g_.effects_begin(id); e != g_.effects_end(id); ++e) {
        if (e->at_end != (ph == 1)) continue;
        for (int i = 0; i < 2; ++i) {
          if (static_cast<int>(e->space) != sp[i]) continue;
          cur[i] += e->bytes;
          peak[i] = std::max(peak[i], cur[i]);
        }
      }
    }
    if (t.kind == TaskKind::kCopyD2H || t.kind == TaskKind::kCopyH2D) {
      copy_bytes[t.pinned ? 0 : 1] = std::max<int64_t>(copy_bytes[t.pinned ? 0 : 1],
                                                        static_cast<int64_t>(t.bytes));
    }
    if (t.kind == TaskKind::kCpuOptimizer) {
      adam_elements_ = std::max<int64_t>(adam_elements_, static_cast<int64_t>(t.elements));
    }
  }
  // A buffer at least as large as the largest copy, capped at 256 MiB when the graph holds no
  // host memory of that kind (copies then wrap around it).
  for (int i = 0; i < 2; ++i) {
    if (peak[i] == 0 && copy_bytes[i] > 0) peak[i] = std::min<int64_t>(copy_bytes[i], 256 << 20);
  }
  pinned_bytes_ = RoundUp(peak[0], 4096);
  pageable_bytes_ = RoundUp(peak[1], 4096);
  if (pinned_bytes_ > 0) {
    DSPLAN_CUDA_TRY(cudaHostAlloc(reinterpret_cast<void**>(&pinned_), pinned_bytes_,
                                  cudaHostAllocDefault));
  }
  if (pageable_bytes_ > 0) {
    pageable_ = static_cast<char*>(std::aligned_alloc(4096, pageable_bytes_));
    if (!pageable_) {
      return Status::IoError(fmt::format("cannot allocate {} bytes of pageable host memory",
                                         pageable_bytes_));
    }
  }
  cpu_threads_ = o_.cpu_threads > 0 ? o_.cpu_threads
                                    : std::max(1u, std::thread::hardware_concurrency());
  // CPU Adam's four fp32 arrays: carved from the host buffers (master and grads are pinned,
  // Adam states pageable in DeepSpeed), allocated apart when the graph's buffers are smaller.
  if (adam_elements_ > 0) {
    const int64_t each = RoundUp(adam_elements_ * 4, 4096);
    for (int i = 0; i < 4; ++i) {
      if (pinned_cursor_ + each <= pinned_bytes_) {
        adam_[i] = reinterpret_cast<float*>(pinned_ + pinned_cursor_);
        pinned_cursor_ += each;
      } else if (pageable_cursor_ + each <= pageable_bytes_) {
        adam_[i] = reinterpret_cast<float*>(pageable_ + pageable_cursor_);
        pageable_cursor_ += each;
      } else {
        char* p = static_cast<char*>(std::aligned_alloc(4096, each));
        if (!p) return Status::IoError("cannot allocate host memory for CPU Adam");
        extra_host_.push_back(p);
        extra_host_bytes_ += each;
        adam_[i] = reinterpret_cast<float*>(p);
      }
    }
  }
  // First touch (pageable pages fault in here, not in a timed task) with finite values, on all
  // threads.
  auto fill = [&](char* base, int64_t bytes) {
    std::vector<std::thread> th;
    const int64_t n = bytes / 4, per = (n + cpu_threads_ - 1) / cpu_threads_;
    for (int t = 0; t < cpu_threads_; ++t) {
      th.emplace_back([=] {
        float* f = reinterpret_cast<float*>(base);
        const int64_t lo = t * per, hi = std::min(n, lo + per);
        for (int64_t i = lo; i < hi; ++i) f[i] = 1e-3f * static_cast<float>((i * 2654435761u) % 1000 + 1);
      });
    }
    for (auto& x : th) x.join();
  };
  if (pinned_) fill(pinned_, pinned_bytes_);
  if (pageable_) fill(pageable_, pageable_bytes_);
  for (char* p : extra_host_) fill(p, RoundUp(adam_elements_ * 4, 4096));
  return Status();
}

Status Rank::SetupNvme() {
  bool any = false;
  int64_t reads = 0, writes = 0;
  nvme_offset_.assign(g_.size(), 0);
  for (TaskId id = 0; id < g_.size(); ++id) {
    const Task& t = g_.task(id);
    if (t.kind != TaskKind::kNvmeRead && t.kind != TaskKind::kNvmeWrite) continue;
    any = true;
    int64_t& cursor = t.kind == TaskKind::kNvmeRead ? reads : writes;
    nvme_offset_[id] = cursor;
    cursor += RoundUp(static_cast<int64_t>(t.bytes), nvme_block_);
  }
  if (!any) return Status();
  std::string dir = !o_.nvme_path.empty() ? o_.nvme_path
                    : !plan_.zero.offload_optimizer.nvme_path.empty()
                        ? plan_.zero.offload_optimizer.nvme_path
                        : plan_.zero.offload_param.nvme_path;
  if (dir.empty()) dir = "/tmp";
  nvme_block_ = std::max<int64_t>(4096, RoundUp(plan_.aio.block_size, 4096));
  nvme_qd_ = static_cast<int>(std::max<int64_t>(1, plan_.aio.queue_depth));
  // Offsets with the final block size.
  reads = writes = 0;
  for (TaskId id = 0; id < g_.size(); ++id) {
    const Task& t = g_.task(id);
    if (t.kind != TaskKind::kNvmeRead && t.kind != TaskKind::kNvmeWrite) continue;
    int64_t& cursor = t.kind == TaskKind::kNvmeRead ? reads : writes;
    nvme_offset_[id] = cursor;
    cursor += RoundUp(static_cast<int64_t>(t.bytes), nvme_block_);
  }
  nvme_file_bytes_ = std::max({reads, writes, nvme_block_});
  nvme_file_ = fmt::format("{}/dsplan-swap-{}-rank{}.bin", dir, getpid(), rank_);
  nvme_fd_ = open(nvme_file_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0600);
  if (nvme_fd_ < 0) {
    const int err = errno;
    nvme_file_.clear();
    return Status::InvalidArgument(fmt::format(
        "nvme_path '{}': cannot create a swap file with O_DIRECT there: {}{}", dir,
        std::strerror(err),
        err == EINVAL ? " (a filesystem without O_DIRECT, such as tmpfs: pass a folder on the "
                        "NVMe drive)"
                      : ""));
  }
  if (posix_fallocate(nvme_fd_, 0, nvme_file_bytes_) != 0) {
    return Status::IoError(fmt::format("nvme_path '{}': cannot reserve {} bytes for the swap file",
                                       dir, nvme_file_bytes_));
  }
  nvme_buf_ = static_cast<char*>(std::aligned_alloc(4096, nvme_block_ * nvme_qd_));
  if (!nvme_buf_) return Status::IoError("cannot allocate the NVMe staging buffers");
  std::memset(nvme_buf_, 1, nvme_block_ * nvme_qd_);
  return Status();
}

void Rank::Teardown() {
  for (Worker& wk : workers_) {
    {
      std::lock_guard<std::mutex> l(wk.mu);
      wk.stop = true;
    }
    wk.cv.notify_all();
    if (wk.th.joinable()) wk.th.join();
  }
  if (context_ready_) {
    cudaSetDevice(device_);
    cudaDeviceSynchronize();
  }
  if (alloc_) alloc_->ReleaseAll();
  if (replay_) replay_->Clear();
  if (scratch_) cudaFree(scratch_);
  scratch_ = nullptr;
  for (auto* v : {&start_ev_, &end_ev_, &op_ev_}) {
    for (cudaEvent_t e : *v) {
      if (e) cudaEventDestroy(e);
    }
    v->clear();
  }
  if (step_ev_) cudaEventDestroy(step_ev_);
  step_ev_ = nullptr;
  if (workspace_) cudaFree(workspace_);
  workspace_ = nullptr;
  for (auto& s : streams_) {
    if (s) cudaStreamDestroy(s);
    s = nullptr;
  }
  if (pinned_) cudaFreeHost(pinned_);
  pinned_ = nullptr;
  std::free(pageable_);
  pageable_ = nullptr;
  for (char* p : extra_host_) std::free(p);
  extra_host_.clear();
  std::free(nvme_buf_);
  nvme_buf_ = nullptr;
  if (nvme_fd_ >= 0) close(nvme_fd_);
  nvme_fd_ = -1;
  if (!nvme_file_.empty()) unlink(nvme_file_.c_str());
  nvme_file_.clear();
}

void Rank::MarkDone(TaskId id) {
  {
    std::lock_guard<std::mutex> l(done_mu_);
    done_gen_[id] = gen_;
  }
  done_cv_.notify_all();
}

void Rank::WaitDone(TaskId id) {
  std::unique_lock<std::mutex> l(done_mu_);
  done_cv_.wait(l, [&] { return done_gen_[id] == gen_; });
}

void Rank::WorkerLoop(Worker* wk) {
  cudaSetDevice(device_);
  for (;;) {
    TaskId id;
    {
      std::unique_lock<std::mutex> l(wk->mu);
      wk->cv.wait(l, [&] { return wk->stop || !wk->q.empty(); });
      if (wk->q.empty()) return;
      id = wk->q.front();
      wk->q.pop_front();
    }
    if (!abort_->load()) {
      Status s = RunHostTask(id);
      if (!s.ok()) SetError(s);
    }
    MarkDone(id);
  }
}

Status Rank::RunHostTask(TaskId id) {
  // GPU dependencies: their end events (recorded by the issuing thread before this task was
  // queued); host dependencies on the other worker: their completion.
  const Task& t = g_.task(id);
  for (const TaskId* d = g_.deps_begin(id); d != g_.deps_end(id); ++d) {
    const Task& dt = g_.task(*d);
    if (IsHost(dt.resource)) {
      if (dt.resource != t.resource) WaitDone(*d);
    } else {
      DSPLAN_CUDA_TRY(cudaEventSynchronize(end_ev_[*d]));
    }
  }
  const auto t0 = Clock::now();
  if (t.kind == TaskKind::kCpuOptimizer) {
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(t.elements), adam_elements_);
    AdamParams ap;
    ap.step = adam_step_;
    if (n > 0) AdamStep(ap, adam_[0], adam_[1], adam_[2], adam_[3], n, cpu_threads_);
    HostStream(t.bytes);
  } else if (t.kind == TaskKind::kNvmeRead || t.kind == TaskKind::kNvmeWrite) {
    const bool write = t.kind == TaskKind::kNvmeWrite;
    const int64_t bytes = RoundUp(static_cast<int64_t>(t.bytes), nvme_block_);
    if (bytes > 0 && nvme_fd_ >= 0) {
      Result<double> r = Status::Unsupported("");
      if (uring_ok_) {
        r = UringPass(write, nvme_fd_, bytes, nvme_block_, nvme_qd_, nvme_buf_, nvme_offset_[id],
                      /*sync=*/false);
        if (!r.ok() && r.status().code() == Status::Code::kUnsupported) uring_ok_ = false;
      }
      if (!uring_ok_) {
        r = SyncPass(write, nvme_fd_, bytes, nvme_block_, nvme_buf_, nvme_offset_[id], false);
      }
      if (!r.ok()) {
        return Status::IoError(fmt::format("NVMe {} of {} bytes at {} in {}: {}",
                                           write ? "write" : "read", bytes, nvme_offset_[id],
                                           nvme_file_, r.status().message()));
      }
      if (write) nvme_written_ = std::max(nvme_written_, nvme_offset_[id] + bytes);
    }
  }
  const auto t1 = Clock::now();
  host_start_[id] = std::chrono::duration<double>(t0 - host_t0_).count();
  host_end_[id] = std::chrono::duration<double>(t1 - host_t0_).count();
  return Status();
}

// In-place scale of fp32 values over the host buffers: |bytes| read + written.
void Rank::HostStream(double bytes) {
  char* base = pinned_ ? pinned_ : pageable_;
  const int64_t cap = pinned_ ? pinned_bytes_ : pageable_bytes_;
  if (!base || bytes <= 0) return;
  int64_t n = static_cast<int64_t>(bytes / 8);  // floats, each read and written
  const int64_t cap_f = cap / 4;
  while (n > 0) {
    const int64_t chunk = std::min(n, cap_f);
    const int64_t per = (chunk + cpu_threads_ - 1) / cpu_threads_;
    std::vector<std::thread> th;
    for (int t = 0; t < cpu_threads_; ++t) {
      th.emplace_back([=] {
        float* f = reinterpret_cast<float*>(base);
        const int64_t lo = t * per, hi = std::min(chunk, lo + per);
        for (int64_t i = lo; i < hi; ++i) f[i] *= 0.9999f;
      });
    }
    for (auto& x : th) x.join();
    n -= chunk;
  }
}

Status Rank::Gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t batch,
                  const void* a, const void* b, void* c, cudaStream_t s) {
  return gemm_.Run(plan_.precision, ta, tb, m, n, k, batch, a, m * k, b, k * n, c, m * n, s);
}

Status Rank::StreamBytes(double bytes, int launches, cudaStream_t s) {
  if (bytes <= 0) return Status();
  launches = std::clamp(launches, 1, kMaxLaunches);
  // Each launch reads |chunk| bytes and writes |chunk|; chunks no larger than half the largest
  // operand region, and whole 16-byte vectors, so each launch is one vectorized kernel (no
  // scalar tail launch), as the profile's streaming curve measured it.
  int64_t half = static_cast<int64_t>(bytes / 2);
  int64_t chunk = std::max<int64_t>(16, RoundUp((half + launches - 1) / launches, 16));
  const int64_t cap = std::max<int64_t>(kAlign, ring_.largest() / 2 / kAlign * kAlign);
  chunk = std::min(chunk, cap);
  while (half > 0) {
    const int64_t c = RoundUp(std::min(chunk, half), 16);
    char* src = ring_.Take(c);
    char* dst = ring_.Take(c);
    if (!src || !dst) return Status::Internal("no operand memory for a streaming kernel");
    const int64_t floats = std::max<int64_t>(1, c / 4);
    DSPLAN_RETURN_IF_ERROR(KernelStatus(
        cuda::Axpb(reinterpret_cast<const float*>(src), reinterpret_cast<float*>(dst), floats,
                   1.0f, 0.0f, s),
        "streaming kernel"));
    half -= c;
  }
  return Status();
}

Status Rank::FusedAttention(const Op& op, bool backward, cudaStream_t s) {
  // The runtime's fused kernel (runtime/cuda/flash_attention.h) on ring memory: forward reads
  // Q, K, V and writes O and the fp32 log-sum-exp; backward reads Q, K, V, O, dO and the
  // log-sum-exp and writes dQ, dK, dV through its fp32 workspace. The contents are the ring's
  // random values (finite: the log-sum-exp read in backward is some other tensor's bits).
  const int64_t B = std::max<int64_t>(1, op.batch), sq = op.m, sk = op.n, d = op.k;
  const int64_t es = ElementBytes(plan_.precision);
  const cuda::AttentionShape shape{B, sq, sk, d, op.causal, 0.0};
  char* q = TakeOrFail(B * sq * d * es);
  char* kk = TakeOrFail(B * sk * d * es);
  char* v = TakeOrFail(B * sk * d * es);
  char* o = TakeOrFail(B * sq * d * es);
  auto* lse = reinterpret_cast<float*>(TakeOrFail(B * sq * 4));
  if (!q || !kk || !v || !o || !lse) {
    return Status::Internal("no operand memory for fused attention");
  }
  if (!backward) {
    return cuda::FlashAttentionForward(plan_.precision, shape, q, kk, v, o, lse, s);
  }
  char* dout = TakeOrFail(B * sq * d * es);
  char* dq = TakeOrFail(B * sq * d * es);
  char* dk = TakeOrFail(B * sk * d * es);
  char* dv = TakeOrFail(B * sk * d * es);
  char* ws = TakeOrFail(cuda::FlashAttentionWorkspaceBytes(shape));
  if (!dout || !dq || !dk || !dv || !ws) {
    return Status::Internal("no operand memory for fused attention");
  }
  return cuda::FlashAttentionBackward(plan_.precision, shape, q, kk, v, o, dout, lse, dq, dk, dv,
                                      ws, s);
}

Status Rank::Attention(const Op& op, bool backward, cudaStream_t s) {
  if (fused_attention_ok_ && FusedAttentionSupports(plan_.precision, op.k)) {
    return FusedAttention(op, backward, s);
  }
  // Otherwise the stand-in (docs/runtime.md): per block of 128 query rows, batched GEMMs over
  // the keys the causal mask keeps; scores of one block in ring memory; no softmax.
  const int64_t B = op.batch, sq = op.m, sk = op.n, d = op.k;
  const int64_t es = ElementBytes(plan_.precision);
  char* q = TakeOrFail(B * sq * d * es);
  char* kk = TakeOrFail(B * sk * d * es);
  char* v = TakeOrFail(B * sk * d * es);
  char* o = TakeOrFail(B * sq * d * es);
  char* sc = TakeOrFail(B * attention_block_ * sk * es);
  char* dp = backward ? TakeOrFail(B * attention_block_ * sk * es) : sc;
  char* dq = backward ? TakeOrFail(B * sq * d * es) : nullptr;
  char* dk = backward ? TakeOrFail(B * sk * d * es) : nullptr;
  char* dv = backward ? TakeOrFail(B * sk * d * es) : nullptr;
  if (!q || !kk || !v || !o || !sc || !dp || (backward && (!dq || !dk || !dv))) {
    return Status::Internal("no operand memory for the attention stand-in");
  }
  auto lt = [&](bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void* a, int64_t sa,
                const void* b, int64_t sb, void* c, int64_t scs) {
    return gemm_.Run(plan_.precision, ta, tb, m, n, k, B, a, sa, b, sb, c, scs, s);
  };
  for (int64_t r0 = 0; r0 < sq; r0 += attention_block_) {
    const int64_t rows = std::min<int64_t>(attention_block_, sq - r0);
    // Causal (bottom-right aligned as SDPA's is_causal with sq == sk): keys up to the block's
    // last row.
    const int64_t keys = op.causal ? std::clamp<int64_t>(r0 + rows + (sk - sq), 1, sk) : sk;
    const char* qb = q + r0 * d * es;
    const char* ob = o + r0 * d * es;
    // S = Q_blk K^T [rows, keys]
    DSPLAN_RETURN_IF_ERROR(lt(false, true, rows, keys, d, qb, sq * d, kk, sk * d, sc, rows * keys));
    if (!backward) {
      // O_blk = P V [rows, d]
      DSPLAN_RETURN_IF_ERROR(lt(false, false, rows, d, keys, sc, rows * keys, v, sk * d,
                                const_cast<char*>(ob), sq * d));
      continue;
    }
    // dP = dO_blk V^T; dV = P^T dO_blk; dQ_blk = dS K; dK = dS^T Q_blk (dO in |o|).
    DSPLAN_RETURN_IF_ERROR(lt(false, true, rows, keys, d, ob, sq * d, v, sk * d, dp, rows * keys));
    DSPLAN_RETURN_IF_ERROR(lt(true, false, keys, d, rows, sc, rows * keys, ob, sq * d, dv, sk * d));
    DSPLAN_RETURN_IF_ERROR(
        lt(false, false, rows, d, keys, dp, rows * keys, kk, sk * d, dq + r0 * d * es, sq * d));
    DSPLAN_RETURN_IF_ERROR(lt(true, false, keys, d, rows, dp, rows * keys, qb, sq * d, dk, sk * d));
  }
  return Status();
}

Status Rank::RunOp(const Op& op, int layer, bool backward, cudaStream_t s) {
  const int64_t es = ElementBytes(plan_.precision);
  switch (op.kind) {
    case OpKind::kGemm:
    case OpKind::kBatchedGemm: {
      const int64_t B = std::max<int64_t>(1, op.batch), m = op.m, n = op.n, k = op.k;
      const bool linear = op.kind == OpKind::kGemm;
      char* a = TakeOrFail(B * m * k * es);                 // input X [m,k]
      char* b = linear ? Weight(layer, op_weight_offset_, B * k * n * es)
                       : TakeOrFail(B * k * n * es);       // W [n,k] (Linear) or B [k,n]
      char* c = TakeOrFail(B * m * n * es);                 // output [m,n]
      if (linear) op_weight_offset_ += B * k * n * es;
      if (!a || !b || !c) return Status::Internal("no operand memory for a GEMM");
      if (!backward) return Gemm(false, linear, m, n, k, B, a, b, c, s);
      // dX[m,k] = dY[m,n] op(W); dW = dY^T X (Linear: [n,k]; batched: A^T dC [k,n]).
      DSPLAN_RETURN_IF_ERROR(Gemm(false, !linear, m, k, n, B, c, b, a, s));
      char* dw = TakeOrFail(B * k * n * es);
      if (!dw) return Status::Internal("no operand memory for a GEMM");
      if (linear) return Gemm(true, false, n, k, m, B, c, a, dw, s);
      return Gemm(true, false, k, n, m, B, a, c, dw, s);
    }
    case OpKind::kAttention:
      return Attention(op, backward, s);
    default:
      return StreamBytes(backward ? op.bwd_bytes : op.fwd_bytes, 1, s);
  }
}

Status Rank::RunLayer(const Task& t, cudaStream_t s, bool instrument) {
  if (t.layer < 0 || t.layer >= static_cast<int>(w_.layers.size())) return Status();
  const Layer& L = w_.layers[t.layer];
  const bool backward = t.kind == TaskKind::kBackward;
  op_weight_offset_ = 0;
  for (const Op& op : L.ops) {
    size_t ev = 0;
    if (instrument) {
      while (op_ev_.size() < op_ev_used_ + 2) {
        cudaEvent_t e;
        DSPLAN_CUDA_TRY(cudaEventCreate(&e));
        op_ev_.push_back(e);
      }
      ev = op_ev_used_;
      op_ev_used_ += 2;
      DSPLAN_CUDA_TRY(cudaEventRecord(op_ev_[ev], s));
    }
    DSPLAN_RETURN_IF_ERROR(RunOp(op, t.layer, backward, s));
    if (instrument) {
      DSPLAN_CUDA_TRY(cudaEventRecord(op_ev_[ev + 1], s));
      const int cls = op.kind == OpKind::kGemm || op.kind == OpKind::kBatchedGemm ? 0
                      : op.kind == OpKind::kAttention                            ? 1
                                                                                 : 2;
      op_marks_.push_back({current_task_, cls, ev});
    }
  }
  return Status();
}

Status Rank::Collective(const Task& t, cudaStream_t s) {
  const Precision cd = plan_.CommDtype();
  const ncclDataType_t dt = cd == Precision::kFp32 ? ncclFloat32
                            : cd == Precision::kFp16 ? ncclFloat16
                                                     : ncclBfloat16;
  const int64_t es = ElementBytes(cd);
  const int world = std::max(1, plan_.world_size());
  const int launches = std::clamp(t.kernels, 1, kMaxLaunches);
  int64_t per = static_cast<int64_t>(t.bytes) / launches;
  const int64_t cap = ring_.largest() / kAlign * kAlign;
  per = std::min(per, cap);
  const int64_t unit = es * world;
  per = std::max(unit, per / unit * unit);
  int64_t left = std::max<int64_t>(unit, static_cast<int64_t>(t.bytes) / unit * unit);
  while (left > 0) {
    const int64_t bytes = std::min(per, left);
    char* buf = ring_.Take(bytes);
    if (!buf) return Status::Internal("no operand memory for a collective");
    const size_t count = static_cast<size_t>(bytes / es);
    const size_t shard = count / world;
    ncclResult_t r = ncclSuccess;
    switch (t.kind) {
      case TaskKind::kAllReduce:
        r = nccl_->AllReduce(buf, buf, count, dt, ncclSum, comm_, s);
        break;
      case TaskKind::kReduceScatter:
        r = nccl_->ReduceScatter(buf, buf + rank_ * shard * es, shard, dt, ncclSum, comm_, s);
        break;
      case TaskKind::kAllGather:
        r = nccl_->AllGather(buf + rank_ * shard * es, buf, shard, dt, comm_, s);
        break;
      default:
        break;
    }
    if (r != ncclSuccess) return nccl_->Error(TaskKindName(t.kind), r);
    left -= bytes;
  }
  return Status();
}

Status Rank::Copy(const Task& t, cudaStream_t s) {
  const bool h2d = t.kind == TaskKind::kCopyH2D;
  char* host = t.pinned ? pinned_ : pageable_;
  const int64_t cap = t.pinned ? pinned_bytes_ : pageable_bytes_;
  int64_t& cursor = t.pinned ? pinned_cursor_copy_ : pageable_cursor_copy_;
  if (!host || cap <= 0 || t.bytes <= 0) return Status();
  const int launches = std::clamp(t.kernels, 1, kMaxLaunches);
  int64_t left = static_cast<int64_t>(t.bytes);
  int64_t per = std::max<int64_t>(1, (left + launches - 1) / launches);
  per = std::min({per, cap, ring_.largest()});
  while (left > 0) {
    const int64_t bytes = std::min(per, left);
    if (cursor + bytes > cap) cursor = 0;
    char* dev = ring_.Take(bytes);
    if (!dev) return Status::Internal("no operand memory for a copy");
    DSPLAN_CUDA_TRY(h2d ? cudaMemcpyAsync(dev, host + cursor, bytes, cudaMemcpyHostToDevice, s)
                        : cudaMemcpyAsync(host + cursor, dev, bytes, cudaMemcpyDeviceToHost, s));
    cursor = RoundUp(cursor + bytes, 4096) % cap;
    left -= bytes;
  }
  return Status();
}

Status Rank::IssueGpuTask(TaskId id, cudaStream_t s, bool instrument) {
  const Task& t = g_.task(id);
  current_task_ = id;
  switch (t.kind) {
    case TaskKind::kForward:
    case TaskKind::kRecompute:
    case TaskKind::kBackward:
      return RunLayer(t, s, instrument);
    case TaskKind::kGradCopy:
    case TaskKind::kGpuOptimizer:
      return StreamBytes(t.bytes, t.kernels, s);
    case TaskKind::kAllReduce:
    case TaskKind::kReduceScatter:
    case TaskKind::kAllGather:
      return Collective(t, s);
    case TaskKind::kCopyD2H:
    case TaskKind::kCopyH2D:
      return Copy(t, s);
    default:
      return Status::Internal(fmt::format("task {} is not a GPU task", id));
  }
}

Result<bool> Rank::RunStep(bool measure, bool instrument, Execution& e) {
  {
    std::lock_guard<std::mutex> l(done_mu_);
    ++gen_;
  }
  ring_.Reset();
  op_ev_used_ = 0;
  op_marks_.clear();
  ++adam_step_;
  DSPLAN_CUDA_TRY(cudaDeviceSynchronize());
  DSPLAN_CUDA_TRY(cudaEventRecord(step_ev_, streams_[0]));
  DSPLAN_CUDA_TRY(cudaEventSynchronize(step_ev_));
  host_t0_ = Clock::now();
  std::vector<char> issued_host(g_.size(), 0);
  bool oom = false;
  Status err;
  auto apply = [&](TaskId id, bool at_end) -> Result<bool> {
    for (const MemEffect* m = g_.effects_begin(id); m != g_.effects_end(id); ++m) {
      if (m->at_end != at_end) continue;
      DSPLAN_ASSIGN_OR_RETURN(int b, replay_->Apply(*m));
      if (b == -1) {
        e.out_of_memory = true;
        e.oom_task = id;
        e.oom_request_bytes = m->bytes;
        e.oom_allocated_bytes = alloc_->allocated();
        e.oom_message = alloc_->oom_message();
        return true;
      }
    }
    return false;
  };
  for (TaskId id = 0; id < g_.size() && err.ok() && !oom; ++id) {
    if (abort_->load()) break;
    const Task& t = g_.task(id);
    auto r = apply(id, false);
    if (!r.ok()) {
      err = r.status();
      break;
    }
    if (*r) {
      oom = true;
      break;
    }
    if (instrument) {
      size_t free_b = 0, total_b = 0;
      if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
        used_peak_ = std::max(used_peak_, static_cast<int64_t>(total_b - free_b));
      }
    }
    if (IsHost(t.resource)) {
      Worker& wk = workers_[t.resource == Resource::kCpu ? 0 : 1];
      {
        std::lock_guard<std::mutex> l(wk.mu);
        wk.q.push_back(id);
      }
      wk.cv.notify_one();
      issued_host[id] = 1;
    } else {
      const int si = StreamOf(t.resource);
      cudaStream_t s = streams_[si];
      for (const TaskId* d = g_.deps_begin(id); d != g_.deps_end(id); ++d) {
        const Task& dt = g_.task(*d);
        if (IsHost(dt.resource)) {
          WaitDone(*d);  // DeepSpeed's host thread runs the CPU step synchronously
        } else if (StreamOf(dt.resource) != si) {
          err = [&]() -> Status {
            DSPLAN_CUDA_TRY(cudaStreamWaitEvent(s, end_ev_[*d], 0));
            return Status();
          }();
          if (!err.ok()) break;
        }
      }
      if (!err.ok()) break;
      err = [&]() -> Status {
        DSPLAN_CUDA_TRY(cudaEventRecord(start_ev_[id], s));
        DSPLAN_RETURN_IF_ERROR(IssueGpuTask(id, s, instrument));
        DSPLAN_CUDA_TRY(cudaEventRecord(end_ev_[id], s));
        return Status();
      }();
      if (!err.ok()) break;
    }
    r = apply(id, true);
    if (!r.ok()) {
      err = r.status();
      break;
    }
    if (*r) oom = true;
  }
  if (oom || !err.ok()) abort_->store(true);
  // Drain: every queued host task finishes (or is skipped after an abort), then the device.
  for (TaskId id = 0; id < g_.size(); ++id) {
    if (issued_host[id]) WaitDone(id);
  }
  const cudaError_t sync = cudaDeviceSynchronize();
  if (!err.ok()) return err;
  {
    std::lock_guard<std::mutex> l(err_mu_);
    if (!host_error_.ok()) return host_error_;
  }
  if (sync != cudaSuccess) {
    return Status::CudaError(fmt::format("step: {}", cudaGetErrorString(sync)));
  }
  if (oom) return true;
  if (abort_->load()) return Status::Internal("another rank failed");
  if (measure || instrument) {
    double step_end = 0;
    std::vector<double> st(g_.size()), en(g_.size());
    for (TaskId id = 0; id < g_.size(); ++id) {
      if (IsHost(g_.task(id).resource)) {
        st[id] = host_start_[id];
        en[id] = host_end_[id];
      } else {
        float a = 0, b = 0;
        DSPLAN_CUDA_TRY(cudaEventElapsedTime(&a, step_ev_, start_ev_[id]));
        DSPLAN_CUDA_TRY(cudaEventElapsedTime(&b, step_ev_, end_ev_[id]));
        st[id] = a * 1e-3;
        en[id] = b * 1e-3;
      }
      step_end = std::max(step_end, en[id]);
    }
    if (measure) {
      e.step_s.push_back(step_end);
      for (TaskId id = 0; id < g_.size(); ++id) {
        starts_[id].push_back(st[id]);
        ends_[id].push_back(en[id]);
      }
    }
    if (instrument && o_.profile_ops) {
      e.op_class.assign(g_.size(), OpClassSeconds{});
      for (const OpMark& m : op_marks_) {
        float ms = 0;
        DSPLAN_CUDA_TRY(cudaEventElapsedTime(&ms, op_ev_[m.ev], op_ev_[m.ev + 1]));
        OpClassSeconds& c = e.op_class[m.task];
        (m.cls == 0 ? c.gemm_s : m.cls == 1 ? c.attention_s : c.memory_s) += ms * 1e-3;
      }
    }
  }
  return false;
}

Result<Execution> Rank::Run() {
  Execution e;
  e.world_size = std::max(1, plan_.world_size());
  DSPLAN_RETURN_IF_ERROR(Setup());
  cudaDeviceProp prop;
  DSPLAN_CUDA_TRY(cudaGetDeviceProperties(&prop, device_));
  e.device_name = prop.name;
  int rt = 0, drv = 0;
  cudaRuntimeGetVersion(&rt);
  cudaDriverGetVersion(&drv);
  e.driver = fmt::format("CUDA driver API {}.{}, CUDA runtime {}.{}", drv / 1000, drv % 1000 / 10,
                         rt / 1000, rt % 1000 / 10);
  const size_t lt = cublasLtGetVersion();
  e.libraries = fmt::format("cuBLASLt {}.{}.{}, NCCL {}", lt / 10000, lt % 10000 / 100, lt % 100,
                            nccl_->VersionString());
  e.attention_path = AttentionPath(w_, plan_.precision, fused_attention_ok_, prop);
  size_t free_b = 0, total_b = 0;
  DSPLAN_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b));
  e.device_total_bytes = static_cast<int64_t>(total_b);
  const int64_t used_setup = static_cast<int64_t>(total_b - free_b);
  if (used_before_ < 0) used_before_ = 0;  // no NVML: count everything as ours
  e.context_bytes = used_setup - used_before_;
  DSPLAN_RETURN_IF_ERROR(SetupNvme());
  DSPLAN_RETURN_IF_ERROR(SetupHost());
  e.host_pinned_bytes = pinned_bytes_;
  e.host_pageable_bytes = pageable_bytes_ + extra_host_bytes_ + (nvme_buf_ ? nvme_block_ * nvme_qd_ : 0);

  // Model states: one block per category, through the allocator.
  alloc_ = std::make_unique<CachingAllocator>(&segments_, o_.memory_limit_bytes);
  replay_ = std::make_unique<EffectReplayer>(alloc_.get());
  DSPLAN_ASSIGN_OR_RETURN(int init, replay_->AllocateInitial(g_));
  if (init < 0) {
    e.out_of_memory = true;
    e.oom_task = -1;
    e.oom_allocated_bytes = alloc_->allocated();
    e.oom_message = "model states: " + alloc_->oom_message();
    alloc_->ReleaseAll();
    return e;
  }
  const std::vector<int>& blocks = replay_->initial_blocks();
  const int p16 = blocks[static_cast<int>(MemCategory::kParams16)];
  if (p16 >= 0) {
    params_ = static_cast<char*>(alloc_->Ptr(p16));
    params_bytes_ = alloc_->BlockSize(p16);
  }
  for (int c = 0; c < kNumMemCategories; ++c) {
    // Operands live in these blocks even after the graph frees part of one (then the memory is
    // the allocator's cached memory): their segments are never released before the end.
    if (blocks[c] >= 0) alloc_->KeepSegment(blocks[c]);
    if (blocks[c] >= 0 && c != static_cast<int>(MemCategory::kParams16)) {
      ring_.Add(static_cast<char*>(alloc_->Ptr(blocks[c])), alloc_->BlockSize(blocks[c]));
    }
  }
  // The largest single operand the kernels need; a scratch arena when no model-state block
  // holds it (small models), sized to twice that operand (spans of one op may then wrap onto
  // each other, harmless for timing).
  const int64_t es = ElementBytes(plan_.precision);
  int64_t need = 0;
  for (const Layer& L : w_.layers) {
    for (const Op& op : L.ops) {
      const int64_t B = std::max<int64_t>(1, op.batch);
      need = std::max({need, B * op.m * op.k * es, B * op.k * op.n * es, B * op.m * op.n * es});
      if (op.kind == OpKind::kAttention) {
        need = std::max({need, B * attention_block_ * op.n * es,
                         cuda::FlashAttentionWorkspaceBytes({B, op.m, op.n, op.k, op.causal, 0.0})});
      }
      need = std::max(need, static_cast<int64_t>(std::max(op.fwd_bytes, op.bwd_bytes) / 2));
    }
  }
  need = std::min<int64_t>(need, int64_t{1} << 30);  // streaming and collectives split anyway
  if (ring_.largest() < need) {
    scratch_bytes_ = RoundUp(2 * need, 2 << 20);
    const cudaError_t rc = cudaMalloc(&scratch_, scratch_bytes_);
    if (rc == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      scratch_ = nullptr;
      e.out_of_memory = true;
      e.oom_task = -1;
      e.oom_request_bytes = scratch_bytes_;
      e.oom_allocated_bytes = alloc_->allocated();
      e.oom_message = fmt::format("the runtime's operand scratch arena ({} bytes): {}",
                                  scratch_bytes_, cudaGetErrorString(rc));
      alloc_->ReleaseAll();
      return e;
    }
    DSPLAN_CUDA_TRY(rc);
    ring_.Add(static_cast<char*>(scratch_), scratch_bytes_);
  }
  e.scratch_bytes = scratch_bytes_;
  // Random operand values, never zeros (zeros make bf16 GEMMs ~13% faster on H200).
  auto fill = [&](void* p, int64_t bytes, uint32_t seed) -> Status {
    return KernelStatus(cuda::FillUniform(p, bytes / es, FillDtype(plan_.precision), seed,
                                          streams_[0]),
                        "fill");
  };
  for (int c = 0; c < kNumMemCategories; ++c) {
    if (blocks[c] >= 0) DSPLAN_RETURN_IF_ERROR(fill(alloc_->Ptr(blocks[c]), alloc_->BlockSize(blocks[c]), 17 + c));
  }
  if (scratch_) DSPLAN_RETURN_IF_ERROR(fill(scratch_, scratch_bytes_, 99));
  DSPLAN_CUDA_TRY(cudaDeviceSynchronize());

  for (int i = 0; i < 2; ++i) {
    workers_[i].th = std::thread([this, i] { WorkerLoop(&workers_[i]); });
  }
  const int total = o_.warmup_steps + o_.steps;
  for (int step = 0; step <= total; ++step) {
    const bool measure = step >= o_.warmup_steps && step < total;
    const bool instrument = step == total;
    if (step == o_.warmup_steps) alloc_->ResetPeaks();
    if (instrument) {
      e.peak_allocated_bytes = alloc_->peak_allocated();
      e.peak_reserved_bytes = alloc_->peak_reserved();
    }
    DSPLAN_ASSIGN_OR_RETURN(bool oom, RunStep(measure, instrument, e));
    if (oom) {
      e.peak_allocated_bytes = std::max(e.peak_allocated_bytes, alloc_->peak_allocated());
      e.peak_reserved_bytes = std::max(e.peak_reserved_bytes, alloc_->peak_reserved());
      Teardown();
      return e;
    }
  }
  e.device_used_peak_bytes = used_peak_ - used_before_;
  e.nvme_bytes = nvme_written_;
  e.start_s.resize(g_.size());
  e.end_s.resize(g_.size());
  for (TaskId id = 0; id < g_.size(); ++id) {
    e.start_s[id] = Median(starts_[id]);
    e.end_s[id] = Median(ends_[id]);
  }
  Teardown();
  return e;
}

// Used device memory before this process touches |device| (other processes), through NVML;
// -1 when NVML is missing. Measured once per device and process: a later call finds this
// process's own context there.
int64_t UsedBefore(int device) {
  static std::mutex mu;
  static std::map<int, int64_t> baseline;
  std::lock_guard<std::mutex> l(mu);
  auto it = baseline.find(device);
  if (it == baseline.end()) {
    auto b = UsedBeforeContext(device);
    it = baseline.emplace(device, b.ok() ? *b : -1).first;
  }
  return it->second;
}

// The job's result from every rank's (rank order), for both the threads and the MPI path: the
// first error, else the first rank that ran out of memory (ranks are symmetric), else rank 0's.
Result<Execution> PickResult(std::vector<Result<Execution>>& results) {
  for (Result<Execution>& r : results) {
    if (!r.ok()) return r.status();
  }
  for (Result<Execution>& r : results) {
    if (r->out_of_memory) return std::move(r);
  }
  return std::move(results[0]);
}

// Under MPI (options.comm): this process is one rank on one GPU. Rank 0 creates the NCCL unique
// id and broadcasts it; every rank joins with ncclCommInitRank, runs the graph, and sends rank 0
// its Execution or its error. REQUIRES: the job's size is the plan's world size, NCCL is loaded.
Result<Execution> ExecuteAsMpiRank(const StepGraph& graph, const Workload& workload,
                                   const Plan& plan, const ExecuteOptions& options, int count,
                                   Nccl& nccl) {
  Comm& comm = *options.comm;
  const int world = std::max(1, plan.world_size());
  const int rank = comm.rank();
  // One GPU per process: the node-local rank's, or the only one it sees (the launcher gave each
  // process its own, e.g. srun --gpus-per-task=1).
  const int device = count == 1 ? 0 : options.device + options.local_rank;
  // Every rank checks, then all agree, so that no rank waits in ncclCommInitRank for one that
  // has given up.
  Status s;
  if (device < 0 || device >= count) {
    s = Status::InvalidArgument(fmt::format(
        "this process is local rank {} on its node, which shows {} GPU(s) from device {}; start "
        "at most {} processes per node, or give each process its own GPU (srun "
        "--gpus-per-task=1)",
        options.local_rank, count, options.device, count - options.device));
  }
  int64_t before = -1;
  if (s.ok()) {
    before = UsedBefore(device);
    if (const cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
      s = Status::CudaError(fmt::format("cudaSetDevice({}): {}", device, cudaGetErrorString(e)));
    }
  }
  ncclUniqueId id{};
  if (s.ok() && rank == 0) {
    if (const ncclResult_t r = nccl.GetUniqueId(&id); r != ncclSuccess) {
      s = nccl.Error("ncclGetUniqueId", r);
    }
  }
  DSPLAN_RETURN_IF_ERROR(AgreeOnStatus(comm, s));
  std::string id_bytes(reinterpret_cast<const char*>(&id), sizeof(id));
  comm.Broadcast(&id_bytes, 0);
  std::memcpy(&id, id_bytes.data(), sizeof(id));
  ncclComm_t nc = nullptr;
  if (const ncclResult_t r = nccl.CommInitRank(&nc, world, id, rank); r != ncclSuccess) {
    s = nccl.Error("ncclCommInitRank", r);
  }
  DSPLAN_RETURN_IF_ERROR(AgreeOnStatus(comm, s));
  std::atomic<bool> abort{false};
  Result<Execution> mine = Status::Internal("rank did not run");
  {
    Rank r(graph, workload, plan, options, rank, device, &nccl, nc, &abort, before);
    mine = r.Run();
  }
  // A rank that failed or ran out of memory aborts its communicator (its own pending NCCL work
  // ends); ranks that ran out together (the graph is the same on every rank) then meet below.
  if ((!mine.ok() || mine->out_of_memory) && world > 1) {
    nccl.CommAbort(nc);
  } else {
    nccl.CommDestroy(nc);
  }
  const std::string wire =
      mine.ok() ? "X" + ExecutionToWire(*mine) : "E" + EncodeStatus(mine.status());
  const std::vector<std::string> all = comm.Gather(wire, 0);
  Result<Execution> picked = Status::Internal("not rank 0");
  Status agreed;
  if (rank == 0) {
    std::vector<Result<Execution>> results;
    for (size_t q = 0; q < all.size(); ++q) {
      const std::string body = all[q].substr(1);
      if (all[q].empty() || all[q][0] == 'E') {
        const Status e = DecodeStatus(body);
        results.push_back(q == 0 ? e : e.WithPrefix(fmt::format("rank {}", q)));
      } else {
        results.push_back(ExecutionFromWire(body));
      }
    }
    picked = PickResult(results);
    agreed = picked.status();
  }
  DSPLAN_RETURN_IF_ERROR(BroadcastStatus(comm, agreed, 0));
  return rank == 0 ? std::move(picked) : std::move(mine);
}

}  // namespace

Result<Execution> CudaExecutor::Run(const StepGraph& graph, const Workload& workload,
                                    const Plan& plan, const ExecuteOptions& options) {
  if (options.steps < 1 || options.warmup_steps < 0) {
    return Status::InvalidArgument(fmt::format("steps must be >= 1 and warmup_steps >= 0 (got {} "
                                               "and {})", options.steps, options.warmup_steps));
  }
  // The executor runs every task once: a compact graph (its repeated micro-step stored once)
  // must be written out first (StepGraphForm::kUnrolled, bounded by kMaxUnrolledMicroSteps).
  if (graph.repeat.active()) {
    return Status::Internal(
        "CudaExecutor::Run: the step graph is compact; build it unrolled (StepGraphForm::kUnrolled)");
  }
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  static Nccl nccl;  // loaded once per process
  // NVLink SHARP multicast stays off unless the user set it (shared machines).
  setenv("NCCL_NVLS_ENABLE", "0", 0);
  const int world = std::max(1, plan.world_size());
  if (options.comm != nullptr) {
    // Every rank has to reach the agreement, so a rank without a device or NCCL says so there.
    Status ready;
    if (options.comm->size() != world) {
      ready = Status::InvalidArgument(fmt::format(
          "the plan has {} ranks ({} node(s) x {} GPU(s)) but the MPI job has {} processes; "
          "start {} processes (mpirun -np {}) or plan for {} ranks (--nodes x --gpus)",
          world, plan.nodes, plan.gpus_per_node, options.comm->size(), world, world,
          options.comm->size()));
    } else if (e != cudaSuccess || count == 0) {
      ready = NoDevice(e);
    } else {
      ready = nccl.Load();
    }
    DSPLAN_RETURN_IF_ERROR(AgreeOnStatus(*options.comm, ready));
    return ExecuteAsMpiRank(graph, workload, plan, options, count, nccl);
  }
  if (e != cudaSuccess || count == 0) {
    return NoDevice(e);
  }
  if (options.device < 0 || options.device + world > count) {
    return Status::InvalidArgument(fmt::format(
        "the plan needs {} GPUs ({} node(s) x {} per node) from device {}, and this node has {}; "
        "run a plan with at most {} GPUs here, or one process per GPU (mpirun, srun)",
        world, plan.nodes, plan.gpus_per_node, options.device, count, count - options.device));
  }
  std::vector<int64_t> before(world, -1);
  for (int i = 0; i < world; ++i) before[i] = UsedBefore(options.device + i);
  DSPLAN_RETURN_IF_ERROR(nccl.Load());
  std::vector<int> devs(world);
  for (int i = 0; i < world; ++i) devs[i] = options.device + i;
  std::vector<ncclComm_t> comms(world, nullptr);
  {
    const ncclResult_t r = nccl.CommInitAll(comms.data(), world, devs.data());
    if (r != ncclSuccess) return nccl.Error("ncclCommInitAll", r);
  }
  std::atomic<bool> abort{false};
  std::vector<Result<Execution>> results(world, Status::Internal("rank did not run"));
  {
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        Rank rank(graph, workload, plan, options, r, devs[r], &nccl, comms[r], &abort, before[r]);
        results[r] = rank.Run();
        if ((!results[r].ok() || results[r]->out_of_memory) && world > 1) {
          abort.store(true);
          for (ncclComm_t c : comms) nccl.CommAbort(c);
        }
      });
    }
    for (auto& t : threads) t.join();
  }
  if (!abort.load() || world == 1) {
    for (ncclComm_t c : comms) {
      if (c) nccl.CommDestroy(c);
    }
  }
  return PickResult(results);
}

std::unique_ptr<Executor> MakeGpuExecutor() { return std::make_unique<CudaExecutor>(); }

}  // namespace dsplan
