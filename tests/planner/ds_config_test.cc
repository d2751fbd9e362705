// ParseDsConfig: DeepSpeed's loader semantics (deepspeed.md §5) and the HF Trainer's "auto".
#include "planner/ds_config.h"

#include <string>

#include <gtest/gtest.h>

namespace dsplan {
namespace {

using json = nlohmann::json;

std::string Fixture(const std::string& name) {
  return std::string(DSPLAN_TEST_DATA_DIR) + "/tests/fixtures/ds_configs/" + name;
}

DsConfigContext Cluster(int nodes, int gpus) {
  DsConfigContext c;
  c.nodes = nodes;
  c.gpus_per_node = gpus;
  return c;
}

bool HasWarning(const ParsedDsConfig& p, const std::string& needle) {
  for (const std::string& w : p.warnings) {
    if (w.find(needle) != std::string::npos) return true;
  }
  return false;
}

std::string Warnings(const ParsedDsConfig& p) {
  std::string s;
  for (const std::string& w : p.warnings) s += w + "\n";
  return s;
}

/// Parses |cfg| expecting an error; returns its message.
std::string ErrorOf(const json& cfg, const DsConfigContext& ctx = Cluster(1, 1)) {
  auto r = ParseDsConfig(cfg, ctx);
  EXPECT_FALSE(r.ok()) << "expected an error for " << cfg.dump();
  return r.ok() ? "" : r.status().message();
}

json Base() {
  return json{{"train_micro_batch_size_per_gpu", 4}, {"bf16", {{"enabled", true}}}};
}

// --- the calibration configs (real DeepSpeed runs on an H200) ------------------------------------

struct CalibCase {
  const char* id;
  int stage;
  int64_t micro;
  bool offload_optimizer;
  bool offload_param;
  const char* wrapper;  // what DeepSpeed 0.14.5 built on the H200
};

class CalibrationConfigTest : public ::testing::TestWithParam<CalibCase> {};

TEST_P(CalibrationConfigTest, ParsesToTheRunsPlanAndWrapper) {
  const CalibCase& c = GetParam();
  auto r = ParseDsConfigFile(Fixture(std::string("calib_") + c.id + ".json"), Cluster(1, 1));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const Plan& p = r->plan;
  EXPECT_EQ(p.zero.stage, c.stage);
  EXPECT_EQ(p.micro_batch, c.micro);
  EXPECT_EQ(p.grad_accum, 1);
  EXPECT_EQ(p.precision, Precision::kBf16);
  EXPECT_EQ(p.optimizer, OptimizerType::kAdamW);
  EXPECT_EQ(p.torch_adam, !c.offload_optimizer);  // the offload runs drop torch_adam
  EXPECT_DOUBLE_EQ(p.gradient_clipping, 1.0);
  EXPECT_EQ(p.OffloadsOptimizer(), c.offload_optimizer);
  EXPECT_EQ(p.OffloadsParams(), c.offload_param);
  if (c.offload_optimizer) {
    EXPECT_TRUE(p.zero.offload_optimizer.pin_memory);
  }
  EXPECT_STREQ(OptimizerWrapperName(p.Wrapper()), c.wrapper);
  EXPECT_TRUE(r->resolved_from_auto.empty());
}

INSTANTIATE_TEST_SUITE_P(
    H200, CalibrationConfigTest,
    ::testing::Values(
        CalibCase{"gpt2-xl_s0_mb4", 0, 4, false, false, "BF16_Optimizer"},
        CalibCase{"gpt2-xl_s0_mb8", 0, 8, false, false, "BF16_Optimizer"},
        CalibCase{"gpt2-xl_s1_mb4", 1, 4, false, false, "DeepSpeedZeroOptimizer"},
        CalibCase{"gpt2-xl_s1_mb8", 1, 8, false, false, "DeepSpeedZeroOptimizer"},
        CalibCase{"gpt2-xl_s2_mb4", 2, 4, false, false, "DeepSpeedZeroOptimizer"},
        CalibCase{"gpt2-xl_s2_mb8", 2, 8, false, false, "DeepSpeedZeroOptimizer"},
        CalibCase{"gpt2-xl_s2_mb8_gc", 2, 8, false, false, "DeepSpeedZeroOptimizer"},
        CalibCase{"gpt2-xl_s3_mb4", 3, 4, false, false, "DeepSpeedZeroOptimizer_Stage3"},
        CalibCase{"gpt2-xl_s3_mb8", 3, 8, false, false, "DeepSpeedZeroOptimizer_Stage3"},
        CalibCase{"gpt2-xl_s2_mb8_offopt-cpu", 2, 8, true, false, "DeepSpeedZeroOptimizer"},
        CalibCase{"gpt2-xl_s3_mb8_offopt-cpu_offparam-cpu", 3, 8, true, true,
                  "DeepSpeedZeroOptimizer_Stage3"},
        CalibCase{"t5-large_s0_mb4", 0, 4, false, false, "BF16_Optimizer"},
        CalibCase{"t5-large_s0_mb8", 0, 8, false, false, "BF16_Optimizer"},
        CalibCase{"t5-large_s1_mb4", 1, 4, false, false, "DeepSpeedZeroOptimizer"},
        CalibCase{"t5-large_s1_mb8", 1, 8, false, false, "DeepSpeedZeroOptimizer"},
        CalibCase{"t5-large_s2_mb4", 2, 4, false, false, "DeepSpeedZeroOptimizer"},
        CalibCase{"t5-large_s2_mb8", 2, 8, false, false, "DeepSpeedZeroOptimizer"},
        CalibCase{"t5-large_s2_mb8_offopt-cpu", 2, 8, true, false, "DeepSpeedZeroOptimizer"}),
    [](const ::testing::TestParamInfo<CalibCase>& info) {
      std::string n = info.param.id;
      for (char& ch : n) {
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      }
      return n;
    });

// --- the HF docs' "auto" configs -----------------------------------------------------------------

TEST(HfAutoConfigTest, Zero2OffloadResolvesLikeTheTrainer) {
  DsConfigContext ctx = Cluster(2, 4);
  ctx.micro_batch = 8;
  ctx.grad_accum = 4;
  ctx.precision = Precision::kBf16;
  ctx.hidden_size = 1024;
  auto r = ParseDsConfigFile(Fixture("hf_zero2_auto.json"), ctx);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const Plan& p = r->plan;
  EXPECT_EQ(p.world_size(), 8);
  EXPECT_EQ(p.micro_batch, 8);
  EXPECT_EQ(p.grad_accum, 4);
  EXPECT_EQ(p.train_batch(), 256);
  EXPECT_EQ(p.precision, Precision::kBf16);
  EXPECT_DOUBLE_EQ(p.gradient_clipping, 1.0);  // Trainer's max_grad_norm default
  EXPECT_EQ(p.zero.stage, 2);
  EXPECT_EQ(p.zero.offload_optimizer.device, OffloadDevice::kCpu);
  EXPECT_EQ(p.zero.reduce_bucket_size, 200'000'000);  // 2e8 given, not "auto"
  EXPECT_EQ(p.zero.allgather_bucket_size, 200'000'000);
  EXPECT_EQ(p.zero.overlap_comm, std::optional<bool>(true));
  EXPECT_EQ(p.scheduler, "WarmupLR");
  EXPECT_TRUE(HasWarning(*r, "allgather_partitions has no effect")) << Warnings(*r);
  EXPECT_TRUE(HasWarning(*r, "allgather_bucket_size has no effect")) << Warnings(*r);
  for (const char* k : {"train_batch_size", "train_micro_batch_size_per_gpu",
                        "gradient_accumulation_steps", "gradient_clipping", "fp16.enabled",
                        "bf16.enabled", "optimizer.params.lr"}) {
    EXPECT_NE(std::find(r->resolved_from_auto.begin(), r->resolved_from_auto.end(), k),
              r->resolved_from_auto.end())
        << k;
  }
}

TEST(HfAutoConfigTest, Zero3HiddenSizeKeysFollowTheTrainer) {
  DsConfigContext ctx = Cluster(1, 8);
  ctx.micro_batch = 2;
  ctx.grad_accum = 1;
  ctx.precision = Precision::kFp16;
  ctx.hidden_size = 1024;  // 0.9*h*h = 943718.4: the Trainer writes int(...)
  auto r = ParseDsConfigFile(Fixture("hf_zero3_auto.json"), ctx);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const ZeroConfig& z = r->plan.zero;
  EXPECT_EQ(r->plan.precision, Precision::kFp16);
  EXPECT_EQ(z.stage, 3);
  EXPECT_EQ(z.reduce_bucket_size, 1024 * 1024);
  EXPECT_EQ(z.stage3_prefetch_bucket_size, 943718);
  EXPECT_EQ(z.stage3_param_persistence_threshold, 10240);
  EXPECT_EQ(z.sub_group_size, 1'000'000'000);
  EXPECT_EQ(z.stage3_max_live_parameters, 1'000'000'000);
  EXPECT_TRUE(z.gather_16bit_weights_on_model_save);
  EXPECT_EQ(z.offload_param.device, OffloadDevice::kCpu);
  EXPECT_TRUE(z.offload_param.pin_memory);
}

TEST(HfAutoConfigTest, HiddenSizeKeysWithoutAModelFallBackToDefaultsWithAWarning) {
  DsConfigContext ctx = Cluster(1, 8);
  ctx.micro_batch = 2;
  ctx.grad_accum = 1;
  ctx.precision = Precision::kBf16;
  auto r = ParseDsConfigFile(Fixture("hf_zero3_auto.json"), ctx);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->plan.zero.reduce_bucket_size, 500'000'000);
  EXPECT_EQ(r->plan.zero.stage3_prefetch_bucket_size, 50'000'000);
  EXPECT_EQ(r->plan.grad_accum, 1);
  EXPECT_TRUE(HasWarning(*r, "zero_optimization.stage3_prefetch_bucket_size is \"auto\" but the "
                             "model's hidden size is not known"))
      << Warnings(*r);
}

TEST(HfAutoConfigTest, ReduceBucketAutoIsHSquaredAtStage2ButStage3KeysAreNotFilled) {
  json cfg = Base();
  cfg["zero_optimization"] = {{"stage", 2},
                              {"reduce_bucket_size", "auto"},
                              {"stage3_prefetch_bucket_size", "auto"}};
  DsConfigContext ctx = Cluster(1, 1);
  ctx.hidden_size = 1600;
  auto r = ParseDsConfig(cfg, ctx);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->plan.zero.reduce_bucket_size, 1600 * 1600);
  EXPECT_EQ(r->plan.zero.stage3_prefetch_bucket_size, 50'000'000);
  EXPECT_TRUE(HasWarning(*r, "stage3_prefetch_bucket_size is \"auto\", which the HF Trainer does "
                             "not fill"))
      << Warnings(*r);
}

const AutoValue* FindAuto(const ParsedDsConfig& r, const std::string& key) {
  for (const AutoValue& a : r.auto_values) {
    if (a.key == key) return &a;
  }
  return nullptr;
}

// "auto" batch keys without flags take the HF Trainer's defaults (per_device_train_batch_size
// 8, gradient_accumulation_steps 1), as precision and clipping do, and say so.
TEST(HfAutoConfigTest, UnresolvedMicroBatchAutoIsTheTrainersDefault) {
  auto r = ParseDsConfigFile(Fixture("hf_zero2_auto.json"), Cluster(1, 4));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->plan.micro_batch, 8);
  const AutoValue* a = FindAuto(*r, "train_micro_batch_size_per_gpu");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->value, "8");
  EXPECT_TRUE(a->from_default);
  EXPECT_NE(a->source.find("--micro-batch"), std::string::npos) << a->source;
}

