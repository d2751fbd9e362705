// `dsplan profile --stack` without a GPU: the conversion of tools/probes/stack_costs.py's and
// torch_gemm.py's real outputs (docs/validation/stack/, measured on the H200 machine) into the
// profile's stack section, and what happens when python3, torch or a GPU is missing.
#include <sys/stat.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/hardware_profile.h"
#include "runtime/profiler/stack_probe.h"
#include "simulator/stack_costs.h"

namespace dsplan {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kData = DSPLAN_TEST_DATA_DIR;
const std::string kStack = kData + "/docs/validation/stack/";
// h200-measured's streaming rate (hbm x memory-bound efficiency), as in stack_costs.cc.
constexpr double kH200Stream = 4.2299e12 * 0.99243;

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The document the compiled-in costs were transcribed from: kernel-rates.json's kernels,
// stack-costs-call2.json's op kinds, families and ZeRO-3 fit, and call 3's BERT and Mixtral.
json MergedH200Document() {
  json doc = json::parse(Read(kStack + "stack-costs-call2.json"));
  doc["kernels"] = json::parse(Read(kStack + "kernel-rates.json"))["kernels"];
  // log_softmax measured again on 2026-12-06 at the shape training runs it, 16,384 rows of
  // 50,304 (the 2026-12-03 run timed 1,334 rows): the built-in costs carry that one.
  doc["kernels"]["log_softmax_vocab"] =
      json::parse(Read(kStack + "stack-kernels-h200-1206.json"))["kernels"]["log_softmax_vocab"];
  const json call3 = json::parse(Read(kStack + "stack-costs-call3.json"));
  doc["families"]["bert"] = call3["families"]["bert"];
  doc["families"]["mixtral"] = call3["families"]["mixtral"];
  return doc;
}

// A real run on the H200 machine of op_kinds, kernels and zero3_calls only (2026-12-04,
// docs/validation/stack/stack-costs-zero3-calls-h200.json, trimmed).
json ZeroCallsH200Document() {
  return json::parse(Read(kData + "/tests/fixtures/probes/stack-costs-zero3-calls-h200.json"));
}

// The BF16_Optimizer step's host grid measured on the H200 (2026-12-04,
// docs/validation/stack/bf16-optimizer-parts-h200.json, in stack_costs.py's bf16_step rows).
json Bf16StepH200Section() {
  return json::parse(Read(kData + "/tests/fixtures/probes/stack-costs-bf16-step-h200.json"))
      ["bf16_step"];
}

// The note of a run with DeepSpeed whose document has no bf16_step (older outputs).
constexpr const char* kNoBf16StepNote =
    "stack BF16_Optimizer step not measured (no bf16_step result): plans use the built-in one";

// The offloaded gradient's blocking cast copy as stack_costs.py's cast_copy section records it,
// from the H200 probe's real copies (docs/validation/offload-copy-1205/offload-copy.jsonl: 16
// threads, `copy__s`, 32 kB to 256 MiB: both regimes, heap and fresh mapping).
json CastCopyH200Section() {
  json points = json::array();
  std::istringstream in(Read(kData + "/docs/validation/offload-copy-1205/offload-copy.jsonl"));
  for (std::string line; std::getline(in, line);) {
    const json r = json::parse(line);
    if (r["kind"] != "size" || r["threads"] != 16 || r["bytes_bf16"].get<double>() < 32768) {
      continue;
    }
    points.push_back({r["bytes_bf16"], r["copy__s"]});
  }
  return {{"points", points}, {"threads", 16}};
}

// The note of a document without the cast_copy section (outputs before 2026-12-05).
constexpr const char* kNoCastNote =
    "stack cast copy not measured (no cast_copy result): plans use the built-in one";

// The note of a document without the optimizer_kernels section (outputs before 2026-12-07).
constexpr const char* kNoKernelsNote =
    "stack optimizer kernels not measured (no optimizer_kernels result): plans use the built-in "
    "ones";
// The optimizer_kernels section as stack_costs.py records it, from the H200's real probe output
// (docs/validation/stack/optimizer-kernels-h200.json: FusedAdam measured, torch's AdamW not).
json OptimizerKernelsH200Section() {
  const json d = json::parse(Read(kStack + "optimizer-kernels-h200.json"));
  return {{"elements", d["elements"]}, {"kernels", d["kernels"]}};
}
// The note of a run with DeepSpeed whose document has no zero3_calls (older outputs).
constexpr const char* kNoCallsNote =
    "stack ZeRO-3 cost per gather call and per reduce-bucket flush not measured (no zero3_calls "
    "result): plans use the built-in ones";

// The compiled-in numbers are rounded to 3-4 digits when transcribed.
void ExpectNear(double got, double built_in, const std::string& what) {
  EXPECT_NEAR(got, built_in, std::max(0.6e-6, 0.001 * std::abs(built_in))) << what;
}

TEST(StackProbeTest, RealH200OutputsConvertToTheCompiledInCosts) {
  std::vector<std::string> notes;
  auto s = StackProfileFromJson(MergedH200Document().dump(), "merged.json", kH200Stream,
                                "tools/probes/stack_costs.py", &notes);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->present);
  EXPECT_TRUE(s->zero3);
  EXPECT_EQ(s->gpu, "NVIDIA H200");
  EXPECT_EQ(s->date, "2026-12-03");
  EXPECT_EQ(s->versions.torch, "2.11.0+cu130");
  EXPECT_EQ(s->versions.deepspeed, "0.14.5");
  EXPECT_EQ(s->versions.transformers, "5.17.0");
  EXPECT_EQ(s->source.kind, SourceKind::kMeasured);
  EXPECT_NE(s->source.detail.find("PyTorch 2.11.0+cu130"), std::string::npos) << s->source.detail;
  EXPECT_NE(s->source.detail.find("DeepSpeed 0.14.5"), std::string::npos);
  // These outputs predate the bf16_step, optimizer_kernels and zero3_calls sections: their
  // costs stay the built-in ones.
  ASSERT_EQ(notes.size(), 4u);
  EXPECT_NE(notes[0].find(kNoBf16StepNote), std::string::npos) << notes[0];
  EXPECT_NE(notes[1].find(kNoKernelsNote), std::string::npos) << notes[1];
  EXPECT_NE(notes[2].find(kNoCallsNote), std::string::npos) << notes[2];
  EXPECT_NE(notes[3].find(kNoCastNote), std::string::npos) << notes[3];
  EXPECT_FALSE(s->optimizer_kernels);
  EXPECT_TRUE(s->cast_copy_d2h.empty());
  EXPECT_FALSE(s->bf16_step);
  EXPECT_FALSE(s->z3_per_gather_call_s.has_value());
  EXPECT_FALSE(s->z3_per_bucket_flush_s.has_value());

