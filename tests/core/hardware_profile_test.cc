#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "core/hardware_profile.h"

namespace dsplan {
namespace {

namespace fs = std::filesystem;

class HardwareProfileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("dsplan_profile_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
            "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static std::string ShippedText(const std::string& name) {
    std::ifstream in(std::string(DSPLAN_TEST_DATA_DIR) + "/profiles/" + name + ".yaml");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  // Writes |text| to a file in the test's folder and returns its path.
  std::string WriteText(const std::string& name, const std::string& text) {
    std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }

  // The H200 datasheet profile with |from| replaced by |to| (which must occur).
  std::string Mutated(const std::string& from, const std::string& to) {
    std::string text = ShippedText("h200-sxm");
    size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) text.replace(at, from.size(), to);
    return WriteText("mutated.yaml", text);
  }

  fs::path dir_;
};

Number Measured(double v, const std::string& how) {
  return Number{v, Source{SourceKind::kMeasured, how}};
}

// A profile with every list filled and awkward doubles, all measured.
HardwareProfile SyntheticMeasured() {
  HardwareProfile p;
  p.name = "synthetic";
  p.description = "built in a test: \"quotes\", colons: and #hashes";
  p.base = "h200-sxm";
  p.gpus_per_node = 2;
  GpuProfile& g = p.gpu;
  g.name = "Fake GPU";
  g.memory_bytes = Measured(150e9 + 1, "cudaMemGetInfo total");
  g.peak_flops_bf16 = {989.4e12, {SourceKind::kDatasheet, "sheet"}};
  g.peak_flops_fp16 = {989.4e12, {SourceKind::kDatasheet, "sheet"}};
  g.peak_flops_tf32 = {494.7e12, {SourceKind::kDatasheet, "sheet"}};
  g.peak_flops_fp32 = {66.9e12, {SourceKind::kDatasheet, "sheet"}};
  g.hbm_bytes_per_s = Measured(4.31e12 / 3, "copy");
  g.memory_bound_efficiency = Measured(1.0 / 3, "elementwise / copy");
  g.gemm_efficiency = Measured(0.7987, "median");
  g.attention_efficiency = Measured(0.123456789, "proxy");
  g.kernel_launch_s = Measured(2.5e-6, "empty kernel");
  g.context_bytes = Measured(6.5e8, "cudaMemGetInfo");
  g.gemm_source = {SourceKind::kMeasured, "cuBLASLt, median of 20"};
  g.gemm = {{Precision::kBf16, 8192, 8192, 8192, 7.9e14},
            {Precision::kFp16, 4096, 50257, 1600, 5.5e14},
            {Precision::kBf16, 6400, 1600, 4096, 6.1e14, GemmLayout::kTN},
            {Precision::kBf16, 4096, 1600, 6400, 6.3e14, GemmLayout::kNN},
            {Precision::kBf16, 512, 512, 64, 2.1e14, GemmLayout::kNT, 256}};
  g.streaming_source = {SourceKind::kMeasured, "streaming kernel back to back"};
  g.streaming = {{4096, 2.9e-6}, {1.0 / 3 * 3e6, 3.7e-6}, {1073741824, 2.6e-4}};
  g.sustained_gemm_source = {SourceKind::kMeasured, "duty sweep"};
  g.sustained_gemm = {{0.404, 1.0118}, {0.745, 1.0 + 1.0 / 3}, {0.999, 1.1843}};
  HostProfile& h = p.host;
  h.cores = 16;
  h.ram_bytes = Measured(128.0 * (1 << 30), "/proc/meminfo");
  h.cpu_adam = {{1, 4.5e8}, {16, 3.1e9}};
  h.cpu_adam_source = {SourceKind::kMeasured, "AVX-512 kernel"};
  h.pinned_alloc_bytes_per_s = Measured(9e9, "cudaHostAlloc");
  h.pageable_alloc_bytes_per_s = Measured(4e9, "malloc + touch");
  h.parallel_alloc_bytes_per_s = Measured(9.7e9, "mmap + touch, 16 threads");
  h.memcpy_bytes_per_s = Measured(3e10, "memcpy");
  for (CopyCurve* c : {&p.links.h2d_pinned, &p.links.h2d_pageable, &p.links.d2h_pinned,
                       &p.links.d2h_pageable}) {
    c->latency_s = Measured(7e-6, "fit");
    c->bytes_per_s = Measured(5.3e10, "fit");
    c->points = {{4096, 1e9}, {1 << 30, 5.2e10}};
  }
  CollectiveCurve cc;
  cc.op = Collective::kReduceScatter;
  cc.ranks = 2;
  cc.alpha_s = Measured(1.1e-5, "fit");
  cc.busbw_bytes_per_s = Measured(3.6e11, "fit");
  cc.points = {{1024, 1e8}, {1 << 30, 3.5e11}};
  p.links.collectives.push_back(cc);
  p.nvme.present = true;
  p.nvme.path = "/mnt/nvme";
  p.nvme.capacity_bytes = Measured(3.84e12, "statvfs");
  p.nvme.read_bytes_per_s = Measured(6.1e9, "io_uring");
  p.nvme.write_bytes_per_s = Measured(3.2e9, "io_uring");
  p.nvme.points = {{1 << 20, 32, 6.1e9, 3.2e9}};
  return p;
}

TEST_F(HardwareProfileTest, EveryShippedProfileLoadsWithSourcedNumbers) {
  auto names = ListHardwareProfiles(DSPLAN_TEST_DATA_DIR);
  ASSERT_TRUE(names.ok()) << names.status().ToString();
  for (const char* required : {"v100-32gb", "a100-40gb", "a100-80gb", "h100-sxm", "h100-measured", "h200-sxm",
                               "l40s", "t4"}) {
    EXPECT_NE(std::find(names->begin(), names->end(), required), names->end()) << required;
  }
  for (const std::string& name : *names) {
    auto p = FindHardwareProfile(name, DSPLAN_TEST_DATA_DIR);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ(p->name, name);
    EXPECT_GT(p->gpu.memory_bytes.value, 1e9) << name;
    EXPECT_GT(p->gpu.peak_flops_fp16.value, 1e13) << name;
    EXPECT_GT(p->gpu.hbm_bytes_per_s.value, 1e11) << name;
    EXPECT_GT(p->gpu.context_bytes.value, 1e8) << name;
    EXPECT_FALSE(p->host.cpu_adam.empty()) << name;
    EXPECT_GT(p->links.h2d_pinned.bytes_per_s.value, 1e9) << name;
    for (const Number* n : {&p->gpu.memory_bytes, &p->gpu.peak_flops_bf16, &p->gpu.hbm_bytes_per_s,
                            &p->gpu.gemm_efficiency, &p->host.ram_bytes,
                            &p->links.d2h_pageable.bytes_per_s}) {
      EXPECT_FALSE(n->source.detail.empty()) << name;
    }
    // The writer reproduces every shipped profile exactly.
    std::string out = (dir_ / (name + ".yaml")).string();
    ASSERT_TRUE(WriteHardwareProfile(*p, out).ok());
    auto back = LoadHardwareProfile(out);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    HardwareProfile a = *p, b = *back;
    a.file.clear();
    b.file.clear();
    EXPECT_TRUE(a == b) << name;
  }
}

TEST_F(HardwareProfileTest, DatasheetProfilesSayBf16IsMissingOnVoltaAndTuring) {
  for (const char* name : {"v100-32gb", "t4"}) {
    auto p = FindHardwareProfile(name, DSPLAN_TEST_DATA_DIR);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ(p->gpu.peak_flops_bf16.value, 0) << name;
    EXPECT_NE(p->gpu.peak_flops_bf16.source.detail.find("no BF16"), std::string::npos) << name;
  }
}

TEST_F(HardwareProfileTest, RoundTripIsExactForAwkwardValues) {
  HardwareProfile p = SyntheticMeasured();
  std::string path = (dir_ / "synthetic.yaml").string();
  Status s = WriteHardwareProfile(p, path);
  ASSERT_TRUE(s.ok()) << s.ToString();
  auto back = LoadHardwareProfile(path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->file, path);
  HardwareProfile b = *back;
  b.file.clear();
  EXPECT_TRUE(b == p);
  EXPECT_EQ(b.gpu.memory_bound_efficiency.value, 1.0 / 3);
  EXPECT_EQ(b.description, p.description);
}

TEST_F(HardwareProfileTest, FullyMeasuredAndSourceSummary) {
  HardwareProfile p = SyntheticMeasured();
  EXPECT_TRUE(p.FullyMeasured());
  EXPECT_EQ(p.SourceSummary().find("datasheet"), std::string::npos) << p.SourceSummary();
  p.links.collectives.clear();  // two GPUs per node and no measured collective
  EXPECT_FALSE(p.FullyMeasured());

  auto ds = FindHardwareProfile("h200-sxm", DSPLAN_TEST_DATA_DIR);
  ASSERT_TRUE(ds.ok());
  EXPECT_FALSE(ds->FullyMeasured());
  const std::string summary = ds->SourceSummary();
  EXPECT_NE(summary.find("measured (context)"), std::string::npos) << summary;
  EXPECT_NE(summary.find("assumption ("), std::string::npos) << summary;
  EXPECT_NE(summary.find("NVLink"), std::string::npos) << summary;
}

TEST_F(HardwareProfileTest, TheParallelFaultRateIsOneThreadsRateLabelledWhenAbsent) {
  // Profiles written before the key existed: the reader takes one thread's page-fault rate and
  // says so; a profile that has the key keeps its own number and source.
  auto ds = FindHardwareProfile("h200-sxm", DSPLAN_TEST_DATA_DIR);
  ASSERT_TRUE(ds.ok());
  const Number& par = ds->host.parallel_alloc_bytes_per_s;
  EXPECT_EQ(par.value, ds->host.pageable_alloc_bytes_per_s.value);
  EXPECT_EQ(par.source.kind, SourceKind::kAssumption);
  EXPECT_NE(par.source.detail.find("one thread"), std::string::npos) << par.source.detail;
  const std::string with = Mutated(
      "  memcpy_bytes_per_s:",
      "  parallel_alloc_bytes_per_s: {value: 7.5GB/s, measured: \"16 threads\"}\n"
      "  memcpy_bytes_per_s:");
  auto p = LoadHardwareProfile(with);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->host.parallel_alloc_bytes_per_s.value, 7.5e9);
  EXPECT_EQ(p->host.parallel_alloc_bytes_per_s.source.kind, SourceKind::kMeasured);
  EXPECT_EQ(p->host.parallel_alloc_bytes_per_s.source.detail, "16 threads");
}

