// HardwareProfile: the numbers the cost model consumes, for one kind of machine.
//
// One YAML file per machine in profiles/ (format: docs/profile-format.md; read and written by
// core/profile_yaml.h). Every number carries
// its Source: a datasheet value with its reference, or a measurement with its method (warm-up,
// iterations, how ranks were combined, date, dsplan version). Datasheet profiles ship for common
// GPUs; `dsplan profile` measures the machine it runs on and writes a measured one.
//
// Conventions: bytes, seconds, FLOP/s and bytes/s (decimal GB/s = 1e9 B/s in printing). Curves
// are tables of raw points; the cost model interpolates them (simulator/cost_model.h).
#ifndef DSPLAN_CORE_HARDWARE_PROFILE_H_
#define DSPLAN_CORE_HARDWARE_PROFILE_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/collectives.h"
#include "core/plan.h"
#include "core/status.h"

namespace dsplan {

/// The most GPUs one node of a profile may have (NVL72 racks are 72; this leaves room).
inline constexpr int64_t kMaxGpusPerNode = 1024;

/// kAssumption: neither a datasheet value nor a measurement but an engineering estimate (an
/// efficiency factor, a typical host); the detail says what it rests on.
enum class SourceKind { kDatasheet, kMeasured, kAssumption };
/// "datasheet", "measured", "assumption" (the YAML key of a number's source).
const char* SourceKindName(SourceKind k);

struct Source {
  SourceKind kind = SourceKind::kDatasheet;
  /// Datasheet: the reference ("NVIDIA H200 datasheet, 2024"). Measured: the method ("cuBLAS
  /// bf16 GEMM, 5 warm-up + 20 timed, L2 flushed, median; 2026-12-02; dsplan 0.1.0").
  std::string detail;

  bool operator==(const Source&) const = default;
};

/// A number with where it came from.
struct Number {
  double value = 0;
  Source source;

  bool operator==(const Number&) const = default;
};

/// The operand layout of a measured GEMM, in row-major terms of C[m,n] = op(A)[m,k] op(B)[k,n]
/// (torch.nn.Linear's three products):
///  * kNT: A [m,k], B stored [n,k]: the forward Y = X W^T; (m, n, k) = (tokens, out, in).
///  * kNN: A [m,k], B [k,n]: the input gradient dX = dY W; (m, n, k) = (tokens, in, out).
///  * kTN: A stored [k,m], B [k,n]: the weight gradient dW = dY^T X; (m, n, k) = (out, in, tokens).
enum class GemmLayout { kNT, kNN, kTN };
const char* GemmLayoutName(GemmLayout l);  // "nt", "nn", "tn"
Result<GemmLayout> ParseGemmLayout(const std::string& s);

/// A measured GEMM: C[m,n] = op(A)[m,k] op(B)[k,n] in |dtype| and |layout|, achieved FLOP/s;
/// |batch| > 1: that many independent products at once (strided batched: eager attention's
/// Q K^T and P V, whose layouts are then those of a batched matmul's forward (nn) and operand
/// gradients (nt, tn)).
struct GemmPoint {
  Precision dtype = Precision::kBf16;
  int64_t m = 0, n = 0, k = 0;
  double flops_per_s = 0;
  GemmLayout layout = GemmLayout::kNT;
  int64_t batch = 1;

  bool operator==(const GemmPoint&) const = default;
};

/// A point of a size-dependent bandwidth: moving |bytes| achieved |bytes_per_s|.
struct BandwidthPoint {
  double bytes = 0;
  double bytes_per_s = 0;

  bool operator==(const BandwidthPoint&) const = default;
};

/// One point of a per-launch time curve: a kernel moving |bytes| took |seconds|.
struct StreamPoint {
  double bytes = 0;
  double seconds = 0;

