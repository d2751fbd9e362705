#include "core/plan.h"

#include <fmt/format.h>

#include "core/checked_math.h"
#include "core/text.h"

namespace dsplan {

const char* PrecisionName(Precision p) {
  switch (p) {
    case Precision::kBf16: return "bf16";
    case Precision::kFp16: return "fp16";
    case Precision::kFp32: return "fp32";
  }
  return "?";
}

Result<Precision> ParsePrecision(const std::string& s) {
  if (s == "bf16") return Precision::kBf16;
  if (s == "fp16") return Precision::kFp16;
  if (s == "fp32") return Precision::kFp32;
  return Status::InvalidArgument(
      fmt::format("precision {} is not known; use bf16, fp16 or fp32", Quote(s)));
}

const char* AttentionImplName(AttentionImpl a) {
  switch (a) {
    case AttentionImpl::kAuto: return "auto";
    case AttentionImpl::kEager: return "eager";
    case AttentionImpl::kSdpa: return "sdpa";
  }
  return "?";
}

Result<AttentionImpl> ParseAttentionImpl(const std::string& s) {
  if (s == "auto") return AttentionImpl::kAuto;
  if (s == "eager") return AttentionImpl::kEager;
  if (s == "sdpa") return AttentionImpl::kSdpa;
  // transformers' attn_implementation="flash_attention_2": a fused flash kernel that saves the
  // same tensors for backward as SDPA's flash backend (q, k, v, output, log-sum-exp), so it is
  // modeled as sdpa (docs/activations.md).
  if (s == "flash_attention_2") return AttentionImpl::kSdpa;
  return Status::InvalidArgument(fmt::format(
      "attention implementation {} is not known; use eager, sdpa, flash_attention_2 "
      "(modeled as sdpa's flash kernel) or auto",
      Quote(s)));
}

int64_t PrecisionBytes(Precision p) { return p == Precision::kFp32 ? 4 : 2; }

const char* OffloadDeviceName(OffloadDevice d) {
  switch (d) {
    case OffloadDevice::kNone: return "none";
    case OffloadDevice::kCpu: return "cpu";
    case OffloadDevice::kNvme: return "nvme";
  }
  return "?";
}

const char* OptimizerTypeName(OptimizerType t) {
  switch (t) {
    case OptimizerType::kAdamW: return "AdamW";
    case OptimizerType::kAdam: return "Adam";
    case OptimizerType::kAdagrad: return "Adagrad";
    case OptimizerType::kSgd: return "SGD";
    case OptimizerType::kLamb: return "Lamb";
  }
  return "?";
}

int OptimizerStatesPerElement(OptimizerType t, bool sgd_momentum) {
  switch (t) {
    case OptimizerType::kAdamW:
    case OptimizerType::kAdam:
    case OptimizerType::kLamb: return 2;
    case OptimizerType::kAdagrad: return 1;
    case OptimizerType::kSgd: return sgd_momentum ? 1 : 0;
  }
  return 2;
}

const char* OptimizerWrapperName(OptimizerWrapper w) {
  switch (w) {
    case OptimizerWrapper::kFp16Optimizer: return "FP16_Optimizer";
    case OptimizerWrapper::kBf16Optimizer: return "BF16_Optimizer";
    case OptimizerWrapper::kBasic: return "basic optimizer";
    case OptimizerWrapper::kZero12: return "DeepSpeedZeroOptimizer";
    case OptimizerWrapper::kZero3: return "DeepSpeedZeroOptimizer_Stage3";
  }
  return "?";
}

Precision Plan::GradAccumDtype() const {
  if (grad_accum_dtype) return *grad_accum_dtype;
  // engine.get_data_types(): fp32 accumulation only for a bf16 model without ZeRO.
  if (precision == Precision::kBf16 && zero.stage == 0) return Precision::kFp32;
  return precision;
}

OptimizerWrapper Plan::Wrapper() const {
  const Precision accum = GradAccumDtype();
  if (zero.stage == 0) {
    switch (precision) {
      case Precision::kFp16: return OptimizerWrapper::kFp16Optimizer;
      case Precision::kBf16:
        return accum == Precision::kFp32 ? OptimizerWrapper::kBf16Optimizer
                                         : OptimizerWrapper::kBasic;
      case Precision::kFp32: return OptimizerWrapper::kBasic;
    }
  }
  if (zero.stage == 1 && precision == Precision::kBf16 && accum == Precision::kFp32 &&
      !OffloadsOptimizer()) {
    return OptimizerWrapper::kBf16Optimizer;
  }
  return zero.stage == 3 ? OptimizerWrapper::kZero3 : OptimizerWrapper::kZero12;
}

Status ValidatePlan(const Plan& p) {
  if (p.nodes < 1 || p.gpus_per_node < 1) {
    return Status::InvalidArgument(fmt::format(
        "the cluster must have at least one node and one GPU per node (got {} x {})", p.nodes,
        p.gpus_per_node));
  }
  if (p.micro_batch < 1) {
    return Status::InvalidArgument(fmt::format(
        "train_micro_batch_size_per_gpu must be a positive integer, got {}", p.micro_batch));
  }
  if (p.grad_accum < 1 || p.grad_accum > kMaxGradAccum) {
    return Status::InvalidArgument(fmt::format(
        "gradient_accumulation_steps must be an integer from 1 to {}, got {}", kMaxGradAccum,
        p.grad_accum));
  }
  if (!CheckedProduct({p.micro_batch, p.grad_accum, int64_t{p.nodes}, int64_t{p.gpus_per_node}})) {
    return Status::InvalidArgument(fmt::format(
        "train_batch_size (micro-batch {} x gradient_accumulation_steps {} x {} GPUs) is too "
        "large to count",
        p.micro_batch, p.grad_accum, int64_t{p.nodes} * p.gpus_per_node));
  }
  if (p.zero.stage < 0 || p.zero.stage > 3) {
    return Status::InvalidArgument(fmt::format(
        "zero_optimization.stage must be 0, 1, 2 or 3, got {}", p.zero.stage));
  }
  const ZeroConfig& z = p.zero;
  if (z.reduce_bucket_size < 0) {
    return Status::InvalidArgument(fmt::format(
        "zero_optimization.reduce_bucket_size must be >= 0, got {}", z.reduce_bucket_size));
  }
  if (z.allgather_bucket_size < 0) {
    return Status::InvalidArgument(fmt::format(
        "zero_optimization.allgather_bucket_size must be >= 0, got {}", z.allgather_bucket_size));
  }
  if (z.sub_group_size <= 0) {
    return Status::InvalidArgument(fmt::format(
        "zero_optimization.sub_group_size must be positive, got {}", z.sub_group_size));
  }
  for (auto [key, v] : {std::pair{"stage3_prefetch_bucket_size", z.stage3_prefetch_bucket_size},
                        {"stage3_param_persistence_threshold", z.stage3_param_persistence_threshold},
                        {"stage3_max_live_parameters", z.stage3_max_live_parameters},
                        {"stage3_max_reuse_distance", z.stage3_max_reuse_distance}}) {
    if (v < 0) {
      return Status::InvalidArgument(
          fmt::format("zero_optimization.{} must be >= 0, got {}", key, v));
    }
  }
  if (p.OffloadsParams() && z.stage != 3) {
    return Status::InvalidArgument(fmt::format(
        "zero_optimization.offload_param needs ZeRO stage 3 (the config has stage {}); remove "
        "offload_param or set \"stage\": 3",
        z.stage));
  }
  if (p.OffloadsOptimizer() && z.stage == 0) {
    return Status::InvalidArgument(
        "zero_optimization.offload_optimizer needs ZeRO stage 1, 2 or 3 (the config has stage 0)");
  }
  if (z.offload_optimizer.ratio <= 0 || z.offload_optimizer.ratio > 1) {
    return Status::InvalidArgument(fmt::format(
        "zero_optimization.offload_optimizer.ratio must be in (0, 1], got {}",
        z.offload_optimizer.ratio));
  }
  if (z.offload_optimizer.ratio < 1 && z.stage != 3) {
    return Status::InvalidArgument(
        "zero_optimization.offload_optimizer.ratio < 1 (partial offload) needs ZeRO stage 3");
  }
  if (z.offload_optimizer.device == OffloadDevice::kNvme && z.offload_optimizer.nvme_path.empty()) {
    return Status::InvalidArgument(
        "zero_optimization.offload_optimizer.device is \"nvme\" but nvme_path is not set; give "
        "the directory of a local NVMe drive");
  }
  if (z.offload_param.device == OffloadDevice::kNvme && z.offload_param.nvme_path.empty()) {
    return Status::InvalidArgument(
        "zero_optimization.offload_param.device is \"nvme\" but nvme_path is not set; give the "
        "directory of a local NVMe drive");
  }
  if (z.offload_optimizer.buffer_count < 1 || z.offload_param.buffer_count < 1) {
    return Status::InvalidArgument("offload buffer_count must be a positive integer");
  }
  if (z.offload_param.buffer_size < 1) {
    return Status::InvalidArgument(fmt::format(
        "zero_optimization.offload_param.buffer_size must be positive, got {}",
        z.offload_param.buffer_size));
  }
  if (p.seq_len < 1) {
    return Status::InvalidArgument(fmt::format("sequence length must be positive, got {}", p.seq_len));
  }
  if (p.linear_tiles < 1 || p.linear_tiles > kMaxLinearTiles) {
    return Status::InvalidArgument(fmt::format(
        "the Linear tile count must be an integer from 1 to {}, got {}", kMaxLinearTiles,
        p.linear_tiles));
  }
  if (p.linear_tiles > 1 && z.stage != 3) {
    return Status::InvalidArgument(fmt::format(
        "memory-centric tiling ({} tiles) needs ZeRO stage 3: below it every rank holds the "
        "whole model and tiles save nothing (the config has stage {})",
        p.linear_tiles, z.stage));
  }
  const ActivationCheckpointingConfig& ac = p.activation_checkpointing;
  // deepspeed.checkpointing.configure (checkpointing.py) asserts both at start-up.
  if (ac.contiguous_memory_optimization && !ac.partition_activations) {
    return Status::InvalidArgument(
        "activation_checkpointing.contiguous_memory_optimization needs partition_activations: "
        "true; DeepSpeed asserts \"Contiguous Checkpointing is only available with partitioned "
        "activations\" (activation_checkpointing/checkpointing.py configure)");
  }
  if (ac.contiguous_memory_optimization && !ac.number_checkpoints) {
    return Status::InvalidArgument(
        "activation_checkpointing.contiguous_memory_optimization needs number_checkpoints (the "
        "checkpointed layers); DeepSpeed asserts \"Must specify the number of layers with "
        "contiguous memory checkpointing\"");
  }
  if (ac.number_checkpoints && *ac.number_checkpoints < 1) {
    return Status::InvalidArgument(fmt::format(
        "activation_checkpointing.number_checkpoints must be a positive integer, got {}",
        *ac.number_checkpoints));
  }
  return Status();
}

}  // namespace dsplan

