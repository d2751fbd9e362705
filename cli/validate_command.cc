#include "cli/validate_command.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "cli/config_run.h"
#include "core/units.h"
#include "planner/search.h"
#include "runtime/executor.h"
#include "runtime/validation.h"

#ifndef DSPLAN_VERSION
#define DSPLAN_VERSION "0.0.0"
#endif
#ifndef DSPLAN_GIT_HASH
#define DSPLAN_GIT_HASH "unknown"
#endif

namespace dsplan {
namespace {

// Exit code of a run whose measurement misses the thresholds (or that ran out of memory when
// the prediction said it fits).
constexpr int kExitValidationFailed = 4;

struct ValidateFlags {
  SimulateFlags sim;
  int steps = 5;
  int warmup = 2;
  int cpu_threads = 0;
  std::string nvme_path;
  std::string calibrate;
  std::string json_out;
  double time_threshold = 0.10;
  double memory_threshold = 0.05;
  bool no_op_profile = false;
} g_val;

Status CheckFlags(const ValidateFlags& f) {
  if (f.steps < 1 || f.steps > 1000) {
    return Status::InvalidArgument(
        fmt::format("--steps must be between 1 and 1000 (got {})", f.steps));
  }
  if (f.warmup < 0 || f.warmup > 100) {
    return Status::InvalidArgument(
        fmt::format("--warmup must be between 0 and 100 (got {})", f.warmup));
  }
  if (!(f.time_threshold > 0 && f.time_threshold < 10) ||
      !(f.memory_threshold > 0 && f.memory_threshold < 10)) {
    return Status::InvalidArgument(fmt::format(
        "--time-threshold and --memory-threshold are fractions such as 0.10 (got {} and {})",
        f.time_threshold, f.memory_threshold));
  }
  if (f.cpu_threads < 0) {
    return Status::InvalidArgument(
        fmt::format("--cpu-threads must be 0 (automatic) or positive (got {})", f.cpu_threads));
  }
  if (!f.calibrate.empty()) {
    // Fail before the run, not after it, and create nothing: the folder must exist and be
    // writable (and the file, when it exists).
    const std::filesystem::path path(f.calibrate);
    const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : ".";
    const bool file_ok = !std::filesystem::exists(path) || access(path.c_str(), W_OK) == 0;
    if (!std::filesystem::is_directory(dir) || access(dir.c_str(), W_OK) != 0 || !file_ok) {
      return Status::IoError(fmt::format(
          "--calibrate {}: cannot write there (the folder must exist and be writable)",
          f.calibrate));
    }
  }
  return Status();
}

std::string Header(const ConfigRun& run, const Prediction& ds_pred, const Execution& e,
                   int threads) {
  const Plan& plan = run.parsed.plan;
  const Workload& w = *run.workload;
  std::string out;
  out += "# dsplan validate\n";
  out += fmt::format("# model     {} ({} parameters), micro-batch {} x accumulation {}, {} tokens "
                     "per micro-batch\n",
                     run.spec.name, FormatCount(static_cast<double>(w.params)), plan.micro_batch,
                     plan.grad_accum, w.tokens);
  out += fmt::format("# plan      {} on {} GPU(s)\n", PlanSummary(plan), plan.world_size());
  out += fmt::format("# device    {}, {}; {}\n", e.device_name,
                     FormatBytes(static_cast<double>(e.device_total_bytes)), e.driver);
  out += fmt::format("# libraries {}\n", e.libraries);
  out += fmt::format("# build     dsplan {} ({}), CPU optimizer threads {}\n", DSPLAN_VERSION,
                     DSPLAN_GIT_HASH, threads);
  out += fmt::format("# predicted with profile {} [{}], software stack {}\n",
                     run.prediction.profile_name, run.prediction.profile_sources,
                     SoftwareStackName(SoftwareStack::kDsplanRuntime));
  out += fmt::format("# the same plan under PyTorch + DeepSpeed is predicted at {:.4f} s per step\n",
                     ds_pred.step_time_s);
  if (!e.step_s.empty()) {
    const auto [mn, mx] = std::minmax_element(e.step_s.begin(), e.step_s.end());
    out += fmt::format("# steps     {} measured (min {:.4f} s, max {:.4f} s)\n", e.step_s.size(),
                       *mn, *mx);
  }
  return out;
}

}  // namespace

CLI::App* AddValidateCommand(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "validate",
      "Run the plan's training step on this machine's GPU(s) and compare with the prediction, "
      "task class by task class (exit 0 pass, 4 fail)");
  AddClusterAndWorkloadFlags(cmd, g_val.sim);
  AddDsConfigFlags(cmd, g_val.sim);
  cmd->add_option("--steps", g_val.steps, "Measured steps (after the warm-up)")
      ->capture_default_str();
  cmd->add_option("--warmup", g_val.warmup, "Warm-up steps, not measured")->capture_default_str();
  cmd->add_option("--trace", g_val.sim.trace,
                  "Write measured and predicted timelines as a Chrome trace (Perfetto)");
  cmd->add_option("--calibrate", g_val.calibrate,
                  "Write a hardware profile corrected from the measured task times to this YAML");
  cmd->add_option("--time-threshold", g_val.time_threshold,
                  "Largest step-time error that passes, as a fraction")
      ->capture_default_str();
  cmd->add_option("--memory-threshold", g_val.memory_threshold,
                  "Largest peak-memory error that passes, as a fraction")
      ->capture_default_str();
  cmd->add_option("--cpu-threads", g_val.cpu_threads,
                  "CPU optimizer threads per rank (default: the profile's cores per GPU, as "
                  "predicted)");
  cmd->add_option("--nvme-path", g_val.nvme_path,
                  "Folder for NVMe swap files (default: the ds_config's nvme_path)");
  cmd->add_option("--json-out", g_val.json_out,
                  "Also write the JSON report to this file (the text report still prints)");
  cmd->add_flag("--no-op-profile", g_val.no_op_profile,
                "Skip the extra step that times each op (no GEMM/attention/memory split)");
  return cmd;
}

