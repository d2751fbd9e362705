// CostModel: task durations from a HardwareProfile (docs/simulator.md, "Time").
//
//  * GEMMs: FLOPs / achieved FLOP/s, where the achieved rate comes from the profile's measured
//    GEMM table (nearest shape in log space; for the PyTorch stack the table measured through
//    PyTorch when the profile has one, simulator/gemm_table.h StackGemmTable) or, for datasheet profiles, the large-GEMM
//    efficiency times the dtype's peak; never faster than the roofline of its bytes.
//  * Memory-bound ops (elementwise, norms, softmax, casts, optimizer): bytes / (HBM bandwidth x
//    memory-bound efficiency).
//  * Fused attention: PyTorch's SDPA as FLOPs (halved when causal) / (bf16 peak x attention
//    efficiency), floored by its bytes; dsplan's runtime kernel at the profile's measured
//    attention table (its tiled-GEMM stand-in where the kernel or the table is missing).
//  * Every op also costs the host its dispatch time (PyTorch eager issues one kernel per op);
//    a layer takes max(device time, dispatch time), so small models come out launch-bound.
//  * Collectives: alpha + S * BusFactor / busbw (core/collectives.h) from the profile's curves.
//  * PCIe copies: latency + S / bandwidth, pinned or pageable; CPU Adam: elements / rate at the
//    rank's thread count; NVMe: bytes / sustained bandwidth.
#ifndef DSPLAN_SIMULATOR_COST_MODEL_H_
#define DSPLAN_SIMULATOR_COST_MODEL_H_

#include <map>
#include <memory>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "core/hardware_profile.h"
#include "core/plan.h"
#include "simulator/step_graph.h"
#include "simulator/workload.h"

namespace dsplan {

class GemmTable;
struct StackCosts;
struct UnmeasuredHostScale;

/// Seconds of one layer's compute, split by op class (for the validation report and the
/// breakdown).
struct LayerCost {
  double fwd_s = 0;
  double bwd_s = 0;
  double recompute_s = 0;       // = fwd_s when checkpointed, else 0
  double fwd_gemm_s = 0, fwd_attention_s = 0, fwd_memory_s = 0, fwd_dispatch_s = 0;
  double bwd_gemm_s = 0, bwd_attention_s = 0, bwd_memory_s = 0, bwd_dispatch_s = 0;
  double recompute_dispatch_s = 0;  // host time of the recomputation (checkpointed layers)
  int32_t modules = 0;          // nn.Modules in the layer (ZeRO-3 hooks each)
  double FwdGpuSeconds() const { return fwd_gemm_s + fwd_attention_s + fwd_memory_s; }
  double BwdGpuSeconds() const { return bwd_gemm_s + bwd_attention_s + bwd_memory_s; }
};

/// Whose software issues the step's kernels. The hardware terms are the same; the host-side
/// terms differ (docs/simulator.md, "Software stacks"):
///  * kPyTorchDeepSpeed: PyTorch eager + transformers + DeepSpeed, what users run. The host
///    time of blocks, ops and ZeRO-3 hooks and the rates of PyTorch's memory-bound kernels are
///    measured on that stack (simulator/stack_costs.h); nothing is fitted to training runs.
///  * kDsplanRuntime: dsplan's own executor (`dsplan validate`): one C++ thread issues each
///    kernel at the profile's measured launch cost, memory-bound work runs at the profile's
///    measured streaming rate. Nothing in it is fitted.
enum class SoftwareStack { kPyTorchDeepSpeed, kDsplanRuntime };
/// The most launches the runtime splits one memory-bound task into (runtime/cuda/executor.cc).
inline constexpr int kRuntimeMaxStreamLaunches = 1 << 14;
const char* SoftwareStackName(SoftwareStack s);

/// The measured FLOP/s (forward, or backward when |backward|) of the runtime's fused attention
/// at sequence length |seq| with |rows| = slices x seq of work, from |table| (HardwareProfile
/// gpu.attention): the points of |head_dim| and |causal| in |dtype| (else in the other 16-bit
/// dtype); within each series of equal work (batch_heads x seq) the rate is interpolated
/// linearly in log seq, then across the series linearly in log rows, clamped at the ends (rows
/// <= 0: the largest series). 0 when the table has no such point.
double FusedAttentionRate(const std::vector<AttentionPoint>& table, Precision dtype,
                          int64_t head_dim, bool causal, double seq, double rows, bool backward);

/// The alignment cuBLAS sees for a matrix whose rows are |dim| elements of |elem_bytes|: the
/// largest of 16, 8, 4, 2 and 1 bytes that divides the row stride. GEMMs of different classes
/// run different kernels, so measured rates transfer only within a class.
int GemmAlignmentClass(int64_t dim, int64_t elem_bytes);

/// CostModel::LinearGemmCoverage. A `dsplan profile --quick` table (layers of hidden 2048 and
/// 4096 only) priced GPT-2's and BERT's Linears from shapes 1.3-2.7x larger; on the H200 the
/// same runs then came out 12-31 % fast against 0-7 % with the full table, as they did on the
/// H100 (docs/validation/deepspeed/h100plans-1206).
inline constexpr double kGemmFarRatio = 1.25;
/// From this share of the Linear FLOPs priced far, a prediction also warns (Prediction::warnings).
inline constexpr double kGemmFarWarnShare = 0.25;
struct GemmCoverage {
  bool measured = false;       // the profile has Linear-layout rows of this precision
  double far_flops_share = 0;  // of the Linears' forward FLOPs
  /// Of those, priced from a measured shape whose dimensions have another alignment class
  /// (GemmAlignmentClass): a dimension that is not a multiple of 8 elements makes cuBLAS run
  /// other kernels, however near the sizes (GPT-2's 50,257-wide LM head ran a Turing-era
  /// alignment-1 kernel at 8-12 % of an H100's peak; docs/validation/deepspeed/h100diag-1206).
  double other_alignment_share = 0;
  double worst_ratio = 1;      // the largest measured/wanted ratio in a layer dimension
  int64_t want_a = 0, want_b = 0, have_a = 0, have_b = 0;  // that pair: (out, in) of both
};

class CostModel {
 public:
  /// |profile| must outlive the CostModel.
  CostModel(const HardwareProfile& profile, Precision precision,
            SoftwareStack stack = SoftwareStack::kPyTorchDeepSpeed);

