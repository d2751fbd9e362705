// Accuracy against real DeepSpeed runs on an H200 (tests/fixtures/calibration, a copy of
// ../shared/calibration): every run is simulated with the measured H200 profile and compared with
// what DeepSpeed measured. The same rows produce docs/accuracy.md (`dsplan accuracy`).
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <set>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/hardware_profile.h"
#include "planner/accuracy.h"

namespace dsplan {
namespace {

const std::string kData = DSPLAN_TEST_DATA_DIR;

std::unique_ptr<AccuracySummary> LoadAndEvaluate(const std::string& file, size_t runs_expected,
                                                 bool unseen_families = false,
                                                 const std::string& hardware = "h200-measured") {
  auto profile = FindHardwareProfile(hardware, kData);
  EXPECT_TRUE(profile.ok()) << profile.status().ToString();
  auto runs = LoadCalibration(kData + file);
  EXPECT_TRUE(runs.ok()) << runs.status().ToString();
  if (!profile.ok() || !runs.ok()) return std::make_unique<AccuracySummary>();
  EXPECT_EQ(runs->size(), runs_expected);
  auto s = EvaluateCalibration(*runs, *profile, unseen_families);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::make_unique<AccuracySummary>(s.ok() ? std::move(*s) : AccuracySummary{});
}

class CalibrationTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    summary_ = LoadAndEvaluate("/tests/fixtures/calibration/deepspeed-h200.jsonl", 18).release();
  }
  static void TearDownTestSuite() { delete summary_; }
  static AccuracySummary* summary_;
};
AccuracySummary* CalibrationTest::summary_ = nullptr;

// The targets for memory: every case within 5%, mean under 3%.
// Issue 13's memory target: every run within 3 % and never more than 2 % under. gpt2-xl at
// stage 0 was 2.5 / 3.4 % under until session 13 kept the loss's fp32 copy of the logits alive
// beside log_softmax's output (Layer::fwd_transient_bytes).
TEST_F(CalibrationTest, PeakAllocatedWithinThreePercentNeverTwoUnder) {
  for (const AccuracyRow& r : summary_->rows) {
    EXPECT_LT(std::abs(r.alloc_error), 0.03)
        << r.run.id << ": measured " << r.run.peak_alloc_mib << " MiB, predicted "
        << r.peak_alloc_mib << " MiB (peak at " << r.peak_at << ")";
    EXPECT_GT(r.alloc_error, -0.02) << r.run.id;
  }
  EXPECT_LT(summary_->alloc_mean_abs, 0.01);
}

// Every calibration run trained, so every verdict must be "fits".
TEST_F(CalibrationTest, FitVerdictsAreRight) {
  for (const AccuracyRow& r : summary_->rows) EXPECT_TRUE(r.fits) << r.run.id;
}

// The wrapper dsplan models is the one DeepSpeed chose.
TEST_F(CalibrationTest, WrapperMatchesDeepSpeed) {
  for (const AccuracyRow& r : summary_->rows) {
    EXPECT_EQ(r.wrapper, r.run.optimizer_wrapper) << r.run.id;
  }
}

// max_memory_reserved: the effects replayed through the caching allocator the CUDA executor
// uses (simulator/caching_allocator.h). No target in the issue; this bounds the present accuracy
// (mean 2.6%, max 10%) so a regression shows.
TEST_F(CalibrationTest, PeakReservedWithinTwelvePercent) {
  for (const AccuracyRow& r : summary_->rows) {
    EXPECT_LT(std::abs(r.reserved_error), 0.12) << r.run.id;
    EXPECT_GE(r.peak_reserved_mib, r.peak_alloc_mib) << r.run.id;
  }
  EXPECT_LT(summary_->reserved_mean_abs, 0.03);
}

// Step time. The target is a mean error under 10 %; it is not met. Since 2026-12-03
// nothing in the time model is fitted to these runs (the stack's costs are measured:
// docs/stack-costs.md), so this is an out-of-sample check at the accuracy reached then
// (13.4 % mean, worst 29 %), held so that a regression shows.
TEST_F(CalibrationTest, StepTimeMeanErrorUnderFifteenPercent) {
  EXPECT_LT(summary_->step_mean_abs, 0.15);
  for (const AccuracyRow& r : summary_->rows) {
    EXPECT_GT(r.step_s, 0) << r.run.id;
    EXPECT_LT(std::abs(r.step_error), 0.35) << r.run.id;
  }
}


// Accuracy on the 2026-12-03 validation records (docs/validation/deepspeed/records-h200.jsonl):
// real DeepSpeed 0.14.5 runs of 13 families on one H200 that no constant of the model was fitted
// to (the rank-1 plans of `dsplan --model M --gpus 1` at 50-100 % of their micro-batch, and
// stage-2/3 isolation runs). What the memory model must keep: issue 13's targets, the verdicts
// of the runs that ran out of memory, and the one known exception.
class ValidationRecordsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    summary_ = LoadAndEvaluate("/docs/validation/deepspeed/records-h200.jsonl", 58).release();
  }
  static void TearDownTestSuite() { delete summary_; }
  static AccuracySummary* summary_;
};
AccuracySummary* ValidationRecordsTest::summary_ = nullptr;

// Issue 13: peak allocated within 3 % on every run, and never more than 2 % under. Falcon-7B's
// block backward was 2.0-2.1 % under until session 11 priced CUDA's softmax-backward temporary
// (TensorSpec::backward_extra_buffers); it is held to the same 2 % now.
TEST_F(ValidationRecordsTest, PeakAllocatedWithinThreePercentNeverTwoUnder) {
  EXPECT_EQ(summary_->memory_rows, 38);
  for (const AccuracyRow& r : summary_->rows) {
    if (!r.has_memory) continue;
    EXPECT_LT(std::abs(r.alloc_error), 0.03) << r.run.id;
    EXPECT_GT(r.alloc_error, -0.02)
        << r.run.id << ": measured " << r.run.peak_alloc_mib << " MiB, predicted "
        << r.peak_alloc_mib << " MiB (peak at " << r.peak_at << ")";
  }
  EXPECT_LT(summary_->alloc_mean_abs, 0.01);
}

