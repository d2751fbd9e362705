#include "planner/accuracy.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "core/hf_config.h"
#include "core/text.h"
#include "core/model_spec.h"
#include "planner/ds_config.h"
#include "planner/search.h"
#include "simulator/simulate.h"
#include "simulator/workload.h"

namespace dsplan {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;
// The memory band is drawn from runs whose peak reserved is 2 GiB and more: below that, a toy
// run's few hundred MiB of caching-allocator rounding dominate its relative error.
constexpr double kBandRecordMib = 2048.0;

double Num(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return (it != j.end() && it->is_number()) ? it->get<double>() : 0.0;
}

// Whether |r| belongs to host class |c| (AccuracySummary::by_host): runs with the optimizer on
// the CPU form their own class whatever their host-bound share.
bool InHostClass(const AccuracySummary::HostClass& c, const AccuracyRow& r) {
  return c.offloaded == r.optimizer_offloaded && r.host_bound_share >= c.lo &&
         r.host_bound_share < c.hi;
}

}  // namespace

Result<std::vector<CalibrationRun>> LoadCalibration(const std::string& path) {
  DSPLAN_ASSIGN_OR_RETURN(std::string text, ReadInputFile(path, "calibration file"));
  std::istringstream in(text);
  std::vector<CalibrationRun> runs;
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    DSPLAN_ASSIGN_OR_RETURN(nlohmann::json j,
                            ParseJsonText(line, fmt::format("{} line {}", Escape(path), lineno)));
    if (!j.is_object()) {
      return Status::InvalidArgument(
          fmt::format("{}:{}: each line must be a JSON object", Escape(path), lineno));
    }
    if (j.contains("record_type")) continue;
    CalibrationRun r;
    try {
      r.id = j.at("id").get<std::string>();
      r.model = j.at("model").get<std::string>();
      r.model_config = j.at("model_config");
      r.ds_config = j.at("ds_config");
      if (j.contains("attn_implementation") && j["attn_implementation"].is_string()) {
        r.attention = j["attn_implementation"].get<std::string>();
      }
      r.micro_batch = j.at("mb").get<int64_t>();
      if (j.contains("src_len") && j["src_len"].is_number()) {
        r.seq_len = j["src_len"].get<int64_t>();
        r.target_len = j.at("tgt_len").get<int64_t>();
      } else {
        r.seq_len = j.at("seq_len").get<int64_t>();
      }
      r.gradient_checkpointing = j.value("grad_checkpointing", false);
      if (j.contains("optimizer_wrapper") && j["optimizer_wrapper"].is_string()) {
        r.optimizer_wrapper = j["optimizer_wrapper"].get<std::string>();
      }
      if (r.model_config.contains("model_type") && r.model_config["model_type"].is_string()) {
        r.family = r.model_config["model_type"].get<std::string>();
      }
      r.oom = j.value("status", std::string("ok")) == "oom";
      r.memory_valid = j.value("memory_valid", true);
      r.timing_valid = j.value("timing_valid", true);
      r.phase_sync = j.value("phase_sync", true);
      // Every harness so far (../shared/deepspeed-bench and tools/device/dsbench) builds the
      // model with from_config outside deepspeed.zero.Init; a record made otherwise says so.
      r.zero_init = j.value("zero_init", false);
      r.malloc_heap = j.value("malloc_heap", false);
      const int64_t world = j.value("world_size", int64_t{1});
      if (world < 1 || world > kMaxWorldSize) {
        return Status::InvalidArgument(fmt::format("{}:{}: world_size {} is outside 1-{}",
                                                   Escape(path), lineno, world, kMaxWorldSize));
      }
      r.world_size = static_cast<int>(world);
      r.emulated = j.contains("emulated") && r.world_size > 1;
      if (r.emulated) {
        const int64_t rank = j.value("emulated_rank", int64_t{0});
        if (rank < 0 || rank >= world) {
          return Status::InvalidArgument(
              fmt::format("{}:{}: emulated_rank {} is not a rank of world_size {} (0 to {})",
                          Escape(path), lineno, rank, world, world - 1));
        }
        r.emulated_rank = static_cast<int>(rank);
        r.step_without_communication = j.value("step_without_communication", true);
        r.timing_valid = false;
      }
    } catch (const nlohmann::json::exception& e) {
      return Status::InvalidArgument(
          fmt::format("{}:{}: missing or malformed field: {}", Escape(path), lineno,
                      Escape(e.what(), 200)));
    }
    r.after_init_alloc_mib = Num(j, "after_init_alloc_mb_corrected");
    r.peak_alloc_mib = Num(j, "steps_max_alloc_mb_corrected");
    r.peak_reserved_mib = Num(j, "steps_max_reserved_mb_corrected");
    r.step_s = Num(j, "median_step_s_3to8");
    r.host_rss_mib = Num(j, "steps_host_rss_peak_mb");
    if (j.contains("steps_pinned") && j["steps_pinned"].is_object()) {
      r.pinned_peak_mib = Num(j["steps_pinned"], "allocated_mb.peak");
    }
    {
      double sum = 0;
      int n = 0;
      for (const char* key : {"host_speed_before", "host_speed_after"}) {
        if (!j.contains(key) || !j[key].is_object()) continue;
        const double us = Num(j[key], "linear_fwd_us");
        if (std::isfinite(us) && us > 0 && us < 1e6) {  // a reading, not a failed loop
          sum += us;
          ++n;
        }
      }
      r.host_loop_us = n > 0 ? sum / n : 0;
    }
    r.file = path;
    runs.push_back(std::move(r));
  }
  return runs;
}

