#include "cli/sim_commands.h"

#include "cli/common.h"

#include <cstdio>
#include <fstream>
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

int RunSimulateCommand() {
  const SimulateFlags& f = g_sim;
  if (f.gpus < 1 || f.nodes < 1) {
    return Fail(Status::InvalidArgument(fmt::format(
        "--gpus and --nodes must be positive integers (got --gpus {} --nodes {})", f.gpus,
        f.nodes)));
  }
  auto spec = LoadModel(f.model, DataDir());
  if (!spec.ok()) return Fail(spec.status());
  DsConfigContext ctx;
  ctx.nodes = f.nodes;
  ctx.gpus_per_node = f.gpus;
  ctx.micro_batch = f.micro_batch;
  ctx.grad_accum = f.grad_accum;
  ctx.global_batch = f.global_batch;
  ctx.hidden_size = spec->hidden_size;
  if (!f.precision.empty()) {
    auto prec = ParsePrecision(f.precision);
    if (!prec.ok()) return Fail(prec.status());
    ctx.precision = *prec;
  }
  const Lengths len = ResolveLengths(*spec, f.seq_len, f.target_len);
  ctx.seq_len = len.seq_len;
  ctx.target_len = len.target_len;
  ctx.gradient_checkpointing = f.gradient_checkpointing;
  auto attn = ParseAttentionImpl(f.attention);
  if (!attn.ok()) return Fail(attn.status());
  ctx.attention = *attn;
  auto parsed = ParseDsConfigFile(f.ds_config, ctx);
  if (!parsed.ok()) return Fail(parsed.status());
  const Plan& plan = parsed->plan;
  auto w = BuildWorkload(*spec, WorkloadOptionsForPlan(plan));
  if (!w.ok()) return Fail(w.status());
  auto profile =
      FindHardwareProfile(f.hardware.empty() ? DefaultHardwareName() : f.hardware, DataDir());
  if (!profile.ok()) return Fail(profile.status());
  const int64_t threshold = plan.zero.stage == 3 ? plan.zero.stage3_param_persistence_threshold : 0;
  SimulationContext sc = MakeSimulationContext(*w, *profile, plan.precision, threshold);
  SimulateOptions so;
  so.keep_graph = !f.trace.empty();
  auto pred = Simulate(sc, plan, so);
  if (!pred.ok()) return Fail(pred.status());
  pred->warnings.insert(pred->warnings.begin(), parsed->warnings.begin(), parsed->warnings.end());
  if (!f.trace.empty()) {
    std::ofstream out(f.trace);
    if (!out || !(out << ChromeTrace(*pred, *w).dump())) {
      return Fail(Status::IoError(fmt::format("{}: cannot write the trace", f.trace)));
    }
  }
  if (f.json) {
    fmt::print("{}\n", PredictionToJson(*pred, *w).dump(2));
  } else {
    fmt::print("{}", PredictionText(*pred, *w));
    if (!f.trace.empty()) fmt::print("trace      {} (open in https://ui.perfetto.dev)\n", f.trace);
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
