// Saved-activation bytes against measurements of transformers 5.17.0 / torch 2.11 on an H200
// (docs/research/transformers-a.md section 3 and transformers-b.md section 3). Each probe built
// a tiny model from its config in bf16, ran forward in train() mode and summed the storages
// autograd saved, deduplicated by storage pointer and attributed to the block that saved them.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/hf_config.h"
#include "core/model_spec.h"
#include "simulator/workload.h"

namespace dsplan {
namespace {

Workload Trace(const std::string& json, AttentionImpl attn, int64_t b, int64_t s,
               int64_t target = 0) {
  auto cfg = HfConfig::Parse(json, "probe");
  EXPECT_TRUE(cfg.ok()) << cfg.status().ToString();
  auto spec = ModelSpecFromHf(*cfg, "probe");
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  RunShape o;
  o.micro_batch = b;
  o.seq_len = s;
  o.target_len = target;
  o.attention = attn;
  auto w = BuildWorkload(*spec, o);
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  return w.ok() ? *w : Workload{};
}

int64_t Saved(const Workload& w, const std::string& layer) {
  for (const Layer& l : w.layers)
    if (l.name == layer) return l.saved_bytes;
  ADD_FAILURE() << "no layer " << layer;
  return -1;
}

// Probe A: b=2, s=96, hidden 256, 4 heads of 64, FFN 1024, vocab 1000, 2 layers (t = 192).
constexpr const char* kGpt2 =
    R"({"model_type":"gpt2","vocab_size":1000,"n_embd":256,"n_head":4,"n_layer":2,
        "n_positions":128})";
constexpr const char* kGptJ =
    R"({"model_type":"gptj","vocab_size":1000,"n_embd":256,"n_head":4,"n_layer":2,
        "n_positions":128,"rotary_dim":32,"resid_pdrop":0.1,"embd_pdrop":0.1,
        "attn_pdrop":0.1})";
constexpr const char* kNeoX =
    R"({"model_type":"gpt_neox","vocab_size":1000,"hidden_size":256,"num_attention_heads":4,
        "num_hidden_layers":2,"intermediate_size":1024,"attention_dropout":0.1,
        "hidden_dropout":0.1})";
constexpr const char* kOpt =
    R"({"model_type":"opt","vocab_size":1000,"hidden_size":256,"num_attention_heads":4,
        "num_hidden_layers":2,"ffn_dim":1024,"max_position_embeddings":128,
        "attention_dropout":0.1})";
constexpr const char* kBloom =
    R"({"model_type":"bloom","vocab_size":1000,"hidden_size":256,"n_head":4,"n_layer":2,
        "hidden_dropout":0.1,"attention_dropout":0.1})";
constexpr const char* kBert =
    R"({"model_type":"bert","vocab_size":1000,"hidden_size":256,"num_attention_heads":4,
        "num_hidden_layers":2,"intermediate_size":1024,"max_position_embeddings":128})";
constexpr const char* kT5 =
    R"({"model_type":"t5","vocab_size":1000,"d_model":256,"d_kv":64,"num_heads":4,
        "d_ff":1024,"num_layers":2})";

struct Probe {
  const char* what;
  const char* config;
  AttentionImpl attn;
  const char* layer;
  int64_t measured_bytes;
};

TEST(ActivationsMeasuredTest, BlockZeroMatchesTransformersProbes) {
  const Probe probes[] = {
      {"gpt2 eager", kGpt2, AttentionImpl::kEager, "transformer.h.0", 3222528},
      // gpt2 sdpa and neox sdpa: this tiny probe (b 2, s 96, 4 heads) saved contiguous copies
      // of K and V taken from the fused q|k|v projection (+196,608 bytes for GPT-2: exactly the
      // two copies; NeoX's copied V freed its projection: -196,608). At the shapes users train
      // (GPT-2 XL and Pythia 1.4B widths, s 1024) no copies are made: the per-block activations
      // of family_probes_test.cc and the peaks of real DeepSpeed runs of both families agree
      // with the model only without them. The model follows the training shapes; which
      // backend choice makes the tiny shape copy is open (docs/activations.md).
      {"gptj eager", kGptJ, AttentionImpl::kEager, "transformer.h.0", 3393024},
      {"neox eager", kNeoX, AttentionImpl::kEager, "gpt_neox.layers.0", 2098176},
      {"opt eager", kOpt, AttentionImpl::kEager, "model.decoder.layers.0", 1797120},
      {"opt sdpa", kOpt, AttentionImpl::kSdpa, "model.decoder.layers.0", 1284112},
      {"bloom eager", kBloom, AttentionImpl::kEager, "transformer.h.0", 2190336},
      {"bert eager", kBert, AttentionImpl::kEager, "bert.encoder.layer.0", 2042880},
      {"bert sdpa", kBert, AttentionImpl::kSdpa, "bert.encoder.layer.0", 1677328},
      {"t5 encoder eager", kT5, AttentionImpl::kEager, "encoder.block.0", 2901504},
      {"t5 decoder eager", kT5, AttentionImpl::kEager, "decoder.block.0", 4303104},
      {"t5 encoder sdpa", kT5, AttentionImpl::kSdpa, "encoder.block.0", 3491328},
      {"t5 decoder sdpa", kT5, AttentionImpl::kSdpa, "decoder.block.0", 4610320},
  };
  for (const Probe& p : probes) {
    const bool t5 = std::string(p.config).find("\"t5\"") != std::string::npos;
    Workload w = Trace(p.config, p.attn, 2, 96, t5 ? 96 : 0);
    EXPECT_EQ(Saved(w, p.layer), p.measured_bytes) << p.what;
  }
}