Result<AccuracySummary> EvaluateCalibration(const std::vector<CalibrationRun>& runs,
                                            const HardwareProfile& profile,
                                            bool unseen_families, bool host_pipeline) {
  AccuracySummary s;
  for (const CalibrationRun& run : runs) {
    const std::string where = "calibration run " + run.id;
    DSPLAN_ASSIGN_OR_RETURN(HfConfig hf, HfConfig::Parse(run.model_config.dump(), where));
    DSPLAN_ASSIGN_OR_RETURN(ModelSpec spec, ModelSpecFromHf(hf, run.model));
    DsConfigContext ctx;
    ctx.shape.seq_len = run.seq_len;
    ctx.shape.target_len = run.target_len;
    ctx.PinGradientCheckpointing(run.gradient_checkpointing);
    ctx.gpus_per_node = run.world_size;
    DSPLAN_ASSIGN_OR_RETURN(ctx.shape.attention, ParseAttentionImpl(run.attention));
    DSPLAN_ASSIGN_OR_RETURN(ParsedDsConfig parsed, ParseDsConfig(run.ds_config, ctx));
    parsed.plan.zero_init = run.zero_init;
    parsed.plan.malloc_heap = run.malloc_heap;
    const Plan& plan = parsed.plan;
    Simulator sim(spec, profile, SoftwareStack::kPyTorchDeepSpeed, !unseen_families);
    SimulateOptions so;
    so.host_pipeline = host_pipeline;
    so.sync_each_phase = run.phase_sync;
    // An emulated run measured one rank: predict that one (a real run's is the deciding rank).
    if (run.emulated) so.rank = run.emulated_rank;
    DSPLAN_ASSIGN_OR_RETURN(Prediction p, sim.Simulate(plan, so));
    // The leave-one-family-out prediction beside it (only its step time differs).
    double unseen_step_s = p.step_time_s;
    if (!unseen_families) {
      Simulator held_out(spec, profile, SoftwareStack::kPyTorchDeepSpeed, false);
      DSPLAN_ASSIGN_OR_RETURN(Prediction u, held_out.Simulate(plan, so));
      unseen_step_s = u.step_time_s;
    }
    AccuracyRow row;
    row.run = run;
    row.wrapper = OptimizerWrapperName(p.facts.wrapper);
    row.did_not_train = p.facts.FusedAdamSkipsUpdate();
    const ZeroConfig& z = plan.zero;
    row.config_key = fmt::format(
        "{}, {}+{} tokens, {}, {}, micro-batch {} x {}{}{}{}", run.model, run.seq_len,
        run.target_len, run.attention, PlanSummary(plan), plan.micro_batch, plan.grad_accum,
        z.stage == 3
            ? fmt::format(", persistence {}, prefetch {}", z.stage3_param_persistence_threshold,
                          z.stage3_prefetch_bucket_size)
            : "",
        plan.malloc_heap ? ", malloc on its heap" : "",
        run.world_size > 1 ? fmt::format(", world size {}", run.world_size) : "");
    row.fits = p.fits;
    row.verdict = MemoryVerdictName(p.verdict);
    row.verdict_right = run.oom ? !p.fits : p.verdict != MemoryVerdict::kDoesNotFit;
    row.has_memory = !run.oom && run.memory_valid && run.peak_alloc_mib > 0;
    row.has_time = !run.oom && run.timing_valid && run.step_s > 0;
    row.peak_alloc_mib = p.gpu_peak_allocated_bytes / kMiB;
    row.peak_reserved_mib = p.gpu_peak_reserved_bytes / kMiB;
    for (MemCategory c : {MemCategory::kParams16, MemCategory::kGradients, MemCategory::kMaster,
                          MemCategory::kOptimizerStates}) {
      row.state_mib += static_cast<double>(p.gpu_breakdown_at_peak[static_cast<int>(c)]) / kMiB;
    }
    row.band_block_mib = static_cast<double>(p.memory_band.upper_bytes) / kMiB;
    row.band_cached_block_mib = static_cast<double>(p.memory_band.cached_block_bytes) / kMiB;
    row.band_upper = p.memory_band.upper;
    row.step_s = p.step_time_s;
    row.host_peak_mib = p.host_peak_bytes_per_node / kMiB;
    row.pinned_mib = p.host_pinned_bytes_per_node / kMiB;
    row.peak_at = p.gpu_peak_task;
    row.rank = p.facts.rank;
    auto err = [](double pred, double meas) { return meas > 0 ? (pred - meas) / meas : 0.0; };
    if (row.has_memory) {
      row.alloc_error = err(row.peak_alloc_mib, run.peak_alloc_mib);
      row.reserved_error = err(row.peak_reserved_mib, run.peak_reserved_mib);
      row.reserved_band_row = run.peak_reserved_mib >= kBandRecordMib;
      row.reserved_in_band = run.peak_reserved_mib <=
                             row.peak_reserved_mib * (1 + row.band_upper) + row.band_block_mib;
    }
    row.host_bound_share = p.host_bound_share;
    row.optimizer_offloaded = plan.OffloadsOptimizer();
    row.band_low = p.time_band.low;
    row.band_high = p.time_band.high;
    if (run.emulated && run.step_without_communication && !run.oom && run.step_s > 0) {
      SimulateOptions fake = so;
      fake.fake_process_group = true;
      DSPLAN_ASSIGN_OR_RETURN(Prediction q, sim.Simulate(plan, fake));
      row.has_step_without_communication = true;
      row.step_without_communication_s = q.step_time_s;
      row.step_without_communication_error = err(q.step_time_s, run.step_s);
    }
    if (row.has_time) {
      row.step_error = err(row.step_s, run.step_s);
      row.step_error_unseen = err(unseen_step_s, run.step_s);
      const double ratio = row.step_s > 0 ? run.step_s / row.step_s : 0;
      row.in_band = ratio >= row.band_low && ratio <= row.band_high;
    }
    s.rows.push_back(std::move(row));
  }
  bool first_excess = true;
  for (const AccuracyRow& r : s.rows) {
    if (r.has_memory && r.reserved_band_row && r.peak_reserved_mib > 0) {
      ++s.reserved_band_rows;
      s.reserved_in_band += r.reserved_in_band;
      const double excess =
          (r.run.peak_reserved_mib - r.peak_reserved_mib - r.band_block_mib) / r.peak_reserved_mib;
      if (first_excess || excess > s.reserved_excess_max) {
        s.reserved_excess_max = excess;
        s.reserved_excess_max_id = r.run.id;
        first_excess = false;
      }
    }
  }
  for (const AccuracyRow& r : s.rows) {
    if (r.has_memory) ++s.memory_rows;
    if (r.has_time) ++s.time_rows;
    if (r.has_time && r.in_band) ++s.time_in_band;
    if (r.has_step_without_communication) {
      ++s.no_comm_rows;
      s.no_comm_step_max_abs =
          std::max(s.no_comm_step_max_abs, std::abs(r.step_without_communication_error));
      s.no_comm_step_mean_abs += std::abs(r.step_without_communication_error);
    }
    if (r.verdict_right) ++s.verdicts_right;
    if (r.run.oom) {
      ++s.oom_runs;
      if (!r.fits) ++s.oom_rejected;
    } else if (r.verdict == "at_risk") {
      ++s.ran_at_risk;
    }
  }
  for (const AccuracyRow& r : s.rows) {
    if (r.has_memory) {
      s.alloc_mean_abs += std::abs(r.alloc_error) / s.memory_rows;
      s.reserved_mean_abs += std::abs(r.reserved_error) / s.memory_rows;
      s.alloc_max_abs = std::max(s.alloc_max_abs, std::abs(r.alloc_error));
      s.reserved_max_abs = std::max(s.reserved_max_abs, std::abs(r.reserved_error));
    }
    if (r.has_time) {
      s.step_mean_abs += std::abs(r.step_error) / s.time_rows;
      s.step_max_abs = std::max(s.step_max_abs, std::abs(r.step_error));
      s.unseen_step_mean_abs += std::abs(r.step_error_unseen) / s.time_rows;
      s.unseen_step_max_abs = std::max(s.unseen_step_max_abs, std::abs(r.step_error_unseen));
      for (AccuracySummary::HostClass& c : s.by_host) {
        if (!InHostClass(c, r)) continue;
        ++c.runs;
        c.mean_abs += std::abs(r.step_error);
        c.unseen_mean_abs += std::abs(r.step_error_unseen);
        c.over_12 += std::abs(r.step_error) > 0.12;
        c.unseen_over_12 += std::abs(r.step_error_unseen) > 0.12;
      }
    }
  }
  if (s.no_comm_rows > 0) s.no_comm_step_mean_abs /= s.no_comm_rows;
  for (AccuracySummary::HostClass& c : s.by_host) {
    if (c.runs == 0) continue;
    c.mean_abs /= c.runs;
    c.unseen_mean_abs /= c.runs;
  }
  // The same classes by the host's speed at the run.
  std::vector<double> loops;
  for (const AccuracyRow& r : s.rows) {
    if (r.has_time && r.run.host_loop_us > 0) loops.push_back(r.run.host_loop_us);
  }
  s.host_loop_runs = static_cast<int>(loops.size());
  if (!loops.empty()) {
    std::sort(loops.begin(), loops.end());
    const size_t n = loops.size();
    s.host_loop_median_us = n % 2 ? loops[n / 2] : 0.5 * (loops[n / 2 - 1] + loops[n / 2]);
    for (const AccuracyRow& r : s.rows) {
      if (!r.has_time || r.run.host_loop_us <= 0) continue;
      const bool slow = r.run.host_loop_us > AccuracySummary::kSlowHostLoop * s.host_loop_median_us;
      for (size_t i = 0; i < s.by_host.size(); ++i) {
        if (!InHostClass(s.by_host[i], r)) continue;
        AccuracySummary::HostSpeedPart& p = s.by_host_speed[i][slow ? 1 : 0];
        ++p.runs;
        p.signed_mean += r.step_error;
        p.mean_abs += std::abs(r.step_error);
        p.unseen_mean_abs += std::abs(r.step_error_unseen);
      }
    }
    for (auto& parts : s.by_host_speed) {
      for (AccuracySummary::HostSpeedPart& p : parts) {
        if (p.runs == 0) continue;
        p.signed_mean /= p.runs;
        p.mean_abs /= p.runs;
        p.unseen_mean_abs /= p.runs;
      }
    }
  }
  s.has_unseen = true;
  return s;
}

