#include "runtime/cpu_kernels/direct_io.h"

#include <fcntl.h>
#include <linux/io_uring.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include <fmt/format.h>

namespace dsplan {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A minimal io_uring over the raw system calls (no liburing): one submission ring, one
// completion ring, reads and writes of fixed user buffers.
class Uring {
 public:
  ~Uring() {
    if (sq_ptr_ && sq_ptr_ != MAP_FAILED) munmap(sq_ptr_, sq_len_);
    if (cq_ptr_ && cq_ptr_ != MAP_FAILED && cq_ptr_ != sq_ptr_) munmap(cq_ptr_, cq_len_);
    if (sqes_ && sqes_ != MAP_FAILED) munmap(sqes_, sqes_len_);
    if (fd_ >= 0) close(fd_);
  }

  // Errno-style failure as a message; empty on success.
  std::string Init(unsigned entries) {
    io_uring_params p;
    std::memset(&p, 0, sizeof(p));
    fd_ = static_cast<int>(syscall(__NR_io_uring_setup, entries, &p));
    if (fd_ < 0) return fmt::format("io_uring_setup: {}", std::strerror(errno));
    sq_len_ = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    cq_len_ = p.cq_off.cqes + p.cq_entries * sizeof(io_uring_cqe);
    const bool single = p.features & IORING_FEAT_SINGLE_MMAP;
    if (single) sq_len_ = cq_len_ = std::max(sq_len_, cq_len_);
    sq_ptr_ = mmap(nullptr, sq_len_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd_,
                   IORING_OFF_SQ_RING);
    if (sq_ptr_ == MAP_FAILED) return fmt::format("mmap sq ring: {}", std::strerror(errno));
    cq_ptr_ = single ? sq_ptr_
                     : mmap(nullptr, cq_len_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                            fd_, IORING_OFF_CQ_RING);
    if (cq_ptr_ == MAP_FAILED) return fmt::format("mmap cq ring: {}", std::strerror(errno));
    sqes_len_ = p.sq_entries * sizeof(io_uring_sqe);
    sqes_ = static_cast<io_uring_sqe*>(mmap(nullptr, sqes_len_, PROT_READ | PROT_WRITE,
                                            MAP_SHARED | MAP_POPULATE, fd_, IORING_OFF_SQES));
    if (sqes_ == MAP_FAILED) return fmt::format("mmap sqes: {}", std::strerror(errno));
    char* sq = static_cast<char*>(sq_ptr_);
    char* cq = static_cast<char*>(cq_ptr_);
    sq_tail_ = reinterpret_cast<unsigned*>(sq + p.sq_off.tail);
    sq_mask_ = *reinterpret_cast<unsigned*>(sq + p.sq_off.ring_mask);
    sq_array_ = reinterpret_cast<unsigned*>(sq + p.sq_off.array);
    cq_head_ = reinterpret_cast<unsigned*>(cq + p.cq_off.head);
    cq_tail_ = reinterpret_cast<unsigned*>(cq + p.cq_off.tail);
    cq_mask_ = *reinterpret_cast<unsigned*>(cq + p.cq_off.ring_mask);
    cqes_ = reinterpret_cast<io_uring_cqe*>(cq + p.cq_off.cqes);
    return "";
  }

  void Queue(bool write, int fd, void* buf, unsigned len, uint64_t offset, uint64_t tag) {
    const unsigned tail = *sq_tail_;
    const unsigned idx = tail & sq_mask_;
    io_uring_sqe* e = &sqes_[idx];
    std::memset(e, 0, sizeof(*e));
    e->opcode = write ? IORING_OP_WRITE : IORING_OP_READ;
    e->fd = fd;
    e->addr = reinterpret_cast<uint64_t>(buf);
    e->len = len;
    e->off = offset;
    e->user_data = tag;
    sq_array_[idx] = idx;
    __atomic_store_n(sq_tail_, tail + 1, __ATOMIC_RELEASE);
    ++pending_;
  }

