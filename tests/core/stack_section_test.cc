// The profile's stack: section (the PyTorch + DeepSpeed stack's measured costs) and the fast
// GEMM row scanner: round trips, one-line errors naming file, line and key, and the same result
// whether the rows are scanned or read by yaml-cpp.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>

#include <gtest/gtest.h>

#include "core/hardware_profile.h"

namespace dsplan {
namespace {

const std::string kData = DSPLAN_TEST_DATA_DIR;

std::string Shipped(const std::string& name) {
  std::ifstream in(kData + "/profiles/" + name + ".yaml");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void Replace(std::string* text, const std::string& from, const std::string& to) {
  const size_t at = text->find(from);
  ASSERT_NE(at, std::string::npos) << from;
  text->replace(at, from.size(), to);
}

// A stack section as `dsplan profile --stack` writes it (tests/fixtures/profiles/), with two
// GEMM rows.
std::string StackSection() {
  std::ifstream in(kData + "/tests/fixtures/profiles/stack-section-gpt2.yaml");
  std::stringstream text;
  text << in.rdbuf();
  return text.str() + R"(  gemm_source: {measured: "torch_gemm.py, test"}
  gemm:
    - [bf16, 4096, 1024, 1024, 500e12, nt]
    - [bf16, 4096, 1024, 1024, 300e12, nt, 8]
)";
}

std::string WithStack() { return Shipped("h200-sxm") + StackSection(); }

// Written and read back: the same profile.
void ExpectRoundTrip(const HardwareProfile& p, const std::string& name) {
  const std::string path = testing::TempDir() + "/" + name;
  ASSERT_TRUE(WriteHardwareProfile(p, path).ok());
  auto back = LoadHardwareProfile(path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  back->file = p.file;
  EXPECT_TRUE(*back == p);
  std::remove(path.c_str());
}

TEST(StackSectionTest, ReadsWritesAndSummarises) {
  auto p = ParseHardwareProfile(WithStack(), "with-stack.yaml");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const StackProfile& s = p->stack;
  EXPECT_TRUE(s.present);
  EXPECT_FALSE(s.zero3);
  EXPECT_EQ(s.source.kind, SourceKind::kMeasured);
  EXPECT_EQ(s.versions.torch, "9.9.0");
  EXPECT_EQ(s.versions.deepspeed, "");
  EXPECT_DOUBLE_EQ(s.reference_stream_bytes_per_s, 3e12);
  EXPECT_DOUBLE_EQ(s.kernel_bwd_bytes_per_s[4], 1.4e12);  // norm
  EXPECT_DOUBLE_EQ(s.op_fwd_s[0], 40e-6);                 // gemm, "40us"
  ASSERT_EQ(s.blocks.size(), 1u);
  EXPECT_FALSE(s.blocks[0].encoder);
  EXPECT_EQ(s.blocks[0].modules, 13);
  ASSERT_EQ(s.gemm.size(), 2u);
  EXPECT_EQ(s.gemm[1].batch, 8);
  EXPECT_EQ(s.gemm_source.detail, "torch_gemm.py, test");
  // The summary says what the stack costs are, and that ZeRO-3's hooks are the built-in ones.
  const std::string sum = p->SourceSummary();
  EXPECT_NE(sum.find("stack costs: measured on Test GPU with PyTorch 9.9.0 on 2027-01-01 "
                     "(ZeRO-3 hooks not measured: built-in"),
            std::string::npos)
      << sum;
  EXPECT_NE(sum.find("GEMMs measured through PyTorch"), std::string::npos) << sum;

  ExpectRoundTrip(*p, "dsplan-stack-section.yaml");
}

// DeepSpeed's optimizer-step costs (written when --stack measured DeepSpeed): read, written back,
// and no longer listed as built-in in the summary (the cost model applies them:
// tests/runtime/stack_probe_test.cc).
TEST(StackSectionTest, OptimizerStepCostsAreReadWrittenAndApplied) {
  std::string text = WithStack();
  Replace(&text, "  blocks:\n",
          "  optimizer_step: {zero12_s: 2ms, zero12_per_param_s: 40us, zero3_s: 3e-3, "
          "zero3_per_param_s: 70e-6}\n  blocks:\n");
  auto p = ParseHardwareProfile(text, "with-step.yaml");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const StackProfile& s = p->stack;
  EXPECT_TRUE(s.optimizer_step);
  EXPECT_DOUBLE_EQ(s.z12_step_s, 2e-3);
  EXPECT_DOUBLE_EQ(s.z12_step_per_param_s, 40e-6);
  EXPECT_DOUBLE_EQ(s.z3_step_s, 3e-3);
  EXPECT_DOUBLE_EQ(s.z3_step_per_param_s, 70e-6);
  const std::string sum = p->SourceSummary();
  EXPECT_EQ(sum.find("optimizer step not measured"), std::string::npos) << sum;
  EXPECT_NE(sum.find("stage 0's BF16_Optimizer step: built-in"), std::string::npos) << sum;
  ExpectRoundTrip(*p, "dsplan-stack-step.yaml");
  // Without the section the summary says the built-in costs apply.
  auto plain = ParseHardwareProfile(WithStack(), "with-stack.yaml");
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->stack.optimizer_step);
  EXPECT_NE(plain->SourceSummary().find("ZeRO-1/2/3 optimizer step not measured: built-in"),
            std::string::npos);
  // A misspelt key is one line naming it and what is valid.
  std::string bad = text;
  Replace(&bad, "zero3_s: 3e-3", "zero3_sec: 3e-3");
  auto b = ParseHardwareProfile(bad, "bad-step.yaml");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("stack.optimizer_step.zero3_sec: unknown key (valid here: "
                                      "zero12_s, zero12_per_param_s, zero3_s, zero3_per_param_s)"),
            std::string::npos)
      << b.status().message();
}

// Stage 0's BF16_Optimizer step (stack.bf16_optimizer_step, written when --stack measured it):
// read, written back, no longer listed as built-in; its four keys come together.
TEST(StackSectionTest, Bf16OptimizerStepCostsAreReadAndWritten) {
  std::string text = WithStack();
  Replace(&text, "  blocks:\n",
          "  bf16_optimizer_step: {step_s: 2.5ms, step_per_param_s: 45us, clip_step_s: 3e-3, "
          "clip_step_per_param_s: 56e-6}\n  blocks:\n");
  auto p = ParseHardwareProfile(text, "with-bf16.yaml");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const StackProfile& s = p->stack;
  EXPECT_TRUE(s.bf16_step);
  EXPECT_DOUBLE_EQ(s.bf16_step_s, 2.5e-3);
  EXPECT_DOUBLE_EQ(s.bf16_step_per_param_s, 45e-6);
  EXPECT_DOUBLE_EQ(s.bf16_clip_step_s, 3e-3);
  EXPECT_DOUBLE_EQ(s.bf16_clip_step_per_param_s, 56e-6);
  const std::string sum = p->SourceSummary();
  EXPECT_EQ(sum.find("BF16_Optimizer step: built-in"), std::string::npos) << sum;
  ExpectRoundTrip(*p, "dsplan-stack-bf16.yaml");
  // Without it the summary says the built-in step applies.
  auto plain = ParseHardwareProfile(WithStack(), "with-stack.yaml");
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->stack.bf16_step);
  EXPECT_NE(plain->SourceSummary().find("stage 0's BF16_Optimizer step: built-in"),
            std::string::npos);
  // A key missing is one line naming it.
  std::string missing = text;
  Replace(&missing, ", clip_step_per_param_s: 56e-6", "");
  auto m = ParseHardwareProfile(missing, "missing-bf16.yaml");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("stack.bf16_optimizer_step"), std::string::npos)
      << m.status().message();
  EXPECT_NE(m.status().message().find("clip_step_per_param_s"), std::string::npos)
      << m.status().message();
  // A negative time is refused.
  std::string negative = text;
  Replace(&negative, "step_s: 2.5ms", "step_s: -2.5ms");
  auto n = ParseHardwareProfile(negative, "negative-bf16.yaml");
  ASSERT_FALSE(n.ok());
  EXPECT_NE(n.status().message().find("stack.bf16_optimizer_step.step_s"), std::string::npos)
      << n.status().message();
}

