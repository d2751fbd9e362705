#include "runtime/launch.h"

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <optional>

#include <fmt/format.h>

namespace dsplan {
namespace {

// The integer in variable |name|, or nullopt when unset.
Result<std::optional<int>> IntVar(const std::function<const char*(const char*)>& getenv,
                                  const char* name) {
  const char* v = getenv(name);
  if (v == nullptr) return std::optional<int>();
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(v, &end, 10);
  if (*v == '\0' || *end != '\0' || errno != 0 || x < 0 || x > INT_MAX) {
    return Status::InvalidArgument(fmt::format(
        "the launcher's variable {}='{}' is not a non-negative integer", name, v));
  }
  return std::optional<int>(static_cast<int>(x));
}

}  // namespace

Result<LaunchInfo> DetectLaunch(const std::function<const char*(const char*)>& getenv) {
  struct Scheme {
    const char* launcher;
    const char* size;   // nullptr: unknown until MPI is initialized
    const char* rank;
    const char* local;  // nullptr: ask MPI
  };
  static constexpr Scheme kSchemes[] = {
      {"mpirun", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"},
      {"PMI", "PMI_SIZE", "PMI_RANK", nullptr},
      {"srun", "SLURM_STEP_NUM_TASKS", "SLURM_PROCID", "SLURM_LOCALID"},
      {"PMIx", nullptr, "PMIX_RANK", nullptr},
  };
  for (const Scheme& s : kSchemes) {
    DSPLAN_ASSIGN_OR_RETURN(std::optional<int> rank, IntVar(getenv, s.rank));
    std::optional<int> size;
    if (s.size != nullptr) {
      DSPLAN_ASSIGN_OR_RETURN(size, IntVar(getenv, s.size));
      if (!size || !rank) continue;  // both or nothing
    } else if (!rank) {
      continue;
    }
    LaunchInfo li;
    li.launcher = s.launcher;
    li.rank = *rank;
    li.world_size = size ? *size : 0;
    li.evidence = size ? fmt::format("{}={} {}={}", s.size, *size, s.rank, *rank)
                       : fmt::format("{}={}", s.rank, *rank);
    if (size && *size < 1) {
      return Status::InvalidArgument(
          fmt::format("the launcher's variable {}={} must be at least 1", s.size, *size));
    }
    if (size && *rank >= *size) {
      return Status::InvalidArgument(fmt::format(
          "the launcher's variables say rank {} of {} processes ({}); ranks run from 0 to {}",
          *rank, *size, li.evidence, *size - 1));
    }
    if (s.local != nullptr) {
      DSPLAN_ASSIGN_OR_RETURN(std::optional<int> local, IntVar(getenv, s.local));
      if (local) li.local_rank = *local;
    }
    return li;
  }
  return LaunchInfo{};
}

Result<LaunchInfo> DetectLaunch() {
  return DetectLaunch([](const char* name) { return std::getenv(name); });
}

}  // namespace dsplan
