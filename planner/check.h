// Judgements on an existing configuration beyond what the ds_config reader warns about: values
// that waste memory or time for this model and cluster, in numbers.
#ifndef DSPLAN_PLANNER_CHECK_H_
#define DSPLAN_PLANNER_CHECK_H_

#include <optional>
#include <string>
#include <vector>

#include "core/hardware_profile.h"
#include "core/plan.h"
#include "simulator/simulate.h"
#include "simulator/workload.h"

namespace dsplan {

/// The largest parameter's partition on one rank, in elements: ceil(numel / dp) of the model's
/// largest parameter tensor (DeepSpeed pads each parameter to a multiple of the partition count,
/// partition_parameters.py _aligned_size).
int64_t LargestParamPartitionNumel(const Workload& w, const Plan& plan);

/// DeepSpeed 0.14.5 rejects at start-up (AsyncPartitionedParameterSwapper.get_buffer:
/// `assert numel < self.elements_per_buffer`) an offload_param NVMe config whose buffer_size is
/// not larger than a parameter partition it swaps; partitions under 1 MiB (MIN_AIO_BYTES) stay
/// in memory and are exempt. Returns the message, or "" when the config is accepted.
std::string NvmeParamBufferError(const Workload& w, const Plan& plan);

/// The smallest buffer_size at or above DeepSpeed's default (1e8) that NvmeParamBufferError
/// accepts for |plan| on |w|.
int64_t NvmeParamBufferSize(const Workload& w, const Plan& plan);

/// Memory-centric tiling's proposal: the smallest power of two T such that 1/T of the largest
/// transformer block's 16-bit weights takes at most 1/16 of |gpu_memory_bytes| (a ZeRO-3 step
/// holds the gathered tile, its gradient and the coalesced gather's copy at once, next to the
/// activations); 1 when the block already does. The search then simulates T/2, T and 2T.
int64_t ProposedLinearTiles(const Workload& w, Precision precision, double gpu_memory_bytes);

/// What the training script must change for |plan| beyond the ds_config, one instruction per
/// line (empty when nothing): DeepSpeed's checkpoint function for checkpoints in host memory,
/// TiledLinear for memory-centric tiling.
std::vector<std::string> ModelCodeChanges(const Plan& plan);

/// What a training loop that keeps one step's output object into the next forward
/// (`out = engine(**batch)` in a loop, without `del out`) holds through that forward, per GPU.
/// dsplan's prediction assumes the output is dropped before the next forward, as HF Trainer's
/// loop does (its compute_loss returns the loss alone), and use_cache off. transformers returns
/// the logits (the model's dtype), the K/V cache when `use_cache` is on (config default True;
/// off under gradient checkpointing; T5's holds the decoder's self- and cross-attention keys
/// and values), and T5's encoder output (docs/deepspeed-facts.md, "What a kept output holds",
/// measured in docs/validation/deepspeed/usecache-1205/).
struct KeptOutput {
  double logits_bytes = 0;
  double kv_cache_bytes = 0;          // the cache a kept output holds (use_cache on)
  double kv_cache_in_step_bytes = 0;  // what use_cache on adds inside every step, at most
  double encoder_output_bytes = 0;    // T5
  /// The most a loop that keeps its output, with use_cache on, adds during a forward: the kept
  /// output (logits, encoder output, previous cache) and the current step's cache.
  double MostBytes() const {
    return logits_bytes + encoder_output_bytes + kv_cache_bytes + kv_cache_in_step_bytes;
  }
};
KeptOutput KeptOutputBytes(const Workload& w, const Plan& plan);

/// The line the plan prints under its plain-DeepSpeed launch: the loop dsplan predicts, what a
/// kept output would add, against what |pred| leaves beyond its error band and headroom.
std::string KeptOutputNote(const Workload& w, const Plan& plan, const Prediction& pred);

/// What |plan| (predicted as |pred|) holds more at its peak when the model is built outside
/// deepspeed.zero.Init (Plan::zero_init false): 0 unless ZeRO-3 gathers copy (several ranks, or
/// parameters offloaded) and the plan assumes zero.Init.
Result<double> ZeroInitOutsideExtraBytes(Simulator& sim, const Plan& plan, const Prediction& pred);

/// ZeRO-3 plans whose gathers copy (several ranks, or parameters offloaded): the line under the
/// plain-DeepSpeed launch about building the model inside deepspeed.zero.Init (Plan::
/// zero_init), with what building it outside adds at the peak (|sim| simulates |plan| that way)
/// against the room |pred| leaves beyond its band and headroom. Empty when the plan does not
/// depend on it (or already assumes the model is built outside). |short_of_room|, when given,
/// is set when the room does not cover it.
Result<std::string> ZeroInitNote(Simulator& sim, const Plan& plan, const Prediction& pred,
                                 const std::string& config_name, bool* short_of_room = nullptr);

/// ZeRO-3 on one GPU without offload partitions nothing. The line `dsplan check` adds when the
/// same plan at stage 2 (simulated by |sim|) fits with its band and headroom, trains (FusedAdam
/// steps its flat partition) and is more than 2 % faster; empty otherwise, e.g. where stage 2's
/// step, which holds fp32 gradients of the whole partition, does not fit, or |pred| does not.
Result<std::string> SingleGpuStage3Note(Simulator& sim, const Plan& plan, const Prediction& pred);

/// ZeRO-3 with the optimizer offloaded copies every gradient partition to the host through a
/// pageable temporary that glibc's malloc maps afresh (from 32 MiB, or on autograd's thread's
/// own arena), so each copy faults its pages in (docs/deepspeed-facts.md, "glibc's malloc").
/// The line `dsplan check` and the planner add: with Plan::malloc_heap off, the step predicted
/// with kMallocHeapEnv in the launch environment when that is at least 5 % faster; with it on,
/// what the prediction assumes and the step without it. Empty where the copies do not apply.
Result<std::string> MallocHeapNote(Simulator& sim, const Plan& plan, const Prediction& pred);
/// The step of |plan| with Plan::malloc_heap set, where the malloc environment applies (ZeRO-3
/// with the optimizer offloaded, not yet assumed); nullopt elsewhere.
Result<std::optional<double>> MallocHeapStepSeconds(Simulator& sim, const Plan& plan);

/// One line per finding, e.g. "reduce_bucket_size 5e8 elements is larger than the model (124 M
/// parameters): ...". |pred| is the simulation of |plan| on |profile|.
std::vector<std::string> CheckPlan(const Plan& plan, const Prediction& pred,
                                   const HardwareProfile& profile);

}  // namespace dsplan

#endif  // DSPLAN_PLANNER_CHECK_H_