// The offloaded gradient's blocking cast copy (stack.cast_copy_d2h, [bytes, seconds] points;
// written when --stack ran stack_costs.py's cast_copy): read, written back, summarised as measured
// (the built-in one said otherwise), and bad points are one clear error naming the key.
TEST(StackSectionTest, CastCopyPointsAreReadWrittenAndChecked) {
  std::string text = WithStack();
  Replace(&text, "  blocks:\n",
          "  cast_copy_d2h: [[32768, 41us], [1MiB, 0.18ms], [16MiB, 1.8ms]]\n  blocks:\n");
  auto a = ParseHardwareProfile(text, "cast.yaml");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_EQ(a->stack.cast_copy_d2h.size(), 3u);
  EXPECT_DOUBLE_EQ(a->stack.cast_copy_d2h[0].first, 32768);
  EXPECT_DOUBLE_EQ(a->stack.cast_copy_d2h[0].second, 41e-6);
  EXPECT_DOUBLE_EQ(a->stack.cast_copy_d2h[2].first, 16.0 * (1 << 20));
  EXPECT_DOUBLE_EQ(a->stack.cast_copy_d2h[2].second, 1.8e-3);
  EXPECT_EQ(a->SourceSummary().find("blocking cast copy: built-in"), std::string::npos)
      << a->SourceSummary();
  // Those points stop at 16 MiB: the summary says the fresh-mapping regime was not measured.
  EXPECT_NE(a->SourceSummary().find("blocking cast copy: measured below 32 MiB only"),
            std::string::npos)
      << a->SourceSummary();
  ExpectRoundTrip(*a, "dsplan-stack-cast.yaml");
  std::string both = WithStack();
  Replace(&both, "  blocks:\n",
          "  cast_copy_d2h: [[32768, 41us], [16MiB, 1.8ms], [32MiB, 20ms]]\n  blocks:\n");
  auto b = ParseHardwareProfile(both, "both.yaml");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->SourceSummary().find("blocking cast copy"), std::string::npos) << b->SourceSummary();
  auto plain = ParseHardwareProfile(WithStack(), "plain.yaml");
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_NE(plain->SourceSummary().find("blocking cast copy: built-in"), std::string::npos)
      << plain->SourceSummary();
  const struct {
    const char* value;
    const char* says;
  } bad[] = {
      {"[[32768, 41us]]", "stack.cast_copy_d2h: expected a list of 2 to 64 [bytes, seconds]"},
      {"[[32768, 41us], [16384, 30us]]", "stack.cast_copy_d2h[1]: bytes must be larger"},
      {"[[32768, 41us], [65536, -3us]]", "stack.cast_copy_d2h[1]"},
      {"[[32768, 41us], [65536]]", "stack.cast_copy_d2h[1]"},
      {"{a: 1}", "stack.cast_copy_d2h: expected a list"},
  };
  for (const auto& b : bad) {
    std::string t = WithStack();
    Replace(&t, "  blocks:\n", std::string("  cast_copy_d2h: ") + b.value + "\n  blocks:\n");
    auto r = ParseHardwareProfile(t, "bad-cast.yaml");
    ASSERT_FALSE(r.ok()) << b.value;
    EXPECT_NE(r.status().message().find(b.says), std::string::npos)
        << b.value << ": " << r.status().message();
  }
}

