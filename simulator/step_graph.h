// StepGraph: one DeepSpeed training step (all micro-steps of one optimizer step) as a DAG of
// tasks with memory effects. Built by BuildStepGraph (simulator/step_builder.h) from a Workload
// and a Plan; consumed by the simulator (cost model + scheduler) and, later, by the runtime.
//
// Ownership and order (STYLE.md P6): the graph owns its tasks in a vector; TaskId is the index.
// Tasks are added in program order (the order the host issues them), so every dependency points
// to a smaller id, each resource runs its tasks in id order (a CUDA stream is FIFO), and the
// memory timeline is the sequence of effects in id order (PyTorch's allocator counts memory when
// the host allocates and frees, not when kernels run).
#ifndef DSPLAN_SIMULATOR_STEP_GRAPH_H_
#define DSPLAN_SIMULATOR_STEP_GRAPH_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/collectives.h"
#include "core/status.h"

namespace dsplan {

struct Workload;

using TaskId = int32_t;

/// What executes a task. Each resource runs one task at a time, in id order.
enum class Resource : uint8_t {
  kCompute,  // the default CUDA stream: forward/backward kernels, casts, GPU optimizer
  kComm,     // NCCL side stream (reduction_stream / allgather stream) or the default stream
  kH2D,      // host-to-device copy engine
  kD2H,      // device-to-host copy engine
  kCpu,      // the rank's CPU threads (CPU Adam)
  kNvme,     // the node's NVMe queue
};
inline constexpr int kNumResources = 6;
const char* ResourceName(Resource r);

enum class TaskKind : uint8_t {
  kForward,        // forward of one layer
  kRecompute,      // forward run again in backward (activation checkpointing)
  kBackward,       // backward of one layer
  kGradCopy,       // copy/cast of gradients into a bucket or partition buffer (memory-bound)
  kAllReduce,
  kReduceScatter,
  kAllGather,
  kCopyD2H,
  kCopyH2D,
  kGpuOptimizer,   // unscale/clip, flatten and cast, Adam on the GPU partition
  kCpuOptimizer,   // DeepSpeedCPUAdam on the host partition
  kNvmeRead,
  kNvmeWrite,
};
inline constexpr int kNumTaskKinds = 13;
const char* TaskKindName(TaskKind k);
bool IsCollective(TaskKind k);
Collective CollectiveOf(TaskKind k);  // REQUIRES: IsCollective(k)

/// Where a memory effect lands.
enum class MemSpace : uint8_t { kGpu, kPinnedHost, kPageableHost, kNvme };
inline constexpr int kNumMemSpaces = 4;
const char* MemSpaceName(MemSpace s);

/// What the bytes are, for the breakdown at the peak.
enum class MemCategory : uint8_t {
  kParams16,          // 16-bit (or fp32 without mixed precision) model parameters, resident
  kGatheredParams,    // ZeRO-3 parameters all-gathered for a module (live, prefetched, kept)
  kGradients,         // gradients: param.grad, partition buffers, fp32 accumulation buffers
  kMaster,            // fp32 master weights
  kOptimizerStates,   // Adam exp_avg / exp_avg_sq, ...
  kCommBuffers,       // ipg buckets, flatten copies for collectives, swap buffers
  kActivations,       // what autograd keeps from forward to backward (+ the logits)
  kTemporaries,       // transients inside a task: loss and backward workspaces, optimizer temps
  kContext,           // CUDA context, cuBLAS/cuDNN/NCCL workspaces (outside the torch allocator)
  kAllocatorOverhead, // caching-allocator rounding and fragmentation (reserved - allocated)
};
inline constexpr int kNumMemCategories = 10;
const char* MemCategoryName(MemCategory c);
/// Snake-case key used in JSON ("params_16bit", "gathered_params", ...).
const char* MemCategoryKey(MemCategory c);

/// An allocation (bytes > 0) or a free (bytes < 0), applied when its task starts or ends.
struct MemEffect {
  int64_t bytes = 0;
  MemSpace space = MemSpace::kGpu;
  MemCategory category = MemCategory::kTemporaries;
  bool at_end = false;
  /// A GPU allocation made on one of DeepSpeed's side streams (reduction_stream under
  /// overlap_comm): PyTorch's caching allocator serves it from that stream's pool.
  bool side_stream = false;
};

/// A task's memory effects while the builder collects them: a handful, kept inline so that
/// collecting them allocates nothing (a search builds thousands of graphs); more than kInline
/// move to the heap.
class EffectList {
 public:
  static constexpr size_t kInline = 12;
  EffectList() = default;
  EffectList(std::initializer_list<MemEffect> fx) {  // NOLINT: a list, as a vector takes one
    for (const MemEffect& e : fx) push_back(e);
  }
  EffectList& operator=(std::initializer_list<MemEffect> fx) {
    clear();
    for (const MemEffect& e : fx) push_back(e);
    return *this;
  }
  void push_back(const MemEffect& e) {
    if (size_ < kInline) {
      inline_[size_++] = e;
      return;
    }
    PushToHeap(e);
  }
  void clear() {
    size_ = 0;
    heap_.clear();
  }
  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  const MemEffect* begin() const { return size_ <= kInline ? inline_.data() : heap_.data(); }
  const MemEffect* end() const { return begin() + size_; }