  const StackCosts converted = StackCostsFromProfile(*s);
  const StackCosts& b = MeasuredStackCosts();
  ExpectNear(converted.reference_stream_bytes_per_s, b.reference_stream_bytes_per_s, "stream");
  for (int i = 0; i < kKernelClassCount; ++i) {
    ExpectNear(converted.fwd_bytes_per_s[i], b.fwd_bytes_per_s[i], StackKernelClassName(i));
    ExpectNear(converted.bwd_bytes_per_s[i], b.bwd_bytes_per_s[i], StackKernelClassName(i));
  }
  for (int i = 0; i < kOpKindCount; ++i) {
    ExpectNear(converted.op_fwd_s[i], b.op_fwd_s[i], StackOpKindName(i));
    ExpectNear(converted.op_bwd_s[i], b.op_bwd_s[i], StackOpKindName(i));
  }
  ExpectNear(converted.kernel_fwd_s, b.kernel_fwd_s, "kernel fwd");
  ExpectNear(converted.kernel_bwd_s, b.kernel_bwd_s, "kernel bwd");
  ExpectNear(converted.z3_fwd_per_module_s, b.z3_fwd_per_module_s, "z3");
  ExpectNear(converted.z3_fwd_per_param_s, b.z3_fwd_per_param_s, "z3");
  ExpectNear(converted.z3_bwd_per_module_s, b.z3_bwd_per_module_s, "z3");
  ExpectNear(converted.z3_bwd_per_param_s, b.z3_bwd_per_param_s, "z3");
  EXPECT_EQ(converted.z3_per_gather_call_s, b.z3_per_gather_call_s);
  EXPECT_EQ(converted.z3_per_bucket_flush_s, b.z3_per_bucket_flush_s);
  // The optimizer step's costs come from the same grid's step column (docs/stack-costs.md §5).
  EXPECT_TRUE(s->optimizer_step);
  ExpectNear(converted.z12_step_s, b.z12_step_s, "z12 step");
  ExpectNear(converted.z12_step_per_param_s, b.z12_step_per_param_s, "z12 step per param");
  ExpectNear(converted.z3_step_s, b.z3_step_s, "z3 step");
  ExpectNear(converted.z3_step_per_param_s, b.z3_step_per_param_s, "z3 step per param");
  ASSERT_EQ(converted.families.size(), b.families.size());
  for (const FamilyBlockHost& f : b.families) {
    const FamilyBlockHost* c = converted.Block(f.model_type, f.kind);
    ASSERT_NE(c, nullptr) << f.model_type;
    ExpectNear(c->fwd_s, f.fwd_s, f.model_type);
    ExpectNear(c->bwd_s, f.bwd_s, f.model_type);
    ExpectNear(c->ckpt_fwd_s, f.ckpt_fwd_s, f.model_type);
    ExpectNear(c->ckpt_bwd_s, f.ckpt_bwd_s, f.model_type);
    EXPECT_EQ(c->modules, f.modules) << f.model_type;
    EXPECT_EQ(c->param_tensors, f.param_tensors) << f.model_type;
  }
  ASSERT_EQ(converted.rests.size(), b.rests.size());
  for (const FamilyRestHost& r : b.rests) {
    const FamilyRestHost* c = converted.Rest(r.model_type);
    ASSERT_NE(c, nullptr) << r.model_type;
    ExpectNear(c->fwd_s, r.fwd_s, r.model_type);
    ExpectNear(c->bwd_s, r.bwd_s, r.model_type);
  }
}

TEST(StackProbeTest, WhatWasNotMeasuredIsSaidAndMissingPartsAreErrors) {
  // kernel-rates.json alone: no op kinds, so no section.
  std::vector<std::string> notes;
  auto kernels_only = StackProfileFromJson(Read(kStack + "kernel-rates.json"), "kernel-rates.json",
                                           kH200Stream, "t", &notes);
  ASSERT_FALSE(kernels_only.ok());
  EXPECT_NE(kernels_only.status().message().find("kernel-rates.json: op_kinds missing"),
            std::string::npos)
      << kernels_only.status().message();
  // Call 1's op_kinds section failed (orthogonal_ on bf16): the failure is a note, and without
  // op kinds there is no section.
  notes.clear();
  json call1 = json::parse(Read(kStack + "stack-costs-call1.json"));
  auto c1 = StackProfileFromJson(call1.dump(), "call1.json", kH200Stream, "t", &notes);
  EXPECT_FALSE(c1.ok());
  // Each failed part of the run is one line: op_kinds, and the GPT-J family of that run.
  ASSERT_EQ(notes.size(), 2u);
  bool op_kinds = false;
  for (const std::string& n : notes) {
    op_kinds = op_kinds || n.find("stack op_kinds failed: ") != std::string::npos;
    EXPECT_EQ(n.find('\n'), std::string::npos) << n;
  }
  EXPECT_TRUE(op_kinds) << notes.front();
  // Without DeepSpeed: no zero3 in the document; the section has none and a note says so.
  notes.clear();
  json no_ds = MergedH200Document();
  no_ds.erase("zero3");
  no_ds["versions"]["deepspeed"] = nullptr;
  auto s = StackProfileFromJson(no_ds.dump(), "no-ds.json", kH200Stream, "t", &notes);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_FALSE(s->zero3);
  ASSERT_EQ(notes.size(), 3u);
  EXPECT_NE(notes[0].find("ZeRO-3 hooks not measured (DeepSpeed not importable)"),
            std::string::npos)
      << notes[0];
  EXPECT_NE(notes[1].find(kNoKernelsNote), std::string::npos) << notes[1];
  EXPECT_NE(notes[2].find(kNoCastNote), std::string::npos) << notes[2];
  EXPECT_NE(s->source.detail.find("DeepSpeed not installed"), std::string::npos);
  // ZeRO-3's costs then are the built-in ones, and the summary says so.
  const StackCosts c = StackCostsFromProfile(*s);
  EXPECT_EQ(c.z3_fwd_per_module_s, MeasuredStackCosts().z3_fwd_per_module_s);
  HardwareProfile p;
  p.stack = *s;
  EXPECT_NE(p.StackSummary().find("ZeRO-3 hooks not measured"), std::string::npos)
      << p.StackSummary();
  EXPECT_FALSE(s->optimizer_step);
  EXPECT_EQ(c.z3_step_s, MeasuredStackCosts().z3_step_s);
  EXPECT_NE(p.StackSummary().find("ZeRO-1/2/3 optimizer step not measured"), std::string::npos)
      << p.StackSummary();
  EXPECT_NE(p.StackSummary().find("stage 0's BF16_Optimizer step: built-in"), std::string::npos)
      << p.StackSummary();
  // A grid whose rows all have one parameter count cannot give a per-tensor cost: an error
  // naming the grid, not a division by zero.
  json flat = MergedH200Document();
  for (json& row : flat["zero3"]["grid"]) row["params"] = 64;
  auto f = StackProfileFromJson(flat.dump(), "flat.json", kH200Stream, "t", nullptr);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("flat.json: zero3.grid: the rows need at least two"),
            std::string::npos)
      << f.status().message();
  json nostep = MergedH200Document();
  nostep["zero3"]["grid"][1]["s3"].erase("step_s");
  auto ns = StackProfileFromJson(nostep.dump(), "ns.json", kH200Stream, "t", nullptr);
  ASSERT_FALSE(ns.ok());
  EXPECT_NE(ns.status().message().find("ns.json: zero3.grid[1].s3.step_s: missing"),
            std::string::npos)
      << ns.status().message();
  // A broken value names where it is.
  json bad = MergedH200Document();
  bad["kernels"]["norm"]["bwd_bytes_per_s"] = -1;
  auto b = StackProfileFromJson(bad.dump(), "bad.json", kH200Stream, "t", nullptr);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("bad.json: kernels.norm.bwd_bytes_per_s: -1 is negative"),
            std::string::npos)
      << b.status().message();
  auto wrong = StackProfileFromJson(Read(kStack + "torch-gemm-h200-bf16.json"), "g.json",
                                    kH200Stream, "t", nullptr);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("expected dsplan-stack-costs/1"), std::string::npos);
}

// The CPU's model name (stack_costs.py writes versions.cpu_model since 2026-12-04): named in the
// section's source, escaped and cut like any value from a file; absent, nothing is added.
TEST(StackProbeTest, TheCpuModelIsNamedInTheSource) {
  json doc = MergedH200Document();
  doc["versions"]["cpu_model"] = "Intel(R) Xeon(R) Platinum 8480C";
  auto s = StackProfileFromJson(doc.dump(), "cpu.json", kH200Stream, "t", nullptr);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_NE(s->source.detail.find("16 CPUs, x86_64, Intel(R) Xeon(R) Platinum 8480C)"),
            std::string::npos)
      << s->source.detail;
  doc["versions"]["cpu_model"] = std::string("bad\nname") + std::string(500, 'x');
  s = StackProfileFromJson(doc.dump(), "cpu.json", kH200Stream, "t", nullptr);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->source.detail.find('\n'), std::string::npos) << s->source.detail;
  EXPECT_LT(s->source.detail.size(), 600u) << s->source.detail;
  doc["versions"].erase("cpu_model");
  s = StackProfileFromJson(doc.dump(), "cpu.json", kH200Stream, "t", nullptr);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_NE(s->source.detail.find("16 CPUs, x86_64); "), std::string::npos) << s->source.detail;
}