// ZeRO-3's cost per gather call and per reduce-bucket flush (stack.zero3.per_gather_call_s,
// per_bucket_flush_s; written when --stack ran stack_costs.py's zero3_calls): read, written back,
// with or without the hook costs beside them, and summarised as measured; each may be absent.
TEST(StackSectionTest, GatherCallAndBucketFlushCostsAreReadAndWritten) {
  // Alone (the hook fit not measured) and beside the hook costs.
  std::string alone = WithStack();
  Replace(&alone, "  blocks:\n",
          "  zero3: {per_gather_call_s: 80us, per_bucket_flush_s: 4.5e-4}\n  blocks:\n");
  auto a = ParseHardwareProfile(alone, "alone.yaml");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_FALSE(a->stack.zero3);
  ASSERT_TRUE(a->stack.z3_per_gather_call_s.has_value());
  ASSERT_TRUE(a->stack.z3_per_bucket_flush_s.has_value());
  EXPECT_DOUBLE_EQ(*a->stack.z3_per_gather_call_s, 80e-6);
  EXPECT_DOUBLE_EQ(*a->stack.z3_per_bucket_flush_s, 4.5e-4);
  std::string sum = a->SourceSummary();
  EXPECT_NE(sum.find("ZeRO-3 hooks not measured: built-in"), std::string::npos) << sum;
  EXPECT_NE(sum.find("ZeRO-3 cost per gather call and per reduce-bucket flush: measured"),
            std::string::npos)
      << sum;
  ExpectRoundTrip(*a, "dsplan-stack-calls-alone.yaml");

  std::string both = WithStack();
  Replace(&both, "  blocks:\n",
          "  zero3: {fwd_per_module_s: 190us, fwd_per_param_s: 120us, bwd_per_module_s: 280us, "
          "bwd_per_param_s: 190us, per_bucket_flush_s: 0.4ms}\n  blocks:\n");
  auto b = ParseHardwareProfile(both, "both.yaml");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_TRUE(b->stack.zero3);
  EXPECT_DOUBLE_EQ(b->stack.z3_bwd_per_param_s, 190e-6);
  EXPECT_FALSE(b->stack.z3_per_gather_call_s.has_value());
  ASSERT_TRUE(b->stack.z3_per_bucket_flush_s.has_value());
  EXPECT_DOUBLE_EQ(*b->stack.z3_per_bucket_flush_s, 0.4e-3);
  sum = b->SourceSummary();
  EXPECT_EQ(sum.find("ZeRO-3 hooks not measured"), std::string::npos) << sum;
  EXPECT_NE(sum.find("ZeRO-3 cost per reduce-bucket flush: measured; per gather call: built-in"),
            std::string::npos)
      << sum;
  ExpectRoundTrip(*b, "dsplan-stack-calls-both.yaml");
  // A written profile holds the keys under stack.zero3.
  const std::string path = testing::TempDir() + "/dsplan-stack-calls-written.yaml";
  ASSERT_TRUE(WriteHardwareProfile(*a, path).ok());
  std::ifstream in(path);
  std::stringstream written;
  written << in.rdbuf();
  EXPECT_NE(written.str().find("  kernel_s: [9e-06, 7e-06]\n  zero3:\n    per_gather_call_s: "),
            std::string::npos)
      << written.str();
  EXPECT_NE(written.str().find("\n    per_bucket_flush_s: 0.00045\n  blocks:\n"),
            std::string::npos)
      << written.str();
  std::remove(path.c_str());

  // Without them the summary names the built-in ones.
  auto plain = ParseHardwareProfile(WithStack(), "with-stack.yaml");
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->stack.z3_per_gather_call_s.has_value());
  EXPECT_NE(plain->SourceSummary().find(
                "ZeRO-3 cost per gather call and per reduce-bucket flush: built-in"),
            std::string::npos)
      << plain->SourceSummary();

  // Bad values and keys: one line naming the file, the line and the key.
  const std::pair<const char*, const char*> bad[] = {
      {"per_gather_call_s: 80us", "per_gather_call_s: 0"},
      {"per_bucket_flush_s: 4.5e-4", "per_bucket_flush_s: -4.5e-4"},
      {"per_gather_call_s: 80us", "per_gather_call_s: 80 GB/s"},
      {"per_gather_call_s: 80us", "per_gather_cal_s: 80us"},
      {"zero3: {per_gather_call_s: 80us, per_bucket_flush_s: 4.5e-4}", "zero3: {}"},
      {"per_gather_call_s: 80us", "fwd_per_module_s: 190us"},
  };
  const char* messages[] = {
      "stack.zero3.per_gather_call_s: must be positive",
      "stack.zero3.per_bucket_flush_s: '-4.5e-4' is negative",
      "stack.zero3.per_gather_call_s: '80 GB/s' has the wrong unit for this key",
      "stack.zero3.per_gather_cal_s: unknown key (valid here: fwd_per_module_s, fwd_per_param_s, "
      "bwd_per_module_s, bwd_per_param_s, per_gather_call_s, per_bucket_flush_s)",
      "stack.zero3: empty (expected the hook costs",
      "stack.zero3.fwd_per_param_s: missing (required)",
  };
  for (size_t i = 0; i < std::size(bad); ++i) {
    std::string text = alone;
    Replace(&text, bad[i].first, bad[i].second);
    auto p = ParseHardwareProfile(text, "alone.yaml");
    ASSERT_FALSE(p.ok()) << bad[i].second;
    const std::string m = p.status().message();
    EXPECT_EQ(m.rfind("alone.yaml", 0), 0u) << m;
    EXPECT_NE(m.find(messages[i]), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

TEST(StackSectionTest, WithoutTheSectionTheSummaryNamesTheBuiltInCosts) {
  // h200-measured ships a stack section (tools/dev/h200_stack_section.sh): its summary says
  // measured; without the section the same profile names the built-in costs.
  auto p = FindHardwareProfile("h200-measured", kData);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->stack.present);
  // 3264 rows measured on an H200 and 1158 derived from h100-measured above them (session 38).
  EXPECT_EQ(p->stack.gemm.size(), 3264u + 1158u);
  EXPECT_NE(p->SourceSummary().find("; stack costs: measured on NVIDIA H200 with PyTorch "
                                    "2.11.0+cu130 / DeepSpeed 0.14.5 on 2026-12-03"),
            std::string::npos)
      << p->SourceSummary();
  p->stack = StackProfile{};
  const std::string sum = p->SourceSummary();
  EXPECT_NE(sum.find("; stack costs: built-in, measured on H200 with PyTorch 2.11 / DeepSpeed "
                     "0.14.5 on 2026-12-03"),
            std::string::npos)
      << sum;
}

// Each broken section is one line naming the file, the line and the key, and what is valid.
TEST(StackSectionTest, BadSectionsAreOneClearLine) {
  struct Case {
    const char* from;
    const char* to;
    const char* message;
  };
  const Case cases[] = {
      {"    log_softmax: [1.8e12, 2.4e12]\n", "",
       "stack.kernels.log_softmax: missing (required)"},
      {"    stream: [3e12, 3e12]", "    strem: [3e12, 3e12]",
       "stack.kernels.strem: unknown key (valid here: stream, cast_up, cast_down, reduce, norm, "
       "activation, dropout, softmax, log_softmax)"},
      {"    norm: [1.9e12, 1.4e12]", "    norm: [1.9e12, 0]",
       "stack.kernels.norm: the forward and backward rates must be positive"},
      {"    gemm: [40us, 150us]", "    gemm: [40us, 150 GB/s]",
       "stack.ops.gemm[1]: '150 GB/s' has the wrong unit for this key"},
      {"    gemm: [40us, 150us]", "    gemm: [40us]",
       "stack.ops.gemm: expected a list [forward, backward]"},
      {"[gpt2, decoder,", "[gpt2, decodr,",
       "stack.blocks[0][1]: 'decodr' is not a block kind (valid: encoder, decoder)"},
      {"  gemm_source: {measured: \"torch_gemm.py, test\"}\n", "",
       "stack.gemm_source: missing: a GEMM table needs its source"},
      {"    - [bf16, 4096, 1024, 1024, 300e12, nt, 8]", "    - [bf16, 4096, 1024, 1024, 300e12, nt, 0]",
       "with-stack.yaml:124: stack.gemm[1][6]: must be at least 1, got 0"},
      {"  versions: {torch: \"9.9.0\",", "  versions: {torc: \"9.9.0\",",
       "stack.versions.torc: unknown key (valid here: torch, cuda, transformers, deepspeed, "
       "python)"},
      {"  measured: \"tools/probes", "  measurd: \"tools/probes", "stack.measurd: unknown key"},
      {"  reference_stream_bytes_per_s: 3 TB/s", "  reference_stream_bytes_per_s: 0",
       "stack.reference_stream_bytes_per_s: must be positive"},
  };
  for (const Case& c : cases) {
    std::string text = WithStack();
    Replace(&text, c.from, c.to);
    auto p = ParseHardwareProfile(text, "with-stack.yaml");
    ASSERT_FALSE(p.ok()) << c.to;
    const std::string m = p.status().message();
    EXPECT_EQ(m.rfind("with-stack.yaml", 0), 0u) << m;
    EXPECT_NE(m.find(c.message), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

// The scanner and yaml-cpp read the same rows: h200-measured's 6,528 rows as written, and with
// every dtype quoted (which the scanner leaves to yaml-cpp).
TEST(StackSectionTest, ScannedAndYamlCppRowsAgree) {
  // h200-measured without its own stack section, then the test's.
  std::string shipped = Shipped("h200-measured");
  shipped.resize(shipped.find("\nstack:") + 1);
  const std::string text = shipped + StackSection();
  std::string quoted = text;
  for (size_t pos = 0; (pos = quoted.find("- [bf16,", pos)) != std::string::npos; pos += 10) {
    quoted.replace(pos, 8, "- [\"bf16\",");
  }
  for (size_t pos = 0; (pos = quoted.find("- [fp16,", pos)) != std::string::npos; pos += 10) {
    quoted.replace(pos, 8, "- [\"fp16\",");
  }
  ASSERT_NE(quoted, text);
  auto fast = ParseHardwareProfile(text, "a.yaml");
  auto slow = ParseHardwareProfile(quoted, "a.yaml");
  ASSERT_TRUE(fast.ok()) << fast.status().ToString();
  ASSERT_TRUE(slow.ok()) << slow.status().ToString();
  EXPECT_GT(fast->gpu.gemm.size(), 6000u);
  EXPECT_EQ(fast->stack.gemm.size(), 2u);
  EXPECT_TRUE(*fast == *slow);
  // The same error, at the same line, either way.
  std::string bad = text, bad_quoted = quoted;
  Replace(&bad, "- [bf16, 256, 3072, 1024, 125203102881696.95, nt]",
          "- [bf16, 256, 3072, 1024, 125203102881696.95, nx]");
  Replace(&bad_quoted, "- [\"bf16\", 256, 3072, 1024, 125203102881696.95, nt]",
          "- [\"bf16\", 256, 3072, 1024, 125203102881696.95, nx]");
  auto e1 = ParseHardwareProfile(bad, "a.yaml");
  auto e2 = ParseHardwareProfile(bad_quoted, "a.yaml");
  ASSERT_FALSE(e1.ok());
  ASSERT_FALSE(e2.ok());
  EXPECT_EQ(e1.status().message(), e2.status().message());
  EXPECT_NE(e1.status().message().find("a.yaml:22: gpu.gemm[1][5]: unknown GEMM layout 'nx'"),
            std::string::npos)
      << e1.status().message();
}

// What the scanner must not take for a table: a "gemm:" key inside another section, or rows it
// cannot read exactly, leave the document to yaml-cpp (the same errors as before).
TEST(StackSectionTest, UnusualTablesAreLeftToYamlCpp) {
  std::string text = Shipped("h200-measured");
  std::string host = text;
  Replace(&host, "host:\n", "host:\n  gemm:\n    - [bf16, 1, 2, 3, 4, nt]\n");
  auto h = ParseHardwareProfile(host, "h.yaml");
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("host.gemm: unknown key"), std::string::npos)
      << h.status().message();
  std::string multi = text;
  Replace(&multi, "    - [bf16, 256, 3072, 1024, 125203102881696.95, nt]",
          "    - [bf16, 256, 3072,\n       1024, 125203102881696.95, nt]");
  auto m = ParseHardwareProfile(multi, "m.yaml");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  auto plain = ParseHardwareProfile(text, "m.yaml");
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(m->gpu.gemm == plain->gpu.gemm);
  std::string nulls = text;
  Replace(&nulls, "    - [bf16, 256, 3072, 1024, 125203102881696.95, nt]",
          "    - [bf16, ~, 3072, 1024, 125203102881696.95, nt]");
  auto n = ParseHardwareProfile(nulls, "n.yaml");
  ASSERT_FALSE(n.ok());
  EXPECT_NE(n.status().message().find("n.yaml:22: gpu.gemm[1][1]: expected an integer"),
            std::string::npos)
      << n.status().message();
}

}  // namespace
}  // namespace dsplan

namespace dsplan {
namespace {

// The optimizer step's kernel rates (stack.optimizer_kernels, written when --stack measured
// them): each key on its own, read, written back, summarised as measured; a bad value or an
// empty section is one line naming the key.
TEST(StackSectionTest, OptimizerKernelRatesAreReadWrittenAndChecked) {
  std::string text = WithStack();
  Replace(&text, "  blocks:\n",
          "  optimizer_kernels: {fp64_cast: 1.8e12, step_flat: 3.02e12, torch_adam: 2.72e12}\n"
          "  blocks:\n");
  auto p = ParseHardwareProfile(text, "with-kernels.yaml");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const StackProfile& s = p->stack;
  EXPECT_TRUE(s.optimizer_kernels);
  EXPECT_DOUBLE_EQ(s.fp64_cast_bytes_per_s, 1.8e12);
  EXPECT_DOUBLE_EQ(s.step_flat_bytes_per_s, 3.02e12);
  EXPECT_DOUBLE_EQ(s.torch_adam_bytes_per_s, 2.72e12);
  EXPECT_EQ(s.fp64_norm_bytes_per_s, 0);  // not measured
  EXPECT_EQ(s.fused_adam_bytes_per_s, 0);
  EXPECT_EQ(p->SourceSummary().find("fp64 norm kernels: built-in"), std::string::npos);
  ExpectRoundTrip(*p, "dsplan-stack-kernels.yaml");
  auto plain = ParseHardwareProfile(WithStack(), "with-stack.yaml");
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->stack.optimizer_kernels);
  EXPECT_NE(plain->SourceSummary().find("optimizer step's fp64 norm kernels: built-in"),
            std::string::npos);
  for (const auto& [from, to, key] :
       {std::tuple<std::string, std::string, std::string>{"torch_adam: 2.72e12", "torch_adam: -1",
                                                          "stack.optimizer_kernels.torch_adam"},
        {"step_flat: 3.02e12", "step_flat: 0", "stack.optimizer_kernels.step_flat"},
        {"fp64_cast: 1.8e12", "fp64_castx: 1.8e12", "fp64_castx"}}) {
    std::string bad = text;
    Replace(&bad, from, to);
    auto b = ParseHardwareProfile(bad, "bad-kernels.yaml");
    ASSERT_FALSE(b.ok()) << from;
    EXPECT_NE(b.status().message().find(key), std::string::npos) << b.status().message();
  }
  std::string empty = WithStack();
  Replace(&empty, "  blocks:\n", "  optimizer_kernels: {}\n  blocks:\n");
  auto e = ParseHardwareProfile(empty, "empty-kernels.yaml");
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("stack.optimizer_kernels"), std::string::npos)
      << e.status().message();
}

}  // namespace
}  // namespace dsplan
