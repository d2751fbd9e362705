// HF config import and the catalog: defaults, aliases, and every kind of bad input.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/model_catalog.h"
#include "core/model_spec.h"

namespace dsplan {
namespace {

const std::string kData = DSPLAN_TEST_DATA_DIR;

Result<ModelSpec> FromJson(const std::string& json) {
  auto cfg = HfConfig::Parse(json, "config.json");
  if (!cfg.ok()) return cfg.status();
  return ModelSpecFromHf(*cfg, "test");
}

bool Mentions(const Status& s, const std::string& text) {
  return s.message().find(text) != std::string::npos;
}

// Each |bad| keys added to |head| make a config that is refused with a message naming |key|.
void ExpectRefused(const std::string& head,
                   std::initializer_list<std::pair<const char*, const char*>> cases) {
  for (const auto& [bad, key] : cases) {
    auto e = FromJson("{" + head + ", " + bad + "}");
    ASSERT_FALSE(e.ok()) << bad;
    EXPECT_TRUE(Mentions(e.status(), key)) << e.status().ToString();
  }
}

TEST(ModelSpecTest, AbsentKeysTakeTransformersDefaults) {
  auto s = FromJson(R"({"model_type": "llama"})");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->hidden_size, 4096);
  EXPECT_EQ(s->intermediate_size, 11008);
  EXPECT_EQ(s->num_kv_heads, 32);  // num_key_value_heads None -> num_attention_heads
  EXPECT_EQ(s->head_dim, 128);
  EXPECT_FALSE(s->tie_word_embeddings);
  auto t5 = FromJson(R"({"model_type": "t5"})");
  ASSERT_TRUE(t5.ok());
  EXPECT_EQ(t5->num_decoder_layers, 6);  // None -> num_layers
  EXPECT_TRUE(t5->tie_word_embeddings);
  EXPECT_EQ(t5->activation, Activation::kRelu);
}

// Qwen3Config (configuration_qwen3.py): head_dim is 128 whatever the width, q/k/v/o have biases
// only with attention_bias, every head's q and k pass an RMSNorm, and a layer slides its window
// only with use_sliding_window and from max_window_layers on (or as layer_types says).
TEST(ModelSpecTest, Qwen3DefaultsAndSlidingLayers) {
  auto q = FromJson(R"({"model_type": "qwen3", "hidden_size": 1024, "num_attention_heads": 16,
                        "num_key_value_heads": 8, "num_hidden_layers": 28})");
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ(q->family, Family::kQwen3);
  EXPECT_EQ(q->head_dim, 128);  // not 1024 / 16
  EXPECT_FALSE(q->attention_bias);
  EXPECT_EQ(q->qk_norm, QkNorm::kRms);
  EXPECT_EQ(q->sliding_window, 0);
  EXPECT_EQ(q->vocab_size, 151936);
  EXPECT_FALSE(q->tie_word_embeddings);
  // Qwen2Config and Qwen3Config alike: with use_sliding_window the layers from
  // max_window_layers on slide; when that covers every layer, none does.
  for (const std::string type : {"qwen2", "qwen3"}) {
    const std::string head = R"({"model_type": ")" + type + R"(", "num_hidden_layers": 28,
        "use_sliding_window": true, "sliding_window": 2048, "max_window_layers": )";
    auto all_full = FromJson(head + "28}");
    ASSERT_TRUE(all_full.ok()) << type;
    EXPECT_EQ(all_full->sliding_window, 0) << type;
    auto some = FromJson(head + "20}");
    ASSERT_TRUE(some.ok()) << type;
    EXPECT_EQ(some->sliding_window, 2048) << type;
    ASSERT_EQ(some->sliding_layers.size(), 28u) << type;
    EXPECT_FALSE(some->sliding_layers[19]) << type;
    EXPECT_TRUE(some->sliding_layers[20]) << type;
  }
  auto off = FromJson(R"({"model_type": "qwen3", "num_hidden_layers": 28,
      "use_sliding_window": false, "sliding_window": 2048, "max_window_layers": 0})");
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off->sliding_window, 0);
  auto typed = FromJson(R"({"model_type": "qwen3", "num_hidden_layers": 2, "sliding_window": 512,
      "use_sliding_window": true, "layer_types": ["full_attention", "sliding_attention"]})");
  ASSERT_TRUE(typed.ok());
  EXPECT_EQ(typed->sliding_window, 512);
  EXPECT_EQ(typed->sliding_layers, (std::vector<bool>{false, true}));
  // layer_types without use_sliding_window: sliding_window is None, nothing slides.
  auto typed_off = FromJson(R"({"model_type": "qwen3", "num_hidden_layers": 2,
      "sliding_window": 512, "layer_types": ["full_attention", "sliding_attention"]})");
  ASSERT_TRUE(typed_off.ok());
  EXPECT_EQ(typed_off->sliding_window, 0);
  ExpectRefused(R"("model_type": "qwen3", "num_hidden_layers": 2)",
                {{R"("layer_types": "sliding_attention")", "layer_types"},
                 {R"("layer_types": ["full_attention"])", "layer_types"},
                 {R"("layer_types": ["full_attention", 7])", "layer_types"},
                 {R"("layer_types": ["full_attention", "chunked_attention"])", "layer_types"}});
  auto zero = FromJson(R"({"model_type": "qwen3", "head_dim": 0})");
  ASSERT_FALSE(zero.ok());
  EXPECT_TRUE(Mentions(zero.status(), "head_dim"));
  auto biased = FromJson(R"({"model_type": "qwen3", "attention_bias": true})");
  ASSERT_TRUE(biased.ok());
  EXPECT_TRUE(biased->attention_bias);
  // Phi's optional per-head norm is a LayerNorm.
  auto phi = FromJson(R"({"model_type": "phi", "qk_layernorm": true})");
  ASSERT_TRUE(phi.ok());
  EXPECT_EQ(phi->qk_norm, QkNorm::kLayerNorm);
}