namespace dsplan {
namespace {

// a x b for a message, without overflowing: a product past int64 is named as such.
std::string ProductText(int64_t a, int64_t b) {
  const std::optional<int64_t> p = CheckedProduct({a, b});
  return p ? std::to_string(*p) : "more than 2^63 - 1";
}

}  // namespace

Result<BatchTriple> ResolveBatch(int64_t ranks, std::optional<int64_t> micro_batch,
                                 std::optional<int64_t> grad_accum,
                                 std::optional<int64_t> global_batch) {
  BatchTriple t;
  if (global_batch) {
    if (*global_batch < 1 || *global_batch % ranks != 0) {
      return Status::InvalidArgument(fmt::format(
          "--global-batch {} must be a positive multiple of the {} GPUs (micro-batch x "
          "accumulation x GPUs)",
          *global_batch, ranks));
    }
    const int64_t per_gpu = *global_batch / ranks;
    if (micro_batch && *micro_batch > 0 && per_gpu % *micro_batch != 0) {
      return Status::InvalidArgument(fmt::format(
          "--global-batch {} is not divisible by --micro-batch {} x {} GPUs = {}: the global "
          "batch must be micro-batch x accumulation x GPUs",
          *global_batch, *micro_batch, ranks, ProductText(*micro_batch, ranks)));
    }
    if (grad_accum && *grad_accum > 0 && per_gpu % *grad_accum != 0) {
      return Status::InvalidArgument(fmt::format(
          "--global-batch {} is not divisible by --grad-accum {} x {} GPUs = {}: the global "
          "batch must be micro-batch x accumulation x GPUs",
          *global_batch, *grad_accum, ranks, ProductText(*grad_accum, ranks)));
    }
    if (micro_batch && grad_accum &&
        CheckedProduct({*micro_batch, *grad_accum, ranks}) != *global_batch) {
      return Status::InvalidArgument(fmt::format(
          "--global-batch {} != --micro-batch {} x --grad-accum {} x {} GPUs", *global_batch,
          *micro_batch, *grad_accum, ranks));
    }
  }
  if (micro_batch && *micro_batch < 1) {
    return Status::InvalidArgument("--micro-batch must be a positive integer");
  }
  if (grad_accum && (*grad_accum < 1 || *grad_accum > kMaxGradAccum)) {
    return Status::InvalidArgument(fmt::format(
        "--grad-accum must be an integer from 1 to {}, got {}", kMaxGradAccum, *grad_accum));
  }
  if (global_batch) {
    const int64_t per_gpu = *global_batch / ranks;
    if (micro_batch) {
      t.micro_batch = *micro_batch;
      t.grad_accum = per_gpu / *micro_batch;
    } else {
      t.grad_accum = grad_accum.value_or(1);
      t.micro_batch = per_gpu / t.grad_accum;
    }
    t.global_batch = *global_batch;
  } else {
    t.micro_batch = micro_batch.value_or(1);
    t.grad_accum = grad_accum.value_or(1);
    const std::optional<int64_t> global = CheckedProduct({t.micro_batch, t.grad_accum, ranks});
    if (!global) {
      return Status::InvalidArgument(fmt::format(
          "--micro-batch {} x --grad-accum {} x {} GPUs overflows a 64-bit count; use realistic "
          "batch sizes",
          t.micro_batch, t.grad_accum, ranks));
    }
    t.global_batch = *global;
  }
  return t;
}

}  // namespace dsplan
