// CheckPlan: the judgements `dsplan check` adds to a simulated config. Each case has a control
// (the same plan without the fault) that must stay silent about it.
#include <string>
#include <vector>

#include <fmt/format.h>
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

  /// |plan| and the same plan at stage 2, both simulated by |sim|.
  static void Stage3AndStage2(Simulator& sim, const Plan& plan, Prediction* s3, Prediction* s2) {
    auto a = sim.Simulate(plan);
    ASSERT_TRUE(a.ok()) << a.status().message();
    Plan alt = plan;
    alt.zero.stage = 2;
    auto b = sim.Simulate(alt);
    ASSERT_TRUE(b.ok()) << b.status().message();
    *s3 = *a;
    *s2 = *b;
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

// Stage 1 keeps the gradients of parameters larger than the bucket outside the rank's partition
// until the backward ends (docs/deepspeed-facts.md): with a 1e6 bucket, every gpt2 block's
// c_attn (1.77 M), c_fc and MLP c_proj (2.36 M each) are. The line names the bucket that keeps
// none (gpt2's largest parameter, wte). Controls: a bucket above every parameter, and stage 2.
TEST_F(CheckTest, StageOneKeptGradientsAreNamedWithTheBucketThatAvoidsThem) {
  Plan p = Base(8, 1);
  p.micro_batch = 1;
  p.zero.overlap_comm = true;
  p.zero.reduce_bucket_size = 1'000'000;
  Prediction pred;
  const auto lines = Check(p, &pred);
  // The kept gradients are the predicted rank's (the one that decides the fit): every tensor
  // above 1e6 elements that does not overlap its partition (the flat buffer's ceil(psi / 16) * 2
  // elements from rank x that), from the tensor table; bf16.
  auto w = BuildWorkload(*spec_, p.shape());
  ASSERT_TRUE(w.ok());
  const int r = pred.facts.rank;
  ASSERT_GE(r, 0);
  ASSERT_LT(r, 8);
  const int64_t part = (w->params + 15) / 16 * 2;
  int64_t at = 0, expect = 0;
  for (const TensorSpec& t : w->tensors) {
    if (t.category != TensorCategory::kParameter) continue;
    const bool mine = at < part * (r + 1) && at + t.numel > part * r;
    if (t.numel > 1'000'000 && !mine) expect += t.numel;
    at += t.numel;
  }
  // At least 10 of the 12 blocks' c_attn (1.77 M), c_fc and c_proj (2.36 M each): a partition
  // (15.6 M elements) spans at most about two blocks (7.1 M each).
  EXPECT_GE(expect, 10 * (768 * 2304 + 2 * 768 * 3072));
  EXPECT_EQ(pred.facts.kept_grad_numel, expect);
  EXPECT_TRUE(Mentions(lines, fmt::format("on rank {}", r))) << Join(lines);
  EXPECT_EQ(pred.facts.largest_param_numel, 50257 * 768);
  ASSERT_GT(2.0 * pred.facts.kept_grad_numel, 0.02 * pred.gpu_peak_allocated_bytes);
  EXPECT_TRUE(Mentions(lines, "stay until the backward ends")) << Join(lines);
  EXPECT_TRUE(Mentions(lines, "3.86e+07")) << Join(lines);
  Plan big = p;
  big.zero.reduce_bucket_size = 40'000'000;
  Prediction big_pred;
  const auto big_lines = Check(big, &big_pred);
  EXPECT_EQ(big_pred.facts.kept_grad_numel, 0);
  EXPECT_FALSE(Mentions(big_lines, "stay until the backward ends")) << Join(big_lines);
  Plan two = p;
  two.zero.stage = 2;
  EXPECT_FALSE(Mentions(Check(two), "stay until the backward ends"));
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

TEST_F(CheckTest, Stage3OnOneGpuPointsToStage2OnlyWhereStage2IsBetter) {
  // gpt2 at stage 3 on one GPU: stage 2 at the same micro-batch fits and skips the hooks.
  Simulator sim(*spec_, *profile_);
  Plan p = Base(1, 3);
  p.zero.reduce_bucket_size = 5'000'000;
  Prediction pred, pred2;
  ASSERT_NO_FATAL_FAILURE(Stage3AndStage2(sim, p, &pred, &pred2));
  ASSERT_TRUE(pred2.fits);
  ASSERT_LT(pred2.step_time_s, 0.98 * pred.step_time_s);
  auto note = SingleGpuStage3Note(sim, p, pred);
  ASSERT_TRUE(note.ok()) << note.status().message();
  EXPECT_NE(note->find("stage 2 at the same micro-batch fits"), std::string::npos) << *note;
  EXPECT_NE(note->find(fmt::format("{:.3f} s against {:.3f} s per step", pred2.step_time_s,
                                   pred.step_time_s)),
            std::string::npos)
      << *note;
  EXPECT_NE(note->find("set zero_optimization.stage to 2"), std::string::npos) << *note;
  // CheckPlan itself no longer claims it without the comparison.
  EXPECT_FALSE(Mentions(CheckPlan(p, pred, *profile_), "one GPU"));

  // Controls: two GPUs partition something; one GPU with offload is a reason for stage 3.
  Plan two = Base(2, 3);
  auto pred_two = sim.Simulate(two);
  ASSERT_TRUE(pred_two.ok()) << pred_two.status().message();
  auto none = SingleGpuStage3Note(sim, two, *pred_two);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty()) << *none;
  Plan off = p;
  off.zero.offload_optimizer.device = OffloadDevice::kCpu;
  off.zero.offload_optimizer.pin_memory = true;
  off.zero.offload_param.device = OffloadDevice::kCpu;
  off.zero.offload_param.pin_memory = true;
  auto pred_off = sim.Simulate(off);
  ASSERT_TRUE(pred_off.ok()) << pred_off.status().message();
  none = SingleGpuStage3Note(sim, off, *pred_off);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty()) << *none;
}

