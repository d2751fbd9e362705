// Model-state memory estimates that dsplan's prediction is compared against in
// `dsplan estimate`: the ZeRO paper's accounting and DeepSpeed's own estimator functions.
//
// Both count model states only (parameters, gradients, optimizer states); neither counts
// activations, communication buckets, gathered ZeRO-3 parameters beyond one layer, the CUDA
// context or allocator fragmentation. dsplan's simulator does; showing the three side by side
// is the point of `dsplan estimate`.
//
// All byte counts are per GPU unless named per node; Psi is the parameter count.
#ifndef DSPLAN_SIMULATOR_ESTIMATOR_H_
#define DSPLAN_SIMULATOR_ESTIMATOR_H_

#include <cstdint>

#include "core/plan.h"

namespace dsplan {

struct Workload;

/// The ZeRO paper's (Rajbhandari et al. 2020, §5) model-state bytes per GPU for mixed-precision
/// Adam: 2 bytes of 16-bit parameters, 2 of 16-bit gradients and K = 12 of optimizer state
/// (fp32 master, momentum, variance) per parameter, partitioned over N = |total_gpus| ranks:
///   stage 0: 16 Psi;  stage 1: 4 Psi + 12 Psi/N;  stage 2: 2 Psi + 14 Psi/N;  stage 3: 16 Psi/N.
/// Offload removes the offloaded terms from the GPU (the paper has no offload rows):
/// |offload_optimizer| != none drops the K = 12 bytes, |offload_param| != none drops the 16-bit
/// parameter bytes (stage 3 only). Each term is floor(bytes * Psi / N) when partitioned.
/// REQUIRES: 0 <= stage <= 3, params >= 0, total_gpus >= 1.
int64_t ZeroPaperBytesPerGpu(int stage, int64_t params, int total_gpus,
                             OffloadDevice offload_optimizer = OffloadDevice::kNone,
                             OffloadDevice offload_param = OffloadDevice::kNone);

/// What one of DeepSpeed's estimator functions returns, in bytes.
struct DeepSpeedEstimate {
  int64_t cpu_bytes = 0;  // ZeRO-2: per node x gpus quirks as in the code; ZeRO-3: per node
  int64_t gpu_bytes = 0;  // per GPU
  int64_t largest_layer_memory = 0;  // ZeRO-3: 4 * largest_layer_params; 0 for ZeRO-2
};

/// DeepSpeed's estimate_zero2_model_states_mem_needs (stage_1_and_2.py, after PR #5099):
///   cpu_offload:  gpu = 2 Psi;                       cpu = Psi * max(4 * total_gpus, 16) * f
///   otherwise:    gpu = 2 Psi + int(18 Psi / total_gpus); cpu = Psi * 4 * gpus_per_node * f
/// with f = |additional_buffer_factor| and int() truncation as in Python.
DeepSpeedEstimate EstimateZero2ModelStates(int64_t total_params, int gpus_per_node, int nodes,
                                           bool cpu_offload,
                                           double additional_buffer_factor = 1.5);

/// DeepSpeed's estimate_zero3_model_states_mem_needs (stage3.py): LLM = 4 * largest_layer_params,
/// gpus_factor = 1 / nodes (so CPU is per node):
///   offload opt+param: gpu = LLM;            cpu = Psi*18*gf*f (zero_init) or
///                                                  Psi*max(4*gpus_per_node, 18*gf)*f
///   offload opt only:  gpu = LLM + int(2 Psi / total_gpus);  cpu as above with 16
///   no offload:        gpu = LLM + int(18 Psi / total_gpus); cpu = largest*4*gpus_per_node*f
///                                                  (zero_init) or Psi*4*gpus_per_node*f
/// DeepSpeed has no row for offload_param without offload_optimizer; |cpu_offload_params| is
/// ignored when |cpu_offload| is false, as in the code.
DeepSpeedEstimate EstimateZero3ModelStates(int64_t total_params, int64_t largest_layer_params,
                                           int gpus_per_node, int nodes, bool cpu_offload,
                                           bool cpu_offload_params, bool zero_init,
                                           double additional_buffer_factor = 1.5);

/// DeepSpeed's model_to_params largest_layer_params: the most parameters any single module
/// owns directly (`m.parameters(recurse=False)`), i.e. the parameter tensors of |w| grouped by
/// their name without the last component ("h.0.attn.c_attn.weight" and ".bias" are one module).
int64_t LargestModuleParams(const Workload& w);

}  // namespace dsplan

#endif  // DSPLAN_SIMULATOR_ESTIMATOR_H_
