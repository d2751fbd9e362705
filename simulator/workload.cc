#include "simulator/workload.h"

#include <initializer_list>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "simulator/families/families.h"
#include "simulator/tracer.h"

namespace dsplan {

int64_t DTypeBytes(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kBF16: return 2;
    case DType::kF16: return 2;
    case DType::kI64: return 8;
    case DType::kBool: return 1;
  }
  return 0;
}

const char* DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "fp32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "fp16";
    case DType::kI64: return "int64";
    case DType::kBool: return "bool";
  }
  return "?";
}

bool FamilySupportsSdpa(Family f) {
  switch (f) {
    case Family::kGptJ:   // eager or flash_attention_2 only
    case Family::kBloom:  // eager only
      return false;
    default:
      return true;
  }
}

const char* TensorCategoryName(TensorCategory c) {
  switch (c) {
    case TensorCategory::kParameter: return "parameter";
    case TensorCategory::kActivation: return "activation";
    case TensorCategory::kOutput: return "output";
  }
  return "?";
}

const char* OpKindName(OpKind k) {
  switch (k) {
    case OpKind::kGemm: return "gemm";
    case OpKind::kBatchedGemm: return "batched_gemm";
    case OpKind::kAttention: return "attention";
    case OpKind::kNorm: return "norm";
    case OpKind::kActivation: return "activation";
    case OpKind::kDropout: return "dropout";
    case OpKind::kElementwise: return "elementwise";
    case OpKind::kEmbedding: return "embedding";
    case OpKind::kSoftmax: return "softmax";
    case OpKind::kLoss: return "loss";
  }
  return "?";
}

const char* KernelClassName(KernelClass c) {
  switch (c) {
    case KernelClass::kStream: return "stream";
    case KernelClass::kCastUp: return "cast_up";
    case KernelClass::kCastDown: return "cast_down";
    case KernelClass::kReduce: return "reduce";
    case KernelClass::kNorm: return "norm";
    case KernelClass::kActivation: return "activation";
    case KernelClass::kDropout: return "dropout";
    case KernelClass::kSoftmax: return "softmax";
    case KernelClass::kLogSoftmax: return "log_softmax";
    case KernelClass::kPermuteCopy: return "permute_copy";
    case KernelClass::kStridedMul: return "strided_mul";
    case KernelClass::kRotateHalf: return "rotate_half";
    case KernelClass::kCatStrided: return "cat_strided";
    case KernelClass::kBroadcast: return "broadcast";
    case KernelClass::kMixedLayout: return "mixed_layout";
  }
  return "?";
}

const char* LayerKindName(LayerKind k) {
  switch (k) {
    case LayerKind::kEmbedding: return "embedding";
    case LayerKind::kEncoderBlock: return "encoder_block";
    case LayerKind::kDecoderBlock: return "decoder_block";
    case LayerKind::kFinalNorm: return "final_norm";
    case LayerKind::kHead: return "head";
    case LayerKind::kLoss: return "loss";
  }
  return "?";
}

Status CheckRunShape(const ModelSpec& spec, const RunShape& shape) {
  if (shape.micro_batch <= 0) {
    return Status::InvalidArgument(fmt::format(
        "micro-batch must be a positive integer, got {}", shape.micro_batch));
  }
  if (shape.seq_len <= 0) {
    return Status::InvalidArgument(
        fmt::format("sequence length must be a positive integer, got {}", shape.seq_len));
  }
  if (shape.target_len < 0) {
    return Status::InvalidArgument(
        fmt::format("target length must be a positive integer, got {}", shape.target_len));
  }
  if (shape.target_len > 0 && !spec.encoder_decoder()) {
    return Status::InvalidArgument(fmt::format(
        "--target-len applies to encoder-decoder models (t5); {} is decoder-only or encoder-only",
        spec.name));
  }
  const bool learned_positions = spec.family == Family::kGpt2 || spec.family == Family::kOpt ||
                                 spec.family == Family::kBert;
  if (learned_positions && shape.seq_len > spec.max_positions) {
    return Status::InvalidArgument(fmt::format(
        "sequence length {} exceeds {}'s learned position table of {} positions "
        "(max_position_embeddings / n_positions)",
        shape.seq_len, spec.name, spec.max_positions));
  }
  if (shape.attention == AttentionImpl::kSdpa && !FamilySupportsSdpa(spec.family)) {
    return Status::Unsupported(fmt::format(
        "transformers' {} has no SDPA attention path; use --attention eager (or auto)",
        ModelClassName(spec.family)));
  }
  return Status();
}

