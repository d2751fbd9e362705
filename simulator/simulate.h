// Simulate: Workload + Plan + HardwareProfile -> Prediction (docs/architecture.md, "The main
// values").
//
// Builds the StepGraph, prices each task with the CostModel, schedules it, and walks the memory
// timeline. A plan that does not fit is a Prediction with fits = false and a reason, never an
// error.
#ifndef DSPLAN_SIMULATOR_SIMULATE_H_
#define DSPLAN_SIMULATOR_SIMULATE_H_

#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/hardware_profile.h"
#include "core/model_spec.h"
#include "core/plan.h"
#include "core/status.h"
#include "simulator/cost_model.h"
#include "simulator/scheduler.h"
#include "simulator/step_builder.h"
#include "simulator/workload.h"

namespace dsplan {

/// What a simulation reuses across plans with the same workload and profile (the planner
/// simulates many plans per workload).
struct SimulationContext {
  const Workload* workload = nullptr;
  const HardwareProfile* profile = nullptr;
  std::vector<LayerCost> layer_costs;   // CostModel::Layers(*workload)
  std::vector<LayerParams> layer_params;  // ComputeLayerParams(*workload, threshold)
  int64_t persistence_threshold = 0;
  SoftwareStack stack = SoftwareStack::kPyTorchDeepSpeed;
  /// false: the layers were priced as for a family the stack measurement never saw
  /// (MakeUnseenFamilySimulationContext), so its prediction gets that band (StepTimeBand).
  bool family_blocks = true;
  /// profile->SourceSummary(), made once for every prediction of the context (empty: each
  /// prediction makes it).
  std::string profile_sources;
  /// CostModel::LinearGemmCoverage of the workload on the profile's table.
  GemmCoverage gemm_coverage;
};

/// MakeSimulationContext, as for a model family the stack measurement never saw (its blocks'
/// measured host time unused: CostModel::Layers(w, false)).
SimulationContext MakeUnseenFamilySimulationContext(const Workload& w,
                                                    const HardwareProfile& profile,
                                                    Precision precision,
                                                    int64_t persistence_threshold);

/// The NVMe rate (bytes/s, read or write) at a config's aio settings: of the profile's measured
/// points, the nearest block size (log scale) to aio.block_size, then the largest queue depth
/// not above queue_depth x intra_op_parallelism (the smallest when none is); DeepSpeed's aio
/// handle keeps queue_depth requests of block_size in flight per thread. Without points, the
/// profile's (best) rate.
double NvmeAioRate(const NvmeProfile& nvme, const AioConfig& aio, bool read);

/// REQUIRES: |w| and |profile| outlive the context.
SimulationContext MakeSimulationContext(
    const Workload& w, const HardwareProfile& profile, Precision precision,
    int64_t persistence_threshold, SoftwareStack stack = SoftwareStack::kPyTorchDeepSpeed);

/// How far a measured GPU memory peak may lie from dsplan's prediction of it, as fractions of
/// the predicted peak reserved memory (torch.cuda.max_memory_reserved). The one place these
/// numbers live; docs/planner.md "Memory headroom" gives their sources.
/// Host RAM a plan must leave free: the OS, the page cache, other processes, and the host
/// prediction's error. Measured against the offload runs' resident peak: +0.3 % and +0.9 % on
/// stage 1/2 CPU offload, 11 % low on the one stage-3 run with parameters offloaded too (a
/// pinned buffer not yet modeled). A headroom, not a validated band (docs/simulator.md).
inline constexpr double kHostHeadroom = 0.05;

struct MemoryBand {
  double upper = 0;          // measured may be up to (1 + upper) x predicted + upper_bytes
  /// The step's largest single transient GPU allocation (activations, temporaries, buffers):
  /// fragmentation can strand up to one block of that size beyond what the replay reserves.
  int64_t upper_bytes = 0;
  /// The largest such allocation the allocator replay served without a new segment
  /// (AllocatorResult::largest_cached_transient; 0 without the replay). A block the replay
  /// reserved a segment for cannot be the one reality fails to place; not used by the band yet.
  int64_t cached_block_bytes = 0;
  double lower = 0;          // ... or down to (1 - lower) x predicted
  bool provisional = true;   // not yet drawn from the validation record for this task class
  std::string basis;         // one line: where the numbers come from
};

/// How far a measured step time may lie from dsplan's prediction: measured between |low| and
/// |high| times the predicted. Drawn from the 155 real DeepSpeed runs with a step time
/// (calibration, validation, hold-out, rank-1 plan, fresh-set and repeat records;
/// docs/simulator.md "Accuracy today"), by how host-bound the step is.
struct TimeBand {
  double low = 1;              // measured at least low x predicted
  double high = 1;             // ... and at most high x predicted
  bool family_measured = false;  // the family's block host time was measured (stack_costs.h)
  std::string basis;           // one line: where the numbers come from
  /// On more than one GPU: the share of the step that is exposed communication between GPUs.
  /// Every run the band was drawn from used one GPU, so this part of the prediction (priced
  /// from the profile's link numbers) is outside the band's evidence; 0 on one GPU.
  double unvalidated_comm_share = 0;
  /// The share of the step that is NVMe I/O (ZeRO-Infinity's swapping). No real DeepSpeed run
  /// with NVMe offload is in the record, so that part of the band comes from the disk's own
  /// measured spread instead (StepTimeBandWithNvme); 0 without NVMe on the critical path.
  double unvalidated_nvme_share = 0;
  /// The share of the Linears' FLOPs priced from a measured GEMM shape more than
  /// kGemmFarRatio away (GemmCoverage::far_flops_share); StepTimeBandWithGemmCoverage widens
  /// the slow side for it.
  double far_gemm_share = 0;
};

struct StackCosts;

/// How much slower than priced a step ran whose every Linear was priced from a measured shape
/// more than kGemmFarRatio away: the H200 runs replayed with the profile's table cut to a
/// `--quick` profile's 49 shapes came out up to 31 % fast (gpt2 at 1024 tokens; GPT-2 and BERT
/// 12-31 %), the H100 plans of h100plans-1206 11-22 % (docs/validation/deepspeed/h100plans-1206).
/// An allowance from those runs, not a mechanism.
inline constexpr double kFarGemmSlowdown = 0.31;
/// |band| with its slow side widened by kFarGemmSlowdown x |coverage|'s far share, and the
/// basis saying so; unchanged when every Linear is priced from a near shape.
TimeBand StepTimeBandWithGemmCoverage(TimeBand band, const GemmCoverage& coverage);

/// The band for a step-time prediction of |spec| priced with |stack| (the profile's stack costs,
/// StackCostsOf) whose step is |host_bound_share| host-bound (Prediction::host_bound_share):
/// narrow for GPU-bound steps, wider as the host's share grows (its speed varies between runs),
/// and wider again when |stack| does not hold the host time of the family's blocks (they are
/// priced per op). So a profile whose stack section measured other families than the built-in
/// costs gets the band of what it measured. A |zero3| step (ZeRO stage 3) is its own task class:
/// its GPU-bound band reaches higher (its hooks' host time can keep the GPU waiting).
/// |family_priced| false: the prediction priced the family's blocks per op although |stack|
/// measured them (`dsplan accuracy --unseen-families`).
/// A family priced per op has its forward scaled from the other measured families when |stack|
/// holds at least three (StackCosts::ScaleForUnmeasured), and gets the band drawn for that; with
/// fewer, the per-op estimate stands unscaled and the band is the widest.
/// A step whose optimizer is offloaded (|optimizer_offloaded|) is a task class of its own, at
/// ZeRO-3 and at stages 1-2: its band reaches higher (the per-parameter host copies and checks
/// are priced short and follow the host's speed), and at ZeRO-3 lower too (faster hosts).
TimeBand StepTimeBand(const ModelSpec& spec, const StackCosts& stack, double host_bound_share,
                      bool zero3 = false, bool family_priced = true,
                      bool optimizer_offloaded = false);

/// |band| with |nvme_share| of the step in NVMe I/O: that part at 0.5-2x of its prediction (the
/// three runs of one NVMe-bound plan on the H200 machine's disk read the same bytes in 0.63-1.6x
/// of the predicted time, minutes apart: docs/validation/h200-findings.md), the rest at the
/// band's own ends; the basis says so. |nvme_share| <= 0 returns |band| unchanged.
TimeBand StepTimeBandWithNvme(TimeBand band, double nvme_share);

/// The band for a prediction of |spec| trained with |plan|, drawn from the validation record of
/// real DeepSpeed runs (docs/planner.md "Memory headroom"): validated families +9 %, others a
/// provisional +12 %.
MemoryBand PeakMemoryBand(const ModelSpec& spec, const Plan& plan);

/// Device memory NCCL allocates outside PyTorch's caching allocator when the plan has more than
/// one rank (0 for one rank). An estimate, not a measurement: docs/planner.md.
int64_t NcclWorkspaceBytes(const Plan& plan);

/// GPU memory a plan must leave free beyond its predicted peak, its error band, the CUDA context
/// and NCCL: other processes, fragmentation spikes and library workspaces the allocator model
/// does not see. `--headroom` on the command line: a size ("4GiB") or a percentage of the
/// device ("5%"). The only such knob (it replaces the old margin and memory fraction).
struct Headroom {
  static constexpr double kDefaultFraction = 0.03;
  double fraction = kDefaultFraction;  // of the device memory, when bytes < 0
  int64_t bytes = -1;                  // >= 0: an absolute size
  int64_t Bytes(int64_t capacity) const;
  /// "3% (4.2 GiB)" / "4 GiB".
  std::string Describe(int64_t capacity) const;
};
/// Parses "5%", "2.5%", "4GiB", "4096MiB", "0". Errors name --headroom and what is valid.
Result<Headroom> ParseHeadroom(const std::string& text);

/// ZeRO 1-2 plans of at most this many data-parallel ranks are simulated rank by rank to find
/// the one that needs the most (SimulateOptions::rank); larger ones as the rank class.
inline constexpr int kMaxRanksCompared = 16;

struct SimulateOptions {
  /// Keep the graph, schedule and curve (for traces, reports, executors). The kept graph is
  /// the unrolled one (StepGraphForm::kUnrolled: at most kMaxUnrolledMicroSteps micro-steps),
  /// and so is what the prediction is computed from.
  bool keep_graph = false;
  bool model_allocator = true;      // predict max_memory_reserved with the allocator model
  /// What must stay free on each GPU beyond band, context and NCCL (--headroom).
  Headroom headroom;
  /// Apply PeakMemoryBand's upper bound when judging fit (off only for replays of measured
  /// runs, whose verdict is compared with what happened).
  bool apply_band = true;
  /// Host RAM and NVMe space per node to judge against; 0 = the profile's (NVMe: no limit when
  /// the profile has none).
  int64_t host_memory_bytes = 0;
  int64_t nvme_bytes = 0;
  /// Experimental (docs/research/host-pipeline.md): the thread that issues the kernels as a
  /// pipeline stage that runs ahead of the GPU between the waits BuildHostPipeline lists,
  /// instead of each layer taking the longer of its kernels and its host work. PyTorch stack
  /// only; the graph is scheduled unrolled (at most kMaxUnrolledMicroSteps micro-steps).
  bool host_pipeline = false;
  /// With host_pipeline: the loop synchronizes after each phase (records timed phase by phase).
  bool sync_each_phase = false;
  /// Keep the segments the caching-allocator replay reserves (Prediction::allocator_segments).
  bool record_segments = false;
  /// The data-parallel rank to predict (a rank in [0, N), or kRankClass for one graph that
  /// takes each rank-dependent part at its worst rank). None: the rank that decides the fit.
  /// Ranks differ only at ZeRO stages 1-2 with several ranks (kRankClass in step_builder.h);
  /// there every rank is simulated (up to kMaxRanksCompared; beyond, the rank class) and the
  /// one that needs the most is reported (Prediction::facts.rank: the worst verdict, then the
  /// highest peak allocated; all in Prediction::rank_peaks), with the largest peak reserved and
  /// cached transient of any rank, the fit judged on those. No fixed few ranks bound the rest:
  /// a middle rank can keep extra-large gradients at both ends of the model and allocate its
  /// partition buffer early (seen in 17 of 528 catalog plans, by up to 0.7 % allocated and 6 %
  /// reserved, when only the first, the last and the widest rank were compared).
  std::optional<int> rank;
  /// Predict the plan's rank as run alone on one GPU under torch.distributed's fake backend,
  /// as the validation harness emulates a world size (CostModel::set_fake_process_group):
  /// collectives cross no link; all-gathers are local copies.
  bool fake_process_group = false;
};

/// A segment the caching-allocator replay reserved (SimulateOptions::record_segments): in which
/// of the two replayed steps (1 warms the cache, as training's first step does; 2 is the steady
/// step whose peak is predicted), during which task, its bytes and the reserved total after it.
struct AllocatorSegment {
  int step = 1;
  std::string task;
  int64_t bytes = 0;
  int64_t reserved_after = 0;
  bool lazy_state = false;  // for one of Adam's states, created in the first step()
};

/// One rank's memory where Simulate compared ranks (SimulateOptions::rank unset, stages 1-2).
struct RankPeak {
  int rank = 0;
  int64_t peak_allocated_bytes = 0;
  int64_t peak_reserved_bytes = 0;
  std::string peak_at;
};

struct StepBreakdown {
  double forward_s = 0;        // compute stream: forward (incl. recompute? no: recompute below)
  double backward_s = 0;
  double recompute_s = 0;
  double optimizer_s = 0;      // GPU optimizer and CPU optimizer on the critical path
  double exposed_comm_s = 0;   // collectives on the critical path
  double offload_s = 0;        // PCIe copies on the critical path
  double nvme_s = 0;           // NVMe on the critical path
  double other_s = 0;          // gradient copies and casts on the critical path
};

/// fits: upper-band total + headroom <= capacity. at risk: the predicted total fits the device
/// but not with the band and headroom. does not fit: the predicted total exceeds the device (or
/// the allocator finds no block), or host RAM / NVMe is short.
enum class MemoryVerdict { kFits, kAtRisk, kDoesNotFit };
const char* MemoryVerdictName(MemoryVerdict v);  // "fits", "at_risk", "does_not_fit"

struct Prediction {
  bool fits = true;              // verdict == kFits
  MemoryVerdict verdict = MemoryVerdict::kFits;
  std::string reason;            // why it does not fit ("" when it fits)
  std::vector<std::string> warnings;
  StepFacts facts;  // facts.rank: the rank this prediction is for
  /// Predicted as one rank emulated on one GPU (SimulateOptions::fake_process_group).
  bool fake_process_group = false;
  /// The ranks simulated to find the one that decides the fit (empty when ranks do not differ
  /// or one was asked for), in the order simulated.
  std::vector<RankPeak> rank_peaks;
  /// SimulateOptions::record_segments: every growth of the replay's reserved memory, in order.
  std::vector<AllocatorSegment> allocator_segments;
  Plan plan;
  std::string profile_name;
  std::string profile_sources;   // HardwareProfile::SourceSummary()
  int64_t tokens_per_micro_batch = 0;

