#include "cli/sim_commands.h"

#include "cli/common.h"

#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/hardware_profile.h"
#include "core/model_catalog.h"
#include "core/status.h"
#include "core/units.h"
#include "planner/accuracy.h"
#include "planner/ds_config.h"
#include "planner/check.h"
#include "planner/search.h"
#include "simulator/prediction_report.h"
#include "simulator/simulate.h"
#include "simulator/workload.h"

namespace dsplan {
namespace {


struct AccuracyFlags {
  std::string hardware = "h200-measured";
  std::string calibration;
  std::string markdown;
  bool json = false;
} g_accuracy;

struct SimulateFlags {
  std::string model;
  int gpus = 1;
  int nodes = 1;
  std::string ds_config;
  std::optional<int64_t> seq_len;
  std::optional<int64_t> target_len;
  bool gradient_checkpointing = false;
  std::string attention = "auto";
  std::string hardware;
  bool json = false;
  bool quiet = false;
  std::string trace;
  std::optional<int64_t> micro_batch;
  std::optional<int64_t> grad_accum;
  std::optional<int64_t> global_batch;
  std::string precision;
} g_sim;

}  // namespace

void AddClusterAndWorkloadFlags(CLI::App* cmd, SimulateFlags& f) {
  cmd->add_option("--model", f.model, "Catalog name (dsplan models) or path to a HF config.json")
      ->required();
  cmd->add_option("--gpus", f.gpus, "GPUs per node")->capture_default_str();
  cmd->add_option("--nodes", f.nodes, "Nodes")->capture_default_str();
  cmd->add_option("--seq-len", f.seq_len,
                  "Tokens per sample (T5: encoder length). Default: 512 for T5 and BERT, else "
                  "1024 (capped at a learned position table)");
  cmd->add_option("--target-len", f.target_len, "T5 decoder length (default 128)");
  cmd->add_flag("--gradient-checkpointing", f.gradient_checkpointing,
                "Activation checkpointing of every block (HF, use_reentrant=False)");
  cmd->add_option("--attention", f.attention, "eager, sdpa, or auto (transformers' default)")
      ->capture_default_str();
  cmd->add_option("--hardware", f.hardware,
                  "Hardware profile name (profiles/) or YAML path. Default: h200-measured when "
                  "present, else h200-sxm");
  cmd->add_flag("--json", f.json, "Machine-readable output");
  cmd->add_flag("--quiet", f.quiet, "One line: verdict, peak GPU memory, step time, tokens/s");
}

CLI::App* AddSimulateCommand(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "simulate", "Predict memory and step time of a ds_config.json for a model and cluster");
  AddClusterAndWorkloadFlags(cmd, g_sim);
  cmd->add_option("--ds-config", g_sim.ds_config, "DeepSpeed config file")->required();
  cmd->add_option("--trace", g_sim.trace, "Write the timeline as a Chrome trace (Perfetto)");
  cmd->add_option("--micro-batch", g_sim.micro_batch,
                  "per_device_train_batch_size, for \"auto\" batch keys");
  cmd->add_option("--grad-accum", g_sim.grad_accum, "gradient_accumulation_steps, for \"auto\"");
  cmd->add_option("--global-batch", g_sim.global_batch, "train_batch_size, for \"auto\"");
  cmd->add_option("--precision", g_sim.precision, "bf16, fp16 or fp32, for \"auto\" precision");
  return cmd;
}

std::string QuietLine(const Prediction& p) {
  return fmt::format("{}: peak {} per GPU, step {:.3f} s, {:.0f} tokens/s",
                     p.fits ? "fits" : "does not fit", FormatBytes(static_cast<double>(p.gpu_total_bytes)),
                     p.step_time_s, p.tokens_per_s);
}

// A ds_config.json simulated for a model and cluster: what simulate and check share.
struct ConfigRun {
  ModelSpec spec;
  ParsedDsConfig parsed;
  std::unique_ptr<Workload> workload;
  std::unique_ptr<HardwareProfile> profile;
  Prediction prediction;
};

