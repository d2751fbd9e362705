// Plan: everything about one DeepSpeed training configuration that matters for memory and time.
//
// The fields mirror ds_config.json (batch keys, precision, optimizer, zero_optimization with its
// offload blocks, aio) with defaults equal to DeepSpeed's *code* defaults
// (docs/deepspeed-facts.md#config-loader), plus what ds_config.json does not hold: the cluster
// shape, sequence lengths, activation checkpointing and the attention implementation.
//
// A Plan is a plain value. Parsing a ds_config.json into a Plan (with DeepSpeed's own
// validation) lives in planner/ds_config.h; this header has no I/O.
#ifndef DSPLAN_CORE_PLAN_H_
#define DSPLAN_CORE_PLAN_H_

#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "core/checked_math.h"
#include "core/status.h"

namespace dsplan {

/// The environment that holds glibc's malloc to its main heap (Plan::malloc_heap): one arena for
/// every thread (autograd's device thread would otherwise get its own, whose 64 MiB sub-heaps
/// are mapped and unmapped as they fill and empty), no mmap for any request (glibc maps those of
/// 32 MiB and more afresh each time), and no trimming of the heap's top (64 GiB threshold).
inline constexpr const char* kMallocHeapEnv =
    "MALLOC_ARENA_MAX=1 MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=68719476736";

/// Training precision as DeepSpeed runs it: bf16/fp16 cast the module (weights, buffers and so
/// activations) to 16 bits; fp32 keeps everything in 32 bits.
enum class Precision { kBf16, kFp16, kFp32 };
const char* PrecisionName(Precision p);
Result<Precision> ParsePrecision(const std::string& s);
/// Bytes per element of the model (and communication) dtype: 2 for bf16/fp16, 4 for fp32.
int64_t PrecisionBytes(Precision p);

/// transformers' attn_implementation. kAuto picks what transformers picks by default: sdpa when
/// the family supports it, else eager.
enum class AttentionImpl { kAuto, kEager, kSdpa };
const char* AttentionImplName(AttentionImpl a);
Result<AttentionImpl> ParseAttentionImpl(const std::string& s);

enum class OffloadDevice { kNone, kCpu, kNvme };
const char* OffloadDeviceName(OffloadDevice d);

/// The optimizer DeepSpeed builds. Adam/AdamW: two fp32 states per element (exp_avg,
/// exp_avg_sq); Adagrad: one; SGD with momentum: one (zero without momentum); Lamb: two.
enum class OptimizerType { kAdamW, kAdam, kAdagrad, kSgd, kLamb };
const char* OptimizerTypeName(OptimizerType t);
/// fp32 state elements the optimizer keeps per trainable element.
int OptimizerStatesPerElement(OptimizerType t, bool sgd_momentum);

/// The class DeepSpeed's engine wraps the optimizer in (docs/deepspeed-facts.md#wrapper).
enum class OptimizerWrapper {
  kFp16Optimizer,     // stage 0 fp16 (FP16_Optimizer / FP16_UnfusedOptimizer)
  kBf16Optimizer,     // stage 0 bf16 (fp32 grad accumulation), or bf16 + stage 1 + fp32 accum
  kBasic,             // stage 0 fp32: the optimizer itself
  kZero12,            // DeepSpeedZeroOptimizer (stages 1 and 2)
  kZero3,             // DeepSpeedZeroOptimizer_Stage3
};
const char* OptimizerWrapperName(OptimizerWrapper w);

struct OffloadOptimizerConfig {
  OffloadDevice device = OffloadDevice::kNone;
  std::string nvme_path;
  int64_t buffer_count = 4;
  bool pin_memory = false;
  bool pipeline_read = false;
  bool pipeline_write = false;
  bool fast_init = false;
  double ratio = 1.0;

  bool operator==(const OffloadOptimizerConfig&) const = default;
};

struct OffloadParamConfig {
  OffloadDevice device = OffloadDevice::kNone;
  std::string nvme_path;
  int64_t buffer_count = 5;
  int64_t buffer_size = 100'000'000;     // elements
  int64_t max_in_cpu = 1'000'000'000;    // elements
  bool pin_memory = false;