TEST(HfAutoConfigTest, UnresolvedAccumulationAutoIsTheTrainersDefault) {
  json cfg = Base();
  cfg["gradient_accumulation_steps"] = "auto";
  auto r = ParseDsConfig(cfg, Cluster(1, 1));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->plan.grad_accum, 1);
  const AutoValue* a = FindAuto(*r, "gradient_accumulation_steps");
  ASSERT_NE(a, nullptr);
  EXPECT_TRUE(a->from_default);
  EXPECT_NE(a->source.find("--grad-accum"), std::string::npos) << a->source;
}

TEST(HfAutoConfigTest, GlobalBatchDerivesAccumulation) {
  json cfg = {{"train_batch_size", "auto"},
              {"train_micro_batch_size_per_gpu", "auto"},
              {"gradient_accumulation_steps", "auto"}};
  DsConfigContext ctx = Cluster(1, 4);
  ctx.micro_batch = 4;
  ctx.global_batch = 64;
  auto r = ParseDsConfig(cfg, ctx);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->plan.grad_accum, 4);
  EXPECT_EQ(r->plan.train_batch(), 64);
}

TEST(HfAutoConfigTest, PrecisionAutoWithoutAFlagIsTheTrainersDefaultWithAWarning) {
  json cfg = {{"train_micro_batch_size_per_gpu", 1}, {"bf16", {{"enabled", "auto"}}}};
  auto r = ParseDsConfig(cfg, Cluster(1, 1));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->plan.precision, Precision::kFp32);
  EXPECT_TRUE(HasWarning(*r, "bf16.enabled is \"auto\" and no precision was given"))
      << Warnings(*r);
}

