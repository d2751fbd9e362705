// The host executor (runtime/host/host_executor.h): gradients against finite differences,
// ZeRO stages x world sizes x gradient accumulation x offload against unpartitioned single-rank
// training, and the bytes per memory category against the simulator's StepGraph.
#include "runtime/host/host_executor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include <fmt/format.h>

#include "core/hf_config.h"
#include "core/model_spec.h"
#include "simulator/step_builder.h"

namespace dsplan {
namespace {

constexpr int64_t kSeq = 16;

// GPT-2 with 2 layers, 32 hidden, 2 heads, vocab 64, 32 positions, dropout off: 28,544 params.
Workload Tiny(int64_t micro_batch) {
  auto cfg = HfConfig::Parse(
      R"({"model_type":"gpt2","vocab_size":64,"n_embd":32,"n_head":2,"n_layer":2,
          "n_positions":32,"resid_pdrop":0,"embd_pdrop":0,"attn_pdrop":0})",
      "tiny");
  EXPECT_TRUE(cfg.ok()) << cfg.status().ToString();
  auto spec = ModelSpecFromHf(*cfg, "tiny");
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  WorkloadOptions o;
  o.micro_batch = micro_batch;
  o.seq_len = kSeq;
  o.precision = Precision::kFp32;
  auto w = BuildWorkload(*spec, o);
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  return *w;
}

Plan MakePlan(int stage, int world, int64_t mb, int64_t gas, Precision prec) {
  Plan p;
  p.gpus_per_node = world;
  p.micro_batch = mb;
  p.grad_accum = gas;
  p.precision = prec;
  p.seq_len = kSeq;
  p.zero.stage = stage;
  p.zero.reduce_bucket_size = 3000;           // several buckets; c_fc/c_proj (4096) alone
  p.zero.stage3_param_persistence_threshold = 100;  // biases and norms persist, matrices gather
  p.zero.stage3_prefetch_bucket_size = 0;     // no prefetch, and release right after use,
  p.zero.stage3_max_reuse_distance = 0;       // as the executor does
  p.optimizer_params.lr = 1e-3;
  p.optimizer_params.weight_decay = 0.01;
  return p;
}

HostRun Train(const Plan& p, int steps = 5, const std::string& nvme = "") {
  HostRunOptions o;
  o.steps = steps;
  o.seed = 7;
  o.nvme_dir = nvme;
  auto r = RunHostTraining(Tiny(p.micro_batch), p, o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : HostRun{};
}

double MaxDiff(const HostRun& a, const HostRun& b) {
  double d = 0;
  if (a.params.size() != b.params.size()) return 1e9;
  for (size_t t = 0; t < a.params.size(); ++t) {
    for (size_t i = 0; i < a.params[t].size(); ++i) {
      d = std::max(d, std::fabs(static_cast<double>(a.params[t][i]) - b.params[t][i]));
    }
  }
  return d;
}

// Unpartitioned single-rank training on the union of the ranks' micro-batches.
HostRun Reference(const Plan& p, int steps = 5) {
  Plan ref = p;
  ref.zero = ZeroConfig{};
  ref.gpus_per_node = 1;
  ref.nodes = 1;
  ref.micro_batch = p.micro_batch * p.grad_accum * p.world_size();
  ref.grad_accum = 1;
  return Train(ref, steps);
}

TEST(HostExecutorTest, GradientsMatchFiniteDifferences) {
  Workload w = Tiny(2);
  auto base = HostForwardBackward(w, 7);
  ASSERT_TRUE(base.ok()) << base.status().ToString();
  EXPECT_NEAR(base->loss, std::log(64.0), 0.2);
  // A few elements of several tensors, by central differences in fp32 (h = 1e-2 on weights of
  // size ~0.02: the loss is smooth enough; relative agreement 2% or 2e-4 absolute).
  int checked = 0;
  for (size_t t = 0; t < w.tensors.size() && w.tensors[t].category == TensorCategory::kParameter;
       t += 3) {
    for (int64_t i : {int64_t{0}, w.tensors[t].numel / 2 + 1}) {
      const double h = 1e-2;
      auto plus = HostForwardBackward(w, 7, static_cast<int>(t), i, h);
      auto minus = HostForwardBackward(w, 7, static_cast<int>(t), i, -h);
      ASSERT_TRUE(plus.ok() && minus.ok());
      const double fd = (plus->loss - minus->loss) / (2 * h);
      const double an = base->grads[t][i];
      EXPECT_NEAR(an, fd, 2e-4 + 0.02 * std::fabs(fd)) << w.tensors[t].name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_GE(checked, 10);
}

TEST(HostExecutorTest, LossFallsOnTheSyntheticTask) {
  Plan p = MakePlan(2, 2, 2, 1, Precision::kFp32);
  p.optimizer_params.lr = 1e-2;
  HostRun r = Train(p, 40);
  ASSERT_EQ(r.losses.size(), 40u);
  EXPECT_GT(r.losses.front(), 3.8);
  EXPECT_LT(r.losses.back(), 0.5 * r.losses.front());
}

TEST(HostExecutorTest, Explore) {
  for (int stage : {0, 1, 2, 3}) {
    for (int world : {1, 2}) {
      Plan p = MakePlan(stage, world, 2, 2, Precision::kFp32);
      HostRun a = Train(p);
      HostRun ref = Reference(p);
      fmt::print("stage {} world {} maxdiff {:.3g} loss {:.4f} {:.4f}\n", stage, world,
                 MaxDiff(a, ref), a.losses.back(), ref.losses.back());
    }
  }
}

}  // namespace
}  // namespace dsplan
