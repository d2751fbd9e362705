// Comm: one rank's view of a group of data-parallel ranks, and the collectives the executors
// need from it. Two implementations share this interface:
//   * threads of one process (MakeThreadComms, runtime/comm.cc): the host executor's default;
//   * processes of an MPI job started by mpirun or srun (MpiSession::comm(),
//     runtime/mpi/mpi_session.h): the host executor's collectives, and the CUDA executor's
//     bootstrap (the NCCL unique id) and result gathering.
//
// Results are deterministic and equal between the two: every reduction sums the ranks'
// contributions in rank order 0..N-1 in the buffer's type (fp32 for floats, double for scalars),
// starting from zero, then multiplies by |scale|. So a run under MPI gives the same bits as the
// same run on threads.
//
// Every rank of the group must make the same sequence of calls with the same sizes (as with MPI
// and NCCL). REQUIRES for the buffers: |x|, |in|, |out| are not touched by anyone else during the
// call. Thread safety: one Comm per rank; a rank uses its Comm from one thread at a time.
// Failures: the thread implementation cannot fail; the MPI one uses MPI's default error handler
// (MPI_ERRORS_ARE_FATAL), so a failed collective ends the job (a collective that failed on one
// rank leaves the others waiting, which only the launcher can end).
#ifndef DSPLAN_RUNTIME_COMM_H_
#define DSPLAN_RUNTIME_COMM_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace dsplan {

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// "threads" or "MPI processes", for reports.
  virtual const char* kind() const = 0;

  /// In place: x[i] = (sum over ranks of x[i]) * scale, |n| floats.
  virtual void AllReduce(float* x, int64_t n, float scale) = 0;
  /// |in| holds size() chunks of |chunk| floats; |out| (chunk floats, not overlapping |in|) gets
  /// chunk rank() summed over ranks, times |scale|.
  virtual void ReduceScatter(const float* in, float* out, int64_t chunk, float scale) = 0;
  /// Each rank contributes |bytes| at |in|; |out| (size() x bytes) gets the contributions in
  /// rank order. |in| may be |out| + rank() x bytes (in place).
  virtual void AllGather(const void* in, void* out, int64_t bytes) = 0;
  /// The sum over ranks of |v|, on every rank.
  virtual double AllReduceScalar(double v) = 0;
  virtual void Barrier() = 0;
  /// Rank |root| gets every rank's |mine| in rank order; the others get an empty vector.
  virtual std::vector<std::string> Gather(const std::string& mine, int root) = 0;
  /// Every rank gets rank |root|'s |*data|.
  virtual void Broadcast(std::string* data, int root) = 0;
};

/// |n| communicators over the threads of this process, one per rank (rank r is element r).
/// REQUIRES: 1 <= n; each is used by exactly one thread, all n concurrently.
std::vector<std::unique_ptr<Comm>> MakeThreadComms(int n);

/// Every rank gets the same status: the first rank's (in rank order) that is not OK, prefixed
/// with "rank R" when R > 0, else OK. A collective: call it on every rank to make ranks that
/// failed locally and ranks that did not leave a phase together.
Status AgreeOnStatus(Comm& comm, const Status& mine);

/// Every rank gets rank |root|'s status.
Status BroadcastStatus(Comm& comm, const Status& mine, int root);

/// A status as bytes and back (code and message), for sending it between processes.
std::string EncodeStatus(const Status& s);
Status DecodeStatus(const std::string& bytes);

}  // namespace dsplan

#endif  // DSPLAN_RUNTIME_COMM_H_
