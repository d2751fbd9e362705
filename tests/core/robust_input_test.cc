// Issue 14: every reader refuses hostile input with one bounded line, never a crash, a hang or
// unbounded memory. Each test reproduces one class the fuzzing campaign found.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>

#include "core/hardware_profile.h"
#include "core/hf_config.h"
#include "core/model_catalog.h"
#include "core/model_spec.h"
#include "core/text.h"

namespace dsplan {
namespace {

namespace fs = std::filesystem;
const std::string kData = DSPLAN_TEST_DATA_DIR;

// One line, bounded, no raw control bytes: the rule every message keeps.
void ExpectOneLine(const Status& s) {
  ASSERT_FALSE(s.ok());
  EXPECT_FALSE(s.message().empty());
  EXPECT_LE(s.message().size(), 2000u) << s.message().substr(0, 300);
  for (unsigned char c : s.message()) {
    ASSERT_TRUE(c >= 0x20 && c != 0x7f) << "raw control byte " << int(c) << " in: "
                                        << s.message().substr(0, 300);
  }
}

Result<ModelSpec> FromJson(const std::string& json) {
  auto cfg = HfConfig::Parse(json, "config.json");
  if (!cfg.ok()) return cfg.status();
  return ModelSpecFromHf(*cfg, "test");
}

bool Mentions(const Status& s, const std::string& text) {
  return s.message().find(text) != std::string::npos;
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/dsplan_robust_XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string File(const std::string& name, const std::string& text) const {
    const std::string p = path_ + "/" + name;
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// ---- the shared quoting helper ----

TEST(TextTest, QuoteCutsAndEscapes) {
  EXPECT_EQ(Quote("abc"), "'abc'");
  EXPECT_EQ(Quote("a\nb\tc"), "'a\\nb\\tc'");
  EXPECT_EQ(Quote(std::string("x\xff", 2)), "'x\\xff'");
  EXPECT_EQ(Quote("h\xc3\xa9"), "'h\xc3\xa9'");  // valid UTF-8 stays
  const std::string big(5'000'000, 'k');
  const std::string q = Quote(big);
  EXPECT_LT(q.size(), 120u);
  EXPECT_NE(q.find("(5000000 bytes)"), std::string::npos) << q;
}

TEST(TextTest, OneLineEscapesNewlinesAndCuts) {
  const std::string m = OneLine("first\nsecond" + std::string(10'000, 'x'));
  EXPECT_EQ(m.find('\n'), std::string::npos);
  EXPECT_LE(m.size(), kMaxMessageBytes + 20);
}

// ---- crashes: nesting, numbers, bytes ----

TEST(RobustInputTest, DeeplyNestedJsonIsRefusedNotRecursed) {
  // 100,000 levels crashed a release build through json::dump in the error message.
  const std::string deep = std::string(100'000, '[') + std::string(100'000, ']');
  auto r = HfConfig::Parse(deep, "config.json");
  ExpectOneLine(r.status());
  EXPECT_TRUE(Mentions(r.status(), "nested deeper than")) << r.status().message();
  auto inner = FromJson(R"({"model_type": "gpt2", "n_embd": )" + std::string(5000, '[') +
                        std::string(5000, ']') + "}");
  ExpectOneLine(inner.status());
}

TEST(RobustInputTest, NumberOutsideDoubleRange) {
  auto r = FromJson(R"({"model_type": "gpt2", "n_embd": 1e400})");
  ExpectOneLine(r.status());
  EXPECT_TRUE(Mentions(r.status(), "1e400")) << r.status().message();
  EXPECT_FALSE(Mentions(r.status(), "[json.exception")) << r.status().message();
}

TEST(RobustInputTest, NonUtf8AndControlBytesAreEscaped) {
  auto r = FromJson(std::string("{\"model_type\": \"gp\xfft2\"}"));
  ExpectOneLine(r.status());
  auto v = FromJson(std::string("{\"model_type\": \"gpt2\", \"n_embd\": \"\xc3\x28\"}"));
  ExpectOneLine(v.status());
  auto nl = FromJson(R"({"model_type": "gpt2\nsecond line"})");
  ExpectOneLine(nl.status());
  EXPECT_TRUE(Mentions(nl.status(), "gpt2\\nsecond")) << nl.status().message();
}

TEST(RobustInputTest, LongValuesAreCutInMessages) {
  std::string list = "[";
  for (int i = 0; i < 100000; ++i) list += i ? ",1" : "1";
  auto r = FromJson(R"({"model_type": "gpt2", "n_embd": )" + list + "]}");
  ExpectOneLine(r.status());
  auto t = FromJson(R"({"model_type": ")" + std::string(1'000'000, 'x') + R"("})");
  ExpectOneLine(t.status());
}

// ---- overflow and unbounded sizes ----

TEST(RobustInputTest, HugeSizesAreRefusedNamingTheKey) {
  auto bloom = FromJson(R"({"model_type": "bloom", "hidden_size": 4000000000000, "n_head": 8})");
  ExpectOneLine(bloom.status());
  EXPECT_TRUE(Mentions(bloom.status(), "hidden_size")) << bloom.status().message();
  auto layers = FromJson(R"({"model_type": "gpt2", "n_layer": 1e7})");
  ExpectOneLine(layers.status());
  EXPECT_TRUE(Mentions(layers.status(), "num_hidden_layers")) << layers.status().message();
  auto gpt2 = FromJson(R"({"model_type": "gpt2", "n_embd": 4611686018427387904})");
  ExpectOneLine(gpt2.status());
  EXPECT_TRUE(Mentions(gpt2.status(), "n_embd")) << gpt2.status().message();
  // Each size in range, their product not: a parameter count that would not fit 64 bits.
  auto moe = FromJson(R"({"model_type": "mixtral", "hidden_size": 262144,
      "intermediate_size": 1048576, "num_local_experts": 4096, "num_hidden_layers": 4096,
      "num_attention_heads": 16384, "vocab_size": 16777216})");
  ExpectOneLine(moe.status());
  EXPECT_TRUE(Mentions(moe.status(), "parameters")) << moe.status().message();
  auto rot = FromJson(R"({"model_type": "gpt_neox", "rotary_pct": 1e300})");
  ExpectOneLine(rot.status());
  EXPECT_TRUE(Mentions(rot.status(), "rotary_pct")) << rot.status().message();
}

TEST(RobustInputTest, RealModelsStillRead) {
  for (const char* m : {"llama-2-70b", "t5-3b", "bloom-7b1", "gpt2-xl"}) {
    auto s = LoadModel(m, kData);
    EXPECT_TRUE(s.ok()) << m << ": " << s.status().message();
  }
}

// ---- catalog YAML ----

TEST(RobustInputTest, CatalogAliasBombIsBounded) {
  std::string y = "config:\n  model_type: gpt2\n  a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n";
  const char* names = "abcdefghi";
  for (int i = 1; i < 9; ++i) {
    y += fmt::format("  {}: &{} [", names[i], names[i]);
    for (int k = 0; k < 9; ++k) y += fmt::format("{}*{}", k ? "," : "", names[i - 1]);
    y += "]\n";
  }
  auto r = ParseCatalogConfig(y, "bomb.yaml");  // 9^9 = 387M strings if expanded
  ExpectOneLine(r.status());
  EXPECT_TRUE(Mentions(r.status(), "aliases")) << r.status().message();
}

TEST(RobustInputTest, CatalogNonScalarKey) {
  auto r = ParseCatalogConfig("config:\n  model_type: gpt2\n  [a, b]: 1\n", "k.yaml");
  ExpectOneLine(r.status());
  auto top = ParseCatalogConfig("{a: 1}: 2\nconfig:\n  model_type: gpt2\n", "k.yaml");
  ExpectOneLine(top.status());
}

TEST(RobustInputTest, CatalogNumbersAreStrict) {
  // .nan/inf/1e400 were NaN and infinity in the model; now strings (a type error) or refused.
  auto nan = ParseCatalogConfig("config:\n  model_type: gpt2\n  resid_pdrop: nan\n", "n.yaml");
  ASSERT_TRUE(nan.ok()) << nan.status().message();
  ExpectOneLine(ModelSpecFromHf(*nan, "n").status());
  auto big = ParseCatalogConfig("config:\n  model_type: gpt2\n  n_embd: 1e400\n", "b.yaml");
  ExpectOneLine(big.status());
}

// ---- profile YAML ----

TEST(RobustInputTest, ProfileNonScalarKeyAndHugeNodes) {
  auto k = ParseHardwareProfile("name: x\ndescription: y\n[a, b]: 1\n", "p.yaml");
  ExpectOneLine(k.status());
  auto g = ParseHardwareProfile("name: x\ndescription: y\ngpus_per_node: 99999999999\n",
                                "p.yaml");
  ExpectOneLine(g.status());
  EXPECT_TRUE(Mentions(g.status(), "gpus_per_node")) << g.status().message();
  auto u = ParseHardwareProfile("name: \"h\xff\"\ndescription: y\n", "p.yaml");
  ExpectOneLine(u.status());
  auto deep = ParseHardwareProfile("name: " + std::string(5000, '[') + std::string(5000, ']'),
                                   "p.yaml");
  ExpectOneLine(deep.status());
}

TEST(RobustInputTest, ShippedProfilesStillRead) {
  for (const char* p : {"h200-sxm", "a100-80gb", "h200-measured", "h100-measured"}) {
    auto r = FindHardwareProfile(p, kData);
    EXPECT_TRUE(r.ok()) << p << ": " << r.status().message();
  }
}

// ---- bounded file reads ----

TEST(RobustInputTest, DeviceFilesAndFoldersAreNotRead) {
  auto z = ReadInputFile("/dev/zero", "model config");
  ExpectOneLine(z.status());
  EXPECT_TRUE(Mentions(z.status(), "not a regular file")) << z.status().message();
  auto hf = HfConfig::Load("/dev/zero");
  ExpectOneLine(hf.status());
  auto prof = LoadHardwareProfile("/dev/zero");
  ExpectOneLine(prof.status());
  TempDir d;
  auto dir = ReadInputFile(d.path(), "DeepSpeed config");
  ExpectOneLine(dir.status());
  EXPECT_TRUE(Mentions(dir.status(), "is a folder")) << dir.status().message();
  const std::string big = d.File("big.json", std::string(1000, ' '));
  auto capped = ReadInputFile(big, "model config", 100);
  ExpectOneLine(capped.status());
  EXPECT_TRUE(Mentions(capped.status(), "at most 100 bytes")) << capped.status().message();
  EXPECT_EQ(ReadInputFile(d.path() + "/missing", "x").status().code(), Status::Code::kNotFound);
}

TEST(RobustInputTest, WriteFailuresSayWhy) {
  TempDir d;
  auto missing = WriteTextFile(d.path() + "/no/such/folder/out.md", "x", "the report");
  ExpectOneLine(missing);
  EXPECT_TRUE(Mentions(missing, "folder does not exist")) << missing.message();
  auto folder = WriteTextFile(d.path(), "x", "the report");
  ExpectOneLine(folder);
  EXPECT_TRUE(Mentions(folder, "is a folder")) << folder.message();
  if (geteuid() != 0) {  // root writes anywhere
    fs::create_directory(d.path() + "/ro");
    chmod((d.path() + "/ro").c_str(), 0500);
    auto ro = WriteTextFile(d.path() + "/ro/out.md", "x", "the report");
    ExpectOneLine(ro);
    EXPECT_TRUE(Mentions(ro, "permission denied")) << ro.message();
  }
  EXPECT_TRUE(WriteTextFile(d.path() + "/ok.md", "x", "the report").ok());
}

// ---- "did you mean" on huge names ----

TEST(RobustInputTest, SuggestionsOnHugeNamesAreInstant) {
  const std::string huge(5'000'000, 'l');
  auto r = LoadModel(huge, kData);  // was minutes of edit distance
  ExpectOneLine(r.status());
  EXPECT_EQ(r.status().code(), Status::Code::kNotFound);
}

}  // namespace
}  // namespace dsplan

namespace dsplan {
namespace {

TEST(TextHelpers, EditDistanceCountsEditsAndCanIgnoreCase) {
  EXPECT_EQ(EditDistance("t5-3bb", "t5-3b"), 1u);
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3u);
  EXPECT_EQ(EditDistance("", "abc"), 3u);
  EXPECT_EQ(EditDistance("GPT2-XL", "gpt2-xl"), 7u - 2u);  // G,P,T,X,L differ; 2, - same
  EXPECT_EQ(EditDistance("GPT2-XL", "gpt2-xl", /*ignore_case=*/true), 0u);
}

TEST(TextHelpers, MedianOfOddAndEvenCounts) {
  EXPECT_DOUBLE_EQ(Median({}), 0);
  EXPECT_DOUBLE_EQ(Median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(Median({4, 1, 3, 2}), 2.5);
}

}  // namespace
}  // namespace dsplan
