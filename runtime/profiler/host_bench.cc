#include "runtime/profiler/host_bench.h"

#include <fcntl.h>
#include <linux/io_uring.h>
#include <sys/mman.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "core/units.h"
#include "runtime/cpu_kernels/cpu_adam.h"
#include "runtime/cpu_kernels/direct_io.h"

namespace dsplan {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A page-aligned buffer freed on scope exit.
struct Aligned {
  explicit Aligned(size_t bytes) : size(bytes) {
    p = static_cast<char*>(std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096));
  }
  ~Aligned() { std::free(p); }
  Aligned(const Aligned&) = delete;
  Aligned& operator=(const Aligned&) = delete;
  char* p = nullptr;
  size_t size = 0;
};

void FillRandom(float* x, int64_t n, uint32_t seed, float lo, float hi) {
  std::minstd_rand rng(seed);
  const float scale = (hi - lo) / static_cast<float>(rng.max());
  for (int64_t i = 0; i < n; ++i) x[i] = lo + scale * static_cast<float>(rng());
}

}  // namespace

Result<Timing> TimeCpuAdam(int64_t elements, int threads, const Repeats& r) {
  if (elements <= 0 || threads <= 0) {
    return Status::InvalidArgument("CPU Adam needs positive elements and threads");
  }
  std::vector<float> p(elements), g(elements), m(elements), v(elements);
  FillRandom(p.data(), elements, 1, -1, 1);
  FillRandom(g.data(), elements, 2, -1e-2f, 1e-2f);
  FillRandom(m.data(), elements, 3, -1e-3f, 1e-3f);
  FillRandom(v.data(), elements, 4, 0, 1e-4f);
  AdamParams a;
  std::vector<double> samples;
  for (int i = 0; i < r.warmup + r.timed; ++i) {
    a.step = i + 1;
    auto t0 = Clock::now();
    AdamStep(a, p.data(), g.data(), m.data(), v.data(), elements, threads);
    if (i >= r.warmup) samples.push_back(Since(t0));
  }
  return Summarize(samples);
}

Result<Timing> TimeMemcpy(int64_t bytes, int threads, const Repeats& r) {
  if (bytes <= 0 || threads <= 0) return Status::InvalidArgument("memcpy needs bytes and threads");
  Aligned src(bytes), dst(bytes);
  if (!src.p || !dst.p) return Status::IoError(fmt::format("cannot allocate 2 x {}", FormatBytes(bytes)));
  std::memset(src.p, 1, bytes);
  std::memset(dst.p, 2, bytes);
  const int64_t per = (bytes + threads - 1) / threads;
  std::vector<double> samples;
  for (int i = 0; i < r.warmup + r.timed; ++i) {
    auto t0 = Clock::now();
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) {
      const int64_t b = t * per;
      if (b >= bytes) break;
      pool.emplace_back([&, b] { std::memcpy(dst.p + b, src.p + b, std::min(per, bytes - b)); });
    }
    std::memcpy(dst.p, src.p, std::min(per, bytes));
    for (auto& th : pool) th.join();
    if (i >= r.warmup) samples.push_back(Since(t0));
  }
  return Summarize(samples);
}

Result<Timing> TimePageableAlloc(int64_t bytes, const Repeats& r, int threads) {
  if (bytes <= 0 || threads <= 0) {
    return Status::InvalidArgument("pageable allocation needs bytes and threads");
  }
  std::vector<double> samples;
  const int64_t page = sysconf(_SC_PAGESIZE);
  const int64_t pages = (bytes + page - 1) / page;
  const int64_t per = (pages + threads - 1) / threads;  // pages per thread
  for (int i = 0; i < r.warmup + r.timed; ++i) {
    auto t0 = Clock::now();
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      return Status::IoError(fmt::format("mmap of {} failed: {}", FormatBytes(bytes),
                                         std::strerror(errno)));
    }
    char* c = static_cast<char*>(p);
    auto touch = [&](int64_t first) {
      const int64_t end = std::min(pages, first + per);
      for (int64_t k = first; k < end; ++k) c[k * page] = 1;
    };
    std::vector<std::thread> pool;
    for (int t = 1; t < threads && t * per < pages; ++t) pool.emplace_back(touch, t * per);
    touch(0);
    for (auto& th : pool) th.join();
    munmap(p, bytes);
    if (i >= r.warmup) samples.push_back(Since(t0));
  }
  return Summarize(samples);
}

// ---- NVMe ----
// The io_uring and pread/pwrite passes: runtime/cpu_kernels/direct_io.h.