std::vector<FileAccuracy> AccuracyByFile(const AccuracySummary& s) {
  std::vector<FileAccuracy> out;
  for (const AccuracyRow& r : s.rows) {
    auto it = std::find_if(out.begin(), out.end(),
                           [&](const FileAccuracy& f) { return f.file == r.run.file; });
    if (it == out.end()) {
      out.push_back({});
      out.back().file = r.run.file;
      it = out.end() - 1;
    }
    FileAccuracy& f = *it;
    ++f.runs;
    f.verdicts_right += r.verdict_right;
    if (r.has_memory) {
      ++f.memory_rows;
      f.alloc_mean_abs += std::abs(r.alloc_error);
      f.alloc_max_abs = std::max(f.alloc_max_abs, std::abs(r.alloc_error));
    }
    if (r.has_time) {
      ++f.time_rows;
      f.time_in_band += r.in_band;
      f.step_mean_abs += std::abs(r.step_error);
      f.step_max_abs = std::max(f.step_max_abs, std::abs(r.step_error));
      f.unseen_step_mean_abs += std::abs(r.step_error_unseen);
    }
  }
  for (FileAccuracy& f : out) {
    if (f.memory_rows > 0) f.alloc_mean_abs /= f.memory_rows;
    if (f.time_rows > 0) {
      f.step_mean_abs /= f.time_rows;
      f.unseen_step_mean_abs /= f.time_rows;
    }
  }
  return out;
}

