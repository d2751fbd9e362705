#include "simulator/estimator.h"

#include <algorithm>
#include <cassert>
#include <string>
#include <unordered_map>

#include "simulator/workload.h"

namespace dsplan {

int64_t ZeroPaperBytesPerGpu(int stage, int64_t params, int total_gpus,
                             OffloadDevice offload_optimizer, OffloadDevice offload_param) {
  assert(stage >= 0 && stage <= 3 && params >= 0 && total_gpus >= 1);
  // Bytes per parameter of each model state, and whether the stage partitions it.
  const int64_t p16 = offload_param != OffloadDevice::kNone && stage == 3 ? 0 : 2;
  const int64_t g16 = 2;
  const int64_t k = offload_optimizer != OffloadDevice::kNone ? 0 : 12;
  int64_t replicated = 0, partitioned = 0;
  (stage >= 1 ? partitioned : replicated) += k;
  (stage >= 2 ? partitioned : replicated) += g16;
  (stage >= 3 ? partitioned : replicated) += p16;
  return replicated * params + partitioned * params / total_gpus;
}

DeepSpeedEstimate EstimateZero2ModelStates(int64_t total_params, int gpus_per_node, int nodes,
                                           bool cpu_offload, double additional_buffer_factor) {
  // Mirrors the Python expression by expression: integer products stay exact, '/' is float
  // division, int() truncates.
  const int64_t total_gpus = int64_t{nodes} * gpus_per_node;
  DeepSpeedEstimate e;
  if (cpu_offload) {
    e.gpu_bytes = 2 * total_params;
    e.cpu_bytes = static_cast<int64_t>(
        static_cast<double>(total_params * std::max<int64_t>(4 * total_gpus, 16)) *
        additional_buffer_factor);
  } else {
    e.gpu_bytes = 2 * total_params + static_cast<int64_t>(static_cast<double>(18 * total_params) /
                                                          static_cast<double>(total_gpus));
    e.cpu_bytes = static_cast<int64_t>(
        static_cast<double>(total_params * 4 * gpus_per_node) * additional_buffer_factor);
  }
  return e;
}

DeepSpeedEstimate EstimateZero3ModelStates(int64_t total_params, int64_t largest_layer_params,
                                           int gpus_per_node, int nodes, bool cpu_offload,
                                           bool cpu_offload_params, bool zero_init,
                                           double additional_buffer_factor) {
  const int64_t total_gpus = int64_t{nodes} * gpus_per_node;
  const double gpus_factor = 1.0 / nodes;
  const double f = additional_buffer_factor;
  DeepSpeedEstimate e;
  e.largest_layer_memory = 4 * largest_layer_params;
  // Psi * max(4 * gpus_per_node, m * gpus_factor) * f, or Psi * m * gpus_factor * f.
  auto cpu_states = [&](int64_t m) {
    if (zero_init) {
      return static_cast<int64_t>(static_cast<double>(total_params * m) * gpus_factor * f);
    }
    const double mult = std::max(static_cast<double>(4 * gpus_per_node), m * gpus_factor);
    return static_cast<int64_t>(static_cast<double>(total_params) * mult * f);
  };
  if (cpu_offload) {
    if (cpu_offload_params) {
      e.gpu_bytes = e.largest_layer_memory;
      e.cpu_bytes = cpu_states(18);
    } else {
      e.gpu_bytes = e.largest_layer_memory +
                    static_cast<int64_t>(static_cast<double>(2 * total_params) /
                                         static_cast<double>(total_gpus));
      e.cpu_bytes = cpu_states(16);
    }
  } else {
    e.gpu_bytes = e.largest_layer_memory +
                  static_cast<int64_t>(static_cast<double>(18 * total_params) /
                                       static_cast<double>(total_gpus));
    const int64_t base = zero_init ? largest_layer_params : total_params;
    e.cpu_bytes =
        static_cast<int64_t>(static_cast<double>(base * 4 * gpus_per_node) * f);
  }
  return e;
}

int64_t LargestModuleParams(const Workload& w) {
  std::unordered_map<std::string, int64_t> by_module;
  int64_t largest = 0;
  for (const TensorSpec& t : w.tensors) {
    if (t.category != TensorCategory::kParameter) continue;
    const size_t dot = t.name.rfind('.');
    const std::string module = dot == std::string::npos ? std::string() : t.name.substr(0, dot);
    int64_t& n = by_module[module];
    n += t.numel;
    largest = std::max(largest, n);
  }
  return largest;
}

}  // namespace dsplan