Result<ConfigRun> SimulateConfig(const SimulateFlags& f, bool keep_graph) {
  if (f.gpus < 1 || f.nodes < 1) {
    return Status::InvalidArgument(fmt::format(
        "--gpus and --nodes must be positive integers (got --gpus {} --nodes {})", f.gpus,
        f.nodes));
  }
  ConfigRun run;
  DSPLAN_ASSIGN_OR_RETURN(run.spec, LoadModel(f.model, DataDir()));
  DsConfigContext ctx;
  ctx.nodes = f.nodes;
  ctx.gpus_per_node = f.gpus;
  ctx.micro_batch = f.micro_batch;
  ctx.grad_accum = f.grad_accum;
  ctx.global_batch = f.global_batch;
  ctx.hidden_size = run.spec.hidden_size;
  if (!f.precision.empty()) {
    DSPLAN_ASSIGN_OR_RETURN(ctx.precision, ParsePrecision(f.precision));
  }
  const Lengths len = ResolveLengths(run.spec, f.seq_len, f.target_len);
  ctx.seq_len = len.seq_len;
  ctx.target_len = len.target_len;
  ctx.gradient_checkpointing = f.gradient_checkpointing;
  DSPLAN_ASSIGN_OR_RETURN(ctx.attention, ParseAttentionImpl(f.attention));
  DSPLAN_ASSIGN_OR_RETURN(run.parsed, ParseDsConfigFile(f.ds_config, ctx));
  const Plan& plan = run.parsed.plan;
  DSPLAN_ASSIGN_OR_RETURN(Workload w, BuildWorkload(run.spec, WorkloadOptionsForPlan(plan)));
  run.workload = std::make_unique<Workload>(std::move(w));
  DSPLAN_ASSIGN_OR_RETURN(
      HardwareProfile hw,
      FindHardwareProfile(f.hardware.empty() ? DefaultHardwareName() : f.hardware, DataDir()));
  run.profile = std::make_unique<HardwareProfile>(std::move(hw));
  const int64_t threshold = plan.zero.stage == 3 ? plan.zero.stage3_param_persistence_threshold : 0;
  SimulationContext sc = MakeSimulationContext(*run.workload, *run.profile, plan.precision, threshold);
  SimulateOptions so;
  so.keep_graph = keep_graph;
  DSPLAN_ASSIGN_OR_RETURN(run.prediction, Simulate(sc, plan, so));
  run.prediction.warnings.insert(run.prediction.warnings.begin(), run.parsed.warnings.begin(),
                                 run.parsed.warnings.end());
  return run;
}

int RunSimulateCommand() {
  const SimulateFlags& f = g_sim;
  auto run = SimulateConfig(f, !f.trace.empty());
  if (!run.ok()) return Fail(run.status());
  const Prediction& pred = run->prediction;
  const Workload& w = *run->workload;
  if (!f.trace.empty()) {
    std::ofstream out(f.trace);
    if (!out || !(out << ChromeTrace(pred, w).dump())) {
      return Fail(Status::IoError(fmt::format("{}: cannot write the trace", f.trace)));
    }
  }
  if (f.json) {
    fmt::print("{}\n", PredictionToJson(pred, w).dump(2));
  } else if (f.quiet) {
    fmt::print("{}\n", QuietLine(pred));
  } else {
    fmt::print("{}", PredictionText(pred, w));
    if (!f.trace.empty()) fmt::print("trace      {} (open in https://ui.perfetto.dev)\n", f.trace);
  }
  return 0;
}

namespace {
SimulateFlags g_check;
}  // namespace

CLI::App* AddCheckCommand(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "check", "Judge an existing ds_config.json: fits or not and why, speed, wasted keys, and "
               "the plan dsplan would pick instead");
  AddClusterAndWorkloadFlags(cmd, g_check);
  cmd->add_option("--ds-config", g_check.ds_config, "DeepSpeed config file")->required();
  cmd->add_option("--micro-batch", g_check.micro_batch, "per_device_train_batch_size, for \"auto\"");
  cmd->add_option("--grad-accum", g_check.grad_accum, "gradient_accumulation_steps, for \"auto\"");
  cmd->add_option("--global-batch", g_check.global_batch, "train_batch_size, for \"auto\"");
  cmd->add_option("--precision", g_check.precision, "bf16, fp16 or fp32, for \"auto\" precision");
  return cmd;
}