std::vector<RepeatGroup> RepeatGroups(const AccuracySummary& s) {
  std::vector<RepeatGroup> out;
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < s.rows.size(); ++i) {
    const AccuracyRow& r = s.rows[i];
    if (!r.has_time) continue;
    auto [it, fresh] = index.try_emplace(r.config_key, out.size());
    if (fresh) {
      out.push_back({});
      out.back().config = r.config_key;
      out.back().min_s = out.back().max_s = r.run.step_s;
    }
    RepeatGroup& g = out[it->second];
    g.rows.push_back(i);
    g.min_s = std::min(g.min_s, r.run.step_s);
    g.max_s = std::max(g.max_s, r.run.step_s);
    g.worst_abs = std::max(g.worst_abs, std::abs(r.step_error));
    g.worst_unseen_abs = std::max(g.worst_unseen_abs, std::abs(r.step_error_unseen));
    g.mean_abs += std::abs(r.step_error);
    g.mean_unseen_abs += std::abs(r.step_error_unseen);
  }
  std::erase_if(out, [](const RepeatGroup& g) { return g.rows.size() < 2; });
  for (RepeatGroup& g : out) {
    g.floor_abs = (g.max_s - g.min_s) / (g.max_s + g.min_s);
    const double n = static_cast<double>(g.rows.size());
    g.mean_abs /= n;
    g.mean_unseen_abs /= n;
    // The mean |p - x| / x is convex and piecewise linear in p, with corners at the measured
    // times: its least value is at one of them.
    g.mean_floor_abs = std::numeric_limits<double>::infinity();
    for (size_t i : g.rows) {
      const double p = s.rows[i].run.step_s;
      double sum = 0;
      for (size_t j : g.rows) sum += std::abs(p - s.rows[j].run.step_s) / s.rows[j].run.step_s;
      g.mean_floor_abs = std::min(g.mean_floor_abs, sum / n);
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const RepeatGroup& a, const RepeatGroup& b) {
    return a.floor_abs > b.floor_abs;
  });
  return out;
}