TEST_F(HardwareProfileTest, UnknownKeyIsNamedWithFileAndLine) {
  std::string path = Mutated("  kernel_launch_s:", "  kernel_lanch_s:");
  auto p = LoadHardwareProfile(path);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), Status::Code::kInvalidArgument);
  const std::string m = p.status().message();
  EXPECT_NE(m.find(path), std::string::npos) << m;
  EXPECT_NE(m.find("gpu.kernel_lanch_s"), std::string::npos) << m;
  EXPECT_NE(m.find("unknown key"), std::string::npos) << m;
  EXPECT_NE(m.find("kernel_launch_s"), std::string::npos) << m;  // listed among the valid keys
}

TEST_F(HardwareProfileTest, WrongUnitsAreRejected) {
  struct Case {
    std::string from, to, key;
  };
  const Case cases[] = {
      {"value: 4.8TB/s", "value: 4.8TB", "gpu.hbm_bytes_per_s.value"},       // size for bandwidth
      {"value: 143155.9MiB", "value: 141GB/s", "gpu.memory_bytes.value"},   // bandwidth for size
      {"value: 989.4 TFLOP/s", "value: 989.4 TB/s", "gpu.peak_flops_bf16.value"},
      {"value: 5us", "value: 5 parsecs", "gpu.kernel_launch_s.value"},
      {"memory_bound_efficiency: {value: 0.8", "memory_bound_efficiency: {value: 80",
       "gpu.memory_bound_efficiency.value"},
      {"cores: 112", "cores: many", "host.cores"},
  };
  for (const Case& c : cases) {
    auto p = LoadHardwareProfile(Mutated(c.from, c.to));
    ASSERT_FALSE(p.ok()) << c.to;
    EXPECT_NE(p.status().message().find(c.key), std::string::npos) << p.status().message();
  }
}