// A real run on the H200 machine in a Python environment without DeepSpeed (2026-12-03, the
// script as committed before it wrote block_kind): a section without zero3, BERT's block read
// as an encoder block, T5's as both.
TEST(StackProbeTest, ARealRunWithoutDeepSpeedConverts) {
  std::vector<std::string> notes;
  auto s = StackProfileFromJson(Read(kStack + "stack-costs-call4-no-deepspeed.json"), "call4.json",
                                kH200Stream, "tools/probes/stack_costs.py", &notes);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_FALSE(s->zero3);
  EXPECT_TRUE(s->versions.deepspeed.empty());
  ASSERT_EQ(notes.size(), 3u);
  EXPECT_NE(notes[1].find(kNoKernelsNote), std::string::npos) << notes[1];
  EXPECT_NE(notes[2].find(kNoCastNote), std::string::npos) << notes[2];
  EXPECT_NE(notes[0].find("ZeRO-3 hooks not measured (DeepSpeed not importable)"),
            std::string::npos)
      << notes[0];
  const StackCosts c = StackCostsFromProfile(*s);
  EXPECT_NE(c.Block("bert", LayerKind::kEncoderBlock), nullptr);
  EXPECT_NE(c.Block("t5", LayerKind::kEncoderBlock), nullptr);
  EXPECT_NE(c.Block("t5", LayerKind::kDecoderBlock), nullptr);
  EXPECT_NE(c.Block("gpt2", LayerKind::kDecoderBlock), nullptr);
  EXPECT_EQ(c.Block("llama", LayerKind::kDecoderBlock), nullptr);
  EXPECT_EQ(c.z3_fwd_per_param_s, MeasuredStackCosts().z3_fwd_per_param_s);
  EXPECT_NE(s->source.detail.find("(op_kinds, kernels, 3 families)"), std::string::npos)
      << s->source.detail;
}

// The zero3_calls section of a real H200 run: ZeRO-3's host time per gather call and per
// reduce-bucket flush, read into the section and used by the cost model in place of the
// built-in ones.
// Stage 0's BF16_Optimizer step from stack_costs.py's bf16_step rows: the H200's grid gives the
// compiled-in values (transcribed from the same measurement by bf16_optimizer_parts.py's own
// fit), the summary calls them measured, and the cost model uses them.
TEST(StackProbeTest, Bf16StepRowsBecomeTheStageZeroStepCosts) {
  json doc = MergedH200Document();
  doc["bf16_step"] = Bf16StepH200Section();
  std::vector<std::string> notes;
  auto s = StackProfileFromJson(doc.dump(), "bf16.json", kH200Stream,
                                "tools/probes/stack_costs.py", &notes);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_TRUE(s->bf16_step);
  for (const std::string& n : notes) EXPECT_EQ(n.find("BF16_Optimizer"), std::string::npos) << n;
  const StackCosts& b = MeasuredStackCosts();
  ExpectNear(s->bf16_step_s, b.bf16_step_s, "bf16 step");
  ExpectNear(s->bf16_step_per_param_s, b.bf16_step_per_param_s, "bf16 step per tensor");
  ExpectNear(s->bf16_clip_step_s, b.bf16_clip_step_s, "bf16 clip step");
  ExpectNear(s->bf16_clip_step_per_param_s, b.bf16_clip_step_per_param_s,
             "bf16 clip step per tensor");
  EXPECT_NE(s->source.detail.find(", bf16 step"), std::string::npos) << s->source.detail;
  HardwareProfile p;
  p.stack = *s;
  EXPECT_EQ(p.StackSummary().find("BF16_Optimizer step: built-in"), std::string::npos)
      << p.StackSummary();
  // Doubled host times reach the cost model as they are.
  for (json& row : doc["bf16_step"]["rows"]) row["step_s"] = 2 * row["step_s"].get<double>();
  auto twice = StackProfileFromJson(doc.dump(), "bf16x2.json", kH200Stream, "t", &notes);
  ASSERT_TRUE(twice.ok()) << twice.status().ToString();
  p.stack = *twice;
  const std::shared_ptr<const StackCosts> c = StackCostsOf(p);
  EXPECT_NEAR(c->bf16_step_s, 2 * s->bf16_step_s, 1e-12);
  EXPECT_NEAR(c->bf16_clip_step_per_param_s, 2 * s->bf16_clip_step_per_param_s, 1e-12);

  // Errors name the section and say what is wrong.
  auto error_of = [&](const json& d) {
    std::vector<std::string> n;
    auto r = StackProfileFromJson(d.dump(), "bad.json", kH200Stream, "t", &n);
    EXPECT_FALSE(r.ok());
    return r.ok() ? std::string() : r.status().message();
  };
  json one_setting = MergedH200Document();
  one_setting["bf16_step"] = Bf16StepH200Section();
  json& rows = one_setting["bf16_step"]["rows"];
  for (json& row : rows) row["gradient_clipping"] = 0.0;
  EXPECT_NE(error_of(one_setting).find("bad.json: bf16_step.rows: each gradient_clipping "
                                       "setting (0 and above 0) needs at least two tensor counts"),
            std::string::npos)
      << error_of(one_setting);
  json other = MergedH200Document();
  other["bf16_step"] = Bf16StepH200Section();
  other["bf16_step"]["wrapper"] = "FP16_Optimizer";
  EXPECT_NE(error_of(other).find("bf16_step.wrapper: DeepSpeed chose FP16_Optimizer"),
            std::string::npos)
      << error_of(other);
  json negative = MergedH200Document();
  negative["bf16_step"] = Bf16StepH200Section();
  negative["bf16_step"]["rows"][1]["step_s"] = -1;
  EXPECT_NE(error_of(negative).find("bf16_step.rows[1].step_s: -1 is negative"),
            std::string::npos)
      << error_of(negative);
  json huge = MergedH200Document();
  huge["bf16_step"] = Bf16StepH200Section();
  for (json& row : huge["bf16_step"]["rows"]) {
    row["step_s"] = row["tensors"].get<double>() * 0.5;  // 0.5 s per tensor
  }
  EXPECT_NE(error_of(huge).find("is not plausible"), std::string::npos) << error_of(huge);
}

TEST(StackProbeTest, ZeroCallsOfARealRunAreReadAndReplaceTheBuiltInOnes) {
  std::vector<std::string> notes;
  const json doc = ZeroCallsH200Document();
  auto s = StackProfileFromJson(doc.dump(), "calls.json", kH200Stream,
                                "tools/probes/stack_costs.py", &notes);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_TRUE(s->z3_per_gather_call_s.has_value());
  ASSERT_TRUE(s->z3_per_bucket_flush_s.has_value());
  EXPECT_EQ(*s->z3_per_gather_call_s, doc["zero3_calls"]["per_gather_call_s"].get<double>());
  EXPECT_EQ(*s->z3_per_bucket_flush_s, doc["zero3_calls"]["per_bucket_flush_s"].get<double>());
  EXPECT_NEAR(*s->z3_per_gather_call_s, 321.5e-6, 0.1e-6);
  EXPECT_NEAR(*s->z3_per_bucket_flush_s, 853.7e-6, 0.1e-6);
  // This run measured no hook fit (zero3) and no family: those are notes, not errors.
  EXPECT_FALSE(s->zero3);
  for (const std::string& n : notes) EXPECT_EQ(n.find("gather call"), std::string::npos) << n;
  EXPECT_NE(s->source.detail.find(", zero3 calls)"), std::string::npos) << s->source.detail;

  // The cost model takes the measured costs over the built-in ones.
  const StackCosts& built_in = MeasuredStackCosts();
  ASSERT_NE(*s->z3_per_gather_call_s, built_in.z3_per_gather_call_s);
  ASSERT_NE(*s->z3_per_bucket_flush_s, built_in.z3_per_bucket_flush_s);
  HardwareProfile p;
  p.stack = *s;
  const std::shared_ptr<const StackCosts> c = StackCostsOf(p);
  EXPECT_EQ(c->z3_per_gather_call_s, *s->z3_per_gather_call_s);
  EXPECT_EQ(c->z3_per_bucket_flush_s, *s->z3_per_bucket_flush_s);
  EXPECT_NE(p.StackSummary().find("ZeRO-3 cost per gather call and per reduce-bucket flush: "
                                  "measured"),
            std::string::npos)
      << p.StackSummary();
  // One measured, the other built-in: each is taken on its own, and the summary says which.
  p.stack.z3_per_bucket_flush_s.reset();
  const std::shared_ptr<const StackCosts> one = StackCostsOf(p);
  EXPECT_EQ(one->z3_per_gather_call_s, *s->z3_per_gather_call_s);
  EXPECT_EQ(one->z3_per_bucket_flush_s, built_in.z3_per_bucket_flush_s);
  EXPECT_NE(p.StackSummary().find("ZeRO-3 cost per gather call: measured; per reduce-bucket "
                                  "flush: built-in"),
            std::string::npos)
      << p.StackSummary();
  // Without a stack section: the built-in ones.
  EXPECT_EQ(StackCostsOf(HardwareProfile{})->z3_per_gather_call_s, built_in.z3_per_gather_call_s);

  // Without the section (older outputs, or the section failed): the built-in ones, and a note.
  json without = doc;
  without.erase("zero3_calls");
  notes.clear();
  auto w = StackProfileFromJson(without.dump(), "without.json", kH200Stream, "t", &notes);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_FALSE(w->z3_per_gather_call_s.has_value());
  EXPECT_FALSE(w->z3_per_bucket_flush_s.has_value());
  bool said = false;
  for (const std::string& n : notes) said = said || n.find(kNoCallsNote) != std::string::npos;
  EXPECT_TRUE(said);
  const StackCosts wc = StackCostsFromProfile(*w);
  EXPECT_EQ(wc.z3_per_gather_call_s, built_in.z3_per_gather_call_s);
  EXPECT_EQ(wc.z3_per_bucket_flush_s, built_in.z3_per_bucket_flush_s);
  HardwareProfile wp;
  wp.stack = *w;
  EXPECT_NE(wp.StackSummary().find("ZeRO-3 cost per gather call and per reduce-bucket flush: "
                                   "built-in"),
            std::string::npos)
      << wp.StackSummary();
  EXPECT_EQ(w->source.detail.find("zero3 calls"), std::string::npos) << w->source.detail;
}

