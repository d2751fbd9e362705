// A small driver for the CUDA executor (runtime/executor.h) on a real GPU, until `dsplan
// validate` lands: builds the plan, workload and StepGraph for each case on the command line,
// runs it, and prints measured against the simulator's prediction (both software stacks) per
// task kind, the op-class split of layer tasks, step time and memory.
//
//   gpu_executor_smoke CASE...      CASE = model:stage:micro_batch:seq:precision[:offload[:gc]]
//   e.g. gpu_executor_smoke gpt2-xl:0:8:1024:bf16 gpt2-xl:2:8:1024:bf16:cpu llama-2-7b:0:16:1024:bf16
// offload = none | cpu | nvme=/path; gc = gc for gradient checkpointing. Environment:
// DSPLAN_DATA_DIR (models/, profiles/), SMOKE_STEPS (default 5), SMOKE_WARMUP (default 2).
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/hardware_profile.h"
#include "core/model_catalog.h"
#include "runtime/executor.h"
#include "simulator/simulate.h"
#include "simulator/workload.h"

namespace dsplan {
namespace {

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string x;
  while (std::getline(ss, x, sep)) out.push_back(x);
  return out;
}

double GiB(int64_t b) { return static_cast<double>(b) / (1 << 30); }

int RunCase(const std::string& c, const HardwareProfile& hw) {
  const auto f = Split(c, ':');
  if (f.size() < 5) {
    fmt::print("bad case '{}': model:stage:micro_batch:seq:precision[:offload[:gc]]\n", c);
    return 2;
  }
  auto spec = LoadModel(f[0], DataDir());
  if (!spec.ok()) {
    fmt::print("{}: {}\n", c, spec.status().ToString());
    return 1;
  }
  Plan plan;
  plan.gpus_per_node = 1;
  plan.zero.stage = std::stoi(f[1]);
  plan.micro_batch = std::stoll(f[2]);
  plan.grad_accum = 1;
  plan.seq_len = std::stoll(f[3]);
  plan.precision = f[4] == "fp32" ? Precision::kFp32 : f[4] == "fp16" ? Precision::kFp16
                                                                      : Precision::kBf16;
  plan.optimizer = OptimizerType::kAdamW;
  if (f.size() > 5 && f[5] == "cpu") {
    plan.zero.offload_optimizer.device = OffloadDevice::kCpu;
    plan.zero.offload_optimizer.pin_memory = true;
  } else if (f.size() > 5 && f[5].rfind("nvme=", 0) == 0) {
    plan.zero.offload_optimizer.device = OffloadDevice::kNvme;
    plan.zero.offload_optimizer.nvme_path = f[5].substr(5);
    plan.zero.offload_optimizer.pin_memory = true;
  }
  plan.gradient_checkpointing = f.size() > 6 && f[6] == "gc";
  auto w = BuildWorkload(*spec, plan.shape());
  if (!w.ok()) {
    fmt::print("{}: {}\n", c, w.status().ToString());
    return 1;
  }
  const int64_t threshold =
      plan.zero.stage == 3 ? plan.zero.stage3_param_persistence_threshold : 0;
  SimulateOptions so;
  so.keep_graph = true;
  SimulationContext ds = MakeSimulationContext(*w, hw, plan.precision, threshold);
  SimulationContext rt = MakeSimulationContext(*w, hw, plan.precision, threshold,
                                               SoftwareStack::kDsplanRuntime);
  auto pd = Simulate(ds, plan, so);
  auto pr = Simulate(rt, plan, so);
  if (!pd.ok() || !pr.ok()) {
    fmt::print("{}: simulate: {}\n", c, (!pd.ok() ? pd.status() : pr.status()).ToString());
    return 1;
  }
  const StepGraph& g = pr->graph;
  ExecuteOptions eo;
  if (const char* s = std::getenv("SMOKE_STEPS")) eo.steps = std::atoi(s);
  if (const char* s = std::getenv("SMOKE_WARMUP")) eo.warmup_steps = std::atoi(s);
  auto ex = MakeGpuExecutor()->Run(g, *w, plan, eo);
  fmt::print("=== {} ({} tasks)\n", c, g.size());
  if (!ex.ok()) {
    fmt::print("error: {}\n", ex.status().ToString());
    return 1;
  }
  const Execution& e = *ex;
  fmt::print("device {} | {} | {} | world {}\n", e.device_name, e.driver, e.libraries,
             e.world_size);
  fmt::print("memory: context {:.2f} GiB, scratch {:.2f} GiB, host pinned {:.2f} / pageable "
             "{:.2f} GiB, nvme {:.2f} GiB\n",
             GiB(e.context_bytes), GiB(e.scratch_bytes), GiB(e.host_pinned_bytes),
             GiB(e.host_pageable_bytes), GiB(e.nvme_bytes));
  fmt::print("peak allocated {:.3f} GiB (sim {:.3f}), reserved {:.3f} GiB (sim {:.3f}), device "
             "used peak {:.3f} GiB (sim reserved+context {:.3f})\n",
             GiB(e.peak_allocated_bytes), GiB(pr->gpu_peak_allocated_bytes),
             GiB(e.peak_reserved_bytes), GiB(pr->gpu_peak_reserved_bytes),
             GiB(e.device_used_peak_bytes), GiB(pr->gpu_total_bytes));
  if (e.out_of_memory) {
    fmt::print("OUT OF MEMORY at task {} ({}): request {} bytes, allocated {:.2f} GiB: {}\n",
               e.oom_task, e.oom_task >= 0 ? TaskName(g, *w, e.oom_task) : "model states",
               e.oom_request_bytes, GiB(e.oom_allocated_bytes), e.oom_message);
    fmt::print("sim says fits={} ({})\n", pd->fits, pd->reason);
    return 0;
  }
  std::string steps;
  for (double s : e.step_s) steps += fmt::format(" {:.4f}", s);
  fmt::print("step s:{} | sim runtime-stack {:.4f}, sim deepspeed-stack {:.4f}\n", steps,
             pr->step_time_s, pd->step_time_s);
  // Per task kind: summed durations.
  struct Sum {
    int n = 0;
    double meas = 0, sim_rt = 0, sim_ds = 0;
  };
  std::map<std::string, Sum> kinds;
  OpClassSeconds fwd_meas, bwd_meas;
  double fwd_sim[3] = {0, 0, 0}, bwd_sim[3] = {0, 0, 0};
  for (TaskId id = 0; id < g.size(); ++id) {
    const Task& t = g.task(id);
    Sum& s = kinds[TaskKindName(t.kind)];
    ++s.n;
    s.meas += e.end_s[id] - e.start_s[id];
    s.sim_rt += pr->durations[id];
    s.sim_ds += pd->durations[id];
    if (!e.op_class.empty() && t.layer >= 0 &&
        (t.kind == TaskKind::kForward || t.kind == TaskKind::kBackward)) {
      const bool fwd = t.kind == TaskKind::kForward;
      OpClassSeconds& m = fwd ? fwd_meas : bwd_meas;
      m.gemm_s += e.op_class[id].gemm_s;
      m.attention_s += e.op_class[id].attention_s;
      m.memory_s += e.op_class[id].memory_s;
      const LayerCost& lc = rt.layer_costs[t.layer];
      double* sim = fwd ? fwd_sim : bwd_sim;
      sim[0] += fwd ? lc.fwd_gemm_s : lc.bwd_gemm_s;
      sim[1] += fwd ? lc.fwd_attention_s : lc.bwd_attention_s;
      sim[2] += fwd ? lc.fwd_memory_s : lc.bwd_memory_s;
    }
  }
  fmt::print("{:<16} {:>5} {:>12} {:>12} {:>12}\n", "task kind", "n", "measured s", "sim rt s",
             "sim ds s");
  for (auto& [k, s] : kinds) {
    fmt::print("{:<16} {:>5} {:>12.5f} {:>12.5f} {:>12.5f}\n", k, s.n, s.meas, s.sim_rt,
               s.sim_ds);
  }
  if (!e.op_class.empty()) {
    fmt::print("op classes (measured / sim runtime-stack), s: fwd gemm {:.5f}/{:.5f} attention "
               "{:.5f}/{:.5f} memory {:.5f}/{:.5f}; bwd gemm {:.5f}/{:.5f} attention "
               "{:.5f}/{:.5f} memory {:.5f}/{:.5f}\n",
               fwd_meas.gemm_s, fwd_sim[0], fwd_meas.attention_s, fwd_sim[1], fwd_meas.memory_s,
               fwd_sim[2], bwd_meas.gemm_s, bwd_sim[0], bwd_meas.attention_s, bwd_sim[1],
               bwd_meas.memory_s, bwd_sim[2]);
  }
  // The longest tasks, for a look.
  std::vector<TaskId> ids(g.size());
  for (TaskId id = 0; id < g.size(); ++id) ids[id] = id;
  std::sort(ids.begin(), ids.end(), [&](TaskId a, TaskId b) {
    return e.end_s[a] - e.start_s[a] > e.end_s[b] - e.start_s[b];
  });
  for (size_t i = 0; i < std::min<size_t>(6, ids.size()); ++i) {
    const TaskId id = ids[i];
    fmt::print("  {:<48} {:>9.5f} s (sim rt {:.5f}) at {:.4f}\n", TaskName(g, *w, id),
               e.end_s[id] - e.start_s[id], pr->durations[id], e.start_s[id]);
  }
  return 0;
}

}  // namespace
}  // namespace dsplan

int main(int argc, char** argv) {
  using namespace dsplan;
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s model:stage:micro_batch:seq:precision[:offload[:gc]] ...\n",
                 argv[0]);
    return 2;
  }
  fmt::print("executor built: {}\n", MakeGpuExecutor()->available());
  auto hw = FindHardwareProfile("h200-measured", DataDir());
  if (!hw.ok()) {
    fmt::print("profile: {}\n", hw.status().ToString());
    return 1;
  }
  int rc = 0;
  for (int i = 1; i < argc; ++i) rc |= RunCase(argv[i], *hw);
  return rc;
}