 private:
  // push_back past kInline effects (rare; out of line so that the common case inlines).
  void PushToHeap(const MemEffect& e);
  std::array<MemEffect, kInline> inline_;
  std::vector<MemEffect> heap_;  // all of them, once there are more than kInline
  size_t size_ = 0;
};

/// A per-parameter loop of DeepSpeed's in which the host blocks once per tensor (Task::host_loop).
enum class HostLoop : int8_t {
  kNone,
  /// Stages 1-2, copy_grads_in_partition at the boundary with the optimizer offloaded: the
  /// norm and overflow-check kernels, the host's read of the check (`if tensor:`), then the
  /// fp32 cast and its non-blocking copy into the pinned fp32 gradients, which the next
  /// tensor's read waits for.
  kZero12OverflowCheck,
  /// ZeRO-3, partition_grads at the boundary with the optimizer offloaded: the non-blocking
  /// copies to the host gradient buffer and back, the norm kernels, then the blocking cast
  /// copy into the fp32 partition (priced on StackCosts::cast_copy_d2h), which waits for them.
  kZero3PartitionGrads,
};

struct Task {
  TaskKind kind = TaskKind::kForward;
  Resource resource = Resource::kCompute;
  int32_t layer = -1;        // index into Workload::layers, or -1
  int32_t micro_step = -1;   // 0..GAS-1, or -1 for the optimizer step
  int32_t index = 0;         // bucket / sub-group number within the phase, for names

