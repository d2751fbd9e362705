#include "planner/check.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/units.h"

namespace dsplan {

int64_t LargestParamPartitionNumel(const Workload& w, const Plan& plan) {
  int64_t largest = 0;
  for (const TensorSpec& t : w.tensors) {
    if (t.category == TensorCategory::kParameter) largest = std::max(largest, t.numel);
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
  constexpr int64_t kDefault = 100'000'000;
  const int64_t part = LargestParamPartitionNumel(w, plan);
  if (part < kDefault) return kDefault;
  // A round number above the partition: the next multiple of 1e7.
  return (part / 10'000'000 + 1) * 10'000'000;
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
  if (z.stage == 3 && plan.dp_size() == 1 && !plan.OffloadsOptimizer() && !plan.OffloadsParams()) {
    out.push_back(
        "ZeRO stage 3 on one GPU without offload partitions nothing and adds per-module "
        "gather/release work; stage 1 or 2 is as small and faster");
  }
  return out;
}

}  // namespace dsplan
