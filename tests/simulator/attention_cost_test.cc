// The runtime's fused attention in the cost model: the measured table's lookup
// (FusedAttentionRate) and RuntimeAttentionSeconds through the public op costs. Expected values
// are computed here from the rows the test writes.
#include <cmath>

#include <gtest/gtest.h>

#include "core/hardware_profile.h"
#include "simulator/cost_model.h"
#include "simulator/workload.h"

namespace dsplan {
namespace {

constexpr double kBig = 262144;  // rows of the large series below

HardwareProfile Base() {
  auto hw = FindHardwareProfile("h200-sxm", DSPLAN_TEST_DATA_DIR);
  EXPECT_TRUE(hw.ok()) << hw.status().message();
  HardwareProfile p = *hw;
  p.gpu.attention.clear();
  return p;
}

// bf16, head dim 64, causal at 1024 and 4096 with 256 Ki rows of work (256 and 64 slices) and
// with 16 Ki rows (16 and 4 slices); non-causal and head dim 128 with 256 Ki rows.
std::vector<AttentionPoint> Table() {
  return {{Precision::kBf16, 64, true, 1024, 256, 200e12, 150e12},
          {Precision::kBf16, 64, true, 4096, 64, 300e12, 250e12},
          {Precision::kBf16, 64, true, 1024, 16, 100e12, 50e12},
          {Precision::kBf16, 64, true, 4096, 4, 140e12, 90e12},
          {Precision::kBf16, 64, false, 1024, 256, 260e12, 210e12},
          {Precision::kBf16, 128, true, 2048, 128, 330e12, 280e12}};
}

Op Attention(int64_t bh, int64_t sq, int64_t sk, int64_t d, bool causal) {
  Op op;
  op.name = "attn.sdpa";
  op.kind = OpKind::kAttention;
  op.batch = bh;
  op.m = sq;
  op.n = sk;
  op.k = d;
  op.causal = causal;
  op.fwd_flops = 4.0 * bh * sq * sk * d;
  op.bwd_flops = 2 * op.fwd_flops;
  op.fwd_bytes = 2.0 * bh * (2 * sq + 2 * sk) * d;
  op.bwd_bytes = 2 * op.fwd_bytes;
  return op;
}

double Rate(double seq, double rows, bool bwd = false, Precision p = Precision::kBf16,
            int64_t d = 64, bool causal = true) {
  return FusedAttentionRate(Table(), p, d, causal, seq, rows, bwd);
}

TEST(FusedAttentionRate, InterpolatesLinearlyInLogSeqAndClampsAtTheEnds) {
  EXPECT_DOUBLE_EQ(Rate(1024, kBig), 200e12);
  EXPECT_DOUBLE_EQ(Rate(4096, kBig, true), 250e12);
  // 2048 is halfway between 1024 and 4096 in log seq.
  EXPECT_NEAR(Rate(2048, kBig), 250e12, 1e3);
  EXPECT_NEAR(Rate(2048, kBig, true), 200e12, 1e3);
  // A quarter of the way: 1024 * 4^0.25.
  EXPECT_NEAR(Rate(1024 * std::sqrt(2.0), kBig), 225e12, 1e3);
  EXPECT_DOUBLE_EQ(Rate(128, kBig), 200e12);
  EXPECT_DOUBLE_EQ(Rate(32768, kBig), 300e12);
  // The mask matters: the non-causal point is its own series.
  EXPECT_DOUBLE_EQ(Rate(4096, kBig, false, Precision::kBf16, 64, false), 260e12);
}

TEST(FusedAttentionRate, InterpolatesInLogRowsBetweenSeriesOfEqualWork) {
  // The small series: 100 at 1024, 140 at 4096.
  EXPECT_DOUBLE_EQ(Rate(1024, 16384), 100e12);
  EXPECT_NEAR(Rate(2048, 16384), 120e12, 1e3);
  // 64 Ki rows: halfway between 16 Ki and 256 Ki in log rows.
  EXPECT_NEAR(Rate(1024, 65536), 150e12, 1e3);
  EXPECT_NEAR(Rate(2048, 65536), 185e12, 1e3);
  EXPECT_NEAR(Rate(2048, 65536, true), 135e12, 1e3);  // (70 + 200) / 2
  // Clamped beyond both series; rows <= 0 means the largest.
  EXPECT_DOUBLE_EQ(Rate(1024, 1024), 100e12);
  EXPECT_DOUBLE_EQ(Rate(1024, 1e7), 200e12);
  EXPECT_DOUBLE_EQ(Rate(1024, 0), 200e12);
}

TEST(FusedAttentionRate, OtherSixteenBitDtypeWhenItsOwnIsMissingElseNothing) {
  // fp16 runs the same kernel: bf16's points serve when the table has no fp16 points.
  EXPECT_DOUBLE_EQ(Rate(2048, kBig, false, Precision::kFp16, 128), 330e12);
  auto with_fp16 = Table();
  with_fp16.push_back({Precision::kFp16, 128, true, 2048, 128, 340e12, 290e12});
  EXPECT_DOUBLE_EQ(FusedAttentionRate(with_fp16, Precision::kFp16, 128, true, 2048, kBig, false),
                   340e12);
  // No point of this head dim (or mask): 0, and the caller prices the stand-in.
  EXPECT_EQ(Rate(2048, kBig, false, Precision::kBf16, 96), 0);
  EXPECT_EQ(Rate(2048, kBig, false, Precision::kBf16, 128, false), 0);
  EXPECT_EQ(FusedAttentionRate({}, Precision::kBf16, 64, true, 2048, kBig, false), 0);
}

TEST(RuntimeAttentionCost, FusedKernelPricedFromTheTable) {
  HardwareProfile p = Base();
  p.gpu.attention = Table();
  p.gpu.attention_source = {SourceKind::kMeasured, "test"};
  CostModel cm(p, Precision::kBf16, SoftwareStack::kDsplanRuntime);
  // 256 slices of 1024, head dim 64, causal: the large series' point.
  const Op op = Attention(256, 1024, 1024, 64, true);
  const double fwd_flops = 4.0 * 256 * 1024 * 1024 * 64 / 2;
  EXPECT_NEAR(cm.OpForwardSeconds(op), fwd_flops / 200e12, 1e-12);
  EXPECT_NEAR(cm.OpBackwardSeconds(op), 2.5 * fwd_flops / 150e12, 1e-12);
  // 16 slices: 16 Ki rows, the small series.
  const Op few = Attention(16, 1024, 1024, 64, true);
  EXPECT_NEAR(cm.OpForwardSeconds(few), fwd_flops / 16 / 100e12, 1e-12);
  // Cross-attention 128 queries x 8192 keys over 256 slices: priced at the geometric mean
  // length 1024 and 256 x 1024 rows.
  const Op cross = Attention(256, 128, 8192, 64, false);
  EXPECT_NEAR(cm.OpForwardSeconds(cross), 4.0 * 256 * 128 * 8192 * 64 / 260e12, 1e-12);
}

TEST(RuntimeAttentionCost, StandInPricingWithoutTableOrKernel) {
  HardwareProfile without = Base();
  HardwareProfile with = Base();
  with.gpu.attention = Table();
  with.gpu.attention_source = {SourceKind::kMeasured, "test"};
  const Op d64 = Attention(200, 1024, 1024, 64, true);
  const Op d96 = Attention(64, 1024, 1024, 96, true);  // no kernel for head dim 96
  CostModel a(without, Precision::kBf16, SoftwareStack::kDsplanRuntime);
  CostModel b(with, Precision::kBf16, SoftwareStack::kDsplanRuntime);
  // Without a table: the tiled stand-in's GEMMs, never the table's rate.
  const double tiled = a.OpForwardSeconds(d64);
  EXPECT_GT(tiled, 0);
  EXPECT_NE(tiled, b.OpForwardSeconds(d64));
  // Head dim 96 runs the stand-in whatever the table holds; so does fp32.
  EXPECT_DOUBLE_EQ(a.OpForwardSeconds(d96), b.OpForwardSeconds(d96));
  EXPECT_DOUBLE_EQ(a.OpBackwardSeconds(d96), b.OpBackwardSeconds(d96));
  CostModel a32(without, Precision::kFp32, SoftwareStack::kDsplanRuntime);
  CostModel b32(with, Precision::kFp32, SoftwareStack::kDsplanRuntime);
  EXPECT_DOUBLE_EQ(a32.OpForwardSeconds(d64), b32.OpForwardSeconds(d64));
  // The PyTorch + DeepSpeed stack keeps its SDPA efficiency assumption.
  CostModel ads(without, Precision::kBf16, SoftwareStack::kPyTorchDeepSpeed);
  CostModel bds(with, Precision::kBf16, SoftwareStack::kPyTorchDeepSpeed);
  EXPECT_DOUBLE_EQ(ads.OpForwardSeconds(d64), bds.OpForwardSeconds(d64));
  EXPECT_DOUBLE_EQ(ads.OpBackwardSeconds(d64), bds.OpBackwardSeconds(d64));
}

}  // namespace
}  // namespace dsplan