// DeepSpeed 0.14.5's FusedAdam never updates a flat partition of more than 2^31 - 1 elements
// (docs/deepspeed-facts.md#fused-adam-int32). The runs flagged are the ones whose measured losses
// (docs/validation/deepspeed/results-call2.jsonl, results-call3.jsonl) stayed at their first
// value, within dropout noise; runs of the smaller models, whose losses fell, are not flagged.
TEST_F(ValidationRecordsTest, RunsThatDidNotTrainAreTheOnesFusedAdamSkipped) {
  const std::set<std::string> flat_loss = {
      "bloom-3b_r1_mb4", "bloom-3b_r1_mb6",  "gemma-2b_r1_mb10", "opt-2.7b_r1_mb19",
      "opt-2.7b_r1_mb29", "phi-2_r1_mb10",   "phi-2_r1_mb15",    "t5-3b_r1_mb10",
      "t5-3b_r1_mb15",   "t5-3b_r1_mb21"};
  const std::set<std::string> trained = {"llama-3.2-1b_r1_mb22", "gpt2-xl_r1_mb16",
                                         "pythia-1.4b_r1_mb31", "qwen2-1.5b_r1_mb14"};
  int seen_flat = 0, seen_trained = 0;
  for (const AccuracyRow& r : summary_->rows) {
    if (flat_loss.count(r.run.id)) {
      ++seen_flat;
      EXPECT_TRUE(r.did_not_train) << r.run.id;
    }
    if (trained.count(r.run.id)) {
      ++seen_trained;
      EXPECT_FALSE(r.did_not_train) << r.run.id;
    }
  }
  EXPECT_EQ(seen_flat, static_cast<int>(flat_loss.size()));
  EXPECT_EQ(seen_trained, static_cast<int>(trained.size()));
}

// Every run that ran out of memory is said not to fit (with the memory band and the default
// headroom, as the planner and `check` judge), and no run that ran is said not to fit.
TEST_F(ValidationRecordsTest, VerdictsOfRunsThatRanOutOfMemoryAndRunsThatRan) {
  EXPECT_EQ(summary_->oom_runs, 9);
  EXPECT_EQ(summary_->oom_rejected, summary_->oom_runs);
  for (const AccuracyRow& r : summary_->rows) EXPECT_TRUE(r.verdict_right) << r.run.id;
}

// Step time on the same runs (12.3 % mean, worst 33 % on 2026-12-03; 31 % / 65 % with the two
// fitted constants before). Not the 10 % target: held so that a regression shows.
TEST_F(ValidationRecordsTest, StepTimeMeanErrorUnderFifteenPercent) {
  EXPECT_EQ(summary_->time_rows, 49);
  EXPECT_LT(summary_->step_mean_abs, 0.15);
  for (const AccuracyRow& r : summary_->rows) {
    if (r.has_time) {
      EXPECT_LT(std::abs(r.step_error), 0.40) << r.run.id;
    }
  }
}

// The hold-out set (docs/validation/deepspeed/holdout/): 14 real DeepSpeed runs of 8 models
// never run before, measured after the 2026-12-03 time model was designed and first compared
// with it once that model was complete (14.0 % mean, worst 25.6 %; the model before: 28 % /
// 53 %). Memory and verdicts as for the validation set.
TEST(HoldoutRecords, MemoryVerdictsAndStepTime) {
  std::unique_ptr<AccuracySummary> s =
      LoadAndEvaluate("/docs/validation/deepspeed/holdout/records-holdout-h200.jsonl", 14);
  EXPECT_EQ(s->memory_rows, 14);
  EXPECT_LT(s->alloc_mean_abs, 0.01);
  for (const AccuracyRow& r : s->rows) {
    EXPECT_TRUE(r.verdict_right) << r.run.id;
    EXPECT_LT(std::abs(r.alloc_error), 0.03) << r.run.id;
    EXPECT_LT(std::abs(r.step_error), 0.35) << r.run.id;
  }
  EXPECT_LT(s->step_mean_abs, 0.18);
}

// The memory band (PeakMemoryBand: +6 % of predicted reserved plus one largest transient block
// since session 22) holds every validation and hold-out run of 2 GiB and more, and its record
// is what `dsplan accuracy` reports: the runs inside, the largest excess beyond the block.
TEST(MemoryBand, HoldsTheValidationAndHoldoutRuns) {
  for (const auto& [file, n] :
       {std::pair<const char*, size_t>{"/docs/validation/deepspeed/records-h200.jsonl", 58},
        {"/docs/validation/deepspeed/holdout/records-holdout-h200.jsonl", 14}}) {
    std::unique_ptr<AccuracySummary> s = LoadAndEvaluate(file, n);
    EXPECT_GT(s->reserved_band_rows, 10) << file;
    EXPECT_EQ(s->reserved_in_band, s->reserved_band_rows) << file;
    int rows = 0;
    for (const AccuracyRow& r : s->rows) {
      if (!r.reserved_band_row) continue;
      ++rows;
      EXPECT_DOUBLE_EQ(r.band_upper, 0.06) << r.run.id;
      EXPECT_LE(r.run.peak_reserved_mib, r.peak_reserved_mib * 1.06 + r.band_block_mib)
          << r.run.id;
      const double excess =
          (r.run.peak_reserved_mib - r.peak_reserved_mib - r.band_block_mib) / r.peak_reserved_mib;
      EXPECT_LE(excess, s->reserved_excess_max) << r.run.id;
    }
    EXPECT_EQ(rows, s->reserved_band_rows) << file;
  }
}

