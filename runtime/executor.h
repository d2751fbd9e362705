// The GPU executor: runs a StepGraph on real hardware (docs/architecture.md, "One StepGraph, two
// executors"). The simulator prices each task with the cost model; this executor runs each task's
// work and measures it.
//
// What each task runs (docs/runtime.md):
//  * forward / recompute / backward of a layer: the layer's ops from the Workload. GEMMs and
//    batched GEMMs through cuBLASLt with the op's (m, n, k, batch) and the plan's dtype (backward:
//    the input-gradient and the weight-gradient GEMM); memory-bound ops (norms, activations,
//    dropout, casts, softmax, embedding, loss) as streaming kernels that read and write the op's
//    recorded bytes; fused attention as the runtime's attention path (docs/runtime.md says which).
//  * collectives: NCCL on the communication stream with the task's bytes (a no-op with 1 rank).
//  * D2H / H2D: cudaMemcpyAsync between device buffers and pinned (or pageable) host buffers on
//    the copy streams.
//  * CPU optimizer: the vectorized CPU AdamW (runtime/cpu_kernels/cpu_adam.h) over the task's elements.
//  * NVMe read / write: io_uring with O_DIRECT on files under the plan's nvme_path.
//  * memory effects: every GPU allocation and free of the graph goes through the runtime's
//    caching allocator (real cudaMalloc segments, PyTorch's rounding and pools), in program order,
//    so its peaks are measured, and the driver's view (cudaMemGetInfo) is sampled beside it.
// Each task is bracketed by CUDA events on its stream (host tasks by the host clock aligned to
// the device's), which gives the measured timeline.
//
// Ranks: by default one thread per GPU of this node, with NCCL communicators from
// ncclCommInitAll. Under MPI (ExecuteOptions::comm, `mpirun` / `srun`), one process per GPU:
// rank 0 creates the NCCL unique id and broadcasts it, each process joins with ncclCommInitRank,
// and rank 0 gathers what every rank measured (docs/runtime.md; compiled, not yet run on GPUs).
//
// Thread safety: one Executor::Run at a time per process.
#ifndef DSPLAN_RUNTIME_EXECUTOR_H_
#define DSPLAN_RUNTIME_EXECUTOR_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/plan.h"
#include "core/status.h"
#include "simulator/step_graph.h"
#include "simulator/workload.h"

namespace dsplan {

class Comm;
struct LayerCost;
struct Prediction;

struct ExecuteOptions {
  int warmup_steps = 2;       // steps run before measuring (allocator warm-up, autotuning)
  int steps = 5;              // measured steps
  int device = 0;             // first CUDA device of this process
  int cpu_threads = 0;        // CPU optimizer threads; 0 = all cores of the process
  /// Folder for NVMe swap files; "" = the plan's offload nvme_path.
  std::string nvme_path;
  /// Bytes the runtime's allocator may reserve; 0 = what the device has free after setup.
  int64_t memory_limit_bytes = 0;
  /// One extra step with events around each op of each layer task, for the per-op-class split
  /// (GEMM / attention / memory-bound) of forward and backward.
  bool profile_ops = true;
  /// Ranks as processes: null = every rank of the plan is a thread of this process, one GPU
  /// each from |device|. Otherwise this process is rank comm->rank() of the comm->size()
  /// processes of an MPI job (runtime/mpi/mpi_session.h), REQUIRES comm->size() == the plan's
  /// world size, and drives one GPU: device |device| + |local_rank| of the GPUs it sees, or the
  /// only one when it sees one (`srun --gpus-per-task=1`, CUDA_VISIBLE_DEVICES per process).
  /// Not owned; used only from the calling thread.
  Comm* comm = nullptr;
  int local_rank = 0;  // under |comm|: this process's rank among the job's ranks on its node
};

/// Per-task split of a layer task's measured device time by op class (profile_ops).
struct OpClassSeconds {
  double gemm_s = 0;
  double attention_s = 0;
  double memory_s = 0;
  bool operator==(const OpClassSeconds&) const = default;
};

struct Execution {
  // The machine and build.
  std::string device_name;      // "NVIDIA H200"
  std::string driver;           // "driver 580.xx, CUDA runtime 13.0"
  std::string libraries;        // "cuBLASLt 13.x, NCCL 2.x (or: not loaded)"
  /// Which attention the fused-attention ops ran: "fused kernel (..., bf16, head dim 64)" or the
  /// tiled-GEMM stand-in with the reason (docs/runtime.md).
  std::string attention_path;
  int64_t device_total_bytes = 0;
  int world_size = 1;           // ranks that ran (threads or MPI processes, one GPU each)