namespace {

// Traces |spec| for |shape| (checked) and returns the workloads for each checkpointing setting
// in |settings|: one trace serves both (checkpointing changes what stays alive, not the ops).
Result<std::vector<Workload>> Trace(const ModelSpec& spec, const RunShape& shape,
                                    std::initializer_list<bool> settings) {
  DSPLAN_RETURN_IF_ERROR(CheckRunShape(spec, shape));
  AttentionImpl attention = shape.attention;
  if (attention == AttentionImpl::kAuto) {
    attention = FamilySupportsSdpa(spec.family) ? AttentionImpl::kSdpa : AttentionImpl::kEager;
  }
  Tracer tr(spec, shape, attention);
  switch (spec.family) {
    case Family::kT5: TraceT5(tr); break;
    case Family::kBert: TraceBert(tr); break;
    default: TraceDecoderOnly(tr); break;
  }
  const int64_t tokens =
      shape.micro_batch *
      (shape.seq_len + (spec.encoder_decoder()
                            ? (shape.target_len > 0 ? shape.target_len : shape.seq_len)
                            : 0));
  std::vector<Workload> out;
  out.reserve(settings.size());
  size_t left = settings.size();
  for (bool gc : settings) {
    // The last workload takes the trace's tables; earlier ones copy them.
    DSPLAN_ASSIGN_OR_RETURN(Workload w, --left == 0 ? tr.FinishAndConsume(gc) : tr.Finish(gc));
    w.tokens = tokens;
    out.push_back(std::move(w));
  }
  return out;
}

}  // namespace

Result<Workload> BuildWorkload(const ModelSpec& spec, const RunShape& shape) {
  DSPLAN_ASSIGN_OR_RETURN(std::vector<Workload> w,
                          Trace(spec, shape, {shape.gradient_checkpointing}));
  return std::move(w.front());
}

Result<std::pair<Workload, Workload>> BuildWorkloadsWithAndWithoutCheckpointing(
    const ModelSpec& spec, const RunShape& shape) {
  DSPLAN_ASSIGN_OR_RETURN(std::vector<Workload> w, Trace(spec, shape, {false, true}));
  return std::make_pair(std::move(w[0]), std::move(w[1]));
}

void ResolveRunLengths(const ModelSpec& spec, std::optional<int64_t> seq_len,
                       std::optional<int64_t> target_len, RunShape* shape) {
  if (seq_len) {
    shape->seq_len = *seq_len;
  } else if (spec.family == Family::kT5 || spec.family == Family::kBert) {
    shape->seq_len = 512;
  } else {
    shape->seq_len = 1024;
    if (spec.max_positions > 0 && spec.max_positions < shape->seq_len &&
        (spec.family == Family::kGpt2 || spec.family == Family::kOpt)) {
      shape->seq_len = spec.max_positions;
    }
  }
  shape->target_len = target_len ? *target_len : (spec.encoder_decoder() ? 128 : 0);
}

Result<int64_t> CountParameters(const ModelSpec& spec) {
  RunShape o;
  o.micro_batch = 1;
  o.seq_len = 1;
  DSPLAN_ASSIGN_OR_RETURN(Workload w, BuildWorkload(spec, o));
  return w.params;
}

}  // namespace dsplan