TEST_F(HardwareProfileTest, NumbersNeedExactlyOneSourceAndRequiredKeysMustExist) {
  auto no_source = LoadHardwareProfile(
      Mutated("{value: 5us, assumption: \"typical host-side cost of one kernel launch (CUDA "
              "runtime, eager PyTorch)\"}",
              "{value: 5us}"));
  ASSERT_FALSE(no_source.ok());
  EXPECT_NE(no_source.status().message().find("gpu.kernel_launch_s: missing its source"),
            std::string::npos)
      << no_source.status().message();

  auto missing = LoadHardwareProfile(Mutated("gpus_per_node: 8\n", ""));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("gpus_per_node: missing"), std::string::npos)
      << missing.status().message();

  auto bad_op = LoadHardwareProfile(Mutated("op: reduce_scatter", "op: reduce_scater"));
  ASSERT_FALSE(bad_op.ok());
  EXPECT_NE(bad_op.status().message().find("links.collectives[1].op"), std::string::npos)
      << bad_op.status().message();
}

TEST_F(HardwareProfileTest, GemmLayoutsAndTheStreamingCurveAreChecked) {
  const std::string gpu_end = "  context_bytes:";
  auto with = [&](const std::string& rows) {
    return LoadHardwareProfile(Mutated(gpu_end, rows + gpu_end));
  };
  auto ok = with(
      "  gemm_source: {measured: \"test\"}\n"
      "  gemm:\n    - [bf16, 4096, 1600, 6400, 6.3e14, nn]\n    - [bf16, 4096, 6400, 1600, 7e14]\n"
      "  streaming_source: {measured: \"test\"}\n"
      "  streaming:\n    - [4096, 3e-6]\n    - [1e6, 4e-6]\n");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  ASSERT_EQ(ok->gpu.gemm.size(), 2u);
  EXPECT_EQ(ok->gpu.gemm[0].layout, GemmLayout::kNN);
  EXPECT_EQ(ok->gpu.gemm[1].layout, GemmLayout::kNT);  // rows without a layout: the forward's
  ASSERT_EQ(ok->gpu.streaming.size(), 2u);
  EXPECT_EQ(ok->gpu.streaming[1].seconds, 4e-6);

  auto bad_layout = with("  gemm_source: {measured: \"t\"}\n  gemm:\n"
                         "    - [bf16, 4096, 1600, 6400, 6.3e14, tt]\n");
  ASSERT_FALSE(bad_layout.ok());
  EXPECT_NE(bad_layout.status().message().find("gpu.gemm[0][5]"), std::string::npos)
      << bad_layout.status().message();
  EXPECT_NE(bad_layout.status().message().find("valid: nt"), std::string::npos);

  auto unsorted = with("  streaming_source: {measured: \"t\"}\n  streaming:\n"
                       "    - [1e6, 4e-6]\n    - [4096, 3e-6]\n");
  ASSERT_FALSE(unsorted.ok());
  EXPECT_NE(unsorted.status().message().find("gpu.streaming[1]"), std::string::npos)
      << unsorted.status().message();
  EXPECT_NE(unsorted.status().message().find("ascending"), std::string::npos);

  auto sourceless = with("  streaming:\n    - [4096, 3e-6]\n");
  ASSERT_FALSE(sourceless.ok());
  EXPECT_NE(sourceless.status().message().find("gpu.streaming_source"), std::string::npos)
      << sourceless.status().message();
}