  // Time. Per measured step, and per task of the graph: the median over measured steps of
  // start and end relative to the step's start.
  std::vector<double> step_s;
  std::vector<double> start_s, end_s;
  std::vector<OpClassSeconds> op_class;   // per task; empty unless profile_ops

  // GPU memory of rank 0, over the measured steps.
  int64_t peak_allocated_bytes = 0;   // the runtime allocator's max allocated
  int64_t peak_reserved_bytes = 0;    // its max reserved (cudaMalloc'd segments)
  int64_t context_bytes = 0;          // device memory in use after setup, before the first
                                      // allocation (context, cuBLAS, NCCL), from cudaMemGetInfo
  int64_t device_used_peak_bytes = 0; // cudaMemGetInfo total - free, at its highest sample,
                                      // less what other processes used before setup
  int64_t scratch_bytes = 0;          // the runtime's own operand arena outside the allocator
                                      // (included in device_used_peak_bytes; not in a plan)
  // Host and NVMe bytes this rank allocated (pinned, pageable) and wrote to swap files.
  int64_t host_pinned_bytes = 0;
  int64_t host_pageable_bytes = 0;
  int64_t nvme_bytes = 0;

  // A step that ran out of device memory: reported, never a crash; the GPU memory is released.
  bool out_of_memory = false;
  TaskId oom_task = -1;               // the task whose allocation failed
  int64_t oom_request_bytes = 0;
  int64_t oom_allocated_bytes = 0;    // allocated when it failed
  std::string oom_message;            // the driver's message

  bool operator==(const Execution&) const = default;
};

/// Runs a StepGraph and reports what it measured: the simulator prices the graph, an executor
/// runs the same graph (docs/architecture.md, "One StepGraph, two executors"). MakeGpuExecutor()
/// gives this build's GPU executor, as MakeGpuProbe() gives its probe
/// (runtime/profiler/device_probe.h); MakeDryRunExecutor() one that runs nothing and reports the
/// prediction.
class Executor {
 public:
  virtual ~Executor() = default;
  /// "cuda", "dry-run", or "none" in a build without CUDA.
  virtual const char* name() const = 0;
  /// False when Run can only fail (a build without CUDA); Run then says how to get one.
  virtual bool available() const = 0;
  /// Runs |graph| (built unrolled for |plan| on |workload|) options.warmup_steps + options.steps
  /// times. The result is rank 0's Execution, or the first rank's (in rank order) that ran out
  /// of memory, or the first rank's error. Under options.comm every process gets the same
  /// error; rank 0 gets that result, the other ranks their own Execution.
  /// Errors: no executor in this build, no CUDA device, fewer GPUs than the plan's ranks on
  /// this node (or than this node's processes, under MPI), an MPI job whose size differs from
  /// the plan's world size (naming both), a CUDA/NCCL failure other than out-of-memory (which
  /// is reported in the Execution), an unwritable nvme_path.
  virtual Result<Execution> Run(const StepGraph& graph, const Workload& workload,
                                const Plan& plan, const ExecuteOptions& options) = 0;
};

/// The GPU executor of this build: the CUDA executor (runtime/cuda/executor.cc) when dsplan was
/// built with CUDA, else one that is not available and says how to get it
/// (runtime/no_gpu_executor.cc). One Run at a time per process.
std::unique_ptr<Executor> MakeGpuExecutor();

/// An executor that runs nothing (runtime/dry_run_executor.cc): its Execution is |prediction|
/// replayed, for `dsplan validate --dry-run` and for tests of everything downstream of an
/// Execution on machines without a GPU. Each measured step takes the predicted step time; each
/// task starts at its scheduled start and lasts its predicted duration; the per-op-class split
/// of layer tasks (options.profile_ops) is |layer_costs|'; the memory fields are the predicted
/// peaks (device memory = reserved + context, no scratch), host and NVMe bytes the node's
/// predicted bytes per GPU. A plan predicted not to fit reports out-of-memory at the task of
/// the GPU memory peak. So CompareExecution of the two gives every row with measured equal to
/// predicted (up to the rounding of start + duration).
/// REQUIRES: |prediction| was simulated with keep_graph, outlives the executor, and is the
/// prediction of the graph passed to Run (Run refuses a graph of another size).
std::unique_ptr<Executor> MakeDryRunExecutor(const Prediction& prediction,
                                             std::vector<LayerCost> layer_costs);

}  // namespace dsplan

#endif  // DSPLAN_RUNTIME_EXECUTOR_H_
