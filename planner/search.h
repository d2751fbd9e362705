// The planner: which DeepSpeed configuration fits on the cluster, and which is fastest.
//
// Search space (each dimension can be pinned by the request): ZeRO stage 0-3; offload_optimizer
// none/cpu/nvme and offload_param none/cpu/nvme (stage 3); activation checkpointing;
// reduce_bucket_size; overlap_comm (stages 1 and 2); micro-batch (any integer up to the largest
// that fits) and gradient accumulation to reach a global batch; precision (bf16 where the GPU
// has it, else fp16). A *family* is one setting of everything but the micro-batch.
//
// Method: for each family, a cheap bound first (the family's plan at the smallest micro-batch:
// if that does not fit, nothing larger will), then the largest micro-batch that fits by
// doubling and bisection, then every candidate micro-batch is simulated and ranked. All of it
// goes through one Simulator, which builds each run shape's workload and contexts once; families
// run on several threads. Every number comes from the same simulator `dsplan simulate` uses.
#ifndef DSPLAN_PLANNER_SEARCH_H_
#define DSPLAN_PLANNER_SEARCH_H_

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/hardware_profile.h"
#include "core/model_spec.h"
#include "core/plan.h"
#include "core/status.h"
#include "planner/run_shape_pins.h"
#include "simulator/simulate.h"

namespace dsplan {

enum class Objective { kThroughput, kMemory, kCost };
const char* ObjectiveName(Objective o);
Result<Objective> ParseObjective(const std::string& s);

/// What to search. The base, PinnedRunShape (planner/run_shape_pins.h), is the run shape of
/// every plan: the micro-batch, lengths, checkpointing, attention and precision have one
/// representation from the flags to the workload. Unpinned, the search varies the micro-batch
/// and checkpointing and takes the profile's precision (bf16 where the GPU has it, else fp16).
struct PlannerRequest : PinnedRunShape {
  ModelSpec spec;
  int nodes = 1;
  int gpus_per_node = 1;
  const HardwareProfile* profile = nullptr;
  // Pins of the configuration: unset = searched.
  std::optional<int> stage;
  std::optional<int64_t> grad_accum;
  std::optional<int64_t> global_batch;
  bool no_offload = false;
  /// Plan::zero_init for every plan (--no-zero-init: false).
  bool zero_init = true;
  /// Plan::malloc_heap for every plan (--malloc-heap: kMallocHeapEnv in the launch environment).
  bool malloc_heap = false;
  std::optional<OffloadDevice> offload_optimizer;
  std::optional<OffloadDevice> offload_param;
  std::optional<int64_t> reduce_bucket_size;