  bool operator==(const StreamPoint&) const = default;
};

/// A GEMM's time under sustained load over its time alone (the profile's GEMM table), at a
/// tensor-core duty: the share of GPU time spent in GEMMs. Above some duty the GPU reaches its
/// power limit and lowers its clock.
struct DutyPoint {
  double duty = 0;        // (0, 1]
  double time_ratio = 1;  // >= 1
  bool operator==(const DutyPoint&) const = default;
};

/// A measured point of dsplan's fused attention kernel (runtime/cuda/flash_attention.h):
/// self-attention (sq = sk = |seq|) of |batch_heads| slices in |dtype| with |head_dim|, causal or
/// not, at the FLOP/s the forward and the backward reached. FLOPs: forward 4 B H sq sk d (halved
/// when causal), backward 2.5 times the forward. Few slices leave the GPU part idle, so the rate
/// depends on the rows of work (batch_heads x seq) as well as on seq.
struct AttentionPoint {
  Precision dtype = Precision::kBf16;
  int64_t head_dim = 0;
  bool causal = false;
  int64_t seq = 0;
  int64_t batch_heads = 0;
  double fwd_flops_per_s = 0;
  double bwd_flops_per_s = 0;

  bool operator==(const AttentionPoint&) const = default;
};

/// A copy path (H2D or D2H, pinned or pageable): raw points plus an alpha-beta fit
/// t(S) = latency_s + S / bytes_per_s.
struct CopyCurve {
  Number latency_s;
  Number bytes_per_s;
  std::vector<BandwidthPoint> points;

  bool operator==(const CopyCurve&) const = default;
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

  bool operator==(const CollectiveCurve&) const = default;
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
  /// dsplan's runtime streaming kernel (y = a*x + b, fp32, 16-byte accesses) launched back to
  /// back over memory that is not in L2: seconds per launch by the bytes one launch reads and
  /// writes in all, ascending. Covers the launch, the ramp and the tail that bytes / bandwidth
  /// leaves out for small kernels. Empty in datasheet profiles.
  std::vector<StreamPoint> streaming;
  Source streaming_source;
  /// GEMMs under sustained load: time over the table's (measured alone) by tensor-core duty,
  /// ascending in duty (tools/probes/gemm_sustained.py --duty-sweep). Empty: GEMMs run at the
  /// table's rate whatever the load.
  std::vector<DutyPoint> sustained_gemm;
  Source sustained_gemm_source;
  /// Fused attention (SDPA) throughput as a fraction of the bf16 peak: the PyTorch + DeepSpeed
  /// stack's cuDNN / flash kernels (an assumption until measured there).
  Number attention_efficiency;
  /// dsplan's runtime fused attention kernel, measured by `dsplan profile` (section attention)
  /// by dtype, head dim, causal, seq and slices. Empty in datasheet profiles: the runtime's
  /// attention is then priced as tiled GEMMs (simulator/cost_model.h).
  std::vector<AttentionPoint> attention;
  Source attention_source;
  /// PyTorch's fused scaled-dot-product attention (the cuDNN / flash kernels transformers'
  /// "sdpa" attention runs), measured through PyTorch (tools/probes/torch_sdpa.py) in the
  /// attention table's row format. When it has rows the PyTorch stack's fused attention is
  /// priced from them instead of |attention_efficiency| (simulator/cost_model.h).
  std::vector<AttentionPoint> sdpa;
  Source sdpa_source;
  Number kernel_launch_s;           // fixed cost per kernel
  /// Device memory in use outside PyTorch's caching allocator once CUDA, cuBLAS and NCCL are
  /// initialised (CUDA context and library workspaces).
  Number context_bytes;

  bool operator==(const GpuProfile&) const = default;
};

struct CpuAdamPoint {
  int threads = 1;
  double elements_per_s = 0;        // fp32 elements updated per second

  bool operator==(const CpuAdamPoint&) const = default;
};

struct HostProfile {
  int cores = 0;                    // physical cores per node
  Number ram_bytes;                 // per node
  std::vector<CpuAdamPoint> cpu_adam;
  Source cpu_adam_source;
  Number pinned_alloc_bytes_per_s;  // cudaHostAlloc throughput
  Number pageable_alloc_bytes_per_s;  // malloc + first touch throughput
  /// The same with one thread per core touching the pages of one fresh mapping, as PyTorch's
  /// intra-op threads fault in a fresh temporary they write (a host-side cast's output). Not in
  /// older profiles: the reader then takes one thread's rate, labelled as that assumption.
  Number parallel_alloc_bytes_per_s;
  /// Host-to-host memcpy bandwidth between pageable buffers, bytes/s counting the bytes copied
  /// once (not read + write); one thread per core (DeepSpeed's flattening and fp32 copies).
  Number memcpy_bytes_per_s;