TEST(HfAutoConfigTest, ExplicitValueDifferentFromTheFlagIsAMismatch) {
  json cfg = Base();
  DsConfigContext ctx = Cluster(1, 1);
  ctx.micro_batch = 8;
  const std::string msg = ErrorOf(cfg, ctx);
  EXPECT_NE(msg.find("train_micro_batch_size_per_gpu is 4 in the config but --micro-batch 8"),
            std::string::npos)
      << msg;
}

TEST(HfAutoConfigTest, AutoInsideOffloadBlockUsesTheDefault) {
  json cfg = Base();
  cfg["zero_optimization"] = {{"stage", 3},
                              {"offload_param", {{"device", "cpu"}, {"pin_memory", "auto"}}}};
  auto r = ParseDsConfig(cfg, Cluster(1, 1));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->plan.zero.offload_param.pin_memory);
  EXPECT_TRUE(HasWarning(*r, "offload_param.pin_memory is \"auto\"")) << Warnings(*r);
}

// --- batch rules (config.py _set_batch_related_parameters / _batch_assertion) -------------------

TEST(BatchTest, AllThreeMustMatch) {
  auto r = ParseDsConfigFile(Fixture("bad_batch_mismatch.json"), Cluster(1, 4));
  ASSERT_FALSE(r.ok());
  const std::string msg = r.status().message();
  EXPECT_NE(msg.find("train_batch_size 64 != train_micro_batch_size_per_gpu 4 * "
                     "gradient_accumulation_steps 2 * world size 4"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("bad_batch_mismatch.json"), std::string::npos) << msg;
}

TEST(BatchTest, AllThreeMatching) {
  auto r = ParseDsConfigFile(Fixture("bad_batch_mismatch.json"), Cluster(2, 4));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->plan.micro_batch, 4);
  EXPECT_EQ(r->plan.grad_accum, 2);
}