  /// Host RAM per node (0: the profile's). NVMe space per node (0: no NVMe offload).
  int64_t host_memory_bytes = 0;
  int64_t nvme_bytes = 0;
  std::string nvme_path = "/local_nvme";
  /// GPU memory each plan leaves free beyond its predicted peak, the peak's error band, the CUDA
  /// context and NCCL (--headroom; SimulateOptions::headroom).
  Headroom headroom;
  Objective objective = Objective::kThroughput;
  double price_per_gpu_hour = 0;  // for kCost; 0 = GPU-hours only
  int threads = 2;
  /// Called now and then with the fraction done (0..1); may be empty.
  std::function<void(double)> progress;
  /// Cooperative cancellation (may be null): when another thread sets it, the search stops
  /// before its next family or candidate micro-batch and RunPlanner returns kCancelledMessage
  /// as an error.
  const std::atomic<bool>* cancel = nullptr;
  /// The Simulator to simulate through (may be null: the search makes its own for |spec| and
  /// |profile|). Sharing one keeps its workloads and contexts across searches of the same model
  /// and machine (SuggestFit's clusters, the GUI's searches). REQUIRES: built for |spec| and
  /// |profile| with the PyTorch/DeepSpeed stack.
  Simulator* simulator = nullptr;
};

/// The error message of a search stopped through PlannerRequest::cancel.
inline constexpr const char* kCancelledMessage = "the search was cancelled";

struct ScoredPlan {
  Plan plan;
  Prediction prediction;          // without the graph
  double gpu_hours_per_million_tokens = 0;
  /// Recommendations only: other ZeRO stages whose pick is this plan in all but the stage (same
  /// batch, speed and peak within 0.1%), folded into this row.
  std::vector<int> same_as_stages;
};

struct RejectedFamily {
  std::string family;             // "stage 0, no offload, no checkpointing"
  std::string reason;             // in numbers
  double best_tokens_per_s = 0;   // 0 when nothing fitted
};

/// Without --global-batch, each choice recommends the smallest global batch whose throughput is
/// within this fraction of the choice's fastest plan (throughput barely grows with the batch
/// once the GPU is busy, and a small global batch is what training recipes assume).
constexpr double kBatchTolerance = 0.03;
/// With the global batch pinned, a choice's plans within this fraction of its fastest count as
/// equally fast (the least memory among them is shown).
constexpr double kTieTolerance = 0.005;
/// Choices whose shown plans are within this fraction of each other's throughput count as
/// equally fast: the one with the more certain prediction goes first (kBandTieTolerance), then
/// the one with less GPU memory (stage 1 before an identical stage 2). Why 2 %: two GPU-bound
/// plans of one model measured the same day (50 pairs in docs/validation/deepspeed/) had
/// measured / predicted ratios 1.3 % apart at the median and 1.9 % at the 75th percentile, so
/// dsplan cannot order plans closer than that (docs/planner.md, "Which batch is recommended").
constexpr double kChoiceTieTolerance = 0.02;
/// Two tied choices whose step-time bands' upper ends differ by more than this are ordered by
/// that end (the more certain prediction first); closer ones by memory.
constexpr double kBandTieTolerance = 0.01;
/// A rounder micro-batch (a multiple of 8, 4, 2) within this fraction of the throughput of
/// every plan of its choice with a smaller global batch is shown instead of the picked plan.
constexpr double kRoundTolerance = 0.01;

struct PlannerResult {
  /// Every fitting plan simulated, in the objective's order, except that the recommended best
  /// plan (recommendations.front()) comes first.
  std::vector<ScoredPlan> ranked;
  /// One plan per distinct (stage, offload, checkpointing) choice (bucket and overlap variants
  /// folded in): for throughput and cost, the smallest global batch within kBatchTolerance of
  /// the choice's fastest (kTieTolerance when the global batch is pinned), then the least
  /// memory, then a rounder micro-batch within kRoundTolerance; fastest choice first, choices
  /// within kChoiceTieTolerance by the narrower step-time band, then memory. For memory: the
  /// least memory.
  std::vector<ScoredPlan> recommendations;
  /// kBatchTolerance when the global batch was free, else 0.
  double batch_tolerance = 0;
  /// Throughput vs peak memory, fastest first; a point is kept when it needs at least 10% less
  /// memory than the previous one.
  std::vector<ScoredPlan> pareto;
  /// Per (stage, offload, checkpointing) choice: why nothing fitted, or the limit of its best
  /// variant; fastest first.
  std::vector<RejectedFamily> rejected;
  int64_t plans_considered = 0;         // points of the search space
  int64_t plans_simulated = 0;
  double seconds = 0;
};

/// The recommendation rule for throughput and cost (PlannerResult::recommendations) applied to
/// |ranked|: one plan per choice, choices fastest first. |batch_free|: the global batch was not
/// pinned (kBatchTolerance applies; else kTieTolerance).
std::vector<ScoredPlan> PickRecommendations(const std::vector<ScoredPlan>& ranked,
                                            bool batch_free);

/// Runs the search. Errors: bad requests (no GPUs, a pin that contradicts another, a global
/// batch not divisible by the world size). No fitting plan is a result (empty ranked) with the
/// reasons in |rejected|.
Result<PlannerResult> RunPlanner(const PlannerRequest& request);

/// What would make a request that fits nothing fit: more host RAM, NVMe space, or a larger
/// cluster (the smallest, trying GPUs per node up to the profile's node size, then nodes).
struct FitSuggestion {
  std::string what;            // "--host-memory 700GiB", "--nvme 3TB", "4 nodes x 8 GPUs"
  ScoredPlan plan;             // the best plan there
};

/// Tries, in order: the host RAM the best plan would need, the NVMe space it would need, then
/// clusters of increasing size (up to |max_gpus|) with the same pins. Returns nothing when none
/// of them fits.
std::optional<FitSuggestion> SuggestFit(const PlannerRequest& request, int max_gpus = 4096);

/// "stage 3, offload optimizer->cpu params->cpu, checkpointing, bucket 5e8" — one line.
std::string PlanSummary(const Plan& plan);
/// The choice a plan belongs to, without bucket and overlap: "stage 3, offload ..., checkpointing".
std::string ChoiceSummary(const Plan& plan);

}  // namespace dsplan

#endif  // DSPLAN_PLANNER_SEARCH_H_