  bool operator==(const HostProfile&) const = default;
};

struct LinkProfile {
  CopyCurve h2d_pinned, h2d_pageable, d2h_pinned, d2h_pageable;
  std::vector<CollectiveCurve> collectives;  // intra- and inter-node, by op and rank count

  bool operator==(const LinkProfile&) const = default;
};

struct NvmePoint {
  int64_t block_size = 0;
  int queue_depth = 0;
  double read_bytes_per_s = 0;
  double write_bytes_per_s = 0;

  bool operator==(const NvmePoint&) const = default;
};

struct NvmeProfile {
  bool present = false;             // false: no NVMe measured or declared
  std::string path;
  Number capacity_bytes;
  Number read_bytes_per_s;          // best sustained O_DIRECT rate
  Number write_bytes_per_s;
  std::vector<NvmePoint> points;

  bool operator==(const NvmeProfile&) const = default;
};

/// The software stack users train with (PyTorch eager + transformers + DeepSpeed), measured by
/// tools/probes/stack_costs.py (`dsplan profile --stack`): profile section `stack:` (format:
/// docs/profile-format.md, meaning: docs/stack-costs.md). Without the section the cost model
/// uses the costs compiled into simulator/stack_costs.cc (measured on one H200 machine).
///
/// The kernel classes and op kinds are those of simulator/workload.h (KernelClass, OpKind), in
/// their order; StackKernelClassName / StackOpKindName give the YAML keys.
inline constexpr int kStackKernelClasses = 9;
inline constexpr int kStackOpKinds = 10;
const char* StackKernelClassName(int i);  // "stream", "cast_up", ..., "log_softmax"
const char* StackOpKindName(int i);       // "gemm", "batched_gemm", ..., "loss"

/// Versions of the measured stack (empty: not recorded / not installed).
struct StackVersions {
  std::string torch, cuda, transformers, deepspeed, python;

  bool operator==(const StackVersions&) const = default;
};

/// Host time of one transformer block of a family, plain and under non-reentrant gradient
/// checkpointing, with its submodules and parameter tensors (simulator/stack_costs.h).
struct StackBlockPoint {
  std::string model_type;
  bool encoder = false;  // the family's encoder block (T5, BERT), else its decoder block
  double fwd_s = 0, bwd_s = 0, ckpt_fwd_s = 0, ckpt_bwd_s = 0;
  int32_t modules = 0, param_tensors = 0;

  bool operator==(const StackBlockPoint&) const = default;
};

/// Host time of the rest of a family's model (embeddings, masks, head, loss).
struct StackRestPoint {
  std::string model_type;
  double fwd_s = 0, bwd_s = 0;

