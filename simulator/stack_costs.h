#pragma once
// Measured costs of the software stack users run (PyTorch eager + transformers + DeepSpeed):
// what PyTorch's own memory-bound kernels reach, the host time of each model family's blocks,
// and the host time of DeepSpeed ZeRO-3's module hooks. They are properties of the stack and
// the host CPU, not of the GPU, so `dsplan profile` (which runs dsplan's own kernels) does not
// measure them; tools/probes/stack_costs.py does, on tiny shapes where wall time is host time
// and on large tensors for kernel rates. Nothing here is fitted to a training run
// (docs/stack-costs.md; the raw results are in docs/validation/stack/).
//
// A profile's `stack:` section (`dsplan profile --stack`) holds these costs as measured on the
// user's machine and stack; without one, the costs compiled in here (one H200 machine,
// PyTorch 2.11, DeepSpeed 0.14.5) apply, and SourceSummary says so.

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/hardware_profile.h"
#include "simulator/workload.h"

namespace dsplan {

/// Host time of one transformer block of a family (forward, backward), plain and under
/// non-reentrant gradient checkpointing (forward through the checkpoint wrapper; backward
/// including the recomputation), and the block's submodules and parameter tensors.
struct FamilyBlockHost {
  std::string model_type;
  LayerKind kind = LayerKind::kDecoderBlock;
  double fwd_s = 0, bwd_s = 0;
  double ckpt_fwd_s = 0, ckpt_bwd_s = 0;
  int32_t modules = 0;
  int32_t param_tensors = 0;
};

/// Host time of the rest of a family's model (embeddings, masks and position tables, final
/// norm, head and loss), forward and backward: the 2-block model less two blocks.
struct FamilyRestHost {
  std::string model_type;
  double fwd_s = 0, bwd_s = 0;
};

/// How dsplan's tracer decomposes some layers: ops of each kind, and the kernels beyond one per
/// op, forward and backward. With a StackCosts' per-op costs it gives the per-op host estimate
/// (StackCosts::PerOpFwd / PerOpBwd).
struct TracedOps {
  std::array<int32_t, kOpKindCount> ops{};
  int32_t fwd_extra_kernels = 0, bwd_extra_kernels = 0;
  void Add(const Op& op);
  bool operator==(const TracedOps&) const = default;
};

/// A measured family's block (kind kEncoderBlock / kDecoderBlock) or the rest of its model (kind
/// kEmbedding: every layer outside the blocks) as dsplan traces the catalog model the
/// measurement was made with (|traced_from|).
struct FamilyTrace {
  std::string model_type;
  LayerKind kind = LayerKind::kDecoderBlock;
  std::string traced_from;
  TracedOps ops;
};

/// What the forward host time of a layer whose family was not measured is, relative to its
/// per-op estimate: the median over the measured families of measured / per-op estimate, for a
/// block's forward, its forward under checkpointing and its recomputation, and for the rest of
/// the model's forward. The forward runs transformers' Python (views, reshapes, module calls,
/// the checkpoint wrapper), which the per-op estimate leaves out; the measured families say how
/// much that is. The backward runs in autograd's engine, without that Python: it keeps the
/// per-op estimate (docs/stack-costs.md section 3b).
struct UnmeasuredHostScale {
  double fwd = 1, ckpt_fwd = 1, recompute = 1, rest_fwd = 1;
  /// Families the medians were taken over (0: no scaling, the per-op estimate as is).
  int families = 0;
};

struct StackCosts {
  /// What was measured, where and with which versions.
  std::string source;
  /// The streaming rate (bytes/s) of the profile of the machine the kernel rates were measured
  /// on (h200-measured: hbm_bytes_per_s x memory_bound_efficiency). A profile of another GPU
  /// scales the kernel rates by its own streaming rate over this one (an assumption: PyTorch's
  /// kernels keep the same fraction of what the GPU can stream).
  double reference_stream_bytes_per_s = 0;
  /// Bytes read + written per second by PyTorch's kernels of each class, forward and backward.
  std::array<double, kKernelClassCount> fwd_bytes_per_s{}, bwd_bytes_per_s{};
  /// Host time of one op of each traced kind (module call or tensor op, with autograd
  /// recording), forward and backward; the fallback for layers without a family measurement.
  std::array<double, kOpKindCount> op_fwd_s{}, op_bwd_s{};
  /// Host time of one more plain eager tensor op (an extra kernel of a decomposed op).
  double kernel_fwd_s = 0, kernel_bwd_s = 0;
  /// DeepSpeed ZeRO-3's hooks: host time per submodule and per gathered parameter tensor, in
  /// forward (pre/post-forward: fetch, release) and backward (pre/post-backward and the
  /// gradient hooks), beyond stage 2's.
  double z3_fwd_per_module_s = 0, z3_fwd_per_param_s = 0;
  double z3_bwd_per_module_s = 0, z3_bwd_per_param_s = 0;
  /// ZeRO-3: host time per gather call (the per-module and per-tensor costs above were
  /// measured with the whole stack gathered in one call per step).
  double z3_per_gather_call_s = 0;
  /// ZeRO-3: host time per reduce-bucket flush that a backward hook runs (the per-module and
  /// per-tensor backward costs above were measured with one flush per step, at its end).
  double z3_per_bucket_flush_s = 0;
  /// DeepSpeed's optimizer step on the host with a GPU optimizer: a fixed part and a part per
  /// parameter tensor of the rank's partition (the per-gradient norm loop and the per-tensor
  /// bookkeeping), for ZeRO stages 1/2 and 3, measured on stacks of tiny modules.
  double z12_step_s = 0, z12_step_per_param_s = 0;
  double z3_step_s = 0, z3_step_per_param_s = 0;
  /// Stage 0's BF16_Optimizer.step() on the host: fixed and per parameter tensor (the norm loop,
  /// and with gradient clipping the per-tensor clip loop too), measured on models of tiny
  /// parallel modules (docs/stack-costs.md section 6).
  double bf16_step_s = 0, bf16_step_per_param_s = 0;
  double bf16_clip_step_s = 0, bf16_clip_step_per_param_s = 0;
  /// PyTorch's fused attention (cuDNN) forward with attention dropout against the same call
  /// without (the profile's `gpu.sdpa` table was measured without dropout); the backward runs at
  /// the table's rate with or without.
  double sdpa_dropout_fwd_ratio = 1;
  /// Bytes read + written per second by the step's per-gradient `g.double()` (a 16-bit to fp64
  /// copy) and `torch.norm` of the fp64 copy.
  double fp64_cast_bytes_per_s = 0, fp64_norm_bytes_per_s = 0;
  /// The optimizer step's other kernels on the partition's flat tensors, bytes read + written
  /// per second (tools/probes/optimizer_kernels.py): the passes without a dtype change
  /// (flatten, unscale_and_clip_grads' mul_, the copy back: |step_flat|) and the inner
  /// optimizer's own kernel (DeepSpeed's FusedAdam, torch.optim's foreach Adam/AdamW). 0: not
  /// measured, priced at the streaming class's rate.
  double step_flat_bytes_per_s = 0, fused_adam_bytes_per_s = 0, torch_adam_bytes_per_s = 0;
  /// PyTorch's blocking copy_ of a 16-bit CUDA tensor into a CPU tensor of another dtype (a
  /// pageable temporary, the D2H copy into it, the conversion on the host's intra-op threads,
  /// the synchronization), by the source's bytes: (bytes, seconds) points, ascending. Two
  /// regimes split at glibc's largest mmap threshold (kFreshMappingBytes): below it the
  /// temporary comes from the heap, whose pages stay mapped between copies; from it up the
  /// temporary is a fresh mapping each time and the copy faults every page in. Points of the
  /// second regime are optional (profiles before 2026-12-06 have none); without them a copy
  /// that large is priced on the first regime's curve plus its page faults at the host's
  /// measured rate (Task::host_fault_bytes). Empty: priced from its parts (the profile's
  /// pageable D2H curve and the host's streaming rate).
  std::vector<std::pair<double, double>> cast_copy_d2h;
  /// The same copy with malloc held to its heap (Plan::malloc_heap; StackProfile's
  /// cast_copy_d2h_heap): one regime at every size. Empty: not measured; a heap-regime copy is
  /// then priced on cast_copy_d2h's heap points, extended beyond the last along its last segment.
  std::vector<std::pair<double, double>> cast_copy_d2h_heap;
  std::vector<FamilyBlockHost> families;
  std::vector<FamilyRestHost> rests;
  /// The measured families as dsplan traces them (a property of dsplan's tracer, not of the
  /// machine: a profile's stack section keeps the built-in table).
  std::vector<FamilyTrace> traces;

