#include "core/model_spec.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

#include <fmt/format.h>

#include "core/text.h"

namespace dsplan {
namespace {

// The most blocks a config may have (CheckSizes says so; per-layer tables are not built past it).
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxExperts = 4096;  // num_local_experts / num_experts

struct FamilyInfo {
  Family family;
  const char* model_type;
  const char* model_class;
};

constexpr std::array<FamilyInfo, 19> kFamilies = {{
    {Family::kT5, "t5", "T5ForConditionalGeneration"},
    {Family::kGpt2, "gpt2", "GPT2LMHeadModel"},
    {Family::kGptJ, "gptj", "GPTJForCausalLM"},
    {Family::kGptNeoX, "gpt_neox", "GPTNeoXForCausalLM"},
    {Family::kOpt, "opt", "OPTForCausalLM"},
    {Family::kBloom, "bloom", "BloomForCausalLM"},
    {Family::kLlama, "llama", "LlamaForCausalLM"},
    {Family::kMistral, "mistral", "MistralForCausalLM"},
    {Family::kQwen2, "qwen2", "Qwen2ForCausalLM"},
    {Family::kQwen3, "qwen3", "Qwen3ForCausalLM"},
    {Family::kQwen3Moe, "qwen3_moe", "Qwen3MoeForCausalLM"},
    {Family::kMixtral, "mixtral", "MixtralForCausalLM"},
    {Family::kFalcon, "falcon", "FalconForCausalLM"},
    {Family::kPhi, "phi", "PhiForCausalLM"},
    {Family::kPhi3, "phi3", "Phi3ForCausalLM"},
    {Family::kGemma, "gemma", "GemmaForCausalLM"},
    {Family::kGemma2, "gemma2", "Gemma2ForCausalLM"},
    {Family::kGemma3, "gemma3_text", "Gemma3ForCausalLM"},
    {Family::kBert, "bert", "BertForMaskedLM"},
}};

const FamilyInfo& InfoOf(Family f) {
  for (const auto& i : kFamilies)
    if (i.family == f) return i;
  return kFamilies[0];
}

// Maps an ACT2FN name to the implementation that decides what autograd saves.
Result<Activation> ParseActivation(const HfConfig& c, const char* key, const std::string& name) {
  static const std::array<std::pair<const char*, Activation>, 9> kNames = {{
      {"relu", Activation::kRelu},
      {"gelu", Activation::kGelu},
      {"gelu_new", Activation::kGeluNew},
      {"gelu_pytorch_tanh", Activation::kGeluTanh},
      {"gelu_fast", Activation::kGeluFast},
      {"silu", Activation::kSilu},
      {"swish", Activation::kSilu},
      {"gelu_accurate", Activation::kGeluNew},
      {"bloom_gelu", Activation::kBloomGelu},
  }};
  for (const auto& [n, a] : kNames)
    if (name == n) return a;
  return c.Error(key, fmt::format("names activation {}, which dsplan does not model; supported: "
                                  "relu, gelu, gelu_new, gelu_pytorch_tanh, gelu_fast, silu, swish",
                                  Quote(name)));
}

// Reads into |spec| field by field; each family function mirrors its configuration_*.py.
class Reader {
 public:
  Reader(const HfConfig& c, ModelSpec* s) : c_(c), s_(s) {}
  Status status() const { return st_; }

  // Every integer a config gives is a size or count; one beyond int32 is refused here, so that
  // the derived sizes below (4 * hidden_size, head_dim * heads) cannot overflow before
  // CheckSizes bounds each of them.
  int64_t Int(std::initializer_list<const char*> keys, int64_t def) {
    auto r = c_.Int(keys, def);
    return Bound(keys, Take(std::move(r), def), def);
  }
  std::optional<int64_t> OptInt(std::initializer_list<const char*> keys) {
    auto r = c_.OptInt(keys);
    std::optional<int64_t> v = Take(std::move(r), std::optional<int64_t>());
    if (v) v = Bound(keys, *v, 0);
    return v;
  }
  // A fraction in [0, 1] (partial_rotary_factor, rotary_pct).
  double Fraction(std::initializer_list<const char*> keys, double def) {
    const double v = Double(keys, def);
    if (!(v >= 0 && v <= 1)) {
      Fail(c_.Error(*keys.begin(), fmt::format("must be between 0 and 1, found {}", v)));
      return def;
    }
    return v;
  }
  double Double(std::initializer_list<const char*> keys, double def) {
    auto r = c_.Double(keys, def);
    return Take(std::move(r), def);
  }
  std::optional<double> OptDouble(std::initializer_list<const char*> keys) {
    auto r = c_.OptDouble(keys);
    return Take(std::move(r), std::optional<double>());
  }
  bool Bool(std::initializer_list<const char*> keys, bool def) {
    auto r = c_.Bool(keys, def);
    return Take(std::move(r), def);
  }
  std::string String(std::initializer_list<const char*> keys, const std::string& def) {
    auto r = c_.String(keys, def);
    return Take(std::move(r), def);
  }
  Activation Act(const char* key, const std::string& def) {
    std::string name = String({key}, def);
    if (!st_.ok()) return Activation::kGelu;
    auto r = ParseActivation(c_, key, name);
    return Take(std::move(r), Activation::kGelu);
  }
  void Fail(Status s) {
    if (st_.ok()) st_ = std::move(s);
  }

