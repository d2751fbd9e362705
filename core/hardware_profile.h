// HardwareProfile: the numbers the cost model consumes, for one kind of machine.
//
// One YAML file per machine in profiles/ (format: docs/profile-format.md). Every number carries
// its Source: a datasheet value with its reference, or a measurement with its method (warm-up,
// iterations, how ranks were combined, date, dsplan version). Datasheet profiles ship for common
// GPUs; `dsplan profile` measures the machine it runs on and writes a measured one.
//
// Conventions: bytes, seconds, FLOP/s and bytes/s (decimal GB/s = 1e9 B/s in printing). Curves
// are tables of raw points; the cost model interpolates them (simulator/cost_model.h).
#ifndef DSPLAN_CORE_HARDWARE_PROFILE_H_
#define DSPLAN_CORE_HARDWARE_PROFILE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "core/collectives.h"
#include "core/plan.h"
#include "core/status.h"

namespace dsplan {

enum class SourceKind { kDatasheet, kMeasured };
const char* SourceKindName(SourceKind k);

struct Source {
  SourceKind kind = SourceKind::kDatasheet;
  /// Datasheet: the reference ("NVIDIA H200 datasheet, 2024"). Measured: the method ("cuBLAS
  /// bf16 GEMM, 5 warm-up + 20 timed, L2 flushed, median; 2026-12-02; dsplan 0.1.0").
  std::string detail;
};

/// A number with where it came from.
struct Number {
  double value = 0;
  Source source;
};

/// A measured GEMM: C[m,n] = A[m,k] B[k,n] in |dtype|, achieved FLOP/s.
struct GemmPoint {
  Precision dtype = Precision::kBf16;
  int64_t m = 0, n = 0, k = 0;
  double flops_per_s = 0;
};

/// A point of a size-dependent bandwidth: moving |bytes| achieved |bytes_per_s|.
struct BandwidthPoint {
  double bytes = 0;
  double bytes_per_s = 0;
};

/// A copy path (H2D or D2H, pinned or pageable): raw points plus an alpha-beta fit
/// t(S) = latency_s + S / bytes_per_s.
struct CopyCurve {
  Number latency_s;
  Number bytes_per_s;
  std::vector<BandwidthPoint> points;
};

/// One collective on |ranks| GPUs, within a node (NVLink/PCIe) or across nodes (network):
/// t(S) = alpha_s + S * BusFactor(op, ranks) / busbw (core/collectives.h). Points hold measured
/// busbw by message size S (nccl-tests convention).
struct CollectiveCurve {
  Collective op = Collective::kAllReduce;
  int ranks = 2;
  bool inter_node = false;
  Number alpha_s;
  Number busbw_bytes_per_s;
  std::vector<BandwidthPoint> points;
};

struct GpuProfile {
  std::string name;                 // "NVIDIA H200"
  Number memory_bytes;              // what the driver reports as total (cudaMemGetInfo total)
  Number peak_flops_bf16;           // dense tensor-core peak
  Number peak_flops_fp16;
  Number peak_flops_tf32;
  Number peak_flops_fp32;           // non-tensor-core FP32
  Number hbm_bytes_per_s;           // achievable device-to-device bandwidth (read + write counted)
  /// Fraction of hbm_bytes_per_s that memory-bound kernels (elementwise, norms, softmax,
  /// optimizer) reach.
  Number memory_bound_efficiency;
  /// Large-GEMM fraction of the dtype's peak used when no table point is near.
  Number gemm_efficiency;
  std::vector<GemmPoint> gemm;      // measured table (empty in datasheet profiles)
  Source gemm_source;
  /// Fused attention (SDPA) throughput as a fraction of the bf16 peak.
  Number attention_efficiency;
  Number kernel_launch_s;           // fixed cost per kernel
  /// Device memory in use outside PyTorch's caching allocator once CUDA, cuBLAS and NCCL are
  /// initialised (CUDA context and library workspaces).
  Number context_bytes;
};

struct CpuAdamPoint {
  int threads = 1;
  double elements_per_s = 0;        // fp32 elements updated per second
};

struct HostProfile {
  int cores = 0;                    // physical cores per node
  Number ram_bytes;                 // per node
  std::vector<CpuAdamPoint> cpu_adam;
  Source cpu_adam_source;
  Number pinned_alloc_bytes_per_s;  // cudaHostAlloc throughput
  Number pageable_alloc_bytes_per_s;
};

struct LinkProfile {
  CopyCurve h2d_pinned, h2d_pageable, d2h_pinned, d2h_pageable;
  std::vector<CollectiveCurve> collectives;  // intra- and inter-node, by op and rank count
};

struct NvmePoint {
  int64_t block_size = 0;
  int queue_depth = 0;
  double read_bytes_per_s = 0;
  double write_bytes_per_s = 0;
};

struct NvmeProfile {
  bool present = false;             // false: no NVMe measured or declared
  std::string path;
  Number capacity_bytes;
  Number read_bytes_per_s;          // best sustained O_DIRECT rate
  Number write_bytes_per_s;
  std::vector<NvmePoint> points;
};

struct HardwareProfile {
  std::string name;                 // "h200-sxm", "h200-measured"
  std::string description;
  std::string file;                 // where it was loaded from (empty if built in code)
  int gpus_per_node = 8;
  GpuProfile gpu;
  HostProfile host;
  LinkProfile links;
  NvmeProfile nvme;

  /// True when every number the cost model uses for this machine was measured.
  bool FullyMeasured() const;
  /// "measured (GEMM, HBM, PCIe, CPU Adam); datasheet (NVLink, network)" — for reports.
  std::string SourceSummary() const;
};

/// Reads a profile YAML. Unknown keys, missing required keys, wrong types or units are errors
/// naming the file and key.
Result<HardwareProfile> LoadHardwareProfile(const std::string& path);
/// |name_or_path|: a file path (contains '/' or ends in .yaml), or a profile name in
/// <data_dir>/profiles/. Unknown names list the available ones.
Result<HardwareProfile> FindHardwareProfile(const std::string& name_or_path,
                                            const std::string& data_dir);
/// Names of the profiles in <data_dir>/profiles/, sorted.
Result<std::vector<std::string>> ListHardwareProfiles(const std::string& data_dir);
/// Writes |profile| as YAML that LoadHardwareProfile reads back unchanged.
Status WriteHardwareProfile(const HardwareProfile& profile, const std::string& path);

}  // namespace dsplan

#endif  // DSPLAN_CORE_HARDWARE_PROFILE_H_
