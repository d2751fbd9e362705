// CheckPlan: the judgements `dsplan check` adds to a simulated config. Each case has a control
// (the same plan without the fault) that must stay silent about it.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/hardware_profile.h"
#include "core/model_catalog.h"
#include "planner/check.h"
#include "simulator/simulate.h"
#include "simulator/workload.h"

namespace dsplan {
namespace {

class CheckTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto m = LoadModel("gpt2", DSPLAN_TEST_DATA_DIR);
    ASSERT_TRUE(m.ok()) << m.status().message();
    spec_ = new ModelSpec(*m);
    auto p = FindHardwareProfile("h200-measured", DSPLAN_TEST_DATA_DIR);
    ASSERT_TRUE(p.ok()) << p.status().message();
    profile_ = new HardwareProfile(*p);
  }
  static void TearDownTestSuite() {
    delete spec_;
    delete profile_;
    spec_ = nullptr;
    profile_ = nullptr;
  }

  static Plan Base(int gpus, int stage) {
    Plan p;
    p.gpus_per_node = gpus;
    p.micro_batch = 4;
    p.precision = Precision::kBf16;
    p.seq_len = 1024;
    p.zero.stage = stage;
    return p;
  }

  /// CheckPlan on |plan| with its own simulation.
  std::vector<std::string> Check(const Plan& plan, Prediction* out = nullptr) {
    auto w = BuildWorkload(*spec_, plan.shape());
    EXPECT_TRUE(w.ok()) << w.status().message();
    if (!w.ok()) return {};
    const int64_t threshold = plan.zero.stage == 3 ? plan.zero.stage3_param_persistence_threshold : 0;
    SimulationContext ctx = MakeSimulationContext(*w, *profile_, plan.precision, threshold);
    auto pred = Simulate(ctx, plan);
    EXPECT_TRUE(pred.ok()) << pred.status().message();
    if (!pred.ok()) return {};
    if (out) *out = *pred;
    return CheckPlan(plan, *pred, *profile_);
  }

  static bool Mentions(const std::vector<std::string>& lines, const std::string& what) {
    for (const std::string& l : lines) {
      if (l.find(what) != std::string::npos) return true;
    }
    return false;
  }
  static std::string Join(const std::vector<std::string>& lines) {
    std::string s;
    for (const std::string& l : lines) s += l + "\n";
    return s;
  }

  static ModelSpec* spec_;
  static HardwareProfile* profile_;
};

ModelSpec* CheckTest::spec_ = nullptr;
HardwareProfile* CheckTest::profile_ = nullptr;

TEST_F(CheckTest, BucketLargerThanTheModelWarns) {
  // gpt2 has 124 M parameters; DeepSpeed's default bucket is 5e8 elements.
  Plan p = Base(2, 2);
  p.zero.reduce_bucket_size = 500'000'000;
  Prediction pred;
  const auto lines = Check(p, &pred);
  ASSERT_GT(pred.facts.params, 100'000'000);
  ASSERT_LT(pred.facts.params, p.zero.reduce_bucket_size);
  EXPECT_TRUE(Mentions(lines, "reduce_bucket_size")) << Join(lines);
  // Every finding is one line.
  for (const std::string& l : lines) EXPECT_EQ(l.find('\n'), std::string::npos) << l;
}

TEST_F(CheckTest, BucketLargerThanTheModelWarnsAtStage3Too) {
  Plan p = Base(2, 3);
  p.zero.reduce_bucket_size = 500'000'000;
  const auto lines = Check(p);
  EXPECT_TRUE(Mentions(lines, "reduce_bucket_size")) << Join(lines);
}

TEST_F(CheckTest, SmallBucketDoesNotWarn) {
  Plan p = Base(2, 2);
  p.zero.reduce_bucket_size = 5'000'000;
  p.zero.overlap_comm = true;
  Prediction pred;
  const auto lines = Check(p, &pred);
  // The premise, from first principles: two bf16 buffers of 5e6 elements are 20 MB, smaller than
  // the model and under 5% of the peak.
  ASSERT_LT(p.zero.reduce_bucket_size, pred.facts.params);
  ASSERT_LT(2.0 * 2 * p.zero.reduce_bucket_size, 0.05 * pred.gpu_peak_allocated_bytes);
  EXPECT_FALSE(Mentions(lines, "reduce_bucket_size")) << Join(lines);
}