// h100plans-1206 (session 23, registered before it ran): the rank-1 plans of 16 models made for
// an H100 80GB with its profile all ran 8 steps on an H100; each leaves 1.2-8.6 GiB beyond its
// band and headroom, so the band decided that they fit. Their reserved peaks lie inside the band
// drawn from H200 runs, and their allocated peaks within the target.
TEST(MemoryBand, HoldsThePlansMadeForAnH100) {
  const std::string hw = kData + "/docs/validation/deepspeed/h100plans-1206/h100-plans.yaml";
  int ran = 0;
  for (const char* file :
       {"/docs/validation/deepspeed/h100plans-1206/records-h100plans.jsonl",
        "/docs/validation/deepspeed/h100plans-1206/set2/records-h100plans2.jsonl"}) {
    std::unique_ptr<AccuracySummary> s = LoadAndEvaluate(file, 8, false, hw);
    EXPECT_EQ(s->reserved_band_rows, 8) << file;
    EXPECT_EQ(s->reserved_in_band, s->reserved_band_rows) << file;
    for (const AccuracyRow& r : s->rows) {
      ran += !r.run.oom && r.has_memory && r.has_time;
      EXPECT_FALSE(r.did_not_train) << r.run.id;
      EXPECT_EQ(r.verdict, "fits") << r.run.id;
      EXPECT_LE(r.run.peak_reserved_mib, r.peak_reserved_mib * 1.06 + r.band_block_mib) << r.run.id;
      EXPECT_LT(std::abs(r.alloc_error), 0.03) << r.run.id;
      EXPECT_GT(r.alloc_error, -0.02) << r.run.id;
    }
  }
  EXPECT_EQ(ran, 16);
}

// The same 16 runs priced from a full profile of an H100 with those models' own Linears
// (h100diag-1206, measured after the runs): the quick table's GEMM rows were why GPT-2, BERT and
// T5 ran 11-22 % slower than predicted. With the full table the 13 plans less than 30 %
// host-bound come within 5 %, and the mean of all 16 is under 5 % (7.9 % from the quick profile).
TEST(StepTime, AFullH100ProfilePricesThePlansMadeForAnH100) {
  const std::string full = kData + "/docs/validation/deepspeed/h100diag-1206/h100-gemm-1206.yaml";
  const std::string quick = kData + "/docs/validation/deepspeed/h100plans-1206/h100-plans.yaml";
  double full_sum = 0, quick_sum = 0;
  int n = 0;
  for (const char* file :
       {"/docs/validation/deepspeed/h100plans-1206/records-h100plans.jsonl",
        "/docs/validation/deepspeed/h100plans-1206/set2/records-h100plans2.jsonl"}) {
    std::unique_ptr<AccuracySummary> f = LoadAndEvaluate(file, 8, false, full);
    std::unique_ptr<AccuracySummary> q = LoadAndEvaluate(file, 8, false, quick);
    ASSERT_EQ(f->rows.size(), q->rows.size());
    for (size_t i = 0; i < f->rows.size(); ++i) {
      const AccuracyRow& r = f->rows[i];
      ASSERT_TRUE(r.has_time) << r.run.id;
      full_sum += std::abs(r.step_error);
      quick_sum += std::abs(q->rows[i].step_error);
      ++n;
      if (r.host_bound_share < 0.3) {
        EXPECT_LT(std::abs(r.step_error), 0.05) << r.run.id;
      }
    }
  }
  ASSERT_EQ(n, 16);
  EXPECT_LT(full_sum / n, 0.05);
  EXPECT_GT(quick_sum / n, 0.07);
}

// Five rank-1 plans made with that full profile, three of them 6-7 B models with the optimizer
// offloaded (h100plans3-1206, registered before they ran): all ran and trained, peak allocated
// within 0.1 %, peak reserved inside the band (bloom-3b 12 % above the prediction, inside by
// its fp32 logits block).
TEST(MemoryBand, HoldsTheFullProfilePlansForAnH100) {
  const std::string hw = kData + "/docs/validation/deepspeed/h100plans3-1206/h100-plans3.yaml";
  std::unique_ptr<AccuracySummary> s = LoadAndEvaluate(
      "/docs/validation/deepspeed/h100plans3-1206/records-h100plans3.jsonl", 5, false, hw);
  EXPECT_EQ(s->reserved_band_rows, 5);
  EXPECT_EQ(s->reserved_in_band, 5);
  for (const AccuracyRow& r : s->rows) {
    EXPECT_FALSE(r.did_not_train) << r.run.id;
    EXPECT_EQ(r.verdict, "fits") << r.run.id;
    EXPECT_LT(std::abs(r.alloc_error), 0.001) << r.run.id;
  }
}

// ZeRO-3's step (session 22): the gradient norm's fp64 copy of each owned partition and Adam's
// lazy states created inside the step, per sub-group. bloom-7b1's stage-3 plan (fresh set 2) was
// 1.2 % low in allocated and 7.0 % low in reserved without them; qwen2-0.5b at stage 3 with
// checkpointing (the hold-out's worst, plans-1203c) 16 % low in reserved.
TEST(Zero3StepMemory, NormCopyAndLazyStatesInTheStep) {
  std::unique_ptr<AccuracySummary> bloom =
      LoadAndEvaluate("/docs/validation/deepspeed/fresh-1203f/records-fresh2-h200.jsonl", 8);
  int seen = 0;
  for (const AccuracyRow& r : bloom->rows) {
    if (r.run.model != "bloom-7b1") continue;
    ++seen;
    EXPECT_LT(std::abs(r.alloc_error), 0.005) << r.run.id;
    EXPECT_GT(r.reserved_error, -0.05) << r.run.id;
    EXPECT_TRUE(r.reserved_in_band) << r.run.id;
    // The norm copy (7,840 MiB) has a segment of its own in the replay, so the band's block
    // is the largest transient the replay served from cached memory.
    EXPECT_LT(r.band_block_mib, 2500) << r.run.id;
    EXPECT_EQ(r.band_block_mib, r.band_cached_block_mib) << r.run.id;
  }
  EXPECT_EQ(seen, 1);
  std::unique_ptr<AccuracySummary> qwen =
      LoadAndEvaluate("/docs/validation/deepspeed/plans-1203c/records-plans-h200.jsonl", 7);
  seen = 0;
  for (const AccuracyRow& r : qwen->rows) {
    if (r.run.id.rfind("qwen2-0.5b_s3", 0) != 0) continue;
    ++seen;
    EXPECT_LT(std::abs(r.reserved_error), 0.03) << r.run.id;
  }
  EXPECT_GE(seen, 1);
}