  bool operator==(const StackRestPoint&) const = default;
};

struct StackProfile {
  bool present = false;            // false: no stack section (the built-in costs apply)
  /// How and where it was measured (the tool, the machine, the versions, the date).
  Source source;
  std::string gpu;                 // the GPU it was measured on ("NVIDIA H200")
  std::string date;                // "2026-12-03"
  StackVersions versions;
  /// The streaming rate (hbm x memory-bound efficiency) of the machine the kernel rates were
  /// measured on; another GPU's profile scales them by its own over this one.
  double reference_stream_bytes_per_s = 0;
  /// Bytes read + written per second by PyTorch's kernels of each class, forward / backward.
  std::array<double, kStackKernelClasses> kernel_fwd_bytes_per_s{}, kernel_bwd_bytes_per_s{};
  /// Host seconds of one op of each kind, forward / backward.
  std::array<double, kStackOpKinds> op_fwd_s{}, op_bwd_s{};
  /// Host seconds of one more plain eager tensor op.
  double kernel_fwd_s = 0, kernel_bwd_s = 0;
  /// DeepSpeed ZeRO-3's hooks, when DeepSpeed was measured (|zero3| false: the built-in ones).
  bool zero3 = false;
  double z3_fwd_per_module_s = 0, z3_fwd_per_param_s = 0;
  double z3_bwd_per_module_s = 0, z3_bwd_per_param_s = 0;
  /// ZeRO-3's host time per gather call and per reduce-bucket flush a backward hook runs
  /// (stack_costs.py "zero3_calls", docs/stack-costs.md 4c), each when measured (empty: the
  /// built-in one). YAML: stack.zero3.per_gather_call_s, stack.zero3.per_bucket_flush_s.
  std::optional<double> z3_per_gather_call_s, z3_per_bucket_flush_s;
  /// PyTorch's blocking copy of a 16-bit CUDA tensor into an fp32 CPU tensor (ZeRO-3's offloaded
  /// gradient copy), seconds by the source's bytes (stack_costs.py "cast_copy"; points from
  /// kFreshMappingBytes are the fresh-mapping regime, measured since 2026-12-06), when measured
  /// (empty: the built-in one). YAML: stack.cast_copy_d2h: [[bytes, seconds], ...], bytes
  /// ascending, at least two points.
  std::vector<std::pair<double, double>> cast_copy_d2h;
  /// The same copy in a process whose malloc is held to its heap (dsplan's kMallocHeapEnv set
  /// at start, stack_costs.py's "points_heap", since 2026-12-06): no size maps a fresh
  /// temporary, so it is one regime. Empty: not measured. YAML: stack.cast_copy_d2h_heap.
  std::vector<std::pair<double, double>> cast_copy_d2h_heap;
  /// DeepSpeed's optimizer step on the host with a GPU optimizer (ZeRO stages 1/2 and 3): a
  /// fixed part and a part per parameter tensor, when DeepSpeed was measured (|optimizer_step|
  /// false: the built-in ones).
  bool optimizer_step = false;
  double z12_step_s = 0, z12_step_per_param_s = 0;
  double z3_step_s = 0, z3_step_per_param_s = 0;
  /// Stage 0's BF16_Optimizer.step() on the host, without and with the per-tensor clip loop: a
  /// fixed part and a part per parameter tensor (stack_costs.py "bf16_step", docs/stack-costs.md
  /// 6), when measured (|bf16_step| false: the built-in ones). YAML: stack.bf16_optimizer_step.
  bool bf16_step = false;
  double bf16_step_s = 0, bf16_step_per_param_s = 0;
  double bf16_clip_step_s = 0, bf16_clip_step_per_param_s = 0;
  /// The optimizer step's kernels on large flat tensors, bytes read + written per second
  /// (tools/probes/optimizer_kernels.py, stack_costs.py "optimizer_kernels"), when measured
  /// (|optimizer_kernels| false: the built-in ones, StackCosts's: the H200's fp64 rates, the
  /// streaming class for the rest). Within a measured section a rate of 0 was not measured and
  /// is priced at the streaming class. YAML: stack.optimizer_kernels,
  /// keys fp64_cast, fp64_norm, step_flat, fused_adam, torch_adam (bytes per second).
  bool optimizer_kernels = false;
  double fp64_cast_bytes_per_s = 0, fp64_norm_bytes_per_s = 0, step_flat_bytes_per_s = 0;
  double fused_adam_bytes_per_s = 0, torch_adam_bytes_per_s = 0;
  std::vector<StackBlockPoint> blocks;
  std::vector<StackRestPoint> rests;
  /// GEMMs measured through PyTorch (tools/probes/torch_gemm.py: F.linear, matmul, bmm), in the
  /// row format of gpu.gemm; the cost model prices the PyTorch stack's GEMMs from it.
  std::vector<GemmPoint> gemm;
  Source gemm_source;

  bool operator==(const StackProfile&) const = default;
};

/// glibc's largest dynamic mmap threshold (DEFAULT_MMAP_THRESHOLD_MAX: 4 MiB x sizeof(long),
/// 32 MiB on 64-bit; malloc/malloc.c): a request at least this large is always served by a mmap
/// of its own and unmapped on free, so a temporary this large is faulted in afresh every time
/// it is written (docs/deepspeed-facts.md, CPU offload).
inline constexpr double kFreshMappingBytes = 32.0 * 1024 * 1024;

/// What the cost model says of its stack costs when a profile has no stack section.
inline constexpr const char* kBuiltInStackCosts =
    "built-in, measured on H200 with PyTorch 2.11 / DeepSpeed 0.14.5 on 2026-12-03";
/// The same for the offloaded gradient's blocking cast copy (StackProfile::cast_copy_d2h),
/// measured later (docs/validation/offload-copy-1205/).
inline constexpr const char* kBuiltInCastCopy =
    "built-in, measured on H200 with PyTorch 2.11 on 2026-12-05";

struct HardwareProfile {
  std::string name;                 // "h200-sxm", "h200-measured"
  std::string description;
  std::string file;                 // where it was loaded from (empty if built in code)
  /// For a measured profile: the datasheet profile its unmeasured numbers came from (empty when
  /// none).
  std::string base;
  int gpus_per_node = 8;
  GpuProfile gpu;
  HostProfile host;
  LinkProfile links;
  NvmeProfile nvme;
  /// The software stack's measured costs (optional section `stack:`).
  StackProfile stack;