TEST_F(CheckTest, StageZeroHasNoBucketToJudge) {
  // Stage 0 has no ZeRO reduce bucket: the (default) 5e8 value is not a waste there.
  Plan p = Base(2, 0);
  p.zero.reduce_bucket_size = 500'000'000;
  const auto lines = Check(p);
  EXPECT_FALSE(Mentions(lines, "reduce_bucket_size")) << Join(lines);
}

TEST_F(CheckTest, PageableOffloadWarns) {
  Plan p = Base(2, 2);
  p.zero.reduce_bucket_size = 5'000'000;
  p.zero.offload_optimizer.device = OffloadDevice::kCpu;
  p.zero.offload_optimizer.pin_memory = false;
  const auto lines = Check(p);
  EXPECT_TRUE(Mentions(lines, "pin_memory")) << Join(lines);
  // Control: pinned offload is not warned about.
  p.zero.offload_optimizer.pin_memory = true;
  const auto pinned = Check(p);
  EXPECT_FALSE(Mentions(pinned, "pin_memory")) << Join(pinned);
}

TEST_F(CheckTest, ParamOffloadPinMemoryIsNamedAsWithoutEffect) {
  // Stage 3 keeps the offloaded parameter partitions in one always-pinned flat buffer
  // (docs/deepspeed-facts.md#offload), so offload_param.pin_memory false changes nothing in
  // training: the check says so instead of warning about pageable copies.
  Plan p = Base(2, 3);
  p.zero.reduce_bucket_size = 5'000'000;
  p.zero.offload_optimizer.device = OffloadDevice::kCpu;
  p.zero.offload_optimizer.pin_memory = true;
  p.zero.offload_param.device = OffloadDevice::kCpu;
  p.zero.offload_param.pin_memory = false;
  const auto lines = Check(p);
  EXPECT_TRUE(Mentions(lines, "offload_param.pin_memory")) << Join(lines);
  EXPECT_TRUE(Mentions(lines, "no effect")) << Join(lines);
  p.zero.offload_param.pin_memory = true;
  EXPECT_FALSE(Mentions(Check(p), "offload_param.pin_memory"));
}

TEST_F(CheckTest, Stage3OnOneGpuWarns) {
  Plan p = Base(1, 3);
  p.zero.reduce_bucket_size = 5'000'000;
  const auto lines = Check(p);
  EXPECT_TRUE(Mentions(lines, "stage 3") && Mentions(lines, "one GPU")) << Join(lines);
  // Controls: two GPUs partition something; one GPU with offload is a reason for stage 3.
  const auto two = Check(Base(2, 3));
  EXPECT_FALSE(Mentions(two, "one GPU")) << Join(two);
  Plan off = Base(1, 3);
  off.zero.reduce_bucket_size = 5'000'000;
  off.zero.offload_optimizer.device = OffloadDevice::kCpu;
  off.zero.offload_optimizer.pin_memory = true;
  off.zero.offload_param.device = OffloadDevice::kCpu;
  off.zero.offload_param.pin_memory = true;
  const auto with_offload = Check(off);
  EXPECT_FALSE(Mentions(with_offload, "one GPU")) << Join(with_offload);
}

TEST_F(CheckTest, CleanPlanHasNoFindings) {
  // Stage 2, small bucket, overlap on, two GPUs, no offload: nothing to say.
  Plan p = Base(2, 2);
  p.zero.reduce_bucket_size = 5'000'000;
  p.zero.overlap_comm = true;
  const auto lines = Check(p);
  EXPECT_TRUE(lines.empty()) << Join(lines);
}

}  // namespace
}  // namespace dsplan