  const HardwareProfile& profile() const { return *profile_; }

  double PeakFlops(Precision p) const;
  /// One (batched) GEMM C[m,n] = A[m,k] B[k,n], |batch| times, in |p|.
  double GemmSeconds(Precision p, double m, double n, double k, double batch) const;
  /// A torch.nn.Linear product in |layout| (core/hardware_profile.h: nt forward (tokens, out,
  /// in), nn input gradient (tokens, in, out), tn weight gradient (out, in, tokens)), from the
  /// measured table's series of the nearest layer shape, interpolated in the token count.
  double LinearGemmSeconds(GemmLayout layout, double m, double n, double k) const;
  /// |batch| products C[m,n] = op(A) op(B) of a batched matmul in |layout| (nn forward, nt and
  /// tn the operands' gradients), from the nearest measured batched product; tables without
  /// batched rows: GemmSeconds.
  double BatchedGemmSeconds(GemmLayout layout, double m, double n, double k, double batch) const;
  /// The same in precision |p| (SDPA's math path multiplies upcast fp32 operands).
  double BatchedGemmSeconds(GemmLayout layout, double m, double n, double k, double batch,
                            Precision p) const;
  /// One memory-bound kernel that reads and writes |bytes| in all: PyTorch's at the fitted
  /// fraction of the streaming rate; dsplan's runtime at the profile's per-launch curve.
  double MemoryBoundSeconds(double bytes) const;
  /// Bytes/s of PyTorch's kernels of class |c| on this profile's GPU (the measured rate, scaled
  /// by this profile's streaming rate over the measured machine's).
  double EagerRate(KernelClass c, bool backward) const;
  /// A GPU optimizer task on the PyTorch stack (see Task::fp64_cast_bytes).
  double PyTorchOptimizerSeconds(const Task& t, double dispatch) const;
  /// An elementwise op's kernels as eager PyTorch runs them (Op::eager), at EagerRate; dsplan's
  /// runtime: its least traffic at the streaming rate.
  double EagerSeconds(const Op& op, bool backward) const;
  /// |bytes| of memory-bound work issued as |launches| kernels (dsplan's runtime splits it
  /// evenly; PyTorch's is priced by bytes, its dispatch separately).
  double StreamSeconds(double bytes, int launches) const;
  /// |bytes| at the measured streaming rate (hbm x memory-bound efficiency): the floor of a
  /// GEMM whatever the software stack.
  double RooflineSeconds(double bytes) const;
  /// One launch of the runtime's streaming kernel over |bytes| (the profile's curve; without
  /// one, bytes over the measured streaming rate).
  double StreamLaunchSeconds(double bytes) const;
  double OpForwardSeconds(const Op& op) const;
  double OpBackwardSeconds(const Op& op) const;
  /// The memory-bound part of OpBackwardSeconds: a Linear's bias-gradient reduction in eager
  /// PyTorch (not a GEMM: no sustained-load scaling); 0 for other ops and dsplan's runtime.
  double BackwardMemoryBoundPart(const Op& op) const;
  LayerCost Layer(const dsplan::Layer& layer) const;
  std::vector<LayerCost> Layers(const Workload& w) const;
  /// The same, |family_measured| false: as for a family whose blocks the stack measurement
  /// never saw (per-op host costs, the forward scaled from the other measured families:
  /// StackCosts::ScaleForUnmeasured), to report leave-one-family-out accuracy.
  std::vector<LayerCost> Layers(const Workload& w, bool family_measured) const;
  /// A GEMM's time under sustained load over its time alone at tensor-core |duty| (0-1), from
  /// the profile's measured curve (HardwareProfile::gpu.sustained_gemm; 1 without one): linear
  /// between points, from 1 at duty 0 to the first point, the last point's above it.
  double SustainedGemmRatio(double duty) const;
  /// How near the profile's measured Linear layer shapes are to |w|'s (each Linear is priced
  /// from the nearest measured layer shape, GemmTable::NearestLinearShape): the share of the
  /// Linears' forward FLOPs priced from a shape more than kGemmFarRatio away in a layer
  /// dimension, and the worst such pair. Profiles without Linear layouts: nothing measured.
  GemmCoverage LinearGemmCoverage(const Workload& w) const;
  /// The ratio Layers() applies to |w|'s GEMM and attention kernels: SustainedGemmRatio at their
  /// duty in the layers' costs at the table's rates.
  double WorkloadSustainedRatio(const Workload& w, bool family_measured = true) const;