  /// True when every number the cost model uses for this machine was measured: every Number
  /// except the peak_flops_* specs (which the measured GEMM table supersedes), a non-empty
  /// measured GEMM table and CPU Adam table, and, when gpus_per_node > 1, at least one measured
  /// intra-node collective curve; every collective curve present must be measured.
  bool FullyMeasured() const;
  /// "measured (GEMM, HBM, PCIe, CPU Adam); datasheet (NVLink, network); stack costs: ..." —
  /// for reports; the last part says where the PyTorch stack's costs come from (StackSummary).
  std::string SourceSummary() const;
  /// "stack costs: measured on NVIDIA H200 with PyTorch 2.12.0 / DeepSpeed 0.15.1 on
  /// 2027-01-10 (...)" or "stack costs: built-in, measured on H200 ...".
  std::string StackSummary() const;

  /// Field-by-field equality, |file| included (compare copies with file cleared to test a
  /// round trip).
  bool operator==(const HardwareProfile&) const = default;
};

/// A node: what a GPU profile's machine is built into (GPUs per node, host CPUs and RAM, NVMe
/// drives, NICs, the GPU interconnect), from a node profile YAML in profiles/nodes/ (format:
/// docs/profile-format.md "Node profiles"). Applied over a GPU profile, it replaces the host,
/// NVMe and interconnect numbers of the machine the GPU profile was measured or described on,
/// so that a GPU measured in a one-GPU VM is planned in the node it will train in.
struct NodeProfile {
  std::string name;                 // "dgx-2"
  std::string description;
  std::string file;
  std::string gpu_profile;          // the GPU profile it is built with ("v100-32gb")
  Number gpus_per_node;             // integral
  Number cores;                     // physical cores per node, integral
  Number ram_bytes;
  /// fp32 AdamW elements per second of one core, and the host memory bandwidth that caps all
  /// cores together (28 bytes per element): the CPU Adam table is rebuilt from them. Value 0 =
  /// not given (the GPU profile's table is kept).
  Number cpu_adam_per_core;
  Number memory_bytes_per_s;
  /// NVMe drives striped together (RAID 0 or one swap folder per drive); 0 = none.
  Number nvme_drives;
  Number nvme_drive_capacity_bytes;
  Number nvme_drive_read_bytes_per_s;
  Number nvme_drive_write_bytes_per_s;
  /// Network bandwidth per GPU (the NICs' line rate / GPUs) and the fraction NCCL reaches;
  /// 0 = not given (the GPU profile's inter-node curves are kept).
  Number nic_bytes_per_s_per_gpu;
  Number nic_busbw_efficiency;
  /// Intra-node collective bus bandwidth (NVLink / NVSwitch); 0 = not given.
  Number intra_node_busbw_bytes_per_s;

  bool operator==(const NodeProfile&) const = default;
};

/// |gpu| built into |node|: gpus_per_node, host cores and RAM, the CPU Adam table (when the
/// node gives per-core rates), NVMe (drives x per-drive rates and capacity), the inter- and
/// intra-node collective bandwidths (when given). The name becomes "<gpu>@<node>".
HardwareProfile ApplyNodeProfile(const HardwareProfile& gpu, const NodeProfile& node);

}  // namespace dsplan

// The YAML reader and writer (ParseHardwareProfile, FindHardwareProfile, WriteHardwareProfile,
// node profiles): declared in core/profile_yaml.h, included here so that callers that read
// profiles need no second include.
#include "core/profile_yaml.h"

#endif  // DSPLAN_CORE_HARDWARE_PROFILE_H_