  // GPU, per rank.
  int64_t gpu_capacity_bytes = 0;
  int64_t gpu_peak_allocated_bytes = 0;  // torch.cuda.max_memory_allocated
  int64_t gpu_peak_reserved_bytes = 0;   // torch.cuda.max_memory_reserved
  int64_t gpu_context_bytes = 0;         // outside the allocator
  int64_t gpu_total_bytes = 0;           // reserved + context: what nvidia-smi shows
  int64_t gpu_nccl_bytes = 0;            // NcclWorkspaceBytes (world > 1)
  /// The caching-allocator replay found no block for an allocation (against the GPU less the
  /// context and NCCL).
  bool gpu_allocator_out_of_memory = false;
  MemoryBand memory_band;                // PeakMemoryBand
  TimeBand time_band;                    // StepTimeBand
  int64_t gpu_upper_total_bytes = 0;     // reserved x (1 + band.upper) + context + NCCL
  int64_t gpu_headroom_bytes = 0;        // Headroom::Bytes(capacity)
  /// capacity - (reserved + context + NCCL): what the nominal prediction leaves free.
  int64_t gpu_spare_bytes = 0;
  /// capacity - (the upper memory band + context + NCCL) - headroom: what the plan leaves
  /// beyond what the fit verdict already keeps free (negative when it does not fit).
  int64_t GpuRoomBeyondBandBytes() const {
    return gpu_capacity_bytes - gpu_upper_total_bytes - gpu_headroom_bytes;
  }
  CategoryBytes gpu_breakdown_at_peak{}; // incl. context and allocator overhead
  std::string gpu_peak_task;             // the task at the peak
  // Host and NVMe, per node.
  int64_t host_peak_bytes_per_node = 0;
  int64_t host_pinned_bytes_per_node = 0;
  int64_t host_capacity_bytes_per_node = 0;
  int64_t nvme_bytes_per_node = 0;
  // What one rank reads from and writes to NVMe in one optimizer step (all micro-steps): the
  // graph's NVMe tasks, a number the user can check with iostat.
  double nvme_read_bytes_per_step = 0;
  double nvme_write_bytes_per_step = 0;