int RunCheckCommand() {
  const SimulateFlags& f = g_check;
  auto run = SimulateConfig(f, false);
  if (!run.ok()) return Fail(run.status());
  const Plan& plan = run->parsed.plan;
  const Prediction& pred = run->prediction;
  std::vector<std::string> warnings = pred.warnings;
  for (const std::string& w : CheckPlan(plan, pred, *run->profile)) warnings.push_back(w);
  // What dsplan would pick for the same model, cluster, lengths and global batch.
  PlannerRequest r;
  r.spec = run->spec;
  r.nodes = plan.nodes;
  r.gpus_per_node = plan.gpus_per_node;
  r.profile = run->profile.get();
  r.seq_len = plan.seq_len;
  r.target_len = plan.target_len;
  r.attention = plan.attention;
  r.global_batch = plan.train_batch();
  r.precision = plan.precision;
  if (plan.zero.offload_optimizer.device == OffloadDevice::kNvme ||
      plan.zero.offload_param.device == OffloadDevice::kNvme) {
    r.nvme_bytes = std::max<int64_t>(pred.nvme_bytes_per_node, 1);
    r.nvme_path = plan.zero.offload_optimizer.nvme_path.empty() ? plan.zero.offload_param.nvme_path
                                                                  : plan.zero.offload_optimizer.nvme_path;
  }
  auto better = RunPlanner(r);
  if (!better.ok()) return Fail(better.status());
  const ScoredPlan* alt = better->ranked.empty() ? nullptr : &better->ranked.front();
  const double speedup = (alt && pred.tokens_per_s > 0 && pred.fits)
                             ? alt->prediction.tokens_per_s / pred.tokens_per_s
                             : 0;
  if (f.quiet) {
    fmt::print("{}{}\n", QuietLine(pred),
               alt && speedup > 1.02 ? fmt::format("; dsplan's plan is {:.2f}x faster", speedup) : "");
    return 0;
  }
  if (f.json) {
    nlohmann::json j = PredictionToJson(pred, *run->workload);
    j["warnings"] = warnings;
    if (alt) {
      j["alternative"] = {{"summary", PlanSummary(alt->plan)},
                          {"micro_batch", alt->plan.micro_batch},
                          {"grad_accum", alt->plan.grad_accum},
                          {"tokens_per_s", alt->prediction.tokens_per_s},
                          {"peak_total_bytes", alt->prediction.gpu_total_bytes},
                          {"speedup", speedup},
                          {"ds_config", EmitDsConfig(alt->plan, EmitStyle::kExplicit)}};
    } else {
      j["alternative"] = nullptr;
    }
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print("{}: {}\n", f.ds_config, PlanSummary(plan));
  fmt::print("  micro-batch {} x accumulation {} x {} GPU(s) = global batch {}\n", plan.micro_batch,
             plan.grad_accum, plan.world_size(), plan.train_batch());
  fmt::print("verdict: {}\n", pred.fits ? "fits" : "does NOT fit: " + pred.reason);
  fmt::print("predicted: peak {} per GPU (allocated {}), host {} per node, step {:.3f} s, {:.0f} "
             "tokens/s, MFU {:.1f}% ({})\n",
             FormatBytes(static_cast<double>(pred.gpu_total_bytes)),
             FormatBytes(static_cast<double>(pred.gpu_peak_allocated_bytes)),
             FormatBytes(static_cast<double>(pred.host_peak_bytes_per_node)), pred.step_time_s,
             pred.tokens_per_s, 100 * pred.mfu, pred.profile_name);
  for (const std::string& w : warnings) fmt::print("warning: {}\n", w);
  if (!alt) {
    fmt::print("dsplan finds no plan that fits this model and cluster at global batch {}\n",
               plan.train_batch());
  } else if (!pred.fits) {
    fmt::print("dsplan would pick: {}, micro-batch {} x {} ({:.0f} tokens/s, peak {})\n",
               PlanSummary(alt->plan), alt->plan.micro_batch, alt->plan.grad_accum,
               alt->prediction.tokens_per_s,
               FormatBytes(static_cast<double>(alt->prediction.gpu_total_bytes)));
  } else if (speedup > 1.02) {
    fmt::print("dsplan would pick: {}, micro-batch {} x {}: {:.0f} tokens/s, {:.2f}x faster (peak "
               "{})\n",
               PlanSummary(alt->plan), alt->plan.micro_batch, alt->plan.grad_accum,
               alt->prediction.tokens_per_s, speedup,
               FormatBytes(static_cast<double>(alt->prediction.gpu_total_bytes)));
  } else {
    fmt::print("this is as fast as the best plan dsplan finds ({:.0f} tokens/s)\n",
               alt->prediction.tokens_per_s);
  }
  return 0;
}

CLI::App* AddAccuracyCommand(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "accuracy", "Simulate every run of a calibration file and compare with what was measured");
  cmd->add_option("--hardware", g_accuracy.hardware, "Hardware profile name or YAML path")
      ->capture_default_str();
  cmd->add_option("--calibration", g_accuracy.calibration,
                  "Calibration JSONL (default: tests/fixtures/calibration/deepspeed-h200.jsonl)");
  cmd->add_option("--markdown", g_accuracy.markdown, "Also write the report as Markdown here");
  cmd->add_flag("--json", g_accuracy.json, "Machine-readable output");
  return cmd;
}