TEST(BatchTest, TrainAndMicroDeriveAccumulationByIntegerDivision) {
  json cfg = {{"train_batch_size", 64}, {"train_micro_batch_size_per_gpu", 4}};
  auto r = ParseDsConfig(cfg, Cluster(1, 8));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->plan.grad_accum, 2);
}

TEST(BatchTest, IntegerDivisionThatDoesNotDivideFailsTheAssertion) {
  json cfg = {{"train_batch_size", 60}, {"train_micro_batch_size_per_gpu", 4}};
  const std::string msg = ErrorOf(cfg, Cluster(1, 8));  // gas = 60 // 4 // 8 = 1; 60 != 32
  EXPECT_NE(msg.find("train_batch_size 60 != train_micro_batch_size_per_gpu 4 * "
                     "gradient_accumulation_steps 1 * world size 8"),
            std::string::npos)
      << msg;
}

TEST(BatchTest, TrainAndAccumulationDeriveMicro) {
  json cfg = {{"train_batch_size", 96}, {"gradient_accumulation_steps", 3}};
  auto r = ParseDsConfig(cfg, Cluster(2, 4));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->plan.micro_batch, 4);
}

TEST(BatchTest, MicroAndAccumulationDeriveTrain) {
  json cfg = {{"train_micro_batch_size_per_gpu", 3}, {"gradient_accumulation_steps", 5}};
  auto r = ParseDsConfig(cfg, Cluster(1, 2));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->plan.train_batch(), 30);
}

TEST(BatchTest, OnlyTrainGivesAccumulationOne) {
  json cfg = {{"train_batch_size", 32}};
  auto r = ParseDsConfig(cfg, Cluster(1, 8));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->plan.micro_batch, 4);
  EXPECT_EQ(r->plan.grad_accum, 1);
}

TEST(BatchTest, TrainSmallerThanWorldSizeGivesMicroZero) {
  json cfg = {{"train_batch_size", 4}};
  const std::string msg = ErrorOf(cfg, Cluster(1, 8));
  EXPECT_NE(msg.find("train_micro_batch_size_per_gpu is 0"), std::string::npos) << msg;
}

TEST(BatchTest, OnlyAccumulationIsAnError) {
  json cfg = {{"gradient_accumulation_steps", 4}};
  const std::string msg = ErrorOf(cfg);
  EXPECT_NE(msg.find("neither train_batch_size nor train_micro_batch_size_per_gpu"),
            std::string::npos)
      << msg;
}

TEST(BatchTest, FractionalBatchIsRejected) {
  json cfg = {{"train_micro_batch_size_per_gpu", 2.5}};
  const std::string msg = ErrorOf(cfg);
  EXPECT_NE(msg.find("train_micro_batch_size_per_gpu must be an integer, got 2.5"),
            std::string::npos)
      << msg;
}

// --- precision -----------------------------------------------------------------------------------

TEST(PrecisionTest, Fp16AndBf16TogetherIsAnError) {
  auto r = ParseDsConfigFile(Fixture("bad_fp16_and_bf16.json"), Cluster(1, 1));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("fp16.enabled and bf16.enabled are both true"),
            std::string::npos)
      << r.status().message();
}

TEST(PrecisionTest, BfloatSixteenAlias) {
  json cfg = {{"train_micro_batch_size_per_gpu", 1}, {"bfloat16", {{"enabled", true}}}};
  auto r = ParseDsConfig(cfg, Cluster(1, 1));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->plan.precision, Precision::kBf16);
}

TEST(PrecisionTest, NoBlockIsFp32AndStageZeroBf16UsesFp32Accumulation) {
  json cfg = {{"train_micro_batch_size_per_gpu", 1}};
  auto r = ParseDsConfig(cfg, Cluster(1, 1));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->plan.precision, Precision::kFp32);
  EXPECT_EQ(r->plan.Wrapper(), OptimizerWrapper::kBasic);
}