  // Work, read by the cost model according to kind:
  double flops = 0;          // GPU optimizer / extra compute FLOPs
  double bytes = 0;          // collectives: S (nccl-tests convention); copies, NVMe and
                             // memory-bound GPU work: bytes moved
  double elements = 0;       // optimizer: elements updated
  int32_t ranks = 1;         // collectives: group size
  bool inter_node = false;   // collectives: the group spans nodes
  bool pinned = true;        // copies: host side pinned
  /// kCopyH2D: ZeRO-3's copy of an offloaded parameter partition to the GPU for a fetch
  /// (Builder::PartitionToGpu), which the issuing host waits for (simulator/param_fetch.h).
  bool param_fetch = false;
  /// A D2H copy that PyTorch finishes on the host: a blocking copy_ into a CPU tensor of
  /// another dtype copies into a pageable temporary of the source's dtype, then converts on the
  /// CPU (aten/src/ATen/native/cuda/Copy.cu); these are the bytes the conversion reads + writes.
  double host_convert_bytes = 0;
  /// Copies through such a temporary (either direction) that glibc's malloc maps fresh for each
  /// call: a request of at least its largest dynamic mmap threshold (32 MiB on 64-bit) is an
  /// mmap of its own, so every page of it is faulted in during the copy and unmapped after
  /// (smaller requests reuse the heap's pages from the previous step). These are the
  /// temporary's bytes; the cost model prices them at the host's page-fault rate
  /// (HostProfile::pageable_alloc_bytes_per_s).
  double host_fault_bytes = 0;
  /// ZeRO-3's offloaded gradient copies, one blocking cast copy per parameter tensor: how many
  /// and their 16-bit bytes, below 1 MiB each [0], from 1 MiB [1], and from kFreshMappingBytes
  /// [2] (a fresh temporary each copy; ZeRO-3 only) or [3] (the same sizes with malloc held to
  /// its heap, Plan::malloc_heap: the temporary's pages stay mapped). The cost model prices each
  /// class at its mean size on the stack's measured curve, StackCosts::cast_copy_d2h, when it
  /// has one: class 2 in the fresh-mapping regime, the others in the heap regime (the cost of a
  /// copy is far from linear below 1 MiB, and jumps at the fresh-mapping threshold).
  /// On a kGradCopy task whose |host_loop| is set: the loop's tensors by the same classes.
  static constexpr int kCastCopyClasses = 4;
  static constexpr int kFreshCastCopyClass = 2;
  static constexpr int kHeapLargeCastCopyClass = 3;
  std::array<int32_t, kCastCopyClasses> cast_copies{};
  std::array<double, kCastCopyClasses> cast_copy_bytes{};
  /// kGradCopy at an accumulation boundary with the optimizer offloaded: DeepSpeed's Python loop
  /// over the bucket's owned parameters, in which the host waits for the GPU once per tensor,
  /// so each tensor takes the longer of its host ops (|kernels| over the tensors) and the GPU
  /// and copy work they queue, and the classes add up (docs/simulator.md, Offload). The work
  /// besides |bytes| (the kernels' HBM traffic): |loop_d2h_bytes| and |loop_h2d_bytes| copied
  /// per element class in proportion to |cast_copy_bytes| (|pinned| host side).
  HostLoop host_loop = HostLoop::kNone;
  double loop_d2h_bytes = 0, loop_h2d_bytes = 0;
  int32_t kernels = 1;       // kernels (host dispatches) the task issues
  // Layer tasks under ZeRO-3: DeepSpeed's module hooks run around them, fetching (forward,
  // recompute) or reducing (backward) |gathered_tensors| partitioned parameter tensors.
  bool zero3_hooks = false;
  int32_t gathered_tensors = 0;
  // ZeRO-3: the gather calls (all_gather_coalesced handles) issued just before this task: the
  // fetch of its layer and the prefetch of the next, as the prefetch bucket groups tensors.
  int32_t gather_calls = 0;
  // ZeRO-3 backward: reduce-bucket flushes that this task's gradient hooks run
  // (__reduce_and_partition_ipg_grads when the next gradient would overfill the bucket), each
  // host work on the thread that issues the backward's kernels.
  int32_t bucket_flushes = 0;
  // Backward tasks at stages 1-2: tensor ops that the gradient hooks' flushes issue on the same
  // thread (the optimizer-offload accumulation round trips: a copy to the GPU, an add_ and a
  // copy back per owned tensor), each at the host cost of an eager op.
  int32_t hook_kernels = 0;
  // Layer tasks of a tiled block (Plan::linear_tiles): the task is one of |parts| tiles and
  // does 1/parts of the layer's kernels' work; its hooks are charged whole (each tile is a set
  // of modules of its own).
  int32_t parts = 1;
  // GPU optimizer tasks on the PyTorch stack: the bytes (within |bytes|) of the widening
  // copies to fp64 and the fp64 norms of DeepSpeed's per-gradient norm, and of the widening
  // copies to fp32, each priced at PyTorch's rate for that kernel; and the parameter tensors
  // DeepSpeed's step walks in Python on this rank (ZeRO stage |step_stage|), whose host time is
  // measured per tensor (simulator/stack_costs.h).
  // Also on memory-bound gradient tasks (kGradCopy): |cast_up_bytes| and |cast_down_bytes|
  // are the widening and narrowing copies within |bytes|, each at its kernel class's rate.
  double fp64_cast_bytes = 0, fp64_norm_bytes = 0, cast_up_bytes = 0, cast_down_bytes = 0;
  // BF16_Optimizer's step (step_stage 0): the bytes (within |bytes|) its kernels move after the
  // host's last synchronisation (Adam, the copy back, the fill), which follow the host's loops
  // instead of running under them; |step_clip|: the per-tensor clip loop runs.
  double after_sync_bytes = 0;
  // GPU optimizer tasks: the inner optimizer's own kernel bytes (within |bytes|, and within
  // |after_sync_bytes| where those hold it), priced at that kernel's measured rate (FusedAdam's,
  // or torch.optim's foreach Adam with |torch_adam|); the task's other bytes without a class of
  // their own are the step's passes over flat tensors (flatten, unscale, copy back).
  double adam_bytes = 0;
  bool torch_adam = false;
  int32_t step_param_tensors = 0;
  int8_t step_stage = 0;
  bool step_clip = false;