  // Time.
  double step_time_s = 0;
  double samples_per_s = 0;
  double tokens_per_s = 0;
  double tflops_per_gpu = 0;
  double mfu = 0;
  /// The peak MFU is measured against: the profile's dense peak for the plan's dtype (fp32
  /// plans against the fp32 peak, bf16/fp16 against the 16-bit tensor-core peak).
  double mfu_peak_flops = 0;
  StepBreakdown breakdown;
  std::array<double, kNumResources> busy_s{};
  std::string bottleneck;
  /// The share of the step (0-1) spent in forward, recompute and backward tasks whose host
  /// work (eager dispatch, ZeRO-3 hooks) is longer than their kernels: the part of the step
  /// whose time follows the host CPU's speed, which varies between runs (StepTimeBand).
  double host_bound_share = 0;
  /// ZeRO-3 with offload_param on the CPU: the host's seconds per step waiting for the copies
  /// of parameter partitions its fetches issue (simulator/param_fetch.h), within the layer
  /// tasks' times; 0 otherwise.
  double param_fetch_wait_s = 0;

  // Kept with SimulateOptions::keep_graph.
  StepGraph graph;
  Schedule schedule;
  MemoryTimeline memory;
  std::vector<double> durations;
};

Result<Prediction> Simulate(const SimulationContext& ctx, const Plan& plan,
                            const SimulateOptions& options = {});

/// One model on one machine with one software stack: what every caller simulates through (the
/// planner's search, `simulate`, `check`, `estimate`, `accuracy`, the GUI's what-if and the
/// benchmarks). It builds each run shape's Workload once, and for each workload the per-layer
/// cost facts once per ZeRO-3 persistence threshold (the SimulationContext), so callers never
/// pick contexts themselves: Simulate(plan) finds the plan's shape and threshold.
///
/// Workloads and contexts live as long as the Simulator; the pointers it returns stay valid
/// until it is destroyed. Thread safety: every member may be called from several threads at
/// once (the search's workers share one Simulator); a workload or context two threads ask for
/// at the same time is built once, by the first, while the other waits for it.
class Simulator {
 public:
  /// |family_measured| false: price the blocks as for a model family the stack measurement
  /// never saw (CostModel::Layers(w, false); `dsplan accuracy --unseen-families`).
  Simulator(ModelSpec spec, std::shared_ptr<const HardwareProfile> profile,
            SoftwareStack stack = SoftwareStack::kPyTorchDeepSpeed, bool family_measured = true);
  /// A Simulator over a profile the caller keeps alive. REQUIRES: |profile| outlives it.
  Simulator(ModelSpec spec, const HardwareProfile& profile,
            SoftwareStack stack = SoftwareStack::kPyTorchDeepSpeed, bool family_measured = true);
  Simulator(const Simulator&) = delete;
  Simulator& operator=(const Simulator&) = delete;

