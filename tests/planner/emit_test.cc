// EmitDsConfig: the emitted config parses back to the same plan, in both styles.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "planner/ds_config.h"

namespace dsplan {
namespace {

using json = nlohmann::json;

std::string Opt(const std::optional<double>& v) { return v ? std::to_string(*v) : "none"; }

/// Every Plan field as text, so a failed round trip shows which field changed.
std::string Describe(const Plan& p) {
  const ZeroConfig& z = p.zero;
  std::string s;
  auto add = [&](const char* k, const std::string& v) { s += std::string(k) + "=" + v + " "; };
  add("nodes", std::to_string(p.nodes));
  add("gpn", std::to_string(p.gpus_per_node));
  add("micro", std::to_string(p.micro_batch));
  add("gas", std::to_string(p.grad_accum));
  add("prec", PrecisionName(p.precision));
  add("accum", p.grad_accum_dtype ? PrecisionName(*p.grad_accum_dtype) : "none");
  add("comm", p.communication_dtype ? PrecisionName(*p.communication_dtype) : "none");
  add("opt", OptimizerTypeName(p.optimizer));
  add("torch_adam", std::to_string(p.torch_adam));
  add("sgd_mom", std::to_string(p.sgd_momentum));
  add("adam_w_mode", std::to_string(p.adam_w_mode));
  add("from_cfg", std::to_string(p.optimizer_from_config));
  add("lr", Opt(p.optimizer_params.lr));
  add("b1", Opt(p.optimizer_params.beta1));
  add("b2", Opt(p.optimizer_params.beta2));
  add("eps", Opt(p.optimizer_params.eps));
  add("wd", Opt(p.optimizer_params.weight_decay));
  add("mom", Opt(p.optimizer_params.momentum));
  add("untested", std::to_string(p.zero_allow_untested_optimizer));
  add("force_cpu", std::to_string(p.zero_force_ds_cpu_optimizer));
  add("sched", p.scheduler);
  add("clip", std::to_string(p.gradient_clipping));
  add("ls", std::to_string(p.fp16.loss_scale) + "/" + std::to_string(p.fp16.initial_scale_power) +
                "/" + std::to_string(p.fp16.loss_scale_window) + "/" +
                std::to_string(p.fp16.hysteresis) + "/" +
                std::to_string(p.fp16.consecutive_hysteresis) + "/" +
                std::to_string(p.fp16.min_loss_scale));
  add("stage", std::to_string(z.stage));
  add("contig", std::to_string(z.contiguous_gradients));
  add("rs", std::to_string(z.reduce_scatter));
  add("rbs", std::to_string(z.reduce_bucket_size));
  add("mrba", std::to_string(z.use_multi_rank_bucket_allreduce));
  add("agbs", std::to_string(z.allgather_bucket_size));
  add("overlap", z.overlap_comm ? std::to_string(*z.overlap_comm) : "none");
  add("sgs", std::to_string(z.sub_group_size));
  add("pf", std::to_string(z.stage3_prefetch_bucket_size));
  add("pt", std::to_string(z.stage3_param_persistence_threshold));
  add("mpt", std::to_string(z.stage3_model_persistence_threshold));
  add("live", std::to_string(z.stage3_max_live_parameters));
  add("reuse", std::to_string(z.stage3_max_reuse_distance));
  add("rr", std::to_string(z.round_robin_gradients));
  add("g16", std::to_string(z.gather_16bit_weights_on_model_save));
  const OffloadOptimizerConfig& o = z.offload_optimizer;
  add("oo", std::string(OffloadDeviceName(o.device)) + "," + o.nvme_path + "," +
                std::to_string(o.buffer_count) + "," + std::to_string(o.pin_memory) + "," +
                std::to_string(o.pipeline_read) + std::to_string(o.pipeline_write) +
                std::to_string(o.fast_init) + "," + std::to_string(o.ratio));
  const OffloadParamConfig& q = z.offload_param;
  add("op", std::string(OffloadDeviceName(q.device)) + "," + q.nvme_path + "," +
                std::to_string(q.buffer_count) + "," + std::to_string(q.buffer_size) + "," +
                std::to_string(q.max_in_cpu) + "," + std::to_string(q.pin_memory));
  const AioConfig& a = p.aio;
  add("aio", std::to_string(a.block_size) + "," + std::to_string(a.queue_depth) + "," +
                 std::to_string(a.intra_op_parallelism) + "," + std::to_string(a.single_submit) +
                 std::to_string(a.overlap_events) + std::to_string(a.use_gds));
  add("seq", std::to_string(p.seq_len) + "/" + std::to_string(p.target_len));
  add("gc", std::to_string(p.gradient_checkpointing));
  add("attn", AttentionImplName(p.attention));
  return s;
}

/// A spread of plans: every stage, precision, offload combination DeepSpeed accepts, NVMe with
/// non-default buffers, non-default buckets and batch shapes.
std::vector<Plan> ManyPlans() {
  std::vector<Plan> plans;
  int i = 0;
  for (int stage : {0, 1, 2, 3}) {
    for (Precision prec : {Precision::kBf16, Precision::kFp16, Precision::kFp32}) {
      for (OffloadDevice opt : {OffloadDevice::kNone, OffloadDevice::kCpu, OffloadDevice::kNvme}) {
        for (OffloadDevice par : {OffloadDevice::kNone, OffloadDevice::kCpu, OffloadDevice::kNvme}) {
          if (stage == 0 && opt != OffloadDevice::kNone) continue;
          if (stage < 3 && (par != OffloadDevice::kNone || opt == OffloadDevice::kNvme)) continue;
          ++i;
          Plan p;
          p.nodes = 1 + i % 3;
          p.gpus_per_node = (i % 2) ? 8 : 4;
          p.micro_batch = 1 + i % 7;
          p.grad_accum = 1 + i % 5;
          p.precision = prec;
          p.gradient_clipping = (i % 2) ? 1.0 : 0.0;
          p.zero.stage = stage;
          if (stage > 0) {
            p.zero.overlap_comm = (i % 3) != 0;
            p.zero.reduce_bucket_size = 100'000'000 + 1'000'000 * i;
            p.zero.contiguous_gradients = opt != OffloadDevice::kNone || (i % 2) == 0;
          }
          if (stage == 3) {
            p.zero.sub_group_size = 100'000'000 * (1 + i % 4);
            p.zero.stage3_prefetch_bucket_size = 20'000'000 + i;
            p.zero.stage3_param_persistence_threshold = 10'000 * (1 + i % 3);
            p.zero.stage3_max_live_parameters = 300'000'000;
            p.zero.stage3_max_reuse_distance = 200'000'000;
            p.zero.gather_16bit_weights_on_model_save = (i % 2) == 0;
          }
          p.zero.offload_optimizer.device = opt;
          p.zero.offload_optimizer.pin_memory = opt != OffloadDevice::kNone && (i % 2) == 1;
          if (opt == OffloadDevice::kNvme) {
            p.zero.offload_optimizer.nvme_path = "/local_nvme";
            p.zero.offload_optimizer.buffer_count = 8;
            p.zero.offload_optimizer.pipeline_read = true;
            p.zero.offload_optimizer.pipeline_write = (i % 2) == 0;
          }
          p.zero.offload_param.device = par;
          p.zero.offload_param.pin_memory = par == OffloadDevice::kCpu;
          if (par == OffloadDevice::kNvme) {
            p.zero.offload_param.nvme_path = "/mnt/nvme0";
            p.zero.offload_param.buffer_count = 7;
            p.zero.offload_param.buffer_size = 250'000'000;
            p.zero.offload_param.max_in_cpu = 2'000'000'000;
          }
          if (opt == OffloadDevice::kNvme || par == OffloadDevice::kNvme) {
            p.aio.queue_depth = 32;
            p.aio.intra_op_parallelism = 8;
            p.aio.block_size = 1 << 21;
          }
          if (opt == OffloadDevice::kNone) p.torch_adam = (i % 4) == 0;
          p.optimizer = (i % 5 == 0) ? OptimizerType::kAdam : OptimizerType::kAdamW;
          if (prec == Precision::kFp16) p.fp16.loss_scale_window = 500;
          if (stage == 1 && prec == Precision::kBf16) p.grad_accum_dtype = Precision::kFp32;
          p.seq_len = 2048;
          plans.push_back(p);
        }
      }
    }
  }
  return plans;
}

DsConfigContext ClusterOf(const Plan& p) {
  DsConfigContext c;
  c.nodes = p.nodes;
  c.gpus_per_node = p.gpus_per_node;
  c.shape = p.shape();  // micro-batch and precision unpinned: the config's own
  c.PinGradientCheckpointing(p.gradient_checkpointing);
  return c;
}

/// The emitter writes overlap_comm explicitly; everything else must come back as it was.
Plan Normalized(Plan p) {
  if (p.zero.stage > 0) p.zero.overlap_comm = p.zero.OverlapComm();
  return p;
}

TEST(EmitTest, ManyPlansCoverEveryStageAndOffload) {
  const std::vector<Plan> plans = ManyPlans();
  EXPECT_GE(plans.size(), 40u);
  int nvme = 0;
  for (const Plan& p : plans) {
    nvme += p.zero.offload_param.device == OffloadDevice::kNvme ||
            p.zero.offload_optimizer.device == OffloadDevice::kNvme;
  }
  EXPECT_GE(nvme, 10);
}

TEST(EmitTest, ExplicitRoundTrip) {
  for (const Plan& plan : ManyPlans()) {
    ASSERT_TRUE(ValidatePlan(plan).ok()) << ValidatePlan(plan).ToString();
    const json cfg = EmitDsConfig(plan, EmitStyle::kExplicit);
    auto r = ParseDsConfig(cfg, ClusterOf(plan));
    ASSERT_TRUE(r.ok()) << r.status().ToString() << "\n" << cfg.dump(2);
    EXPECT_EQ(Describe(r->plan), Describe(Normalized(plan))) << cfg.dump(2);
    EXPECT_TRUE(r->plan == Normalized(plan));
    EXPECT_TRUE(r->resolved_from_auto.empty());
    // Our own config raises no warnings, except the version note on bf16 without ZeRO.
    if (plan.zero.stage > 0) {
      EXPECT_TRUE(r->warnings.empty()) << r->warnings.front() << "\n" << cfg.dump(2);
    }
  }
}

TEST(EmitTest, ExplicitRoundTripThroughText) {
  for (const Plan& plan : ManyPlans()) {
    const std::string text = EmitDsConfig(plan, EmitStyle::kExplicit).dump(2);
    auto r = ParseDsConfigText(text, ClusterOf(plan));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(Describe(r->plan), Describe(Normalized(plan)));
    EXPECT_TRUE(r->plan == Normalized(plan));
  }
}

TEST(EmitTest, HfAutoRoundTripWithTheTrainersArguments) {
  for (Plan plan : ManyPlans()) {
    const json cfg = EmitDsConfig(plan, EmitStyle::kHfAuto);
    auto r = ParseDsConfig(cfg, ContextForPlan(plan));
    ASSERT_TRUE(r.ok()) << r.status().ToString() << "\n" << cfg.dump(2);
    // The Trainer owns the hyperparameters; the fp16 loss-scale keys are kept only for fp16.
    plan.optimizer_params = {};
    if (plan.precision != Precision::kFp16) plan.fp16 = {};
    EXPECT_EQ(Describe(r->plan), Describe(Normalized(plan))) << cfg.dump(2);
    EXPECT_TRUE(r->plan == Normalized(plan));
  }
}

TEST(EmitTest, ExplicitWritesIntegersAndConsistentBatch) {
  Plan p;
  p.nodes = 2;
  p.gpus_per_node = 8;
  p.micro_batch = 3;
  p.grad_accum = 4;
  p.zero.stage = 3;
  p.zero.offload_param.device = OffloadDevice::kNvme;
  p.zero.offload_param.nvme_path = "/nvme";
  const json c = EmitDsConfig(p, EmitStyle::kExplicit);
  EXPECT_EQ(c["train_batch_size"], 3 * 4 * 16);
  EXPECT_TRUE(c["train_batch_size"].is_number_integer());
  EXPECT_TRUE(c["zero_optimization"]["reduce_bucket_size"].is_number_integer());
  EXPECT_TRUE(c["zero_optimization"]["sub_group_size"].is_number_integer());
  EXPECT_TRUE(c["zero_optimization"]["offload_param"]["buffer_size"].is_number_integer());
  EXPECT_EQ(c["aio"]["thread_count"], c["aio"]["intra_op_parallelism"]);
  EXPECT_EQ(c["zero_optimization"]["overlap_comm"], true);
  // Keys that do nothing are not written.
  EXPECT_FALSE(c["zero_optimization"].contains("allgather_bucket_size"));
  EXPECT_FALSE(c["zero_optimization"].contains("allgather_partitions"));
}

TEST(EmitTest, HfAutoLooksLikeTheTutorialConfig) {
  Plan p;
  p.gpus_per_node = 4;
  p.zero.stage = 3;
  p.zero.offload_optimizer.device = OffloadDevice::kCpu;
  p.zero.offload_optimizer.pin_memory = true;
  p.zero.offload_param.device = OffloadDevice::kCpu;
  p.zero.offload_param.pin_memory = true;
  p.scheduler = "WarmupLR";
  const json c = EmitDsConfig(p, EmitStyle::kHfAuto);
  for (const char* k : {"train_batch_size", "train_micro_batch_size_per_gpu",
                        "gradient_accumulation_steps", "gradient_clipping"}) {
    EXPECT_EQ(c[k], "auto") << k;
  }
  EXPECT_EQ(c["bf16"]["enabled"], "auto");
  EXPECT_EQ(c["optimizer"]["params"]["lr"], "auto");
  EXPECT_EQ(c["optimizer"]["params"]["betas"], "auto");
  EXPECT_EQ(c["scheduler"]["params"]["warmup_max_lr"], "auto");
  // dsplan's choices, not "auto", for the ZeRO keys.
  EXPECT_TRUE(c["zero_optimization"]["reduce_bucket_size"].is_number_integer());
  EXPECT_TRUE(c["zero_optimization"]["stage3_prefetch_bucket_size"].is_number_integer());
  EXPECT_EQ(c["zero_optimization"]["offload_param"]["device"], "cpu");
}

TEST(EmitTest, ParsedCalibrationConfigEmitsBackToAnEquivalentConfig) {
  const json cfg = {
      {"train_micro_batch_size_per_gpu", 8}, {"gradient_accumulation_steps", 1},
      {"gradient_clipping", 1.0}, {"bf16", {{"enabled", true}}},
      {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 0.0001}, {"betas", {0.9, 0.999}},
                                                    {"eps", 1e-08}, {"weight_decay", 0.0}}}}},
      {"zero_optimization", {{"stage", 3}, {"offload_optimizer", {{"device", "cpu"}, {"pin_memory", true}}},
                             {"offload_param", {{"device", "cpu"}, {"pin_memory", true}}}}}};
  DsConfigContext ctx;
  auto r = ParseDsConfig(cfg, ctx);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const json again = EmitDsConfig(r->plan, EmitStyle::kExplicit);
  EXPECT_EQ(again["optimizer"], cfg["optimizer"]);
  EXPECT_EQ(again["zero_optimization"]["offload_param"], cfg["zero_optimization"]["offload_param"]);
  EXPECT_EQ(again["train_batch_size"], 8);
}

}  // namespace
}  // namespace dsplan
