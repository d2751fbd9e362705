// MpiSession: this process as one rank of an MPI job (mpirun, srun), with its Comm
// (runtime/comm.h) over MPI_COMM_WORLD. No MPI header here: a build without MPI
// (DSPLAN_WITH_MPI=OFF, or no MPI found) links runtime/mpi/no_mpi_session.cc, whose Start()
// says how to rebuild.
//
// MPI is initialized with MPI_THREAD_FUNNELED: only the thread that called Start() makes MPI
// calls (the executors' worker threads never do). One session per process, created after the
// command line is parsed and destroyed (MPI_Finalize) before the process exits.
#ifndef DSPLAN_RUNTIME_MPI_MPI_SESSION_H_
#define DSPLAN_RUNTIME_MPI_MPI_SESSION_H_

#include <memory>

#include "core/status.h"
#include "runtime/comm.h"
#include "runtime/launch.h"

namespace dsplan {

/// True when this dsplan was built with MPI (DSPLAN_WITH_MPI found an MPI).
bool MpiBuilt();

class MpiSession {
 public:
  /// Initializes MPI for a process that |launch| says is a rank of a job. Errors: a build
  /// without MPI (Unsupported, saying how to rebuild, and naming |launch|'s evidence so that
  /// nobody runs N independent copies by mistake); an MPI without MPI_THREAD_FUNNELED.
  static Result<std::unique_ptr<MpiSession>> Start(const LaunchInfo& launch);
  virtual ~MpiSession() = default;
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  int rank() const { return comm().rank(); }
  int size() const { return comm().size(); }
  /// This process's rank among the job's processes on its node: the launcher's variable
  /// (OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID) when set, else its rank in
  /// MPI_Comm_split_type(MPI_COMM_TYPE_SHARED).
  int local_rank() const { return local_rank_; }
  /// How the launcher was recognized (LaunchInfo::launcher and evidence), for reports.
  const LaunchInfo& launch() const { return launch_; }

  virtual Comm& comm() = 0;
  virtual const Comm& comm() const = 0;

 protected:
  MpiSession(const LaunchInfo& launch, int local_rank) : launch_(launch), local_rank_(local_rank) {}

 private:
  LaunchInfo launch_;
  int local_rank_ = 0;
};

}  // namespace dsplan

#endif  // DSPLAN_RUNTIME_MPI_MPI_SESSION_H_