// A broken or implausible cost is one line naming the file and the key, and no section.
TEST(StackProbeTest, BadZeroCallsAreErrorsNamingTheKey) {
  struct Case {
    const char* key;
    json value;  // null: the key removed
    const char* message;
  };
  const Case cases[] = {
      {"per_gather_call_s", -7e-6, "bad.json: zero3_calls.per_gather_call_s: -7e-06 is negative"},
      {"per_bucket_flush_s", 0.0, "bad.json: zero3_calls.per_bucket_flush_s: must be positive"},
      {"per_gather_call_s", "69us", "bad.json: zero3_calls.per_gather_call_s: expected a number"},
      {"per_bucket_flush_s", nullptr, "bad.json: zero3_calls.per_bucket_flush_s: missing"},
      {"per_gather_call_s", 0.5,
       "bad.json: zero3_calls.per_gather_call_s: 0.5 s is not plausible (expected 1e-06 to 0.01 "
       "s)"},
      {"per_bucket_flush_s", 2e-7,
       "bad.json: zero3_calls.per_bucket_flush_s: 2e-07 s is not plausible"},
  };
  for (const Case& c : cases) {
    json doc = ZeroCallsH200Document();
    if (c.value.is_null()) {
      doc["zero3_calls"].erase(c.key);
    } else {
      doc["zero3_calls"][c.key] = c.value;
    }
    auto s = StackProfileFromJson(doc.dump(), "bad.json", kH200Stream, "t", nullptr);
    ASSERT_FALSE(s.ok()) << c.message;
    EXPECT_NE(s.status().message().find(c.message), std::string::npos) << s.status().message();
  }
  json doc = ZeroCallsH200Document();
  doc["zero3_calls"] = json::array({1, 2});
  auto s = StackProfileFromJson(doc.dump(), "bad.json", kH200Stream, "t", nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("bad.json: zero3_calls: expected an object"),
            std::string::npos)
      << s.status().message();
}

TEST(StackProbeTest, TorchGemmOutputBecomesTheStackGemmTable) {
  StackProfile s;
  Status st = AddTorchGemmFromJson(Read(kStack + "torch-gemm-h200-bf16.json"),
                                   "torch-gemm-h200-bf16.json", &s);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(s.gemm.size(), 3264u);
  EXPECT_EQ(s.gemm.front().m, 8192);
  EXPECT_EQ(s.gemm.front().layout, GemmLayout::kNT);
  EXPECT_NEAR(s.gemm.front().flops_per_s, 823619048188635.9, 1);
  EXPECT_EQ(s.gemm_source.kind, SourceKind::kMeasured);
  EXPECT_NE(s.gemm_source.detail.find("PyTorch 2.11.0+cu130, CUDA 13.0"), std::string::npos)
      << s.gemm_source.detail;
  bool batched = false;
  for (const GemmPoint& g : s.gemm) batched = batched || g.batch > 1;
  EXPECT_TRUE(batched);
  json bad = json::parse(Read(kStack + "torch-gemm-h200-bf16.json"));
  bad["rows"][3][5] = "xy";
  StackProfile t;
  Status e = AddTorchGemmFromJson(bad.dump(), "g.json", &t);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.message().find("g.json: rows[3]"), std::string::npos) << e.message();
  EXPECT_TRUE(t.gemm.empty());
}

// The duty sweep's two real outputs (tools/probes/gemm_sustained.py --duty-sweep on the H200
// machine, 2026-12-04): one point per row, [sustained.duty, sustained_over_alone], ascending in
// duty. The expected numbers are the JSON's own, read off the files (rows are in descending
// duty there: evict_mib 4096 first here).
TEST(SustainedGemmTest, TheRealSweepsBecomeTheirRowsSortedByDuty) {
  const std::string tool = "tools/probes/gemm_sustained.py --duty-sweep";
  auto a = SustainedGemmFromJson(Read(kStack + "gemm-duty-h200.json"), "gemm-duty-h200.json", tool,
                                 "0.1.0 (test)");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  const std::vector<DutyPoint> want_a = {
      {0.4044297563767671, 1.0118138388663003}, {0.5857492167406697, 1.053056616433489},
      {0.745475479867118, 1.092482810633922},   {0.9241398746406152, 1.1537668596199806},
      {0.9789692920629958, 1.184414756453309},  {0.9991892025602861, 1.1843444193512866}};
  EXPECT_EQ(a->points, want_a);
  EXPECT_EQ(a->source.kind, SourceKind::kMeasured);
  for (const char* part :
       {"tools/probes/gemm_sustained.py --duty-sweep: pythia-1.4b fc1 mb31 back to back for 4 s "
        "per point with a memory-bound pass of 0-4096 MiB between calls, 6 points",
        "SM clock 1980 MHz at duty 0.404, 1515 MHz at duty 0.999, 640-694 W", "NVIDIA H200",
        "PyTorch 2.11.0+cu130", "2026-12-04", "dsplan 0.1.0 (test)"}) {
    EXPECT_NE(a->source.detail.find(part), std::string::npos) << part << "\n" << a->source.detail;
  }
  // Neither file has a ratio below 1, nor the power limit or the clocks before the sweep.
  EXPECT_EQ(a->source.detail.find("read as 1"), std::string::npos) << a->source.detail;
  EXPECT_EQ(a->source.detail.find("power limit"), std::string::npos) << a->source.detail;

  // h200-measured's curve was transcribed by hand from the first file, rounded to 3 and 4 digits.
  auto h200 = FindHardwareProfile("h200-measured", kData);
  ASSERT_TRUE(h200.ok());
  ASSERT_EQ(h200->gpu.sustained_gemm.size(), a->points.size());
  for (size_t i = 0; i < a->points.size(); ++i) {
    EXPECT_NEAR(a->points[i].duty, h200->gpu.sustained_gemm[i].duty, 0.0005) << i;
    EXPECT_NEAR(a->points[i].time_ratio, h200->gpu.sustained_gemm[i].time_ratio, 0.00005) << i;
  }

  auto b = SustainedGemmFromJson(Read(kStack + "gemm-duty-h200-b.json"), "gemm-duty-h200-b.json",
                                 tool, "");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  const std::vector<DutyPoint> want_b = {
      {0.4002800051268842, 1.0074043714732273}, {0.580326577906552, 1.0429146312324467},
      {0.7448369617177772, 1.1021022852148674}, {0.9245074186233599, 1.173551237065654},
      {0.9788552833579465, 1.1881339011351484}, {0.9991776398423262, 1.1860268619666503}};
  EXPECT_EQ(b->points, want_b);
  EXPECT_NE(b->source.detail.find("SM clock 1980 MHz at duty 0.400, 1530 MHz at duty 0.999, "
                                  "668-693 W"),
            std::string::npos)
      << b->source.detail;
  EXPECT_EQ(b->source.detail.find("dsplan"), std::string::npos) << b->source.detail;

  // The curve goes into a profile, is written and read back unchanged (the reader's checks:
  // ascending duty, ratio in [1, 4]).
  HardwareProfile p = *h200;
  p.gpu.sustained_gemm = b->points;
  p.gpu.sustained_gemm_source = b->source;
  const std::string out =
      (fs::temp_directory_path() / ("dsplan-sustained-" + std::to_string(::getpid()) + ".yaml"))
          .string();
  ASSERT_TRUE(WriteHardwareProfile(p, out).ok());
  auto back = LoadHardwareProfile(out);
  fs::remove(out);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->gpu.sustained_gemm, want_b);
  EXPECT_EQ(back->gpu.sustained_gemm_source, b->source);
}