// Phi3Config: Phi-3-mini's shape by default, KV heads = heads, head_dim = hidden / heads, rotary
// over partial_rotary_factor of it (Phi-4-mini: 0.75), resid_pdrop, no sliding window.
TEST(ModelSpecTest, Phi3Defaults) {
  auto p = FromJson(R"({"model_type": "phi3"})");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->family, Family::kPhi3);
  EXPECT_EQ(p->vocab_size, 32064);
  EXPECT_EQ(p->hidden_size, 3072);
  EXPECT_EQ(p->num_kv_heads, 32);
  EXPECT_EQ(p->head_dim, 96);
  EXPECT_EQ(p->rotary_dim, 96);
  EXPECT_EQ(p->sliding_window, 0);
  EXPECT_FALSE(p->tie_word_embeddings);
  auto mini4 = FromJson(R"({"model_type": "phi3", "hidden_size": 3072, "num_attention_heads": 24,
      "num_key_value_heads": 8, "partial_rotary_factor": 0.75, "resid_pdrop": 0.1,
      "sliding_window": 262144})");
  ASSERT_TRUE(mini4.ok());
  EXPECT_EQ(mini4->head_dim, 128);
  EXPECT_EQ(mini4->rotary_dim, 96);
  EXPECT_DOUBLE_EQ(mini4->hidden_dropout, 0.1);
  EXPECT_EQ(mini4->sliding_window, 262144);
  auto bad = FromJson(R"({"model_type": "phi3", "resid_pdrop": 1.5})");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(Mentions(bad.status(), "resid_pdrop"));
}

