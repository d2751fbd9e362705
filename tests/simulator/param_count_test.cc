// Parameter counts against transformers' sum(p.numel() for p in model.parameters()).
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/hf_config.h"
#include "core/model_catalog.h"
#include "core/model_spec.h"
#include "simulator/workload.h"

namespace dsplan {
namespace {

const std::string kData = DSPLAN_TEST_DATA_DIR;

int64_t CountFromFixture(const std::string& name) {
  auto cfg = HfConfig::Load(kData + "/tests/fixtures/configs/" + name + ".json");
  EXPECT_TRUE(cfg.ok()) << cfg.status().ToString();
  auto spec = ModelSpecFromHf(*cfg, name);
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  auto n = CountParameters(*spec);
  EXPECT_TRUE(n.ok()) << n.status().ToString();
  return n.ok() ? *n : -1;
}

struct Reference {
  const char* name;
  int64_t params;
};

// Measured with transformers 5.17 (the foundation issue); the configs are the hub's
// config.json files, in tests/fixtures/configs/.
constexpr Reference kMeasured[] = {
    {"t5-small", 60506624},          {"t5-base", 222903552},
    {"t5-large", 737668096},         {"t5-3b", 2851598336},
    {"gpt2", 124439808},             {"gpt2-large", 774030080},
    {"gpt2-xl", 1557611200},         {"llama-2-7b", 6738415616},
    {"llama-2-13b", 13015864320},    {"llama-2-70b", 68976648192},
    {"opt-6.7b", 6658473984},        {"bloom-7b1", 7069016064},
};

TEST(ParamCountTest, FixtureConfigsMatchTransformers) {
  for (const auto& r : kMeasured) {
    EXPECT_EQ(CountFromFixture(r.name), r.params) << r.name;
  }
}

TEST(ParamCountTest, CatalogEntriesMatchTransformers) {
  for (const auto& r : kMeasured) {
    auto spec = LoadModel(r.name, kData);
    ASSERT_TRUE(spec.ok()) << r.name << ": " << spec.status().ToString();
    auto n = CountParameters(*spec);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    EXPECT_EQ(*n, r.params) << r.name;
  }
}

TEST(ParamCountTest, EveryCatalogEntryLoadsAndCounts) {
  auto entries = ListCatalog(kData);
  ASSERT_TRUE(entries.ok()) << entries.status().ToString();
  EXPECT_GE(entries->size(), 30u);
  for (const auto& e : *entries) {
    auto spec = LoadModel(e.name, kData);
    ASSERT_TRUE(spec.ok()) << e.name << ": " << spec.status().ToString();
    auto n = CountParameters(*spec);
    ASSERT_TRUE(n.ok()) << e.name << ": " << n.status().ToString();
    EXPECT_GT(*n, 0) << e.name;
    EXPECT_FALSE(e.hf_id.empty()) << e.name << " has no hf_id";
  }
}

// Every catalog model against transformers 5.17 itself: tools/hf_param_counts.py built each
// catalog config on the meta device on the device machine (torch 2.11) and summed
// p.numel() over model.parameters(); the output is the fixture.
TEST(ParamCountTest, EveryCatalogEntryMatchesTransformers517) {
  std::ifstream in(kData + "/tests/fixtures/hf_counts_transformers_5.17.json");
  ASSERT_TRUE(in) << "missing fixture";
  nlohmann::json ref = nlohmann::json::parse(in);
  ASSERT_EQ(ref["transformers"], "5.17.0");
  auto entries = ListCatalog(kData);
  ASSERT_TRUE(entries.ok());
  EXPECT_EQ(ref["counts"].size(), entries->size()) << "re-run tools/hf_param_counts.py";
  for (const auto& [name, count] : ref["counts"].items()) {
    ASSERT_TRUE(count.is_number_integer()) << name << ": " << count;
    auto spec = LoadModel(name, kData);
    ASSERT_TRUE(spec.ok()) << name << ": " << spec.status().ToString();
    auto n = CountParameters(*spec);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    EXPECT_EQ(*n, count.get<int64_t>()) << name;
  }
}

// Hand-derived closed forms for small synthetic configs, one per family, so that every
// family's module structure (biases, norms, tying) is pinned independently of the catalog.
int64_t Count(const std::string& json) {
  auto cfg = HfConfig::Parse(json, "inline");
  EXPECT_TRUE(cfg.ok()) << cfg.status().ToString();
  auto spec = ModelSpecFromHf(*cfg, "inline");
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  if (!spec.ok()) return -1;
  auto n = CountParameters(*spec);
  EXPECT_TRUE(n.ok()) << n.status().ToString();
  return n.ok() ? *n : -1;
}

TEST(ParamCountTest, LlamaClosedForm) {
  const int64_t V = 1000, d = 64, I = 160, L = 3, H = 8, KV = 2, hd = 8;
  const int64_t layer = d * H * hd + 2 * d * KV * hd + H * hd * d + 3 * d * I + 2 * d;
  EXPECT_EQ(Count(R"({"model_type":"llama","vocab_size":1000,"hidden_size":64,
      "intermediate_size":160,"num_hidden_layers":3,"num_attention_heads":8,
      "num_key_value_heads":2})"),
            2 * V * d + L * layer + d);
  // Tied embeddings count once; attention_bias adds q, k, v, o biases.
  EXPECT_EQ(Count(R"({"model_type":"llama","vocab_size":1000,"hidden_size":64,
      "intermediate_size":160,"num_hidden_layers":3,"num_attention_heads":8,
      "num_key_value_heads":2,"tie_word_embeddings":true,"attention_bias":true})"),
            V * d + L * (layer + H * hd + 2 * KV * hd + d) + d);
}