int RunAccuracyCommand() {
  const std::string path = g_accuracy.calibration.empty()
                               ? DataDir() + "/tests/fixtures/calibration/deepspeed-h200.jsonl"
                               : g_accuracy.calibration;
  auto profile = FindHardwareProfile(g_accuracy.hardware, DataDir());
  if (!profile.ok()) return Fail(profile.status());
  auto runs = LoadCalibration(path);
  if (!runs.ok()) return Fail(runs.status());
  auto summary = EvaluateCalibration(*runs, *profile);
  if (!summary.ok()) return Fail(summary.status());
  const std::string shown = g_accuracy.calibration.empty()
                                ? "tests/fixtures/calibration/deepspeed-h200.jsonl"
                                : g_accuracy.calibration;
  const std::string md = AccuracyMarkdown(*summary, *profile, shown);
  if (!g_accuracy.markdown.empty()) {
    std::ofstream out(g_accuracy.markdown);
    if (!out || !(out << md)) {
      return Fail(Status::IoError(fmt::format("{}: cannot write the report", g_accuracy.markdown)));
    }
  }
  if (g_accuracy.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const AccuracyRow& r : summary->rows) {
      rows.push_back({{"id", r.run.id},
                      {"wrapper", r.wrapper},
                      {"fits", r.fits},
                      {"measured_peak_alloc_mib", r.run.peak_alloc_mib},
                      {"predicted_peak_alloc_mib", r.peak_alloc_mib},
                      {"alloc_error", r.alloc_error},
                      {"measured_peak_reserved_mib", r.run.peak_reserved_mib},
                      {"predicted_peak_reserved_mib", r.peak_reserved_mib},
                      {"reserved_error", r.reserved_error},
                      {"measured_step_s", r.run.step_s},
                      {"predicted_step_s", r.step_s},
                      {"step_error", r.step_error},
                      {"peak_at", r.peak_at}});
    }
    nlohmann::json out = {{"hardware", profile->name},
                          {"rows", rows},
                          {"alloc_mean_abs_error", summary->alloc_mean_abs},
                          {"alloc_max_abs_error", summary->alloc_max_abs},
                          {"reserved_mean_abs_error", summary->reserved_mean_abs},
                          {"step_mean_abs_error", summary->step_mean_abs},
                          {"step_max_abs_error", summary->step_max_abs},
                          {"verdicts_right", summary->verdicts_right}};
    fmt::print("{}\n", out.dump(2));
    return 0;
  }
  fmt::print("{}", md);
  return 0;
}

}  // namespace dsplan