// Gemma2Config: gemma-2-2b's shape by default, soft-capping 50 (scores) and 30 (logits), null
// turns either off; a 4096 window on every other layer from the first, or as layer_types says;
// an embedding model (use_bidirectional_attention) is not a causal LM.
TEST(ModelSpecTest, Gemma2DefaultsAndLayerTypes) {
  auto g = FromJson(R"({"model_type": "gemma2"})");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->family, Family::kGemma2);
  EXPECT_EQ(g->hidden_size, 2304);
  EXPECT_EQ(g->num_layers, 26);
  EXPECT_EQ(g->num_kv_heads, 4);
  EXPECT_EQ(g->head_dim, 256);
  EXPECT_TRUE(g->tie_word_embeddings);
  EXPECT_EQ(g->activation, Activation::kGeluTanh);
  EXPECT_DOUBLE_EQ(g->attn_softcap, 50.0);
  EXPECT_DOUBLE_EQ(g->final_softcap, 30.0);
  EXPECT_EQ(g->sliding_window, 4096);
  ASSERT_EQ(g->sliding_layers.size(), 26u);
  EXPECT_TRUE(g->sliding_layers[0]);
  EXPECT_FALSE(g->sliding_layers[1]);
  EXPECT_TRUE(g->sliding_layers[24]);
  auto off = FromJson(R"({"model_type": "gemma2", "final_logit_softcapping": null,
      "attn_logit_softcapping": null, "num_hidden_layers": 2,
      "layer_types": ["full_attention", "full_attention"]})");
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off->final_softcap, 0);
  EXPECT_EQ(off->attn_softcap, 0);
  EXPECT_FALSE(off->sliding_layers[0]);
  ExpectRefused(R"("model_type": "gemma2")",
                {{R"("use_bidirectional_attention": true)", "use_bidirectional_attention"},
                 {R"("final_logit_softcapping": -1)", "final_logit_softcapping"},
                 {R"("num_hidden_layers": 2, "layer_types": ["full_attention"])", "layer_types"},
                 {R"("num_hidden_layers": 100000000)", "num_hidden_layers"}});
}

// Gemma3TextConfig (model_type gemma3_text): Gemma 2's reader with no caps by default, a
// Gemma-style RMSNorm over each head's q and k, and a full layer after every five sliding ones
// (sliding_window_pattern, default 6), unless layer_types lists them. model_type gemma3 is the
// vision-language model: refused with the way to plan its language model.
TEST(ModelSpecTest, Gemma3TextDefaultsAndPattern) {
  auto g = FromJson(R"({"model_type": "gemma3_text"})");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->family, Family::kGemma3);
  EXPECT_EQ(g->vocab_size, 262208);
  EXPECT_EQ(g->head_dim, 256);
  EXPECT_EQ(g->qk_norm, QkNorm::kRmsGemma);
  EXPECT_EQ(g->attn_softcap, 0);
  EXPECT_EQ(g->final_softcap, 0);
  EXPECT_EQ(g->sliding_window, 4096);
  ASSERT_EQ(g->sliding_layers.size(), 26u);
  for (size_t i = 0; i < 26; ++i) EXPECT_EQ(g->sliding_layers[i], (i + 1) % 6 != 0) << i;
  auto two = FromJson(R"({"model_type": "gemma3_text", "num_hidden_layers": 4,
      "sliding_window_pattern": 2, "final_logit_softcapping": 30.0})");
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->sliding_layers, (std::vector<bool>{true, false, true, false}));
  EXPECT_DOUBLE_EQ(two->final_softcap, 30.0);
  auto listed = FromJson(R"({"model_type": "gemma3_text", "num_hidden_layers": 2,
      "sliding_window_pattern": 2, "layer_types": ["full_attention", "sliding_attention"]})");
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->sliding_layers, (std::vector<bool>{false, true}));
  ExpectRefused(R"("model_type": "gemma3_text")",
                {{R"("sliding_window_pattern": 0)", "sliding_window_pattern"},
                 {R"("use_bidirectional_attention": true)", "use_bidirectional_attention"},
                 {R"("head_dim": -4)", "head_dim"}});
  auto vlm = FromJson(R"({"model_type": "gemma3", "text_config": {"hidden_size": 2560}})");
  ASSERT_FALSE(vlm.ok());
  EXPECT_TRUE(Mentions(vlm.status(), "text_config"));
  EXPECT_TRUE(Mentions(vlm.status(), "gemma3_text"));
}

