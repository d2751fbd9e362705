#include "planner/check.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/units.h"

namespace dsplan {

int64_t LargestParamPartitionNumel(const Workload& w, const Plan& plan) {
  int64_t largest = 0;
  const int64_t tiles = plan.zero.stage == 3 ? std::max<int64_t>(1, plan.linear_tiles) : 1;
  for (const TensorSpec& t : w.tensors) {
    if (t.category != TensorCategory::kParameter) continue;
    int64_t numel = t.numel;
    // A TiledLinear's tiles are Linears of their own: out_features / T rows each.
    const bool block = t.layer >= 0 && t.layer < static_cast<int>(w.layers.size()) &&
                       (w.layers[t.layer].kind == LayerKind::kEncoderBlock ||
                        w.layers[t.layer].kind == LayerKind::kDecoderBlock);
    if (tiles > 1 && block && t.shape.size() == 2) numel = (t.numel + tiles - 1) / tiles;
    largest = std::max(largest, numel);
  }
  const int64_t n = std::max(1, plan.dp_size());
  return (largest + n - 1) / n;
}

std::string NvmeParamBufferError(const Workload& w, const Plan& plan) {
  const OffloadParamConfig& op = plan.zero.offload_param;
  if (plan.zero.stage != 3 || op.device != OffloadDevice::kNvme) return "";
  const int64_t part = LargestParamPartitionNumel(w, plan);
  const int64_t elem = PrecisionBytes(plan.precision);
  constexpr int64_t kMinAioBytes = int64_t{1} << 20;  // swap_tensor/utils.py MIN_AIO_BYTES
  if (part * elem < kMinAioBytes) return "";
  if (part < op.buffer_size) return "";
  return fmt::format(
      "offload_param.buffer_size {:.3g} elements is not larger than the largest parameter "
      "partition ({} elements: the largest tensor over {} rank(s)); DeepSpeed stops at start-up "
      "(partitioned_param_swapper.py get_buffer: \"More elements ... than buffer size\", "
      "DeepSpeed issue 3506); set buffer_size to at least {}",
      static_cast<double>(op.buffer_size), part, plan.dp_size(), part + 1);
}

int64_t NvmeParamBufferSize(const Workload& w, const Plan& plan) {
  const int64_t kDefault = OffloadParamConfig{}.buffer_size;  // DeepSpeed's default
  const int64_t part = LargestParamPartitionNumel(w, plan);
  if (part < kDefault) return kDefault;
  // A round number above the partition: the next multiple of 1e7.
  return (part / 10'000'000 + 1) * 10'000'000;
}

int64_t ProposedLinearTiles(const Workload& w, Precision precision, double gpu_memory_bytes) {
  int64_t block = 0;
  for (const Layer& l : w.layers) {
    if (l.kind == LayerKind::kEncoderBlock || l.kind == LayerKind::kDecoderBlock) {
      block = std::max(block, l.params);
    }
  }
  const double bytes = static_cast<double>(block) * static_cast<double>(PrecisionBytes(precision));
  const double budget = gpu_memory_bytes / 16;
  if (!(budget > 0) || bytes <= budget) return 1;
  int64_t t = 1;
  while (t < kMaxLinearTiles && bytes / static_cast<double>(t) > budget) t *= 2;
  return t;
}

std::vector<std::string> ModelCodeChanges(const Plan& plan) {
  std::vector<std::string> out;
  if (plan.linear_tiles > 1 && plan.zero.stage == 3) {
    out.push_back(fmt::format(
        "memory-centric tiling: in every transformer block replace each torch.nn.Linear(in, out, "
        "bias=b) by deepspeed.zero.TiledLinear(in, out, bias=b, out_splits={}, "
        "init_linear=<the Linear it replaces>) (runtime/zero/tiling.py), before "
        "deepspeed.initialize; TiledLinear keeps the Linear's inputs and outputs, and ZeRO-3 then "
        "gathers, runs and releases one tile at a time",
        plan.linear_tiles));
  }
  if (plan.CheckpointsOnHost()) {
    out.push_back(
        "activation checkpoints in host memory: after deepspeed.initialize call "
        "deepspeed.checkpointing.configure(None, deepspeed_config=<the ds_config>) and run every "
        "block through deepspeed.checkpointing.checkpoint(block, hidden_states, ...); do NOT call "
        "model.gradient_checkpointing_enable(): transformers checkpoints with "
        "torch.utils.checkpoint, which ignores the activation_checkpointing block and keeps the "
        "checkpoints on the GPU");
  } else if (plan.gradient_checkpointing) {
    out.push_back(
        "activation checkpointing: call model.gradient_checkpointing_enable() before "
        "deepspeed.initialize (the HF launch line passes --gradient_checkpointing)");
  }
  return out;
}

KeptOutput KeptOutputBytes(const Workload& w, const Plan& plan) {
  const ModelSpec& s = w.spec;
  const double b = static_cast<double>(plan.micro_batch);
  const double e = static_cast<double>(PrecisionBytes(plan.precision));
  const bool t5 = s.encoder_decoder();
  const double src = static_cast<double>(w.shape.seq_len);
  const double tgt = t5 && w.shape.target_len > 0 ? static_cast<double>(w.shape.target_len) : src;
  KeptOutput k;
  k.logits_bytes = b * tgt * static_cast<double>(s.vocab_size) * e;
  const double kv_width = static_cast<double>(s.num_kv_heads * s.head_dim);
  if (t5) {
    k.encoder_output_bytes = b * src * static_cast<double>(s.hidden_size) * e;
    if (!plan.gradient_checkpointing) {
      // Every decoder layer's self-attention keys and values (target length) and its
      // cross-attention ones (source length). Inside a step only the self-attention part is
      // extra (t5-large, micro-batch 8: +96 MiB; kept: +551 MiB, usecache-1205).
      const double self_kv = 2.0 * static_cast<double>(s.num_decoder_layers) * b * tgt * kv_width * e;
      k.kv_cache_in_step_bytes = self_kv;
      k.kv_cache_bytes = self_kv + 2.0 * static_cast<double>(s.num_decoder_layers) * b * src *
                                       kv_width * e;
    }
  } else if (s.family != Family::kBert && !plan.gradient_checkpointing) {
    // Keys and values of every layer, [b, kv_heads, s, head_dim] each. GPT-2's cost their full
    // size inside the step too (usecache-1205); other families' attention code may share
    // SDPA's saved tensors (docs/research/transformers-b.md 4.4): "at most".
    k.kv_cache_bytes = 2.0 * static_cast<double>(s.num_layers) * b * src * kv_width * e;
    k.kv_cache_in_step_bytes = k.kv_cache_bytes;
  }
  return k;
}

std::string KeptOutputNote(const Workload& w, const Plan& plan, const Prediction& pred) {
  const KeptOutput k = KeptOutputBytes(w, plan);
  const double left = static_cast<double>(pred.GpuRoomBeyondBandBytes());
  std::string held = "its logits " + FormatBytes(k.logits_bytes);
  if (k.encoder_output_bytes > 0) {
    held += " and encoder output " + FormatBytes(k.encoder_output_bytes);
  }
  // With use_cache on, every training forward builds the cache (GPT-2: measured as its full
  // size within the step, usecache-1205), and a kept output holds the previous one too.
  std::string cache;
  if (k.kv_cache_bytes > 0) {
    cache = fmt::format(
        "model.config.use_cache = False (transformers' default True builds a K/V cache that "
        "adds up to {} in every training forward without gradient checkpointing) and ",
        FormatBytes(k.kv_cache_in_step_bytes));
    held += fmt::format(" (and {} of cache with use_cache on)", FormatBytes(k.kv_cache_bytes));
  }
  const double most = k.MostBytes();
  return fmt::format(
      "training loop: the prediction assumes {}each step's output dropped before the next "
      "forward, as HF Trainer does; a plain loop that keeps it (out = engine(**batch) without del "
      "out) holds {} through the next forward; this plan leaves {} beyond its error band and "
      "headroom{}",
      cache, held, FormatBytes(std::max(0.0, left)),
      most > left ? fmt::format(": NOT enough for {}: {}del out after engine.step(), or it can "
                                "run out of memory in step 2",
                                FormatBytes(most),
                                k.kv_cache_bytes > 0 ? "set model.config.use_cache = False and "
                                                     : "")
                  : "");
}

Result<double> ZeroInitOutsideExtraBytes(Simulator& sim, const Plan& plan, const Prediction& pred) {
  if (plan.zero.stage != 3 || !plan.zero_init || (plan.dp_size() == 1 && !plan.OffloadsParams())) {
    return 0.0;
  }
  Plan outside = plan;
  outside.zero_init = false;
  DSPLAN_ASSIGN_OR_RETURN(const Prediction p, sim.Simulate(outside));
  return std::max(0.0, static_cast<double>(p.gpu_peak_allocated_bytes -
                                           pred.gpu_peak_allocated_bytes));
}

Result<std::string> ZeroInitNote(Simulator& sim, const Plan& plan, const Prediction& pred,
                                 const std::string& config_name, bool* short_of_room) {
  if (short_of_room != nullptr) *short_of_room = false;
  DSPLAN_ASSIGN_OR_RETURN(const double extra, ZeroInitOutsideExtraBytes(sim, plan, pred));
  if (!(extra > static_cast<double>(int64_t{1} << 20))) return std::string();
  const double left = static_cast<double>(pred.GpuRoomBeyondBandBytes());
  if (short_of_room != nullptr) *short_of_room = extra > left;
  return fmt::format(
      "model construction: the prediction assumes the script builds the model inside "
      "deepspeed.zero.Init, as HF Trainer and accelerate do with this config; a model built "
      "outside it and passed to deepspeed.initialize keeps every nn.Linear weight gathered in "
      "the forward until its backward (DeepSpeed 0.14.5 replaces torch.nn.functional.linear "
      "only inside zero.Init): {} more at the peak; this plan leaves {} beyond its error band "
      "and headroom{}",
      FormatBytes(extra), FormatBytes(std::max(0.0, left)),
      extra > left
          ? fmt::format(": NOT enough: build it under `with deepspeed.zero.Init("
                        "config_dict_or_path=\"{}\"):`, or plan with --no-zero-init",
                        config_name)
          : "");
}

std::vector<std::string> CheckPlan(const Plan& plan, const Prediction& pred,
                                   const HardwareProfile& profile) {
  std::vector<std::string> out;
  const ZeroConfig& z = plan.zero;
  const int64_t psi = pred.facts.params;
  const int64_t e = PrecisionBytes(plan.precision);
  if (z.stage >= 1) {
    // The ipg bucket(s) are allocated at reduce_bucket_size whatever the model's size.
    const int buffers = (z.stage < 3 && z.OverlapComm()) ? 2 : 1;
    const double bucket_bytes = static_cast<double>(buffers) * e * z.reduce_bucket_size;
    if (z.reduce_bucket_size > psi) {
      out.push_back(fmt::format(
          "reduce_bucket_size {:.3g} elements is larger than the model ({} parameters): the "
          "bucket {} {} per GPU for nothing; use at most the parameter count, e.g. "
          "hidden_size^2",
          static_cast<double>(z.reduce_bucket_size), FormatCount(static_cast<double>(psi)),
          buffers > 1 ? "buffers (two with overlap_comm) take" : "buffer takes",
          FormatBytes(bucket_bytes)));
    } else if (pred.gpu_peak_allocated_bytes > 0 &&
               bucket_bytes > 0.05 * pred.gpu_peak_allocated_bytes) {
      out.push_back(fmt::format(
          "reduce_bucket_size {:.3g}: the bucket {} {} ({:.0f}% of the peak); a smaller "
          "bucket (e.g. 5e7) costs little time",
          static_cast<double>(z.reduce_bucket_size), buffers > 1 ? "buffers take" : "buffer takes",
          FormatBytes(bucket_bytes), 100 * bucket_bytes / pred.gpu_peak_allocated_bytes));
    }
  }
  if (pred.facts.kept_grad_numel > 0 && pred.gpu_peak_allocated_bytes > 0) {
    // Stage 1 keeps the gradients of parameters larger than the bucket outside the rank's
    // partition until the backward ends (docs/deepspeed-facts.md, "Stage 1 keeps those
    // gradients"). Worth a line when it is more than 2 % of the peak.
    const double kept = static_cast<double>(e) * pred.facts.kept_grad_numel;
    if (kept > 0.02 * pred.gpu_peak_allocated_bytes) {
      out.push_back(fmt::format(
          "stage 1 with reduce_bucket_size {:.3g}: gradients of parameters larger than the bucket "
          "stay until the backward ends on the ranks that do not own them ({} on rank {}, the "
          "rank predicted, counted in the prediction); a reduce_bucket_size of at least {:.3g} "
          "(the largest parameter) keeps none, or stage 2 frees them after their reduction",
          static_cast<double>(z.reduce_bucket_size), FormatBytes(kept),
          pred.facts.rank >= 0 ? pred.facts.rank : 0,  // the rank class keeps rank 0's
          static_cast<double>(pred.facts.largest_param_numel)));
    }
  }
  if (z.stage >= 1 && z.stage <= 2 && !z.OverlapComm() && plan.dp_size() > 1 &&
      pred.breakdown.exposed_comm_s > 0.05 * pred.step_time_s) {
    out.push_back(fmt::format(
        "overlap_comm is off: gradient reductions run on the compute stream, {:.3f} s of the "
        "{:.3f} s step; \"overlap_comm\": true hides them behind backward (one more bucket "
        "buffer)",
        pred.breakdown.exposed_comm_s, pred.step_time_s));
  }
  const auto pinned_rate = [&](const CopyCurve& c) { return c.bytes_per_s.value / 1e9; };
  if (plan.OffloadsOptimizer() && !z.offload_optimizer.pin_memory) {
    out.push_back(fmt::format(
        "offload_optimizer.pin_memory is false: gradient copies to the host use pageable memory "
        "({:.1f} GB/s here against {:.1f} GB/s pinned); set it true if host RAM allows",
        pinned_rate(profile.links.d2h_pageable), pinned_rate(profile.links.d2h_pinned)));
  }
  if (z.stage == 3 && z.offload_param.device == OffloadDevice::kCpu && !z.offload_param.pin_memory) {
    out.push_back(
        "offload_param.pin_memory false has no effect on training speed: stage 3 copies the "
        "parameter partitions into one flat host buffer that is always pinned "
        "(_create_param_groups_fp16_flat_cpu_memory); only the partitions created at init are "
        "pageable");
  }
  if (z.offload_optimizer.device == OffloadDevice::kNvme && z.stage == 3 &&
      pred.facts.largest_subgroup >= pred.facts.partition_numel) {
    out.push_back(fmt::format(
        "NVMe optimizer offload with sub_group_size {:.3g} >= the partition ({} elements): the "
        "pinned swap pool is buffer_count x the whole partition ({}), as much RAM as keeping the "
        "states in memory; lower sub_group_size (e.g. 1e8)",
        static_cast<double>(z.sub_group_size),
        FormatCount(static_cast<double>(pred.facts.partition_numel)),
        FormatBytes(4.0 * z.offload_optimizer.buffer_count * pred.facts.largest_subgroup)));
  }
  if (z.offload_optimizer.device == OffloadDevice::kNvme && z.stage == 3 &&
      (z.offload_optimizer.pipeline_read || z.offload_optimizer.pipeline_write) &&
      z.offload_optimizer.buffer_count < 8) {
    // PipelinedOptimizerSwapper keeps the next sub-group's swap-in in flight while the current
    // one steps: two sets of the four Adam tensors (parameter, gradient, exp_avg, exp_avg_sq).
    out.push_back(fmt::format(
        "offload_optimizer.pipeline_read/pipeline_write with buffer_count {}: the pipelined "
        "swapper reads the next sub-group while the current one steps and needs two sets of "
        "four buffers; DeepSpeed can stop with \"PipelinedOptimizerSwapper ran out of swap "
        "buffers, try increasing 'buffer_count'\"; set buffer_count to 8",
        z.offload_optimizer.buffer_count));
  }
  if (z.offload_param.device == OffloadDevice::kNvme && z.stage == 3 &&
      z.offload_param.max_in_cpu >= pred.facts.partition_numel) {
    out.push_back(fmt::format(
        "offload_param.max_in_cpu {:.3g} covers the whole parameter partition ({} elements): "
        "every partition stays in pinned host memory and nothing is read from NVMe; "
        "\"device\": \"cpu\" says the same without the swap buffers",
        static_cast<double>(z.offload_param.max_in_cpu),
        FormatCount(static_cast<double>(pred.facts.partition_numel))));
  }
  if (plan.CheckpointsOnHost()) {
    out.push_back(fmt::format(
        "activation checkpoints in host memory ({} per GPU per micro-step, pageable): the "
        "training script must checkpoint its blocks with deepspeed.checkpointing.checkpoint "
        "after deepspeed.checkpointing.configure(None, deepspeed_config=...); transformers' "
        "gradient_checkpointing_enable() uses torch.utils.checkpoint, which ignores "
        "activation_checkpointing and keeps the checkpoints on the GPU",
        FormatBytes(static_cast<double>(pred.facts.host_checkpoint_bytes))));
  }
  if (plan.linear_tiles > 1 && z.stage == 3) {
    out.push_back(fmt::format(
        "memory-centric tiling: the prediction assumes every Linear of the transformer blocks is "
        "a deepspeed.zero.TiledLinear(in, out, out_splits={}); one tile gathers {} at a time",
        plan.linear_tiles, FormatBytes(static_cast<double>(pred.facts.largest_tile_gather_bytes))));
  }
  return out;
}

Result<std::string> SingleGpuStage3Note(Simulator& sim, const Plan& plan, const Prediction& pred) {
  if (plan.zero.stage != 3 || plan.dp_size() != 1 || plan.OffloadsOptimizer() ||
      plan.OffloadsParams() || !pred.fits) {
    return std::string();
  }
  Plan alt = plan;
  alt.zero.stage = 2;
  DSPLAN_ASSIGN_OR_RETURN(const Prediction p2, sim.Simulate(alt));
  // Stage 3 earns its hooks on one GPU where stage 2 does not fit with its band, or where
  // stage 2's single flat fp32 partition would not train under FusedAdam; within the 2 % that
  // dsplan cannot rank, the config is as good as stage 2.
  if (!p2.fits || p2.facts.FusedAdamSkipsUpdate() || !(p2.step_time_s < 0.98 * pred.step_time_s)) {
    return std::string();
  }
  return fmt::format(
      "ZeRO stage 3 on one GPU without offload partitions nothing and adds per-module "
      "gather/release work: stage 2 at the same micro-batch fits (peak {} against {}, {} beyond "
      "its band and headroom) and is {:.0f}% faster ({:.3f} s against {:.3f} s per step); set "
      "zero_optimization.stage to 2",
      FormatBytes(static_cast<double>(p2.gpu_total_bytes)),
      FormatBytes(static_cast<double>(pred.gpu_total_bytes)),
      FormatBytes(static_cast<double>(p2.GpuRoomBeyondBandBytes())),
      100 * (pred.step_time_s / p2.step_time_s - 1), p2.step_time_s, pred.step_time_s);
}

namespace {
bool MallocHeapApplies(const Plan& plan) {
  return plan.zero.stage == 3 && plan.OffloadsOptimizer();
}
}  // namespace

Result<std::optional<double>> MallocHeapStepSeconds(Simulator& sim, const Plan& plan) {
  if (!MallocHeapApplies(plan) || plan.malloc_heap) return std::optional<double>();
  Plan heap = plan;
  heap.malloc_heap = true;
  DSPLAN_ASSIGN_OR_RETURN(const Prediction p, sim.Simulate(heap));
  return std::optional<double>(p.step_time_s);
}

Result<std::string> MallocHeapNote(Simulator& sim, const Plan& plan, const Prediction& pred) {
  if (!MallocHeapApplies(plan)) return std::string();
  Plan other = plan;
  other.malloc_heap = !plan.malloc_heap;
  DSPLAN_ASSIGN_OR_RETURN(const Prediction p, sim.Simulate(other));
  const double with = plan.malloc_heap ? pred.step_time_s : p.step_time_s;
  const double without = plan.malloc_heap ? p.step_time_s : pred.step_time_s;
  const std::string measured =
      "measured: offloaded ZeRO-3 steps of opt-1.3b and gemma-2b 2.5x faster, "
      "docs/validation/deepspeed/malloc-1206";
  if (plan.malloc_heap) {
    return fmt::format(
        "host malloc: the prediction assumes {} in every training process's environment "
        "(export them before the launch command; with several nodes put them in .deepspeed_env, "
        "which the deepspeed launcher exports on every node); without them the step is "
        "predicted {:.3f} s, not {:.3f} s ({})",
        kMallocHeapEnv, without, with, measured);
  }
  if (!(with < 0.95 * without)) return std::string();
  return fmt::format(
      "host malloc: ZeRO-3's offloaded gradient copies go through pageable temporaries whose "
      "pages glibc's malloc maps afresh for every copy; with {} in every training process's "
      "environment (export them before the launch command; with several nodes put them in "
      ".deepspeed_env) the step is predicted {:.3f} s instead of {:.3f} s ({}); --malloc-heap "
      "predicts with them",
      kMallocHeapEnv, with, without, measured);
}

}  // namespace dsplan