TEST(ParamCountTest, Qwen2HasQkvBiasOnly) {
  const int64_t V = 500, d = 32, I = 64, L = 2, H = 4, KV = 2, hd = 8;
  const int64_t layer = d * H * hd + H * hd + 2 * (d * KV * hd + KV * hd) + H * hd * d +
                        3 * d * I + 2 * d;
  EXPECT_EQ(Count(R"({"model_type":"qwen2","vocab_size":500,"hidden_size":32,
      "intermediate_size":64,"num_hidden_layers":2,"num_attention_heads":4,
      "num_key_value_heads":2,"tie_word_embeddings":false})"),
            2 * V * d + L * layer + d);
}

// Qwen3: no q/k/v/o biases by default, a head_dim-wide RMSNorm weight for q and one for k in
// every layer (modeling_qwen3.py, Qwen3Attention), head_dim independent of the width.
TEST(ParamCountTest, Qwen3HasPerHeadQkNormsAndNoBias) {
  const int64_t V = 500, d = 32, I = 64, L = 2, H = 4, KV = 2, hd = 16;
  const int64_t layer = d * H * hd + 2 * d * KV * hd + H * hd * d + 2 * hd + 3 * d * I + 2 * d;
  EXPECT_EQ(Count(R"({"model_type":"qwen3","vocab_size":500,"hidden_size":32,
      "intermediate_size":64,"num_hidden_layers":2,"num_attention_heads":4,
      "num_key_value_heads":2,"head_dim":16,"tie_word_embeddings":false})"),
            2 * V * d + L * layer + d);
  // attention_bias adds q, k, v and o biases; tied embeddings count once.
  EXPECT_EQ(Count(R"({"model_type":"qwen3","vocab_size":500,"hidden_size":32,
      "intermediate_size":64,"num_hidden_layers":2,"num_attention_heads":4,
      "num_key_value_heads":2,"head_dim":16,"tie_word_embeddings":true,
      "attention_bias":true})"),
            V * d + L * (layer + H * hd + 2 * KV * hd + d) + d);
}

// Phi-3: one fused qkv_proj [(H + 2 KV) hd, d] and one gate_up_proj [2 I, d], no biases, two
// RMSNorms per layer, head_dim = hidden / heads (Phi3Attention, Phi3MLP).
TEST(ParamCountTest, Phi3FusedProjections) {
  const int64_t V = 500, d = 64, I = 96, L = 2, H = 8, KV = 2, hd = 8;
  const int64_t layer = d * (H + 2 * KV) * hd + H * hd * d + d * 2 * I + I * d + 2 * d;
  EXPECT_EQ(Count(R"({"model_type":"phi3","vocab_size":500,"hidden_size":64,
      "intermediate_size":96,"num_hidden_layers":2,"num_attention_heads":8,
      "num_key_value_heads":2})"),
            2 * V * d + L * layer + d);
  // Tied (Phi-4-mini): the table counts once.
  EXPECT_EQ(Count(R"({"model_type":"phi3","vocab_size":500,"hidden_size":64,
      "intermediate_size":96,"num_hidden_layers":2,"num_attention_heads":8,
      "num_key_value_heads":2,"tie_word_embeddings":true})"),
            V * d + L * layer + d);
}

// Gemma 2: four RMSNorms per block (input, post-attention, pre- and post-feedforward), tied
// embeddings, head_dim given (modular_gemma2.py, Gemma2DecoderLayer).
TEST(ParamCountTest, Gemma2FourNormsPerBlock) {
  const int64_t V = 500, d = 64, I = 96, L = 2, H = 4, KV = 2, hd = 32;
  const int64_t layer = d * H * hd + 2 * d * KV * hd + H * hd * d + 3 * d * I + 4 * d;
  EXPECT_EQ(Count(R"({"model_type":"gemma2","vocab_size":500,"hidden_size":64,
      "intermediate_size":96,"num_hidden_layers":2,"num_attention_heads":4,
      "num_key_value_heads":2,"head_dim":32})"),
            V * d + L * layer + d);
}