// Qwen3MoeConfig: 128 experts, top 8, experts of 768, no head_dim default of its own (hidden /
// heads), Qwen3's q/k norms, the window on every layer only with use_sliding_window; sparse
// layers by decoder_sparse_step and mlp_only_layers (indices outside the model match no layer,
// as in transformers).
TEST(ModelSpecTest, Qwen3MoeDefaultsAndSparseLayers) {
  auto m = FromJson(R"({"model_type": "qwen3_moe"})");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->family, Family::kQwen3Moe);
  EXPECT_EQ(m->num_experts, 128);
  EXPECT_EQ(m->experts_per_token, 8);
  EXPECT_EQ(m->moe_intermediate_size, 768);
  EXPECT_EQ(m->head_dim, 64);
  EXPECT_EQ(m->qk_norm, QkNorm::kRms);
  EXPECT_EQ(m->sliding_window, 0);
  EXPECT_FALSE(m->router_aux_loss);
  ASSERT_EQ(m->moe_layers.size(), 24u);
  for (int64_t i = 0; i < 24; ++i) EXPECT_TRUE(m->sparse_layer(i)) << i;
  auto step = FromJson(R"({"model_type": "qwen3_moe", "num_hidden_layers": 4,
      "decoder_sparse_step": 2, "mlp_only_layers": [3, 9], "use_sliding_window": true,
      "output_router_logits": true})");
  ASSERT_TRUE(step.ok());
  EXPECT_EQ(step->moe_layers, (std::vector<bool>{false, true, false, false}));
  EXPECT_EQ(step->sliding_window, 4096);
  EXPECT_TRUE(step->sliding_layers.empty());
  EXPECT_TRUE(step->router_aux_loss);
  auto dense = FromJson(R"({"model_type": "qwen3_moe", "num_experts": 0})");
  ASSERT_TRUE(dense.ok());
  EXPECT_FALSE(dense->sparse_layer(0));
  ExpectRefused(R"("model_type": "qwen3_moe")",
                {{R"("decoder_sparse_step": 0)", "decoder_sparse_step"},
                 {R"("mlp_only_layers": [1.5])", "mlp_only_layers"},
                 {R"("mlp_only_layers": 3)", "mlp_only_layers"},
                 {R"("moe_intermediate_size": 0)", "moe_intermediate_size"},
                 {R"("num_experts": -1)", "num_experts"},
                 {R"("num_experts": 4, "num_experts_per_tok": 5)", "num_experts_per_tok"},
                 {R"("num_experts_per_tok": 0)", "num_experts_per_tok"}});
}

TEST(ModelSpecTest, AttributeMapAliases) {
  auto g = FromJson(R"({"model_type": "gpt2", "hidden_size": 256, "num_hidden_layers": 3,
                        "num_attention_heads": 4})");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->hidden_size, 256);
  EXPECT_EQ(g->num_layers, 3);
  EXPECT_EQ(g->intermediate_size, 1024);  // n_inner None -> 4 * n_embd
  auto b = FromJson(R"({"model_type": "bloom", "n_embed": 128, "n_layer": 2, "n_head": 4})");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->hidden_size, 128);
}

TEST(ModelSpecTest, T5FeedForwardProj) {
  auto g = FromJson(R"({"model_type": "t5", "feed_forward_proj": "gated-gelu"})");
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(g->gated_mlp);
  EXPECT_EQ(g->activation, Activation::kGeluNew);
  auto s = FromJson(R"({"model_type": "t5", "feed_forward_proj": "gated-silu"})");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->activation, Activation::kSilu);
  auto bad = FromJson(R"({"model_type": "t5", "feed_forward_proj": "double-gated-gelu"})");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(Mentions(bad.status(), "feed_forward_proj"));
}