  bool operator==(const OffloadParamConfig&) const = default;
};

struct AioConfig {
  int64_t block_size = 1 << 20;  // bytes
  int64_t queue_depth = 8;
  int64_t intra_op_parallelism = 1;  // "thread_count" before DeepSpeed 0.16.4
  bool single_submit = false;
  bool overlap_events = true;
  bool use_gds = false;

  bool operator==(const AioConfig&) const = default;
};

/// The ds_config "activation_checkpointing" block (runtime/activation_checkpointing/config.py,
/// code defaults). It configures DeepSpeed's own checkpoint function
/// (deepspeed.checkpointing.checkpoint) only: it has no effect on a model that checkpoints with
/// torch.utils.checkpoint, as transformers' gradient_checkpointing_enable() does
/// (docs/zero-infinity.md "Activation checkpoints off the GPU").
struct ActivationCheckpointingConfig {
  bool present = false;                 // the block is in the config
  bool partition_activations = false;   // split each checkpoint over the model-parallel ranks
  bool cpu_checkpointing = false;       // keep the checkpoints in host memory
  bool contiguous_memory_optimization = false;
  std::optional<int64_t> number_checkpoints;
  bool synchronize_checkpoint_boundary = false;
  bool profile = false;

  bool operator==(const ActivationCheckpointingConfig&) const = default;
};

/// The most tiles dsplan lets memory-centric tiling split a Linear into.
inline constexpr int64_t kMaxLinearTiles = 4096;

struct ZeroConfig {
  int stage = 0;
  bool contiguous_gradients = true;
  bool reduce_scatter = true;
  int64_t reduce_bucket_size = 500'000'000;      // elements
  bool use_multi_rank_bucket_allreduce = true;
  int64_t allgather_bucket_size = 500'000'000;   // elements; ignored on modern PyTorch
  /// None in the config means: true for stage 3, false otherwise (DeepSpeed's validator).
  std::optional<bool> overlap_comm;
  int64_t sub_group_size = 1'000'000'000;
  int64_t stage3_prefetch_bucket_size = 50'000'000;
  int64_t stage3_param_persistence_threshold = 100'000;
  int64_t stage3_model_persistence_threshold = std::numeric_limits<int64_t>::max();
  int64_t stage3_max_live_parameters = 1'000'000'000;
  int64_t stage3_max_reuse_distance = 1'000'000'000;
  bool round_robin_gradients = false;
  /// stage3_gather_16bit_weights_on_model_save: gather the full 16-bit weights when saving
  /// (no effect on the step; kept so an emitted config says what the user asked for).
  bool gather_16bit_weights_on_model_save = false;
  OffloadOptimizerConfig offload_optimizer;
  OffloadParamConfig offload_param;

  bool OverlapComm() const { return overlap_comm.value_or(stage == 3); }
  bool operator==(const ZeroConfig&) const = default;
};

/// fp16 loss scaling (ds_config "fp16" block; code defaults). No effect on memory or time beyond
/// the overflow check; kept so a parsed config can be emitted again unchanged.
struct Fp16LossScale {
  double loss_scale = 0.0;          // 0 = dynamic
  int64_t initial_scale_power = 16;
  int64_t loss_scale_window = 1000;
  int64_t hysteresis = 2;
  bool consecutive_hysteresis = false;
  double min_loss_scale = 1.0;

  bool operator==(const Fp16LossScale&) const = default;
};

/// optimizer.params hyperparameters. None = not in the config (DeepSpeed's optimizer default),
/// or "auto" (the HF Trainer fills it). They do not change memory or time.
struct OptimizerHyperparams {
  std::optional<double> lr;
  std::optional<double> beta1;
  std::optional<double> beta2;
  std::optional<double> eps;
  std::optional<double> weight_decay;
  std::optional<double> momentum;   // SGD

  bool operator==(const OptimizerHyperparams&) const = default;
};

/// scheduler.params of DeepSpeed's warm-up schedulers. None = not in the config or "auto".
struct SchedulerParams {
  std::optional<double> warmup_min_lr;
  std::optional<double> warmup_max_lr;
  std::optional<int64_t> warmup_num_steps;
  std::optional<int64_t> total_num_steps;
  std::string warmup_type;  // "log" or "linear"; empty = not given