  // Edges and effects, as ranges into StepGraph's flat arrays.
  uint32_t deps_begin = 0, deps_count = 0;
  uint32_t mem_begin = 0, mem_count = 0;
};

/// Per-space byte counts by category.
using CategoryBytes = std::array<int64_t, kNumMemCategories>;

/// A compact graph's repeated micro-step (BuildStepGraph, docs/simulator.md "Gradient
/// accumulation"): tasks [begin, end) stand for |count| consecutive copies of one micro-step.
/// The n = end - begin tasks before the block, [begin - n, begin), are the micro-step before
/// it, of the same structure. The graph it stands for (Unroll) has copy k (0 <= k < count) at
/// ids begin + k * n; in copy k, a dependency on a task at or after begin - n points k * n
/// further (the previous copy instead of the micro-step before the block), one before it stays;
/// the tasks after the block move by (count - 1) * n, and so do their dependencies at or after
/// begin - n (the last two copies). Copy k's micro_step is the block's plus k.
struct RepeatedBlock {
  TaskId begin = 0, end = 0;
  int64_t count = 1;
  TaskId size() const { return end - begin; }
  bool active() const { return count > 1 && end > begin; }
};

class StepGraph {
 public:
  /// Memory that exists before the step starts (model states, persistent buffers), by space and
  /// category. The timeline starts from it.
  std::array<CategoryBytes, kNumMemSpaces> initial{};
  /// GPU optimizer-state tensors that the optimizer creates in its first step() (torch-style
  /// lazy state: Adam's exp_avg and exp_avg_sq per flat fp32 partition or sub-group), in
  /// creation order. Their bytes are part of initial[kGpu][kOptimizerStates], the steady state;
  /// the allocator replay (SimulateCachingAllocator) creates them inside the optimizer task that
  /// steps their partition, in its first iteration, where they take space from the segments the
  /// first step's activations and the step's own temporaries left cached (docs/simulator.md,
  /// "Reserved memory").
  struct LazyState {
    int64_t bytes = 0;
    /// The optimizer task whose step() creates it, after the first |after| of that task's GPU
    /// effects (in replay order: those at its start, then those at its end); -1: at the start of
    /// the first optimizer task.
    TaskId task = -1;
    int32_t after = 0;
  };
  std::vector<LazyState> lazy_gpu_states;
  /// What PyTorch's CachingHostAllocator adds to the pinned buffers in place before the step: it
  /// rounds every pinned request up to a power of two. Not part of |initial| (dsplan's runtime
  /// pins exact sizes); the PyTorch stack's host prediction adds it.
  int64_t pinned_rounding_bytes = 0;

  /// The repeated micro-step of a compact graph (inactive: every task runs once).
  RepeatedBlock repeat;
  /// Tasks of the graph this one stands for (size() when no block repeats); saturates at
  /// INT64_MAX.
  int64_t unrolled_size() const;
  /// OK when |repeat| is inactive or well formed: inside the graph, preceded by n tasks of the
  /// same kinds and resources.
  Status CheckRepeat() const;

  /// Appends |task| with |deps| (all < the new id) and |effects|; returns its id.
  TaskId Add(const Task& task, std::initializer_list<TaskId> deps,
             std::initializer_list<MemEffect> effects = {});
  TaskId Add(const Task& task, const std::vector<TaskId>& deps,
             const std::vector<MemEffect>& effects);
  TaskId Add(const Task& task, std::initializer_list<TaskId> deps, const EffectList& effects);
  /// Adds one more dependency or effect to the most recently added task.
  void AddDep(TaskId dep);
  void AddEffect(const MemEffect& effect);
  /// Counts one more reduce-bucket flush in task |id|'s hooks (Task::bucket_flushes).
  void AddBucketFlush(TaskId id) { ++tasks_[id].bucket_flushes; }
  /// Counts |n| more tensor ops issued by task |id|'s gradient hooks (Task::hook_kernels).
  void AddHookKernels(TaskId id, int32_t n) { tasks_[id].hook_kernels += n; }

  int size() const { return static_cast<int>(tasks_.size()); }
  const Task& task(TaskId id) const { return tasks_[id]; }
  const std::vector<Task>& tasks() const { return tasks_; }
  const TaskId* deps_begin(TaskId id) const { return deps_.data() + tasks_[id].deps_begin; }
  const TaskId* deps_end(TaskId id) const { return deps_begin(id) + tasks_[id].deps_count; }
  const MemEffect* effects_begin(TaskId id) const { return effects_.data() + tasks_[id].mem_begin; }
  const MemEffect* effects_end(TaskId id) const { return effects_begin(id) + tasks_[id].mem_count; }

  void Reserve(size_t tasks);
  void Clear();

 private:
  TaskId Append(const Task& task, std::initializer_list<TaskId> deps,
                const MemEffect* effects_begin, const MemEffect* effects_end);
  std::vector<Task> tasks_;
  std::vector<TaskId> deps_;
  std::vector<MemEffect> effects_;
};

/// The graph |graph| stands for, with every copy of its repeated block written out (itself
/// when no block repeats). Errors: more than |max_tasks| tasks.
Result<StepGraph> Unroll(const StepGraph& graph, int64_t max_tasks);

/// "bwd encoder.block.3 (micro-step 0)", "reduce-scatter bucket 2 (micro-step 1)", ...
/// |copy|: which copy of the repeated block (compact graphs; the micro-step shown is the task's
/// plus |copy|).
std::string TaskName(const StepGraph& graph, const Workload& workload, TaskId id,
                     int64_t copy = 0);

}  // namespace dsplan

#endif  // DSPLAN_SIMULATOR_STEP_GRAPH_H_