 private:
  int64_t Bound(std::initializer_list<const char*> keys, int64_t v, int64_t def) {
    constexpr int64_t kMax = int64_t{1} << 31;
    if (v > kMax || v < -kMax) {
      // Name the key that is present.
      const char* key = *keys.begin();
      for (const char* k : keys) {
        if (c_.Has(k)) {
          key = k;
          break;
        }
      }
      Fail(c_.Error(key, fmt::format("is {}, far beyond any model's size (at most {})", v, kMax)));
      return def;
    }
    return v;
  }
  template <typename T>
  T Take(Result<T> r, T def) {
    if (r.ok()) return std::move(r).value();
    Fail(r.status());
    return def;
  }
  const HfConfig& c_;
  ModelSpec* s_;
  Status st_;
};

// Dropout p from a config key must be a probability.
void CheckProbability(Reader& r, const HfConfig& c, const char* key, double p) {
  if (!(p >= 0 && p < 1)) r.Fail(c.Error(key, fmt::format("must be in [0, 1), found {}", p)));
}

void ReadT5(Reader& r, const HfConfig& c, ModelSpec& s) {
  s.vocab_size = r.Int({"vocab_size"}, 32128);
  s.hidden_size = r.Int({"d_model", "hidden_size"}, 512);
  s.head_dim = r.Int({"d_kv"}, 64);
  s.intermediate_size = r.Int({"d_ff"}, 2048);
  s.num_layers = r.Int({"num_layers", "num_hidden_layers"}, 6);
  s.num_decoder_layers = r.OptInt({"num_decoder_layers"}).value_or(s.num_layers);
  s.num_heads = r.Int({"num_heads", "num_attention_heads"}, 8);
  s.num_kv_heads = s.num_heads;
  s.t5_rel_buckets = r.Int({"relative_attention_num_buckets"}, 32);
  s.t5_rel_max_distance = r.Int({"relative_attention_max_distance"}, 128);
  double p = r.Double({"dropout_rate"}, 0.1);
  CheckProbability(r, c, "dropout_rate", p);
  s.embd_dropout = s.attn_dropout = s.hidden_dropout = p;
  s.norm_eps = r.Double({"layer_norm_epsilon"}, 1e-6);
  // transformers 5.x T5Config: a false tie_word_embeddings (T5 v1.1, flan-t5) only turns off
  // the d_model**-0.5 rescale of the decoder output; the config then sets tie_word_embeddings
  // to True, so a model built from the config ties lm_head to the shared embedding.
  s.t5_rescale_output = r.Bool({"tie_word_embeddings"}, true);
  s.tie_word_embeddings = true;
  // T5Config.__init__: "gated-gelu" means gelu_new; otherwise the part after "gated-".
  std::string ff = r.String({"feed_forward_proj"}, "relu");
  std::string act = ff;
  s.gated_mlp = false;
  auto dash = ff.find('-');
  if (dash != std::string::npos) {
    if (ff.substr(0, dash) != "gated" || ff.find('-', dash + 1) != std::string::npos) {
      r.Fail(c.Error("feed_forward_proj",
                     fmt::format("{} is not a valid activation; use 'gated-{{ACT_FN}}' or "
                                 "'{{ACT_FN}}', e.g. 'gated-gelu' or 'relu'",
                                 Quote(ff))));
      return;
    }
    s.gated_mlp = true;
    act = ff.substr(dash + 1);
  }
  if (ff == "gated-gelu") act = "gelu_new";
  auto a = ParseActivation(c, "feed_forward_proj", act);
  if (!a.ok()) return r.Fail(a.status());
  s.activation = *a;
}

void ReadGpt2(Reader& r, const HfConfig& c, ModelSpec& s) {
  s.vocab_size = r.Int({"vocab_size"}, 50257);
  s.max_positions = r.Int({"n_positions", "max_position_embeddings"}, 1024);
  s.hidden_size = r.Int({"n_embd", "hidden_size"}, 768);
  s.num_layers = r.Int({"n_layer", "num_hidden_layers"}, 12);
  s.num_heads = r.Int({"n_head", "num_attention_heads"}, 12);
  s.num_kv_heads = s.num_heads;
  s.intermediate_size = r.OptInt({"n_inner"}).value_or(4 * s.hidden_size);
  s.activation = r.Act("activation_function", "gelu_new");
  s.hidden_dropout = r.Double({"resid_pdrop"}, 0.1);
  s.embd_dropout = r.Double({"embd_pdrop"}, 0.1);
  s.attn_dropout = r.Double({"attn_pdrop"}, 0.1);
  CheckProbability(r, c, "resid_pdrop", s.hidden_dropout);
  CheckProbability(r, c, "embd_pdrop", s.embd_dropout);
  CheckProbability(r, c, "attn_pdrop", s.attn_dropout);
  s.norm_eps = r.Double({"layer_norm_epsilon"}, 1e-5);
  s.tie_word_embeddings = r.Bool({"tie_word_embeddings"}, true);
  if (r.Bool({"add_cross_attention"}, false)) {
    r.Fail(c.Error("add_cross_attention", "is true; dsplan models GPT-2 as a decoder-only "
                                          "language model (set it to false)"));
  }
}

void ReadGptJ(Reader& r, const HfConfig& c, ModelSpec& s) {
  s.vocab_size = r.Int({"vocab_size"}, 50400);
  s.max_positions = r.Int({"n_positions", "max_position_embeddings"}, 2048);
  s.hidden_size = r.Int({"n_embd", "hidden_size"}, 4096);
  s.num_layers = r.Int({"n_layer", "num_hidden_layers"}, 28);
  s.num_heads = r.Int({"n_head", "num_attention_heads"}, 16);
  s.num_kv_heads = s.num_heads;
  s.rotary_dim = r.OptInt({"rotary_dim"}).value_or(0);
  s.intermediate_size = r.OptInt({"n_inner"}).value_or(4 * s.hidden_size);
  s.activation = r.Act("activation_function", "gelu_new");
  s.hidden_dropout = r.Double({"resid_pdrop"}, 0.0);
  s.embd_dropout = r.Double({"embd_pdrop"}, 0.0);
  s.attn_dropout = r.Double({"attn_pdrop"}, 0.0);
  CheckProbability(r, c, "resid_pdrop", s.hidden_dropout);
  CheckProbability(r, c, "embd_pdrop", s.embd_dropout);
  CheckProbability(r, c, "attn_pdrop", s.attn_dropout);
  s.norm_eps = r.Double({"layer_norm_epsilon"}, 1e-5);
  s.tie_word_embeddings = r.Bool({"tie_word_embeddings"}, false);
  s.parallel_residual = true;
}

void ReadGptNeoX(Reader& r, const HfConfig& c, ModelSpec& s) {
  s.vocab_size = r.Int({"vocab_size"}, 50432);
  s.hidden_size = r.Int({"hidden_size"}, 6144);
  s.num_layers = r.Int({"num_hidden_layers"}, 44);
  s.num_heads = r.Int({"num_attention_heads"}, 64);
  s.num_kv_heads = s.num_heads;
  s.intermediate_size = r.Int({"intermediate_size"}, 24576);
  s.activation = r.Act("hidden_act", "gelu");
  s.max_positions = r.Int({"max_position_embeddings"}, 2048);
  double pct = r.Fraction({"rotary_pct", "partial_rotary_factor"}, 0.25);
  s.attn_dropout = r.Double({"attention_dropout"}, 0.0);
  s.hidden_dropout = r.Double({"hidden_dropout"}, 0.0);
  CheckProbability(r, c, "attention_dropout", s.attn_dropout);
  CheckProbability(r, c, "hidden_dropout", s.hidden_dropout);
  s.norm_eps = r.Double({"layer_norm_eps"}, 1e-5);
  s.parallel_residual = r.Bool({"use_parallel_residual"}, true);
  s.tie_word_embeddings = r.Bool({"tie_word_embeddings"}, false);
  s.linear_bias = r.Bool({"attention_bias"}, true);
  if (s.num_heads > 0) s.head_dim = s.hidden_size / s.num_heads;
  s.rotary_dim = static_cast<int64_t>(s.head_dim * pct);
}

void ReadOpt(Reader& r, const HfConfig& c, ModelSpec& s) {
  s.vocab_size = r.Int({"vocab_size"}, 50272);
  s.hidden_size = r.Int({"hidden_size"}, 768);
  s.num_layers = r.Int({"num_hidden_layers"}, 12);
  s.intermediate_size = r.Int({"ffn_dim"}, 3072);
  s.max_positions = r.Int({"max_position_embeddings"}, 2048);
  s.position_offset = 2;
  s.opt_norm_before = r.Bool({"do_layer_norm_before"}, true);
  bool remove_final = r.Bool({"_remove_final_layer_norm"}, false);
  s.opt_final_norm = s.opt_norm_before && !remove_final;
  s.opt_word_embed_proj_dim = r.OptInt({"word_embed_proj_dim"}).value_or(s.hidden_size);
  s.hidden_dropout = r.Double({"dropout"}, 0.1);
  s.attn_dropout = r.Double({"attention_dropout"}, 0.0);
  CheckProbability(r, c, "dropout", s.hidden_dropout);
  CheckProbability(r, c, "attention_dropout", s.attn_dropout);
  s.embd_dropout = 0;  // OPTDecoder applies no dropout to the embeddings
  s.num_heads = r.Int({"num_attention_heads"}, 12);
  s.num_kv_heads = s.num_heads;
  s.activation = r.Act("activation_function", "relu");
  s.linear_bias = r.Bool({"enable_bias"}, true);
  if (!r.Bool({"layer_norm_elementwise_affine"}, true)) {
    r.Fail(c.Error("layer_norm_elementwise_affine",
                   "is false; dsplan models OPT with affine layer norms only"));
  }
  s.norm_eps = 1e-5;
  s.tie_word_embeddings = r.Bool({"tie_word_embeddings"}, true);
}

void ReadBloom(Reader& r, const HfConfig& c, ModelSpec& s) {
  s.vocab_size = r.Int({"vocab_size"}, 250880);
  // BloomConfig pops the legacy "n_embed" and uses it as hidden_size when given.
  s.hidden_size = r.Int({"n_embed", "hidden_size"}, 64);
  s.num_layers = r.Int({"n_layer", "num_hidden_layers"}, 2);
  s.num_heads = r.Int({"n_head", "num_attention_heads"}, 8);
  s.num_kv_heads = s.num_heads;
  s.intermediate_size = 4 * s.hidden_size;
  s.norm_eps = r.Double({"layer_norm_epsilon"}, 1e-5);
  if (r.Bool({"apply_residual_connection_post_layernorm"}, false)) {
    r.Fail(c.Error("apply_residual_connection_post_layernorm",
                   "is true; dsplan models the standard BLOOM residual (false)"));
  }
  s.hidden_dropout = r.Double({"hidden_dropout"}, 0.0);
  s.attn_dropout = r.Double({"attention_dropout"}, 0.0);
  CheckProbability(r, c, "hidden_dropout", s.hidden_dropout);
  CheckProbability(r, c, "attention_dropout", s.attn_dropout);
  s.activation = Activation::kBloomGelu;
  s.alibi = true;
  s.tie_word_embeddings = r.Bool({"tie_word_embeddings"}, true);
}

// Llama, Mistral, Qwen2, Mixtral and Gemma share LlamaConfig's key names; |defaults| holds each
// class's own defaults.
struct LlamaLikeDefaults {
  int64_t vocab, hidden, inter, layers, heads;
  std::optional<int64_t> kv_heads;  // nullopt: = heads
  std::optional<int64_t> head_dim;  // nullopt: hidden / heads
  int64_t max_pos;
  const char* act;
  double eps;
  bool tie;
};

void ReadLlamaLike(Reader& r, const HfConfig& c, ModelSpec& s, const LlamaLikeDefaults& d) {
  s.vocab_size = r.Int({"vocab_size"}, d.vocab);
  s.hidden_size = r.Int({"hidden_size"}, d.hidden);
  s.intermediate_size = r.Int({"intermediate_size"}, d.inter);
  s.num_layers = r.Int({"num_hidden_layers"}, d.layers);
  s.num_heads = r.Int({"num_attention_heads"}, d.heads);
  s.num_kv_heads = r.OptInt({"num_key_value_heads"}).value_or(d.kv_heads.value_or(s.num_heads));
  auto hd = r.OptInt({"head_dim"});
  if (hd && *hd <= 0) {
    r.Fail(c.Error("head_dim", fmt::format("is {}; it must be positive (or absent)", *hd)));
  }
  if (!hd) hd = d.head_dim;
  if (hd) {
    s.head_dim = *hd;
  } else if (s.num_heads > 0) {
    // A hidden size of 0 or below is reported by the positivity check below, in its words.
    if (s.hidden_size > 0 && s.hidden_size % s.num_heads != 0) {
      r.Fail(c.Error("hidden_size",
                     fmt::format("{} is not divisible by num_attention_heads {} (and no head_dim "
                                 "is given)",
                                 s.hidden_size, s.num_heads)));
    }
    s.head_dim = s.hidden_size / s.num_heads;
  }
  s.max_positions = r.Int({"max_position_embeddings"}, d.max_pos);
  s.norm_eps = r.Double({"rms_norm_eps"}, d.eps);
  s.tie_word_embeddings = r.Bool({"tie_word_embeddings"}, d.tie);
  s.attn_dropout = r.Double({"attention_dropout"}, 0.0);
  CheckProbability(r, c, "attention_dropout", s.attn_dropout);
  double partial = r.Fraction({"partial_rotary_factor"}, 1.0);
  s.rotary_dim = static_cast<int64_t>(s.head_dim * partial);
  s.gated_mlp = true;
}

void ReadLlama(Reader& r, const HfConfig& c, ModelSpec& s) {
  ReadLlamaLike(r, c, s, {32000, 4096, 11008, 32, 32, std::nullopt, std::nullopt, 2048, "silu",
                          1e-6, false});
  s.activation = r.Act("hidden_act", "silu");
  s.attention_bias = r.Bool({"attention_bias"}, false);
  s.mlp_bias = r.Bool({"mlp_bias"}, false);
}

// sliding_window: the class default when the key is absent, none when it is null.
int64_t SlidingWindow(Reader& r, const HfConfig& c, int64_t def) {
  if (!c.json().contains("sliding_window")) return def;
  return r.OptInt({"sliding_window"}).value_or(0);
}

void ReadMistral(Reader& r, const HfConfig& c, ModelSpec& s) {
  ReadLlamaLike(r, c, s, {32000, 4096, 14336, 32, 32, 8, std::nullopt, 4096 * 32, "silu", 1e-6,
                          false});
  s.activation = r.Act("hidden_act", "silu");
  s.sliding_window = SlidingWindow(r, c, 4096);
}

// Which layers slide (ModelSpec::sliding_layers): config.json's layer_types, one
// "full_attention" or "sliding_attention" per layer, else |by_default| of each layer's index.
// False when layer_types is malformed (reported through |r|) or the layer count is out of
// bounds (CheckSizes reports that, and no per-layer table is built).
template <class Default>
bool SlidingLayers(Reader& r, const HfConfig& c, ModelSpec& s, Default by_default) {
  if (s.num_layers < 0 || s.num_layers > kMaxLayers) return false;
  s.sliding_layers.assign(static_cast<size_t>(s.num_layers), false);
  if (!c.json().contains("layer_types") || c.json()["layer_types"].is_null()) {
    for (int64_t i = 0; i < s.num_layers; ++i) s.sliding_layers[i] = by_default(i);
    return true;
  }
  const auto& types = c.json()["layer_types"];
  if (!types.is_array() || static_cast<int64_t>(types.size()) != s.num_layers) {
    r.Fail(c.Error("layer_types",
                   fmt::format("must list one type per layer ({} layers)", s.num_layers)));
    return false;
  }
  for (size_t i = 0; i < types.size(); ++i) {
    if (types[i] != "full_attention" && types[i] != "sliding_attention") {
      r.Fail(c.Error("layer_types",
                     "holds a type other than \"full_attention\" and \"sliding_attention\""));
      return false;
    }
    s.sliding_layers[i] = types[i] == "sliding_attention";
  }
  return true;
}

// Qwen2Config and Qwen3Config: without use_sliding_window, sliding_window becomes None and no
// layer slides whatever layer_types says; with it, the layers from max_window_layers on slide
// by default (their __post_init__).
void ReadQwenWindow(Reader& r, const HfConfig& c, ModelSpec& s) {
  const int64_t window = SlidingWindow(r, c, 4096);
  const bool use_sliding = r.Bool({"use_sliding_window"}, false);
  const int64_t first = r.Int({"max_window_layers"}, 28);
  if (!SlidingLayers(r, c, s, [&](int64_t i) { return i >= first; })) return;
  const bool any =
      std::find(s.sliding_layers.begin(), s.sliding_layers.end(), true) != s.sliding_layers.end();
  s.sliding_window = use_sliding && any ? window : 0;
  if (s.sliding_window == 0) s.sliding_layers.clear();
}

void ReadQwen2(Reader& r, const HfConfig& c, ModelSpec& s) {
  ReadLlamaLike(r, c, s,
                {151936, 4096, 22016, 32, 32, 32, std::nullopt, 32768, "silu", 1e-6, false});
  s.activation = r.Act("hidden_act", "silu");
  ReadQwenWindow(r, c, s);
}

// Qwen3Config: Qwen2's keys, but head_dim defaults to 128 whatever the width, the q/k/v/o
// biases follow attention_bias (default none), and each head's q and k pass an RMSNorm.
// With use_sliding_window, the layers from max_window_layers on slide (or as layer_types says).
void ReadQwen3(Reader& r, const HfConfig& c, ModelSpec& s) {
  ReadLlamaLike(r, c, s, {151936, 4096, 22016, 32, 32, 32, 128, 32768, "silu", 1e-6, false});
  s.activation = r.Act("hidden_act", "silu");
  s.attention_bias = r.Bool({"attention_bias"}, false);
  s.qk_norm = QkNorm::kRms;
  ReadQwenWindow(r, c, s);
}

// The experts' count and top-k (both positive, k at most the count), and whether the
// load-balancing loss runs (output_router_logits), for Mixtral and Qwen3-MoE.
void ReadExperts(Reader& r, const HfConfig& c, ModelSpec& s, int64_t experts, int64_t top_k) {
  s.num_experts = r.Int({"num_local_experts", "num_experts"}, experts);
  s.experts_per_token = r.Int({"num_experts_per_tok"}, top_k);
  if (s.num_experts < 0 || s.num_experts > kMaxExperts) {
    const char* key = c.json().contains("num_local_experts") ? "num_local_experts" : "num_experts";
    return r.Fail(c.Error(
        key, fmt::format("is {}; it must be between 0 and {}", s.num_experts, kMaxExperts)));
  }
  if (s.num_experts > 0 && s.experts_per_token > s.num_experts) {
    r.Fail(c.Error("num_experts_per_tok", fmt::format("{} exceeds num_local_experts {}",
                                                      s.experts_per_token, s.num_experts)));
  }
  s.router_aux_loss = r.Bool({"output_router_logits"}, false);
}

void ReadMixtral(Reader& r, const HfConfig& c, ModelSpec& s) {
  ReadLlamaLike(r, c, s, {32000, 4096, 14336, 32, 32, 8, std::nullopt, 4096 * 32, "silu", 1e-5,
                          false});
  s.activation = r.Act("hidden_act", "silu");
  s.sliding_window = SlidingWindow(r, c, 0);
  ReadExperts(r, c, s, 8, 2);
}

// Qwen3MoeConfig (modular_qwen3_moe.py): Qwen3's attention (per-head q/k RMSNorms; head_dim
// from the file, else hidden / heads: the config has no default of its own), with the window
// on every layer when use_sliding_window; Qwen2-MoE's router and Mixtral's fused experts of
// moe_intermediate_size, no shared expert. A layer is sparse unless mlp_only_layers lists it
// or (i + 1) is not a multiple of decoder_sparse_step; the others run a dense gated MLP of
// intermediate_size.
void ReadQwen3Moe(Reader& r, const HfConfig& c, ModelSpec& s) {
  ReadLlamaLike(r, c, s, {151936, 2048, 6144, 24, 32, 4, std::nullopt, 32768, "silu", 1e-6, false});
  s.activation = r.Act("hidden_act", "silu");
  s.attention_bias = r.Bool({"attention_bias"}, false);
  s.qk_norm = QkNorm::kRms;
  const int64_t window = SlidingWindow(r, c, 4096);
  s.sliding_window = r.Bool({"use_sliding_window"}, false) ? window : 0;
  ReadExperts(r, c, s, 128, 8);
  s.moe_intermediate_size = r.Int({"moe_intermediate_size"}, 768);  // CheckSizes bounds it
  const int64_t step = r.Int({"decoder_sparse_step"}, 1);
  if (step <= 0) {
    return r.Fail(c.Error("decoder_sparse_step", fmt::format("is {}; it must be 1 or more", step)));
  }
  if (s.num_layers < 0 || s.num_layers > kMaxLayers) return;  // CheckSizes names it
  std::vector<bool> dense(static_cast<size_t>(s.num_layers), false);
  if (c.json().contains("mlp_only_layers") && !c.json()["mlp_only_layers"].is_null()) {
    const auto& only = c.json()["mlp_only_layers"];
    if (!only.is_array() || only.size() > static_cast<size_t>(kMaxLayers)) {
      return r.Fail(c.Error("mlp_only_layers", "must be a list of layer indices"));
    }
    for (const auto& v : only) {
      if (!v.is_number_integer()) {
        return r.Fail(c.Error("mlp_only_layers", "must be a list of layer indices"));
      }
      const int64_t i = v.get<int64_t>();
      // transformers compares each layer's index with the list: others match no layer.
      if (i >= 0 && i < s.num_layers) dense[static_cast<size_t>(i)] = true;
    }
  }
  s.moe_layers.assign(static_cast<size_t>(s.num_layers), false);
  for (int64_t i = 0; i < s.num_layers; ++i) {
    s.moe_layers[static_cast<size_t>(i)] =
        !dense[static_cast<size_t>(i)] && s.num_experts > 0 && (i + 1) % step == 0;
  }
}

// GemmaConfig's keys beyond Llama's: GemmaMLP uses hidden_activation (configs that only set
// hidden_act mean the tanh GELU too), and attention_bias. Gemma 2 and 3 read them the same way.
void ReadGemmaLike(Reader& r, const HfConfig& c, ModelSpec& s, const LlamaLikeDefaults& d) {
  ReadLlamaLike(r, c, s, d);
  std::string act = r.String({"hidden_activation"}, "gelu_pytorch_tanh");
  auto a = ParseActivation(c, "hidden_activation", act);
  if (!a.ok()) return r.Fail(a.status());
  s.activation = *a;
  s.attention_bias = r.Bool({"attention_bias"}, false);
}

void ReadGemma(Reader& r, const HfConfig& c, ModelSpec& s) {
  ReadGemmaLike(r, c, s,
                {256000, 3072, 24576, 28, 16, 16, 256, 8192, "gelu_pytorch_tanh", 1e-6, true});
}

// Gemma2Config and Gemma3TextConfig: Gemma's keys and norms with a family's own defaults,
// soft-capping of the attention scores and of the logits (null: none), and a sliding window on
// the layers layer_types names (else as |slides| says of each layer's index).
template <class Slides>
void ReadGemma2Like(Reader& r, const HfConfig& c, ModelSpec& s, const LlamaLikeDefaults& d,
                    double attn_cap, double final_cap, Slides slides) {
  ReadGemmaLike(r, c, s, d);
  if (r.Bool({"use_bidirectional_attention"}, false)) {
    return r.Fail(c.Error("use_bidirectional_attention",
                          "is true (an embedding model); dsplan models causal language models"));
  }
  auto cap = [&](const char* key, double def) {
    if (c.json().contains(key) && c.json()[key].is_null()) return 0.0;
    const double v = r.Double({key}, def);
    if (v < 0) r.Fail(c.Error(key, fmt::format("is {}; it must be positive or null", v)));
    return std::max(0.0, v);
  };
  s.attn_softcap = cap("attn_logit_softcapping", attn_cap);
  s.final_softcap = cap("final_logit_softcapping", final_cap);
  s.sliding_window = SlidingWindow(r, c, 4096);
  SlidingLayers(r, c, s, slides);
}

// Gemma2Config (modular_gemma2.py): gemma-2-2b's shape by default, caps 50 (scores) and 30
// (logits), a window on every other layer from the first.
void ReadGemma2(Reader& r, const HfConfig& c, ModelSpec& s) {
  ReadGemma2Like(r, c, s,
                 {256000, 2304, 9216, 26, 8, 4, 256, 8192, "gelu_pytorch_tanh", 1e-6, true}, 50.0,
                 30.0, [](int64_t i) { return i % 2 == 0; });
}

// Gemma3TextConfig (modular_gemma3.py): Gemma 2's block with no caps by default, a Gemma-style
// RMSNorm over each head's q and k, and five sliding layers to each full one: without
// layer_types, layer i is full when (i + 1) is a multiple of sliding_window_pattern (6).
void ReadGemma3(Reader& r, const HfConfig& c, ModelSpec& s) {
  // 5.17 reads the pattern from the sliding_window_pattern key alone (an underscored
  // _sliding_window_pattern in a file is overwritten), and only when layer_types is absent.
  const int64_t pattern = r.Int({"sliding_window_pattern"}, 6);
  if (pattern <= 0) {
    return r.Fail(
        c.Error("sliding_window_pattern", fmt::format("is {}; it must be 1 or more", pattern)));
  }
  ReadGemma2Like(r, c, s,
                 {262208, 2304, 9216, 26, 8, 4, 256, 131072, "gelu_pytorch_tanh", 1e-6, true}, 0.0,
                 0.0, [pattern](int64_t i) { return (i + 1) % pattern != 0; });
  s.qk_norm = QkNorm::kRmsGemma;
}

void ReadFalcon(Reader& r, const HfConfig& c, ModelSpec& s) {
  s.vocab_size = r.Int({"vocab_size"}, 65024);
  s.hidden_size = r.Int({"hidden_size"}, 4544);
  s.num_layers = r.Int({"num_hidden_layers", "n_layer"}, 32);
  s.num_heads = r.Int({"num_attention_heads", "n_head"}, 71);
  s.norm_eps = r.Double({"layer_norm_epsilon"}, 1e-5);
  s.hidden_dropout = r.Double({"hidden_dropout"}, 0.0);
  s.attn_dropout = r.Double({"attention_dropout"}, 0.0);
  CheckProbability(r, c, "hidden_dropout", s.hidden_dropout);
  CheckProbability(r, c, "attention_dropout", s.attn_dropout);
  s.falcon_new_arch = r.Bool({"new_decoder_architecture"}, false);
  s.falcon_multi_query = r.Bool({"multi_query"}, true);
  s.num_kv_heads = r.OptInt({"num_kv_heads", "n_head_kv"}).value_or(s.num_heads);
  s.alibi = r.Bool({"alibi"}, false);
  s.parallel_residual = r.Bool({"parallel_attn"}, true);
  s.linear_bias = r.Bool({"bias"}, false);
  s.max_positions = r.Int({"max_position_embeddings"}, 2048);
  s.intermediate_size = r.OptInt({"ffn_hidden_size"}).value_or(4 * s.hidden_size);
  s.activation = r.Act("activation", "gelu");
  auto nln = r.OptInt({"num_ln_in_parallel_attn"});
  if (!nln && s.falcon_new_arch) nln = 2;
  s.falcon_num_ln_parallel = nln.value_or(1);
  s.tie_word_embeddings = r.Bool({"tie_word_embeddings"}, true);
  if (s.num_heads > 0) s.head_dim = s.hidden_size / s.num_heads;
  // Falcon's multi-query attention has one K/V head; the new architecture has num_kv_heads.
  if (!s.falcon_new_arch && s.falcon_multi_query) s.num_kv_heads = 1;
  if (!s.falcon_new_arch && !s.falcon_multi_query) s.num_kv_heads = s.num_heads;
  s.rotary_dim = s.alibi ? 0 : s.head_dim;
}

void ReadPhi(Reader& r, const HfConfig& c, ModelSpec& s) {
  s.vocab_size = r.Int({"vocab_size"}, 51200);
  s.hidden_size = r.Int({"hidden_size"}, 2048);
  s.intermediate_size = r.Int({"intermediate_size"}, 8192);
  s.num_layers = r.Int({"num_hidden_layers"}, 24);
  s.num_heads = r.Int({"num_attention_heads"}, 32);
  s.num_kv_heads = r.OptInt({"num_key_value_heads"}).value_or(s.num_heads);
  s.hidden_dropout = r.Double({"resid_pdrop"}, 0.0);
  s.embd_dropout = r.Double({"embd_pdrop"}, 0.0);
  s.attn_dropout = r.Double({"attention_dropout"}, 0.0);
  CheckProbability(r, c, "resid_pdrop", s.hidden_dropout);
  CheckProbability(r, c, "embd_pdrop", s.embd_dropout);
  CheckProbability(r, c, "attention_dropout", s.attn_dropout);
  s.activation = r.Act("hidden_act", "gelu_new");
  s.max_positions = r.Int({"max_position_embeddings"}, 2048);
  s.norm_eps = r.Double({"layer_norm_eps"}, 1e-5);
  s.tie_word_embeddings = r.Bool({"tie_word_embeddings"}, false);
  double partial = r.Fraction({"partial_rotary_factor"}, 0.5);
  if (r.Bool({"qk_layernorm"}, false)) s.qk_norm = QkNorm::kLayerNorm;
  if (s.num_heads > 0) s.head_dim = s.hidden_size / s.num_heads;
  s.rotary_dim = static_cast<int64_t>(s.head_dim * partial);
  s.parallel_residual = true;
}

// Phi3Config: LlamaConfig's key names with Phi's dropouts (resid_pdrop after attention and
// after the MLP, embd_pdrop unused by the 5.x model), partial_rotary_factor (Phi-4-mini 0.75),
// no head_dim key (hidden / heads) and sliding_window None by default.
void ReadPhi3(Reader& r, const HfConfig& c, ModelSpec& s) {
  ReadLlamaLike(r, c, s,
                {32064, 3072, 8192, 32, 32, std::nullopt, std::nullopt, 4096, "silu", 1e-5, false});
  s.activation = r.Act("hidden_act", "silu");
  s.hidden_dropout = r.Double({"resid_pdrop"}, 0.0);
  CheckProbability(r, c, "resid_pdrop", s.hidden_dropout);
  s.sliding_window = SlidingWindow(r, c, 0);
}

void ReadBert(Reader& r, const HfConfig& c, ModelSpec& s) {
  s.vocab_size = r.Int({"vocab_size"}, 30522);
  s.hidden_size = r.Int({"hidden_size"}, 768);
  s.num_layers = r.Int({"num_hidden_layers"}, 12);
  s.num_heads = r.Int({"num_attention_heads"}, 12);
  s.num_kv_heads = s.num_heads;
  s.intermediate_size = r.Int({"intermediate_size"}, 3072);
  s.activation = r.Act("hidden_act", "gelu");
  s.hidden_dropout = r.Double({"hidden_dropout_prob"}, 0.1);
  s.attn_dropout = r.Double({"attention_probs_dropout_prob"}, 0.1);
  CheckProbability(r, c, "hidden_dropout_prob", s.hidden_dropout);
  CheckProbability(r, c, "attention_probs_dropout_prob", s.attn_dropout);
  s.embd_dropout = s.hidden_dropout;
  s.max_positions = r.Int({"max_position_embeddings"}, 512);
  s.bert_type_vocab = r.Int({"type_vocab_size"}, 2);
  s.norm_eps = r.Double({"layer_norm_eps"}, 1e-12);
  s.tie_word_embeddings = r.Bool({"tie_word_embeddings"}, true);
}

// Sizes that must be positive, named by the config key that usually sets them.
Status CheckSizes(const HfConfig& c, const ModelSpec& s) {
  struct Check {
    const char* key;
    int64_t value;
    bool needed;
    int64_t max;  // far above any published model, so that sizes and their products stay bounded
  };
  constexpr int64_t kMaxWidth = int64_t{1} << 18;     // hidden, head_dim: 262,144
  constexpr int64_t kMaxFfn = int64_t{1} << 20;       // intermediate: 1,048,576
  constexpr int64_t kMaxVocab = int64_t{1} << 24;     // 16,777,216 tokens
  constexpr int64_t kMaxHeads = 16384;
  constexpr int64_t kMaxPositions = int64_t{1} << 24;
  const bool learned_pos = s.family == Family::kGpt2 || s.family == Family::kOpt ||
                           s.family == Family::kBert;
  const Check checks[] = {
      {"vocab_size", s.vocab_size, true, kMaxVocab},
      {"hidden_size", s.hidden_size, true, kMaxWidth},
      {"num_hidden_layers", s.num_layers, true, kMaxLayers},
      {"num_decoder_layers", s.num_decoder_layers, s.family == Family::kT5, kMaxLayers},
      {"num_attention_heads", s.num_heads, true, kMaxHeads},
      {"num_key_value_heads", s.num_kv_heads, true, kMaxHeads},
      {"head_dim", s.head_dim, true, kMaxWidth},
      {"intermediate_size", s.intermediate_size, true, kMaxFfn},
      {"moe_intermediate_size", s.moe_intermediate_size, s.family == Family::kQwen3Moe, kMaxFfn},
      {"max_position_embeddings", s.max_positions, learned_pos, kMaxPositions},
      {"num_local_experts", s.num_experts, s.family == Family::kMixtral, kMaxExperts},
      {"num_experts_per_tok", s.experts_per_token, s.num_experts > 0, kMaxExperts},
      {"word_embed_proj_dim", s.opt_word_embed_proj_dim, s.family == Family::kOpt, kMaxWidth},
      {"relative_attention_num_buckets", s.t5_rel_buckets, s.family == Family::kT5, 65536},
  };
  for (const auto& ch : checks) {
    if (ch.needed && ch.value <= 0) {
      return c.Error(ch.key, fmt::format("must be a positive integer, found {} (for model_type "
                                         "'{}')",
                                         ch.value, s.model_type));
    }
  }
  for (const auto& ch : checks) {
    if (ch.needed && ch.value > ch.max) {
      return c.Error(ch.key, fmt::format("is {}, beyond what dsplan models (at most {}; the "
                                         "largest published models are far below)",
                                         ch.value, ch.max));
    }
  }
  if (s.max_positions < 0 || s.max_positions > kMaxPositions) {
    return c.Error("max_position_embeddings",
                   fmt::format("must be between 0 and {}, found {}", kMaxPositions,
                               s.max_positions));
  }
  if (s.rotary_dim < 0 || s.rotary_dim > s.head_dim) {
    return c.Error("rotary_dim", fmt::format("must be between 0 and the head size {}, found {}",
                                             s.head_dim, s.rotary_dim));
  }
  if (s.sliding_window < 0) {
    return c.Error("sliding_window", fmt::format("must be positive or null, found {}",
                                                 s.sliding_window));
  }
  if (s.bert_type_vocab < 0 || s.bert_type_vocab > kMaxVocab) {
    return c.Error("type_vocab_size", fmt::format("must be between 0 and {}, found {}", kMaxVocab,
                                                  s.bert_type_vocab));
  }
  if (s.family == Family::kFalcon &&
      (s.falcon_num_ln_parallel < 1 || s.falcon_num_ln_parallel > 2)) {
    return c.Error("num_ln_in_parallel_attn",
                   fmt::format("must be 1 or 2, found {}", s.falcon_num_ln_parallel));
  }
  if (!std::isfinite(s.norm_eps) || s.norm_eps < 0) {
    return c.Error("layer_norm_eps", fmt::format("must be a finite number >= 0, found {}",
                                                 s.norm_eps));
  }
  // An upper estimate of the parameter count (each size above is bounded, their product is not):
  // beyond 1e14 (50 x the largest published models) every byte and FLOP count downstream would
  // be meaningless, and some would overflow 64 bits.
  {
    const double h = static_cast<double>(s.hidden_size);
    const double layers = static_cast<double>(s.num_layers) +
                          (s.family == Family::kT5 ? static_cast<double>(s.num_decoder_layers) : 0);
    const double experts = std::max<double>(1, static_cast<double>(s.num_experts));
    const double attn = 2.0 * h * static_cast<double>(s.num_heads + s.num_kv_heads) *
                        static_cast<double>(s.head_dim);
    const double mlp = 3.0 * h *
                       static_cast<double>(std::max(s.intermediate_size, s.expert_intermediate())) *
                       experts;
    const double embed = 2.0 * static_cast<double>(s.vocab_size) *
                         std::max(h, static_cast<double>(s.opt_word_embed_proj_dim));
    const double estimate = layers * (2 * attn + mlp + 8 * h) + embed +
                            static_cast<double>(s.max_positions) * h;
    if (estimate > 1e14) {
      return c.Error("hidden_size", fmt::format("and the other sizes make about {:.2g} parameters; "
                                                "dsplan models at most 1e14",
                                                estimate));
    }
  }
  if (s.num_heads % s.num_kv_heads != 0) {
    return c.Error("num_key_value_heads",
                   fmt::format("{} does not divide num_attention_heads {}", s.num_kv_heads,
                               s.num_heads));
  }
  return Status();
}

}  // namespace

const char* ModelTypeName(Family f) { return InfoOf(f).model_type; }
const char* ModelClassName(Family f) { return InfoOf(f).model_class; }

std::string SupportedModelTypes() {
  std::string out;
  for (const auto& i : kFamilies) {
    if (!out.empty()) out += ", ";
    out += i.model_type;
  }
  return out;
}

const char* ActivationName(Activation a) {
  switch (a) {
    case Activation::kRelu: return "relu";
    case Activation::kGelu: return "gelu";
    case Activation::kGeluTanh: return "gelu_pytorch_tanh";
    case Activation::kGeluNew: return "gelu_new";
    case Activation::kGeluFast: return "gelu_fast";
    case Activation::kBloomGelu: return "bloom_gelu";
    case Activation::kSilu: return "silu";
  }
  return "?";
}

Result<ModelSpec> ModelSpecFromHf(const HfConfig& config, const std::string& name) {
  ModelSpec s;
  s.name = name;
  DSPLAN_ASSIGN_OR_RETURN(std::string model_type, config.String({"model_type"}, ""));
  if (model_type.empty()) {
    return Status::InvalidArgument(fmt::format(
        "{}: no 'model_type' key; a HuggingFace config.json names its architecture there "
        "(supported: {})",
        config.source(), SupportedModelTypes()));
  }
  const FamilyInfo* info = nullptr;
  for (const auto& i : kFamilies)
    if (model_type == i.model_type) info = &i;
  if (!info && model_type == "gemma3") {
    // Gemma 3 at 4B and above is a vision-language model: AutoModelForCausalLM builds
    // Gemma3ForConditionalGeneration, whose SigLIP vision tower dsplan does not model.
    return Status::Unsupported(fmt::format(
        "{}: model_type \"gemma3\" is Gemma 3's vision-language model "
        "(Gemma3ForConditionalGeneration, with a SigLIP vision tower dsplan does not model); "
        "to plan its language model alone (Gemma3ForCausalLM), save the file's \"text_config\" "
        "object as a config.json with \"model_type\": \"gemma3_text\"",
        config.source()));
  }
  if (!info) {
    return Status::Unsupported(fmt::format("{}: model_type {} is not supported; supported: {}",
                                           config.source(), Quote(model_type),
                                           SupportedModelTypes()));
  }
  s.model_type = model_type;
  s.family = info->family;
  Reader r(config, &s);
  switch (s.family) {
    case Family::kT5: ReadT5(r, config, s); break;
    case Family::kGpt2: ReadGpt2(r, config, s); break;
    case Family::kGptJ: ReadGptJ(r, config, s); break;
    case Family::kGptNeoX: ReadGptNeoX(r, config, s); break;
    case Family::kOpt: ReadOpt(r, config, s); break;
    case Family::kBloom: ReadBloom(r, config, s); break;
    case Family::kLlama: ReadLlama(r, config, s); break;
    case Family::kMistral: ReadMistral(r, config, s); break;
    case Family::kQwen2: ReadQwen2(r, config, s); break;
    case Family::kQwen3:
      ReadQwen3(r, config, s);
      break;
    case Family::kQwen3Moe:
      ReadQwen3Moe(r, config, s);
      break;
    case Family::kMixtral: ReadMixtral(r, config, s); break;
    case Family::kFalcon: ReadFalcon(r, config, s); break;
    case Family::kPhi: ReadPhi(r, config, s); break;
    case Family::kPhi3:
      ReadPhi3(r, config, s);
      break;
    case Family::kGemma: ReadGemma(r, config, s); break;
    case Family::kGemma2:
      ReadGemma2(r, config, s);
      break;
    case Family::kGemma3:
      ReadGemma3(r, config, s);
      break;
    case Family::kBert: ReadBert(r, config, s); break;
  }
  DSPLAN_RETURN_IF_ERROR(r.status());
  // Families whose head size is hidden_size / num_heads need exact division. A width of 0 or
  // below goes on to CheckSizes, which names it as such.
  const bool positive_width = s.hidden_size > 0;
  if (positive_width && s.head_dim == 0 && s.num_heads > 0) {
    if (s.hidden_size % s.num_heads != 0) {
      return config.Error("hidden_size", fmt::format("{} is not divisible by the number of "
                                                     "attention heads {}",
                                                     s.hidden_size, s.num_heads));
    }
    s.head_dim = s.hidden_size / s.num_heads;
  } else if (positive_width && s.family != Family::kT5 && s.num_heads > 0 &&
             s.head_dim * s.num_heads != s.hidden_size &&
             (s.family == Family::kGpt2 || s.family == Family::kGptJ ||
              s.family == Family::kGptNeoX || s.family == Family::kOpt ||
              s.family == Family::kBloom || s.family == Family::kFalcon ||
              s.family == Family::kPhi || s.family == Family::kBert)) {
    return config.Error("hidden_size", fmt::format("{} is not divisible by the number of "
                                                   "attention heads {}",
                                                   s.hidden_size, s.num_heads));
  }
  DSPLAN_RETURN_IF_ERROR(CheckSizes(config, s));
  return s;
}

}  // namespace dsplan