TEST(SustainedGemmTest, TheNewOptionalFieldsGoIntoTheSourceAndNoiseBelowOneReadsAsOne) {
  json doc = json::parse(Read(kStack + "gemm-duty-h200.json"));
  doc["m"] = 31744;
  doc["k"] = 2048;
  doc["n"] = 8192;
  doc["idle_smi"] = {1980.0, 120.4, 40.0};
  doc["power_limit_w"] = 700.0;
  doc["rows"][5]["sustained_over_alone"] = 0.985;  // duty 0.404
  doc["rows"][4]["sustained_over_alone"] = 0.99;   // duty 0.586
  auto c = SustainedGemmFromJson(doc.dump(), "d.json", "t", "");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->points.size(), 6u);
  EXPECT_EQ(c->points[0], (DutyPoint{0.4044297563767671, 1.0}));
  EXPECT_EQ(c->points[1], (DutyPoint{0.5857492167406697, 1.0}));
  EXPECT_EQ(c->points[2], (DutyPoint{0.745475479867118, 1.092482810633922}));
  for (const char* part : {"pythia-1.4b fc1 mb31 (F.linear 31744 x 2048 -> 8192 bf16)",
                           "2 ratios below 1 (lowest 0.9850) read as 1",
                           "before the sweep 1980 MHz, 120 W; power limit 700 W"}) {
    EXPECT_NE(c->source.detail.find(part), std::string::npos) << part << "\n" << c->source.detail;
  }
  // nvidia-smi missing: the samples are null, and the source says the clock was not sampled.
  json no_smi = json::parse(Read(kStack + "gemm-duty-h200.json"));
  for (json& row : no_smi["rows"]) {
    row["sustained"]["sm_mhz"] = nullptr;
    row["sustained"]["power_w"] = nullptr;
  }
  no_smi["idle_smi"] = nullptr;
  no_smi["power_limit_w"] = nullptr;
  auto d = SustainedGemmFromJson(no_smi.dump(), "d.json", "t", "");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_NE(d->source.detail.find("SM clock not sampled (nvidia-smi); NVIDIA H200"),
            std::string::npos)
      << d->source.detail;
}

TEST(SustainedGemmTest, BadSweepsAreErrorsNamingTheFileAndKey) {
  const std::string real = Read(kStack + "gemm-duty-h200.json");
  auto error = [](const std::string& text) {
    auto c = SustainedGemmFromJson(text, "sweep.json", "t", "");
    return c.ok() ? std::string("(accepted)") : c.status().message();
  };
  auto with = [&](const std::function<void(json&)>& edit) {
    json doc = json::parse(real);
    edit(doc);
    return error(doc.dump());
  };
  const std::pair<std::string, std::string> cases[] = {
      // gemm_sustained.py without --duty-sweep: a real output of the other mode.
      {error(Read(kStack + "gemm-sustained-h200.json")),
       "sweep.json: schema is 'dsplan-gemm-sustained/1', expected dsplan-gemm-duty/1"},
      {with([](json& d) { d["rows"][2]["sustained"]["duty"] = 0; }),
       "sweep.json: rows[2].sustained.duty: 0 is not in (0, 1]"},
      {with([](json& d) { d["rows"][2]["sustained"]["duty"] = 1.2; }),
       "sweep.json: rows[2].sustained.duty: 1.2 is not in (0, 1]"},
      {with([](json& d) { d["rows"][1]["sustained_over_alone"] = 7; }),
       "sweep.json: rows[1].sustained_over_alone: 7 is not in [0.95, 4]"},
      {with([](json& d) { d["rows"][1]["sustained_over_alone"] = 0.9; }),
       "sweep.json: rows[1].sustained_over_alone: 0.9 is not in [0.95, 4]"},
      // A NaN in nlohmann's output is null; in Python's, the token NaN (not JSON).
      {with([](json& d) { d["rows"][0]["sustained"]["duty"] = std::nan(""); }),
       "sweep.json: rows[0].sustained.duty: expected a number"},
      {error(std::string(real).replace(real.find("0.9991892025602861"), 18, "NaN")),
       "sweep.json: not valid JSON (parse error at line 15, column 13"},
      {with([](json& d) { d["rows"][3].erase("sustained_over_alone"); }),
       "sweep.json: rows[3].sustained_over_alone: missing"},
      {with([](json& d) { d["rows"][3].erase("sustained"); }),
       "sweep.json: rows[3].sustained: missing"},
      {with([](json& d) {
         const json row = d["rows"][0];
         d["rows"] = json::array();
         for (int i = 0; i < 10000; ++i) d["rows"].push_back(row);
       }),
       "sweep.json: rows: 10000 rows; expected 2 to 64"},
      {with([](json& d) { d["rows"] = json::array({d["rows"][0]}); }),
       "sweep.json: rows: 1 rows; expected 2 to 64"},
      {with([](json& d) { d["rows"][4]["sustained"]["duty"] = d["rows"][1]["sustained"]["duty"]; }),
       "sweep.json: rows[1] and rows[4]: the same duty 0.9789692920629958 twice"},
      {with([](json& d) { d.erase("rows"); }), "sweep.json: rows missing"},
      {with([](json& d) { d.erase("torch"); }), "sweep.json: torch, device and date are required"},
      {error(real.substr(0, real.size() / 2)), "sweep.json: not valid JSON (parse error at"},
      {error(""), "sweep.json: not valid JSON"},
      {error("[1, 2]"), "sweep.json: not a JSON object"},
  };
  for (const auto& [got, want] : cases) {
    EXPECT_EQ(got.rfind(want, 0), 0u) << "got:  " << got << "\nwant: " << want;
  }
}

class StackProbeRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("dsplan-stack-probe-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // An executable shell script standing in for python3.
  std::string FakePython(const std::string& body) {
    const std::string path = (dir_ / "python3").string();
    std::ofstream(path) << "#!/bin/sh\n" << body;
    chmod(path.c_str(), 0755);
    return path;
  }
  // A stand-in interpreter that answers the probe and "runs" each script by copying the H200
  // machine's real output to its --out, after checking it was given the profile's rows (and, for
  // the GEMM duty sweep, --duty-sweep). |sweep| replaces the sweep's shell command.
  std::string StandInPython(const std::string& sweep = "") {
    const std::string merged = (dir_ / "merged.json").string();
    json doc = MergedH200Document();
    doc["zero3_calls"] = ZeroCallsH200Document()["zero3_calls"];
    doc["bf16_step"] = Bf16StepH200Section();
    doc["optimizer_kernels"] = OptimizerKernelsH200Section();
    doc["cast_copy"] = CastCopyH200Section();
    // The H200's probe predates points_heap (2026-12-06); the H100 call of malloc2-1206 measured
    // it, so its curve stands in for the child process's here.
    doc["cast_copy"]["points_heap"] = json::parse(Read(
        kData +
        "/docs/validation/deepspeed/malloc2-1206/castcopy-h100.json"))["cast_copy"]["points_heap"];
    std::ofstream(merged) << doc.dump();
    const std::string gemm = kStack + "torch-gemm-h200-bf16.json";
    const std::string duty = kStack + "gemm-duty-h200.json";
    return FakePython(
        "if [ \"$1\" = -c ]; then echo 2.11.0+cu130; echo 1; exit 0; fi\n"
        "script=$1; out=''; prof=''; sweep=''\n"
        "while [ $# -gt 0 ]; do case $1 in --out) out=$2;; --profile) prof=$2;; "
        "--duty-sweep) sweep=1;; esac; shift; done\n"
        "case $script in\n"
        "  */stack_costs.py) cp '" +
        merged +
        "' \"$out\";;\n"
        "  */torch_gemm.py) grep -q '^  gemm:' \"$prof\" || exit 3; cp '" +
        gemm +
        "' \"$out\";;\n"
        "  */gemm_sustained.py) [ -n \"$sweep\" ] || exit 5; " +
        (sweep.empty() ? "cp '" + duty + "' \"$out\"" : sweep) +
        ";;\n"
        "  */torch_sdpa.py) cp '" + kStack + "torch-sdpa-h200.json' \"$out\";;\n"
        "  *) exit 4;;\n"
        "esac\n");
  }
  StackProbeOptions Options(const std::string& python) {
    StackProbeOptions o;
    o.python = python;
    o.tools_dir = kData + "/tools/probes";
    o.catalog_dir = kData + "/models";
    o.models = "gpt2-xl";
    o.work_dir = (dir_ / "work").string();
    fs::create_directories(o.work_dir);
    return o;
  }
  HardwareProfile Profile() {
    auto p = FindHardwareProfile("h200-measured", kData);
    EXPECT_TRUE(p.ok());
    return p.ok() ? *p : HardwareProfile{};
  }
  fs::path dir_;
};

