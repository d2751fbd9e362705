#include "cli/sim_commands.h"

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

namespace dsplan {
namespace {

int Fail(const Status& s) {
  fmt::print(stderr, "dsplan: error: {}\n", s.message());
  return s.code() == Status::Code::kInternal ? 1 : 2;
}

struct AccuracyFlags {
  std::string hardware = "h200-measured";
  std::string calibration;
  std::string markdown;
  bool json = false;
} g_accuracy;

}  // namespace

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
