#include "simulator/prediction_report.h"

#include <algorithm>
#include <cstdint>

#include <fmt/format.h>

#include "core/units.h"

namespace dsplan {
namespace {

nlohmann::json Breakdown(const CategoryBytes& b) {
  nlohmann::json j = nlohmann::json::object();
  for (int c = 0; c < kNumMemCategories; ++c) j[MemCategoryKey(static_cast<MemCategory>(c))] = b[c];
  return j;
}

std::string OffloadText(const Plan& p) {
  std::string s;
  if (p.OffloadsOptimizer()) s += fmt::format("optimizer->{}", OffloadDeviceName(p.zero.offload_optimizer.device));
  if (p.OffloadsParams()) {
    if (!s.empty()) s += ", ";
    s += fmt::format("params->{}", OffloadDeviceName(p.zero.offload_param.device));
  }
  return s.empty() ? "none" : s;
}

}  // namespace

std::string VerdictText(const Prediction& p) {
  switch (p.verdict) {
    case MemoryVerdict::kFits:
      return p.gpu_capacity_bytes > 0
                 ? fmt::format("fits, with {} to spare ({} beyond the error band and headroom)",
                               FormatBytes(static_cast<double>(p.gpu_spare_bytes)),
                               FormatBytes(static_cast<double>(p.GpuRoomBeyondBandBytes())))
                 : "fits";
    case MemoryVerdict::kAtRisk:
      return fmt::format("fits with {} to spare: at risk ({})",
                         FormatBytes(static_cast<double>(p.gpu_spare_bytes)),
                         p.reason.rfind("at risk: ", 0) == 0 ? p.reason.substr(9) : p.reason);
    case MemoryVerdict::kDoesNotFit:
      return "does NOT fit: " + p.reason;
  }
  return "?";
}

std::string UnvalidatedCommNote(const TimeBand& band, int world_size) {
  if (world_size <= 1 || band.unvalidated_comm_share <= 0) return "";
  return fmt::format(
      "; on {} GPUs its exposed communication, {:.1f}% of the step, is outside that record: "
      "every run in it used one GPU, and collectives are priced from the profile's link numbers",
      world_size, 100 * band.unvalidated_comm_share);
}

nlohmann::json PredictionToJson(const Prediction& p, const Workload& w) {
  const Plan& plan = p.plan;
  nlohmann::json j;
  j["fits"] = p.fits;
  j["verdict"] = MemoryVerdictName(p.verdict);
  j["reason"] = p.reason;
  j["warnings"] = p.warnings;
  if (!p.allocator_segments.empty()) {
    nlohmann::json segs = nlohmann::json::array();
    for (const AllocatorSegment& s : p.allocator_segments) {
      segs.push_back({{"step", s.step},
                      {"task", s.task},
                      {"bytes", s.bytes},
                      {"reserved_after_bytes", s.reserved_after},
                      {"lazy_state", s.lazy_state}});
    }
    j["allocator_segments"] = std::move(segs);
  }
  j["model"] = {{"name", w.spec.name},
                {"params", w.params},
                {"tokens_per_micro_batch", w.tokens},
                {"attention", AttentionImplName(w.attention)}};
  j["plan"] = {{"stage", plan.zero.stage},
               {"wrapper", OptimizerWrapperName(p.facts.wrapper)},
               {"precision", PrecisionName(plan.precision)},
               {"nodes", plan.nodes},
               {"gpus_per_node", plan.gpus_per_node},
               {"micro_batch", plan.micro_batch},
               {"grad_accum", plan.grad_accum},
               {"train_batch", plan.train_batch()},
               {"gradient_checkpointing", plan.gradient_checkpointing},
               {"offload_optimizer", OffloadDeviceName(plan.zero.offload_optimizer.device)},
               {"offload_param", OffloadDeviceName(plan.zero.offload_param.device)},
               {"reduce_bucket_size", plan.zero.reduce_bucket_size},
               {"overlap_comm", p.facts.overlap_comm},
               {"partition_numel", p.facts.partition_numel},
               {"subgroups", p.facts.subgroups},
               {"persistent_numel", p.facts.persistent_numel},
               {"fused_adam_flat_numel", p.facts.fused_adam_flat_numel},
               {"fused_adam_skips_update", p.facts.FusedAdamSkipsUpdate()},
               {"torch_adam", plan.torch_adam},
               {"torch_adam_avoids_fused_limit", p.facts.TorchAdamAvoidsFusedLimit()}};
  j["hardware"] = {{"profile", p.profile_name}, {"sources", p.profile_sources}};
  j["gpu"] = {{"capacity_bytes", p.gpu_capacity_bytes},
              {"peak_allocated_bytes", p.gpu_peak_allocated_bytes},
              {"peak_reserved_bytes", p.gpu_peak_reserved_bytes},
              {"context_bytes", p.gpu_context_bytes},
              {"peak_total_bytes", p.gpu_total_bytes},
              {"nccl_bytes", p.gpu_nccl_bytes},
              {"upper_total_bytes", p.gpu_upper_total_bytes},
              {"headroom_bytes", p.gpu_headroom_bytes},
              {"spare_bytes", p.gpu_spare_bytes},
              {"memory_band",
               {{"upper", p.memory_band.upper},
                {"upper_bytes", p.memory_band.upper_bytes},
                {"lower", p.memory_band.lower},
                {"provisional", p.memory_band.provisional},
                {"basis", p.memory_band.basis}}},
              {"peak_at", p.gpu_peak_task},
              {"rank", p.facts.rank >= 0 ? nlohmann::json(p.facts.rank) : nlohmann::json()},
              {"breakdown_at_peak", Breakdown(p.gpu_breakdown_at_peak)}};
  if (!p.rank_peaks.empty()) {
    nlohmann::json ranks = nlohmann::json::array();
    for (const RankPeak& r : p.rank_peaks) {
      ranks.push_back({{"rank", r.rank},
                       {"peak_allocated_bytes", r.peak_allocated_bytes},
                       {"peak_reserved_bytes", r.peak_reserved_bytes},
                       {"peak_at", r.peak_at}});
    }
    j["gpu"]["ranks_compared"] = std::move(ranks);
  }
  j["host"] = {{"peak_bytes_per_node", p.host_peak_bytes_per_node},
               {"pinned_bytes_per_node", p.host_pinned_bytes_per_node},
               {"capacity_bytes_per_node", p.host_capacity_bytes_per_node}};
  j["nvme"] = {{"bytes_per_node", p.nvme_bytes_per_node},
               {"read_bytes_per_step", p.nvme_read_bytes_per_step},
               {"write_bytes_per_step", p.nvme_write_bytes_per_step}};
  const StepBreakdown& b = p.breakdown;
  j["step"] = {{"time_s", p.step_time_s},
               {"time_band",
                {{"low", p.time_band.low},
                 {"high", p.time_band.high},
                 {"family_measured", p.time_band.family_measured},
                 {"host_bound_share", p.host_bound_share},
                 {"unvalidated_comm_share", p.time_band.unvalidated_comm_share},
                 {"unvalidated_nvme_share", p.time_band.unvalidated_nvme_share},
                 {"far_gemm_share", p.time_band.far_gemm_share},
                 {"basis", p.time_band.basis}}},
               {"samples_per_s", p.samples_per_s},
               {"tokens_per_s", p.tokens_per_s},
               {"tflops_per_gpu", p.tflops_per_gpu},
               {"mfu", p.mfu},
               {"mfu_peak_flops", p.mfu_peak_flops},
               {"mfu_dtype", PrecisionName(plan.precision)},
               {"breakdown_s",
                {{"forward", b.forward_s},
                 {"backward", b.backward_s},
                 {"recompute", b.recompute_s},
                 {"optimizer", b.optimizer_s},
                 {"exposed_comm", b.exposed_comm_s},
                 {"offload", b.offload_s},
                 {"nvme", b.nvme_s},
                 {"grad_copies", b.other_s}}},
               {"param_fetch_wait_s", p.param_fetch_wait_s},
               {"busy_s",
                {{"compute", p.busy_s[0]},
                 {"comm", p.busy_s[1]},
                 {"h2d", p.busy_s[2]},
                 {"d2h", p.busy_s[3]},
                 {"cpu", p.busy_s[4]},
                 {"nvme", p.busy_s[5]}}}};
  j["bottleneck"] = p.bottleneck;
  return j;
}

std::string PredictionText(const Prediction& p, const Workload& w) {
  const Plan& plan = p.plan;
  std::string o;
  o += fmt::format("model      {} ({} parameters), {} tokens per micro-batch, attention {}\n",
                   w.spec.name, FormatCount(static_cast<double>(w.params)), w.tokens,
                   AttentionImplName(w.attention));
  o += fmt::format(
      "plan       ZeRO stage {} ({}), {}, {} node(s) x {} GPU(s), micro-batch {} x accumulation "
      "{} = global batch {}, checkpointing {}, offload {}\n",
      plan.zero.stage, OptimizerWrapperName(p.facts.wrapper), PrecisionName(plan.precision),
      plan.nodes, plan.gpus_per_node, plan.micro_batch, plan.grad_accum, plan.train_batch(),
      plan.gradient_checkpointing ? "on" : "off", OffloadText(plan));
  o += fmt::format("hardware   {} ({})\n", p.profile_name, p.profile_sources);
  if (p.fake_process_group) {
    o += fmt::format(
        "emulated   rank {} of {} alone on one GPU under PyTorch's fake process group: no "
        "collective crosses a link, all-gathers copy locally (--fake-process-group)\n",
        p.facts.rank, p.plan.dp_size());
  }
  o += "\n";
  o += fmt::format("verdict    {}\n", VerdictText(p));
  for (const std::string& wmsg : p.warnings) o += fmt::format("warning    {}\n", wmsg);
  // Only ZeRO-1/2 ranks differ (kRankClass); elsewhere one rank stands for all.
  if (p.plan.dp_size() > 1 && p.facts.rank >= 0 && p.facts.wrapper == OptimizerWrapper::kZero12) {
    o += fmt::format("\nGPU memory of rank {} of {}", p.facts.rank, p.plan.dp_size());
    if (!p.rank_peaks.empty()) {
      // The spread over the ranks compared, so the reader sees what the others need.
      int64_t a_lo = INT64_MAX, a_hi = 0, r_lo = INT64_MAX, r_hi = 0;
      for (const RankPeak& r : p.rank_peaks) {
        a_lo = std::min(a_lo, r.peak_allocated_bytes);
        a_hi = std::max(a_hi, r.peak_allocated_bytes);
        r_lo = std::min(r_lo, r.peak_reserved_bytes);
        r_hi = std::max(r_hi, r.peak_reserved_bytes);
      }
      o += fmt::format(
          ", the rank that allocates the most; reserved and the fit are the largest of any "
          "rank (ZeRO-1/2 ranks differ; over all {}: peak allocated {} to {}, reserved {} to {})",
          p.rank_peaks.size(), FormatBytes(static_cast<double>(a_lo)),
          FormatBytes(static_cast<double>(a_hi)), FormatBytes(static_cast<double>(r_lo)),
          FormatBytes(static_cast<double>(r_hi)));
    }
    o += "\n";
  } else if (p.facts.rank == kRankClass) {
    o += fmt::format(
        "\nGPU memory per rank (one graph for all {} ranks, each rank-dependent buffer at its "
        "largest: a bound on every rank)\n",
        p.plan.dp_size());
  } else {
    o += "\nGPU memory per rank\n";
  }
  o += fmt::format("  peak allocated  {:>10}   (torch.cuda.max_memory_allocated), at {}\n",
                   FormatBytes(static_cast<double>(p.gpu_peak_allocated_bytes)), p.gpu_peak_task);
  o += fmt::format("  peak reserved   {:>10}   (torch.cuda.max_memory_reserved)\n",
                   FormatBytes(static_cast<double>(p.gpu_peak_reserved_bytes)));
  o += fmt::format("  + context       {:>10}   = {} of {}\n",
                   FormatBytes(static_cast<double>(p.gpu_context_bytes)),
                   FormatBytes(static_cast<double>(p.gpu_total_bytes)),
                   FormatBytes(static_cast<double>(p.gpu_capacity_bytes)));
  if (p.gpu_nccl_bytes > 0) {
    o += fmt::format("  + NCCL          {:>10}   (estimate: buffers outside PyTorch's allocator)\n",
                     FormatBytes(static_cast<double>(p.gpu_nccl_bytes)));
  }
  o += fmt::format(
      "  error band      +{:.0f}% of reserved + {} (largest cached transient) / -{:.0f}% "
      "({}): up to {}\n",
      100 * p.memory_band.upper, FormatBytes(static_cast<double>(p.memory_band.upper_bytes)),
      100 * p.memory_band.lower, p.memory_band.basis,
      FormatBytes(static_cast<double>(p.gpu_upper_total_bytes)));
  o += fmt::format("  headroom        {:>10}   kept free (--headroom); spare before band and "
                   "headroom {}\n",
                   FormatBytes(static_cast<double>(p.gpu_headroom_bytes)),
                   FormatBytes(static_cast<double>(p.gpu_spare_bytes)));
  o += "  at the peak:\n";
  for (int c = 0; c < kNumMemCategories; ++c) {
    const int64_t b = p.gpu_breakdown_at_peak[c];
    if (b == 0) continue;
    o += fmt::format("    {:<28}{:>10}\n", MemCategoryName(static_cast<MemCategory>(c)),
                     FormatBytes(static_cast<double>(b)));
  }
  o += fmt::format("\nhost RAM per node  {} (pinned {}), of {}\n",
                   FormatBytes(static_cast<double>(p.host_peak_bytes_per_node)),
                   FormatBytes(static_cast<double>(p.host_pinned_bytes_per_node)),
                   FormatBytes(static_cast<double>(p.host_capacity_bytes_per_node)));
  if (p.nvme_bytes_per_node > 0) {
    o += fmt::format("NVMe per node      {}; each rank reads {} and writes {} per step\n",
                     FormatBytes(static_cast<double>(p.nvme_bytes_per_node)),
                     FormatBytes(p.nvme_read_bytes_per_step),
                     FormatBytes(p.nvme_write_bytes_per_step));
  }
  const StepBreakdown& b = p.breakdown;
  o += fmt::format(
      "\nstep       {:.3f} s: {:.1f} samples/s, {:.0f} tokens/s, {:.1f} TFLOP/s per GPU, MFU "
      "{:.1f}% (of the dense {} peak, {:.0f} TFLOP/s)\n",
      p.step_time_s, p.samples_per_s, p.tokens_per_s, p.tflops_per_gpu, 100 * p.mfu,
      PrecisionName(plan.precision), p.mfu_peak_flops / 1e12);
  o += fmt::format("time band  {:.3f}-{:.3f} s ({}){}\n", p.time_band.low * p.step_time_s,
                   p.time_band.high * p.step_time_s, p.time_band.basis,
                   UnvalidatedCommNote(p.time_band, plan.world_size()));
  o += fmt::format(
      "critical path: forward {:.3f} s, backward {:.3f} s, recompute {:.3f} s, optimizer {:.3f} "
      "s, exposed communication {:.3f} s, offload copies {:.3f} s, NVMe {:.3f} s, gradient "
      "copies {:.3f} s\n",
      b.forward_s, b.backward_s, b.recompute_s, b.optimizer_s, b.exposed_comm_s, b.offload_s,
      b.nvme_s, b.other_s);
  if (p.param_fetch_wait_s > 0) {
    o += fmt::format(
        "parameter fetch: the host waits {:.3f} s per step for the offloaded parameters' copies "
        "to the GPU (ZeRO-3 synchronizes on them before a module runs; inside the forward, "
        "backward and recompute above)\n",
        p.param_fetch_wait_s);
  }
  o += fmt::format("bottleneck {}\n", p.bottleneck);
  if (!p.allocator_segments.empty()) {
    o += "segments   the caching-allocator replay's new segments (step 1 warms the cache; step 2 "
         "is the steady step):\n";
    for (const AllocatorSegment& s : p.allocator_segments) {
      o += fmt::format("  step {}  {:>9}  -> reserved {:>9}  {}{}\n", s.step,
                       "+" + FormatBytes(static_cast<double>(s.bytes)),
                       FormatBytes(static_cast<double>(s.reserved_after)), s.task,
                       s.lazy_state ? " (Adam's state, created in the first step())" : "");
    }
  }
  return o;
}

nlohmann::json ChromeTrace(const Prediction& p, const Workload& w) {
  nlohmann::json events = nlohmann::json::array();
  for (int r = 0; r < kNumResources; ++r) {
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", 0},
                      {"tid", r},
                      {"args", {{"name", ResourceName(static_cast<Resource>(r))}}}});
  }
  const StepGraph& g = p.graph;
  for (TaskId id = 0; id < g.size() && id < static_cast<int>(p.schedule.start_s.size()); ++id) {
    const Task& t = g.task(id);
    const double dur = p.schedule.end_s[id] - p.schedule.start_s[id];
    if (dur <= 0) continue;
    events.push_back({{"name", TaskName(g, w, id)},
                      {"cat", TaskKindName(t.kind)},
                      {"ph", "X"},
                      {"pid", 0},
                      {"tid", static_cast<int>(t.resource)},
                      {"ts", p.schedule.start_s[id] * 1e6},
                      {"dur", dur * 1e6},
                      {"args", {{"id", id}, {"bytes", t.bytes}}}});
  }
  // GPU memory as a counter track, in program order mapped to task start/end times.
  for (const MemoryTimeline::Point& pt : p.memory.gpu_curve) {
    events.push_back({{"name", "GPU allocated (GiB)"},
                      {"ph", "C"},
                      {"pid", 0},
                      {"ts", p.schedule.start_s[pt.task] * 1e6},
                      {"args", {{"GiB", pt.after_start / double(kGiB)}}}});
    events.push_back({{"name", "GPU allocated (GiB)"},
                      {"ph", "C"},
                      {"pid", 0},
                      {"ts", p.schedule.end_s[pt.task] * 1e6},
                      {"args", {{"GiB", pt.after_end / double(kGiB)}}}});
  }
  return {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
}

}  // namespace dsplan