// malloc-1206: runs with glibc's malloc held to its heap carry malloc_heap in their records
// (deepspeed_records.py, from the case's environment) and are predicted so: their step without
// the page faults, their configuration apart from the default's (not a repeat of it).
TEST(MallocHeapRecords, PredictedWithTheEnvironmentTheyRanIn) {
  std::unique_ptr<AccuracySummary> s =
      LoadAndEvaluate("/docs/validation/deepspeed/malloc-1206/records-malloc-h100.jsonl", 5);
  const AccuracyRow* def = nullptr;
  const AccuracyRow* heap = nullptr;
  int with = 0;
  for (const AccuracyRow& r : s->rows) {
    with += r.run.malloc_heap;
    EXPECT_EQ(r.run.malloc_heap, r.run.id.rfind("malloc-nommap", 0) == 0) << r.run.id;
    if (r.run.id == "malloc-default_opt-1.3b_s3_mb8_optcpu_paramcpu") def = &r;
    if (r.run.id == "malloc-nommap_opt-1.3b_s3_mb8_optcpu_paramcpu") heap = &r;
  }
  EXPECT_EQ(with, 3);
  ASSERT_NE(def, nullptr);
  ASSERT_NE(heap, nullptr);
  EXPECT_LT(heap->step_s, 0.7 * def->step_s);  // measured: 1.524 against 3.862 s
  EXPECT_NE(heap->config_key, def->config_key);
  EXPECT_DOUBLE_EQ(heap->peak_alloc_mib, def->peak_alloc_mib);  // GPU memory is the same
}

// Leave-one-family-out: the same sets predicted as for families whose blocks the stack
// measurement never saw (per-op host costs, the forward scaled from the other families'
// measurements): calibration 13.2 %, validation 8.5 % mean on 2026-12-05 (19.2 % and 17.6 %
// on 2026-12-03, before the forward was scaled). Memory does not depend on it.
TEST(UnseenFamilies, StepTimeWithoutTheFamilyMeasurement) {
  std::unique_ptr<AccuracySummary> cal =
      LoadAndEvaluate("/tests/fixtures/calibration/deepspeed-h200.jsonl", 18, true);
  std::unique_ptr<AccuracySummary> val =
      LoadAndEvaluate("/docs/validation/deepspeed/records-h200.jsonl", 58, true);
  EXPECT_LT(cal->step_mean_abs, 0.16);
  EXPECT_LT(val->step_mean_abs, 0.11);
  EXPECT_LT(val->alloc_mean_abs, 0.01);
  // The in-sample report carries the same leave-one-family-out figure beside its own, run by run.
  std::unique_ptr<AccuracySummary> both =
      LoadAndEvaluate("/tests/fixtures/calibration/deepspeed-h200.jsonl", 18);
  ASSERT_TRUE(both->has_unseen);
  ASSERT_EQ(both->rows.size(), cal->rows.size());
  EXPECT_DOUBLE_EQ(both->unseen_step_mean_abs, cal->step_mean_abs);
  EXPECT_DOUBLE_EQ(both->unseen_step_max_abs, cal->step_max_abs);
  bool differs = false;
  for (size_t i = 0; i < both->rows.size(); ++i) {
    EXPECT_DOUBLE_EQ(both->rows[i].step_error_unseen, cal->rows[i].step_error) << i;
    differs |= both->rows[i].step_error != both->rows[i].step_error_unseen;
  }
  EXPECT_TRUE(differs);  // the families' measurements change the predictions
}

// Runs whose steps the harness instrumented (DSBENCH_MEMHIST: every allocator event recorded)
// keep their memory but are not timing data: plans-1203c has four, beside three timed plans.
TEST(InstrumentedRuns, KeepMemoryButNotTiming) {
  std::unique_ptr<AccuracySummary> s =
      LoadAndEvaluate("/docs/validation/deepspeed/plans-1203c/records-plans-h200.jsonl", 7);
  int instrumented = 0;
  for (const AccuracyRow& r : s->rows) {
    const bool memhist = r.run.id.find("_memhist") != std::string::npos;
    EXPECT_EQ(r.run.timing_valid, !memhist) << r.run.id;
    EXPECT_EQ(r.has_time, !memhist) << r.run.id;
    EXPECT_TRUE(r.has_memory) << r.run.id;
    instrumented += memhist;
  }
  EXPECT_EQ(instrumented, 4);
  // The host-share classes split the timed rows and their mean.
  int runs = 0;
  double weighted = 0;
  for (const AccuracySummary::HostClass& c : s->by_host) {
    runs += c.runs;
    weighted += c.mean_abs * c.runs;
  }
  EXPECT_EQ(runs, s->time_rows);
  EXPECT_NEAR(weighted / runs, s->step_mean_abs, 1e-12);
  // One file: its part is the whole summary.
  const std::vector<FileAccuracy> files = AccuracyByFile(*s);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].runs, 7);
  EXPECT_EQ(files[0].time_rows, s->time_rows);
  EXPECT_NEAR(files[0].step_mean_abs, s->step_mean_abs, 1e-12);
  EXPECT_NEAR(files[0].unseen_step_mean_abs, s->unseen_step_mean_abs, 1e-12);
  EXPECT_NEAR(files[0].alloc_mean_abs, s->alloc_mean_abs, 1e-12);
  EXPECT_EQ(files[0].verdicts_right, s->verdicts_right);
  EXPECT_EQ(s->time_rows, 3);
  EXPECT_EQ(s->memory_rows, 7);
}

}  // namespace
}  // namespace dsplan

