// ParseDsConfig: DeepSpeed's loader semantics (docs/deepspeed-facts.md#config-loader) and the
// HF Trainer's "auto".
#include "planner/ds_config.h"

#include <cstdlib>
#include <optional>
#include <utility>
#include <vector>
#include <set>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "planner/ds_config_keys.h"

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

// The context's RunShape: lengths and attention always reach the plan; micro-batch, precision
// and checkpointing only where pinned. Unpinned values in the shape are not read.
TEST(HfAutoConfigTest, ContextShapeOnlyPinnedFieldsAreRead) {
  const json cfg = {{"train_micro_batch_size_per_gpu", "auto"},
                    {"bf16", {{"enabled", "auto"}}},
                    {"fp16", {{"enabled", "auto"}}}};
  DsConfigContext loose = Cluster(1, 2);
  loose.shape.seq_len = 333;
  loose.shape.target_len = 44;
  loose.shape.attention = AttentionImpl::kEager;
  loose.shape.micro_batch = 3;                  // not pinned: the Trainer's default 8
  loose.shape.precision = Precision::kFp16;     // not pinned: the Trainer's default, fp32
  loose.shape.gradient_checkpointing = true;    // not pinned: off
  auto a = ParseDsConfig(cfg, loose);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->plan.seq_len, 333);
  EXPECT_EQ(a->plan.target_len, 44);
  EXPECT_EQ(a->plan.attention, AttentionImpl::kEager);
  EXPECT_EQ(a->plan.micro_batch, 8);
  EXPECT_EQ(a->plan.precision, Precision::kFp32);
  EXPECT_FALSE(a->plan.gradient_checkpointing);

  DsConfigContext pinned = loose;
  pinned.PinMicroBatch(3);
  pinned.PinPrecision(Precision::kFp16);
  pinned.PinGradientCheckpointing(true);
  auto b = ParseDsConfig(cfg, pinned);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->plan.seq_len, 333);
  EXPECT_EQ(b->plan.micro_batch, 3);
  EXPECT_EQ(b->plan.precision, Precision::kFp16);
  EXPECT_TRUE(b->plan.gradient_checkpointing);
}