  /// A collective of |bytes| (core/collectives.h's S) on |ranks| ranks: from the profile's
  /// curves; with set_fake_process_group, what PyTorch's fake backend does on one GPU instead.
  double CollectiveSeconds(Collective c, int ranks, bool inter_node, double bytes) const;
  /// Price collectives as one rank of |ranks| emulated on one GPU under torch.distributed's
  /// fake backend (the validation harness's emulate_world_size; docs/deepspeed-facts.md, "An
  /// emulated rank's collectives"): nothing crosses a link, but an all-gather copies the
  /// rank's input into each other rank's chunk of its output on the GPU, a streaming copy of
  /// S (N-1)/N bytes read and as many written; all-reduce and reduce (in place) are no-ops.
  void set_fake_process_group(bool on) { fake_process_group_ = on; }
  double CopySeconds(bool h2d, bool pinned, double bytes) const;
  /// DeepSpeedCPUAdam over |elements| fp32 elements with |threads| threads.
  double CpuAdamSeconds(double elements, int threads) const;
  /// A PyTorch elementwise pass on host tensors that reads and writes |bytes| in all, with
  /// |threads| threads: at the host memory bandwidth the CPU Adam measurement implies.
  double HostStreamSeconds(double bytes, int threads) const;
  /// Faulting in |bytes| of freshly mapped host memory (and unmapping it after): the profile's
  /// page-fault throughput of one thread, pageable_alloc_bytes_per_s.
  double HostFaultSeconds(double bytes) const;
  /// The same when the host's threads fault one fresh mapping in together (a host cast into a
  /// fresh temporary): parallel_alloc_bytes_per_s.
  double ParallelFaultSeconds(double bytes) const;
  /// The page faults of |bytes| of fresh temporaries that blocking cast copies write: none on
  /// top when the stack's cast-copy curve measured the fresh-mapping regime (they are in its
  /// points), else HostFaultSeconds.
  double CastCopyFaultSeconds(double bytes) const;
  double NvmeSeconds(bool read, double bytes) const;
  /// A kGradCopy task's per-parameter loop on the PyTorch stack (Task::host_loop), with
  /// |dispatch| the host time of one op.
  double HostLoopSeconds(const Task& t, double dispatch) const;
  /// Host dispatch time per kernel (PyTorch eager, or the runtime's launch).
  double DispatchSeconds() const;
  SoftwareStack stack() const { return stack_; }
  /// The PyTorch stack's costs this model prices with: the profile's stack section, else the
  /// built-in ones (simulator/stack_costs.h).
  const StackCosts& stack_costs() const { return *stack_costs_; }