namespace dsplan {
namespace {

// Repeats: timeline-1204 ran phi-2 at stage 3 and qwen2-1.5b at stage 1 twice each, the same
// configuration timed phase by phase (tl_) and once per step (ns_); its other three runs are
// configurations of their own. The floor is the least worst error one prediction can have.
TEST(RepeatGroups, SameConfigurationRunsAndTheirFloor) {
  std::unique_ptr<AccuracySummary> s =
      LoadAndEvaluate("/docs/validation/deepspeed/timeline-1204/records-timeline-h200.jsonl", 7);
  const std::vector<RepeatGroup> groups = RepeatGroups(*s);
  ASSERT_EQ(groups.size(), 2u);
  for (const RepeatGroup& g : groups) {
    ASSERT_EQ(g.rows.size(), 2u) << g.config;
    const AccuracyRow& a = s->rows[g.rows[0]];
    const AccuracyRow& b = s->rows[g.rows[1]];
    // The same configuration: ids differ only in their tl_/ns_ prefix.
    EXPECT_EQ(a.run.id.substr(3), b.run.id.substr(3)) << g.config;
    EXPECT_EQ(a.config_key, b.config_key);
    // The records say how each was timed (deepspeed_records.py copies the driver's phase_sync).
    EXPECT_EQ(a.run.phase_sync, a.run.id.rfind("tl_", 0) == 0) << a.run.id;
    EXPECT_EQ(b.run.phase_sync, b.run.id.rfind("tl_", 0) == 0) << b.run.id;
    const double lo = std::min(a.run.step_s, b.run.step_s);
    const double hi = std::max(a.run.step_s, b.run.step_s);
    EXPECT_DOUBLE_EQ(g.min_s, lo);
    EXPECT_DOUBLE_EQ(g.max_s, hi);
    // At p = 2 lo hi / (lo + hi) both ends are off by the floor, and no p does better.
    const double p = 2 * lo * hi / (lo + hi);
    EXPECT_NEAR((p - lo) / lo, g.floor_abs, 1e-12);
    EXPECT_NEAR((hi - p) / hi, g.floor_abs, 1e-12);
    EXPECT_GE(g.worst_abs + 1e-12, g.floor_abs) << g.config;
    EXPECT_NEAR(g.worst_abs, std::max(std::abs(a.step_error), std::abs(b.step_error)), 1e-12);
    // Two runs: the mean |error| is least at the slower run's time, (hi - lo) / hi over two.
    EXPECT_NEAR(g.mean_floor_abs, (hi - lo) / (2 * hi), 1e-12);
    EXPECT_NEAR(g.mean_abs, (std::abs(a.step_error) + std::abs(b.step_error)) / 2, 1e-12);
    EXPECT_GE(g.mean_abs + 1e-12, g.mean_floor_abs) << g.config;
  }
  // Widest spread first: phi-2 at stage 3 (0.611 vs 0.667 s) before qwen2-1.5b (0.428 vs 0.429).
  EXPECT_NE(groups[0].config.find("phi-2"), std::string::npos) << groups[0].config;
  EXPECT_GT(groups[0].floor_abs, 0.03);
  EXPECT_LT(groups[1].floor_abs, 0.01);
}

// The mean floor of three runs at 1, 2 and 4 s: one prediction p scores mean |p - x| / x; at
// p = 1 that is (0 + 1/2 + 3/4) / 3 = 5/12, at 2 it is (1 + 0 + 1/2) / 3 = 1/2, at 4 it is
// (3 + 1 + 0) / 3 = 4/3, and between the runs it is linear: 5/12 is the least. A fourth run of
// another configuration makes no group; a run without a time joins none.
TEST(RepeatGroups, MeanFloorIsTheBestSinglePredictionsMeanError) {
  AccuracySummary s;
  auto add = [&](const std::string& key, double step_s, double err, bool timed = true) {
    AccuracyRow r;
    r.config_key = key;
    r.run.step_s = step_s;
    r.has_time = timed;
    r.step_error = err;
    r.step_error_unseen = 2 * err;
    s.rows.push_back(r);
  };
  add("a", 2.0, 0.10);
  add("a", 1.0, -0.20);
  add("b", 3.0, 0.0);
  add("a", 4.0, 0.30);
  add("a", 9.0, 0.90, /*timed=*/false);
  const std::vector<RepeatGroup> groups = RepeatGroups(s);
  ASSERT_EQ(groups.size(), 1u);
  const RepeatGroup& g = groups[0];
  EXPECT_EQ(g.rows.size(), 3u);
  EXPECT_NEAR(g.mean_floor_abs, 5.0 / 12, 1e-12);
  EXPECT_NEAR(g.floor_abs, 3.0 / 5, 1e-12);  // (4 - 1) / (4 + 1)
  EXPECT_NEAR(g.mean_abs, 0.2, 1e-12);       // (0.1 + 0.2 + 0.3) / 3
  EXPECT_NEAR(g.mean_unseen_abs, 0.4, 1e-12);
  EXPECT_NEAR(g.worst_abs, 0.3, 1e-12);
}

}  // namespace
}  // namespace dsplan

namespace dsplan {
namespace {

// Fresh set 7 (fresh-1204i): the 22 rank-1 plans as registered. Peak allocated memory: never
// more than 2 % under. The two T5 plans at stage 3 with checkpointing (micro-batch 122) peak in
// an encoder block's backward; they were 12.6 % and 15 % over before the backward's working
// set freed the feed-forward half's tensors first (BackwardWorkingSets): t5-3b is within 3 %
// now, flan-t5-xl (gated-GELU feed-forward) still 9 % over.
TEST(FreshSet7, PeakAllocatedNeverUnder) {
  std::unique_ptr<AccuracySummary> s =
      LoadAndEvaluate("/docs/validation/deepspeed/fresh-1204i/records-fresh7-h200.jsonl", 22);
  for (const AccuracyRow& r : s->rows) {
    ASSERT_TRUE(r.has_memory) << r.run.id;
    EXPECT_GT(r.alloc_error, -0.02) << r.run.id;
    if (r.run.id != "flan-t5-xl_r1_mb122") {
      EXPECT_LT(r.alloc_error, 0.03) << r.run.id;
    }
  }
  EXPECT_LT(s->alloc_mean_abs, 0.01);
}

}  // namespace
}  // namespace dsplan