  const ModelSpec& spec() const { return spec_; }
  const HardwareProfile& profile() const { return *profile_; }
  SoftwareStack stack() const { return stack_; }

  /// The workload of |shape| (built on first use). Errors: BuildWorkload's.
  Result<const Workload*> WorkloadFor(const RunShape& shape);
  /// The simulation context of |shape| at |persistence_threshold| (built on first use).
  Result<const SimulationContext*> ContextFor(const RunShape& shape,
                                              int64_t persistence_threshold);
  /// The persistence threshold a plan's context is built with: the plan's
  /// stage3_param_persistence_threshold at stage 3, else 0 (no parameter persists).
  static int64_t PersistenceThreshold(const Plan& plan);

  /// Simulates |plan| with the cached workload and context of its shape.
  Result<Prediction> Simulate(const Plan& plan, const SimulateOptions& options = {});

 private:
  struct Context {
    std::once_flag built;
    std::unique_ptr<SimulationContext> context;
  };
  struct Entry {
    // The first caller traces; later ones wait.
    std::once_flag built;
    Status status;                        // BuildWorkload's error, if any
    std::unique_ptr<Workload> workload;
    // The workload's layer costs (CostModel::Layers), which do not depend on the persistence
    // threshold: priced once and copied into each threshold's context.
    std::once_flag costs_built;
    std::vector<LayerCost> layer_costs;
    GemmCoverage gemm_coverage;
    std::map<int64_t, std::unique_ptr<Context>> contexts;  // by threshold
  };
  struct ShapeLess {
    bool operator()(const RunShape& a, const RunShape& b) const;
  };
  Entry* EntryFor(const RunShape& shape);

  ModelSpec spec_;
  std::shared_ptr<const HardwareProfile> profile_;
  SoftwareStack stack_;
  bool family_measured_;
  std::mutex mu_;
  std::map<RunShape, std::unique_ptr<Entry>, ShapeLess> entries_;
};

}  // namespace dsplan

#endif  // DSPLAN_SIMULATOR_SIMULATE_H_
