// Accuracy against real DeepSpeed runs on an H200 (tests/fixtures/calibration, a copy of
// ../shared/calibration): every run is simulated with the measured H200 profile and compared with
// what DeepSpeed measured. The same rows produce docs/accuracy.md (`dsplan accuracy`).
#include <cmath>
#include <cstdio>
#include <string>

#include <gtest/gtest.h>

#include "core/hardware_profile.h"
#include "planner/accuracy.h"

namespace dsplan {
namespace {

const std::string kData = DSPLAN_TEST_DATA_DIR;

class CalibrationTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto profile = FindHardwareProfile("h200-measured", kData);
    ASSERT_TRUE(profile.ok()) << profile.status().ToString();
    auto runs = LoadCalibration(kData + "/tests/fixtures/calibration/deepspeed-h200.jsonl");
    ASSERT_TRUE(runs.ok()) << runs.status().ToString();
    ASSERT_EQ(runs->size(), 18u);
    auto s = EvaluateCalibration(*runs, *profile);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    summary_ = new AccuracySummary(std::move(*s));
  }
  static void TearDownTestSuite() { delete summary_; }
  static AccuracySummary* summary_;
};
AccuracySummary* CalibrationTest::summary_ = nullptr;

// The targets for memory: every case within 5%, mean under 3%.
TEST_F(CalibrationTest, PeakAllocatedWithinFivePercentEveryRun) {
  for (const AccuracyRow& r : summary_->rows) {
    EXPECT_LT(std::abs(r.alloc_error), 0.05)
        << r.run.id << ": measured " << r.run.peak_alloc_mib << " MiB, predicted "
        << r.peak_alloc_mib << " MiB (peak at " << r.peak_at << ")";
  }
  EXPECT_LT(summary_->alloc_mean_abs, 0.03);
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

// Step time: the target is a mean error under 10%. Two software-stack constants of the
// cost model are fitted on these same runs (docs/simulator.md), so this is an in-sample check;
// every run must also stay within 40% (today's worst: stage 3 gpt2-xl micro-batch 4, -34%).
TEST_F(CalibrationTest, StepTimeMeanErrorUnderTenPercent) {
  EXPECT_LT(summary_->step_mean_abs, 0.10);
  for (const AccuracyRow& r : summary_->rows) {
    EXPECT_GT(r.step_s, 0) << r.run.id;
    EXPECT_LT(std::abs(r.step_error), 0.40) << r.run.id;
  }
}

}  // namespace
}  // namespace dsplan