  bool operator==(const SchedulerParams&) const = default;
};

/// The run shape: what one micro-batch looks like to the model, and so everything a Workload
/// is built from (simulator/workload.h BuildWorkload(spec, shape)). It is part of the Plan (a
/// Plan is a RunShape plus the DeepSpeed configuration and the cluster), so the micro-batch,
/// the lengths and checkpointing have one representation from the command line to the
/// workload: flags and ds_config keys fill it, the search varies it, the Simulator caches
/// workloads by it.
struct RunShape {
  /// Samples per GPU per micro-step (ds_config: train_micro_batch_size_per_gpu).
  int64_t micro_batch = 1;
  /// Tokens per sample; for an encoder-decoder model the encoder (source) length.
  int64_t seq_len = 1024;
  /// Encoder-decoder: the decoder (target) length; 0 = the same as seq_len.
  int64_t target_len = 0;
  /// HF gradient_checkpointing_enable(use_reentrant=False): every transformer block is
  /// recomputed in backward; only its inputs stay alive.
  bool gradient_checkpointing = false;
  /// transformers' attn_implementation (kAuto: what transformers picks).
  AttentionImpl attention = AttentionImpl::kAuto;
  /// The training dtype (ds_config bf16/fp16 blocks): weights, activations and communication.
  Precision precision = Precision::kBf16;

  bool operator==(const RunShape&) const = default;
};

/// The batch triple DeepSpeed checks (config.py _batch_assertion): train_batch_size =
/// micro-batch x accumulation x data-parallel ranks.
struct BatchTriple {
  int64_t micro_batch = 1;
  int64_t grad_accum = 1;
  int64_t global_batch = 1;
};

/// The one place the batch triple is resolved from what was pinned (the CLI's --micro-batch,
/// --grad-accum and --global-batch, or the search's candidate micro-batch): a missing value is
/// derived from the others (accumulation 1 when neither it nor the global batch is given);
/// a global batch must be a positive multiple of micro-batch x accumulation x |ranks|, and a
/// product that overflows 64 bits is refused. The ds_config parser (planner/ds_config.cc) resolves
/// a config's batch keys through it too, and puts its refusals in DeepSpeed's words.
/// Errors name the flags and say what is valid. REQUIRES: |ranks| >= 1.
Result<BatchTriple> ResolveBatch(int64_t ranks, std::optional<int64_t> micro_batch,
                                 std::optional<int64_t> grad_accum,
                                 std::optional<int64_t> global_batch);

/// The most GPUs in one job dsplan plans for (the largest published training runs use ~25,000):
/// --gpus x --nodes, the planner's cluster, a calibration record's world_size. Bounded so that
/// products with it cannot overflow and per-rank loops stay short.
inline constexpr int64_t kMaxWorldSize = 65536;

struct Plan : RunShape {
  // The run shape (micro_batch, seq_len, target_len, gradient_checkpointing, attention,
  // precision) is the base: RunShape above.
  const RunShape& shape() const { return *this; }
  RunShape& shape() { return *this; }

  // --- cluster (not in ds_config.json) ---
  int nodes = 1;
  int gpus_per_node = 1;

  // --- batch (ds_config: gradient_accumulation_steps; the micro-batch is the shape's) ---
  int64_t grad_accum = 1;

  // --- precision (the dtype itself is the shape's) ---
  /// data_types.grad_accum_dtype; none = DeepSpeed's default (fp32 for bf16 at stage 0, else the
  /// model dtype).
  std::optional<Precision> grad_accum_dtype;
  /// communication_data_type; none = the model dtype.
  std::optional<Precision> communication_dtype;

  // --- optimizer ---
  OptimizerType optimizer = OptimizerType::kAdamW;
  bool torch_adam = false;      // optimizer.params.torch_adam
  bool sgd_momentum = false;    // SGD: momentum > 0
  /// optimizer.params.adam_w_mode for type "Adam" (DeepSpeed default true: AdamW math).
  bool adam_w_mode = true;
  /// false when the config has no "optimizer" block: the client (e.g. the HF Trainer) passes its
  /// own optimizer, which dsplan assumes is `optimizer` above.
  bool optimizer_from_config = true;
  OptimizerHyperparams optimizer_params;
  /// zero_allow_untested_optimizer / zero_force_ds_cpu_optimizer (docs/deepspeed-facts.md#wrapper).
  bool zero_allow_untested_optimizer = false;
  bool zero_force_ds_cpu_optimizer = true;
  /// scheduler.type; empty = no scheduler block. No effect on memory or time.
  std::string scheduler;
  SchedulerParams scheduler_params;
  double gradient_clipping = 0.0;
  Fp16LossScale fp16;