namespace dsplan {
namespace {

// A run on one GPU under a fake process group stands for one rank of a larger world: the record
// says its world size, dsplan predicts that many ranks' partitions, and its step time (no data
// moved) is not timing data.
TEST(EmulatedWorldSize, PredictedForItsWorldSizeAndNotTimed) {
  auto profile = FindHardwareProfile("h200-measured", kData);
  ASSERT_TRUE(profile.ok()) << profile.status().ToString();
  auto runs =
      LoadCalibration(kData + "/docs/validation/deepspeed/band-1206/records-band-1206.jsonl");
  ASSERT_TRUE(runs.ok()) << runs.status().ToString();
  // gpt2-medium's stage-1 plan (mb 40), as it ran and as rank 0 of four.
  CalibrationRun one;
  for (const CalibrationRun& r : *runs) {
    if (r.id == "gpt2-medium_r1_mb40") one = r;
  }
  ASSERT_EQ(one.id, "gpt2-medium_r1_mb40");
  nlohmann::json rec = {{"id", "w4"},
                        {"model", one.model},
                        {"model_config", one.model_config},
                        {"ds_config", one.ds_config},
                        {"mb", one.micro_batch},
                        {"seq_len", one.seq_len},
                        {"world_size", 4},
                        {"emulated", "fake process group"},
                        {"steps_max_alloc_mb_corrected", one.peak_alloc_mib},
                        {"steps_max_reserved_mb_corrected", one.peak_reserved_mib},
                        {"median_step_s_3to8", one.step_s}};
  rec["ds_config"]["train_batch_size"] = 4 * one.micro_batch;
  const std::string path = ::testing::TempDir() + "/emulated_world.jsonl";
  { std::ofstream(path) << rec.dump() << "\n"; }
  auto four = LoadCalibration(path);
  ASSERT_TRUE(four.ok()) << four.status().ToString();
  ASSERT_EQ(four->size(), 1u);
  EXPECT_EQ((*four)[0].world_size, 4);
  EXPECT_FALSE((*four)[0].timing_valid);
  auto s1 = EvaluateCalibration({one}, *profile, false);
  auto s4 = EvaluateCalibration(*four, *profile, false);
  ASSERT_TRUE(s1.ok() && s4.ok());
  const AccuracyRow& r1 = s1->rows.at(0);
  const AccuracyRow& r4 = s4->rows.at(0);
  EXPECT_TRUE(r1.has_time);
  EXPECT_FALSE(r4.has_time);
  EXPECT_TRUE(r4.has_memory);
  EXPECT_NE(r4.config_key.find("world size 4"), std::string::npos) << r4.config_key;
  // Stage 1 over four ranks keeps a quarter of the fp32 master weights and Adam's two moments
  // (12 bytes per parameter): 3/4 of that leaves each rank.
  const double params = 354.8e6;  // gpt2-medium
  const double saved_mib = 0.75 * 12 * params / (1 << 20);
  EXPECT_NEAR(r1.state_mib - r4.state_mib, saved_mib, 0.05 * saved_mib)
      << r1.state_mib << " " << r4.state_mib;

  // Its step (no data crossed a link) is compared with the prediction as the fake process group
  // ran it, apart from the step-time statistics: less than the full prediction, which pays for
  // the reduce.
  EXPECT_TRUE((*four)[0].emulated);
  ASSERT_TRUE(r4.has_step_without_communication);
  EXPECT_GT(r4.step_without_communication_s, 0);
  EXPECT_LT(r4.step_without_communication_s, r4.step_s);
  EXPECT_NEAR(r4.step_without_communication_error, r4.step_without_communication_s / one.step_s - 1,
              1e-12);
  EXPECT_EQ(s4->no_comm_rows, 1);
  EXPECT_EQ(s4->time_rows, 0);
  EXPECT_DOUBLE_EQ(s4->no_comm_step_mean_abs, std::abs(r4.step_without_communication_error));
  EXPECT_EQ(s1->no_comm_rows, 0);
  EXPECT_FALSE(r1.has_step_without_communication);
  const std::string md = AccuracyMarkdown(*s4, *profile, path);
  EXPECT_NE(md.find("fake process group"), std::string::npos);
  // A harness that instrumented the steps says its step is no timing data of any kind.
  rec["step_without_communication"] = false;
  { std::ofstream(path) << rec.dump() << "\n"; }
  auto instrumented = LoadCalibration(path);
  ASSERT_TRUE(instrumented.ok()) << instrumented.status().ToString();
  auto si = EvaluateCalibration(*instrumented, *profile, false);
  ASSERT_TRUE(si.ok());
  EXPECT_FALSE(si->rows.at(0).has_step_without_communication);
  EXPECT_EQ(si->no_comm_rows, 0);
  rec.erase("step_without_communication");

  // The run's rank is the one predicted (absent: 0, the harness's default); one outside the
  // world is one error naming the key.
  EXPECT_EQ((*four)[0].emulated_rank, 0);
  EXPECT_EQ(r4.rank, 0);
  rec["emulated_rank"] = 3;
  { std::ofstream(path) << rec.dump() << "\n"; }
  auto last = LoadCalibration(path);
  ASSERT_TRUE(last.ok()) << last.status().ToString();
  EXPECT_EQ((*last)[0].emulated_rank, 3);
  auto s_last = EvaluateCalibration(*last, *profile, false);
  ASSERT_TRUE(s_last.ok());
  EXPECT_EQ(s_last->rows.at(0).rank, 3);
  for (int bad : {-1, 4}) {
    rec["emulated_rank"] = bad;
    { std::ofstream(path) << rec.dump() << "\n"; }
    auto r = LoadCalibration(path);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("emulated_rank"), std::string::npos)
        << r.status().ToString();
  }
  rec.erase("emulated_rank");

  // A world size out of range is one error naming the key.
  for (int bad : {0, 70000}) {
    rec["world_size"] = bad;
    { std::ofstream(path) << rec.dump() << "\n"; }
    auto r = LoadCalibration(path);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("world_size"), std::string::npos) << r.status().ToString();
  }
}

}  // namespace
}  // namespace dsplan