// Gemma 3's block is Gemma 2's with a weight of head_dim in each of q_norm and k_norm
// (modular_gemma3.py, Gemma3Attention); the scaled embedding's factor is a buffer, not a
// parameter.
TEST(ParamCountTest, Gemma3PerHeadNorms) {
  const int64_t V = 500, d = 64, I = 96, L = 3, H = 4, KV = 1, hd = 32;
  const int64_t layer = d * H * hd + 2 * d * KV * hd + H * hd * d + 3 * d * I + 4 * d + 2 * hd;
  EXPECT_EQ(Count(R"({"model_type":"gemma3_text","vocab_size":500,"hidden_size":64,
      "intermediate_size":96,"num_hidden_layers":3,"num_attention_heads":4,
      "num_key_value_heads":1,"head_dim":32})"),
            V * d + L * layer + d);
}

// Qwen3-MoE: Qwen3's attention (q/k norms of head_dim), a router [E, d] and fused experts of
// moe_intermediate_size on the sparse layers, a dense gated MLP of intermediate_size on the
// others: with decoder_sparse_step 2, layers 1 and 3 are sparse, and mlp_only_layers [3] makes
// 3 dense.
TEST(ParamCountTest, Qwen3MoeSparseAndDenseLayers) {
  const int64_t V = 500, d = 32, I = 64, Im = 16, L = 4, H = 4, KV = 2, hd = 16, E = 8;
  const int64_t attn = d * H * hd + 2 * d * KV * hd + H * hd * d + 2 * hd + 2 * d;
  const int64_t dense = 3 * d * I, sparse = d * E + E * 3 * d * Im;
  EXPECT_EQ(Count(R"({"model_type":"qwen3_moe","vocab_size":500,"hidden_size":32,
      "intermediate_size":64,"moe_intermediate_size":16,"num_hidden_layers":4,
      "num_attention_heads":4,"num_key_value_heads":2,"head_dim":16,"num_experts":8,
      "num_experts_per_tok":2,"decoder_sparse_step":2,"mlp_only_layers":[3]})"),
            2 * V * d + L * attn + 3 * dense + sparse + d);
}

TEST(ParamCountTest, MixtralExpertsAndRouter) {
  const int64_t V = 500, d = 32, I = 48, L = 2, H = 4, KV = 1, hd = 8, E = 4;
  const int64_t attn = d * H * hd + 2 * d * KV * hd + H * hd * d;
  const int64_t moe = d * E + E * 3 * d * I;
  EXPECT_EQ(Count(R"({"model_type":"mixtral","vocab_size":500,"hidden_size":32,
      "intermediate_size":48,"num_hidden_layers":2,"num_attention_heads":4,
      "num_key_value_heads":1,"num_local_experts":4,"num_experts_per_tok":2})"),
            2 * V * d + L * (attn + moe + 2 * d) + d);
}

TEST(ParamCountTest, GemmaExplicitHeadDimAndTiedHead) {
  const int64_t V = 300, d = 48, I = 96, L = 2, H = 2, KV = 1, hd = 32;
  const int64_t layer = d * H * hd + 2 * d * KV * hd + H * hd * d + 3 * d * I + 2 * d;
  EXPECT_EQ(Count(R"({"model_type":"gemma","vocab_size":300,"hidden_size":48,
      "intermediate_size":96,"num_hidden_layers":2,"num_attention_heads":2,
      "num_key_value_heads":1,"head_dim":32})"),
            V * d + L * layer + d);
}

TEST(ParamCountTest, FalconVariants) {
  const int64_t V = 400, d = 64, L = 2, H = 8, hd = 8;
  // Multi-query, parallel attention, no bias, one layer norm (falcon-7b style).
  const int64_t mq = 2 * d + d * (d + 2 * hd) + d * d + 2 * d * 4 * d;
  EXPECT_EQ(Count(R"({"model_type":"falcon","vocab_size":400,"hidden_size":64,
      "num_hidden_layers":2,"num_attention_heads":8,"multi_query":true,"parallel_attn":true,
      "bias":false,"new_decoder_architecture":false})"),
            V * d + L * mq + 2 * d);
  // New decoder architecture: ln_attn + ln_mlp, (2 * kv + heads) * hd fused QKV.
  const int64_t KV = 2;
  const int64_t na = 4 * d + d * (2 * KV + H) * hd + d * d + 2 * d * 4 * d;
  EXPECT_EQ(Count(R"({"model_type":"falcon","vocab_size":400,"hidden_size":64,
      "num_hidden_layers":2,"num_attention_heads":8,"num_kv_heads":2,
      "new_decoder_architecture":true,"bias":false})"),
            V * d + L * na + 2 * d);
}

