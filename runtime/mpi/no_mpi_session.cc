// MpiSession of a build without MPI: a process that a launcher started as one rank of several
// must not go on alone (it would train N independent copies and report each as the whole job).
#include <fmt/format.h>

#include "runtime/mpi/mpi_session.h"

namespace dsplan {

bool MpiBuilt() { return false; }

Result<std::unique_ptr<MpiSession>> MpiSession::Start(const LaunchInfo& launch) {
  return Status::Unsupported(fmt::format(
      "{} started this process as one rank of {} ({}), but this dsplan was built without MPI, so "
      "its ranks cannot talk to each other; install MPI (Debian: apt-get install openmpi-bin "
      "libopenmpi-dev) and rebuild with cmake -DDSPLAN_WITH_MPI=ON (scripts/setup.sh does both), "
      "or run dsplan once without the launcher: its ranks then run as threads of one process",
      launch.launcher,
      launch.world_size > 0 ? fmt::format("{} processes", launch.world_size)
                            : std::string("several processes"),
      launch.evidence));
}

}  // namespace dsplan