std::string AccuracyMarkdown(const AccuracySummary& s, const HardwareProfile& profile,
                             const std::string& calibration_path, const std::string& hardware_arg) {
  std::ostringstream o;
  o << "# Accuracy against real DeepSpeed runs\n\n";
  o << "Generated by `dsplan accuracy --hardware "
    << (hardware_arg.empty() ? profile.name : hardware_arg) << " --calibration "
    << calibration_path << " --markdown docs/accuracy.md`; do not edit by hand.\n\n";
  o << fmt::format("Hardware profile: `{}` ({}).\n\n", profile.name, profile.SourceSummary());
  o << fmt::format(
      "{} runs. Peak allocated memory ({} runs): mean |error| {:.1f}%, max {:.1f}% (targets: mean "
      "< 3%, every case < 5%). Peak reserved: mean {:.1f}%, max {:.1f}%. {} Fit verdicts right: "
      "{}/{} (with the memory band and the default headroom: runs that ran out of memory said not "
      "to fit {}/{}; runs that ran said to fit, or at risk for {} of them).\n\n",
      s.rows.size(), s.memory_rows, 100 * s.alloc_mean_abs, 100 * s.alloc_max_abs,
      100 * s.reserved_mean_abs, 100 * s.reserved_max_abs,
      s.time_rows == 0
          ? std::string("Step time: no timed runs.")
          : fmt::format(
                "Step time ({} runs): mean {:.1f}%, max {:.1f}% (target: mean < 10%); measured "
                "within the prediction's band for {} of them; leave-one-family-out (each run "
                "predicted as for a family whose blocks were never measured): mean {:.1f}%, max "
                "{:.1f}%.",
                s.time_rows, 100 * s.step_mean_abs, 100 * s.step_max_abs, s.time_in_band,
                100 * s.unseen_step_mean_abs, 100 * s.unseen_step_max_abs),
      s.verdicts_right, s.rows.size(), s.oom_rejected, s.oom_runs, s.ran_at_risk);
  if (s.reserved_band_rows > 0) {
    o << fmt::format(
        "Memory band (`PeakMemoryBand`: a relative part of the predicted reserved plus the step's "
        "largest transient block the allocator replay served from cached memory): measured peak "
        "reserved inside it for {} of the {} runs of 2 "
        "GiB and more; the largest excess beyond the block, {:+.1f}% of the predicted reserved "
        "({}).\n\n",
        s.reserved_in_band, s.reserved_band_rows, 100 * s.reserved_excess_max,
        s.reserved_excess_max_id);
  }
  std::string classes;
  for (const AccuracySummary::HostClass& c : s.by_host) {
    if (c.runs == 0) continue;
    const std::string range =
        c.offloaded ? std::string("any host-bound share")
                    : fmt::format("host-bound share {:.0f}-{:.0f}%", 100 * c.lo,
                                  std::min(100.0, 100 * c.hi));
    classes += fmt::format("{}{} ({}): {} runs, mean {:.1f}% ({} above 12%), family held out "
                           "{:.1f}% ({})",
                           classes.empty() ? "" : "; ", c.name, range, c.runs, 100 * c.mean_abs,
                           c.over_12, 100 * c.unseen_mean_abs, c.unseen_over_12);
  }
  if (!classes.empty()) {
    o << "Step time by how host-bound the prediction is (runs with the optimizer on the CPU "
         "apart): " << classes
      << ". The host CPU's speed moved host-bound steps by up to 1.7x between days "
         "(docs/validation/deepspeed/rep-1204b/).\n\n";
  }
  std::string speed;
  for (size_t i = 0; i < s.by_host.size(); ++i) {
    const auto& parts = s.by_host_speed[i];
    if (parts[1].runs == 0) continue;  // no slow run in the class: nothing to set apart
    std::string halves;
    for (int k = 0; k < 2; ++k) {
      const AccuracySummary::HostSpeedPart& p = parts[k];
      if (p.runs == 0) continue;
      halves += fmt::format(
          "{}{} {} run{}, {:+.1f}% signed, {:.1f}% mean ({:.1f}% family held out)",
          halves.empty() ? "" : "; ", k ? "slow" : "normal", p.runs, p.runs == 1 ? "" : "s",
          100 * p.signed_mean, 100 * p.mean_abs, 100 * p.unseen_mean_abs);
    }
    speed += fmt::format("{}{}: {}", speed.empty() ? "" : ". ", s.by_host[i].name, halves);
  }
  if (!speed.empty()) {
    o << fmt::format(
        "By the host's speed at the run (the harness's Linear-forward loop before and after it, "
        "`host_speed_before/after`, read on {} of the timed runs; \"slow\": above {:.1f}x their "
        "median, {:.1f} us): {}. Not a correction: a run's loop does not predict its step "
        "(docs/stack-costs.md 4c); it shows where the errors are.\n\n",
        s.host_loop_runs, AccuracySummary::kSlowHostLoop, s.host_loop_median_us, speed);
  }
  if (s.no_comm_rows > 0) {
    o << fmt::format(
        "**Multi-GPU plans emulated on one GPU** ({} runs: one rank of the plan's world size under "
        "PyTorch's fake process group, whose collectives cross no link: all-gathers copy the "
        "rank's input into the other ranks' chunks on the GPU, the rest return at once). Their "
        "memory is counted above; their step time is not, since no communication happened. "
        "Predicted again as that emulation (collectives priced as the fake backend's local "
        "copies, docs/deepspeed-facts.md), their steps (the rank's computation and DeepSpeed's "
        "host work for that world size) are off by {:.1f}% on average, {:.1f}% at most. The "
        "communication itself stays a prediction from the profile's collective curves.\n\n",
        s.no_comm_rows, 100 * s.no_comm_step_mean_abs, 100 * s.no_comm_step_max_abs);
  }
  const std::vector<FileAccuracy> files = AccuracyByFile(s);
  if (files.size() > 1) {
    o << "| record file | runs | timed | step mean / max | family held out | in band | peak "
         "allocated mean / max | verdicts right |\n|---|---|---|---|---|---|---|---|\n";
    for (const FileAccuracy& f : files) {
      o << fmt::format("| `{}` | {} | {} | {} | {} | {} | {} | {}/{} |\n", f.file, f.runs,
                       f.time_rows,
                       f.time_rows ? fmt::format("{:.1f}% / {:.1f}%", 100 * f.step_mean_abs,
                                                 100 * f.step_max_abs)
                                   : "-",
                       f.time_rows ? fmt::format("{:.1f}%", 100 * f.unseen_step_mean_abs) : "-",
                       f.time_rows ? fmt::format("{}/{}", f.time_in_band, f.time_rows) : "-",
                       f.memory_rows ? fmt::format("{:.2f}% / {:.1f}%", 100 * f.alloc_mean_abs,
                                                   100 * f.alloc_max_abs)
                                     : "-",
                       f.verdicts_right, f.runs);
    }
    o << "\n";
  }
  const std::vector<RepeatGroup> repeats = RepeatGroups(s);
  if (!repeats.empty()) {
    int runs = 0, floor_over = 0, runs_floor_over = 0;
    for (const RepeatGroup& g : repeats) {
      runs += static_cast<int>(g.rows.size());
      if (g.floor_abs > 0.12) {
        ++floor_over;
        runs_floor_over += static_cast<int>(g.rows.size());
      }
    }
    double floor_sum = 0, dsplan_sum = 0, unseen_sum = 0;
    for (const RepeatGroup& g : repeats) {
      const double n = static_cast<double>(g.rows.size());
      floor_sum += n * g.mean_floor_abs;
      dsplan_sum += n * g.mean_abs;
      unseen_sum += n * g.mean_unseen_abs;
    }
    o << fmt::format(
        "**Repeats.** {} configurations were measured more than once ({} runs). The floor is the "
        "least worst error any single prediction could have over a configuration's runs, "
        "(max - min) / (max + min). For {} of them ({} runs) it is above 12%: no prediction can "
        "put all of their runs within 12%. The mean error has a floor too: one number per "
        "configuration, chosen after seeing its runs to make their mean |error| least, is off "
        "by {:.1f}% on average over these {} runs; dsplan's predictions are off by {:.1f}% "
        "(family held out {:.1f}%). The difference is what a better model could still gain on "
        "them; the floor is the runs' own spread.\n\n",
        repeats.size(), runs, floor_over, runs_floor_over, 100 * floor_sum / runs, runs,
        100 * dsplan_sum / runs, 100 * unseen_sum / runs);
    o << "| configuration | runs | measured step s, min - max | max / min | floor | dsplan's "
         "worst, in-sample / family held out |\n|---|---|---|---|---|---|\n";
    for (const RepeatGroup& g : repeats) {
      o << fmt::format("| {} | {} | {:.3f} - {:.3f} | {:.2f} | {:.1f}% | {:.1f}% / {:.1f}% |\n",
                       g.config, g.rows.size(), g.min_s, g.max_s, g.max_s / g.min_s,
                       100 * g.floor_abs, 100 * g.worst_abs, 100 * g.worst_unseen_abs);
    }
    o << "\n";
  }
  o << "| run | wrapper | peak alloc MiB (measured / predicted / error) | reserved MiB (m / p / "
       "err) | step s (m / p / err) | verdict | peak at |\n";
  o << "|---|---|---|---|---|---|---|\n";
  bool several_files = false;
  for (const AccuracyRow& r : s.rows) several_files |= r.run.file != s.rows.front().run.file;
  for (const AccuracyRow& r : s.rows) {
    std::string mem, step;
    if (r.run.oom) {
      mem = fmt::format("out of memory / {:.0f} / {}", r.peak_alloc_mib,
                        r.fits ? "said to fit: WRONG" : "said " + r.verdict);
      step = "-";
    } else if (!r.has_memory) {
      mem = fmt::format("(not usable) / {:.0f} / -", r.peak_alloc_mib);
    } else {
      mem = fmt::format("{:.0f} / {:.0f} / {:+.1f}%", r.run.peak_alloc_mib, r.peak_alloc_mib,
                        100 * r.alloc_error);
    }
    const std::string res =
        r.has_memory ? fmt::format("{:.0f} / {:.0f} / {:+.1f}%", r.run.peak_reserved_mib,
                                   r.peak_reserved_mib, 100 * r.reserved_error)
                     : fmt::format("- / {:.0f} / -", r.peak_reserved_mib);
    if (r.has_time) {
      // The band, and how much of the predicted step is host-bound (what its width follows).
      step = fmt::format(
          "{:.3f} / {:.3f} / {:+.1f}% (band {:.2f}-{:.2f}x{}, host-bound {:.0f}%; family held out "
          "{:+.1f}%{})",
          r.run.step_s, r.step_s, 100 * r.step_error, r.band_low, r.band_high,
          r.in_band ? "" : ": OUTSIDE", 100 * r.host_bound_share, 100 * r.step_error_unseen,
          r.run.phase_sync ? "" : "; timed once per step");
    } else if (r.has_step_without_communication) {
      step = fmt::format(
          "- / {:.3f} / - (emulated, fake process group: {:.3f} / {:.3f} / {:+.1f}%)", r.step_s,
          r.run.step_s, r.step_without_communication_s, 100 * r.step_without_communication_error);
    } else if (step.empty()) {
      step = fmt::format("- / {:.3f} / -", r.step_s);
    }
    // With several record files, each run names its file's folder (or the file, at the top).
    std::string id = r.run.id;
    if (several_files) {
      const std::filesystem::path file(r.run.file);
      const std::string parent = file.parent_path().filename().string();
      id += fmt::format(" ({})", parent == "deepspeed" || parent == "calibration" || parent.empty()
                                     ? file.filename().string()
                                     : parent);
    }
    o << fmt::format("| {}{} | {} | {} | {} | {} | {} | {} |\n", id,
                     r.did_not_train ? " (did not train: FusedAdam skipped its partition)" : "",
                     r.wrapper, mem, res, step,
                     r.verdict,
                     r.peak_at);
  }
  return o.str();
}

}  // namespace dsplan
