#include <algorithm>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "core/hardware_profile.h"
#include "core/units.h"
#include "runtime/profiler/device_probe.h"
#include "runtime/profiler/profiler.h"

namespace dsplan {
namespace {

// A GPU that follows simple laws exactly, so the profiler's arithmetic can be checked against
// them: GEMMs at |gemm_eff| of 1000 TFLOP/s, copies at alpha + S/beta, collectives at
// alpha + S * factor / busbw.
class FakeProbe : public DeviceProbe {
 public:
  int gpus = 2;
  double gemm_flops = 800e12;
  double hbm = 4e12;        // read + written bytes per second
  double copy_alpha = 9e-6, copy_beta = 50e9;
  double coll_alpha = 15e-6, busbw = 300e9;
  bool fail_gemm = false;
  int gemm_calls = 0;

  int DeviceCount() override { return gpus; }
  std::string UnavailableReason() override { return "fake: no GPU"; }
  Result<GpuInfo> Info() override {
    if (gpus == 0) return Status::Unsupported("none");
    GpuInfo g;
    g.name = "NVIDIA H200";
    g.total_bytes = 150'000'000'000;
    g.sm_count = 132;
    g.l2_bytes = 60 * kMiB;
    g.versions = "fake";
    return g;
  }
  Result<int64_t> ContextBytes() override { return int64_t{500} * kMiB; }
  Result<Timing> Gemm(Precision, GemmLayout layout, int64_t m, int64_t n, int64_t k,
                      int64_t batch, const Repeats& r) override {
    ++gemm_calls;
    ++layout_calls[static_cast<int>(layout)];
    if (fail_gemm) return Status::CudaError("fake cuBLAS failure");
    return Fixed(2.0 * m * n * k * batch / gemm_flops, r);
  }
  // A launch costs stream_t0 plus its bytes at the HBM rate.
  double stream_t0 = 3e-6;
  int layout_calls[3] = {0, 0, 0};
  Result<Timing> StreamLaunches(int64_t bytes, int launches, const Repeats& r) override {
    return Fixed(launches * (stream_t0 + bytes / hbm), r);
  }
  Result<Timing> DeviceCopy(int64_t bytes, const Repeats& r) override {
    return Fixed(2.0 * bytes / hbm, r);
  }
  Result<Timing> Elementwise(int64_t bytes, const Repeats& r) override {
    return Fixed(2.0 * bytes / (0.9 * hbm), r);
  }
  Result<Timing> HostCopy(CopyKind kind, int64_t bytes, const Repeats& r) override {
    const bool pinned = kind == CopyKind::kH2DPinned || kind == CopyKind::kD2HPinned;
    return Fixed(copy_alpha + bytes / (pinned ? copy_beta : copy_beta / 4), r);
  }
  Result<Timing> KernelLaunch(const Repeats& r) override { return Fixed(2.5e-6, r); }
  Result<double> PinnedAllocBytesPerS(int64_t) override { return 8e9; }
  Result<Timing> Collective(dsplan::Collective op, int ranks, int64_t bytes,
                            const Repeats& r) override {
    return Fixed(CollectiveSeconds(op, ranks, static_cast<double>(bytes), coll_alpha, busbw), r);
  }

 private:
  static Timing Fixed(double s, const Repeats& r) {
    Timing t;
    t.median_s = s;
    t.min_s = 0.99 * s;
    t.max_s = 1.02 * s;
    t.repeats = r.timed;
    return t;
  }
};

class ProfilerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto b = FindHardwareProfile("h200-sxm", DSPLAN_TEST_DATA_DIR);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    base_ = *b;
    options_.sizes = DefaultSizes(/*quick=*/true, 2);
    // Host measurements at test sizes: milliseconds.
    options_.sizes.adam_elements = 1 << 14;
    options_.sizes.adam_threads = {1, 2};
    options_.sizes.memcpy_bytes = 1 << 20;
    options_.sizes.alloc_bytes = 1 << 20;
    options_.name = "fake-measured";
    options_.dsplan_version = "test";
  }
  HardwareProfile base_;
  ProfileOptions options_;
};

bool HasNote(const ProfileResult& r, const std::string& text) {
  for (const auto& n : r.notes) {
    if (n.find(text) != std::string::npos) return true;
  }
  return false;
}

