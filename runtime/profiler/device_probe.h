// DeviceProbe: the narrow interface through which `dsplan profile` measures a GPU machine.
//
// The CUDA implementation (runtime/cuda/cuda_probe.cc) uses the runtime's own building blocks
// (cuBLASLt, cudaMemcpyAsync, NCCL); a build without CUDA gets one that reports no device, and
// tests use a fake (tests/runtime/profiler_test.cc), so the orchestration, the fits and the YAML
// writer are tested without a GPU. All sizes are bytes; all times seconds.
// Thread safety: a probe is used from one thread at a time.
#ifndef DSPLAN_RUNTIME_PROFILER_DEVICE_PROBE_H_
#define DSPLAN_RUNTIME_PROFILER_DEVICE_PROBE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/collectives.h"
#include "core/hardware_profile.h"
#include "core/plan.h"
#include "core/status.h"

namespace dsplan {

/// Summary of repeated timings of one measurement.
struct Timing {
  double median_s = 0;
  double min_s = 0;
  double max_s = 0;
  int repeats = 0;
  /// (max - min) / median: the spread the report prints.
  double Spread() const { return median_s > 0 ? (max_s - min_s) / median_s : 0; }
};

/// Median, min and max of |samples| (seconds). REQUIRES: !samples.empty().
Timing Summarize(std::vector<double> samples);

/// Warm-up launches (untimed) and timed repeats of one measurement.
struct Repeats {
  int warmup = 3;
  int timed = 10;
};

struct GpuInfo {
  std::string name;        // "NVIDIA H200"
  int64_t total_bytes = 0; // cudaMemGetInfo total
  int sm_count = 0;
  int64_t l2_bytes = 0;
  int cc_major = 0, cc_minor = 0;
  std::string versions;    // "CUDA runtime 13.0, driver 13.0, cuBLASLt 130000, NCCL 2.27.7"
};

/// One fused-attention measurement: the forward and the backward of the same problem.
struct AttentionTiming {
  Timing forward;
  Timing backward;
};

enum class CopyKind { kH2DPinned, kH2DPageable, kD2HPinned, kD2HPageable };
const char* CopyKindName(CopyKind k);  // "h2d_pinned", ...

class DeviceProbe {
 public:
  virtual ~DeviceProbe() = default;

  /// GPUs this probe can use; 0 when there is none (UnavailableReason() says why).
  virtual int DeviceCount() = 0;
  virtual std::string UnavailableReason() = 0;
  /// Device 0's properties.
  virtual Result<GpuInfo> Info() = 0;
  /// Device memory in use (cudaMemGetInfo total - free) once the CUDA context, the cuBLASLt
  /// handle and its workspace exist, before any other allocation.
  virtual Result<int64_t> ContextBytes() = 0;
  /// C[m,n] = op(A)[m,k] op(B)[k,n] in |dtype| and |layout| with fp32 accumulation, |batch|
  /// products at once (strided batched when > 1); operands not in L2.
  virtual Result<Timing> Gemm(Precision dtype, GemmLayout layout, int64_t m, int64_t n,
                              int64_t k, int64_t batch, const Repeats& r) = 0;
  /// A device-to-device cudaMemcpyAsync of |bytes| (the caller counts read + write).
  virtual Result<Timing> DeviceCopy(int64_t bytes, const Repeats& r) = 0;
  /// An elementwise kernel y = a * x + b over |bytes| of fp32 input (and as many written).
  virtual Result<Timing> Elementwise(int64_t bytes, const Repeats& r) = 0;
  /// |launches| launches of the same kernel back to back, each over |bytes| (read + written in
  /// all) of memory not in L2; the time of all of them per repeat.
  virtual Result<Timing> StreamLaunches(int64_t bytes, int launches, const Repeats& r) = 0;
  virtual Result<Timing> HostCopy(CopyKind kind, int64_t bytes, const Repeats& r) = 0;
  /// Seconds per launch of an empty kernel, launched back to back.
  virtual Result<Timing> KernelLaunch(const Repeats& r) = 0;
  /// cudaHostAlloc + cudaFreeHost throughput for one buffer of |bytes|, bytes/s.
  virtual Result<double> PinnedAllocBytesPerS(int64_t bytes) = 0;
  /// One collective over the first |ranks| GPUs, |bytes| = S in nccl-tests' convention; the time
  /// is the slowest rank's (host timer after every stream finished, divided by the repeats).
  virtual Result<Timing> Collective(Collective op, int ranks, int64_t bytes,
                                    const Repeats& r) = 0;
  /// dsplan's fused attention kernel (runtime/cuda/flash_attention.h): self-attention of
  /// |batch_heads| slices [seq, head_dim] in |dtype|, the forward and then the backward on its
  /// output, random inputs, L2 flushed before every timed repeat. Probes without the kernel
  /// answer Unsupported.
  virtual Result<AttentionTiming> Attention(Precision dtype, int64_t head_dim, bool causal,
                                            int64_t seq, int64_t batch_heads, const Repeats& r) {
    return Status::Unsupported("this probe has no fused attention kernel");
  }
};

/// The probe of this build: CUDA when dsplan was built with it, else one with no device.
std::unique_ptr<DeviceProbe> MakeGpuProbe();

}  // namespace dsplan

#endif  // DSPLAN_RUNTIME_PROFILER_DEVICE_PROBE_H_