  // Submits what is queued and waits for at least |min_complete| completions.
  std::string Enter(unsigned min_complete) {
    int rc = static_cast<int>(syscall(__NR_io_uring_enter, fd_, pending_, min_complete,
                                      IORING_ENTER_GETEVENTS, nullptr, 0));
    if (rc < 0) return fmt::format("io_uring_enter: {}", std::strerror(errno));
    pending_ -= std::min<unsigned>(pending_, static_cast<unsigned>(rc));
    return "";
  }

  // Pops one completion if any: returns false when the ring is empty.
  bool Pop(int* res, uint64_t* tag) {
    const unsigned head = *cq_head_;
    if (head == __atomic_load_n(cq_tail_, __ATOMIC_ACQUIRE)) return false;
    const io_uring_cqe& c = cqes_[head & cq_mask_];
    *res = c.res;
    *tag = c.user_data;
    __atomic_store_n(cq_head_, head + 1, __ATOMIC_RELEASE);
    return true;
  }

 private:
  int fd_ = -1;
  void* sq_ptr_ = nullptr;
  void* cq_ptr_ = nullptr;
  size_t sq_len_ = 0, cq_len_ = 0, sqes_len_ = 0;
  io_uring_sqe* sqes_ = nullptr;
  unsigned* sq_tail_ = nullptr;
  unsigned sq_mask_ = 0;
  unsigned* sq_array_ = nullptr;
  unsigned* cq_head_ = nullptr;
  unsigned* cq_tail_ = nullptr;
  unsigned cq_mask_ = 0;
  io_uring_cqe* cqes_ = nullptr;
  unsigned pending_ = 0;
};

}  // namespace

// Moves |file_bytes| through |fd| sequentially in |block| chunks with |qd| in flight. Returns
// seconds, or an error message.
Result<double> UringPass(bool write, int fd, int64_t file_bytes, int64_t block, int qd,
                         char* buffers, int64_t offset, bool sync) {
  Uring ring;
  std::string err = ring.Init(static_cast<unsigned>(std::max(qd, 1)));
  if (!err.empty()) return Status::Unsupported(err);
  const int64_t blocks = file_bytes / block;
  int64_t next = 0, done = 0;
  int in_flight = 0;
  auto t0 = Clock::now();
  while (done < blocks) {
    while (in_flight < qd && next < blocks) {
      const int slot = static_cast<int>(next % qd);
      ring.Queue(write, fd, buffers + slot * block, static_cast<unsigned>(block),
                 static_cast<uint64_t>(offset + next * block), static_cast<uint64_t>(next));
      ++next;
      ++in_flight;
    }
    err = ring.Enter(1);
    if (!err.empty()) return Status::IoError(err);
    int res = 0;
    uint64_t tag = 0;
    while (ring.Pop(&res, &tag)) {
      if (res < 0) {
        return Status::IoError(fmt::format("{} at offset {}: {}", write ? "write" : "read",
                                           tag * block, std::strerror(-res)));
      }
      if (res != block) {
        return Status::IoError(fmt::format("short {} ({} of {} bytes)", write ? "write" : "read",
                                           res, block));
      }
      ++done;
      --in_flight;
    }
  }
  if (sync && write && fdatasync(fd) != 0) {
    return Status::IoError(fmt::format("fdatasync: {}", std::strerror(errno)));
  }
  return Since(t0);
}

// Queue depth 1 without io_uring.
Result<double> SyncPass(bool write, int fd, int64_t file_bytes, int64_t block, char* buffer,
                        int64_t offset, bool sync) {
  auto t0 = Clock::now();
  for (int64_t off = offset; off + block <= offset + file_bytes; off += block) {
    ssize_t rc = write ? pwrite(fd, buffer, block, off) : pread(fd, buffer, block, off);
    if (rc != block) {
      return Status::IoError(fmt::format("{} at offset {}: {}", write ? "pwrite" : "pread", off,
                                         rc < 0 ? std::strerror(errno) : "short transfer"));
    }
  }
  if (sync && write && fdatasync(fd) != 0) {
    return Status::IoError(fmt::format("fdatasync: {}", std::strerror(errno)));
  }
  return Since(t0);
}

}  // namespace dsplan