  /// A layer task's (forward, recompute, backward) kernels and host work (dispatch and ZeRO-3
  /// hooks) apart, which TaskSeconds takes the longer of; false for other tasks.
  bool LayerTaskParts(const Task& task, const std::vector<LayerCost>& layers, double* gpu_s,
                      double* host_s) const;
  /// The duration of |task|; compute tasks of layers read |layers| (from Layers()).
  double TaskSeconds(const Task& task, const std::vector<LayerCost>& layers, int cpu_threads) const;
  /// The same; |*host_bound| says whether a layer task's host work (dispatch and hooks) is
  /// longer than its kernels, so that the host's speed sets its time (false for other tasks).
  double TaskSeconds(const Task& task, const std::vector<LayerCost>& layers, int cpu_threads,
                     bool* host_bound) const;

 private:
  using OpMemoKey =
      std::tuple<int, int64_t, int64_t, int64_t, int64_t, int, double, double, double>;
  /// An op's forward and backward seconds, and the memory-bound part of the backward
  /// (BackwardMemoryBoundPart).
  struct OpSeconds {
    double fwd = 0, bwd = 0, bwd_memory = 0;
  };
  using OpMemo = std::map<OpMemoKey, OpSeconds>;
  /// Layer() with forward/backward seconds of ops already priced in |memo| (may be null).
  /// |model_type| picks the family's measured block host time.
  // Layers() at the GEMM table's rates (GEMMs measured alone).
  std::vector<LayerCost> LayersAlone(const Workload& w, bool family_measured) const;
  // SustainedGemmRatio at the tensor-core duty of |alone| (LayersAlone).
  double SustainedLoadRatio(const std::vector<LayerCost>& alone) const;
  // Scales the GEMM and attention kernels of |layers| (all of |w|'s) by |ratio|.
  void ApplySustainedLoad(const Workload& w, double ratio, std::vector<LayerCost>* layers) const;
  // |scale|: what a layer without its family's measurement scales its per-op host estimate by
  // (StackCosts::ScaleForUnmeasured, over the families other than the model's own).
  LayerCost LayerWithMemo(const dsplan::Layer& layer, std::string_view model_type,
                          const UnmeasuredHostScale& scale, OpMemo* memo) const;
  /// Host time of DeepSpeed ZeRO-3's hooks around layer task |t| of the layer costed |c|; 0
  /// without them and for dsplan's runtime, which runs none.
  double HookSeconds(const Task& t, const LayerCost& c) const;
  /// Fused attention as dsplan's runtime runs it: its fused kernel at the profile's measured
  /// rates (gpu.attention), or the tiled GEMMs of its stand-in.
  double RuntimeAttentionSeconds(const Op& op, bool backward) const;
  /// Fused attention as the PyTorch stack runs it (SDPA's cuDNN / flash kernels): from the
  /// profile's measured table gpu.sdpa at the measured head dim nearest op.k, else at
  /// gpu.attention_efficiency of the peak (with a backward of 2.5x the forward's FLOPs).
  double StackAttentionSeconds(const Op& op, bool backward) const;
  /// Measured CPU Adam elements/s at |threads| (the best point at or below it).
  double CpuAdamRate(int threads) const;

  /// The index of the measured GEMMs this stack runs at (simulator/gemm_table.h
  /// StackGemmTable), on first use.
  const GemmTable& gemm_table() const;

  struct GemmTableSlot;
  const HardwareProfile* profile_;
  Precision precision_;
  SoftwareStack stack_;
  std::shared_ptr<const StackCosts> stack_costs_;
  std::shared_ptr<GemmTableSlot> gemm_slot_;
  bool fake_process_group_ = false;
};

}  // namespace dsplan

#endif  // DSPLAN_SIMULATOR_COST_MODEL_H_
