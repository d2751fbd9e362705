// Sequential file I/O with O_DIRECT: io_uring over the raw system calls (no liburing), and a
// pread/pwrite fallback at queue depth 1. Used by the profiler's NVMe measurement
// (runtime/profiler/host_bench.cc) and the CUDA executor's NVMe swap tasks.
#ifndef DSPLAN_RUNTIME_CPU_KERNELS_DIRECT_IO_H_
#define DSPLAN_RUNTIME_CPU_KERNELS_DIRECT_IO_H_

#include <cstdint>

#include "core/status.h"

namespace dsplan {

/// Moves |bytes| through |fd| sequentially from |offset| in |block| chunks with |qd| requests in
/// flight, cycling through |qd| slots of |block| bytes in |buffers| (4096-aligned, as O_DIRECT
/// needs). |sync|: fdatasync after writing. Returns the seconds taken. Unsupported when
/// io_uring cannot be set up (the kernel or a seccomp filter refuses it); IoError on a failed
/// or short transfer. REQUIRES: |bytes| is a multiple of |block|.
Result<double> UringPass(bool write, int fd, int64_t bytes, int64_t block, int qd, char* buffers,
                         int64_t offset = 0, bool sync = true);

/// The same at queue depth 1 with pwrite/pread through one |block| buffer.
Result<double> SyncPass(bool write, int fd, int64_t bytes, int64_t block, char* buffer,
                        int64_t offset = 0, bool sync = true);

}  // namespace dsplan

#endif  // DSPLAN_RUNTIME_CPU_KERNELS_DIRECT_IO_H_
