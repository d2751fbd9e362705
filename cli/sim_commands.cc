#include "cli/sim_commands.h"

#include "cli/common.h"
#include "core/text.h"
#include "cli/config_run.h"
#include "core/output_file.h"

#include <cstdio>
#include <fstream>
#include <iterator>
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
  std::vector<std::string> calibration;
  std::string markdown;
  bool json = false;
  bool unseen_families = false;
  bool host_pipeline = false;
};

// simulate's options: a config run's, and whose software stack runs the step.
struct SimulateCommandFlags {
  SimulateFlags sim;
  std::string stack = "pytorch-deepspeed";
};

int RunSimulate(const SimulateFlags& f, const std::string& stack);
int RunCheck(const SimulateFlags& f);
int RunAccuracy(const AccuracyFlags& f);

}  // namespace

DeclaredCommand AddSimulateCommand(CLI::App& app) {
  auto flags = std::make_shared<SimulateCommandFlags>();
  SimulateFlags& sim = flags->sim;
  CLI::App* cmd = app.add_subcommand(
      "simulate", "Predict memory and step time of a ds_config.json for a model and cluster");
  AddClusterAndWorkloadFlags(cmd, sim);
  AddDsConfigFlags(cmd, sim);
  AddRankFlag(cmd, sim);
  cmd->add_option("--trace", sim.trace, "Write the timeline as a Chrome trace (Perfetto)");
  cmd->add_flag("--force", sim.force, "Replace an existing --trace file");
  cmd->add_flag("--segments", sim.segments,
                "List every segment the caching-allocator replay reserves, with the task that "
                "asked for it, over the two replayed steps (to set beside a real run's "
                "torch.cuda.memory._record_memory_history: docs/simulator.md)");
  cmd->add_option("--stack", flags->stack,
                  "Whose software runs the step: pytorch-deepspeed (what users run) or "
                  "dsplan-runtime (what dsplan validate executes and compares with)")
      ->capture_default_str();
  cmd->add_flag("--host-pipeline", sim.host_pipeline,
                "Experimental: schedule the host that issues the kernels as a pipeline stage that "
                "runs ahead of the GPU between waits, instead of each layer taking the longer of "
                "its kernels and its host work (docs/research/host-pipeline.md)");
  cmd->add_flag("--fake-process-group", sim.fake_process_group,
                "Predict the rank as run alone on one GPU under torch.distributed's fake backend "
                "(a world size emulated on one GPU, as dsplan's validation harness does): no "
                "collective crosses a link; all-gathers copy locally (docs/deepspeed-facts.md)");
  return {cmd, [flags] { return RunSimulate(flags->sim, flags->stack); }};
}

std::string QuietLine(const Prediction& p) {
  const char* v = p.verdict == MemoryVerdict::kFits     ? "fits"
                  : p.verdict == MemoryVerdict::kAtRisk ? "at risk"
                                                        : "does not fit";
  return fmt::format("{}: peak {} per GPU ({} spare), step {:.3f} s, {:.0f} tokens/s", v,
                     FormatBytes(static_cast<double>(p.gpu_total_bytes + p.gpu_nccl_bytes)),
                     FormatBytes(static_cast<double>(p.gpu_spare_bytes)), p.step_time_s,
                     p.tokens_per_s);
}

// What each "auto" key of the config became, and where from.
nlohmann::json AutoValuesJson(const ParsedDsConfig& parsed) {
  nlohmann::json a = nlohmann::json::array();
  for (const AutoValue& v : parsed.auto_values) {
    a.push_back({{"key", v.key}, {"value", v.value}, {"source", v.source},
                 {"from_default", v.from_default}});
  }
  return a;
}

std::string AutoValuesText(const ParsedDsConfig& parsed) {
  std::string out;
  for (const AutoValue& v : parsed.auto_values) {
    out += fmt::format("  {} = {}  ({}{})\n", v.key, v.value, v.source,
                       v.from_default ? "; a default, not a flag" : "");
  }
  return out;
}

