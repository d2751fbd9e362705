// The measured fused-attention table of a hardware profile (gpu.attention): YAML round trip,
// strict reading, and what the source summary says with and without it.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/hardware_profile.h"

namespace dsplan {
namespace {

namespace fs = std::filesystem;

class AttentionProfileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("dsplan_attention_profile_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    auto hw = FindHardwareProfile("h200-sxm", DSPLAN_TEST_DATA_DIR);
    ASSERT_TRUE(hw.ok()) << hw.status().message();
    base_ = *hw;
    base_.file.clear();
  }
  void TearDown() override { fs::remove_all(dir_); }

  // |base_| written out with |gpu_lines| (YAML, indented two spaces) appended to its gpu map.
  std::string WithGpuLines(const std::string& gpu_lines) {
    const std::string path = (dir_ / "p.yaml").string();
    EXPECT_TRUE(WriteHardwareProfile(base_, path).ok());
    std::ifstream in(path);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t at = text.find("\nhost:");
    EXPECT_NE(at, std::string::npos);
    text.insert(at + 1, gpu_lines);
    std::ofstream(path) << text;
    return path;
  }

  fs::path dir_;
  HardwareProfile base_;
};

TEST_F(AttentionProfileTest, RoundTrip) {
  HardwareProfile p = base_;
  p.gpu.attention = {{Precision::kBf16, 64, true, 1024, 256, 2.5e14, 1.9e14},
                     {Precision::kFp16, 128, false, 4096, 4, 3.25e14 + 0.5, 2.75e14}};
  p.gpu.attention_source = {SourceKind::kMeasured, "dsplan profile, test"};
  const std::string path = (dir_ / "rt.yaml").string();
  ASSERT_TRUE(WriteHardwareProfile(p, path).ok());
  auto back = LoadHardwareProfile(path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  HardwareProfile b = *back;
  b.file.clear();
  EXPECT_TRUE(b == p);
  EXPECT_EQ(b.gpu.attention, p.gpu.attention);
}

TEST_F(AttentionProfileTest, ReadsUnitsAndRejectsBadRows) {
  const std::string src = "  attention_source: {measured: \"test\"}\n";
  auto ok = LoadHardwareProfile(
      WithGpuLines(src + "  attention:\n    - [bf16, 64, true, 2048, 128, 250 TFLOP/s, 2e14]\n"));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  ASSERT_EQ(ok->gpu.attention.size(), 1u);
  EXPECT_EQ(ok->gpu.attention[0].seq, 2048);
  EXPECT_EQ(ok->gpu.attention[0].batch_heads, 128);
  EXPECT_TRUE(ok->gpu.attention[0].causal);
  EXPECT_DOUBLE_EQ(ok->gpu.attention[0].fwd_flops_per_s, 250e12);

  struct Case {
    std::string lines, expect;
  };
  for (const Case& c : std::vector<Case>{
           {"  attention:\n    - [bf16, 64, true, 2048, 8, 2e14, 2e14]\n",
            "gpu.attention_source"},
           {src + "  attention:\n    - [bf16, 64, true, 2048, 2e14, 2e14]\n", "gpu.attention[0]"},
           {src + "  attention:\n    - [bf16, 64, maybe, 2048, 8, 2e14, 2e14]\n",
            "gpu.attention[0][2]"},
           {src + "  attention:\n    - [bf17, 64, true, 2048, 8, 2e14, 2e14]\n",
            "gpu.attention[0][0]"},
           {src + "  attention:\n    - [bf16, 64, true, 2048, 0, 2e14, 2e14]\n",
            "gpu.attention[0][4]"},
           {src + "  attention:\n    - [bf16, 64, true, 2048, 8, 2 GB/s, 2e14]\n",
            "gpu.attention[0][5]"},
           {src + "  attention:\n    - [bf16, 64, true, 2048, 8, 0, 2e14]\n", "positive"},
           {src + "  attention:\n    - [bf16, 64, true, 2048, 8, 2e14, 2e14]\n"
                  "    - [bf16, 64, true, 2048, 8, 3e14, 3e14]\n",
            "repeats"}}) {
    auto p = LoadHardwareProfile(WithGpuLines(c.lines));
    ASSERT_FALSE(p.ok()) << c.lines;
    EXPECT_EQ(p.status().code(), Status::Code::kInvalidArgument);
    EXPECT_NE(p.status().message().find(c.expect), std::string::npos)
        << c.expect << " in: " << p.status().message();
  }
}

TEST_F(AttentionProfileTest, SourceSummarySaysWhetherTheRuntimeAttentionIsMeasured) {
  HardwareProfile p = base_;
  p.gpu.attention.clear();
  EXPECT_NE(p.SourceSummary().find("not measured (runtime attention"), std::string::npos)
      << p.SourceSummary();
  p.gpu.attention = {{Precision::kBf16, 64, true, 1024, 256, 2.5e14, 1.9e14}};
  p.gpu.attention_source = {SourceKind::kMeasured, "test"};
  const std::string s = p.SourceSummary();
  EXPECT_EQ(s.find("not measured"), std::string::npos) << s;
  const size_t measured = s.find("measured (");
  ASSERT_NE(measured, std::string::npos) << s;
  EXPECT_NE(s.substr(measured, s.find(')', measured) - measured).find("runtime attention"),
            std::string::npos)
      << s;
}

TEST_F(AttentionProfileTest, TheSdpaTableReadsAndWritesLikeTheAttentionTable) {
  HardwareProfile p = base_;
  p.gpu.sdpa = {{Precision::kBf16, 128, true, 1024, 256, 4.46e14, 3.2e14},
                {Precision::kBf16, 128, true, 2048, 128, 5.31e14, 4.2e14}};
  p.gpu.sdpa_source = {SourceKind::kMeasured, "tools/probes/torch_sdpa.py, test"};
  const std::string path = (dir_ / "sdpa.yaml").string();
  ASSERT_TRUE(WriteHardwareProfile(p, path).ok());
  auto back = LoadHardwareProfile(path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->gpu.sdpa, p.gpu.sdpa);
  EXPECT_EQ(back->gpu.sdpa_source, p.gpu.sdpa_source);
  EXPECT_TRUE(back->gpu.attention.empty());

  // Errors name gpu.sdpa's own keys.
  auto no_source =
      LoadHardwareProfile(WithGpuLines("  sdpa:\n    - [bf16, 64, true, 2048, 8, 2e14, 2e14]\n"));
  ASSERT_FALSE(no_source.ok());
  EXPECT_NE(no_source.status().message().find("gpu.sdpa_source"), std::string::npos)
      << no_source.status().message();
  auto bad = LoadHardwareProfile(WithGpuLines(
      "  sdpa_source: {measured: \"t\"}\n  sdpa:\n    - [bf16, 64, true, 2048, 8, -1, 2e14]\n"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("gpu.sdpa[0]"), std::string::npos)
      << bad.status().message();
}

// The components the summary lists under |kind| ("measured", "assumption"): "kind (A, B, C)".
std::vector<std::string> Listed(const std::string& summary, const std::string& kind) {
  std::vector<std::string> out;
  const size_t at = summary.find(kind + " (");
  if (at == std::string::npos) return out;
  const size_t begin = at + kind.size() + 2, end = summary.find(')', begin);
  std::string list = summary.substr(begin, end - begin);
  for (size_t pos = 0; pos <= list.size();) {
    const size_t comma = list.find(", ", pos);
    out.push_back(list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
    if (comma == std::string::npos) break;
    pos = comma + 2;
  }
  return out;
}

TEST_F(AttentionProfileTest, SourceSummaryTakesTheSdpaTablesSourceForAttention) {
  auto has = [](const std::vector<std::string>& v, const char* x) {
    return std::find(v.begin(), v.end(), x) != v.end();
  };
  HardwareProfile p = base_;
  p.gpu.attention_efficiency.source = {SourceKind::kAssumption, "x"};
  p.gpu.sdpa.clear();
  EXPECT_TRUE(has(Listed(p.SourceSummary(), "assumption"), "attention")) << p.SourceSummary();
  p.gpu.sdpa = {{Precision::kBf16, 64, true, 1024, 256, 3e14, 2.4e14}};
  p.gpu.sdpa_source = {SourceKind::kMeasured, "test"};
  const std::string s = p.SourceSummary();
  EXPECT_FALSE(has(Listed(s, "assumption"), "attention")) << s;
  EXPECT_TRUE(has(Listed(s, "measured"), "attention")) << s;
}

}  // namespace
}  // namespace dsplan
