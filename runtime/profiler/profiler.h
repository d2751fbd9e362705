// `dsplan profile`: measures the machine and writes a HardwareProfile.
//
// RunProfile starts from a base profile (a datasheet one), runs the selected sections through a
// DeviceProbe (GPU) and the host benchmarks (CPU), and replaces each number it measured, with
// its method as the source. What it cannot measure (no GPU, one GPU so no NVLink, no NVMe path,
// a failing step) stays the base's value and is listed in |notes|. The report is an
// nccl-tests-style text table of every measurement. Method and facts: docs/profiler.md.
#ifndef DSPLAN_RUNTIME_PROFILER_PROFILER_H_
#define DSPLAN_RUNTIME_PROFILER_PROFILER_H_

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "core/hardware_profile.h"
#include "core/status.h"
#include "runtime/profiler/device_probe.h"
#include "runtime/profiler/host_bench.h"

namespace dsplan {

struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
};

/// What each section measures. DefaultSizes() gives the full and --quick plans; tests shrink it.
struct ProfileSizes {
  std::vector<Precision> gemm_dtypes;
  std::vector<GemmShape> gemm_shapes;
  Repeats gemm_repeats;
  int64_t hbm_bytes = 0;                 // device copy and elementwise buffer
  Repeats hbm_repeats;
  std::vector<int64_t> copy_sizes;       // H2D/D2H transfer sizes
  Repeats copy_repeats;
  int64_t pinned_alloc_bytes = 0;
  std::vector<int64_t> collective_sizes; // S, nccl-tests convention
  Repeats collective_repeats;
  int64_t adam_elements = 0;
  std::vector<int> adam_threads;
  Repeats adam_repeats;
  int64_t memcpy_bytes = 0;
  int64_t alloc_bytes = 0;
  Repeats host_repeats;
  NvmeOptions nvme;
};

/// The GEMM shapes of transformer blocks with common hidden sizes (QKV, attention output, MLP up
/// and down, their weight-gradient shapes, vocabulary projections) plus 8192^3; |quick| keeps a
/// handful.
std::vector<GemmShape> WorkloadGemmShapes(bool quick);
ProfileSizes DefaultSizes(bool quick, int cores);

/// Section names for --only, in the order they run.
const std::vector<std::string>& ProfileSections();
/// Parses "gemm,copy" into a set; errors name the unknown section and list the valid ones.
Result<std::set<std::string>> ParseSections(const std::string& csv);

struct ProgressUpdate {
  std::string what;          // "gemm bf16 8192x8192x8192"
  int done = 0, total = 0;   // steps
  double seconds_left = 0;   // estimate
};

struct ProfileOptions {
  std::set<std::string> sections;  // empty: all
  std::string nvme_path;           // empty: NVMe not measured
  ProfileSizes sizes;
  std::string name;                // the new profile's name
  std::string dsplan_version;      // "0.1.0 (abc1234)", written into every method
  std::function<void(const ProgressUpdate&)> progress;  // may be empty
};

struct ProfileResult {
  HardwareProfile profile;
  std::string report;              // the nccl-tests-style tables
  std::vector<std::string> notes;  // what was not measured and why
};

/// Measures and returns the profile. Errors only for invalid options; a measurement that fails
/// becomes a note and leaves the base's value.
Result<ProfileResult> RunProfile(const HardwareProfile& base, DeviceProbe& gpu,
                                 const ProfileOptions& options);

}  // namespace dsplan

#endif  // DSPLAN_RUNTIME_PROFILER_PROFILER_H_