TEST_F(CheckTest, Stage3OnOneGpuIsRightWhereStage2WouldNotTrainOrFit) {
  // phi-2 (2.78 B parameters) at micro-batch 1: stage 2 fits and is faster, but its one flat
  // fp32 partition is above 2^31 elements, which DeepSpeed 0.14.5's FusedAdam never updates.
  auto phi = LoadModel("phi-2", DSPLAN_TEST_DATA_DIR);
  ASSERT_TRUE(phi.ok()) << phi.status().message();
  Simulator sim(*phi, *profile_);
  Plan p = Base(1, 3);
  p.micro_batch = 1;
  Prediction pred, pred2;
  ASSERT_NO_FATAL_FAILURE(Stage3AndStage2(sim, p, &pred, &pred2));
  ASSERT_TRUE(pred2.fits);
  ASSERT_LT(pred2.step_time_s, 0.98 * pred.step_time_s);
  ASSERT_TRUE(pred2.facts.FusedAdamSkipsUpdate());
  auto note = SingleGpuStage3Note(sim, p, pred);
  ASSERT_TRUE(note.ok()) << note.status().message();
  EXPECT_TRUE(note->empty()) << *note;

  // llama-2-7b at micro-batch 12 with checkpointing (the plan `dsplan --model llama-2-7b` picks):
  // stage 2's step holds fp32 gradients of the whole partition and does not fit with its band.
  auto llama = LoadModel("llama-2-7b", DSPLAN_TEST_DATA_DIR);
  ASSERT_TRUE(llama.ok()) << llama.status().message();
  Simulator big(*llama, *profile_);
  Plan q = Base(1, 3);
  q.micro_batch = 12;
  q.gradient_checkpointing = true;
  q.zero.reduce_bucket_size = 50'000'000;
  Prediction qp, qp2;
  ASSERT_NO_FATAL_FAILURE(Stage3AndStage2(big, q, &qp, &qp2));
  ASSERT_TRUE(qp.fits);
  EXPECT_FALSE(qp2.fits);
  note = SingleGpuStage3Note(big, q, qp);
  ASSERT_TRUE(note.ok()) << note.status().message();
  EXPECT_TRUE(note->empty()) << *note;
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

namespace dsplan {
namespace {

// What a loop that keeps a step's output into the next forward holds: the sizes of the tensors
// transformers returns, by hand, for three families; and the plan's note says when they do not
// fit in what the plan leaves beyond its band and headroom.
TEST(KeptOutputTest, SizesOfTheReturnedTensors) {
  auto load = [](const char* name) {
    auto m = LoadModel(name, DSPLAN_TEST_DATA_DIR);
    EXPECT_TRUE(m.ok()) << m.status().message();
    return m.ok() ? *m : ModelSpec{};
  };
  Plan p;
  p.micro_batch = 8;
  p.seq_len = 1024;
  p.precision = Precision::kBf16;
  // gpt2-xl: logits 8 x 1024 x 50257 x 2 B; K/V 2 x 48 layers x 8 x 1024 x 1600 x 2 B.
  const ModelSpec gpt2xl = load("gpt2-xl");
  auto w = BuildWorkload(gpt2xl, p.shape());
  ASSERT_TRUE(w.ok()) << w.status().message();
  KeptOutput k = KeptOutputBytes(*w, p);
  EXPECT_DOUBLE_EQ(k.logits_bytes, 8.0 * 1024 * 50257 * 2);
  EXPECT_DOUBLE_EQ(k.kv_cache_bytes, 2.0 * 48 * 8 * 1024 * 1600 * 2);
  EXPECT_DOUBLE_EQ(k.kv_cache_in_step_bytes, k.kv_cache_bytes);
  EXPECT_DOUBLE_EQ(k.encoder_output_bytes, 0);
  // Gradient checkpointing turns use_cache off in transformers: no cache.
  Plan ckpt = p;
  ckpt.gradient_checkpointing = true;
  auto wc = BuildWorkload(gpt2xl, ckpt.shape());
  ASSERT_TRUE(wc.ok());
  EXPECT_DOUBLE_EQ(KeptOutputBytes(*wc, ckpt).kv_cache_bytes, 0);
  // llama-2-7b's 32 K/V heads of 128; mistral-7b's 8 (GQA) shrink the cache 4x.
  const ModelSpec mistral = load("mistral-7b");
  auto wm = BuildWorkload(mistral, p.shape());
  ASSERT_TRUE(wm.ok());
  EXPECT_DOUBLE_EQ(KeptOutputBytes(*wm, p).kv_cache_bytes, 2.0 * 32 * 8 * 1024 * 8 * 128 * 2);
  // T5: logits over the decoder's tokens and the encoder's output, no cache counted.
  const ModelSpec t5 = load("t5-large");
  Plan pt = p;
  pt.seq_len = 512;
  pt.target_len = 128;
  auto wt = BuildWorkload(t5, pt.shape());
  ASSERT_TRUE(wt.ok());
  k = KeptOutputBytes(*wt, pt);
  EXPECT_DOUBLE_EQ(k.logits_bytes, 8.0 * 128 * 32128 * 2);
  EXPECT_DOUBLE_EQ(k.encoder_output_bytes, 8.0 * 512 * 1024 * 2);
  // 24 decoder layers' self-attention K/V (128 tokens) and cross-attention K/V (512 tokens):
  // with the logits and encoder output, 551 MiB, as usecache-1205 measured a kept output.
  EXPECT_DOUBLE_EQ(k.kv_cache_in_step_bytes, 2.0 * 24 * 8 * 128 * 1024 * 2);
  EXPECT_DOUBLE_EQ(k.kv_cache_bytes, 2.0 * 24 * 8 * (128 + 512) * 1024 * 2);
  EXPECT_NEAR((k.logits_bytes + k.encoder_output_bytes + k.kv_cache_bytes) / (1 << 20), 551, 1);

  // The note: enough room says nothing more; too little says what to do.
  Prediction pred;
  pred.gpu_capacity_bytes = int64_t{100} << 30;
  pred.gpu_upper_total_bytes = int64_t{80} << 30;
  pred.gpu_headroom_bytes = int64_t{3} << 30;
  std::string note = KeptOutputNote(*w, p, pred);
  EXPECT_NE(note.find("assumes model.config.use_cache = False (transformers' default True builds "
                      "a K/V cache that adds up to 2.34 GiB in every training forward"),
            std::string::npos)
      << note;
  EXPECT_NE(note.find("holds its logits 785 MiB (and 2.34 GiB of cache with use_cache on)"),
            std::string::npos)
      << note;
  EXPECT_NE(note.find("leaves 17.0 GiB beyond its error band"), std::string::npos) << note;
  EXPECT_EQ(note.find("NOT enough"), std::string::npos) << note;
  pred.gpu_upper_total_bytes = int64_t{95} << 30;
  note = KeptOutputNote(*w, p, pred);
  // The current step's cache and the kept one's, with the kept logits: 2 x 2.34 + 0.77 GiB.
  EXPECT_NE(note.find("NOT enough for 5.45 GiB: set model.config.use_cache = False and del out"),
            std::string::npos)
      << note;
}

}  // namespace
}  // namespace dsplan