TEST(ModelSpecTest, FalconMultiQueryIgnoresNumKvHeads) {
  auto f = FromJson(R"({"model_type": "falcon", "hidden_size": 256, "num_attention_heads": 8,
                        "num_kv_heads": 8, "multi_query": true,
                        "new_decoder_architecture": false})");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->num_kv_heads, 1);
}

TEST(ModelSpecTest, UnsupportedModelTypeListsSupported) {
  auto s = FromJson(R"({"model_type": "mamba"})");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Status::Code::kUnsupported);
  EXPECT_TRUE(Mentions(s.status(), "mamba"));
  EXPECT_TRUE(Mentions(s.status(), "gpt_neox"));
  EXPECT_TRUE(Mentions(s.status(), "mixtral"));
}

TEST(ModelSpecTest, MissingModelTypeIsNamed) {
  auto s = FromJson(R"({"hidden_size": 12})");
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Mentions(s.status(), "model_type"));
}

TEST(ModelSpecTest, WrongTypeNamesFileAndKey) {
  auto s = FromJson(R"({"model_type": "gpt2", "n_embd": "wide"})");
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Mentions(s.status(), "config.json"));
  EXPECT_TRUE(Mentions(s.status(), "'n_embd'"));
  auto f = FromJson(R"({"model_type": "llama", "num_hidden_layers": 2.5})");
  ASSERT_FALSE(f.ok());
  EXPECT_TRUE(Mentions(f.status(), "num_hidden_layers"));
}

TEST(ModelSpecTest, ImpossibleSizes) {
  auto zero = FromJson(R"({"model_type": "llama", "num_hidden_layers": 0})");
  ASSERT_FALSE(zero.ok());
  EXPECT_TRUE(Mentions(zero.status(), "num_hidden_layers"));
  auto neg = FromJson(R"({"model_type": "gpt2", "vocab_size": -1})");
  ASSERT_FALSE(neg.ok());
  EXPECT_TRUE(Mentions(neg.status(), "vocab_size"));
  auto heads = FromJson(R"({"model_type": "gpt2", "n_embd": 100, "n_head": 3})");
  ASSERT_FALSE(heads.ok());
  EXPECT_TRUE(Mentions(heads.status(), "not divisible"));
  auto llama = FromJson(R"({"model_type": "llama", "hidden_size": 100,
                            "num_attention_heads": 3})");
  ASSERT_FALSE(llama.ok());
  EXPECT_TRUE(Mentions(llama.status(), "not divisible"));
  // A negative width is reported as such, not as a width the heads do not divide.
  auto negative_width = FromJson(R"({"model_type": "llama", "hidden_size": -5})");
  ASSERT_FALSE(negative_width.ok());
  EXPECT_TRUE(Mentions(negative_width.status(), "must be a positive integer, found -5"))
      << negative_width.status().message();
  auto kv = FromJson(R"({"model_type": "llama", "num_attention_heads": 32,
                         "num_key_value_heads": 5})");
  ASSERT_FALSE(kv.ok());
  EXPECT_TRUE(Mentions(kv.status(), "num_key_value_heads"));
  auto zero_heads = FromJson(R"({"model_type": "gpt2", "n_head": 0})");
  ASSERT_FALSE(zero_heads.ok());
  auto drop = FromJson(R"({"model_type": "gpt2", "resid_pdrop": 1.5})");
  ASSERT_FALSE(drop.ok());
  EXPECT_TRUE(Mentions(drop.status(), "resid_pdrop"));
  auto moe = FromJson(R"({"model_type": "mixtral", "num_local_experts": 2,
                          "num_experts_per_tok": 3})");
  ASSERT_FALSE(moe.ok());
}

