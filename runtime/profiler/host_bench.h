// Host-side measurements of `dsplan profile`: CPU Adam (runtime/cpu_kernels/cpu_adam.h), memcpy,
// page-fault (first-touch) allocation, and NVMe through io_uring with O_DIRECT. They need no GPU
// and run in CI with tiny sizes. Sizes are bytes, rates per second.
#ifndef DSPLAN_RUNTIME_PROFILER_HOST_BENCH_H_
#define DSPLAN_RUNTIME_PROFILER_HOST_BENCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "core/hardware_profile.h"
#include "core/local_machine.h"
#include "core/status.h"
#include "runtime/profiler/device_probe.h"

namespace dsplan {

// PhysicalCores() and HostRamBytes() are in core/local_machine.h.

/// Seconds per AdamStep over |elements| fp32 elements with |threads| threads (buffers filled with
/// random values, first step untimed).
Result<Timing> TimeCpuAdam(int64_t elements, int threads, const Repeats& r);

/// Seconds to memcpy |bytes| between two pageable buffers, split over |threads| threads.
Result<Timing> TimeMemcpy(int64_t bytes, int threads, const Repeats& r);

/// Seconds to mmap |bytes| anonymous memory, touch every page once and unmap it. With
/// |threads| > 1 the pages are touched by that many threads, each a contiguous slice, as
/// PyTorch's intra-op threads fault in a fresh temporary they write (a CPU cast's output).
Result<Timing> TimePageableAlloc(int64_t bytes, const Repeats& r, int threads = 1);

struct NvmeOptions {
  int64_t file_bytes = int64_t{1} << 30;   // size of the temporary file written, then read
  std::vector<int64_t> block_sizes = {int64_t{1} << 20};
  std::vector<int> queue_depths = {8};
};

struct NvmeResult {
  std::string path;          // the folder measured
  int64_t capacity_bytes = 0;  // statvfs size of its filesystem
  int64_t free_bytes = 0;
  std::vector<NvmePoint> points;
  std::string method;        // "io_uring, O_DIRECT, ..." or the fallback used
};

/// Writes then reads a temporary file in |dir| with O_DIRECT at each block size and queue depth
/// (io_uring; pread/pwrite at queue depth 1 when io_uring is unavailable, said in |method|).
/// Errors (with what to do): |dir| missing or unwritable, a filesystem without O_DIRECT (tmpfs),
/// less free space than file_bytes + 64 MiB. The file is removed afterwards.
Result<NvmeResult> MeasureNvme(const std::string& dir, const NvmeOptions& options);

}  // namespace dsplan

#endif  // DSPLAN_RUNTIME_PROFILER_HOST_BENCH_H_
