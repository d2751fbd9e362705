// MpiSession and its Comm over MPI_COMM_WORLD (mpi_session.h, comm.h).
//
// The reductions do not use MPI_SUM: MPI may add the ranks' contributions in any order (a tree,
// a ring), which changes fp32 rounding. Each rank instead receives every rank's copy of its own
// chunk (MPI_Alltoallv), adds them in rank order from zero exactly as the thread Comm does, and
// the reduced chunks are all-gathered. So MPI and threads give the same bits, and the host
// executor's MPI run can be compared with its thread run for equality.
#define OMPI_SKIP_MPICXX 1  // the C API only (no deprecated C++ bindings)
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <cassert>
#include <climits>
#include <cstring>

#include <fmt/format.h>

#include "runtime/mpi/mpi_session.h"

namespace dsplan {
namespace {

// REQUIRES (comm.h): message sizes below 2^31 elements; the host executor checks this for its
// model before it starts (RunHostTraining).
int Count(int64_t n) {
  assert(n >= 0 && n <= INT_MAX);
  return static_cast<int>(n);
}

class MpiComm final : public Comm {
 public:
  MpiComm() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* kind() const override { return "MPI processes"; }

  void AllReduce(float* x, int64_t n, float scale) override {
    if (size_ == 1) {
      if (scale != 1.0f)
        for (int64_t i = 0; i < n; ++i) x[i] *= scale;
      return;
    }
    // Chunk q of x (counts[q] floats at displs[q]) is reduced on rank q.
    const int64_t chunk = (n + size_ - 1) / size_;
    std::vector<int> counts(size_), displs(size_);
    for (int q = 0; q < size_; ++q) {
      const int64_t b = std::min<int64_t>(n, q * chunk), e = std::min<int64_t>(n, b + chunk);
      counts[q] = Count(e - b);
      displs[q] = Count(b);
    }
    const int mine = counts[rank_];
    std::vector<int> rcounts(size_, mine), rdispls(size_);
    for (int q = 0; q < size_; ++q) rdispls[q] = Count(int64_t{q} * mine);
    std::vector<float> got(static_cast<size_t>(size_) * mine);
    MPI_Alltoallv(x, counts.data(), displs.data(), MPI_FLOAT, got.data(), rcounts.data(),
                  rdispls.data(), MPI_FLOAT, MPI_COMM_WORLD);
    std::vector<float> sum(mine, 0.0f);
    for (int q = 0; q < size_; ++q) {
      const float* y = got.data() + static_cast<size_t>(q) * mine;
      for (int i = 0; i < mine; ++i) sum[i] += y[i];
    }
    float* own = x + displs[rank_];
    for (int i = 0; i < mine; ++i) own[i] = sum[i] * scale;
    MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, x, counts.data(), displs.data(), MPI_FLOAT,
                   MPI_COMM_WORLD);
  }

  void ReduceScatter(const float* in, float* out, int64_t chunk, float scale) override {
    std::vector<float> got(static_cast<size_t>(size_) * chunk);
    MPI_Alltoall(in, Count(chunk), MPI_FLOAT, got.data(), Count(chunk), MPI_FLOAT,
                 MPI_COMM_WORLD);
    for (int64_t i = 0; i < chunk; ++i) out[i] = 0.0f;
    for (int q = 0; q < size_; ++q) {
      const float* y = got.data() + q * chunk;
      for (int64_t i = 0; i < chunk; ++i) out[i] += y[i];
    }
    for (int64_t i = 0; i < chunk; ++i) out[i] *= scale;
  }

  void AllGather(const void* in, void* out, int64_t bytes) override {
    uint8_t* o = static_cast<uint8_t*>(out);
    if (in == o + rank_ * bytes) {
      MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out, Count(bytes), MPI_BYTE,
                    MPI_COMM_WORLD);
      return;
    }
    // MPI forbids overlapping send and receive buffers other than in place.
    const uint8_t* i = static_cast<const uint8_t*>(in);
    std::vector<uint8_t> copy;
    if (i < o + size_ * bytes && o < i + bytes) {
      copy.assign(i, i + bytes);
      i = copy.data();
    }
    MPI_Allgather(i, Count(bytes), MPI_BYTE, out, Count(bytes), MPI_BYTE, MPI_COMM_WORLD);
  }

  double AllReduceScalar(double v) override {
    if (size_ == 1) return v;
    std::vector<double> all(size_);
    MPI_Allgather(&v, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, MPI_COMM_WORLD);
    double s = 0;
    for (double x : all) s += x;
    return s;
  }

  void Barrier() override { MPI_Barrier(MPI_COMM_WORLD); }

  std::vector<std::string> Gather(const std::string& mine, int root) override {
    const int n = Count(static_cast<int64_t>(mine.size()));
    std::vector<int> sizes(rank_ == root ? size_ : 0), displs(sizes.size());
    MPI_Gather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, root, MPI_COMM_WORLD);
    std::string all;
    if (rank_ == root) {
      int64_t total = 0;
      for (int q = 0; q < size_; ++q) {
        displs[q] = Count(total);
        total += sizes[q];
      }
      all.resize(Count(total));
    }
    MPI_Gatherv(mine.data(), n, MPI_BYTE, all.data(), sizes.data(), displs.data(), MPI_BYTE, root,
                MPI_COMM_WORLD);
    std::vector<std::string> out;
    if (rank_ == root) {
      for (int q = 0; q < size_; ++q) out.push_back(all.substr(displs[q], sizes[q]));
    }
    return out;
  }

  void Broadcast(std::string* data, int root) override {
    int64_t n = rank_ == root ? static_cast<int64_t>(data->size()) : 0;
    MPI_Bcast(&n, 1, MPI_INT64_T, root, MPI_COMM_WORLD);
    if (rank_ != root) data->resize(n);
    MPI_Bcast(data->data(), Count(n), MPI_BYTE, root, MPI_COMM_WORLD);
  }

 private:
  int rank_ = 0, size_ = 1;
};

class MpiSessionImpl final : public MpiSession {
 public:
  MpiSessionImpl(const LaunchInfo& launch, int local_rank, bool owns)
      : MpiSession(launch, local_rank), owns_(owns) {}
  ~MpiSessionImpl() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owns_ && !finalized) MPI_Finalize();
  }
  Comm& comm() override { return comm_; }
  const Comm& comm() const override { return comm_; }

 private:
  bool owns_;
  MpiComm comm_;
};

}  // namespace

bool MpiBuilt() { return true; }

Result<std::unique_ptr<MpiSession>> MpiSession::Start(const LaunchInfo& launch) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    if (provided < MPI_THREAD_FUNNELED) {
      MPI_Finalize();
      return Status::Unsupported(
          "this MPI does not provide MPI_THREAD_FUNNELED (MPI calls from the main thread of a "
          "multithreaded process), which dsplan's ranks need");
    }
  }
  int local = launch.local_rank;
  if (local < 0) {
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local);
    MPI_Comm_free(&node);
  }
  return std::unique_ptr<MpiSession>(new MpiSessionImpl(launch, local, !initialized));
}

}  // namespace dsplan
