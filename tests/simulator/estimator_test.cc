// The estimators of `dsplan estimate`: the ZeRO paper's accounting and DeepSpeed's estimator
// functions, against values computed by hand from the formulas
// (docs/deepspeed-facts.md#estimators).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/model_catalog.h"
#include "simulator/estimator.h"
#include "simulator/workload.h"

namespace dsplan {
namespace {

constexpr OffloadDevice kNone = OffloadDevice::kNone;
constexpr OffloadDevice kCpu = OffloadDevice::kCpu;

double Gib(int64_t b) { return b / double(int64_t{1} << 30); }

// The paper's own example (ZeRO, Figure 1): 7.5B parameters on 64 GPUs take 120 GB, 31.4 GB,
// 16.6 GB and 1.9 GB per GPU at stages 0-3.
TEST(ZeroPaperTest, SevenPointFiveBillionOn64Gpus) {
  const int64_t psi = 7'500'000'000;
  EXPECT_EQ(ZeroPaperBytesPerGpu(0, psi, 64), 120'000'000'000);
  EXPECT_EQ(ZeroPaperBytesPerGpu(1, psi, 64), 30'000'000'000 + 1'406'250'000);  // 4Ψ + 12Ψ/64
  EXPECT_EQ(ZeroPaperBytesPerGpu(2, psi, 64), 15'000'000'000 + 1'640'625'000);  // 2Ψ + 14Ψ/64
  EXPECT_EQ(ZeroPaperBytesPerGpu(3, psi, 64), 1'875'000'000);                    // 16Ψ/64
}

TEST(ZeroPaperTest, OneGpuIsSixteenBytesPerParameterAtEveryStage) {
  for (int stage = 0; stage <= 3; ++stage) EXPECT_EQ(ZeroPaperBytesPerGpu(stage, 1000, 1), 16000);
}

TEST(ZeroPaperTest, OffloadRemovesTheOffloadedTerms) {
  const int64_t psi = 8'000;
  // Optimizer offload drops K = 12: stage 1 keeps 2Ψ + 2Ψ; stage 2 2Ψ + 2Ψ/N; stage 3 4Ψ/N.
  EXPECT_EQ(ZeroPaperBytesPerGpu(1, psi, 4, kCpu), 4 * psi);
  EXPECT_EQ(ZeroPaperBytesPerGpu(2, psi, 4, kCpu), 2 * psi + 2 * psi / 4);
  EXPECT_EQ(ZeroPaperBytesPerGpu(3, psi, 4, kCpu), 4 * psi / 4);
  // Parameter offload (stage 3) also drops the 16-bit parameters: only gradients stay.
  EXPECT_EQ(ZeroPaperBytesPerGpu(3, psi, 4, kCpu, kCpu), 2 * psi / 4);
  // Stage 0 offload (no partitioning) keeps 4Ψ.
  EXPECT_EQ(ZeroPaperBytesPerGpu(0, psi, 4, kCpu), 4 * psi);
}

TEST(ZeroPaperTest, PartitionedTermRoundsDown) {
  // 16 * 1001 / 3 = 5338.67 -> 5338.
  EXPECT_EQ(ZeroPaperBytesPerGpu(3, 1001, 3), 5338);
  // 4 * 1001 + 12 * 1001 / 3 = 4004 + 4004.
  EXPECT_EQ(ZeroPaperBytesPerGpu(1, 1001, 3), 8008);
}

// DeepSpeed's documentation example (docs/code-docs/source/memory.rst): t5-3b, 2851M parameters
// with a 32M largest layer, on 1 node x 8 GPUs.
TEST(DeepSpeedEstimatorTest, Zero3DocsExample) {
  const int64_t psi = 2'851'000'000, largest = 32'000'000;
  // offload_param=cpu, offload_optimizer=cpu, zero_init=1: gpu = 4 * 32e6; cpu = Ψ*18*1*1.5.
  DeepSpeedEstimate e = EstimateZero3ModelStates(psi, largest, 8, 1, true, true, true);
  EXPECT_EQ(e.gpu_bytes, 128'000'000);
  EXPECT_EQ(e.cpu_bytes, 76'977'000'000);
  EXPECT_EQ(e.largest_layer_memory, 128'000'000);
  // zero_init=0: cpu = Ψ * max(4*8, 18) * 1.5 = 48Ψ.
  e = EstimateZero3ModelStates(psi, largest, 8, 1, true, true, false);
  EXPECT_EQ(e.cpu_bytes, 136'848'000'000);
  EXPECT_NEAR(Gib(e.cpu_bytes), 127.45, 0.005);
  // offload_optimizer only: gpu = 128e6 + int(2Ψ/8) = 128e6 + 712.75e6; cpu = Ψ*16*1.5 = 24Ψ.
  e = EstimateZero3ModelStates(psi, largest, 8, 1, true, false, true);
  EXPECT_EQ(e.gpu_bytes, 840'750'000);
  EXPECT_EQ(e.cpu_bytes, 68'424'000'000);
  // no offload: gpu = 128e6 + int(18Ψ/8) = 128e6 + 6414.75e6 (6.09 "GB" in the docs);
  // zero_init=1: cpu = 32e6 * 4 * 8 * 1.5 (1.43 "GB").
  e = EstimateZero3ModelStates(psi, largest, 8, 1, false, false, true);
  EXPECT_EQ(e.gpu_bytes, 6'542'750'000);
  EXPECT_NEAR(Gib(e.gpu_bytes), 6.09, 0.005);
  EXPECT_EQ(e.cpu_bytes, 1'536'000'000);
  EXPECT_NEAR(Gib(e.cpu_bytes), 1.43, 0.005);
  // zero_init=0: cpu = Ψ * 4 * 8 * 1.5.
  e = EstimateZero3ModelStates(psi, largest, 8, 1, false, false, false);
  EXPECT_EQ(e.cpu_bytes, 136'848'000'000);
  // cpu_offload_params is ignored without cpu_offload (the code's branch structure).
  EXPECT_EQ(EstimateZero3ModelStates(psi, largest, 8, 1, false, true, true).gpu_bytes,
            6'542'750'000);
}

TEST(DeepSpeedEstimatorTest, Zero2DocsExample) {
  const int64_t psi = 2'851'000'000;
  // cpu_offload: gpu = 2Ψ; cpu = Ψ * max(4*8, 16) * 1.5 = 48Ψ.
  DeepSpeedEstimate e = EstimateZero2ModelStates(psi, 8, 1, true);
  EXPECT_EQ(e.gpu_bytes, 5'702'000'000);
  EXPECT_EQ(e.cpu_bytes, 136'848'000'000);
  EXPECT_EQ(e.largest_layer_memory, 0);
  // no offload (after PR #5099): gpu = 2Ψ + int(18Ψ/8); cpu = Ψ*4*8*1.5.
  e = EstimateZero2ModelStates(psi, 8, 1, false);
  EXPECT_EQ(e.gpu_bytes, 5'702'000'000 + 6'414'750'000);
  EXPECT_NEAR(Gib(e.gpu_bytes), 11.28, 0.005);
  EXPECT_EQ(e.cpu_bytes, 136'848'000'000);
  // The docs' 15.93 "GB" came from the old formula 4Ψ + 16Ψ/8 = 17.106e9 B; the current one
  // must not reproduce it.
  EXPECT_GT(std::abs(Gib(e.gpu_bytes) - 15.93), 1.0);
}

TEST(DeepSpeedEstimatorTest, IntTruncatesTheGpuTerm) {
  // 18 * 1000 / 7 = 2571.43 -> 2571.
  EXPECT_EQ(EstimateZero2ModelStates(1000, 7, 1, false).gpu_bytes, 2000 + 2571);
  // 2 * 1000 / 3 = 666.67 -> 666; 18 * 1000 / 3 = 6000.
  EXPECT_EQ(EstimateZero3ModelStates(1000, 10, 3, 1, true, false, true).gpu_bytes, 40 + 666);
  EXPECT_EQ(EstimateZero3ModelStates(1000, 10, 3, 1, false, false, true).gpu_bytes, 40 + 6000);
}

TEST(DeepSpeedEstimatorTest, NodesQuirks) {
  const int64_t psi = 1'000'000;
  // ZeRO-2 offload's CPU term uses total GPUs: 2 nodes x 8 -> max(64, 16) * 1.5 = 96Ψ.
  EXPECT_EQ(EstimateZero2ModelStates(psi, 8, 2, true).cpu_bytes, 96 * psi);
  // ... while without offload it uses GPUs per node: 4 * 8 * 1.5 = 48Ψ; gpu 2Ψ + 18Ψ/16.
  DeepSpeedEstimate e = EstimateZero2ModelStates(psi, 8, 2, false);
  EXPECT_EQ(e.cpu_bytes, 48 * psi);
  EXPECT_EQ(e.gpu_bytes, 2 * psi + 1'125'000);
  // ZeRO-3: gpus_factor = 1/nodes. Full offload zero_init=1 on 2 x 4: Ψ * 18 * 0.5 * 1.5.
  EXPECT_EQ(EstimateZero3ModelStates(psi, 0, 4, 2, true, true, true).cpu_bytes, 13'500'000);
  // zero_init=0: Ψ * max(16, 9) * 1.5 = 24Ψ.
  EXPECT_EQ(EstimateZero3ModelStates(psi, 0, 4, 2, true, true, false).cpu_bytes, 24 * psi);
  // Optimizer offload zero_init=0 on 4 nodes x 1: Ψ * max(4, 16/4) * 1.5 = 6Ψ.
  EXPECT_EQ(EstimateZero3ModelStates(psi, 0, 1, 4, true, false, false).cpu_bytes, 6 * psi);
  // A different buffer factor scales the CPU term only.
  e = EstimateZero3ModelStates(psi, 0, 1, 1, true, true, true, 1.0);
  EXPECT_EQ(e.cpu_bytes, 18 * psi);
  EXPECT_EQ(e.gpu_bytes, 0);
}

// largest_layer_params: the largest module's own parameters. In gpt2 and t5-small (both tied)
// that is the token embedding, vocab x hidden; gpt2's wte is 50257 x 768.
TEST(LargestModuleParamsTest, EmbeddingIsTheLargestModule) {
  for (const char* name : {"gpt2", "t5-small"}) {
    auto spec = LoadModel(name, DSPLAN_TEST_DATA_DIR);
    ASSERT_TRUE(spec.ok()) << spec.status().ToString();
    RunShape o;
    o.seq_len = 128;
    o.target_len = spec->encoder_decoder() ? 32 : 0;
    auto w = BuildWorkload(*spec, o);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    EXPECT_EQ(LargestModuleParams(*w), spec->vocab_size * spec->hidden_size) << name;
  }
  auto spec = LoadModel("gpt2", DSPLAN_TEST_DATA_DIR);
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->vocab_size * spec->hidden_size, 38'597'376);
}

// A module's weight and bias count together: gpt2-sized MLP c_fc (768 x 3072 + 3072) is larger
// than its weight alone, visible in a model whose embedding is smaller than the MLP.
TEST(LargestModuleParamsTest, WeightAndBiasOfOneModuleAreSummed) {
  Workload w;
  auto param = [&](std::string name, int64_t n) {
    TensorSpec t;
    t.name = std::move(name);
    t.category = TensorCategory::kParameter;
    t.numel = n;
    w.tensors.push_back(t);
  };
  param("embed.weight", 1000);
  param("mlp.c_fc.weight", 900);
  param("mlp.c_fc.bias", 200);
  param("mlp.c_proj.weight", 900);
  TensorSpec act;
  act.name = "mlp.c_fc.out";
  act.category = TensorCategory::kActivation;
  act.numel = 1'000'000;
  w.tensors.push_back(act);
  EXPECT_EQ(LargestModuleParams(w), 1100);
}

}  // namespace
}  // namespace dsplan
