#include "runtime/execution_io.h"

#include <nlohmann/json.hpp>

namespace dsplan {

std::string ExecutionToWire(const Execution& e) {
  nlohmann::json op = nlohmann::json::array();
  for (const OpClassSeconds& c : e.op_class) op.push_back({c.gemm_s, c.attention_s, c.memory_s});
  const nlohmann::json j = {
      {"device_name", e.device_name},
      {"driver", e.driver},
      {"libraries", e.libraries},
      {"attention_path", e.attention_path},
      {"device_total_bytes", e.device_total_bytes},
      {"world_size", e.world_size},
      {"step_s", e.step_s},
      {"start_s", e.start_s},
      {"end_s", e.end_s},
      {"op_class", op},
      {"peak_allocated_bytes", e.peak_allocated_bytes},
      {"peak_reserved_bytes", e.peak_reserved_bytes},
      {"context_bytes", e.context_bytes},
      {"device_used_peak_bytes", e.device_used_peak_bytes},
      {"scratch_bytes", e.scratch_bytes},
      {"host_pinned_bytes", e.host_pinned_bytes},
      {"host_pageable_bytes", e.host_pageable_bytes},
      {"nvme_bytes", e.nvme_bytes},
      {"out_of_memory", e.out_of_memory},
      {"oom_task", e.oom_task},
      {"oom_request_bytes", e.oom_request_bytes},
      {"oom_allocated_bytes", e.oom_allocated_bytes},
      {"oom_message", e.oom_message},
  };
  return j.dump();
}

Result<Execution> ExecutionFromWire(const std::string& bytes) {
  try {
    const nlohmann::json j = nlohmann::json::parse(bytes);
    Execution e;
    j.at("device_name").get_to(e.device_name);
    j.at("driver").get_to(e.driver);
    j.at("libraries").get_to(e.libraries);
    j.at("attention_path").get_to(e.attention_path);
    j.at("device_total_bytes").get_to(e.device_total_bytes);
    j.at("world_size").get_to(e.world_size);
    j.at("step_s").get_to(e.step_s);
    j.at("start_s").get_to(e.start_s);
    j.at("end_s").get_to(e.end_s);
    for (const nlohmann::json& c : j.at("op_class")) {
      e.op_class.push_back({c.at(0).get<double>(), c.at(1).get<double>(), c.at(2).get<double>()});
    }
    j.at("peak_allocated_bytes").get_to(e.peak_allocated_bytes);
    j.at("peak_reserved_bytes").get_to(e.peak_reserved_bytes);
    j.at("context_bytes").get_to(e.context_bytes);
    j.at("device_used_peak_bytes").get_to(e.device_used_peak_bytes);
    j.at("scratch_bytes").get_to(e.scratch_bytes);
    j.at("host_pinned_bytes").get_to(e.host_pinned_bytes);
    j.at("host_pageable_bytes").get_to(e.host_pageable_bytes);
    j.at("nvme_bytes").get_to(e.nvme_bytes);
    j.at("out_of_memory").get_to(e.out_of_memory);
    j.at("oom_task").get_to(e.oom_task);
    j.at("oom_request_bytes").get_to(e.oom_request_bytes);
    j.at("oom_allocated_bytes").get_to(e.oom_allocated_bytes);
    j.at("oom_message").get_to(e.oom_message);
    return e;
  } catch (const nlohmann::json::exception& ex) {
    return Status::InvalidArgument(std::string("not an encoded Execution: ") + ex.what());
  }
}

}  // namespace dsplan
