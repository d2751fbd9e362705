// The machine dsplan runs on (its GPU, host RAM and cores), and whether the hardware profile
// describes it.
//
// Without --hardware, dsplan plans for its default profile (h200-measured, 140 GiB). On a machine
// with other GPUs that is a trap: an H100 user who leaves the flag out gets plans sized for an
// H200. Likewise a profile's host (RAM, cores) is the machine it was measured on: a training node
// with 2 TiB of RAM gets offload plans bounded by the profile's 126 GiB. dsplan does not switch
// profiles or limits on its own (people also plan on one machine for another); it says so and
// names the flags or profile that describe this machine.
#ifndef DSPLAN_CORE_LOCAL_MACHINE_H_
#define DSPLAN_CORE_LOCAL_MACHINE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/hardware_profile.h"
#include "core/status.h"

namespace dsplan {

struct LocalGpu {
  std::string name;          // as the driver names it: "NVIDIA H100 80GB HBM3"
  int64_t memory_bytes = 0;  // the driver's total for GPU 0
  int count = 0;             // GPUs the driver sees
};

/// GPU 0 of this machine as NVIDIA's management library reports it (libnvidia-ml.so.1, loaded
/// with dlopen: no CUDA context is made, nothing is linked). nullopt when there is no driver, no
/// GPU, or the library fails: the check is advice and never stops a command. Read once per
/// process (validate predicts twice; the answer does not change).
std::optional<LocalGpu> DetectLocalGpu();

/// A shipped profile's name and the GPU it describes, for LocalGpuAdvice's suggestion.
struct ProfileGpu {
  std::string profile;   // "h100-measured"
  std::string gpu_name;  // its gpu.name: "NVIDIA H100 80GB HBM3"
  int64_t memory_bytes = 0;
};

/// Whether |profile|'s GPU has |local|'s memory within 5 %: the profile can describe this GPU.
bool ProfileDescribesGpu(const HardwareProfile& profile, const LocalGpu& local);

/// One line of advice when |profile|, the default one the user did not choose, describes a GPU
/// whose memory differs from this machine's |local| by more than 5 %, else nullopt. It names a
/// shipped profile of the same GPU (the same driver name, else the same model word, "A100", with
/// memory within 10 %; measured profiles, whose names end in "-measured", first), or
/// `dsplan profile` when none is.
std::optional<std::string> LocalGpuAdvice(const HardwareProfile& profile, const LocalGpu& local,
                                          const std::vector<ProfileGpu>& shipped);

/// The shipped profiles of |data_dir| as ProfileGpu (profiles that fail to load are skipped).
std::vector<ProfileGpu> ShippedProfileGpus(const std::string& data_dir);

/// Physical cores (distinct (physical id, core id) pairs in /proc/cpuinfo; the logical CPU count
/// when those fields are missing), as `dsplan profile` records host.cores.
int PhysicalCores();
/// MemTotal from /proc/meminfo, bytes, as `dsplan profile` records host.ram_bytes.
Result<int64_t> HostRamBytes();

struct LocalHost {
  int64_t ram_bytes = 0;
  int cores = 0;
};

/// This machine's host as `dsplan profile` would record it; nullopt when /proc/meminfo cannot be
/// read.
std::optional<LocalHost> DetectLocalHost();

/// One line of advice when this machine's host RAM or cores differ from |profile|'s by more than
/// 10 % and the user did not set them (|ram_given|: --host-memory, |cores_given|: --host-cores),
/// else nullopt. It names the values and the flags that would use them. Callers ask only where
/// this machine's GPU is the profile's (the user is planning for a machine like this one).
std::optional<std::string> LocalHostAdvice(const HardwareProfile& profile, const LocalHost& local,
                                           bool ram_given, bool cores_given);

}  // namespace dsplan

#endif  // DSPLAN_CORE_LOCAL_MACHINE_H_