Result<NvmeResult> MeasureNvme(const std::string& dir, const NvmeOptions& o) {
  NvmeResult out;
  out.path = dir;
  struct statvfs vfs;
  if (statvfs(dir.c_str(), &vfs) != 0) {
    return Status::InvalidArgument(
        fmt::format("--nvme-path '{}': {}", dir, std::strerror(errno)));
  }
  // tmpfs accepts O_DIRECT since Linux 6.6, but it is memory, not a drive: refuse it by type.
  struct statfs sfs;
  constexpr long kTmpfsMagic = 0x01021994, kRamfsMagic = 0x858458f6;
  if (statfs(dir.c_str(), &sfs) == 0 &&
      (static_cast<long>(sfs.f_type) == kTmpfsMagic || static_cast<long>(sfs.f_type) == kRamfsMagic)) {
    return Status::Unsupported(fmt::format(
        "--nvme-path '{}' is on tmpfs (memory, not a drive; older kernels also refuse O_DIRECT "
        "there, which DeepSpeed's NVMe offload needs): pass a folder on the NVMe drive", dir));
  }
  out.capacity_bytes = static_cast<int64_t>(vfs.f_blocks) * vfs.f_frsize;
  out.free_bytes = static_cast<int64_t>(vfs.f_bavail) * vfs.f_frsize;
  int64_t max_block = 0;
  for (int64_t b : o.block_sizes) max_block = std::max(max_block, b);
  if (max_block <= 0 || max_block % 4096 != 0) {
    return Status::InvalidArgument("NVMe block sizes must be positive multiples of 4096");
  }
  const int64_t file_bytes = o.file_bytes / max_block * max_block;
  if (file_bytes <= 0) return Status::InvalidArgument("NVMe test file smaller than a block");
  const int64_t need = file_bytes + 64 * kMiB;
  if (out.free_bytes < need) {
    return Status::Unsupported(fmt::format(
        "--nvme-path '{}' has {} free; the NVMe test needs {} (pass a folder with more space, "
        "or --quick for a smaller file)",
        dir, FormatBytes(static_cast<double>(out.free_bytes)), FormatBytes(static_cast<double>(need))));
  }
  std::string path = dir + "/.dsplan-nvme-test-" + std::to_string(getpid());
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0600);
  if (fd < 0 && errno == EINVAL) {
    return Status::Unsupported(fmt::format(
        "--nvme-path '{}' is on a filesystem without O_DIRECT (tmpfs or similar); DeepSpeed's "
        "NVMe offload needs O_DIRECT: pass a folder on the NVMe drive", dir));
  }
  if (fd < 0) {
    return Status::InvalidArgument(
        fmt::format("--nvme-path '{}': cannot create a test file: {}", dir, std::strerror(errno)));
  }
  struct Closer {
    int fd;
    std::string path;
    ~Closer() {
      close(fd);
      unlink(path.c_str());
    }
  } closer{fd, path};

  int max_qd = 1;
  for (int q : o.queue_depths) max_qd = std::max(max_qd, q);
  Aligned buffers(static_cast<size_t>(max_block) * max_qd);
  if (!buffers.p) return Status::IoError("cannot allocate NVMe buffers");
  std::minstd_rand rng(7);
  for (size_t i = 0; i < buffers.size; i += 4) {
    uint32_t x = rng();
    std::memcpy(buffers.p + i, &x, 4);
  }

  bool uring = true;
  std::string uring_error;
  for (int64_t block : o.block_sizes) {
    for (int qd : o.queue_depths) {
      NvmePoint pt;
      pt.block_size = block;
      pt.queue_depth = uring ? qd : 1;
      double secs[2] = {0, 0};
      for (int w = 1; w >= 0; --w) {  // write first, then read back what was written
        Result<double> t = Status::Internal("unset");
        if (uring) {
          t = UringPass(w == 1, fd, file_bytes, block, qd, buffers.p);
          if (!t.ok() && t.status().code() == Status::Code::kUnsupported) {
            uring = false;
            uring_error = t.status().message();
            pt.queue_depth = 1;
          }
        }
        if (!uring) t = SyncPass(w == 1, fd, file_bytes, block, buffers.p);
        if (!t.ok()) return t.status().WithPrefix(fmt::format("NVMe test in '{}'", dir));
        secs[w] = *t;
      }
      pt.write_bytes_per_s = file_bytes / secs[1];
      pt.read_bytes_per_s = file_bytes / secs[0];
      out.points.push_back(pt);
      if (!uring) break;  // queue depths mean nothing without io_uring: one point per block
    }
  }
  out.method = uring ? fmt::format("io_uring (raw syscalls), O_DIRECT, sequential {} file "
                                   "written (then fdatasync) and read back per block size and "
                                   "queue depth",
                                   FormatBytes(static_cast<double>(file_bytes)))
                     : fmt::format("pwrite/pread at queue depth 1 with O_DIRECT ({}; io_uring "
                                   "unavailable), sequential {} file",
                                   uring_error, FormatBytes(static_cast<double>(file_bytes)));
  return out;
}

}  // namespace dsplan