TEST(ModelSpecTest, MalformedJsonNamesTheFile) {
  auto c = HfConfig::Parse("{\"model_type\": \"gpt2\",", "my/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(Mentions(c.status(), "my/config.json"));
  EXPECT_TRUE(Mentions(c.status(), "malformed JSON"));
  auto arr = HfConfig::Parse("[1, 2]", "a.json");
  ASSERT_FALSE(arr.ok());
}

TEST(ModelCatalogTest, UnknownNameSuggestsNearNames) {
  auto s = LoadModel("llama-2-7", kData);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Status::Code::kNotFound);
  EXPECT_TRUE(Mentions(s.status(), "llama-2-7b"));
  auto t = LoadModel("t5-3", kData);
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(Mentions(t.status(), "t5-3b"));
  EXPECT_TRUE(Mentions(t.status(), "config.json"));
}

// A hub id that no catalog entry has: dsplan reads no network, so the message says how to get
// the config; a catalog entry's hub id loads that entry.
TEST(ModelCatalogTest, HubIdOutsideTheCatalogSaysToFetchTheConfig) {
  auto s = LoadModel("allenai/OLMo-2-1124-7B", kData);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Status::Code::kNotFound);
  EXPECT_TRUE(Mentions(s.status(), "does not download"));
  EXPECT_TRUE(Mentions(s.status(), "huggingface-cli download allenai/OLMo-2-1124-7B config.json"));
  auto g = LoadModel("google/gemma-2-2b", kData);  // in the catalog since session 40
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->name, "gemma-2-2b");
  auto q = LoadModel("Qwen/Qwen2-7B", kData);
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ(q->name, "qwen2-7b");
  auto rel = LoadModel("./no/such/config.json", kData);
  ASSERT_FALSE(rel.ok());
  EXPECT_FALSE(Mentions(rel.status(), "does not download"));
}

TEST(ModelCatalogTest, PathsLoadConfigJsonFilesAndFolders) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / "dsplan_model_folder_test";
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"model_type": "gpt2", "n_layer": 2})";
  auto folder = LoadModel(dir.string(), kData);
  ASSERT_TRUE(folder.ok()) << folder.status().ToString();
  EXPECT_EQ(folder->num_layers, 2);
  auto file = LoadModel((dir / "config.json").string(), kData);
  ASSERT_TRUE(file.ok());
  auto missing = LoadModel((dir / "nope.json").string(), kData);
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(Mentions(missing.status(), "nope.json"));
  fs::create_directories(dir / "empty");
  auto empty = LoadModel((dir / "empty").string(), kData);
  ASSERT_FALSE(empty.ok());
  EXPECT_TRUE(Mentions(empty.status(), "config.json"));
  fs::remove_all(dir);
}

TEST(ModelCatalogTest, CatalogFilesRejectUnknownKeys) {
  namespace fs = std::filesystem;
  fs::path f = fs::temp_directory_path() / "dsplan_bad_catalog.yaml";
  std::ofstream(f) << "name: x\nconfgi:\n  model_type: gpt2\n";
  auto c = LoadCatalogConfig(f.string());
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(Mentions(c.status(), "confgi"));
  std::ofstream(f) << "name: x\nconfig: [unclosed\n";
  auto m = LoadCatalogConfig(f.string());
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(Mentions(m.status(), "malformed YAML"));
  fs::remove(f);
}

TEST(ModelCatalogTest, CatalogYamlTypesScalarsLikeJson) {
  auto c = LoadCatalogConfig(kData + "/models/llama-2-7b.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->json()["hidden_size"].is_number_integer());
  EXPECT_TRUE(c->json()["rms_norm_eps"].is_number_float());
  EXPECT_TRUE(c->json()["tie_word_embeddings"].is_boolean());
  EXPECT_TRUE(c->json()["model_type"].is_string());
}

}  // namespace
}  // namespace dsplan