int RunValidateCommand() {
  const ValidateFlags& f = g_val;
  if (Status s = CheckFlags(f); !s.ok()) return Fail(s);
  auto run = SimulateConfig(f.sim, true, SoftwareStack::kDsplanRuntime);
  if (!run.ok()) return Fail(run.status());
  auto ds_run = SimulateConfig(f.sim, false, SoftwareStack::kPyTorchDeepSpeed);
  if (!ds_run.ok()) return Fail(ds_run.status());
  const Plan& plan = run->parsed.plan;
  const Prediction& pred = run->prediction;
  const Workload& w = *run->workload;
  if (!GpuExecutorBuilt()) {
    return Fail(Status::Unsupported(
        "this dsplan was built without CUDA, so it cannot run the plan: install the CUDA toolkit "
        "(nvcc) and rebuild with scripts/setup.sh. `dsplan simulate` gives the prediction "
        "without a GPU."));
  }
  ExecuteOptions eo;
  eo.steps = f.steps;
  eo.warmup_steps = f.warmup;
  eo.nvme_path = f.nvme_path;
  eo.profile_ops = !f.no_op_profile;
  // The CPU optimizer gets the threads the prediction assumed, unless told otherwise.
  const int hw_threads = std::max(1, run->profile->host.cores / std::max(1, plan.gpus_per_node));
  eo.cpu_threads = f.cpu_threads > 0 ? f.cpu_threads : hw_threads;
  auto exec = ExecuteOnGpu(pred.graph, w, plan, eo);
  if (!exec.ok()) return Fail(exec.status());

  ValidationThresholds th;
  th.time = f.time_threshold;
  th.memory = f.memory_threshold;
  const std::vector<LayerCost> layer_costs =
      CostModel(*run->profile, plan.precision, SoftwareStack::kDsplanRuntime).Layers(w);
  const ValidationReport report = CompareExecution(pred, w, layer_costs, *exec, th);

  if (!f.sim.trace.empty() && !exec->out_of_memory) {
    std::ofstream out(f.sim.trace);
    if (!out || !(out << ValidationTrace(pred, w, *exec).dump())) {
      return Fail(Status::IoError(fmt::format("{}: cannot write the trace", f.sim.trace)));
    }
  }
  if (!f.calibrate.empty()) {
    const std::string method = fmt::format(
        "dsplan validate: {} {} micro-batch {}, {} steps on {}, {}", run->spec.name,
        PlanSummary(plan), plan.micro_batch, f.steps, exec->device_name, DSPLAN_VERSION);
    auto cal = CalibratedProfile(*run->profile, report, method);
    if (!cal.ok()) return Fail(cal.status());
    if (Status s = WriteHardwareProfile(*cal, f.calibrate); !s.ok()) return Fail(s);
  }

  // Throughput and MFU of the measured step; MFU counts the model's forward and backward FLOPs,
  // not the recomputation, against the dtype's dense peak.
  const double step = report.measured_step_s;
  const double tokens_per_s = step > 0 ? static_cast<double>(plan.grad_accum) * w.tokens / step : 0;
  const double tflops = step > 0 ? (w.fwd_flops + w.bwd_flops) * plan.grad_accum / step / 1e12 : 0;
  const double peak = CostModel(*run->profile, plan.precision).PeakFlops(plan.precision);
  const double mfu = peak > 0 ? tflops * 1e12 / peak : 0;

  nlohmann::json j = ValidationToJson(report, *exec);
  {
    j["seq_len"] = plan.seq_len;
    j["target_len"] = plan.target_len;
    j["gradient_checkpointing"] = plan.gradient_checkpointing;
    j["measured_tokens_per_s_per_gpu"] = tokens_per_s;
    j["measured_tflops_per_gpu"] = tflops;
    j["mfu"] = mfu;
    j["model"] = run->spec.name;
    j["plan"] = PlanSummary(plan);
    j["micro_batch"] = plan.micro_batch;
    j["grad_accum"] = plan.grad_accum;
    j["profile"] = pred.profile_name;
    j["software_stack"] = SoftwareStackName(SoftwareStack::kDsplanRuntime);
    j["predicted_fits"] = pred.fits;
    j["deepspeed_predicted_step_s"] = ds_run->prediction.step_time_s;
  }
  if (!f.json_out.empty()) {
    std::ofstream out(f.json_out);
    if (!out || !(out << j.dump(2) << "\n")) {
      return Fail(Status::IoError(fmt::format("--json-out {}: cannot write the report", f.json_out)));
    }
  }
  if (f.sim.json) {
    fmt::print("{}\n", j.dump(2));
  } else if (f.sim.quiet) {
    fmt::print("{}\n", report.verdict);
  } else {
    fmt::print("{}", Header(*run, ds_run->prediction, *exec, eo.cpu_threads));
    if (!exec->out_of_memory && report.measured_step_s > 0) {
      fmt::print("# measured  {:.0f} tokens/s per GPU, {:.0f} TFLOP/s per GPU, MFU {:.1f}% of {:.0f} "
                 "TFLOP/s ({})\n",
                 tokens_per_s, tflops, 100 * mfu, peak / 1e12,
                 SourceKindName(run->profile->gpu.peak_flops_bf16.source.kind));
    }
    fmt::print("{}", ValidationTable(report));
    if (!f.sim.trace.empty() && !exec->out_of_memory) {
      fmt::print("trace      {} (open in https://ui.perfetto.dev)\n", f.sim.trace);
    }
    if (!f.calibrate.empty()) fmt::print("calibrated profile written to {}\n", f.calibrate);
  }
  return report.pass ? 0 : kExitValidationFailed;
}

}  // namespace dsplan
