// How this process was started: alone, or as one rank of a job started by mpirun or srun.
//
// dsplan has no launcher of its own. `mpirun -np N dsplan validate ...` (OpenMPI) or
// `srun -n N dsplan validate ...` (Slurm) starts N copies, and each copy finds its place from
// the environment the launcher sets, checked in this order:
//   * OpenMPI's mpirun / prterun: OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_RANK, and
//     OMPI_COMM_WORLD_LOCAL_RANK for the rank on this node;
//   * PMI-1/PMI-2 launchers (MPICH's Hydra, `srun --mpi=pmi2`): PMI_SIZE, PMI_RANK;
//   * a Slurm job step (srun): SLURM_STEP_NUM_TASKS, SLURM_PROCID, SLURM_LOCALID. SLURM_NTASKS
//     and SLURM_PROCID alone are not enough: an sbatch script has them too (SLURM_PROCID=0),
//     and there dsplan runs once, not as a rank; srun adds SLURM_STEP_NUM_TASKS;
//   * a PMIx launcher that says nothing else (PMIX_RANK): the size is known only once MPI is
//     initialized (world_size 0).
// A job of one process (`mpirun -np 1`, `srun -n 1`) is not distributed: the process runs every
// rank of the plan itself (threads), as it would without a launcher.
#ifndef DSPLAN_RUNTIME_LAUNCH_H_
#define DSPLAN_RUNTIME_LAUNCH_H_

#include <functional>
#include <string>

#include "core/status.h"

namespace dsplan {

struct LaunchInfo {
  /// "mpirun" (OpenMPI), "PMI", "srun", "PMIx", or "" when started alone.
  std::string launcher;
  int world_size = 1;   // processes in the job; 0 = unknown until MPI says (PMIx only)
  int rank = 0;
  int local_rank = -1;  // rank on this node; -1 = unknown (ask MPI)
  /// The variables that decided it, for messages: "OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=1".
  std::string evidence;

  /// True when this process is one of several ranks (or of an unknown number, PMIx).
  bool distributed() const { return !launcher.empty() && world_size != 1; }
};

/// Reads the launcher's variables through |getenv| (returns nullptr when unset). Errors
/// (InvalidArgument, naming the variable and its value): a value that is not a number, a size
/// below 1, a rank outside [0, size).
Result<LaunchInfo> DetectLaunch(const std::function<const char*(const char*)>& getenv);

/// The same, from this process's environment.
Result<LaunchInfo> DetectLaunch();

}  // namespace dsplan

#endif  // DSPLAN_RUNTIME_LAUNCH_H_