namespace {

int RunSimulate(const SimulateFlags& f, const std::string& stack) {
  if (stack != "pytorch-deepspeed" && stack != "dsplan-runtime") {
    return Fail(Status::InvalidArgument(fmt::format(
        "--stack {}: valid are pytorch-deepspeed (PyTorch eager + DeepSpeed) and "
        "dsplan-runtime (dsplan validate's executor)",
        Quote(stack))));
  }
  auto run = SimulateConfig(f, !f.trace.empty(),
                            stack == "dsplan-runtime" ? SoftwareStack::kDsplanRuntime
                                                        : SoftwareStack::kPyTorchDeepSpeed);
  if (!run.ok()) return Fail(run.status());
  const Prediction& pred = run->prediction;
  const Workload& w = *run->workload;
  if (!f.trace.empty()) {
    const OutputPolicy policy{{f.ds_config, f.model, f.model + "/config.json", f.hardware},
                              f.force, "--trace"};
    if (Status s = WriteOutputFile(f.trace, JsonText(ChromeTrace(pred, w), -1), policy);
        !s.ok()) {
      return Fail(s);
    }
  }
  if (f.json) {
    nlohmann::json j = PredictionToJson(pred, w);
    j["schema"] = "dsplan/simulate";
    j["schema_version"] = 1;
    j["dsplan_version"] = DSPLAN_VERSION;
    j["auto_values"] = AutoValuesJson(run->parsed);
    j["malloc_heap"] = run->parsed.plan.malloc_heap;  // --malloc-heap: kMallocHeapEnv assumed
    fmt::print("{}\n", JsonText(j));
  } else if (f.quiet) {
    fmt::print("{}\n", QuietLine(pred));
  } else {
    fmt::print("{}", PredictionText(pred, w));
    auto note = MallocHeapNote(*run->simulator, run->parsed.plan, pred);
    if (!note.ok()) return Fail(note.status());
    if (!note->empty()) fmt::print("note       {}\n", *note);
    if (!f.trace.empty()) fmt::print("trace      {} (open in https://ui.perfetto.dev)\n", f.trace);
  }
  return 0;
}

}  // namespace

DeclaredCommand AddCheckCommand(CLI::App& app) {
  auto flags = std::make_shared<SimulateFlags>();
  SimulateFlags& f = *flags;
  CLI::App* cmd = app.add_subcommand(
      "check", "Judge an existing ds_config.json: fits or not and why, speed, wasted keys, and "
               "the plan dsplan would pick instead");
  AddClusterAndWorkloadFlags(cmd, f);
  AddDsConfigFlags(cmd, f);
  AddRankFlag(cmd, f);
  return {cmd, [flags] { return RunCheck(*flags); }};
}