TEST_F(ProfilerTest, MeasuredNumbersFollowTheProbeAndUnmeasuredStayTheBase) {
  FakeProbe gpu;
  int progress_calls = 0;
  options_.progress = [&](const ProgressUpdate& p) {
    ++progress_calls;
    EXPECT_LE(p.done, p.total);
    EXPECT_GE(p.seconds_left, 0);
  };
  auto r = RunProfile(base_, gpu, options_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const HardwareProfile& p = r->profile;
  EXPECT_EQ(p.name, "fake-measured");
  EXPECT_EQ(p.base, "h200-sxm");
  EXPECT_GT(progress_calls, 5);

  // GEMM: every shape at the fake's rate; efficiency relative to the datasheet peak.
  ASSERT_EQ(p.gpu.gemm.size(), options_.sizes.gemm_shapes.size());
  for (const GemmPoint& g : p.gpu.gemm) EXPECT_NEAR(g.flops_per_s, gpu.gemm_flops, 1e6);
  EXPECT_NEAR(p.gpu.gemm_efficiency.value, gpu.gemm_flops / base_.gpu.peak_flops_bf16.value, 1e-9);
  EXPECT_EQ(p.gpu.gemm_efficiency.source.kind, SourceKind::kMeasured);
  EXPECT_EQ(p.gpu.peak_flops_bf16, base_.gpu.peak_flops_bf16);  // a spec, never measured

  EXPECT_NEAR(p.gpu.hbm_bytes_per_s.value, gpu.hbm, 1);
  EXPECT_NEAR(p.gpu.memory_bound_efficiency.value, 0.9, 1e-9);
  EXPECT_EQ(p.gpu.context_bytes.value, 500.0 * kMiB);
  EXPECT_EQ(p.gpu.memory_bytes.value, 150e9);
  EXPECT_NEAR(p.gpu.kernel_launch_s.value, 2.5e-6, 1e-12);
  // The streaming curve: one point per size, seconds per launch as the fake's law.
  ASSERT_EQ(p.gpu.streaming.size(), options_.sizes.stream_sizes.size());
  for (const StreamPoint& s : p.gpu.streaming) {
    EXPECT_NEAR(s.seconds, gpu.stream_t0 + s.bytes / gpu.hbm, 1e-12) << s.bytes;
  }
  EXPECT_EQ(p.gpu.streaming_source.kind, SourceKind::kMeasured);
  // Every Linear shape in its three layouts.
  EXPECT_GT(gpu.layout_calls[static_cast<int>(GemmLayout::kNN)], 0);
  EXPECT_EQ(gpu.layout_calls[static_cast<int>(GemmLayout::kNN)],
            gpu.layout_calls[static_cast<int>(GemmLayout::kTN)]);

  // Copies: the alpha-beta fit recovers the fake's law.
  EXPECT_NEAR(p.links.h2d_pinned.bytes_per_s.value, gpu.copy_beta, 1e-3 * gpu.copy_beta);
  EXPECT_NEAR(p.links.h2d_pinned.latency_s.value, gpu.copy_alpha, 1e-3 * gpu.copy_alpha);
  EXPECT_NEAR(p.links.d2h_pageable.bytes_per_s.value, gpu.copy_beta / 4, 1e-3 * gpu.copy_beta);
  EXPECT_EQ(p.links.h2d_pinned.points.size(), options_.sizes.copy_sizes.size());
  EXPECT_EQ(p.host.pinned_alloc_bytes_per_s.value, 8e9);

  // Collectives: intra-node curves replaced by 2-rank measured ones; inter-node stay datasheet.
  int intra = 0, inter = 0;
  for (const CollectiveCurve& c : p.links.collectives) {
    if (c.inter_node) {
      ++inter;
      EXPECT_NE(c.busbw_bytes_per_s.source.kind, SourceKind::kMeasured);
    } else {
      ++intra;
      EXPECT_EQ(c.ranks, 2);
      EXPECT_NEAR(c.busbw_bytes_per_s.value, gpu.busbw, 1e-3 * gpu.busbw);
      EXPECT_NEAR(c.alpha_s.value, gpu.coll_alpha, 1e-3 * gpu.coll_alpha);
    }
  }
  EXPECT_EQ(intra, 3);
  EXPECT_EQ(inter, 3);

  // CPU parts measured for real.
  ASSERT_EQ(p.host.cpu_adam.size(), 2u);
  EXPECT_GT(p.host.cpu_adam[0].elements_per_s, 0);
  EXPECT_EQ(p.host.cpu_adam_source.kind, SourceKind::kMeasured);
  EXPECT_EQ(p.host.memcpy_bytes_per_s.source.kind, SourceKind::kMeasured);
  EXPECT_TRUE(HasNote(*r, "no --nvme-path"));
  EXPECT_EQ(p.nvme, base_.nvme);

  // The report has the nccl-tests style tables.
  for (const char* h : {"# GEMM", "(TFLOP/s)", "busbw", "# CPU Adam", "h2d_pinned"}) {
    EXPECT_NE(r->report.find(h), std::string::npos) << h;
  }

  // The written profile loads back equal.
  std::string path = (std::filesystem::temp_directory_path() / "dsplan_profiler_test.yaml").string();
  ASSERT_TRUE(WriteHardwareProfile(p, path).ok());
  auto back = LoadHardwareProfile(path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  HardwareProfile b = *back;
  b.file.clear();
  EXPECT_TRUE(b == p);
  std::filesystem::remove(path);
}

TEST_F(ProfilerTest, WithoutAGpuOnlyCpuPartsAreMeasuredAndTheNoteSaysSo) {
  FakeProbe gpu;
  gpu.gpus = 0;
  auto r = RunProfile(base_, gpu, options_);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(HasNote(*r, "no CUDA device: GPU measurements skipped (gemm, hbm, h2d/d2h, nccl); "
                          "those stay datasheet values from h200-sxm"));
  EXPECT_EQ(gpu.gemm_calls, 0);
  EXPECT_EQ(r->profile.gpu, base_.gpu);
  EXPECT_EQ(r->profile.links, base_.links);
  EXPECT_EQ(r->profile.host.cpu_adam_source.kind, SourceKind::kMeasured);
  EXPECT_FALSE(r->profile.FullyMeasured());
}

TEST_F(ProfilerTest, OneGpuLeavesNvlinkToTheBaseAndSaysSo) {
  FakeProbe gpu;
  gpu.gpus = 1;
  options_.sections = {"nccl"};
  auto r = RunProfile(base_, gpu, options_);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(HasNote(*r, "NVLink collectives not measured"));
  EXPECT_EQ(r->profile.links.collectives, base_.links.collectives);
}

TEST_F(ProfilerTest, OnlySelectsSectionsAndFailuresBecomeNotes) {
  FakeProbe gpu;
  gpu.fail_gemm = true;
  auto sections = ParseSections("gemm,cpu-adam");
  ASSERT_TRUE(sections.ok());
  options_.sections = *sections;
  auto r = RunProfile(base_, gpu, options_);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(HasNote(*r, "fake cuBLAS failure"));
  EXPECT_EQ(r->profile.gpu.gemm_efficiency, base_.gpu.gemm_efficiency);
  EXPECT_TRUE(r->profile.gpu.gemm.empty());
  EXPECT_EQ(r->profile.links, base_.links);        // copy and nccl not selected
  EXPECT_EQ(r->profile.host.memcpy_bytes_per_s, base_.host.memcpy_bytes_per_s);  // host not selected
  EXPECT_EQ(r->profile.host.cpu_adam_source.kind, SourceKind::kMeasured);

  auto bad = ParseSections("gemm,warp-drive");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("warp-drive"), std::string::npos);
  EXPECT_NE(bad.status().message().find("cpu-adam"), std::string::npos);
}

TEST(ProfileSizesTest, ShapesCoverTheWorkloadAndQuickIsSmaller) {
  auto full = WorkloadGemmShapes(false);
  auto quick = WorkloadGemmShapes(true);
  EXPECT_LT(quick.size(), full.size());
  auto has = [](const std::vector<GemmShape>& v, int64_t m, int64_t n, int64_t k) {
    for (const auto& s : v) {
      if (s.m == m && s.n == n && s.k == k) return true;
    }
    return false;
  };
  EXPECT_TRUE(has(full, 8192, 8192, 8192));
  EXPECT_TRUE(has(quick, 8192, 8192, 8192));
  EXPECT_TRUE(has(full, 16384, 50257, 1600));  // gpt2-xl logits
  EXPECT_TRUE(has(full, 4096, 3 * 5120, 5120));
  // Each Linear at each token count in three layouts: forward (tokens, out, in), input gradient
  // (tokens, in, out), weight gradient (out, in, tokens).
  auto hasl = [](const std::vector<GemmShape>& v, int64_t m, int64_t n, int64_t k, GemmLayout l) {
    for (const auto& s : v) {
      if (s.m == m && s.n == n && s.k == k && s.layout == l) return true;
    }
    return false;
  };
  const std::vector<GemmShape> one = LinearGemmShapes({{6400, 1600}}, {1024, 8192});
  EXPECT_EQ(one.size(), 1u + 2 * 3);  // 8192^3 plus 2 token counts x 3 layouts
  EXPECT_TRUE(hasl(one, 8192, 6400, 1600, GemmLayout::kNT));
  EXPECT_TRUE(hasl(one, 8192, 1600, 6400, GemmLayout::kNN));
  EXPECT_TRUE(hasl(one, 6400, 1600, 8192, GemmLayout::kTN));
  EXPECT_TRUE(hasl(one, 6400, 1600, 1024, GemmLayout::kTN));
  EXPECT_FALSE(hasl(one, 1024, 6400, 1600, GemmLayout::kNN));
  ProfileSizes q = DefaultSizes(true, 16), f = DefaultSizes(false, 16);
  EXPECT_EQ(f.copy_sizes.front(), 4 * kKiB);
  EXPECT_EQ(f.copy_sizes.back(), kGiB);
  EXPECT_EQ(f.collective_sizes.front(), kKiB);
  EXPECT_EQ(f.collective_sizes.back(), kGiB);
  EXPECT_EQ(f.adam_threads.back(), 16);
  EXPECT_LT(q.copy_sizes.size(), f.copy_sizes.size());
}

// A GPU with the fused attention kernel at fixed rates (forward |fwd|, backward |bwd| FLOP/s
// with the 2.5x backward count).
class AttentionProbe : public FakeProbe {
 public:
  double fwd = 250e12, bwd = 180e12;
  int calls = 0;
  Result<AttentionTiming> Attention(Precision, int64_t d, bool causal, int64_t seq, int64_t bh,
                                    const Repeats& r) override {
    ++calls;
    const double f = 4.0 * bh * seq * seq * d / (causal ? 2 : 1);
    AttentionTiming t;
    t.forward.median_s = t.forward.min_s = t.forward.max_s = f / fwd;
    t.backward.median_s = t.backward.min_s = t.backward.max_s = 2.5 * f / bwd;
    t.forward.repeats = t.backward.repeats = r.timed;
    return t;
  }
};

TEST_F(ProfilerTest, AttentionSectionWritesTheMeasuredTable) {
  AttentionProbe gpu;
  options_.sections = {"attention"};
  auto r = RunProfile(base_, gpu, options_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const ProfileSizes& z = options_.sizes;
  const size_t rows = z.attention_dtypes.size() * z.attention_head_dims.size() * 2 *
                      z.attention_seqs.size() * z.attention_rows.size();
  ASSERT_EQ(r->profile.gpu.attention.size(), rows);
  EXPECT_EQ(gpu.calls, static_cast<int>(rows));
  for (const AttentionPoint& a : r->profile.gpu.attention) {
    EXPECT_NEAR(a.fwd_flops_per_s, gpu.fwd, 1e3) << a.seq;
    EXPECT_NEAR(a.bwd_flops_per_s, gpu.bwd, 1e3) << a.seq;
    // Slices x seq is one of the amounts of work asked for.
    EXPECT_NE(std::find(z.attention_rows.begin(), z.attention_rows.end(), a.batch_heads * a.seq),
              z.attention_rows.end())
        << a.batch_heads << " x " << a.seq;
  }
  EXPECT_EQ(r->profile.gpu.attention_source.kind, SourceKind::kMeasured);
  EXPECT_NE(r->report.find("# Fused attention"), std::string::npos);
  EXPECT_EQ(r->profile.SourceSummary().find("not measured"), std::string::npos);
  EXPECT_TRUE(r->profile.gpu.gemm.empty() == base_.gpu.gemm.empty());  // other sections untouched
}

TEST_F(ProfilerTest, AttentionWithoutTheKernelLeavesTheTableEmptyWithOneNote) {
  FakeProbe gpu;  // DeviceProbe's default: no fused attention kernel
  options_.sections = {"attention"};
  auto r = RunProfile(base_, gpu, options_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->profile.gpu.attention.empty());
  EXPECT_TRUE(HasNote(*r, "attention: not measured"));
  int notes = 0;
  for (const auto& n : r->notes) notes += n.find("attention") != std::string::npos;
  EXPECT_EQ(notes, 1);
  EXPECT_NE(r->profile.SourceSummary().find("not measured (runtime attention"), std::string::npos);
}

}  // namespace
}  // namespace dsplan