TEST(HfAutoConfigTest, Zero2OffloadResolvesLikeTheTrainer) {
  DsConfigContext ctx = Cluster(2, 4);
  ctx.PinMicroBatch(8);
  ctx.grad_accum = 4;
  ctx.PinPrecision(Precision::kBf16);
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
  ctx.PinMicroBatch(2);
  ctx.grad_accum = 1;
  ctx.PinPrecision(Precision::kFp16);
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
  ctx.PinMicroBatch(2);
  ctx.grad_accum = 1;
  ctx.PinPrecision(Precision::kBf16);
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
  ctx.PinMicroBatch(4);
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
  ctx.PinMicroBatch(8);
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
  // A config written for another GPU count names the count it fits.
  EXPECT_NE(msg.find("they agree for 8 GPUs in all"), std::string::npos) << msg;
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
  EXPECT_NE(msg.find("they agree for 15 GPUs in all"), std::string::npos) << msg;  // 60 / (4 * 1)
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

// DeepSpeed's own batch rule, written out independently of the parser (config.py
// _set_batch_related_parameters then _batch_assertion): the missing key by integer division, then
// every key > 0 and train == micro x gas x world. Returns {micro, gas} or nothing when DeepSpeed
// raises.
std::optional<std::pair<int64_t, int64_t>> DeepSpeedBatch(std::optional<int64_t> train,
                                                          std::optional<int64_t> micro,
                                                          std::optional<int64_t> gas, int64_t ws) {
  if (train && micro && gas) {
  } else if (train && micro) {
    gas = *train / *micro / ws;
  } else if (train && gas) {
    micro = *train / ws / *gas;
  } else if (micro && gas) {
    train = *micro * *gas * ws;
  } else if (train) {
    gas = 1;
    micro = *train / ws;
  } else if (micro) {
    gas = 1;
    train = *micro * ws;
  } else {
    return std::nullopt;
  }
  if (*train <= 0 || *micro <= 0 || *gas <= 0 || *train != *micro * *gas * ws) return std::nullopt;
  return std::make_pair(*micro, *gas);
}

TEST(BatchTest, ParserAgreesWithDeepSpeedsRuleOnEveryTripleOfAGrid) {
  // The parser resolves the batch keys through the shared rule (ResolveBatch); DeepSpeed's
  // derivation is different arithmetic (integer division, then one assertion), so any drift
  // between the two shows up here as a config one accepts and the other refuses.
  const std::vector<int64_t> values = {0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 30, 48, 64, 96};  // 0: absent
  int compared = 0, accepted = 0;
  for (int gpus : {1, 2, 3, 4, 8}) {
    for (int64_t t : values) {
      for (int64_t m : values) {
        for (int64_t g : values) {
          json cfg = json::object();
          if (t) cfg["train_batch_size"] = t;
          if (m) cfg["train_micro_batch_size_per_gpu"] = m;
          if (g) cfg["gradient_accumulation_steps"] = g;
          const auto want = DeepSpeedBatch(t ? std::optional<int64_t>(t) : std::nullopt,
                                            m ? std::optional<int64_t>(m) : std::nullopt,
                                            g ? std::optional<int64_t>(g) : std::nullopt, gpus);
          auto r = ParseDsConfig(cfg, Cluster(1, gpus));
          ++compared;
          ASSERT_EQ(r.ok(), want.has_value())
              << cfg.dump() << " on " << gpus << " GPUs: "
              << (r.ok() ? std::string("accepted") : std::string(r.status().message()));
          if (!want) continue;
          ++accepted;
          EXPECT_EQ(r->plan.micro_batch, want->first) << cfg.dump() << " on " << gpus;
          EXPECT_EQ(r->plan.grad_accum, want->second) << cfg.dump() << " on " << gpus;
        }
      }
    }
  }
  EXPECT_GT(accepted, 100);
  EXPECT_GT(compared - accepted, 100);
}

TEST(BatchTest, AutoMicroBatchFromAGlobalBatchThatDoesNotDivideIsRefused) {
  // hf_zero2_auto.json has every batch key "auto": micro-batch = --global-batch / (1 x 4 GPUs)
  // would truncate 30 / 4 to 7 and quietly plan a global batch of 28.
  DsConfigContext ctx = Cluster(1, 4);
  ctx.global_batch = 30;
  auto r = ParseDsConfigFile(Fixture("hf_zero2_auto.json"), ctx);
  ASSERT_FALSE(r.ok()) << "planned micro-batch " << r->plan.micro_batch;
  const std::string msg(r.status().message());
  EXPECT_NE(msg.find("--global-batch 30 is not a multiple of accumulation 1 x 4 GPUs"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("hf_zero2_auto.json"), std::string::npos) << msg;
  ctx.global_batch = 32;
  r = ParseDsConfigFile(Fixture("hf_zero2_auto.json"), ctx);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->plan.micro_batch, 8);
  EXPECT_EQ(r->plan.train_batch(), 32);
}

TEST(BatchTest, AutoAccumulationFromAGlobalBatchThatDoesNotDivideIsRefused) {
  json cfg = {{"train_batch_size", "auto"},
              {"train_micro_batch_size_per_gpu", 3},
              {"gradient_accumulation_steps", "auto"}};
  DsConfigContext ctx = Cluster(1, 2);
  ctx.global_batch = 16;
  const std::string msg = ErrorOf(cfg, ctx);
  EXPECT_NE(msg.find("--global-batch 16 is not a multiple of micro-batch 3 x 2 GPUs"),
            std::string::npos)
      << msg;
}

TEST(BatchTest, AutoTrainBatchWithAHugeMicroBatchOverflowsCleanly) {
  json cfg = {{"train_batch_size", "auto"},
              {"train_micro_batch_size_per_gpu", int64_t{4611686018427387904}}};
  EXPECT_NE(ErrorOf(cfg, Cluster(1, 8)).find("overflows a 64-bit count"), std::string::npos);
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


// --- the key table (planner/ds_config_keys.h) ------------------------------------------------------

// docs/ds-config.md lists exactly the table's rows (between its markers). With
// DSPLAN_UPDATE_DOCS=1 the test rewrites that part of the doc instead of failing.
TEST(KeyTableTest, DocListsEveryKey) {
  const std::string path = std::string(DSPLAN_TEST_DATA_DIR) + "/docs/ds-config.md";
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  std::stringstream buf;
  buf << in.rdbuf();
  std::string doc = buf.str();
  const std::string begin =
      "<!-- key table: generated from planner/ds_config_keys.cc; do not edit by hand -->\n";
  const std::string end = "<!-- end of key table -->";
  const size_t b = doc.find(begin);
  const size_t e = doc.find(end);
  ASSERT_NE(b, std::string::npos) << "docs/ds-config.md lost its key-table markers";
  ASSERT_NE(e, std::string::npos) << "docs/ds-config.md lost its key-table markers";
  ASSERT_LT(b, e);
  const std::string listed = doc.substr(b + begin.size(), e - b - begin.size());
  const std::string table = DsConfigKeyTableMarkdown();
  if (listed != table && std::getenv("DSPLAN_UPDATE_DOCS") != nullptr) {
    doc.replace(b + begin.size(), e - b - begin.size(), table);
    std::ofstream(path) << doc;
    GTEST_SKIP() << "rewrote the key list of " << path;
  }
  EXPECT_EQ(listed, table) << "docs/ds-config.md's key list differs from the key table; run "
                              "DSPLAN_UPDATE_DOCS=1 planner_test --gtest_filter='KeyTable*'";
  // Every row is in the doc once, by name.
  for (const DsConfigKey& k : DsConfigKeys()) {
    const std::string cell = std::string("| `") + k.name + "`";
    EXPECT_NE(doc.find(cell), std::string::npos) << k.name;
  }
}

TEST(KeyTableTest, NamesAreUniqueAndFindable) {
  std::set<std::string> seen;
  for (const DsConfigKey& k : DsConfigKeys()) {
    EXPECT_TRUE(seen.insert(k.name).second) << "twice: " << k.name;
    EXPECT_EQ(FindDsConfigKey(k.name), &k) << k.name;
    int members = (k.bool_ref != nullptr) + (k.int_ref != nullptr) + (k.double_ref != nullptr) +
                  (k.opt_bool_ref != nullptr);
    EXPECT_LE(members, 1) << k.name;
    if (k.read == DsKeyRead::kPlain) EXPECT_EQ(members, 1) << k.name << " is read into nothing";
    EXPECT_FALSE(std::string(k.effect).empty()) << k.name;
  }
  EXPECT_EQ(FindDsConfigKey("zero_optimization.prefetch_bucket_size"),
            FindDsConfigKey("zero_optimization.stage3_prefetch_bucket_size"));
  EXPECT_EQ(FindDsConfigKey("zero_optimization.no_such_key"), nullptr);
}

// Defaults come from the config structs: the doc's text for a member is the default Plan's value.
TEST(KeyTableTest, DefaultsAreTheConfigStructs) {
  EXPECT_EQ(FindDsConfigKey("zero_optimization.reduce_bucket_size")->DefaultText(), "5e8");
  EXPECT_EQ(FindDsConfigKey("zero_optimization.stage3_prefetch_bucket_size")->DefaultText(),
            "5e7");
  EXPECT_EQ(FindDsConfigKey("zero_optimization.stage3_param_persistence_threshold")->DefaultText(),
            "1e5");
  EXPECT_EQ(FindDsConfigKey("zero_optimization.stage3_model_persistence_threshold")->DefaultText(),
            "sys.maxsize");
  EXPECT_EQ(FindDsConfigKey("zero_optimization.contiguous_gradients")->DefaultText(), "true");
  EXPECT_EQ(FindDsConfigKey("aio.block_size")->DefaultText(), "1048576");
  EXPECT_EQ(FindDsConfigKey("gradient_clipping")->DefaultText(), "0");
}

// Each plain key of the pydantic sections is accepted at its non-default value and lands in its
// Plan member; the emitted explicit config carries it back.
TEST(KeyTableTest, PlainKeysReadIntoTheirMember) {
  for (const std::string section : {"zero_optimization", "zero_optimization.offload_optimizer",
                                    "zero_optimization.offload_param"}) {
    for (const DsConfigKey* k : DsConfigKeysIn(section)) {
      if (k->read != DsKeyRead::kPlain) continue;
      json cfg = Base();
      cfg["zero_optimization"] = {{"stage", 3}};
      json* block = &cfg["zero_optimization"];
      if (section != "zero_optimization") {
        const std::string sub = section.substr(section.rfind('.') + 1);
        (*block)[sub] = {{"device", "nvme"}, {"nvme_path", "/tmp"}};
        block = &(*block)[sub];
        cfg["zero_optimization"]["offload_param"] = {{"device", "nvme"}, {"nvme_path", "/tmp"}};
      }
      const std::string leaf(k->Leaf());
      Plan defaults;
      json value;
      if (k->bool_ref != nullptr) value = !*k->bool_ref(defaults);
      if (k->opt_bool_ref != nullptr) value = false;  // stage 3's default is true
      if (k->int_ref != nullptr) value = *k->int_ref(defaults) == 0 ? 7 : *k->int_ref(defaults) - 1;
      if (k->double_ref != nullptr) value = 0.5;
      (*block)[leaf] = value;
      auto r = ParseDsConfig(cfg, Cluster(1, 1));
      ASSERT_TRUE(r.ok()) << k->name << ": " << r.status().ToString();
      Plan got = r->plan;
      if (k->bool_ref != nullptr) EXPECT_EQ(*k->bool_ref(got), value.get<bool>()) << k->name;
      if (k->opt_bool_ref != nullptr) EXPECT_EQ(*k->opt_bool_ref(got), false) << k->name;
      if (k->int_ref != nullptr) EXPECT_EQ(*k->int_ref(got), value.get<int64_t>()) << k->name;
      if (k->double_ref != nullptr) EXPECT_EQ(*k->double_ref(got), 0.5) << k->name;
      auto back = ParseDsConfig(EmitDsConfig(got, EmitStyle::kExplicit), Cluster(1, 1));
      ASSERT_TRUE(back.ok()) << k->name << ": " << back.status().ToString();
      got.zero.overlap_comm = got.zero.OverlapComm();  // the emitter makes it explicit
      EXPECT_EQ(back->plan.zero, got.zero) << k->name;
    }
  }
}

// A size key refuses a negative value and a bool key a word, naming the dotted key.
TEST(KeyTableTest, PlainKeysCheckTheirType) {
  for (const DsConfigKey* k : DsConfigKeysIn("zero_optimization")) {
    if (k->read != DsKeyRead::kPlain) continue;
    json cfg = Base();
    const bool is_bool = k->bool_ref != nullptr || k->opt_bool_ref != nullptr;
    cfg["zero_optimization"] = {{"stage", 2}, {std::string(k->Leaf()), is_bool ? json("maybe") : json(-3)}};
    const std::string msg = ErrorOf(cfg);
    EXPECT_NE(msg.find(std::string(k->name) + (is_bool ? " must be true or false" : " must be >= 0")),
              std::string::npos)
        << msg;
  }
}

// The "has no effect" warnings, in the order they have always come in.
TEST(KeyTableTest, NoEffectWarningsFollowTheTable) {
  json cfg = Base();
  cfg["zero_optimization"] = {{"stage", 0},
                              {"round_robin_gradients", true},
                              {"reduce_scatter", true},
                              {"overlap_comm", true},
                              {"contiguous_gradients", true},
                              {"reduce_bucket_size", 1000},
                              {"sub_group_size", 10},
                              {"stage3_max_live_parameters", 10},
                              {"stage3_prefetch_bucket_size", 10}};
  auto r = ParseDsConfig(cfg, Cluster(1, 1));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::vector<std::string> no_effect;
  for (const std::string& w : r->warnings) {
    if (w.find("has no effect at stage 0") != std::string::npos) no_effect.push_back(w);
  }
  const std::vector<std::string> expected = {
      "zero_optimization.stage3_prefetch_bucket_size has no effect at stage 0 (stage 3 only)",
      "zero_optimization.stage3_max_live_parameters has no effect at stage 0 (stage 3 only)",
      "zero_optimization.sub_group_size has no effect at stage 0 (stage 3 only)",
      "zero_optimization.reduce_bucket_size has no effect at stage 0",
      "zero_optimization.overlap_comm has no effect at stage 0",
      "zero_optimization.contiguous_gradients has no effect at stage 0",
      "zero_optimization.reduce_scatter has no effect at stage 0",
      "zero_optimization.round_robin_gradients has no effect at stage 0",
  };
  EXPECT_EQ(no_effect, expected) << Warnings(*r);

  // Every key the table marks as stage-3-only warns below stage 3.
  for (const DsConfigKey* k : DsConfigKeysIn("zero_optimization")) {
    if (k->no_effect != DsKeyNoEffect::kBelowStage3) continue;
    json c = Base();
    c["zero_optimization"] = {{"stage", 2}, {std::string(k->Leaf()), k->type == DsKeyType::kBool ? json(false) : json(1)}};
    auto p = ParseDsConfig(c, Cluster(1, 1));
    ASSERT_TRUE(p.ok()) << k->name << ": " << p.status().ToString();
    EXPECT_TRUE(HasWarning(*p, std::string(k->name) + " has no effect at stage 2 (stage 3 only)"))
        << k->name << "\n" << Warnings(*p);
  }

  // Offload keys with device "none": pin_memory first, then the table's order.
  json o = Base();
  o["zero_optimization"] = {
      {"stage", 3},
      {"offload_param",
       {{"device", "none"}, {"max_in_cpu", 1}, {"pin_memory", true}, {"nvme_path", "/x"}}}};
  auto po = ParseDsConfig(o, Cluster(1, 1));
  ASSERT_TRUE(po.ok()) << po.status().ToString();
  std::vector<std::string> none;
  for (const std::string& w : po->warnings) {
    if (w.find("device is \"none\"") != std::string::npos) none.push_back(w);
  }
  EXPECT_EQ(none, (std::vector<std::string>{
                      "zero_optimization.offload_param.pin_memory has no effect: device is \"none\"",
                      "zero_optimization.offload_param.nvme_path has no effect: device is \"none\"",
                      "zero_optimization.offload_param.max_in_cpu has no effect: device is \"none\""}))
      << Warnings(*po);
}

// The Trainer's hidden-size rules come from the table: h*h at any stage, the stage-3 keys only at
// stage 3 (below, "auto" is dropped with a warning).
TEST(KeyTableTest, HiddenSizeAutoFollowsTheTable) {
  DsConfigContext ctx = Cluster(1, 1);
  ctx.hidden_size = 1000;
  json cfg = Base();
  cfg["zero_optimization"] = {{"stage", 3},
                              {"reduce_bucket_size", "auto"},
                              {"stage3_prefetch_bucket_size", "auto"},
                              {"stage3_param_persistence_threshold", "auto"}};
  auto r = ParseDsConfig(cfg, ctx);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->plan.zero.reduce_bucket_size, 1'000'000);
  EXPECT_EQ(r->plan.zero.stage3_prefetch_bucket_size, 900'000);
  EXPECT_EQ(r->plan.zero.stage3_param_persistence_threshold, 10'000);
  cfg["zero_optimization"]["stage"] = 2;
  auto r2 = ParseDsConfig(cfg, ctx);
  ASSERT_TRUE(r2.ok()) << r2.status().ToString();
  EXPECT_EQ(r2->plan.zero.reduce_bucket_size, 1'000'000);
  EXPECT_EQ(r2->plan.zero.stage3_prefetch_bucket_size, ZeroConfig{}.stage3_prefetch_bucket_size);
  EXPECT_TRUE(HasWarning(*r2, "zero_optimization.stage3_prefetch_bucket_size is \"auto\", which "
                              "the HF Trainer does not fill"))
      << Warnings(*r2);
}

}  // namespace
}  // namespace dsplan