  /// One blocking cast copy of |bytes| on the curve of its regime (cast_copy_d2h's points on
  /// the same side of kFreshMappingBytes; the heap regime's when the fresh one has no points):
  /// linear between the points and beyond the last along the last segment (one point: its
  /// rate), at least the first point's time. REQUIRES: the table is not empty.
  /// |heap|: the heap regime whatever the size (malloc held to its heap, Plan::malloc_heap):
  /// cast_copy_d2h_heap's curve when measured, else cast_copy_d2h's heap points, beyond the
  /// last along its last segment.
  double CastCopyD2HSeconds(double bytes, bool heap = false) const;
  /// Whether cast_copy_d2h measured the fresh-mapping regime (then its points include the page
  /// faults of a copy that large, and the caller must not price them again).
  bool FreshCastCopyMeasured() const;
  double OpFwd(OpKind k) const { return op_fwd_s[static_cast<int>(k)]; }
  double OpBwd(OpKind k) const { return op_bwd_s[static_cast<int>(k)]; }
  /// The family's block measurement for |kind| (T5 encoder/decoder differ), or nullptr.
  const FamilyBlockHost* Block(std::string_view model_type, LayerKind kind) const;
  /// The family's rest-of-model measurement, or nullptr.
  const FamilyRestHost* Rest(std::string_view model_type) const;
  /// The per-op host estimate of |t|: the measured cost of one op of each kind plus one plain
  /// tensor op per further kernel.
  double PerOpFwd(const TracedOps& t) const;
  double PerOpBwd(const TracedOps& t) const;
  /// The scale for a layer of a family without a measurement here, over the measured (and
  /// traced) families other than |exclude_model_type| (the layer's own: `dsplan accuracy
  /// --unseen-families` holds each family out this way). Fewer than three families: no scale.
  UnmeasuredHostScale ScaleForUnmeasured(std::string_view exclude_model_type) const;
};

/// PyTorch 2.11 + transformers 5.17 + DeepSpeed 0.14.5 on the H200 device machine (16-core
/// x86 host), 2026-12-03: the built-in costs (HardwareProfile::StackSummary names them
/// kBuiltInStackCosts).
const StackCosts& MeasuredStackCosts();

/// The costs a profile's stack section holds; the ZeRO-3 hook costs are the built-in ones when
/// the section has none (DeepSpeed was not measured; StackSummary says so).
StackCosts StackCostsFromProfile(const StackProfile& stack);

/// The stack costs the cost model uses for |profile|: its stack section when present, else the
/// built-in ones (MeasuredStackCosts, not copied).
std::shared_ptr<const StackCosts> StackCostsOf(const HardwareProfile& profile);

/// The class that prices an op of |kind| without its own eager decomposition.
KernelClass DefaultKernelClass(OpKind kind);

}  // namespace dsplan
