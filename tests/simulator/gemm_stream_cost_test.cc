// The cost model's measured-table lookups: Linear GEMMs by layout and token count, and the
// runtime's per-launch streaming curve. Expected values are computed here from the rows the
// test writes, not read back from the code under test.
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "core/hardware_profile.h"
#include "core/model_catalog.h"
#include "core/profile_yaml.h"
#include "simulator/cost_model.h"
#include "simulator/stack_costs.h"
#include "simulator/step_graph.h"
#include "simulator/workload.h"

namespace dsplan {
namespace {

HardwareProfile Base() {
  auto hw = FindHardwareProfile("h200-sxm", DSPLAN_TEST_DATA_DIR);
  EXPECT_TRUE(hw.ok()) << hw.status().message();
  HardwareProfile p = *hw;
  p.gpu.gemm.clear();
  p.gpu.streaming.clear();
  return p;
}

// Seconds of a GEMM at |rate| (large enough that the bandwidth floor does not bind).
double At(double m, double n, double k, double rate) { return 2 * m * n * k / rate; }

TEST(LinearGemmCost, InterpolatesLogRateInTheTokenCountOfTheNearestLayer) {
  HardwareProfile p = Base();
  // The MLP up projection of gpt2-xl (out 6400, in 1600) at 4096 and 16384 tokens.
  p.gpu.gemm = {{Precision::kBf16, 4096, 6400, 1600, 500e12, GemmLayout::kNT},
                {Precision::kBf16, 16384, 6400, 1600, 800e12, GemmLayout::kNT},
                // Another layer, far in shape: must not be used for 6400 x 1600.
                {Precision::kBf16, 8192, 1024, 1024, 100e12, GemmLayout::kNT}};
  CostModel cm(p, Precision::kBf16);
  // 8192 tokens: halfway in log tokens, so the geometric mean of the two rates.
  EXPECT_NEAR(cm.LinearGemmSeconds(GemmLayout::kNT, 8192, 6400, 1600),
              At(8192, 6400, 1600, std::sqrt(500e12 * 800e12)), 1e-12);
  // Below the measured token counts: the first point's rate.
  EXPECT_NEAR(cm.LinearGemmSeconds(GemmLayout::kNT, 2048, 6400, 1600), At(2048, 6400, 1600, 500e12),
              1e-12);
  // Above them: the time grows by as much per token as between the last two points (the same
  // kernel over more row tiles), so the rate passes the last point's 800 TFLOP/s on its way to
  // the marginal rate between them (12288 tokens in 41.9 - 16.8 us: 1.0 PFLOP/s here).
  const double t4 = At(4096, 6400, 1600, 500e12), t16 = At(16384, 6400, 1600, 800e12);
  const double t32 = t16 + (32768.0 - 16384.0) * (t16 - t4) / (16384.0 - 4096.0);
  EXPECT_NEAR(cm.LinearGemmSeconds(GemmLayout::kNT, 32768, 6400, 1600), t32, 1e-12);
  EXPECT_LT(t32, At(32768, 6400, 1600, 800e12));
  // Far above, that marginal rate would pass the GPU's dense peak: the peak bounds it.
  const double peak = p.gpu.peak_flops_bf16.value;
  ASSERT_GT(peak, 800e12);
  ASSERT_LT(peak, 1.0e15);
  EXPECT_NEAR(cm.LinearGemmSeconds(GemmLayout::kNT, 1 << 22, 6400, 1600),
              At(1 << 22, 6400, 1600, peak), 1e-9);
  // A layer shape not measured takes the nearest measured layer's series (6400 x 1600 is
  // nearer to 6144 x 1536 than 1024 x 1024 is).
  EXPECT_NEAR(cm.LinearGemmSeconds(GemmLayout::kNT, 4096, 6144, 1536),
              At(4096, 6144, 1536, 500e12), 1e-12);
}

TEST(LinearGemmCost, ASeriesWhoseTimeDoesNotGrowKeepsItsLastRateAboveIt) {
  HardwareProfile p = Base();
  // Measurement noise: 16384 tokens timed no longer than 8192 (rate doubled). No per-token cost
  // can be read off it, so larger counts keep the last point's rate rather than a free GEMM.
  p.gpu.gemm = {{Precision::kBf16, 8192, 768, 768, 400e12, GemmLayout::kNT},
                {Precision::kBf16, 16384, 768, 768, 800e12, GemmLayout::kNT}};
  CostModel cm(p, Precision::kBf16);
  EXPECT_NEAR(cm.LinearGemmSeconds(GemmLayout::kNT, 65536, 768, 768), At(65536, 768, 768, 800e12),
              1e-12);
}

TEST(LinearGemmCost, EachLayoutUsesItsOwnRowsAndTheWeightGradientReducesOverTokens) {
  HardwareProfile p = Base();
  p.gpu.gemm = {{Precision::kBf16, 8192, 6400, 1600, 700e12, GemmLayout::kNT},
                {Precision::kBf16, 8192, 1600, 6400, 600e12, GemmLayout::kNN},
                // Weight gradient: (out, in, tokens).
                {Precision::kBf16, 6400, 1600, 4096, 400e12, GemmLayout::kTN},
                {Precision::kBf16, 6400, 1600, 16384, 640e12, GemmLayout::kTN}};
  CostModel cm(p, Precision::kBf16);
  EXPECT_NEAR(cm.LinearGemmSeconds(GemmLayout::kNN, 8192, 1600, 6400), At(8192, 1600, 6400, 600e12),
              1e-12);
  EXPECT_NEAR(cm.LinearGemmSeconds(GemmLayout::kTN, 6400, 1600, 8192),
              At(6400, 1600, 8192, std::sqrt(400e12 * 640e12)), 1e-12);

  // A Linear op's backward is its input gradient (nn) plus its weight gradient (tn).
  Op op;
  op.kind = OpKind::kGemm;
  op.m = 8192;
  op.n = 6400;
  op.k = 1600;
  EXPECT_NEAR(cm.OpForwardSeconds(op), At(8192, 6400, 1600, 700e12), 1e-12);
  EXPECT_NEAR(cm.OpBackwardSeconds(op),
              At(8192, 1600, 6400, 600e12) + At(6400, 1600, 8192, std::sqrt(400e12 * 640e12)),
              1e-12);
  // The other dtype has no rows: the datasheet peak times the large-GEMM efficiency.
  CostModel fp16(p, Precision::kFp16);
  EXPECT_NEAR(fp16.LinearGemmSeconds(GemmLayout::kNT, 8192, 6400, 1600),
              At(8192, 6400, 1600, p.gpu.peak_flops_fp16.value * p.gpu.gemm_efficiency.value),
              1e-12);
}

TEST(LinearGemmCost, TablesWithoutLayoutsFallBackToTheNearestShape) {
  HardwareProfile p = Base();
  p.gpu.gemm = {{Precision::kBf16, 8192, 6400, 1600, 700e12, GemmLayout::kNT}};
  CostModel cm(p, Precision::kBf16);
  EXPECT_NEAR(cm.LinearGemmSeconds(GemmLayout::kNN, 8192, 1600, 6400), At(8192, 1600, 6400, 700e12),
              1e-12);
}

TEST(BatchedGemmCost, BatchedMatmulsUseTheirOwnRowsPerLayout) {
  HardwareProfile p = Base();
  // Eager attention's Q K^T of one head: (seq, seq, head_dim), 256 products per measurement;
  // and a Linear row of a far larger shape that batched lookups must not use.
  p.gpu.gemm = {{Precision::kBf16, 512, 512, 128, 300e12, GemmLayout::kNN, 256},
                {Precision::kBf16, 512, 128, 512, 250e12, GemmLayout::kNT, 256},
                {Precision::kBf16, 128, 512, 512, 200e12, GemmLayout::kTN, 256},
                {Precision::kBf16, 16384, 1024, 4096, 800e12, GemmLayout::kNT}};
  CostModel cm(p, Precision::kBf16);
  Op qk;
  qk.kind = OpKind::kBatchedGemm;
  qk.m = 512;
  qk.n = 512;
  qk.k = 128;
  qk.batch = 8 * 32;
  EXPECT_NEAR(cm.OpForwardSeconds(qk), 2.0 * 512 * 512 * 128 * 256 / 300e12, 1e-12);
  EXPECT_NEAR(cm.OpBackwardSeconds(qk),
              2.0 * 512 * 512 * 128 * 256 / 250e12 + 2.0 * 512 * 512 * 128 * 256 / 200e12, 1e-12);
  // Linear lookups ignore the batched rows.
  EXPECT_NEAR(cm.LinearGemmSeconds(GemmLayout::kNT, 512, 512, 128),
              At(512, 512, 128, 800e12) > cm.RooflineSeconds(2.0 * (512 * 128 + 128 * 512 + 512 * 512))
                  ? At(512, 512, 128, 800e12)
                  : cm.RooflineSeconds(2.0 * (512 * 128 + 128 * 512 + 512 * 512)),
              1e-15);
}

TEST(HookCost, ZeroHooksAreHostWorkThatOverlapsTheLayersKernels) {
  // ZeRO-3's hooks cost the measured host time per submodule and per gathered parameter
  // tensor (forward and backward differ). They run on the Python thread that also issues the
  // layer's kernels, so the layer takes the longer of its kernels and its host work with the
  // hooks; dsplan's runtime runs no hooks, and without stage 3 there are none.
  HardwareProfile p = Base();
  const StackCosts& s = MeasuredStackCosts();
  const double fwd_hooks = 13 * s.z3_fwd_per_module_s + 6 * s.z3_fwd_per_param_s;
  const double bwd_hooks = 13 * s.z3_bwd_per_module_s + 6 * s.z3_bwd_per_param_s;
  LayerCost c;
  c.modules = 13;
  // Host-bound: 0.4 ms of kernels, 0.5 ms of dispatch: the hooks add to the dispatch.
  c.fwd_gemm_s = 0.4e-3;
  c.fwd_dispatch_s = c.fwd_s = 0.5e-3;
  c.bwd_gemm_s = 0.8e-3;
  c.bwd_dispatch_s = c.bwd_s = 1.0e-3;
  Task t;
  t.kind = TaskKind::kForward;
  t.layer = 0;
  t.zero3_hooks = true;
  t.gathered_tensors = 6;
  CostModel pt(p, Precision::kBf16);
  CostModel rt(p, Precision::kBf16, SoftwareStack::kDsplanRuntime);
  EXPECT_NEAR(pt.TaskSeconds(t, {c}, 1), 0.5e-3 + fwd_hooks, 1e-15);
  EXPECT_DOUBLE_EQ(rt.TaskSeconds(t, {c}, 1), c.fwd_s);
  t.kind = TaskKind::kBackward;
  EXPECT_NEAR(pt.TaskSeconds(t, {c}, 1), 1.0e-3 + bwd_hooks, 1e-15);
  EXPECT_DOUBLE_EQ(rt.TaskSeconds(t, {c}, 1), c.bwd_s);
  // Each reduce-bucket flush its gradient hooks run is host work on the same thread.
  t.bucket_flushes = 2;
  EXPECT_NEAR(pt.TaskSeconds(t, {c}, 1), 1.0e-3 + bwd_hooks + 2 * s.z3_per_bucket_flush_s, 1e-15);
  EXPECT_GT(s.z3_per_bucket_flush_s, 100e-6);  // measured 299-416 us (docs/stack-costs.md 4c)
  EXPECT_LT(s.z3_per_bucket_flush_s, 1e-3);
  t.bucket_flushes = 0;
  t.zero3_hooks = false;
  EXPECT_DOUBLE_EQ(pt.TaskSeconds(t, {c}, 1), c.bwd_s);
  // Stages 1-2: tensor ops a flush in the gradient hooks issues (the offload accumulation's
  // copies and adds) are host work on that thread at an eager op's cost each; not in dsplan's
  // runtime.
  t.hook_kernels = 30;
  EXPECT_NEAR(pt.TaskSeconds(t, {c}, 1), 1.0e-3 + 30 * pt.DispatchSeconds(), 1e-15);
  EXPECT_DOUBLE_EQ(rt.TaskSeconds(t, {c}, 1), c.bwd_s);
  t.hook_kernels = 0;
  // GPU-bound: kernels longer than dispatch plus hooks hide the hooks entirely.
  LayerCost g = c;
  g.fwd_gemm_s = g.fwd_s = 0.5e-3 + fwd_hooks + 1e-3;
  g.bwd_gemm_s = g.bwd_s = 1.0e-3 + bwd_hooks + 1e-3;
  t.zero3_hooks = true;
  t.kind = TaskKind::kForward;
  EXPECT_DOUBLE_EQ(pt.TaskSeconds(t, {g}, 1), g.fwd_gemm_s);
  t.kind = TaskKind::kBackward;
  EXPECT_DOUBLE_EQ(pt.TaskSeconds(t, {g}, 1), g.bwd_gemm_s);
  // The recomputation pays the hooks on top of its own host time.
  c.recompute_dispatch_s = 0.45e-3;
  c.recompute_s = 0.45e-3;
  t.kind = TaskKind::kRecompute;
  EXPECT_NEAR(pt.TaskSeconds(t, {c}, 1), 0.45e-3 + fwd_hooks, 1e-15);
  // The measured costs are in the range the synthetic stacks showed (0.1-0.3 ms each).
  for (double v : {s.z3_fwd_per_module_s, s.z3_fwd_per_param_s, s.z3_bwd_per_module_s,
                   s.z3_bwd_per_param_s}) {
    EXPECT_GT(v, 50e-6);
    EXPECT_LT(v, 500e-6);
  }
}

// GEMMs under sustained load (docs/stack-costs.md 7): the profile's measured time ratio by
// tensor-core duty, interpolated; a GEMM-heavy workload's layers take it, one whose duty is low
// (host-bound) barely does.
TEST(SustainedLoad, GemmsSlowDownWithTheirDuty) {
  const HardwareProfile base = Base();
  CostModel plain(base, Precision::kBf16);
  EXPECT_EQ(plain.SustainedGemmRatio(0.9), 1.0);  // no curve: the table's rate
  HardwareProfile p = base;
  p.gpu.sustained_gemm = {{0.4, 1.01}, {0.8, 1.11}, {1.0, 1.2}};
  p.gpu.sustained_gemm_source = {SourceKind::kMeasured, "test"};
  CostModel cm(p, Precision::kBf16);
  EXPECT_DOUBLE_EQ(cm.SustainedGemmRatio(0), 1.0);
  EXPECT_NEAR(cm.SustainedGemmRatio(0.2), 1.005, 1e-12);  // from 1 at duty 0 to the first point
  EXPECT_NEAR(cm.SustainedGemmRatio(0.6), 1.06, 1e-12);
  EXPECT_NEAR(cm.SustainedGemmRatio(0.9), 1.155, 1e-12);
  EXPECT_DOUBLE_EQ(cm.SustainedGemmRatio(1.0), 1.2);

  auto spec = LoadModel("gpt2", DSPLAN_TEST_DATA_DIR);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  RunShape big;
  big.micro_batch = 32;
  big.seq_len = 1024;
  auto w = BuildWorkload(*spec, big);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  const std::vector<LayerCost> a = plain.Layers(*w), b = cm.Layers(*w);
  double gemm_a = 0, gemm_b = 0, tensor = 0, total = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    gemm_a += a[i].fwd_gemm_s + a[i].bwd_gemm_s;
    gemm_b += b[i].fwd_gemm_s + b[i].bwd_gemm_s;
    tensor += a[i].fwd_gemm_s + a[i].bwd_gemm_s + a[i].fwd_attention_s + a[i].bwd_attention_s;
    total += a[i].fwd_s + a[i].bwd_s;
    EXPECT_EQ(b[i].fwd_memory_s, a[i].fwd_memory_s);  // memory-bound kernels keep their time
    EXPECT_GE(b[i].fwd_s, a[i].fwd_s);
  }
  ASSERT_GT(gemm_a, 0);
  EXPECT_NEAR(gemm_b / gemm_a, cm.SustainedGemmRatio(tensor / total), 1e-9);
  EXPECT_NEAR(gemm_b / gemm_a, cm.WorkloadSustainedRatio(*w), 1e-12);
  EXPECT_GT(gemm_b / gemm_a, 1.0);
}

TEST(StreamingCurve, RuntimeLaunchesFollowTheMeasuredCurve) {
  HardwareProfile p = Base();
  p.gpu.streaming = {{1e4, 3e-6}, {1e6, 4e-6}, {1e8, 30e-6}};
  CostModel rt(p, Precision::kBf16, SoftwareStack::kDsplanRuntime);
  EXPECT_DOUBLE_EQ(rt.StreamLaunchSeconds(100), 3e-6);             // below: the smallest launch
  EXPECT_DOUBLE_EQ(rt.StreamLaunchSeconds(1e6), 4e-6);
  EXPECT_NEAR(rt.StreamLaunchSeconds(1e7), std::sqrt(4e-6 * 30e-6), 1e-15);  // log-log
  EXPECT_NEAR(rt.StreamLaunchSeconds(4e8), 4 * 30e-6, 1e-15);  // above: the largest point's rate
  EXPECT_DOUBLE_EQ(rt.MemoryBoundSeconds(1e6), 4e-6);
  // A task of 1e8 bytes in 100 launches is 100 launches of 1e6.
  EXPECT_NEAR(rt.StreamSeconds(1e8, 100), 100 * 4e-6, 1e-15);
  Task t;
  t.kind = TaskKind::kGpuOptimizer;
  t.bytes = 1e8;
  t.kernels = 100;
  EXPECT_NEAR(rt.TaskSeconds(t, {}, 1), std::max(100 * 4e-6, 100 * rt.DispatchSeconds()), 1e-15);

  // PyTorch's kernels keep their fitted streaming rate, whatever the curve says.
  CostModel pt(p, Precision::kBf16);
  HardwareProfile no_curve = p;
  no_curve.gpu.streaming.clear();
  EXPECT_DOUBLE_EQ(pt.MemoryBoundSeconds(1e6),
                   CostModel(no_curve, Precision::kBf16).MemoryBoundSeconds(1e6));
  // Without a curve the runtime streams at the measured rate.
  CostModel rt0(no_curve, Precision::kBf16, SoftwareStack::kDsplanRuntime);
  EXPECT_DOUBLE_EQ(rt0.MemoryBoundSeconds(1e9),
                   1e9 / (p.gpu.hbm_bytes_per_s.value * p.gpu.memory_bound_efficiency.value));
}

TEST(HostCopyCost, FreshTemporariesAreFaultedInAtTheProfilesPageFaultRate) {
  // A copy through a freshly mapped pageable temporary costs the copy, the host conversion and
  // the page faults of the temporary: its bytes at the profile's pageable_alloc_bytes_per_s.
  HardwareProfile p = Base();
  p.host.pageable_alloc_bytes_per_s.value = 2e9;
  CostModel cm(p, Precision::kBf16);
  Task t;
  t.kind = TaskKind::kCopyD2H;
  t.resource = Resource::kD2H;
  t.pinned = false;
  t.bytes = 64e6;
  t.host_convert_bytes = 192e6;
  const double plain = cm.TaskSeconds(t, {}, 8);
  EXPECT_NEAR(plain, cm.CopySeconds(false, false, 64e6) + cm.HostStreamSeconds(192e6, 8), 1e-15);
  t.host_fault_bytes = 64e6;
  EXPECT_NEAR(cm.TaskSeconds(t, {}, 8) - plain, 64e6 / 2e9, 1e-12);
  t.kind = TaskKind::kCopyH2D;
  t.resource = Resource::kH2D;
  t.host_convert_bytes = 0;
  EXPECT_NEAR(cm.TaskSeconds(t, {}, 8), cm.CopySeconds(true, false, 64e6) + 64e6 / 2e9, 1e-12);
}

TEST(HostCopyCost, CastCopiesFollowTheStacksMeasuredCurvePerSizeClass) {
  // ZeRO-3's offloaded gradient copies: each class of copies at its mean size on the measured
  // curve (PyTorch's blocking cast copy). The built-in curve measured both regimes, so the
  // fresh temporaries' page faults are in its points from 32 MiB and nothing goes on top; the
  // runtime stack, which runs no such copy, keeps the parts' pricing.
  HardwareProfile p = Base();
  CostModel pt(p, Precision::kBf16);
  CostModel rt(p, Precision::kBf16, SoftwareStack::kDsplanRuntime);
  const StackCosts& s = MeasuredStackCosts();
  ASSERT_TRUE(s.FreshCastCopyMeasured());
  Task t;
  t.kind = TaskKind::kCopyD2H;
  t.resource = Resource::kD2H;
  t.pinned = false;
  t.bytes = 40 * 4096.0 + 8 * 8e6 + 2 * 64e6;
  t.host_convert_bytes = 3 * t.bytes;
  t.cast_copies = {40, 8, 2};
  t.cast_copy_bytes = {40 * 4096.0, 8 * 8e6, 2 * 64e6};
  t.host_fault_bytes = 2 * 64e6;
  const double curve =
      40 * s.CastCopyD2HSeconds(4096) + 8 * s.CastCopyD2HSeconds(8e6) + 2 * s.CastCopyD2HSeconds(64e6);
  EXPECT_NEAR(pt.TaskSeconds(t, {}, 16), curve, 1e-12);
  EXPECT_DOUBLE_EQ(pt.CastCopyFaultSeconds(64e6), 0.0);
  EXPECT_NEAR(rt.TaskSeconds(t, {}, 16),
              rt.CopySeconds(false, false, t.bytes) + rt.HostStreamSeconds(t.host_convert_bytes, 16) +
                  rt.HostFaultSeconds(2 * 64e6),
              1e-12);
  // The curve: its points, linear between them, its first point's time below it, its last
  // segment's slope beyond it, each regime on its own points: a 24 MiB copy follows the heap
  // points' last segment, not the line towards the first fresh point.
  const auto& c = s.cast_copy_d2h;
  for (const auto& [b, sec] : c) EXPECT_DOUBLE_EQ(s.CastCopyD2HSeconds(b), sec);
  EXPECT_DOUBLE_EQ(s.CastCopyD2HSeconds(1), c.front().second);
  size_t split = 0;
  while (c[split].first < kFreshMappingBytes) ++split;
  ASSERT_GE(split, 2u);
  ASSERT_GE(c.size() - split, 2u);
  {
    const auto& [b0, s0] = c[split - 2];
    const auto& [b1, s1] = c[split - 1];
    const double mid = 24.0 * 1024 * 1024;
    EXPECT_NEAR(s.CastCopyD2HSeconds(mid), s1 + (s1 - s0) * (mid - b1) / (b1 - b0), 1e-12);
    EXPECT_LT(s.CastCopyD2HSeconds(mid), 0.5 * c[split].second);
  }
  {
    const auto& [b0, s0] = c[c.size() - 2];
    const auto& [b1, s1] = c.back();
    EXPECT_NEAR(s.CastCopyD2HSeconds(2 * b1), s1 + (s1 - s0) * b1 / (b1 - b0), 1e-12);
  }
  EXPECT_NEAR(s.CastCopyD2HSeconds(0.5 * (c[3].first + c[4].first)),
              0.5 * (c[3].second + c[4].second), 1e-12);
  for (size_t i = 1; i < c.size(); ++i) EXPECT_GT(c[i].second, c[i - 1].second);
  // A fresh copy costs several times the heap regime's line at its size: the page faults.
  EXPECT_GT(c[split].second, 4 * c[split - 1].second);
}

TEST(HostCopyCost, WithMallocOnItsHeapLargeCastCopiesStayInTheHeapRegime) {
  // Plan::malloc_heap: the large copies' temporaries keep their pages (class 3), so they are
  // priced on the heap regime's points at any size, along its last segment beyond them, and
  // nothing is faulted in; the fresh class keeps the fresh points.
  HardwareProfile p = Base();
  CostModel pt(p, Precision::kBf16);
  const StackCosts& s = MeasuredStackCosts();
  const auto& c = s.cast_copy_d2h;
  size_t split = 0;
  while (c[split].first < kFreshMappingBytes) ++split;
  ASSERT_GE(split, 2u);
  const auto& [b0, s0] = c[split - 2];
  const auto& [b1, s1] = c[split - 1];
  const double big = 64e6;
  const double heap = s1 + (s1 - s0) * (big - b1) / (b1 - b0);
  EXPECT_NEAR(s.CastCopyD2HSeconds(big, /*heap=*/true), heap, 1e-12);
  EXPECT_LT(heap, 0.25 * s.CastCopyD2HSeconds(big));  // the fresh regime's price at that size
  Task t;
  t.kind = TaskKind::kCopyD2H;
  t.resource = Resource::kD2H;
  t.pinned = false;
  t.bytes = 2 * big;
  t.cast_copies = {0, 0, 0, 2};
  t.cast_copy_bytes = {0, 0, 0, 2 * big};
  EXPECT_NEAR(pt.TaskSeconds(t, {}, 16), 2 * heap, 1e-12);
  t.cast_copies = {0, 0, 2, 0};
  t.cast_copy_bytes = {0, 0, 2 * big, 0};
  EXPECT_NEAR(pt.TaskSeconds(t, {}, 16), 2 * s.CastCopyD2HSeconds(big), 1e-12);
}

// The datasheet H200 profile with the gpt2 stack-section fixture appended: a stack section that
// a test completes with its own cast-copy keys.
std::string H200WithStackSection() {
  std::ifstream in(std::string(DSPLAN_TEST_DATA_DIR) + "/profiles/h200-sxm.yaml");
  std::ifstream section(std::string(DSPLAN_TEST_DATA_DIR) +
                        "/tests/fixtures/profiles/stack-section-gpt2.yaml");
  std::stringstream base;
  base << in.rdbuf() << section.rdbuf();
  return base.str();
}

TEST(HostCopyCost, ACastCopyCurveWithoutFreshPointsPricesTheFaultsOnTop) {
  // A profile's stack section measured before 2026-12-06 holds heap-regime points only (up to
  // 16 MiB): a copy from 32 MiB is priced on that curve's line plus its page faults at the
  // host's one-thread rate; with one fresh point, that point's rate and no faults on top.
  const std::string base = H200WithStackSection();
  const std::string heap =
      "  cast_copy_d2h:\n    - [1048576, 2e-4]\n    - [16777216, 2e-3]\n";
  auto old = ParseHardwareProfile(base + heap, "old-stack.yaml");
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  auto fresh = ParseHardwareProfile(base + heap + "    - [67108864, 0.05]\n", "new.yaml");
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  Task t;
  t.kind = TaskKind::kCopyD2H;
  t.resource = Resource::kD2H;
  t.pinned = false;
  t.bytes = 128e6;
  t.cast_copies = {0, 0, 1};
  t.cast_copy_bytes = {0, 0, 128e6};
  t.host_fault_bytes = 128e6;
  CostModel a(*old, Precision::kBf16);
  const double line = 2e-3 + (2e-3 - 2e-4) * (128e6 - 16777216) / (16777216 - 1048576);
  EXPECT_NEAR(a.TaskSeconds(t, {}, 16), line + a.HostFaultSeconds(128e6), 1e-12);
  EXPECT_GT(a.HostFaultSeconds(128e6), 0.0);
  CostModel b(*fresh, Precision::kBf16);
  EXPECT_NEAR(b.TaskSeconds(t, {}, 16), 0.05 * 128e6 / 67108864, 1e-12);
  EXPECT_DOUBLE_EQ(b.CastCopyFaultSeconds(128e6), 0.0);
}

TEST(HostCopyCost, AMeasuredHeapCurvePricesMallocHeapCopiesAndRoundTrips) {
  // stack.cast_copy_d2h_heap (stack_costs.py's points_heap, a child process started with malloc
  // held to its heap): with Plan::malloc_heap a copy of any size is priced on it; without, the
  // default curve's fresh points still price copies from 32 MiB. Points of the H100 malloc2-1206
  // call (castcopy-h100.json): 16 MiB 2.58 ms, 32 MiB 5.40 ms, 256 MiB 36.8 ms on the heap;
  // 32 MiB 30.5 ms, 256 MiB 224 ms through fresh mappings.
  const std::string base = H200WithStackSection();
  const std::string curves =
      "  cast_copy_d2h:\n    - [1048576, 2.16e-4]\n    - [16777216, 2.155e-3]\n"
      "    - [33554432, 30.49e-3]\n    - [268435456, 224.5e-3]\n"
      "  cast_copy_d2h_heap:\n    - [1048576, 2.88e-4]\n    - [16777216, 2.581e-3]\n"
      "    - [33554432, 5.396e-3]\n    - [268435456, 36.82e-3]\n";
  auto p = ParseHardwareProfile(base + curves, "heap.yaml");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->stack.cast_copy_d2h_heap.size(), 4u);
  const StackCosts s = StackCostsFromProfile(p->stack);
  const double big = 134217728;  // between the 32 and 256 MiB points
  const double heap = 5.396e-3 + (36.82e-3 - 5.396e-3) * (big - 33554432) / (268435456 - 33554432);
  const double fresh = 30.49e-3 + (224.5e-3 - 30.49e-3) * (big - 33554432) / (268435456 - 33554432);
  EXPECT_NEAR(s.CastCopyD2HSeconds(big, /*heap=*/true), heap, 1e-12);
  EXPECT_NEAR(s.CastCopyD2HSeconds(big), fresh, 1e-12);
  // Below 32 MiB each regime keeps its own curve: the heap curve's 16 MiB point, not the default's.
  EXPECT_NEAR(s.CastCopyD2HSeconds(16777216, true), 2.581e-3, 1e-12);
  EXPECT_NEAR(s.CastCopyD2HSeconds(16777216), 2.155e-3, 1e-12);
  // The curve survives a write and a read.
  const std::string path = ::testing::TempDir() + "/heap-curve-profile.yaml";
  ASSERT_TRUE(WriteHardwareProfile(*p, path).ok());
  auto back = LoadHardwareProfile(path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->stack.cast_copy_d2h_heap, p->stack.cast_copy_d2h_heap);
  // A profile that measured only the default curve takes no heap curve from anywhere else.
  auto old = ParseHardwareProfile(base + curves.substr(0, curves.find("  cast_copy_d2h_heap")),
                                  "old.yaml");
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_TRUE(StackCostsFromProfile(old->stack).cast_copy_d2h_heap.empty());
  // Points out of order are one line naming the key.
  const std::string bad =
      base + "  cast_copy_d2h_heap:\n    - [33554432, 5e-3]\n    - [16777216, 2e-3]\n";
  auto r = ParseHardwareProfile(bad, "bad.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("stack.cast_copy_d2h_heap[1]"), std::string::npos)
      << r.status().message();
  EXPECT_EQ(r.status().message().find('\n'), std::string::npos);
}

TEST(HostCopyCost, ABoundaryLoopPaysEachTensorsLongerSide) {
  // DeepSpeed's per-parameter loop at an offloaded boundary waits for the GPU once per tensor:
  // a small tensor costs its host ops, a large one the kernels and copies it queues, and one
  // does not hide the other. 200 tensors of 4 kB (host-bound) and 20 of 16 MB (copy-bound):
  // the loop is the sum of the two classes' longer sides, above the longer of the two totals
  // that overlapping them would give.
  HardwareProfile p = Base();
  CostModel pt(p, Precision::kBf16);
  CostModel rt(p, Precision::kBf16, SoftwareStack::kDsplanRuntime);
  const double small = 200 * 4096.0, big = 20 * 16e6;  // 16-bit bytes
  const double elems = (small + big) / 2;
  Task t;
  t.kind = TaskKind::kGradCopy;
  t.host_loop = HostLoop::kZero12OverflowCheck;
  t.pinned = true;
  t.cast_copies = {200, 20};
  t.cast_copy_bytes = {small, big};
  t.bytes = 52 * elems;
  t.kernels = 11 * 220;
  t.loop_d2h_bytes = 4 * elems;
  const double d = pt.DispatchSeconds();
  const double fs = small / (small + big), fb = big / (small + big);
  auto queued = [&](double f, int n) {
    return pt.MemoryBoundSeconds(t.bytes * f) + n * pt.CopySeconds(false, true, t.loop_d2h_bytes * f / n);
  };
  const double host_small = 200 * 11 * d, host_big = 20 * 11 * d;
  ASSERT_GT(host_small, queued(fs, 200));  // the small tensors are host-bound
  ASSERT_LT(host_big, queued(fb, 20));     // the large ones copy-bound
  const double loop = host_small + queued(fb, 20);
  EXPECT_NEAR(pt.TaskSeconds(t, {}, 16), loop, 1e-12);
  EXPECT_GT(loop, std::max(host_small + host_big, queued(fs, 200) + queued(fb, 20)) * 1.05);
  // ZeRO-3's loop also queues the copy back (H2D), and then blocks in the cast copy of each
  // tensor, on the stack's measured curve, with one host op fewer before the wait.
  const StackCosts& s = MeasuredStackCosts();
  Task z = t;
  z.host_loop = HostLoop::kZero3PartitionGrads;
  z.kernels = 9 * 220;
  z.bytes = 18 * elems;
  z.loop_d2h_bytes = z.loop_h2d_bytes = 2 * elems;
  z.host_fault_bytes = 64e6;  // in the built-in curve's fresh points: nothing on top
  double expect = 0;
  for (int k = 0; k < 2; ++k) {
    const int n = z.cast_copies[k];
    const double f = z.cast_copy_bytes[k] / (small + big);
    const double q = pt.MemoryBoundSeconds(z.bytes * f) +
                     n * (pt.CopySeconds(false, true, z.loop_d2h_bytes * f / n) +
                          pt.CopySeconds(true, true, z.loop_h2d_bytes * f / n));
    expect += std::max(n * 8 * d, q) + n * s.CastCopyD2HSeconds(z.cast_copy_bytes[k] / n);
  }
  EXPECT_NEAR(pt.TaskSeconds(z, {}, 16), expect, 1e-12);
  // dsplan's runtime runs no such loop: its kernels as launches.
  EXPECT_DOUBLE_EQ(rt.TaskSeconds(t, {}, 16),
                   std::max(rt.StreamSeconds(t.bytes, t.kernels), t.kernels * rt.DispatchSeconds()));
}

}  // namespace
}  // namespace dsplan