TEST_F(HardwareProfileTest, TheSustainedGemmCurveIsChecked) {
  const std::string gpu_end = "  context_bytes:";
  auto with = [&](const std::string& rows) {
    return LoadHardwareProfile(Mutated(gpu_end, rows + gpu_end));
  };
  auto ok = with("  sustained_gemm_source: {measured: \"t\"}\n  sustained_gemm:\n"
                 "    - [0.4, 1.01]\n    - [0.9, 1.15]\n");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  ASSERT_EQ(ok->gpu.sustained_gemm.size(), 2u);
  EXPECT_EQ(ok->gpu.sustained_gemm[1].time_ratio, 1.15);
  EXPECT_NE(ok->SourceSummary().find("sustained GEMM clock"), std::string::npos)
      << ok->SourceSummary();
  for (const char* bad : {"    - [0.9, 1.15]\n    - [0.4, 1.01]\n",  // not ascending
                          "    - [1.5, 1.1]\n",                         // duty above 1
                          "    - [0.5, 0.9]\n",                         // faster than alone
                          "    - [0.5]\n"}) {
    auto r = with(std::string("  sustained_gemm_source: {measured: \"t\"}\n  sustained_gemm:\n") +
                  bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("gpu.sustained_gemm["), std::string::npos)
        << r.status().message();
  }
  auto sourceless = with("  sustained_gemm:\n    - [0.4, 1.01]\n");
  ASSERT_FALSE(sourceless.ok());
  EXPECT_NE(sourceless.status().message().find("gpu.sustained_gemm_source"), std::string::npos)
      << sourceless.status().message();
}

TEST_F(HardwareProfileTest, MissingFileMalformedYamlAndUnknownNames) {
  auto missing = LoadHardwareProfile((dir_ / "nope.yaml").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Status::Code::kNotFound);
  EXPECT_NE(missing.status().message().find("nope.yaml"), std::string::npos);

  auto malformed = LoadHardwareProfile(WriteText("bad.yaml", "name: [unclosed\n"));
  ASSERT_FALSE(malformed.ok());
  EXPECT_NE(malformed.status().message().find("malformed YAML"), std::string::npos)
      << malformed.status().message();

  auto unknown = FindHardwareProfile("h200-smx", DSPLAN_TEST_DATA_DIR);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), Status::Code::kNotFound);
  const std::string m = unknown.status().message();
  EXPECT_NE(m.find("did you mean h200-sxm"), std::string::npos) << m;
  EXPECT_NE(m.find("a100-80gb"), std::string::npos) << m;  // the available ones are listed

  Status unwritable = WriteHardwareProfile(SyntheticMeasured(), "/nonexistent-dir/x.yaml");
  EXPECT_EQ(unwritable.code(), Status::Code::kIoError);
  EXPECT_NE(unwritable.message().find("/nonexistent-dir/x.yaml"), std::string::npos);
}

}  // namespace
}  // namespace dsplan
