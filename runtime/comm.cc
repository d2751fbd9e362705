// Comm over the threads of one process (comm.h), and the status helpers shared with MPI.
#include "runtime/comm.h"

#include <barrier>
#include <cstring>

#include <fmt/format.h>

namespace dsplan {
namespace {

// What the threads of one group share. Every rank publishes a pointer, all wait, each reads what
// it needs (summing in rank order 0..N-1, so results do not depend on thread timing), all wait
// again before anyone may overwrite its buffer.
struct ThreadGroup {
  explicit ThreadGroup(int n) : n(n), bar(n), slots(n, nullptr), scalars(n, 0.0), strings(n) {}
  const int n;
  std::barrier<> bar;
  std::vector<const void*> slots;
  std::vector<double> scalars;
  std::vector<std::string*> strings;
};

class ThreadComm final : public Comm {
 public:
  ThreadComm(std::shared_ptr<ThreadGroup> g, int r) : g_(std::move(g)), r_(r) {}
  int rank() const override { return r_; }
  int size() const override { return g_->n; }
  const char* kind() const override { return "threads"; }

  void AllReduce(float* x, int64_t n, float scale) override {
    if (g_->n == 1) {
      if (scale != 1.0f)
        for (int64_t i = 0; i < n; ++i) x[i] *= scale;
      return;
    }
    g_->slots[r_] = x;
    g_->bar.arrive_and_wait();
    std::vector<float> sum(n, 0.0f);
    for (int q = 0; q < g_->n; ++q) {
      const float* y = static_cast<const float*>(g_->slots[q]);
      for (int64_t i = 0; i < n; ++i) sum[i] += y[i];
    }
    g_->bar.arrive_and_wait();
    for (int64_t i = 0; i < n; ++i) x[i] = sum[i] * scale;
  }

  void ReduceScatter(const float* in, float* out, int64_t chunk, float scale) override {
    g_->slots[r_] = in;
    g_->bar.arrive_and_wait();
    for (int64_t i = 0; i < chunk; ++i) out[i] = 0.0f;
    for (int q = 0; q < g_->n; ++q) {
      const float* y = static_cast<const float*>(g_->slots[q]) + r_ * chunk;
      for (int64_t i = 0; i < chunk; ++i) out[i] += y[i];
    }
    for (int64_t i = 0; i < chunk; ++i) out[i] *= scale;
    g_->bar.arrive_and_wait();
  }

  void AllGather(const void* in, void* out, int64_t bytes) override {
    g_->slots[r_] = in;
    g_->bar.arrive_and_wait();
    for (int q = 0; q < g_->n; ++q) {
      uint8_t* dst = static_cast<uint8_t*>(out) + q * bytes;
      if (dst != g_->slots[q]) std::memcpy(dst, g_->slots[q], bytes);  // in place: own chunk stays
    }
    g_->bar.arrive_and_wait();
  }

  double AllReduceScalar(double v) override {
    if (g_->n == 1) return v;
    g_->scalars[r_] = v;
    g_->bar.arrive_and_wait();
    double s = 0;
    for (int q = 0; q < g_->n; ++q) s += g_->scalars[q];
    g_->bar.arrive_and_wait();
    return s;
  }

  void Barrier() override { g_->bar.arrive_and_wait(); }

  std::vector<std::string> Gather(const std::string& mine, int root) override {
    g_->strings[r_] = const_cast<std::string*>(&mine);
    g_->bar.arrive_and_wait();
    std::vector<std::string> out;
    if (r_ == root) {
      for (int q = 0; q < g_->n; ++q) out.push_back(*g_->strings[q]);
    }
    g_->bar.arrive_and_wait();
    return out;
  }

  void Broadcast(std::string* data, int root) override {
    if (r_ == root) g_->strings[root] = data;
    g_->bar.arrive_and_wait();
    if (r_ != root) *data = *g_->strings[root];
    g_->bar.arrive_and_wait();
  }

 private:
  std::shared_ptr<ThreadGroup> g_;
  int r_;
};

Status MakeStatus(Status::Code code, std::string msg) {
  switch (code) {
    case Status::Code::kOk: return Status();
    case Status::Code::kInvalidArgument: return Status::InvalidArgument(std::move(msg));
    case Status::Code::kNotFound: return Status::NotFound(std::move(msg));
    case Status::Code::kUnsupported: return Status::Unsupported(std::move(msg));
    case Status::Code::kIoError: return Status::IoError(std::move(msg));
    case Status::Code::kCudaError: return Status::CudaError(std::move(msg));
    case Status::Code::kNcclError: return Status::NcclError(std::move(msg));
    case Status::Code::kInternal: return Status::Internal(std::move(msg));
  }
  return Status::Internal("unknown status code: " + msg);
}

}  // namespace

std::vector<std::unique_ptr<Comm>> MakeThreadComms(int n) {
  auto g = std::make_shared<ThreadGroup>(n);
  std::vector<std::unique_ptr<Comm>> out;
  for (int r = 0; r < n; ++r) out.push_back(std::make_unique<ThreadComm>(g, r));
  return out;
}

std::string EncodeStatus(const Status& s) {
  std::string out(1, static_cast<char>(s.code()));
  out += s.message();
  return out;
}

Status DecodeStatus(const std::string& bytes) {
  if (bytes.empty()) return Status::Internal("an empty status record");
  return MakeStatus(static_cast<Status::Code>(static_cast<unsigned char>(bytes[0])), bytes.substr(1));
}

Status AgreeOnStatus(Comm& comm, const Status& mine) {
  if (comm.size() == 1) return mine;
  // One scalar first: the common case (everyone OK) moves no strings.
  const double failed = comm.AllReduceScalar(mine.ok() ? 0.0 : 1.0);
  if (failed == 0) return Status();
  const std::vector<std::string> all = comm.Gather(EncodeStatus(mine), 0);
  Status first;
  for (size_t r = 0; r < all.size(); ++r) {
    Status s = DecodeStatus(all[r]);
    if (!s.ok()) {
      first = r == 0 ? s : s.WithPrefix(fmt::format("rank {}", r));
      break;
    }
  }
  return BroadcastStatus(comm, first, 0);
}

Status BroadcastStatus(Comm& comm, const Status& mine, int root) {
  if (comm.size() == 1) return mine;
  std::string bytes = comm.rank() == root ? EncodeStatus(mine) : std::string();
  comm.Broadcast(&bytes, root);
  return DecodeStatus(bytes);
}

}  // namespace dsplan