TEST(ParamCountTest, PhiBiasesEverywhereAndHeadBias) {
  const int64_t V = 300, d = 32, I = 128, L = 2;
  const int64_t layer = 2 * d + 4 * (d * d + d) + (d * I + I) + (I * d + d);
  EXPECT_EQ(Count(R"({"model_type":"phi","vocab_size":300,"hidden_size":32,
      "intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4})"),
            V * d + L * layer + 2 * d + V * d + V);
}

TEST(ParamCountTest, GptJUntiedHeadWithBias) {
  const int64_t V = 300, d = 32, L = 2;
  const int64_t layer = 2 * d + 4 * d * d + (d * 4 * d + 4 * d) + (4 * d * d + d);
  EXPECT_EQ(Count(R"({"model_type":"gptj","vocab_size":300,"n_embd":32,"n_layer":2,
      "n_head":4,"rotary_dim":4,"n_positions":128})"),
            V * d + L * layer + 2 * d + V * d + V);
}

TEST(ParamCountTest, GptNeoXUntiedHead) {
  const int64_t V = 300, d = 32, I = 96, L = 2;
  const int64_t layer = 4 * d + (d * 3 * d + 3 * d) + (d * d + d) + (d * I + I) + (I * d + d);
  EXPECT_EQ(Count(R"({"model_type":"gpt_neox","vocab_size":300,"hidden_size":32,
      "intermediate_size":96,"num_hidden_layers":2,"num_attention_heads":4})"),
            V * d + L * layer + 2 * d + V * d);
}

TEST(ParamCountTest, OptProjectionsAndPositionOffset) {
  // opt-350m style: word_embed_proj_dim != hidden, post-LN, so no final layer norm.
  const int64_t V = 300, d = 64, p = 32, F = 128, L = 2, P = 100;
  const int64_t layer = 4 * (d * d + d) + 2 * d + (d * F + F) + (F * d + d) + 2 * d;
  EXPECT_EQ(Count(R"({"model_type":"opt","vocab_size":300,"hidden_size":64,
      "word_embed_proj_dim":32,"ffn_dim":128,"num_hidden_layers":2,"num_attention_heads":4,
      "max_position_embeddings":100,"do_layer_norm_before":false})"),
            V * p + (P + 2) * d + p * d + d * p + L * layer);
}

TEST(ParamCountTest, BertMaskedLmHead) {
  const int64_t V = 300, d = 32, I = 64, L = 2, P = 64, TV = 2;
  const int64_t layer = 4 * (d * d + d) + 2 * d + (d * I + I) + (I * d + d) + 2 * d;
  const int64_t emb = V * d + P * d + TV * d + 2 * d;
  const int64_t head = (d * d + d) + 2 * d + V;
  EXPECT_EQ(Count(R"({"model_type":"bert","vocab_size":300,"hidden_size":32,
      "intermediate_size":64,"num_hidden_layers":2,"num_attention_heads":4,
      "max_position_embeddings":64})"),
            emb + L * layer + head);
}

TEST(ParamCountTest, T5GatedAndAsymmetricDecoder) {
  // flan-t5 style: gated-gelu, 3 encoder and 2 decoder blocks, d_kv * heads != d. transformers
  // 5.17's T5Config forces tie_word_embeddings=True (a false only disables the output rescale),
  // so a model built from this config has no separate lm_head (measured by the probe).
  const int64_t V = 300, d = 32, kv = 16, H = 4, F = 64, Le = 3, Ld = 2, NB = 32;
  const int64_t inner = kv * H;
  const int64_t attn = 4 * d * inner + d;
  const int64_t ff = 3 * d * F + d;
  EXPECT_EQ(Count(R"({"model_type":"t5","vocab_size":300,"d_model":32,"d_kv":16,"num_heads":4,
      "d_ff":64,"num_layers":3,"num_decoder_layers":2,"feed_forward_proj":"gated-gelu",
      "tie_word_embeddings":false})"),
            V * d + Le * (attn + ff) + NB * H + d + Ld * (2 * attn + ff) + NB * H + d);
}

TEST(ParamCountTest, BloomEmbeddingLayerNorm) {
  const int64_t V = 300, d = 32, L = 2;
  const int64_t layer = 2 * d + (d * 3 * d + 3 * d) + (d * d + d) + 2 * d + (d * 4 * d + 4 * d) +
                        (4 * d * d + d);
  EXPECT_EQ(Count(R"({"model_type":"bloom","vocab_size":300,"n_embed":32,"n_layer":2,
      "n_head":4})"),
            V * d + 2 * d + L * layer + 2 * d);
}

}  // namespace
}  // namespace dsplan