TEST(PrecisionTest, Fp16LossScaleKeysAreRead) {
  json cfg = {{"train_micro_batch_size_per_gpu", 1},
              {"fp16", {{"enabled", true}, {"loss_scale_window", 500}, {"hysteresis", 4},
                        {"initial_scale_power", 12}, {"loss_scal", 1}}}};
  auto r = ParseDsConfig(cfg, Cluster(1, 1));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->plan.fp16.loss_scale_window, 500);
  EXPECT_EQ(r->plan.fp16.hysteresis, 4);
  EXPECT_EQ(r->plan.fp16.initial_scale_power, 12);
  EXPECT_TRUE(HasWarning(*r, "DeepSpeed ignores fp16.loss_scal")) << Warnings(*r);
}

TEST(PrecisionTest, GradAccumDtypeAndCommunicationType) {
  json cfg = Base();
  cfg["zero_optimization"] = {{"stage", 1}};
  cfg["data_types"] = {{"grad_accum_dtype", "fp32"}};
  cfg["communication_data_type"] = "fp32";
  auto r = ParseDsConfig(cfg, Cluster(1, 1));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->plan.GradAccumDtype(), Precision::kFp32);
  EXPECT_EQ(r->plan.CommDtype(), Precision::kFp32);
  EXPECT_EQ(r->plan.Wrapper(), OptimizerWrapper::kBf16Optimizer);
}

TEST(PrecisionTest, BadCommunicationTypeNamesTheValue) {
  json cfg = Base();
  cfg["communication_data_type"] = "int8";
  const std::string msg = ErrorOf(cfg);
  EXPECT_NE(msg.find("communication_data_type is \"int8\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("\"bf16\""), std::string::npos) << msg;
}

// --- zero_optimization ---------------------------------------------------------------------------

TEST(ZeroConfigTest, UnknownKeyIsRejectedWithSuggestionAndValidKeys) {
  auto r = ParseDsConfigFile(Fixture("bad_unknown_zero_key.json"), Cluster(1, 1));
  ASSERT_FALSE(r.ok());
  const std::string msg = r.status().message();
  EXPECT_NE(msg.find("unknown key 'overlap_com'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("did you mean 'overlap_comm'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("reduce_bucket_size"), std::string::npos) << msg;  // the valid list
}

TEST(ZeroConfigTest, DocsOnlyGradHooksKeyIsRejected) {
  json cfg = Base();
  cfg["zero_optimization"] = {{"stage", 2}, {"grad_hooks", true}};
  const std::string msg = ErrorOf(cfg);
  EXPECT_NE(msg.find("unknown key 'grad_hooks'"), std::string::npos) << msg;
}

TEST(ZeroConfigTest, UnknownOffloadKeyIsRejected) {
  json cfg = Base();
  cfg["zero_optimization"] = {{"stage", 2},
                              {"offload_optimizer", {{"device", "cpu"}, {"buffer_size", 1e8}}}};
  const std::string msg = ErrorOf(cfg);
  EXPECT_NE(msg.find("zero_optimization.offload_optimizer: unknown key 'buffer_size'"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("pipeline_read"), std::string::npos) << msg;
}

TEST(ZeroConfigTest, StageOutOfRange) {
  json cfg = Base();
  cfg["zero_optimization"] = {{"stage", 4}};
  const std::string msg = ErrorOf(cfg);
  EXPECT_NE(msg.find("zero_optimization.stage must be 0, 1, 2 or 3, got 4"), std::string::npos)
      << msg;
}

TEST(ZeroConfigTest, IntegralFloatsAreAcceptedFractionalRejected) {
  json cfg = Base();
  cfg["zero_optimization"] = {{"stage", 3}, {"reduce_bucket_size", 5e8}, {"sub_group_size", 1e9}};
  auto r = ParseDsConfig(cfg, Cluster(1, 1));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->plan.zero.reduce_bucket_size, 500'000'000);

  auto bad = ParseDsConfigFile(Fixture("bad_fractional_prefetch.json"), Cluster(1, 1));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(
                "zero_optimization.stage3_prefetch_bucket_size must be an integer, got 943718.4"),
            std::string::npos)
      << bad.status().message();
}

TEST(ZeroConfigTest, NegativeBucketIsRejected) {
  auto r = ParseDsConfigFile(Fixture("bad_negative_bucket.json"), Cluster(1, 1));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("zero_optimization.reduce_bucket_size must be >= 0, got -5"),
            std::string::npos)
      << r.status().message();
}

TEST(ZeroConfigTest, OffloadParamBelowStage3IsRejected) {
  auto r = ParseDsConfigFile(Fixture("bad_offload_param_stage2.json"), Cluster(1, 1));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("zero_optimization.offload_param (device \"cpu\") needs ZeRO "
                                      "stage 3 but the config has stage 2"),
            std::string::npos)
      << r.status().message();
}

TEST(ZeroConfigTest, NvmeWithoutPathIsRejected) {
  auto r = ParseDsConfigFile(Fixture("bad_nvme_no_path.json"), Cluster(1, 1));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("offload_param.device is \"nvme\" but nvme_path is not set"),
            std::string::npos)
      << r.status().message();
}