  ZeroConfig zero;
  AioConfig aio;
  ActivationCheckpointingConfig activation_checkpointing;

  // --- the model code (not in ds_config.json; lengths and checkpointing are the shape's) ---
  /// Memory-centric tiling (ZeRO-Infinity; deepspeed.zero.TiledLinear): every Linear of each
  /// transformer block is split into this many tiles along its output dimension, so ZeRO-3
  /// gathers, computes and releases 1/T of the block's weights at a time. A change to the model
  /// code, not a ds_config key; 1 = no tiling (docs/zero-infinity.md "Memory-centric tiling").
  int64_t linear_tiles = 1;
  /// ZeRO-3: the training script builds the model inside `deepspeed.zero.Init` (HF Trainer,
  /// accelerate and from_pretrained under a ZeRO-3 config do; a plain script may not). zero.Init
  /// replaces torch.nn.functional.linear with DeepSpeed's autograd function, which keeps the
  /// weight Parameter for backward; PyTorch's own keeps weight.t(), a view that holds the
  /// gathered buffer after ZeRO-3 releases the module. false: built outside and handed to
  /// deepspeed.initialize, which in 0.14.5 never installs the replacement: every nn.Linear
  /// weight gathered in the forward stays allocated until that Linear's backward
  /// (docs/deepspeed-facts.md, "What keeps a released weight"). Not a ds_config key.
  bool zero_init = true;
  /// The training processes run with glibc's malloc held to its main heap:
  /// MALLOC_ARENA_MAX=1 MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=68719476736 in their
  /// environment (kMallocHeapEnv). ZeRO-3's blocking cast copies to and from the host then
  /// reuse their pageable temporaries' pages from step to step instead of faulting fresh
  /// mappings in every copy (measured 2.5x faster offloaded steps, docs/validation/deepspeed/
  /// malloc-1206). Not a ds_config key: the launch environment.
  bool malloc_heap = false;

  /// DeepSpeed's checkpoint function keeps the block inputs in host memory: only with
  /// activation checkpointing on and activation_checkpointing.cpu_checkpointing.
  bool CheckpointsOnHost() const {
    return gradient_checkpointing && activation_checkpointing.cpu_checkpointing;
  }

  int world_size() const { return nodes * gpus_per_node; }
  /// ZeRO's partition count N: the data-parallel group size (no TP/PP yet).
  int dp_size() const { return world_size(); }
  /// micro-batch x gradient_accumulation_steps x data-parallel ranks; INT64_MAX where that
  /// overflows (ValidatePlan refuses such a plan).
  int64_t train_batch() const {
    return CheckedProduct({micro_batch, grad_accum, int64_t{dp_size()}})
        .value_or(std::numeric_limits<int64_t>::max());
  }

  /// DeepSpeed's get_data_types(): the gradient accumulation dtype.
  Precision GradAccumDtype() const;
  Precision CommDtype() const { return communication_dtype.value_or(precision); }
  /// The wrapper the engine picks (docs/deepspeed-facts.md#wrapper).
  OptimizerWrapper Wrapper() const;
  bool OffloadsOptimizer() const { return zero.offload_optimizer.device != OffloadDevice::kNone; }
  bool OffloadsParams() const { return zero.offload_param.device != OffloadDevice::kNone; }

  bool operator==(const Plan&) const = default;
};

/// Checks the combinations DeepSpeed itself rejects (offload_param below stage 3, ratio < 1
/// below stage 3, NVMe without a path, non-positive sizes, ...). Messages name the ds_config key
/// and say what is valid.
/// The largest gradient_accumulation_steps a plan may have: the simulator's cost does not grow
/// with it (docs/simulator.md "Gradient accumulation"); past a billion micro-steps per optimizer
/// step no training run is meant.
inline constexpr int64_t kMaxGradAccum = 1'000'000'000;

Status ValidatePlan(const Plan& plan);

}  // namespace dsplan

#endif  // DSPLAN_CORE_PLAN_H_