namespace dsplan {
namespace {

// Every run of an accumulation set: it accumulates, fits, its peak allocated within 1 %, its
// reserved inside the band, its step within 10 %.
// Every run of a registered top-plan set: measured, said to fit, peak allocated within 1 % and
// peak reserved inside its band.
void ExpectRunsFitAndMemoryHolds(const AccuracySummary& s) {
  for (const AccuracyRow& r : s.rows) {
    ASSERT_TRUE(r.has_memory && r.has_time) << r.run.id;
    EXPECT_TRUE(r.fits) << r.run.id;
    EXPECT_LT(std::abs(r.alloc_error), 0.01) << r.run.id << " peak at " << r.peak_at;
    EXPECT_TRUE(r.reserved_in_band) << r.run.id << ": measured " << r.run.peak_reserved_mib
                                    << " MiB, predicted " << r.peak_reserved_mib;
  }
}

// An H100 record file of |runs| runs evaluated on h100-measured, each fitting with its memory
// predicted (ExpectRunsFitAndMemoryHolds) and its step inside the band its prediction printed.
std::unique_ptr<AccuracySummary> H100RunsInBandWhoseMemoryHolds(const std::string& file,
                                                                size_t runs) {
  std::unique_ptr<AccuracySummary> s = LoadAndEvaluate(file, runs, false, "h100-measured");
  EXPECT_EQ(s->rows.size(), runs);
  ExpectRunsFitAndMemoryHolds(*s);
  for (const AccuracyRow& r : s->rows) EXPECT_TRUE(r.in_band) << r.run.id << ": " << r.step_error;
  return s;
}

void ExpectAccumulationRunsHold(const AccuracySummary& s) {
  ExpectRunsFitAndMemoryHolds(s);
  for (const AccuracyRow& r : s.rows) {
    EXPECT_GT(r.run.ds_config.value("gradient_accumulation_steps", 1), 1) << r.run.id;
    EXPECT_LT(std::abs(r.step_error), 0.10) << r.run.id;
  }
}

// Fresh set 16 (docs/validation/deepspeed/accum-1210/, registered before it ran): the top plans
// for a global batch on an H100, each accumulating gradients over 4-16 micro-steps (stages 0-3,
// the optimizer on the CPU, T5), the first real runs with gradient_accumulation_steps above 1.
// As registered: step 5.8 % mean, 19.5 % worst (the CPU-Adam llama case, which the host
// accumulator's round trips explain: docs/deepspeed-facts.md); peak allocated 0.05 % mean, 0.3 %
// worst; reserved 9/9 in the band. Bounds a little above that, so that a change to the accumulation
// model (docs/simulator.md "Gradient accumulation") that breaks it shows.
TEST(GradientAccumulation, TopPlansForAGlobalBatchOnAnH100) {
  std::unique_ptr<AccuracySummary> s = LoadAndEvaluate(
      "/docs/validation/deepspeed/accum-1210/records-accum-h100.jsonl", 9, false, "h100-measured");
  ASSERT_EQ(s->rows.size(), 9u);
  ExpectAccumulationRunsHold(*s);
  EXPECT_LT(s->step_mean_abs, 0.05);
  EXPECT_LT(s->alloc_mean_abs, 0.005);
}

// Fresh set 17 (docs/validation/deepspeed/accum2-1211/, registered before it ran): the
// accumulation paths session 35 priced (CPU Adam at stages 1-2: the host accumulator's round
// trips; the in-place gradient add at stage 1 and in FP16_Optimizer) on six top plans of other
// families, on an H100. As registered: step 2.8 % mean, 8.2 % worst; allocated 0.15 % mean;
// reserved 6/6 in band. Each case's step within 10 %: without the round trips priced, a
// CPU-Adam plan comes out 11 % fast and this fails (checked).
TEST(GradientAccumulation, PricedPathsOnOtherFamiliesOnAnH100) {
  std::unique_ptr<AccuracySummary> s = LoadAndEvaluate(
      "/docs/validation/deepspeed/accum2-1211/records-accum2-h100.jsonl", 6, false, "h100-measured");
  ASSERT_EQ(s->rows.size(), 6u);
  ExpectAccumulationRunsHold(*s);
  EXPECT_LT(s->step_mean_abs, 0.05);
}

// accum3-1211 (registered session 35, run session 36 on an H100): ZeRO-3 with the optimizer (and
// the parameters) on the CPU and gradient accumulation, and checkpointing with accumulation at
// stages 2-3. As registered: step 6.5 % mean, +11.8 % worst (qwen2-0.5b's ZeRO-3 offload plan,
// 62 % host-bound, in its band), peak allocated 0.20 % mean, reserved 4/4 in band. The ZeRO-3
// offload steps follow the host's speed, so each step is held to its band rather than to 10 %.
TEST(GradientAccumulation, Zero3OffloadAndCheckpointingOnAnH100) {
  std::unique_ptr<AccuracySummary> s = H100RunsInBandWhoseMemoryHolds(
      "/docs/validation/deepspeed/accum3-1211/records-accum3-h100.jsonl", 4);
  ASSERT_EQ(s->rows.size(), 4u);
  for (const AccuracyRow& r : s->rows) {
    EXPECT_GT(r.run.ds_config.value("gradient_accumulation_steps", 1), 1) << r.run.id;
  }
  EXPECT_LT(s->step_mean_abs, 0.08);
}

// The same two ZeRO-3 CPU-offload plans of accum3-1211 again (session 37, timeline runs) on an H100
// whose host ran 1.3-2.4x slower: 2.00x and 1.39x of the prediction with the GPU's kernels
// unchanged. The memory prediction does not depend on the host and holds; the step lands inside
// the band that class carries since (0.72-2.05x), and is slower than predicted, as a slow host
// makes it.
TEST(GradientAccumulation, Zero3OffloadOnASlowHostStaysInItsBand) {
  std::unique_ptr<AccuracySummary> s = H100RunsInBandWhoseMemoryHolds(
      "/docs/validation/deepspeed/accum3-1211/records-accum3-timeline-h100.jsonl", 2);
  ASSERT_EQ(s->rows.size(), 2u);
  for (const AccuracyRow& r : s->rows) EXPECT_LT(r.step_error, -0.2) << r.run.id;
}

// fetchwait-1214 (registered before it ran, session 38): ZeRO-3 with the optimizer offloaded and
// the parameters on the CPU or on the GPU, llama-3.2-1b, bloom-1b7 and phi-1_5 (the last without
// its twin), on an H100 whose host ran slow (Python loop 35-66 ns). The forward's difference
// between the twins, the host's wait on the parameters' copies, came out +52 and +69 ms against
// +50 and +65 predicted; the whole steps were 8-20 % slower than predicted. Memory holds and
// each step lands in its band. These cases were chosen for the test, not by the planner:
// bloom-1b7's with the parameters offloaded reserved 75.3 of the H100's 80 GB, which dsplan
// calls at risk (it ran: a right verdict), so the verdict is checked as the record counts it.
TEST(OffloadedFetchWaits, RegisteredTwinsOnAnH100) {
  std::unique_ptr<AccuracySummary> s = LoadAndEvaluate(
      "/docs/validation/deepspeed/fetchwait-1214/records-fetchwait-h100.jsonl", 5, false,
      "h100-measured");
  ASSERT_EQ(s->rows.size(), 5u);
  for (const AccuracyRow& r : s->rows) {
    ASSERT_TRUE(r.has_memory && r.has_time) << r.run.id;
    EXPECT_EQ(r.run.ds_config["zero_optimization"].value("stage", 0), 3) << r.run.id;
    EXPECT_TRUE(r.verdict_right) << r.run.id << ": " << r.verdict;
    EXPECT_LT(std::abs(r.alloc_error), 0.01) << r.run.id;
    EXPECT_TRUE(r.reserved_in_band) << r.run.id;
    EXPECT_TRUE(r.in_band) << r.run.id << ": " << r.step_error;
  }
}

// Fresh set 18 (docs/validation/deepspeed/bigtok-1212/, registered before it ran): the top plans
// of small models whose Linears run at 28-50 k tokens per micro-batch on an H100 (pythia-160m
// and pythia-410m by their config files, gpt2 at 512 tokens, bert-large at 256, opt-125m at
// 2048, flan-t5-base at 256 + 64). As registered: step 2.7 % mean, -5.2 % worst, allocated
// 0.12 % mean, 6/6 in band. Their GEMMs lie above the GEMM tables' 16,384 tokens
// (LinearSeriesRate) and, for most, on shapes the H100 table has measured only since session 36.
TEST(SmallModelsAtLargeTokenCounts, TopPlansOnAnH100) {
  std::unique_ptr<AccuracySummary> s = H100RunsInBandWhoseMemoryHolds(
      "/docs/validation/deepspeed/bigtok-1212/records-bigtok-h100.jsonl", 6);
  ASSERT_EQ(s->rows.size(), 6u);
  for (const AccuracyRow& r : s->rows) EXPECT_LT(std::abs(r.step_error), 0.07) << r.run.id;
  EXPECT_LT(s->step_mean_abs, 0.04);
}

}  // namespace
}  // namespace dsplan