TEST(ZeroConfigTest, BadOffloadDeviceListsValidOnes) {
  json cfg = Base();
  cfg["zero_optimization"] = {{"stage", 3}, {"offload_param", {{"device", "gpu"}}}};
  const std::string msg = ErrorOf(cfg);
  EXPECT_NE(msg.find("zero_optimization.offload_param.device is \"gpu\"; valid: \"none\", "
                     "\"cpu\", \"nvme\""),
            std::string::npos)
      << msg;
}

TEST(ZeroConfigTest, PartialOffloadRatioNeedsStage3) {
  json cfg = Base();
  cfg["zero_optimization"] = {{"stage", 2},
                              {"offload_optimizer", {{"device", "cpu"}, {"ratio", 0.5}}}};
  const std::string msg = ErrorOf(cfg);
  EXPECT_NE(msg.find("offload_optimizer.ratio = 0.5 needs ZeRO stage 3"), std::string::npos) << msg;
}

TEST(ZeroConfigTest, NvmeOptimizerOffloadBelowStage3IsCpuWithAWarning) {
  json cfg = Base();
  cfg["zero_optimization"] = {{"stage", 2}, {"offload_optimizer", {{"device", "nvme"}}}};
  auto r = ParseDsConfig(cfg, Cluster(1, 1));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->plan.zero.offload_optimizer.device, OffloadDevice::kCpu);
  EXPECT_TRUE(HasWarning(*r, "offload_optimizer.device is \"nvme\" at stage 2")) << Warnings(*r);
}

TEST(ZeroConfigTest, Stage3KeysBelowStage3Warn) {
  json cfg = Base();
  cfg["zero_optimization"] = {{"stage", 2}, {"stage3_max_live_parameters", 1e8}};
  auto r = ParseDsConfig(cfg, Cluster(1, 1));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(HasWarning(*r, "stage3_max_live_parameters has no effect at stage 2"))
      << Warnings(*r);
}

TEST(ZeroConfigTest, AliasesAreAccepted) {
  json cfg = Base();
  cfg["zero_optimization"] = {{"stage", 3}, {"prefetch_bucket_size", 1e7},
                              {"max_live_parameters", 3e8}};
  auto r = ParseDsConfig(cfg, Cluster(1, 1));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->plan.zero.stage3_prefetch_bucket_size, 10'000'000);
  EXPECT_EQ(r->plan.zero.stage3_max_live_parameters, 300'000'000);
}

TEST(ZeroConfigTest, AliasAndNameTogetherIsAnError) {
  json cfg = Base();
  cfg["zero_optimization"] = {{"stage", 3}, {"prefetch_bucket_size", 1e7},
                              {"stage3_prefetch_bucket_size", 1e7}};
  const std::string msg = ErrorOf(cfg);
  EXPECT_NE(msg.find("'stage3_prefetch_bucket_size' is given twice"), std::string::npos) << msg;
}

TEST(ZeroConfigTest, OverlapCommDefaultDependsOnStage) {
  for (int stage : {1, 2, 3}) {
    json cfg = Base();
    cfg["zero_optimization"] = {{"stage", stage}};
    auto r = ParseDsConfig(cfg, Cluster(1, 1));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_FALSE(r->plan.zero.overlap_comm.has_value());
    EXPECT_EQ(r->plan.zero.OverlapComm(), stage == 3) << stage;
  }
}

TEST(ZeroConfigTest, DeprecatedNamesAreRemapped) {
  auto r = ParseDsConfigFile(Fixture("deprecated_cpu_offload.json"), Cluster(1, 4));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const Plan& p = r->plan;
  EXPECT_EQ(p.zero.offload_optimizer.device, OffloadDevice::kCpu);
  EXPECT_EQ(p.micro_batch, 4);  // 32 // 4 // 2
  EXPECT_EQ(p.precision, Precision::kFp16);
  EXPECT_EQ(p.optimizer, OptimizerType::kAdam);
  EXPECT_TRUE(p.adam_w_mode);
  EXPECT_TRUE(HasWarning(*r, "zero_optimization.cpu_offload is deprecated")) << Warnings(*r);
  EXPECT_TRUE(HasWarning(*r, "DeepSpeed ignores top-level key 'my_custom_key'")) << Warnings(*r);
}

TEST(ZeroConfigTest, DeprecatedAndReplacementTogetherIsAnError) {
  json cfg = Base();
  cfg["zero_optimization"] = {{"stage", 2}, {"cpu_offload", true},
                              {"offload_optimizer", {{"device", "cpu"}}}};
  const std::string msg = ErrorOf(cfg);
  EXPECT_NE(msg.find("'cpu_offload' and its replacement 'offload_optimizer'"), std::string::npos)
      << msg;
}