namespace dsplan {
namespace {

TEST(StackAttentionCost, PyTorchsSdpaPricedFromTheMeasuredSdpaTable) {
  HardwareProfile p = Base();
  p.gpu.sdpa = Table();
  p.gpu.sdpa_source = {SourceKind::kMeasured, "test"};
  CostModel cm(p, Precision::kBf16, SoftwareStack::kPyTorchDeepSpeed);
  // 256 slices of 1024, head dim 64, causal: the large series' point, 200 / 150 TFLOP/s.
  const Op op = Attention(256, 1024, 1024, 64, true);
  const double fwd_flops = 4.0 * 256 * 1024 * 1024 * 64 / 2;
  EXPECT_NEAR(cm.OpForwardSeconds(op), fwd_flops / 200e12, 1e-12);
  EXPECT_NEAR(cm.OpBackwardSeconds(op), 2.5 * fwd_flops / 150e12, 1e-12);
  // Head dim 80 has no row: the nearest measured head dim (64) prices it; 96 ties between 64
  // and 128 and takes 128's tiles (its only point: 330 / 280 TFLOP/s, causal 2048 x 128).
  const Op d80 = Attention(256, 1024, 1024, 80, true);
  EXPECT_NEAR(cm.OpForwardSeconds(d80), 4.0 * 256 * 1024 * 1024 * 80 / 2 / 200e12, 1e-12);
  const Op d96 = Attention(128, 2048, 2048, 96, true);
  EXPECT_NEAR(cm.OpBackwardSeconds(d96), 2.5 * 4.0 * 128 * 2048 * 2048 * 96 / 2 / 280e12,
              1e-12);
  // dsplan's runtime does not run PyTorch's kernels: the sdpa table does not price it.
  HardwareProfile q = Base();
  CostModel runtime_with(p, Precision::kBf16, SoftwareStack::kDsplanRuntime);
  CostModel runtime_without(q, Precision::kBf16, SoftwareStack::kDsplanRuntime);
  EXPECT_DOUBLE_EQ(runtime_with.OpForwardSeconds(op), runtime_without.OpForwardSeconds(op));
  // Without the table the stack keeps the efficiency assumption: a different price.
  CostModel assumed(q, Precision::kBf16, SoftwareStack::kPyTorchDeepSpeed);
  const double eff = q.gpu.attention_efficiency.value > 0 ? q.gpu.attention_efficiency.value : 0.5;
  EXPECT_NEAR(assumed.OpForwardSeconds(op), fwd_flops / (q.gpu.peak_flops_bf16.value * eff),
              1e-12);
}

}  // namespace
}  // namespace dsplan