namespace {

int RunCheck(const SimulateFlags& f) {
  auto run = SimulateConfig(f, false);
  if (!run.ok()) return Fail(run.status());
  const Plan& plan = run->parsed.plan;
  const Prediction& pred = run->prediction;
  std::vector<std::string> warnings = pred.warnings;
  for (const std::string& w : CheckPlan(plan, pred, *run->profile)) warnings.push_back(w);
  // A loop that keeps the step's output into the next forward: said only when the config's room
  // beyond its band and headroom does not cover it (the plan command always says it).
  if (pred.fits && KeptOutputBytes(*run->workload, plan).MostBytes() >
                        static_cast<double>(pred.GpuRoomBeyondBandBytes())) {
    warnings.push_back(KeptOutputNote(*run->workload, plan, pred));
  }
  // Likewise a model built outside deepspeed.zero.Init (ZeRO-3 whose gathers copy).
  if (pred.fits) {
    bool short_of_room = false;
    auto note = ZeroInitNote(*run->simulator, plan, pred, f.ds_config, &short_of_room);
    if (!note.ok()) return Fail(note.status());
    if (short_of_room) warnings.push_back(*note);
  }
  {
    auto note = SingleGpuStage3Note(*run->simulator, plan, pred);
    if (!note.ok()) return Fail(note.status());
    if (!note->empty()) warnings.push_back(*note);
  }
  {
    auto note = MallocHeapNote(*run->simulator, plan, pred);
    if (!note.ok()) return Fail(note.status());
    if (!note->empty()) warnings.push_back(*note);
  }
  // What dsplan would pick for the same model, cluster, lengths and global batch.
  PlannerRequest r;
  r.spec = run->spec;
  r.nodes = plan.nodes;
  r.gpus_per_node = plan.gpus_per_node;
  r.profile = run->profile;
  r.simulator = run->simulator.get();  // the config's workloads and contexts, reused
  // The config's lengths, attention and precision; the micro-batch and checkpointing are the
  // search's to choose.
  r.shape = plan.shape();
  r.PinPrecision(plan.precision);
  r.global_batch = plan.train_batch();
  if (!f.headroom.empty()) {
    auto h = ParseHeadroom(f.headroom);
    if (!h.ok()) return Fail(h.status());
    r.headroom = *h;
  }
  // The same host and NVMe limits the config was judged against (--host-memory, --nvme).
  if (!f.host_memory.empty()) r.host_memory_bytes = pred.host_capacity_bytes_per_node;
  if (!f.nvme.empty()) {
    auto b = ParseSize(f.nvme, "--nvme");
    if (b.ok()) r.nvme_bytes = *b;
  }
  if (r.nvme_bytes <= 0 && (plan.zero.offload_optimizer.device == OffloadDevice::kNvme ||
                            plan.zero.offload_param.device == OffloadDevice::kNvme)) {
    r.nvme_bytes = std::max<int64_t>(pred.nvme_bytes_per_node, 1);
    r.nvme_path = plan.zero.offload_optimizer.nvme_path.empty() ? plan.zero.offload_param.nvme_path
                                                                  : plan.zero.offload_optimizer.nvme_path;
  }
  auto better = RunPlanner(r);
  if (!better.ok()) return Fail(better.status());
  const ScoredPlan* alt = better->ranked.empty() ? nullptr : &better->ranked.front();
  // A config that would not train (DeepSpeed's FusedAdam skipping its partition) is not a
  // working plan to compare speeds with: like one that does not fit, it gets the alternative.
  const bool works = pred.fits && !pred.facts.FusedAdamSkipsUpdate();
  const double speedup = (alt && pred.tokens_per_s > 0 && works)
                             ? alt->prediction.tokens_per_s / pred.tokens_per_s
                             : 0;
  if (f.quiet) {
    fmt::print("{}{}\n", QuietLine(pred),
               alt && speedup > 1.02 ? fmt::format("; dsplan's plan is {:.2f}x faster", speedup) : "");
    return 0;
  }
  if (f.json) {
    nlohmann::json j = PredictionToJson(pred, *run->workload);
    j["schema"] = "dsplan/check";
    j["schema_version"] = 1;
    j["dsplan_version"] = DSPLAN_VERSION;
    j["warnings"] = warnings;
    j["auto_values"] = AutoValuesJson(run->parsed);
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
    fmt::print("{}\n", JsonText(j));
    return 0;
  }
  fmt::print("{}: {}\n", f.ds_config, PlanSummary(plan));
  fmt::print("  micro-batch {} x accumulation {} x {} GPU(s) = global batch {}\n", plan.micro_batch,
             plan.grad_accum, plan.world_size(), plan.train_batch());
  if (!run->parsed.auto_values.empty()) {
    fmt::print("\"auto\" values, as the HF Trainer would fill them:\n{}",
               AutoValuesText(run->parsed));
  }
  fmt::print("verdict: {}\n", VerdictText(pred));
  fmt::print("memory: peak {} per GPU (reserved {}, allocated {}, context {}{}) of {}; error band "
             "+{:.0f}% of reserved + {} ({}); headroom {} (--headroom)\n",
             FormatBytes(static_cast<double>(pred.gpu_total_bytes + pred.gpu_nccl_bytes)),
             FormatBytes(static_cast<double>(pred.gpu_peak_reserved_bytes)),
             FormatBytes(static_cast<double>(pred.gpu_peak_allocated_bytes)),
             FormatBytes(static_cast<double>(pred.gpu_context_bytes)),
             pred.gpu_nccl_bytes > 0
                 ? ", NCCL " + FormatBytes(static_cast<double>(pred.gpu_nccl_bytes)) + " estimated"
                 : std::string(),
             FormatBytes(static_cast<double>(pred.gpu_capacity_bytes)),
             100 * pred.memory_band.upper,
             FormatBytes(static_cast<double>(pred.memory_band.upper_bytes)),
             pred.memory_band.basis, FormatBytes(static_cast<double>(pred.gpu_headroom_bytes)));
  if (!pred.rank_peaks.empty()) {
    // ZeRO-1/2 ranks differ: say which rank the allocated peak is and that the rest is the
    // most any rank needs.
    fmt::print(
        "ranks: allocated is rank {}'s, the most of the {} ranks; reserved and the verdict "
        "are the most any rank needs (--rank R for one rank)\n",
        pred.facts.rank, plan.dp_size());
  } else if (pred.facts.rank == kRankClass) {
    fmt::print("ranks: one graph bounds all {} ranks (each rank-dependent buffer at its largest)\n",
               plan.dp_size());
  }
  fmt::print("predicted: host {} per node, step {:.3f} s, {:.0f} tokens/s, MFU {:.1f}% of the "
             "dense {} peak {:.0f} TFLOP/s ({})\n",
             FormatBytes(static_cast<double>(pred.host_peak_bytes_per_node)), pred.step_time_s,
             pred.tokens_per_s, 100 * pred.mfu, PrecisionName(plan.precision),
             pred.mfu_peak_flops / 1e12, pred.profile_name);
  fmt::print("step time band: {:.3f}-{:.3f} s ({:.2f}-{:.2f}x; {})\n",
             pred.time_band.low * pred.step_time_s, pred.time_band.high * pred.step_time_s,
             pred.time_band.low, pred.time_band.high, pred.time_band.basis);
  for (const std::string& w : warnings) fmt::print("warning: {}\n", w);
  if (!alt) {
    fmt::print("dsplan finds no plan that fits this model and cluster at global batch {}\n",
               plan.train_batch());
  } else if (!works) {
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

}  // namespace

DeclaredCommand AddAccuracyCommand(CLI::App& app) {
  auto flags = std::make_shared<AccuracyFlags>();
  AccuracyFlags& f = *flags;
  CLI::App* cmd = app.add_subcommand(
      "accuracy", "Simulate every run of a calibration file and compare with what was measured");
  cmd->add_option("--hardware", f.hardware, "Hardware profile name or YAML path")
      ->capture_default_str();
  cmd->add_option("--calibration", f.calibration,
                  "Calibration JSONL; repeat it to report several record files as one set "
                  "(default: tests/fixtures/calibration/deepspeed-h200.jsonl)");
  cmd->add_option("--markdown", f.markdown, "Also write the report as Markdown here");
  cmd->add_flag("--json", f.json, "Machine-readable output");
  cmd->add_flag("--unseen-families", f.unseen_families,
                "Predict each run as for a model family whose blocks were never measured "
                "(leave-one-family-out: per-op host costs, the forward scaled from the other families' "
                "measurements, instead of the family's measured block time)");
  cmd->add_flag("--host-pipeline", f.host_pipeline,
                "Experimental: schedule the host that issues the kernels as a pipeline stage that "
                "runs ahead of the GPU between waits, instead of each layer taking the longer of "
                "its kernels and its host work (docs/research/host-pipeline.md)");
  return {cmd, [flags] { return RunAccuracy(*flags); }};
}

namespace {

int RunAccuracy(const AccuracyFlags& f) {
  const std::vector<std::string> paths =
      f.calibration.empty()
          ? std::vector<std::string>{DataDir() + "/tests/fixtures/calibration/deepspeed-h200.jsonl"}
          : f.calibration;
  auto profile = FindHardwareProfile(f.hardware, DataDir());
  if (!profile.ok()) return Fail(profile.status());
  std::vector<CalibrationRun> runs;
  for (size_t i = 0; i < paths.size(); ++i) {
    auto more = LoadCalibration(paths[i]);
    if (!more.ok()) return Fail(more.status());
    for (CalibrationRun& r : *more) {
      // Name the file as the user did (the default one relative to the data directory).
      r.file = f.calibration.empty() ? "tests/fixtures/calibration/deepspeed-h200.jsonl"
                                     : f.calibration[i];
      runs.push_back(std::move(r));
    }
  }
  auto summary = EvaluateCalibration(runs, *profile, f.unseen_families, f.host_pipeline);
  if (!summary.ok()) return Fail(summary.status());
  std::string shown = "tests/fixtures/calibration/deepspeed-h200.jsonl";
  for (size_t i = 0; i < f.calibration.size(); ++i) {
    shown = i == 0 ? f.calibration[0] : shown + " --calibration " + f.calibration[i];
  }
  // A profile given as a file is named by its path, so the printed command runs again.
  const bool file = f.hardware.find('/') != std::string::npos ||
                    f.hardware.find(".yaml") != std::string::npos;
  std::string md = AccuracyMarkdown(*summary, *profile, shown, file ? f.hardware : "");
  if (!f.markdown.empty()) {
    const std::string def = "--markdown docs/accuracy.md`";
    if (size_t at = md.find(def); at != std::string::npos) {
      md.replace(at, def.size(), "--markdown " + f.markdown + "`");
    }
  }
  for (const auto& [on, option] : {std::pair{f.unseen_families, "--unseen-families "},
                                   std::pair{f.host_pipeline, "--host-pipeline "}}) {
    if (!on) continue;
    const std::string tag = "`dsplan accuracy ";
    if (size_t at = md.find(tag); at != std::string::npos) md.insert(at + tag.size(), option);
  }
  if (!f.markdown.empty()) {
    // Keep the runtime-validation section that tools/device/summarize_validation.py maintains
    // in the same file (measured on a GPU; this command cannot regenerate it).
    // A missing file has no section to keep; a folder or device is refused here, before writing.
    Result<std::string> old = ReadInputFile(f.markdown, "--markdown file");
    if (!old.ok() && old.status().code() != Status::Code::kNotFound) return Fail(old.status());
    const std::string prev = old.ok() ? *old : std::string();
    const std::string begin = "<!-- runtime-validation: begin";
    const std::string end = "<!-- runtime-validation: end -->";
    const size_t b = prev.find(begin), e = prev.find(end);
    if (b != std::string::npos && e != std::string::npos && e > b) {
      md += "\n" + prev.substr(b, e + end.size() - b) + "\n";
    }
    // Rewrites its own report in place (it keeps a section of the old file): the calibration
    // file it reads is never a target.
    const OutputPolicy policy{paths, true, "--markdown"};
    if (Status s = WriteOutputFile(f.markdown, md, policy); !s.ok()) return Fail(s);
  }
  if (f.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const AccuracyRow& r : summary->rows) {
      // A run without usable memory (or timing) has null measured values and errors.
      auto mem = [&](double v) { return r.has_memory ? nlohmann::json(v) : nlohmann::json(); };
      auto tim = [&](double v) { return r.has_time ? nlohmann::json(v) : nlohmann::json(); };
      rows.push_back({{"id", r.run.id},
                      {"file", r.run.file},
                      {"config", r.config_key},
                      {"phase_sync", r.run.phase_sync},
                      {"wrapper", r.wrapper},
                      {"fits", r.fits},
                      {"measured_peak_alloc_mib", mem(r.run.peak_alloc_mib)},
                      {"predicted_peak_alloc_mib", r.peak_alloc_mib},
                      {"alloc_error", mem(r.alloc_error)},
                      {"measured_peak_reserved_mib", mem(r.run.peak_reserved_mib)},
                      {"predicted_peak_reserved_mib", r.peak_reserved_mib},
                      {"predicted_state_mib", r.state_mib},
                      {"band_block_mib", r.band_block_mib},
                      {"band_cached_block_mib", r.band_cached_block_mib},
                      {"band_upper", r.band_upper},
                      {"reserved_in_band",
                       r.reserved_band_row ? nlohmann::json(r.reserved_in_band) : nlohmann::json()},
                      {"reserved_error", mem(r.reserved_error)},
                      {"measured_step_s", tim(r.run.step_s)},
                      {"predicted_step_s", r.step_s},
                      {"step_error", tim(r.step_error)},
                      {"step_error_family_held_out", tim(r.step_error_unseen)},
                      {"host_bound_share", r.host_bound_share},
                      {"step_band", {{"low", r.band_low}, {"high", r.band_high}}},
                      {"step_in_band", r.in_band},
                      {"did_not_train", r.did_not_train},
                      {"peak_at", r.peak_at},
                      {"rank", r.rank}});
      if (r.run.emulated) {
        nlohmann::json& row = rows.back();
        row["world_size"] = r.run.world_size;
        row["emulated"] = true;
        row["step_without_communication"] =
            r.has_step_without_communication
                ? nlohmann::json{{"measured_s", r.run.step_s},
                                 {"predicted_s", r.step_without_communication_s},
                                 {"error", r.step_without_communication_error}}
                : nlohmann::json();
      }
    }
    nlohmann::json by_host = nlohmann::json::array();
    for (const AccuracySummary::HostClass& c : summary->by_host) {
      by_host.push_back({{"class", c.name},
                         {"host_bound_share_from", c.lo},
                         {"host_bound_share_to", std::min(1.0, c.hi)},
                         {"runs", c.runs},
                         {"step_mean_abs_error", c.mean_abs},
                         {"step_mean_abs_error_family_held_out", c.unseen_mean_abs},
                         {"runs_above_12_percent", c.over_12},
                         {"runs_above_12_percent_family_held_out", c.unseen_over_12}});
    }
    nlohmann::json by_speed = nlohmann::json::array();
    for (size_t i = 0; i < summary->by_host.size(); ++i) {
      for (int k = 0; k < 2; ++k) {
        const AccuracySummary::HostSpeedPart& p = summary->by_host_speed[i][k];
        if (p.runs == 0) continue;
        by_speed.push_back({{"class", summary->by_host[i].name},
                            {"host", k ? "slow" : "normal"},
                            {"runs", p.runs},
                            {"step_mean_signed_error", p.signed_mean},
                            {"step_mean_abs_error", p.mean_abs},
                            {"step_mean_abs_error_family_held_out", p.unseen_mean_abs}});
      }
    }
    nlohmann::json by_file = nlohmann::json::array();
    for (const FileAccuracy& fa : AccuracyByFile(*summary)) {
      by_file.push_back({{"file", fa.file},
                         {"runs", fa.runs},
                         {"timed_runs", fa.time_rows},
                         {"step_mean_abs_error", fa.step_mean_abs},
                         {"step_max_abs_error", fa.step_max_abs},
                         {"step_mean_abs_error_family_held_out", fa.unseen_step_mean_abs},
                         {"step_in_band", fa.time_in_band},
                         {"memory_runs", fa.memory_rows},
                         {"alloc_mean_abs_error", fa.alloc_mean_abs},
                         {"alloc_max_abs_error", fa.alloc_max_abs},
                         {"verdicts_right", fa.verdicts_right}});
    }
    nlohmann::json repeats = nlohmann::json::array();
    for (const RepeatGroup& g : RepeatGroups(*summary)) {
      nlohmann::json ids = nlohmann::json::array();
      for (size_t i : g.rows) ids.push_back(summary->rows[i].run.id);
      repeats.push_back({{"config", g.config},
                         {"runs", ids},
                         {"measured_step_min_s", g.min_s},
                         {"measured_step_max_s", g.max_s},
                         {"floor_abs_error", g.floor_abs},
                         {"worst_abs_error", g.worst_abs},
                         {"worst_abs_error_family_held_out", g.worst_unseen_abs},
                         {"mean_floor_abs_error", g.mean_floor_abs},
                         {"mean_abs_error", g.mean_abs},
                         {"mean_abs_error_family_held_out", g.mean_unseen_abs}});
    }
    nlohmann::json out = {{"schema", "dsplan/accuracy"},  // docs/schema/accuracy.schema.json
                          {"schema_version", 1},
                          {"dsplan_version", DSPLAN_VERSION},
                          {"hardware", profile->name},
                          {"rows", rows},
                          {"alloc_mean_abs_error", summary->alloc_mean_abs},
                          {"alloc_max_abs_error", summary->alloc_max_abs},
                          {"reserved_mean_abs_error", summary->reserved_mean_abs},
                          {"step_mean_abs_error", summary->step_mean_abs},
                          {"step_max_abs_error", summary->step_max_abs},
                          {"step_mean_abs_error_family_held_out", summary->unseen_step_mean_abs},
                          {"step_max_abs_error_family_held_out", summary->unseen_step_max_abs},
                          {"step_in_band", summary->time_in_band},
                          {"emulated_step_without_communication",
                           {{"runs", summary->no_comm_rows},
                            {"mean_abs_error", summary->no_comm_step_mean_abs},
                            {"max_abs_error", summary->no_comm_step_max_abs}}},
                          {"step_error_by_host_share", by_host},
                          {"step_error_by_host_speed",
                           {{"runs_with_reading", summary->host_loop_runs},
                            {"median_linear_fwd_us", summary->host_loop_median_us},
                            {"slow_above", AccuracySummary::kSlowHostLoop},
                            {"classes", by_speed}}},
                          {"by_file", by_file},
                          {"repeat_groups", repeats},
                          {"verdicts_right", summary->verdicts_right},
                          {"reserved_band_rows", summary->reserved_band_rows},
                          {"reserved_in_band", summary->reserved_in_band},
                          {"reserved_excess_max", summary->reserved_excess_max},
                          {"reserved_excess_max_id", summary->reserved_excess_max_id}};
    fmt::print("{}\n", JsonText(out));
    return 0;
  }
  fmt::print("{}", md);
  return 0;
}

}  // namespace
}  // namespace dsplan
