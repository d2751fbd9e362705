#include "planner/ds_config_keys.h"

#include <limits>

#include <fmt/format.h>

namespace dsplan {
namespace {

using T = DsKeyType;
using A = DsKeyAuto;
using N = DsKeyNoEffect;
using E = DsKeyEmit;
using R = DsKeyRead;

// The Plan member a row reads and writes (a captureless lambda is a function pointer).
// DS_*: the row's tail after |effect| (no default text, order, hidden-size rule); AT_*: the tail
// after |from_hidden|.
#define DS_BOOL(m) "", 0, false, nullptr, [](Plan& p) { return &p.m; }
#define DS_INT(m) "", 0, false, nullptr, nullptr, [](Plan& p) { return &p.m; }
#define DS_DOUBLE(m) "", 0, false, nullptr, nullptr, nullptr, [](Plan& p) { return &p.m; }
#define AT_BOOL(m) [](Plan& p) { return &p.m; }
#define AT_INT(m) nullptr, [](Plan& p) { return &p.m; }

// The HF Trainer's values from the model's hidden_size h (trainer_config_finalize).
int64_t HiddenSquared(int64_t h) { return h * h; }
int64_t PrefetchFromHidden(int64_t h) { return static_cast<int64_t>(0.9 * double(h) * double(h)); }
int64_t PersistenceFromHidden(int64_t h) { return 10 * h; }

std::vector<DsConfigKey> MakeTable() {
  return {
      // --- top level: batch, precision, clipping ------------------------------------------------
      {"train_batch_size", nullptr, "micro_batch, grad_accum (derived)", T::kBatch, A::kTrainer,
       N::kNever, E::kByHand, R::kSpecial,
       "global batch; must equal micro-batch x accumulation x world size (DeepSpeed asserts)",
       "derived from the other two"},
      {"train_micro_batch_size_per_gpu", nullptr, "micro_batch", T::kBatch, A::kTrainer, N::kNever,
       E::kByHand, R::kSpecial, "samples per GPU per forward/backward", "derived from the other two"},
      {"gradient_accumulation_steps", nullptr, "grad_accum", T::kBatch, A::kTrainer, N::kNever,
       E::kByHand, R::kSpecial, "micro-steps per optimizer step", "derived, else 1"},
      {"gradient_clipping", nullptr, "gradient_clipping", T::kNumber, A::kTrainer, N::kNever,
       E::kByHand, R::kSpecial, "clips the global gradient norm before the step (0 = off)",
       DS_DOUBLE(gradient_clipping)},
      {"fp16", nullptr, "precision, fp16", T::kObject, A::kRejected, N::kNever, E::kByHand,
       R::kSpecial, "fp16 mixed precision with loss scaling (FP16_Optimizer / ZeRO)", "disabled"},
      {"fp16.enabled", nullptr, "precision", T::kBool, A::kTrainer, N::kNever, E::kByHand,
       R::kSpecial, "trains in fp16 with fp32 master weights", "false"},
      {"fp16.auto_cast", nullptr, "", T::kBool, A::kDropped, N::kNever, E::kByHand, R::kSpecial,
       "casts the inputs to fp16 (not modelled: dsplan models the module cast)", "false"},
      {"fp16.loss_scale", nullptr, "fp16.loss_scale", T::kNumber, A::kDropped, N::kNever,
       E::kByHand, R::kPlain, "static loss scale; 0 = dynamic (no effect on memory or time)",
       DS_DOUBLE(fp16.loss_scale)},
      {"fp16.initial_scale_power", nullptr, "fp16.initial_scale_power", T::kInt, A::kDropped,
       N::kNever, E::kByHand, R::kPlain, "dynamic loss scale starts at 2^this",
       DS_INT(fp16.initial_scale_power)},
      {"fp16.loss_scale_window", nullptr, "fp16.loss_scale_window", T::kInt, A::kDropped,
       N::kNever, E::kByHand, R::kPlain, "steps without overflow before the scale grows",
       DS_INT(fp16.loss_scale_window)},
      {"fp16.hysteresis", nullptr, "fp16.hysteresis", T::kInt, A::kDropped, N::kNever, E::kByHand,
       R::kPlain, "overflows tolerated before the scale shrinks", DS_INT(fp16.hysteresis)},
      {"fp16.consecutive_hysteresis", nullptr, "fp16.consecutive_hysteresis", T::kBool,
       A::kDropped, N::kNever, E::kByHand, R::kPlain,
       "refills the hysteresis after a step without overflow", DS_BOOL(fp16.consecutive_hysteresis)},
      {"fp16.min_loss_scale", nullptr, "fp16.min_loss_scale", T::kNumber, A::kDropped, N::kNever,
       E::kByHand, R::kPlain, "lower bound of the dynamic loss scale", DS_DOUBLE(fp16.min_loss_scale)},
      {"fp16.fp16_master_weights_and_grads", nullptr, "", T::kBool, A::kDropped, N::kNever,
       E::kByHand, R::kSpecial, "fp16 master weights (true: not modelled, Unsupported)", "false", 0,
       true},
      {"bf16", nullptr, "precision", T::kObject, A::kRejected, N::kNever, E::kByHand, R::kSpecial,
       "bf16 mixed precision (alias \"bfloat16\"; DeepSpeed reads \"bf16\" first)", "disabled"},
      {"bf16.enabled", nullptr, "precision", T::kBool, A::kTrainer, N::kNever, E::kByHand,
       R::kSpecial, "trains in bf16 (BF16_Optimizer at stage 0, ZeRO's fp32 master weights above)",
       "false"},
      {"bf16.immediate_grad_update", nullptr, "", T::kBool, A::kRejected, N::kNever, E::kByHand,
       R::kChecked, "BF16_Optimizer's gradient accumulation timing (no effect on memory or time)",
       "false"},
      {"bf16.check_grad_overflow", nullptr, "", T::kBool, A::kRejected, N::kNever, E::kByHand,
       R::kChecked, "bf16 overflow check (no effect on memory or time)", "false", 0, true},
      {"bf16.bf16_master_weights_and_grads", nullptr, "", T::kBool, A::kRejected, N::kNever,
       E::kByHand, R::kSpecial, "bf16 master weights (true: not modelled, Unsupported)", "false", 0,
       true},
      {"bf16.bf16_optimizer_states", nullptr, "", T::kBool, A::kRejected, N::kNever, E::kByHand,
       R::kSpecial, "bf16 optimizer states (true: not modelled, Unsupported)", "false", 0, true},
      {"communication_data_type", nullptr, "communication_dtype", T::kDtype, A::kRejected,
       N::kNever, E::kByHand, R::kSpecial, "dtype of the gradient reduction", "the model dtype"},
      {"data_types.grad_accum_dtype", nullptr, "grad_accum_dtype", T::kDtype, A::kRejected,
       N::kNever, E::kByHand, R::kSpecial,
       "dtype gradients accumulate in (bf16 at stage 0: fp32 selects BF16_Optimizer)",
       "fp32 for bf16 at stage 0, else the model dtype"},
      {"prescale_gradients", nullptr, "", T::kBool, A::kRejected, N::kNever, E::kByHand,
       R::kSpecial, "divides gradients before the reduction (stage 2 with reduce_scatter asserts)",
       "false"},
      {"gradient_predivide_factor", nullptr, "", T::kNumber, A::kRejected, N::kNever, E::kByHand,
       R::kSpecial, "divides gradients by this before the reduction (stage 2 with reduce_scatter "
       "asserts it is 1)", "1.0"},
      {"sequence_parallel_size", nullptr, "", T::kInt, A::kRejected, N::kNever, E::kByHand,
       R::kSpecial, "Ulysses sequence parallelism (> 1 not modelled, Unsupported)", "1"},
      {"fp16_master_weights_and_grads", nullptr, "", T::kBool, A::kRejected, N::kNever, E::kByHand,
       R::kSpecial, "fp16 master weights (true: not modelled, Unsupported)", "false"},
      // --- optimizer and scheduler --------------------------------------------------------------
      {"zero_allow_untested_optimizer", nullptr, "zero_allow_untested_optimizer", T::kBool,
       A::kRejected, N::kNever, E::kByHand, R::kSpecial,
       "lets ZeRO run an optimizer outside its tested list (SGD, Lamb)",
       DS_BOOL(zero_allow_untested_optimizer)},
      {"zero_force_ds_cpu_optimizer", nullptr, "zero_force_ds_cpu_optimizer", T::kBool,
       A::kRejected, N::kNever, E::kByHand, R::kSpecial,
       "with offload_optimizer, requires DeepSpeed's CPU optimizer (else ZeRORuntimeException)",
       DS_BOOL(zero_force_ds_cpu_optimizer)},
      {"optimizer.type", nullptr, "optimizer", T::kString, A::kRejected, N::kNever, E::kByHand,
       R::kSpecial, "Adam, AdamW, Adagrad, Lamb (any case) or a torch.optim name such as SGD",
       "the client's optimizer (no block)"},
      {"optimizer.params.lr", nullptr, "optimizer_params.lr", T::kNumber, A::kTrainer, N::kNever,
       E::kByHand, R::kSpecial, "learning rate (no effect on memory or time)", "the optimizer's"},
      {"optimizer.params.betas", nullptr, "optimizer_params.beta1, beta2", T::kAny, A::kTrainer,
       N::kNever, E::kByHand, R::kSpecial, "Adam betas, each in [0, 1)", "the optimizer's"},
      {"optimizer.params.eps", nullptr, "optimizer_params.eps", T::kNumber, A::kTrainer, N::kNever,
       E::kByHand, R::kSpecial, "Adam epsilon", "the optimizer's"},
      {"optimizer.params.weight_decay", nullptr, "optimizer_params.weight_decay", T::kNumber,
       A::kTrainer, N::kNever, E::kByHand, R::kSpecial, "weight decay", "the optimizer's"},
      {"optimizer.params.momentum", nullptr, "optimizer_params.momentum", T::kNumber,
       A::kRejected, N::kNever, E::kByHand, R::kSpecial,
       "SGD momentum (> 0 keeps a momentum buffer per parameter)", "0"},
      {"optimizer.params.torch_adam", nullptr, "torch_adam", T::kBool, A::kRejected, N::kNever,
       E::kByHand, R::kSpecial, "torch.optim Adam/AdamW instead of FusedAdam / DeepSpeedCPUAdam",
       DS_BOOL(torch_adam)},
      {"optimizer.params.adam_w_mode", nullptr, "adam_w_mode", T::kBool, A::kRejected, N::kNever,
       E::kByHand, R::kSpecial, "Adam with decoupled weight decay (AdamW always is)",
       DS_BOOL(adam_w_mode)},
      {"scheduler.type", nullptr, "scheduler", T::kString, A::kRejected, N::kNever, E::kByHand,
       R::kSpecial, "WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle, LRRangeTest, or a "
       "torch.optim.lr_scheduler name", "none"},
      {"scheduler.params", nullptr, "scheduler_params", T::kObject, A::kTrainer, N::kNever,
       E::kByHand, R::kSpecial, "the schedule (no effect on memory or time)", "the scheduler's"},
      // --- zero_optimization (DeepSpeedZeroConfig, in its field order) -------------------------
      {"zero_optimization", nullptr, "zero", T::kObject, A::kRejected, N::kNever, E::kByHand,
       R::kSpecial, "ZeRO; unknown keys are an error (pydantic extra=forbid); true/false is the "
       "deprecated stage 1 / 0", "stage 0"},
      {"zero_optimization.stage", nullptr, "zero.stage", T::kInt, A::kDropped, N::kNever,
       E::kByHand, R::kSpecial,
       "0 data parallel; 1 partitions optimizer states, 2 also gradients, 3 also parameters",
       "0"},
      {"zero_optimization.contiguous_gradients", nullptr, "zero.contiguous_gradients", T::kBool,
       A::kDropped, N::kStage0, E::kAboveStage0, R::kPlain,
       "copies gradients into one contiguous buffer as they are reduced (forced on with CPU "
       "offload at stages 1-2)", "", -3, false, nullptr, AT_BOOL(zero.contiguous_gradients)},
      {"zero_optimization.reduce_scatter", nullptr, "zero.reduce_scatter", T::kBool, A::kDropped,
       N::kStage0, E::kAboveStage0, R::kPlain,
       "stages 1-2 reduce gradients with reduce-scatter instead of all-reduce", "", -2, false,
       nullptr, AT_BOOL(zero.reduce_scatter)},
      {"zero_optimization.reduce_bucket_size", nullptr, "zero.reduce_bucket_size", T::kSize,
       A::kHiddenSize, N::kStage0, E::kAboveStage0, R::kPlain,
       "gradient elements per reduction bucket (a GPU buffer of that many elements); HF \"auto\" "
       "= h*h", "", -5, false, HiddenSquared, AT_INT(zero.reduce_bucket_size)},
      {"zero_optimization.use_multi_rank_bucket_allreduce", nullptr,
       "zero.use_multi_rank_bucket_allreduce", T::kBool, A::kDropped, N::kNever, E::kNotDefault,
       R::kPlain, "stages 1-2 all-reduce path: one all-reduce for buckets of several ranks",
       DS_BOOL(zero.use_multi_rank_bucket_allreduce)},
      {"zero_optimization.allgather_partitions", nullptr, "", T::kBool, A::kDropped, N::kNever,
       E::kByHand, R::kSpecial, "never read by DeepSpeed's runtime (no effect)", "true"},
      {"zero_optimization.allgather_bucket_size", nullptr, "zero.allgather_bucket_size", T::kSize,
       A::kDropped, N::kNever, E::kNotDefault, R::kPlain,
       "post-step all-gather bucket of stages 1-2; no effect with all_gather_into_tensor "
       "(PyTorch >= 1.13) or at stage 3", DS_INT(zero.allgather_bucket_size)},
      {"zero_optimization.overlap_comm", nullptr, "zero.overlap_comm", T::kBool, A::kDropped,
       N::kStage0, E::kByHand, R::kPlain,
       "overlaps gradient reduction with backward on a side stream (its buckets are not reused "
       "until the reduction ends)", "true at stage 3, else false", -4, false, nullptr,
       nullptr, nullptr, nullptr, [](Plan& p) { return &p.zero.overlap_comm; }},
      {"zero_optimization.load_from_fp32_weights", nullptr, "", T::kBool, A::kDropped, N::kNever,
       E::kByHand, R::kChecked, "checkpoint loading only (no effect on memory or time)", "true"},
      {"zero_optimization.elastic_checkpoint", nullptr, "", T::kBool, A::kDropped, N::kNever,
       E::kByHand, R::kChecked, "checkpoint format only (no effect on memory or time)", "false"},
      {"zero_optimization.offload_param", nullptr, "zero.offload_param", T::kObject, A::kDropped,
       N::kNever, E::kByHand, R::kSpecial,
       "stage 3: keeps parameter partitions in CPU memory or on NVMe", "null (no offload)"},
      {"zero_optimization.offload_optimizer", nullptr, "zero.offload_optimizer", T::kObject,
       A::kDropped, N::kNever, E::kByHand, R::kSpecial,
       "keeps optimizer states in CPU memory (or NVMe at stage 3) and steps on the CPU",
       "null (no offload)"},
      {"zero_optimization.sub_group_size", nullptr, "zero.sub_group_size", T::kSize, A::kDropped,
       N::kBelowStage3, E::kStage3, R::kPlain,
       "stage 3: elements per optimizer sub-group, the unit of the step and of NVMe swapping", "",
       1, false, nullptr, AT_INT(zero.sub_group_size)},
      {"zero_optimization.cpu_offload_param", nullptr, "zero.offload_param.device", T::kBool,
       A::kDropped, N::kNever, E::kByHand, R::kSpecial,
       "deprecated: true = offload_param {\"device\": \"cpu\"}", "false"},
      {"zero_optimization.cpu_offload_use_pin_memory", nullptr, "", T::kBool, A::kDropped,
       N::kNever, E::kByHand, R::kSpecial, "deprecated and not applied by DeepSpeed", "false"},
      {"zero_optimization.cpu_offload", nullptr, "zero.offload_optimizer.device", T::kBool,
       A::kDropped, N::kNever, E::kByHand, R::kSpecial,
       "deprecated: true = offload_optimizer {\"device\": \"cpu\"}", "false"},
      {"zero_optimization.stage3_prefetch_bucket_size", "prefetch_bucket_size",
       "zero.stage3_prefetch_bucket_size", T::kSize, A::kHiddenSizeStage3, N::kBelowStage3,
       E::kStage3, R::kPlain,
       "stage 3: parameter elements gathered ahead of use; HF \"auto\" = int(0.9*h*h)", "", 0,
       false, PrefetchFromHidden, AT_INT(zero.stage3_prefetch_bucket_size)},
      {"zero_optimization.stage3_param_persistence_threshold", "param_persistence_threshold",
       "zero.stage3_param_persistence_threshold", T::kSize, A::kHiddenSizeStage3,
       N::kBelowStage3, E::kStage3, R::kPlain,
       "stage 3: parameters with fewer elements stay whole on every GPU; HF \"auto\" = 10*h", "",
       0, false, PersistenceFromHidden, AT_INT(zero.stage3_param_persistence_threshold)},
      {"zero_optimization.stage3_model_persistence_threshold", "model_persistence_threshold",
       "zero.stage3_model_persistence_threshold", T::kSize, A::kDropped, N::kBelowStage3,
       E::kNotDefault, R::kPlain, "stage 3: cap on all persistent parameters' elements together",
       DS_INT(zero.stage3_model_persistence_threshold)},
      {"zero_optimization.stage3_max_live_parameters", "max_live_parameters",
       "zero.stage3_max_live_parameters", T::kSize, A::kDropped, N::kBelowStage3, E::kStage3,
       R::kPlain, "stage 3: most gathered parameter elements on the GPU before they are released",
       DS_INT(zero.stage3_max_live_parameters)},
      {"zero_optimization.stage3_max_reuse_distance", "max_reuse_distance",
       "zero.stage3_max_reuse_distance", T::kSize, A::kDropped, N::kBelowStage3, E::kStage3,
       R::kPlain, "stage 3: a parameter used again within this many elements stays gathered",
       DS_INT(zero.stage3_max_reuse_distance)},
      {"zero_optimization.stage3_gather_16bit_weights_on_model_save",
       "gather_16bit_weights_on_model_save", "zero.gather_16bit_weights_on_model_save", T::kBool,
       A::kDropped, N::kBelowStage3, E::kStage3, R::kPlain,
       "stage 3: gathers the full 16-bit weights when saving (no effect on the step)",
       DS_BOOL(zero.gather_16bit_weights_on_model_save)},
      {"zero_optimization.stage3_module_granularity_threshold", "module_granularity_threshold", "",
       T::kInt, A::kDropped, N::kBelowStage3, E::kByHand, R::kSpecial,
       "stage 3: groups small modules for fetching (> 0 not modelled: a warning)", "0"},
      {"zero_optimization.stage3_use_all_reduce_for_fetch_params",
       "use_all_reduce_for_fetch_params", "", T::kBool, A::kDropped, N::kBelowStage3, E::kByHand,
       R::kSpecial, "stage 3: fetches parameters with all-reduce (modelled as all-gather: a "
       "warning)", "false"},
      {"zero_optimization.stage3_gather_fp16_weights_on_model_save", nullptr,
       "zero.gather_16bit_weights_on_model_save", T::kBool, A::kDropped, N::kNever, E::kByHand,
       R::kSpecial, "deprecated name of stage3_gather_16bit_weights_on_model_save", "false"},
      {"zero_optimization.ignore_unused_parameters", nullptr, "", T::kBool, A::kDropped, N::kNever,
       E::kByHand, R::kChecked, "stage 3 tolerates parameters without gradients (no effect on "
       "memory or time)", "true"},
      {"zero_optimization.legacy_stage1", nullptr, "", T::kBool, A::kDropped, N::kNever,
       E::kByHand, R::kSpecial, "removed in DeepSpeed 0.5.9: true is an error", "false"},
      {"zero_optimization.round_robin_gradients", nullptr, "zero.round_robin_gradients", T::kBool,
       A::kDropped, N::kStage0, E::kNotDefault, R::kPlain,
       "stages 1-2 with CPU offload: spreads gradient copies over the ranks", "", -1, false,
       nullptr, AT_BOOL(zero.round_robin_gradients)},
      {"zero_optimization.zero_hpz_partition_size", nullptr, "", T::kSize, A::kDropped, N::kNever,
       E::kByHand, R::kSpecial, "ZeRO++ hierarchical partitioning (> 1 not modelled, Unsupported)",
       "1"},
      {"zero_optimization.zero_quantized_weights", nullptr, "", T::kBool, A::kDropped, N::kNever,
       E::kByHand, R::kSpecial, "ZeRO++ quantized weights (true not modelled, Unsupported)",
       "false"},
      {"zero_optimization.zero_quantized_nontrainable_weights", nullptr, "", T::kBool,
       A::kDropped, N::kNever, E::kByHand, R::kSpecial,
       "ZeRO++ quantized frozen weights (true not modelled, Unsupported)", "false"},
      {"zero_optimization.zero_quantized_gradients", nullptr, "", T::kBool, A::kDropped,
       N::kNever, E::kByHand, R::kSpecial,
       "ZeRO++ quantized gradients (true not modelled, Unsupported)", "false"},
      {"zero_optimization.zeropp_loco_param", nullptr, "", T::kAny, A::kDropped, N::kNever,
       E::kByHand, R::kSpecial, "ZeRO++ LoCo (anything but null not modelled, Unsupported)",
       "null"},
      {"zero_optimization.mics_shard_size", nullptr, "", T::kInt, A::kDropped, N::kNever,
       E::kByHand, R::kSpecial, "MiCS shard size (> 0 not modelled, Unsupported)", "-1"},
      {"zero_optimization.mics_hierarchical_params_gather", nullptr, "", T::kBool, A::kDropped,
       N::kNever, E::kByHand, R::kChecked, "MiCS only (no effect without it)", "false"},
      {"zero_optimization.memory_efficient_linear", nullptr, "", T::kBool, A::kDropped, N::kNever,
       E::kByHand, R::kChecked, "stage 3's linear autograd function (not modelled)", "true"},
      {"zero_optimization.pipeline_loading_checkpoint", nullptr, "", T::kBool, A::kDropped,
       N::kNever, E::kByHand, R::kChecked, "pipeline-parallel checkpoint loading (no effect here)",
       "false"},
      {"zero_optimization.override_module_apply", nullptr, "", T::kBool, A::kDropped, N::kNever,
       E::kByHand, R::kChecked, "stage 3 hook on module.apply (no effect on the step)", "true"},
      {"zero_optimization.log_trace_cache_warnings", nullptr, "", T::kBool, A::kDropped,
       N::kNever, E::kByHand, R::kChecked, "logging only", "false"},
      // --- zero_optimization.offload_optimizer (DeepSpeedZeroOffloadOptimizerConfig) ------------
      {"zero_optimization.offload_optimizer.device", nullptr, "zero.offload_optimizer.device",
       T::kDevice, A::kDropped, N::kNever, E::kByHand, R::kSpecial,
       "where the states live and the step runs; \"nvme\" below stage 3 acts as \"cpu\"",
       "\"none\""},
      {"zero_optimization.offload_optimizer.nvme_path", nullptr,
       "zero.offload_optimizer.nvme_path", T::kString, A::kDropped, N::kWithoutNvme, E::kByHand,
       R::kSpecial, "folder of the swap files (required for NVMe)", "none"},
      {"zero_optimization.offload_optimizer.buffer_count", nullptr,
       "zero.offload_optimizer.buffer_count", T::kSize, A::kDropped, N::kWithoutNvme, E::kByHand,
       R::kPlain, "pinned swap buffers for NVMe", DS_INT(zero.offload_optimizer.buffer_count)},
      {"zero_optimization.offload_optimizer.pin_memory", nullptr,
       "zero.offload_optimizer.pin_memory", T::kBool, A::kDropped, N::kDeviceNone, E::kByHand,
       R::kPlain, "pinned host buffers (faster copies, page-locked RAM)", "", -1, false, nullptr,
       AT_BOOL(zero.offload_optimizer.pin_memory)},
      {"zero_optimization.offload_optimizer.pipeline_read", nullptr,
       "zero.offload_optimizer.pipeline_read", T::kBool, A::kDropped, N::kWithoutNvme, E::kByHand,
       R::kPlain, "overlaps NVMe reads with the step", DS_BOOL(zero.offload_optimizer.pipeline_read)},
      {"zero_optimization.offload_optimizer.pipeline_write", nullptr,
       "zero.offload_optimizer.pipeline_write", T::kBool, A::kDropped, N::kWithoutNvme,
       E::kByHand, R::kPlain, "overlaps NVMe writes with the step",
       DS_BOOL(zero.offload_optimizer.pipeline_write)},
      {"zero_optimization.offload_optimizer.fast_init", nullptr,
       "zero.offload_optimizer.fast_init", T::kBool, A::kDropped, N::kWithoutNvme, E::kByHand,
       R::kPlain, "faster swap-file initialization", DS_BOOL(zero.offload_optimizer.fast_init)},
      {"zero_optimization.offload_optimizer.ratio", nullptr, "zero.offload_optimizer.ratio",
       T::kFraction, A::kDropped, N::kDeviceNone, E::kByHand, R::kPlain,
       "stage 3: fraction of sub-groups offloaded (< 1 only at stage 3)",
       DS_DOUBLE(zero.offload_optimizer.ratio)},
      // --- zero_optimization.offload_param (DeepSpeedZeroOffloadParamConfig) --------------------
      {"zero_optimization.offload_param.device", nullptr, "zero.offload_param.device", T::kDevice,
       A::kDropped, N::kNever, E::kByHand, R::kSpecial,
       "where parameter partitions live (stage 3 only)", "\"none\""},
      {"zero_optimization.offload_param.nvme_path", nullptr, "zero.offload_param.nvme_path",
       T::kString, A::kDropped, N::kWithoutNvme, E::kByHand, R::kSpecial,
       "folder of the swap files (required for NVMe)", "none"},
      {"zero_optimization.offload_param.buffer_count", nullptr, "zero.offload_param.buffer_count",
       T::kSize, A::kDropped, N::kWithoutNvme, E::kByHand, R::kPlain,
       "pinned parameter swap buffers", DS_INT(zero.offload_param.buffer_count)},
      {"zero_optimization.offload_param.buffer_size", nullptr, "zero.offload_param.buffer_size",
       T::kSize, A::kDropped, N::kWithoutNvme, E::kByHand, R::kPlain,
       "elements per swap buffer; must exceed the largest swappable partition",
       DS_INT(zero.offload_param.buffer_size)},
      {"zero_optimization.offload_param.max_in_cpu", nullptr, "zero.offload_param.max_in_cpu",
       T::kSize, A::kDropped, N::kWithoutNvme, E::kByHand, R::kPlain,
       "parameter elements kept in CPU memory with NVMe offload",
       DS_INT(zero.offload_param.max_in_cpu)},
      {"zero_optimization.offload_param.pin_memory", nullptr, "zero.offload_param.pin_memory",
       T::kBool, A::kDropped, N::kDeviceNone, E::kByHand, R::kPlain,
       "pinned host buffers for the partitions created at init", "", -1, false, nullptr,
       AT_BOOL(zero.offload_param.pin_memory)},
      // --- aio (read by key; unknown keys ignored) -----------------------------------------------
      {"aio.block_size", nullptr, "aio.block_size", T::kSize, A::kRejected, N::kNever, E::kByHand,
       R::kPlain, "bytes per NVMe request", DS_INT(aio.block_size)},
      {"aio.queue_depth", nullptr, "aio.queue_depth", T::kSize, A::kRejected, N::kNever,
       E::kByHand, R::kPlain, "NVMe requests in flight", DS_INT(aio.queue_depth)},
      {"aio.intra_op_parallelism", nullptr, "aio.intra_op_parallelism", T::kSize, A::kRejected,
       N::kNever, E::kByHand, R::kSpecial, "I/O threads per request (DeepSpeed >= 0.16.4)",
       DS_INT(aio.intra_op_parallelism)},
      {"aio.thread_count", nullptr, "aio.intra_op_parallelism", T::kSize, A::kRejected, N::kNever,
       E::kByHand, R::kSpecial, "I/O threads (DeepSpeed < 0.16.4; later ones ignore it)", "1", 0,
       true},
      {"aio.single_submit", nullptr, "aio.single_submit", T::kBool, A::kRejected, N::kNever,
       E::kByHand, R::kPlain, "submits requests one at a time", DS_BOOL(aio.single_submit)},
      {"aio.overlap_events", nullptr, "aio.overlap_events", T::kBool, A::kRejected, N::kNever,
       E::kByHand, R::kPlain, "overlaps submission and completion", DS_BOOL(aio.overlap_events)},
      {"aio.use_gds", nullptr, "aio.use_gds", T::kBool, A::kRejected, N::kNever, E::kByHand,
       R::kPlain, "GPUDirect Storage", DS_BOOL(aio.use_gds)},
      // --- activation_checkpointing (read by key; unknown keys ignored) --------------------------
      {"activation_checkpointing.partition_activations", nullptr,
       "activation_checkpointing.partition_activations", T::kBool, A::kRejected, N::kNever,
       E::kByHand, R::kPlain, "splits each checkpoint over the model-parallel ranks",
       DS_BOOL(activation_checkpointing.partition_activations)},
      {"activation_checkpointing.cpu_checkpointing", nullptr,
       "activation_checkpointing.cpu_checkpointing", T::kBool, A::kRejected, N::kNever,
       E::kByHand, R::kPlain, "keeps deepspeed.checkpointing's checkpoints in host memory",
       DS_BOOL(activation_checkpointing.cpu_checkpointing)},
      {"activation_checkpointing.contiguous_memory_optimization", nullptr,
       "activation_checkpointing.contiguous_memory_optimization", T::kBool, A::kRejected,
       N::kNever, E::kByHand, R::kPlain, "copies checkpoints into one buffer",
       DS_BOOL(activation_checkpointing.contiguous_memory_optimization)},
      {"activation_checkpointing.number_checkpoints", nullptr,
       "activation_checkpointing.number_checkpoints", T::kSize, A::kRejected, N::kNever,
       E::kByHand, R::kSpecial, "checkpoints per step, for the contiguous buffer", "null"},
      {"activation_checkpointing.synchronize_checkpoint_boundary", nullptr,
       "activation_checkpointing.synchronize_checkpoint_boundary", T::kBool, A::kRejected,
       N::kNever, E::kByHand, R::kPlain, "synchronizes the device at each checkpoint",
       DS_BOOL(activation_checkpointing.synchronize_checkpoint_boundary)},
      {"activation_checkpointing.profile", nullptr, "activation_checkpointing.profile", T::kBool,
       A::kRejected, N::kNever, E::kByHand, R::kPlain, "times the checkpoint function",
       DS_BOOL(activation_checkpointing.profile)},
      // --- dsplan's own block (DeepSpeed ignores it) ---------------------------------------------
      {"dsplan.gradient_checkpointing", nullptr, "gradient_checkpointing", T::kBool, A::kRejected,
       N::kNever, E::kByHand, R::kSpecial,
       "ignored by DeepSpeed; tells dsplan the script checkpoints its blocks",
       DS_BOOL(gradient_checkpointing)},
      {"dsplan.linear_tiles", nullptr, "linear_tiles", T::kSize, A::kRejected, N::kNever,
       E::kByHand, R::kSpecial,
       "ignored by DeepSpeed; tells dsplan the model tiles its Linears (TiledLinear)",
       DS_INT(linear_tiles)},
  };
}

#undef DS_BOOL
#undef DS_INT
#undef DS_DOUBLE
#undef AT_BOOL
#undef AT_INT

// A default value as the doc writes it: 5e8 rather than 500000000, sys.maxsize for INT64_MAX.
std::string IntText(int64_t v) {
  if (v == std::numeric_limits<int64_t>::max()) return "sys.maxsize";
  if (v >= 100'000) {
    int64_t m = v;
    int e = 0;
    while (m % 10 == 0) {
      m /= 10;
      ++e;
    }
    if (m < 10) return fmt::format("{}e{}", m, e);
  }
  return std::to_string(v);
}

}  // namespace

const char* DsKeyTypeName(DsKeyType t) {
  switch (t) {
    case T::kBool: return "bool";
    case T::kSize: return "integer >= 0";
    case T::kInt: return "integer";
    case T::kNumber: return "number";
    case T::kFraction: return "number in [0, 1]";
    case T::kString: return "string";
    case T::kDevice: return "\"none\" / \"cpu\" / \"nvme\"";
    case T::kDtype: return "\"fp32\" / \"fp16\" / \"bf16\"";
    case T::kObject: return "object";
    case T::kBatch: return "integer > 0";
    case T::kAny: return "any";
  }
  return "?";
}

const char* DsKeyAutoText(DsKeyAuto a) {
  switch (a) {
    case A::kDropped: return "dropped: DeepSpeed's default (warning)";
    case A::kHiddenSize: return "Trainer: from hidden_size";
    case A::kHiddenSizeStage3: return "Trainer at stage 3: from hidden_size";
    case A::kTrainer: return "Trainer: from its arguments";
    case A::kRejected: return "not allowed";
  }
  return "?";
}

std::string_view DsConfigKey::Leaf() const {
  std::string_view n(name);
  const size_t dot = n.rfind('.');
  return dot == std::string_view::npos ? n : n.substr(dot + 1);
}

bool DsConfigKey::In(std::string_view section) const {
  std::string_view n(name);
  return n.size() > section.size() + 1 && n.substr(0, section.size()) == section &&
         n[section.size()] == '.' && n.substr(section.size() + 1).find('.') == std::string_view::npos;
}

std::string DsConfigKey::DefaultText() const {
  Plan d;  // DeepSpeed's defaults live in the config structs' initializers
  if (bool_ref) return *bool_ref(d) ? "true" : "false";
  if (int_ref) return IntText(*int_ref(d));
  if (double_ref) return fmt::format("{}", *double_ref(d));
  return default_text;
}

const std::vector<DsConfigKey>& DsConfigKeys() {
  static const std::vector<DsConfigKey> table = MakeTable();
  return table;
}

std::vector<const DsConfigKey*> DsConfigKeysIn(std::string_view section) {
  std::vector<const DsConfigKey*> out;
  for (const DsConfigKey& k : DsConfigKeys()) {
    if (k.In(section)) out.push_back(&k);
  }
  return out;
}

const DsConfigKey* FindDsConfigKey(std::string_view dotted) {
  for (const DsConfigKey& k : DsConfigKeys()) {
    if (dotted == k.name) return &k;
    if (k.alias != nullptr) {
      const std::string_view n(k.name);
      const std::string_view section = n.substr(0, n.rfind('.') + 1);
      if (dotted.size() == section.size() + std::string_view(k.alias).size() &&
          dotted.substr(0, section.size()) == section && dotted.substr(section.size()) == k.alias) {
        return &k;
      }
    }
  }
  return nullptr;
}

std::string DsConfigKeyTableMarkdown() {
  std::string out =
      "| key | Plan member | value | \"auto\" | DeepSpeed's default | what DeepSpeed does |\n"
      "|---|---|---|---|---|---|\n";
  for (const DsConfigKey& k : DsConfigKeys()) {
    std::string key = fmt::format("`{}`", k.name);
    if (k.alias != nullptr) key += fmt::format(" (alias `{}`)", k.alias);
    const std::string member = std::string_view(k.member).empty() ? "—" : fmt::format("`{}`", k.member);
    const std::string dflt = k.DefaultText();
    out += fmt::format("| {} | {} | {} | {} | {} | {} |\n", key, member, DsKeyTypeName(k.type),
                       DsKeyAutoText(k.on_auto), dflt.empty() ? "—" : dflt, k.effect);
  }
  return out;
}

}  // namespace dsplan