TEST(ZeroConfigTest, BooleanZeroOptimizationIsStage1) {
  json cfg = {{"train_micro_batch_size_per_gpu", 1}, {"zero_optimization", true},
              {"fp16", {{"enabled", true}}}};
  auto r = ParseDsConfig(cfg, Cluster(1, 1));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->plan.zero.stage, 1);
  EXPECT_TRUE(HasWarning(*r, "\"zero_optimization\": true/false is deprecated")) << Warnings(*r);
}

TEST(ZeroConfigTest, ZeroPlusPlusIsUnsupported) {
  json cfg = Base();
  cfg["zero_optimization"] = {{"stage", 3}, {"zero_hpz_partition_size", 8}};
  auto r = ParseDsConfig(cfg, Cluster(1, 8));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kUnsupported);
  EXPECT_NE(r.status().message().find("zero_hpz_partition_size = 8"), std::string::npos)
      << r.status().message();
}

TEST(ZeroConfigTest, OffloadKeysWithoutNvmeWarn) {
  json cfg = Base();
  cfg["zero_optimization"] = {
      {"stage", 3},
      {"offload_param", {{"device", "cpu"}, {"buffer_size", 1e9}}},
      {"offload_optimizer", {{"device", "none"}, {"pin_memory", true}}}};
  auto r = ParseDsConfig(cfg, Cluster(1, 1));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(HasWarning(*r, "offload_param.buffer_size has no effect without NVMe"))
      << Warnings(*r);
  EXPECT_TRUE(HasWarning(*r, "offload_optimizer.pin_memory has no effect: device is \"none\""))
      << Warnings(*r);
}

TEST(ZeroConfigTest, NvmeConfigIsRead) {
  auto r = ParseDsConfigFile(Fixture("zero3_nvme.json"), Cluster(1, 8));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const Plan& p = r->plan;
  EXPECT_EQ(p.zero.sub_group_size, 100'000'000);
  EXPECT_EQ(p.zero.offload_optimizer.device, OffloadDevice::kNvme);
  EXPECT_EQ(p.zero.offload_optimizer.nvme_path, "/local_nvme");
  EXPECT_EQ(p.zero.offload_optimizer.buffer_count, 8);
  EXPECT_TRUE(p.zero.offload_optimizer.pipeline_read);
  EXPECT_EQ(p.zero.offload_param.buffer_size, 200'000'000);
  EXPECT_EQ(p.zero.offload_param.buffer_count, 6);
  EXPECT_EQ(p.aio.queue_depth, 32);
  EXPECT_EQ(p.aio.intra_op_parallelism, 8);
  EXPECT_TRUE(r->warnings.empty()) << Warnings(*r);
}

TEST(AioTest, ThreadCountAloneIsReadWithAVersionWarning) {
  json cfg = Base();
  cfg["zero_optimization"] = {{"stage", 3},
                              {"offload_param", {{"device", "nvme"}, {"nvme_path", "/nvme"}}}};
  cfg["aio"] = {{"thread_count", 4}};
  auto r = ParseDsConfig(cfg, Cluster(1, 1));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->plan.aio.intra_op_parallelism, 4);
  EXPECT_TRUE(HasWarning(*r, "aio.thread_count is read only by DeepSpeed < 0.16.4"))
      << Warnings(*r);
}

// --- optimizer -----------------------------------------------------------------------------------

TEST(OptimizerTest, TypesAreCaseInsensitiveForDeepSpeedNames) {
  for (auto [name, type] : {std::pair{"adamw", OptimizerType::kAdamW},
                            {"ADAM", OptimizerType::kAdam},
                            {"Adagrad", OptimizerType::kAdagrad}}) {
    json cfg = Base();
    cfg["optimizer"] = {{"type", name}};
    auto r = ParseDsConfig(cfg, Cluster(1, 1));
    ASSERT_TRUE(r.ok()) << name << ": " << r.status().ToString();
    EXPECT_EQ(r->plan.optimizer, type) << name;
  }
}

TEST(OptimizerTest, UntestedOptimizerUnderZeroNeedsTheFlag) {
  json cfg = Base();
  cfg["zero_optimization"] = {{"stage", 2}};
  cfg["optimizer"] = {{"type", "SGD"}, {"params", {{"lr", 0.1}, {"momentum", 0.9}}}};
  const std::string msg = ErrorOf(cfg);
  EXPECT_NE(msg.find("optimizer.type SGD is not in ZeRO's tested list"), std::string::npos) << msg;
  EXPECT_NE(msg.find("zero_allow_untested_optimizer"), std::string::npos) << msg;

  cfg["zero_allow_untested_optimizer"] = true;
  auto r = ParseDsConfig(cfg, Cluster(1, 1));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->plan.optimizer, OptimizerType::kSgd);
  EXPECT_TRUE(r->plan.sgd_momentum);
}