// Probe B: b=2, s=1024, hidden 1024, 16 heads of 64 (4 KV heads), MLP 2816, vocab 32000,
// 3 layers, SDPA (cuDNN), no padding. Reported in units of one bf16 [b, s, hidden] tensor.
double Units(const Workload& w, const std::string& layer) {
  return static_cast<double>(Saved(w, layer)) / (2.0 * 2 * 1024 * 1024);
}

TEST(ActivationsMeasuredTest, LlamaFamilyLayersMatchTransformersProbes) {
  const char* llama =
      R"({"model_type":"llama","vocab_size":32000,"hidden_size":1024,"num_attention_heads":16,
          "num_key_value_heads":4,"intermediate_size":2816,"num_hidden_layers":3})";
  const char* gemma =
      R"({"model_type":"gemma","vocab_size":32000,"hidden_size":1024,"num_attention_heads":16,
          "num_key_value_heads":4,"head_dim":64,"intermediate_size":2816,
          "num_hidden_layers":3})";
  const char* mixtral =
      R"({"model_type":"mixtral","vocab_size":32000,"hidden_size":1024,"num_attention_heads":16,
          "num_key_value_heads":4,"intermediate_size":1408,"num_hidden_layers":3,
          "num_local_experts":8,"num_experts_per_tok":2})";
  const char* phi =
      R"({"model_type":"phi","vocab_size":32000,"hidden_size":1024,"num_attention_heads":16,
          "intermediate_size":4096,"num_hidden_layers":3,"resid_pdrop":0.1})";
  const char* falcon7 =
      R"({"model_type":"falcon","vocab_size":32000,"hidden_size":1024,"num_attention_heads":16,
          "num_hidden_layers":3,"multi_query":true,"parallel_attn":true})";
  const char* falcon40 =
      R"({"model_type":"falcon","vocab_size":32000,"hidden_size":1024,"num_attention_heads":16,
          "num_kv_heads":4,"num_hidden_layers":3,"new_decoder_architecture":true})";
  struct Case {
    const char* what;
    const char* config;
    const char* layer;
    double units;      // as reported by the probe
    double tolerance;  // the report's rounding
  };
  const Case cases[] = {
      {"llama", llama, "model.layers.1", 21.535, 0.0015},
      {"gemma", gemma, "model.layers.1", 23.537, 0.0015},
      {"mixtral (grouped_mm)", mixtral, "model.layers.1", 25.59, 0.01},
      {"phi (resid dropout)", phi, "model.layers.1", 28.0, 0.05},
      {"falcon-7b style (math SDPA)", falcon7, "transformer.h.1", 49.0, 0.05},
      {"falcon-40b style", falcon40, "transformer.h.1", 16.04, 0.01},
  };
  for (const Case& c : cases) {
    Workload w = Trace(c.config, AttentionImpl::kSdpa, 2, 1024);
    EXPECT_NEAR(Units(w, c.layer), c.units, c.tolerance) << c.what;
  }
}

// With gradient checkpointing each block keeps exactly its hidden-state input (measured:
// 1.0 unit per Llama layer).
TEST(ActivationsMeasuredTest, CheckpointedLlamaLayerKeepsOneUnit) {
  auto cfg = HfConfig::Parse(
      R"({"model_type":"llama","vocab_size":32000,"hidden_size":1024,"num_attention_heads":16,
          "num_key_value_heads":4,"intermediate_size":2816,"num_hidden_layers":3})",
      "probe");
  auto spec = ModelSpecFromHf(*cfg, "probe");
  ASSERT_TRUE(spec.ok());
  RunShape o;
  o.micro_batch = 2;
  o.seq_len = 1024;
  o.gradient_checkpointing = true;
  auto w = BuildWorkload(*spec, o);
  ASSERT_TRUE(w.ok());
  for (const Layer& l : w->layers) {
    if (l.name == "model.layers.1" || l.name == "model.layers.2") {
      EXPECT_EQ(l.activation_bytes, 2LL * 2 * 1024 * 1024) << l.name;
    }
  }
}

// Outside the blocks: the causal-LM tail saves ln_f's input and statistics, the lm_head input
// and the fp32 log_softmax (4h + 16 + 4V bytes per token, measured 967,684 B for probe A).
TEST(ActivationsMeasuredTest, CausalLmTailMatchesProbe) {
  Workload w = Trace(kGpt2, AttentionImpl::kSdpa, 2, 96);
  const int64_t tail = Saved(w, "transformer.ln_f") + Saved(w, "lm_head") + Saved(w, "loss");
  // lm_head's saved_bytes also holds the bf16 logits the model output keeps (2V per token),
  // which autograd does not save.
  EXPECT_EQ(tail - 192 * 2 * 1000, 967684);
}

}  // namespace
}  // namespace dsplan