TEST_F(StackProbeRunTest, NoPythonNoTorchNoGpuEachSayWhyAndWriteNoSection) {
  HardwareProfile p = Profile();
  auto none = MeasureStack(p, Options((dir_ / "no-such-python").string()));
  EXPECT_FALSE(none.stack.present);
  EXPECT_TRUE(none.sustained_gemm.points.empty());
  ASSERT_EQ(none.notes.size(), 3u);
  EXPECT_NE(none.notes[0].find("no-such-python' not found"), std::string::npos) << none.notes[0];
  EXPECT_NE(none.notes[0].find("no stack section"), std::string::npos);
  EXPECT_EQ(none.notes[1],
            "GEMM sustained-load curve not measured (needs python with torch): "
            "GEMMs priced at the table's rate (no gpu.sustained_gemm)");
  EXPECT_EQ(none.notes[2],
            "PyTorch's fused attention not measured (needs python with torch): plans price SDPA "
            "at gpu.attention_efficiency (no gpu.sdpa)");
  EXPECT_TRUE(none.sdpa.rows.empty());

  auto no_torch = MeasureStack(
      p, Options(FakePython("echo \"ModuleNotFoundError: No module named 'torch'\" >&2\n"
                            "exit 1\n")));
  EXPECT_FALSE(no_torch.stack.present);
  EXPECT_TRUE(no_torch.sustained_gemm.points.empty());
  ASSERT_EQ(no_torch.notes.size(), 3u);
  EXPECT_NE(no_torch.notes[1].find("GEMM sustained-load curve not measured (needs python with "
                                   "torch)"),
            std::string::npos)
      << no_torch.notes[1];
  EXPECT_NE(no_torch.notes[0].find("cannot import torch (ModuleNotFoundError: No module named "
                                   "'torch')"),
            std::string::npos)
      << no_torch.notes[0];

  auto no_gpu = MeasureStack(p, Options(FakePython("echo 2.11.0+cpu\necho 0\n")));
  EXPECT_FALSE(no_gpu.stack.present);
  EXPECT_TRUE(no_gpu.sustained_gemm.points.empty());
  ASSERT_EQ(no_gpu.notes.size(), 3u);
  EXPECT_NE(no_gpu.notes[2].find("PyTorch's fused attention not measured (needs a CUDA GPU)"),
            std::string::npos)
      << no_gpu.notes[2];
  EXPECT_NE(no_gpu.notes[0].find("torch 2.11.0+cpu sees no CUDA GPU"), std::string::npos)
      << no_gpu.notes[0];
  EXPECT_NE(no_gpu.notes[1].find("GEMM sustained-load curve not measured (needs a CUDA GPU): "
                                 "GEMMs priced at the table's rate"),
            std::string::npos)
      << no_gpu.notes[1];
}

TEST_F(StackProbeRunTest, AFullRunWritesTheSectionFromTheScriptsOutputs) {
  const std::string py = StandInPython();
  StackProbeOptions o = Options(py);
  o.dsplan_version = "0.1.0 (test)";
  auto r = MeasureStack(Profile(), o);
  ASSERT_TRUE(r.stack.present) << (r.notes.empty() ? "" : r.notes.front());
  EXPECT_TRUE(r.notes.empty()) << r.notes.front();
  EXPECT_TRUE(r.stack.zero3);
  ASSERT_TRUE(r.stack.z3_per_gather_call_s.has_value());
  ASSERT_TRUE(r.stack.z3_per_bucket_flush_s.has_value());
  EXPECT_EQ(r.stack.blocks.size(), 15u);
  EXPECT_EQ(r.stack.gemm.size(), 3264u);
  EXPECT_NE(r.stack.source.detail.find("dsplan 0.1.0 (test)"), std::string::npos);
  // The cast copy's points, as measured; the cost model's curve is then this run's.
  const json cast = CastCopyH200Section()["points"];
  ASSERT_EQ(r.stack.cast_copy_d2h.size(), cast.size());
  for (size_t i = 0; i < cast.size(); ++i) {
    EXPECT_EQ(r.stack.cast_copy_d2h[i].first, cast[i][0].get<double>());
    EXPECT_EQ(r.stack.cast_copy_d2h[i].second, cast[i][1].get<double>());
  }
  EXPECT_EQ(StackCostsFromProfile(r.stack).cast_copy_d2h, r.stack.cast_copy_d2h);
  EXPECT_EQ(StackCostsFromProfile(r.stack).cast_copy_d2h_heap, r.stack.cast_copy_d2h_heap);
  EXPECT_EQ(r.stack.cast_copy_d2h_heap.size(), 14u);
  EXPECT_NE(r.stack.source.detail.find("cast copy"), std::string::npos) << r.stack.source.detail;
  // The duty sweep ran last: the curve is the file's rows, labelled measured.
  ASSERT_EQ(r.sustained_gemm.points.size(), 6u);
  EXPECT_EQ(r.sustained_gemm.points.front(), (DutyPoint{0.4044297563767671, 1.0118138388663003}));
  EXPECT_EQ(r.sustained_gemm.points.back(), (DutyPoint{0.9991892025602861, 1.1843444193512866}));
  EXPECT_EQ(r.sustained_gemm.source.kind, SourceKind::kMeasured);
  EXPECT_EQ(r.sustained_gemm.source.detail.rfind(
                "tools/probes/gemm_sustained.py --duty-sweep: pythia-1.4b fc1 mb31", 0),
            0u)
      << r.sustained_gemm.source.detail;
  EXPECT_NE(r.sustained_gemm.source.detail.find("PyTorch 2.11.0+cu130; 2026-12-04; dsplan 0.1.0 "
                                                "(test)"),
            std::string::npos)
      << r.sustained_gemm.source.detail;
  // PyTorch's fused attention ran after it: the file's 300 rows.
  ASSERT_EQ(r.sdpa.rows.size(), 300u);
  EXPECT_EQ(r.sdpa.source.kind, SourceKind::kMeasured);
  EXPECT_NE(r.sdpa.source.detail.find("cuDNN 91900"), std::string::npos) << r.sdpa.source.detail;

  // The section survives a write and a read unchanged.
  HardwareProfile p = Profile();
  p.stack = r.stack;
  p.gpu.sustained_gemm = r.sustained_gemm.points;
  p.gpu.sustained_gemm_source = r.sustained_gemm.source;
  p.gpu.sdpa = r.sdpa.rows;
  p.gpu.sdpa_source = r.sdpa.source;
  const std::string out = (dir_ / "with-stack.yaml").string();
  ASSERT_TRUE(WriteHardwareProfile(p, out).ok());
  auto back = LoadHardwareProfile(out);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  back->file = p.file;
  EXPECT_TRUE(back->stack == p.stack);
  EXPECT_TRUE(*back == p);
  EXPECT_EQ(back->stack.z3_per_gather_call_s, r.stack.z3_per_gather_call_s);
  EXPECT_EQ(back->stack.z3_per_bucket_flush_s, r.stack.z3_per_bucket_flush_s);
  EXPECT_NE(back->SourceSummary().find(
                "ZeRO-3 cost per gather call and per reduce-bucket flush: measured"),
            std::string::npos)
      << back->SourceSummary();
  EXPECT_NE(back->SourceSummary().find("stack costs: measured on NVIDIA H200 with PyTorch "
                                       "2.11.0+cu130 / DeepSpeed 0.14.5 on 2026-12-03"),
            std::string::npos)
      << back->SourceSummary();
}

