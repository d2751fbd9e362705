// The GPU of the machine dsplan runs on, and whether the default hardware profile describes it.
//
// Without --hardware, dsplan plans for its default profile (h200-measured, 140 GiB). On a machine
// with other GPUs that is a trap: an H100 user who leaves the flag out gets plans sized for an
// H200. dsplan does not switch profiles on its own (people also plan on one machine for
// another); it says so and names the profile that fits this machine.
#ifndef DSPLAN_CORE_LOCAL_GPU_H_
#define DSPLAN_CORE_LOCAL_GPU_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/hardware_profile.h"

namespace dsplan {

struct LocalGpu {
  std::string name;          // as the driver names it: "NVIDIA H100 80GB HBM3"
  int64_t memory_bytes = 0;  // the driver's total for GPU 0
  int count = 0;             // GPUs the driver sees
};

/// GPU 0 of this machine as NVIDIA's management library reports it (libnvidia-ml.so.1, loaded
/// with dlopen: no CUDA context is made, nothing is linked). nullopt when there is no driver, no
/// GPU, or the library fails: the check is advice and never stops a command.
std::optional<LocalGpu> DetectLocalGpu();

/// A shipped profile's name and the GPU it describes, for LocalGpuAdvice's suggestion.
struct ProfileGpu {
  std::string profile;   // "h100-measured"
  std::string gpu_name;  // its gpu.name: "NVIDIA H100 80GB HBM3"
  int64_t memory_bytes = 0;
};

/// One line of advice when |profile|, the default one the user did not choose, describes a GPU
/// whose memory differs from this machine's |local| by more than 5 %, else nullopt. It names a
/// shipped profile of the same GPU (the same driver name, else the same model word, "A100", with
/// memory within 10 %; measured profiles, whose names end in "-measured", first), or
/// `dsplan profile` when none is.
std::optional<std::string> LocalGpuAdvice(const HardwareProfile& profile, const LocalGpu& local,
                                          const std::vector<ProfileGpu>& shipped);

/// The shipped profiles of |data_dir| as ProfileGpu (profiles that fail to load are skipped).
std::vector<ProfileGpu> ShippedProfileGpus(const std::string& data_dir);

}  // namespace dsplan

#endif  // DSPLAN_CORE_LOCAL_GPU_H_
