// Plan: everything about one DeepSpeed training configuration that matters for memory and time.
//
// The fields mirror ds_config.json (batch keys, precision, optimizer, zero_optimization with its
// offload blocks, aio) with defaults equal to DeepSpeed's *code* defaults (docs/deepspeed-facts
// in ../shared/deepspeed.md §5), plus what ds_config.json does not hold: the cluster shape,
// sequence lengths, activation checkpointing and the attention implementation.
//
// A Plan is a plain value. Parsing a ds_config.json into a Plan (with DeepSpeed's own
// validation) lives in planner/ds_config.h; this header has no I/O.
#ifndef DSPLAN_CORE_PLAN_H_
#define DSPLAN_CORE_PLAN_H_

#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "core/status.h"

namespace dsplan {

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

/// The class DeepSpeed's engine wraps the optimizer in (deepspeed.md §0).
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
};

struct OffloadParamConfig {
  OffloadDevice device = OffloadDevice::kNone;
  std::string nvme_path;
  int64_t buffer_count = 5;
  int64_t buffer_size = 100'000'000;     // elements
  int64_t max_in_cpu = 1'000'000'000;    // elements
  bool pin_memory = false;
};

struct AioConfig {
  int64_t block_size = 1 << 20;  // bytes
  int64_t queue_depth = 8;
  int64_t intra_op_parallelism = 1;  // "thread_count" before DeepSpeed 0.16.4
  bool single_submit = false;
  bool overlap_events = true;
  bool use_gds = false;
};

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
  OffloadOptimizerConfig offload_optimizer;
  OffloadParamConfig offload_param;

  bool OverlapComm() const { return overlap_comm.value_or(stage == 3); }
};

struct Plan {
  // --- cluster (not in ds_config.json) ---
  int nodes = 1;
  int gpus_per_node = 1;

  // --- batch (ds_config: train_micro_batch_size_per_gpu, gradient_accumulation_steps) ---
  int64_t micro_batch = 1;
  int64_t grad_accum = 1;

  // --- precision ---
  Precision precision = Precision::kBf16;
  /// data_types.grad_accum_dtype; none = DeepSpeed's default (fp32 for bf16 at stage 0, else the
  /// model dtype).
  std::optional<Precision> grad_accum_dtype;
  /// communication_data_type; none = the model dtype.
  std::optional<Precision> communication_dtype;

  // --- optimizer ---
  OptimizerType optimizer = OptimizerType::kAdamW;
  bool torch_adam = false;      // optimizer.params.torch_adam
  bool sgd_momentum = false;    // SGD: momentum > 0
  double gradient_clipping = 0.0;

  ZeroConfig zero;
  AioConfig aio;

  // --- the workload (not in ds_config.json) ---
  int64_t seq_len = 1024;
  int64_t target_len = 0;       // encoder-decoder: decoder length
  bool gradient_checkpointing = false;
  AttentionImpl attention = AttentionImpl::kAuto;

  int world_size() const { return nodes * gpus_per_node; }
  /// ZeRO's partition count N: the data-parallel group size (no TP/PP yet).
  int dp_size() const { return world_size(); }
  int64_t train_batch() const { return micro_batch * grad_accum * dp_size(); }

  /// DeepSpeed's get_data_types(): the gradient accumulation dtype.
  Precision GradAccumDtype() const;
  Precision CommDtype() const { return communication_dtype.value_or(precision); }
  /// The wrapper the engine picks (deepspeed.md §0).
  OptimizerWrapper Wrapper() const;
  bool OffloadsOptimizer() const { return zero.offload_optimizer.device != OffloadDevice::kNone; }
  bool OffloadsParams() const { return zero.offload_param.device != OffloadDevice::kNone; }
};

/// Checks the combinations DeepSpeed itself rejects (offload_param below stage 3, ratio < 1
/// below stage 3, NVMe without a path, non-positive sizes, ...). Messages name the ds_config key
/// and say what is valid.
Status ValidatePlan(const Plan& plan);

}  // namespace dsplan

#endif  // DSPLAN_CORE_PLAN_H_