TEST_F(StackProbeRunTest, AFailingSweepLeavesTheStackSectionAndSaysSo) {
  // The sweep exits 1 (as a Python exception does): the stack section and its GEMMs are kept,
  // no curve, one note.
  StackProbeOptions o = Options(StandInPython("exit 1"));
  auto r = MeasureStack(Profile(), o);
  ASSERT_TRUE(r.stack.present) << (r.notes.empty() ? "" : r.notes.front());
  EXPECT_EQ(r.stack.gemm.size(), 3264u);
  EXPECT_TRUE(r.sustained_gemm.points.empty());
  ASSERT_EQ(r.notes.size(), 1u);
  EXPECT_EQ(r.notes[0], "GEMM sustained-load curve not measured (" + o.tools_dir +
                            "/gemm_sustained.py exited with 1): GEMMs priced at the table's rate "
                            "(no gpu.sustained_gemm)");

  // A sweep whose output is bad: the note names the file and the key.
  const std::string bad = (dir_ / "bad-duty.json").string();
  json doc = json::parse(Read(kStack + "gemm-duty-h200.json"));
  doc["rows"][2]["sustained_over_alone"] = 7;
  std::ofstream(bad) << doc.dump();
  auto b = MeasureStack(Profile(), Options(StandInPython("cp '" + bad + "' \"$out\"")));
  ASSERT_TRUE(b.stack.present);
  EXPECT_TRUE(b.sustained_gemm.points.empty());
  ASSERT_EQ(b.notes.size(), 1u);
  // (The file's path is cut to 80 bytes in messages: this test's folder is long.)
  EXPECT_EQ(b.notes[0].rfind("GEMM sustained-load curve not measured (", 0), 0u) << b.notes[0];
  EXPECT_NE(b.notes[0].find(": rows[2].sustained_over_alone: 7 is not in [0.95, 4] (the GEMM's "
                            "sustained time over its time alone)): GEMMs priced at the table's "
                            "rate"),
            std::string::npos)
      << b.notes[0];

  // Not asked: the same note, "not asked", and the script is not run.
  StackProbeOptions no = Options(StandInPython("exit 5"));
  no.sustained_gemm = false;
  auto n = MeasureStack(Profile(), no);
  ASSERT_EQ(n.notes.size(), 1u);
  EXPECT_EQ(n.notes[0],
            "GEMM sustained-load curve not measured (not asked): GEMMs priced at the "
            "table's rate (no gpu.sustained_gemm)");
}

TEST_F(StackProbeRunTest, TheSweepRunsWhenTheStackScriptFails) {
  // stack_costs.py fails (exit 1, no output): no stack section, but torch and the GPU are there,
  // so the GEMM duty sweep still runs and its curve is measured.
  const std::string py = FakePython(
      "if [ \"$1\" = -c ]; then echo 2.11.0+cu130; echo 1; exit 0; fi\n"
      "script=$1; out=''\n"
      "while [ $# -gt 0 ]; do case $1 in --out) out=$2;; esac; shift; done\n"
      "case $script in\n"
      "  */gemm_sustained.py) cp '" +
      kStack +
      "gemm-duty-h200-b.json' \"$out\";;\n"
      "  *) exit 1;;\n"
      "esac\n");
  auto r = MeasureStack(Profile(), Options(py));
  EXPECT_FALSE(r.stack.present);
  ASSERT_EQ(r.notes.size(), 2u);
  EXPECT_NE(r.notes[0].find("stack_costs.py exited with 1"), std::string::npos) << r.notes[0];
  // torch_sdpa.py fails too (this stand-in runs only the sweep): its own note.
  EXPECT_NE(r.notes[1].find("PyTorch's fused attention not measured (" ), std::string::npos)
      << r.notes[1];
  EXPECT_NE(r.notes[1].find("torch_sdpa.py exited with 1): plans price SDPA at "
                            "gpu.attention_efficiency (no gpu.sdpa)"),
            std::string::npos)
      << r.notes[1];
  ASSERT_EQ(r.sustained_gemm.points.size(), 6u);
  EXPECT_EQ(r.sustained_gemm.points[0], (DutyPoint{0.4002800051268842, 1.0074043714732273}));
}

TEST(SdpaTableFromJson, TheH200OutputConvertsRowForRow) {
  const std::string text = Read(kStack + "torch-sdpa-h200.json");
  auto t = SdpaTableFromJson(text, "torch-sdpa-h200.json", "0.1.0 (test)");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const json doc = json::parse(text);
  ASSERT_EQ(t->rows.size(), doc["rows"].size());
  for (size_t i = 0; i < t->rows.size(); ++i) {
    const json& r = doc["rows"][i];
    const AttentionPoint& p = t->rows[i];
    EXPECT_EQ(p.dtype, r[0] == "bf16" ? Precision::kBf16 : Precision::kFp16) << i;
    EXPECT_EQ(p.head_dim, r[1].get<int64_t>()) << i;
    EXPECT_EQ(p.causal, r[2].get<bool>()) << i;
    EXPECT_EQ(p.seq, r[3].get<int64_t>()) << i;
    EXPECT_EQ(p.batch_heads, r[4].get<int64_t>()) << i;
    EXPECT_EQ(p.fwd_flops_per_s, r[5].get<double>()) << i;
    EXPECT_EQ(p.bwd_flops_per_s, r[6].get<double>()) << i;
  }
  // bf16, head dim 128, causal, 1024 tokens x 256 slices: 446 / 320 TFLOP/s in the file.
  EXPECT_EQ(t->rows[97].head_dim, 128);
  EXPECT_EQ(t->source.kind, SourceKind::kMeasured);
  for (const char* part : {"tools/probes/torch_sdpa.py: F.scaled_dot_product_attention",
                           "cudnn_generated_fort_native_sdpa_sm90_flash", "NVIDIA H200",
                           "PyTorch 2.11.0+cu130, cuDNN 91900", "2026-12-04",
                           "dsplan 0.1.0 (test)"}) {
    EXPECT_NE(t->source.detail.find(part), std::string::npos) << part << " in "
                                                              << t->source.detail;
  }
}

TEST(SdpaTableFromJson, BadOutputsAreErrorsNamingTheFileAndRow) {
  const json good = json::parse(Read(kStack + "torch-sdpa-h200.json"));
  struct Case {
    std::function<void(json&)> edit;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {[](json& d) { d["schema"] = "dsplan-torch-gemm/1"; }, "expected dsplan-torch-sdpa/1"},
      {[](json& d) { d.erase("gpu"); }, "torch, gpu and date are required"},
      {[](json& d) { d["rows"] = json::array(); }, "rows: 0 rows; expected 1 to 4096"},
      {[](json& d) { d["rows"][3][0] = "fp8"; }, "rows[3][0]: expected bf16 or fp16"},
      {[](json& d) { d["rows"][3][1] = 0; }, "rows[3][1]: expected an integer from 1 to 1024"},
      {[](json& d) { d["rows"][3][2] = "yes"; }, "rows[3][2]: expected true or false"},
      {[](json& d) { d["rows"][3][4] = 2.5; }, "rows[3][4]: expected an integer"},
      {[](json& d) { d["rows"][3][5] = -1; }, "rows[3][5]: expected a rate in (0, 1e17]"},
      {[](json& d) { d["rows"][3][6] = 1e30; }, "rows[3][6]: expected a rate in (0, 1e17]"},
      {[](json& d) { d["rows"][3][6] = nullptr; }, "rows[3][6]: expected a rate"},
      {[](json& d) { d["rows"][3].erase(6); }, "rows[3]: expected [dtype, head_dim"},
      {[](json& d) { d["rows"][4] = d["rows"][3]; }, "rows[4]: repeats an earlier row"},
      // torch_sdpa.py's checks are not tables.
      {[](json& d) { d["mask_window"] = 512; }, "made with torch_sdpa.py --mask-window"},
      {[](json& d) { d["gqa"] = 4; }, "made with torch_sdpa.py --gqa"},
      {[](json& d) { d["gqa"] = "4"; }, "made with torch_sdpa.py --gqa"},
      {[](json& d) {
         json row = d["rows"][0];
         d["rows"] = json::array();
         for (int i = 0; i < 5000; ++i) {
           row[4] = i + 1;
           d["rows"].push_back(row);
         }
       },
       "rows: 5000 rows; expected 1 to 4096"},
  };
  for (const Case& c : cases) {
    json d = good;
    c.edit(d);
    auto t = SdpaTableFromJson(d.dump(), "sdpa.json", "");
    ASSERT_FALSE(t.ok()) << c.expect;
    EXPECT_EQ(t.status().code(), Status::Code::kInvalidArgument);
    EXPECT_NE(t.status().message().find("sdpa.json"), std::string::npos) << t.status().message();
    EXPECT_NE(t.status().message().find(c.expect), std::string::npos)
        << c.expect << " in: " << t.status().message();
  }
  // Cut off, and Python's NaN: not JSON.
  const std::string text = good.dump();
  EXPECT_FALSE(SdpaTableFromJson(text.substr(0, text.size() / 2), "sdpa.json", "").ok());
  std::string nan = good.dump();
  const size_t at = nan.find("446369000000000");
  ASSERT_NE(at, std::string::npos);
  nan.replace(at, 15, "NaN");
  EXPECT_FALSE(SdpaTableFromJson(nan, "sdpa.json", "").ok());
}

