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

/// One GEMM to measure: C[m,n] = op(A)[m,k] op(B)[k,n] in |layout| (core/hardware_profile.h).
struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
  GemmLayout layout = GemmLayout::kNT;
  int64_t batch = 1;
};

/// One product of a batched matmul (eager attention's Q K^T: (seq, seq, head_dim); P V: (seq,
/// head_dim, seq)).
struct BatchedShape {
  int64_t m = 0, n = 0, k = 0;
  bool operator<(const BatchedShape& o) const {
    return m != o.m ? m < o.m : n != o.n ? n < o.n : k < o.k;
  }
};

/// Products per batched measurement: enough slices to fill a GPU (batch x heads of a step).
inline constexpr int64_t kProfileGemmBatch = 256;
/// The three products of each batched matmul C = A B as the CUDA executor runs them: forward
/// (nn: m, n, k), dA = dC B^T (nt: m, k, n), dB = A^T dC (tn: k, n, m), kProfileGemmBatch each.
std::vector<GemmShape> BatchedGemmShapes(const std::vector<BatchedShape>& products);

/// The weight shape of a torch.nn.Linear layer: out_features x in_features.
struct LinearShape {
  int64_t out = 0, in = 0;
  bool operator<(const LinearShape& o) const {
    return out != o.out ? out < o.out : in < o.in;
  }
};

/// What each section measures. DefaultSizes() gives the full and --quick plans; tests shrink it.
struct ProfileSizes {
  std::vector<Precision> gemm_dtypes;
  std::vector<GemmShape> gemm_shapes;
  Repeats gemm_repeats;
  int64_t hbm_bytes = 0;                 // device copy and elementwise buffer
  Repeats hbm_repeats;
  /// Bytes one launch of the runtime's streaming kernel reads and writes in all, ascending
  /// (the per-launch curve); launches back to back per timed repeat: enough for ~1 ms.
  std::vector<int64_t> stream_sizes;
  /// dsplan's fused attention: every dtype x head dim x (causal, not) x sequence length x amount
  /// of work, the work being rows = batch x heads x seq (batch x heads = rows / seq slices): the
  /// largest fills the GPU, the smaller ones show how few slices leave it part idle.
  std::vector<Precision> attention_dtypes;
  std::vector<int64_t> attention_head_dims;
  std::vector<int64_t> attention_seqs;
  std::vector<int64_t> attention_rows;
  Repeats attention_repeats;
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

/// Token counts (micro-batch x sequence) at which each Linear shape is measured.
std::vector<int64_t> GemmTokenCounts(bool quick);
/// The three products of each Linear layer at each token count: the forward (nt: tokens, out,
/// in), the input gradient (nn: tokens, in, out) and the weight gradient (tn: out, in, tokens),
/// plus 8192^3 (nt) for the large-GEMM efficiency; no duplicates.
std::vector<GemmShape> LinearGemmShapes(const std::vector<LinearShape>& layers,
                                        const std::vector<int64_t>& tokens);
/// The Linear layers of transformer blocks with common hidden sizes (QKV, attention output, MLP
/// up and down, vocabulary projections). `dsplan profile --models` measures the exact layers of
/// named models instead.
std::vector<LinearShape> CommonLinearShapes(bool quick);
/// LinearGemmShapes(CommonLinearShapes(quick), GemmTokenCounts(quick)).
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