TEST(OptimizerTest, LowercaseSgdIsNotATorchName) {
  json cfg = Base();
  cfg["optimizer"] = {{"type", "sgd"}};
  const std::string msg = ErrorOf(cfg);
  EXPECT_NE(msg.find("optimizer.type \"sgd\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("write \"SGD\""), std::string::npos) << msg;
}

TEST(OptimizerTest, UnknownTypeListsSupported) {
  json cfg = Base();
  cfg["optimizer"] = {{"type", "AdamX"}};
  const std::string msg = ErrorOf(cfg);
  EXPECT_NE(msg.find("optimizer.type \"AdamX\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("Adam, AdamW, Adagrad, Lamb, SGD"), std::string::npos) << msg;
}

TEST(OptimizerTest, TorchOptimizerNotModelledIsUnsupported) {
  json cfg = Base();
  cfg["optimizer"] = {{"type", "RMSprop"}};
  auto r = ParseDsConfig(cfg, Cluster(1, 1));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kUnsupported);
  EXPECT_NE(r.status().message().find("torch.optim.RMSprop"), std::string::npos)
      << r.status().message();
}

TEST(OptimizerTest, MaxGradNormInParamsIsRejected) {
  json cfg = Base();
  cfg["optimizer"] = {{"type", "AdamW"}, {"params", {{"max_grad_norm", 1.0}}}};
  const std::string msg = ErrorOf(cfg);
  EXPECT_NE(msg.find("optimizer.params.max_grad_norm"), std::string::npos) << msg;
  EXPECT_NE(msg.find("gradient_clipping"), std::string::npos) << msg;
}

TEST(OptimizerTest, AdamWModeFalseIsKeptForAdam) {
  json cfg = Base();
  cfg["optimizer"] = {{"type", "Adam"}, {"params", {{"adam_w_mode", false}, {"lr", 1e-3},
                                                    {"betas", {0.9, 0.95}}}}};
  auto r = ParseDsConfig(cfg, Cluster(1, 1));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->plan.adam_w_mode);
  EXPECT_EQ(r->plan.optimizer_params.beta2, std::optional<double>(0.95));
}

TEST(OptimizerTest, NoOptimizerBlockMeansClientOptimizer) {
  json cfg = Base();
  cfg["zero_optimization"] = {{"stage", 2}, {"offload_optimizer", {{"device", "cpu"}}}};
  auto r = ParseDsConfig(cfg, Cluster(1, 1));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->plan.optimizer_from_config);
  EXPECT_TRUE(HasWarning(*r, "zero_force_ds_cpu_optimizer")) << Warnings(*r);
}

TEST(OptimizerTest, TorchAdamWithOffloadWarns) {
  json cfg = Base();
  cfg["zero_optimization"] = {{"stage", 2}, {"offload_optimizer", {{"device", "cpu"}}}};
  cfg["optimizer"] = {{"type", "AdamW"}, {"params", {{"torch_adam", true}}}};
  auto r = ParseDsConfig(cfg, Cluster(1, 1));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(HasWarning(*r, "optimizer.params.torch_adam with offload_optimizer")) << Warnings(*r);
}

// --- JSON-level errors ---------------------------------------------------------------------------

TEST(JsonTest, MalformedJsonGivesFileLineAndColumn) {
  auto r = ParseDsConfigFile(Fixture("bad_malformed.json"), Cluster(1, 1));
  ASSERT_FALSE(r.ok());
  const std::string msg = r.status().message();
  EXPECT_NE(msg.find("bad_malformed.json:4:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("malformed JSON"), std::string::npos) << msg;
}

TEST(JsonTest, DuplicateKeysAreRejected) {
  auto r = ParseDsConfigFile(Fixture("bad_duplicate_key.json"), Cluster(1, 1));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("key 'stage' appears twice"), std::string::npos)
      << r.status().message();
}

TEST(JsonTest, MissingFileIsNotFound) {
  auto r = ParseDsConfigFile(Fixture("no_such_config.json"), Cluster(1, 1));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kNotFound);
  EXPECT_NE(r.status().message().find("no_such_config.json"), std::string::npos);
}

TEST(JsonTest, NonObjectTopLevel) {
  const std::string msg = ErrorOf(json::array({1, 2}));
  EXPECT_NE(msg.find("must be a JSON object, got array"), std::string::npos) << msg;
}

TEST(JsonTest, TopLevelTypoSuggestsTheKey) {
  json cfg = Base();
  cfg["gradient_acumulation_steps"] = 2;
  auto r = ParseDsConfig(cfg, Cluster(1, 1));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(HasWarning(*r, "DeepSpeed ignores top-level key 'gradient_acumulation_steps' (did "
                             "you mean 'gradient_accumulation_steps'?)"))
      << Warnings(*r);
  EXPECT_EQ(r->plan.grad_accum, 1);
}

}  // namespace
}  // namespace dsplan