namespace dsplan {
namespace {

// The host's speed at each run (the harness's Linear-forward loop before and after it) is read
// from the record, and the summary splits the host classes by it: bigtok-1212's six runs ran
// on a fast host (13.0-13.3 us), gemma3-1216's four on a slow one (22.9-25.5 us), so with the
// median of the ten in the first group the four are "slow" and the parts add up to the
// classes.
TEST(HostSpeed, RecordsReadingsSplitTheHostClasses) {
  auto profile = FindHardwareProfile("h100-measured", kData);
  ASSERT_TRUE(profile.ok()) << profile.status().ToString();
  std::vector<CalibrationRun> runs;
  for (const char* file : {"/docs/validation/deepspeed/bigtok-1212/records-bigtok-h100.jsonl",
                           "/docs/validation/deepspeed/gemma3-1216/records-gemma3-h100.jsonl"}) {
    auto more = LoadCalibration(kData + file);
    ASSERT_TRUE(more.ok()) << more.status().ToString();
    // Each run's reading is the mean of its record's two, read here from the file itself.
    std::ifstream in(kData + file);
    std::string line;
    size_t i = 0;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      const nlohmann::json j = nlohmann::json::parse(line);
      ASSERT_LT(i, more->size());
      const double expect = (j["host_speed_before"]["linear_fwd_us"].get<double>() +
                             j["host_speed_after"]["linear_fwd_us"].get<double>()) /
                            2;
      EXPECT_NEAR((*more)[i].host_loop_us, expect, 1e-9) << (*more)[i].id;
      ++i;
    }
    EXPECT_EQ(i, more->size());
    runs.insert(runs.end(), more->begin(), more->end());
  }
  auto s = EvaluateCalibration(runs, *profile, false);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->host_loop_runs, s->time_rows);
  EXPECT_EQ(s->time_rows, 10);
  int slow = 0, total = 0;
  double slow_signed = 0;
  for (const AccuracyRow& r : s->rows) {
    const bool is_slow = r.run.id.rfind("gemma3_", 0) == 0;
    EXPECT_EQ(r.run.host_loop_us > AccuracySummary::kSlowHostLoop * s->host_loop_median_us, is_slow)
        << r.run.id << " " << r.run.host_loop_us;
    if (is_slow) {
      ++slow;
      slow_signed += r.step_error;
    }
  }
  EXPECT_EQ(slow, 4);
  double parts_signed = 0;
  for (size_t c = 0; c < s->by_host.size(); ++c) {
    EXPECT_EQ(s->by_host_speed[c][0].runs + s->by_host_speed[c][1].runs, s->by_host[c].runs)
        << s->by_host[c].name;
    for (int k = 0; k < 2; ++k) total += s->by_host_speed[c][k].runs;
    parts_signed += s->by_host_speed[c][1].signed_mean * s->by_host_speed[c][1].runs;
  }
  EXPECT_EQ(total, 10);
  EXPECT_NEAR(parts_signed, slow_signed, 1e-9);
  // The report names the split, with the reading's median.
  const std::string md = AccuracyMarkdown(*s, *profile, "x", "");
  EXPECT_NE(md.find("By the host's speed at the run"), std::string::npos);
  EXPECT_NE(md.find(fmt::format("{:.1f} us", s->host_loop_median_us)), std::string::npos);
}

// A record without readings (the calibration fixture predates them) has no split and no
// sentence.
TEST(HostSpeed, NoReadingsNoSplit) {
  std::unique_ptr<AccuracySummary> s =
      LoadAndEvaluate("/tests/fixtures/calibration/deepspeed-h200.jsonl", 18);
  EXPECT_EQ(s->host_loop_runs, 0);
  for (const auto& parts : s->by_host_speed) {
    for (const AccuracySummary::HostSpeedPart& p : parts) EXPECT_EQ(p.runs, 0);
  }
}

}  // namespace
}  // namespace dsplan
