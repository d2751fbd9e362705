// Whole-model activations and the loss's backward transient against plain-PyTorch measurements
// of every catalog family on an H200 (PyTorch 2.11, transformers 5.17; tools/probes/
// family_activation_probe.py, records in tests/fixtures/probes/, method and findings in
// docs/validation/deepspeed/README.md). Each probe built the family's real widths with 2 and 4
// blocks from tests/fixtures/probes/configs/, cast it to bf16, and measured memory_allocated
// before forward, after forward (saved activations, logits and loss held) and the peak of
// backward, at micro-batch 1 and 4, with and without gradient checkpointing. These are the
// shapes users train (seq 1024, head dim 64-256), unlike the tiny probes of
// activations_measured_test.cc.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/hf_config.h"
#include "core/model_spec.h"
#include "simulator/workload.h"

namespace dsplan {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

struct Record {
  std::string family;
  int64_t layers = 0, mb = 0, seq = 0, src = 0, tgt = 0;
  bool gc = false;
  double before_fwd = 0, after_fwd = 0, bwd_peak = 0;  // MiB
};

std::vector<Record> LoadRecords() {
  std::ifstream in(std::string(DSPLAN_TEST_DATA_DIR) +
                   "/tests/fixtures/probes/family-activations-h200.jsonl");
  EXPECT_TRUE(in.good());
  std::vector<Record> out;
  std::string line;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (!j.contains("family")) continue;  // the probe_meta line
    Record r;
    r.family = j["family"];
    r.layers = j["n_layers"];
    r.mb = j["mb"];
    r.gc = j["grad_checkpointing"];
    if (j["seq_len"].is_number()) r.seq = j["seq_len"];
    if (j["src_len"].is_number()) r.src = j["src_len"];
    if (j["tgt_len"].is_number()) r.tgt = j["tgt_len"];
    r.before_fwd = j["before_fwd_alloc_mb"];
    r.after_fwd = j["after_fwd_alloc_mb"];
    r.bwd_peak = j["bwd_peak_alloc_mb"];
    out.push_back(r);
  }
  return out;
}

Workload Trace(const Record& r) {
  const std::string path = std::string(DSPLAN_TEST_DATA_DIR) + "/tests/fixtures/probes/configs/" +
                           r.family + "-L" + std::to_string(r.layers) + "/config.json";
  auto cfg = HfConfig::Load(path);
  EXPECT_TRUE(cfg.ok()) << cfg.status().ToString();
  auto spec = ModelSpecFromHf(*cfg, r.family);
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  RunShape o;
  o.micro_batch = r.mb;
  o.seq_len = r.src > 0 ? r.src : r.seq;
  o.target_len = r.tgt;
  o.gradient_checkpointing = r.gc;
  auto w = BuildWorkload(*spec, o);
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  return w.ok() ? *w : Workload{};
}

TEST(FamilyProbesTest, ActivationsHeldAfterForwardMatchEveryFamily) {
  const std::vector<Record> records = LoadRecords();
  ASSERT_EQ(records.size(), 120u);
  int checked = 0;
  for (const Record& r : records) {
    // Falcon-7B at micro-batch 1 saves 5-7 % less than at micro-batch 4 per sample; the model
    // follows micro-batch 4 (over-predicting micro-batch 1, the safe side). Open question in
    // docs/validation/deepspeed/README.md.
    const bool falcon_mb1 = r.family == "falcon" && r.mb == 1 && !r.gc;
    const double measured = r.after_fwd - r.before_fwd;
    const double predicted = static_cast<double>(Trace(r).activation_bytes) / kMiB;
    const std::string what = r.family + " L" + std::to_string(r.layers) + " mb" +
                             std::to_string(r.mb) + (r.gc ? " checkpointed" : "");
    if (falcon_mb1) {
      EXPECT_GT(predicted, measured) << what;
      EXPECT_LT(predicted, 1.08 * measured) << what;
      continue;
    }
    // Decoder-only families are within 0.5 %. The encoders are low by a little: T5 (both FFN
    // kinds) up to 1.8 % at micro-batch 1, BERT 0.7 % with checkpointing; a few MiB that do not
    // scale with the batch are not traced yet (open in docs/validation/deepspeed/README.md).
    const bool encoder = r.family.rfind("t5", 0) == 0 || r.family == "bert";
    EXPECT_NEAR(predicted, measured, (encoder ? 0.02 : 0.005) * measured + 0.05) << what;
    ++checked;
  }
  EXPECT_EQ(checked, 118);  // 120 records, the 2 of falcon at micro-batch 1 apart
}

TEST(FamilyProbesTest, LossBackwardHoldsTwoLogProbabilitySizedGradients) {
  // Causal LMs upcast the logits to fp32 and log_softmax saves its fp32 output. In backward,
  // nll_loss's gradient and log_softmax's input gradient (both that size) are alive together,
  // on top of everything held after forward: 8 bytes per logit. Checked where the loss is the
  // backward's peak (micro-batch 4, no checkpointing); Falcon's peak is in a block, T5 and BERT
  // do not upcast.
  const std::set<std::string> causal = {"llama", "qwen2",  "gpt_neox", "opt",  "bloom", "gemma",
                                        "phi",   "gpt2",   "mistral",  "gptj", "llama3"};
  int checked = 0;
  for (const Record& r : LoadRecords()) {
    if (!causal.count(r.family) || r.mb != 4 || r.gc) continue;
    const Workload w = Trace(r);
    int64_t logp = 0;
    for (const TensorSpec& t : w.tensors) {
      if (t.layer >= 0 && w.layers[t.layer].kind == LayerKind::kLoss) logp = std::max(logp, t.bytes);
    }
    const double measured = r.bwd_peak - r.after_fwd;
    EXPECT_NEAR(2.0 * static_cast<double>(logp) / kMiB, measured, 1.0 + 0.002 * measured)
        << r.family << " L" << r.layers;
    ++checked;
  }
  EXPECT_EQ(checked, 22);
}

}  // namespace
}  // namespace dsplan