// stack_costs.py's cast_copy section: the points become the stack's curve; implausible or
// malformed points are one line naming the file and the key, and nothing is converted.
TEST(StackProbeTest, CastCopyPointsConvertAndBadOnesAreErrors) {
  json doc = MergedH200Document();
  doc["cast_copy"] = CastCopyH200Section();
  std::vector<std::string> notes;
  auto s = StackProfileFromJson(doc.dump(), "cast.json", kH200Stream, "t", &notes);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ(s->cast_copy_d2h.size(), doc["cast_copy"]["points"].size());
  // Both regimes came through: the curve prices a 64 MiB copy on its fresh-mapping points.
  EXPECT_TRUE(StackCostsFromProfile(*s).FreshCastCopyMeasured());
  for (const std::string& n : notes) EXPECT_EQ(n.find(kNoCastNote), std::string::npos) << n;
  const struct {
    json points;
    const char* says;
  } bad[] = {
      {json::array({{32768, 4e-5}}), "cast.json: cast_copy.points: expected 2 to 64"},
      {json::array({{32768, 4e-5}, {16384, 3e-5}}), "cast.json: cast_copy.points[1]: [16384, "},
      {json::array({{32768, 4e-5}, {65536, 12.0}}), "cast.json: cast_copy.points[1]: [65536, 12]"},
      {json::array({{32768, 4e-5}, {4294967296.0, 3.0}}), "cast.json: cast_copy.points[1]"},
      {json::array({{32768, 4e-5}, {"64k", 3e-5}}),
       "cast.json: cast_copy.points[1]: expected [bytes, seconds] numbers"},
  };
  for (const auto& b : bad) {
    json d = doc;
    d["cast_copy"]["points"] = b.points;
    auto r = StackProfileFromJson(d.dump(), "cast.json", kH200Stream, "t", &notes);
    ASSERT_FALSE(r.ok()) << b.points.dump();
    EXPECT_NE(r.status().message().find(b.says), std::string::npos) << r.status().message();
    EXPECT_EQ(r.status().message().find('\n'), std::string::npos);
  }
}

// The same section with the curve of a child process whose malloc was held to its heap
// (`points_heap`, since 2026-12-06; the H100 call of docs/validation/deepspeed/malloc2-1206):
// it becomes cast_copy_d2h_heap. Without it a note says --malloc-heap extends the default curve;
// a document whose probe itself ran with MALLOC_* set is refused (its "points" are not the
// default regime).
TEST(StackProbeTest, CastCopyHeapPointsConvertAndATunedProcessIsRefused) {
  const json measured = json::parse(
      Read(kData + "/docs/validation/deepspeed/malloc2-1206/castcopy-h100.json"))["cast_copy"];
  ASSERT_TRUE(measured.contains("points_heap"));
  json doc = MergedH200Document();
  doc["cast_copy"] = measured;
  std::vector<std::string> notes;
  auto s = StackProfileFromJson(doc.dump(), "cast.json", kH200Stream, "t", &notes);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ(s->cast_copy_d2h_heap.size(), measured["points_heap"].size());
  EXPECT_EQ(s->cast_copy_d2h_heap.back().second, measured["points_heap"].back()[1].get<double>());
  EXPECT_NE(s->source.detail.find("malloc held to its heap"), std::string::npos)
      << s->source.detail;
  for (const std::string& n : notes) EXPECT_EQ(n.find("heap not measured"), std::string::npos) << n;

  json old = doc;
  old["cast_copy"].erase("points_heap");
  notes.clear();
  s = StackProfileFromJson(old.dump(), "cast.json", kH200Stream, "t", &notes);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->cast_copy_d2h_heap.empty());
  bool noted = false;
  for (const std::string& n : notes) noted |= n.find("heap not measured") != std::string::npos;
  EXPECT_TRUE(noted);

  json tuned = doc;
  tuned["cast_copy"]["malloc_env"] = {{"MALLOC_MMAP_MAX_", "0"}};
  auto r = StackProfileFromJson(tuned.dump(), "cast.json", kH200Stream, "t", &notes);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("cast.json: cast_copy.malloc_env"), std::string::npos)
      << r.status().message();

  json bad = doc;
  bad["cast_copy"]["points_heap"] = json::array({{32768, 4e-5}});
  r = StackProfileFromJson(bad.dump(), "cast.json", kH200Stream, "t", &notes);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("cast.json: cast_copy.points_heap: expected 2 to 64"),
            std::string::npos)
      << r.status().message();
}

}  // namespace
}  // namespace dsplan

namespace dsplan {
namespace {

// The optimizer step's kernels from stack_costs.py's optimizer_kernels section (the H200's real
// probe output): each rate read, the flat passes as the median of flatten, unscale and the copy
// back, a kernel that failed (torch's AdamW here was not run; FusedAdam without DeepSpeed) left
// to the streaming class with a note, and an implausible rate an error naming the kernel.
TEST(StackProbeTest, OptimizerKernelRatesBecomeTheStepsKernelCosts) {
  json doc = MergedH200Document();
  doc["optimizer_kernels"] = OptimizerKernelsH200Section();
  std::vector<std::string> notes;
  auto s = StackProfileFromJson(doc.dump(), "ok.json", kH200Stream, "t", &notes);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_TRUE(s->optimizer_kernels);
  const json& k = doc["optimizer_kernels"]["kernels"];
  EXPECT_DOUBLE_EQ(s->fp64_cast_bytes_per_s, k["fp64_cast"]["bytes_per_s"].get<double>());
  EXPECT_DOUBLE_EQ(s->fp64_norm_bytes_per_s, k["fp64_norm"]["bytes_per_s"].get<double>());
  EXPECT_DOUBLE_EQ(s->step_flat_bytes_per_s, k["unscale"]["bytes_per_s"].get<double>());  // median
  EXPECT_DOUBLE_EQ(s->fused_adam_bytes_per_s, k["fused_adam"]["bytes_per_s"].get<double>());
  EXPECT_EQ(s->torch_adam_bytes_per_s, 0);
  for (const std::string& n : notes) EXPECT_EQ(n.find("optimizer kernels"), std::string::npos) << n;
  EXPECT_NE(s->source.detail.find(", optimizer kernels"), std::string::npos) << s->source.detail;
  // The cost model takes them.
  HardwareProfile p;
  p.stack = *s;
  EXPECT_DOUBLE_EQ(StackCostsOf(p)->fused_adam_bytes_per_s, s->fused_adam_bytes_per_s);
  // FusedAdam failed (no DeepSpeed): the others stay measured and a note says so.
  json no_ds = doc;
  no_ds["optimizer_kernels"]["kernels"]["fused_adam"] = {{"error", "ModuleNotFoundError"}};
  notes.clear();
  auto n = StackProfileFromJson(no_ds.dump(), "ok.json", kH200Stream, "t", &notes);
  ASSERT_TRUE(n.ok());
  EXPECT_TRUE(n->optimizer_kernels);
  EXPECT_EQ(n->fused_adam_bytes_per_s, 0);
  bool said = false;
  for (const std::string& x : notes)
    said = said || x.find("FusedAdam not measured") != std::string::npos;
  EXPECT_TRUE(said);
  // A rate no GPU has is an error naming the kernel.
  json bad = doc;
  bad["optimizer_kernels"]["kernels"]["flatten"]["bytes_per_s"] = 5e15;
  auto b = StackProfileFromJson(bad.dump(), "bad.json", kH200Stream, "t", nullptr);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("optimizer_kernels: kernels.flatten.bytes_per_s"),
            std::string::npos)
      << b.status().message();
}

}  // namespace
}  // namespace dsplan
