// ModelSpec: a transformer architecture as transformers builds it from a config.json.
//
// A ModelSpec holds the hyperparameters that decide parameter shapes, activation shapes and the
// ops of a training step, already resolved with transformers' defaults for absent keys (see
// docs/models.md for the keys read per family). It holds no batch or sequence sizes: those are
// workload options. The exact parameter count and the per-layer ops live in simulator/workload.h,
// built from this spec by one family builder each.
#ifndef DSPLAN_CORE_MODEL_SPEC_H_
#define DSPLAN_CORE_MODEL_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "core/hf_config.h"
#include "core/status.h"

namespace dsplan {

/// The transformers model families dsplan understands (one modeling file each).
enum class Family {
  kT5,        // T5ForConditionalGeneration (t5, t5 v1.1, flan-t5)
  kGpt2,      // GPT2LMHeadModel
  kGptJ,      // GPTJForCausalLM
  kGptNeoX,   // GPTNeoXForCausalLM (gpt-neox-20b, pythia)
  kOpt,       // OPTForCausalLM
  kBloom,     // BloomForCausalLM
  kLlama,     // LlamaForCausalLM
  kMistral,   // MistralForCausalLM
  kQwen2,     // Qwen2ForCausalLM
  kQwen3,     // Qwen3ForCausalLM (Qwen2's layout with RMSNorms on each head's q and k)
  kQwen3Moe,  // Qwen3MoeForCausalLM (Qwen3's attention, Mixtral's experts on the sparse layers)
  kMixtral,   // MixtralForCausalLM (sparse MoE)
  kFalcon,    // FalconForCausalLM
  kPhi,       // PhiForCausalLM (phi-1, phi-1.5, phi-2)
  kPhi3,      // Phi3ForCausalLM (Phi-3, Phi-3.5, Phi-4-mini: fused qkv_proj and gate_up_proj)
  kGemma,     // GemmaForCausalLM
  kGemma2,    // Gemma2ForCausalLM (four norms per block, logit soft-capping, alternating windows)
  kGemma3,    // Gemma3ForCausalLM (model_type gemma3_text: Gemma 2's block, per-head q/k norms, 5:1
              // windows)
  kBert,      // BertForMaskedLM
};

/// The config.json `model_type` of a family ("t5", "gpt_neox", ...).
const char* ModelTypeName(Family f);
/// The transformers class dsplan models for the family ("GPT2LMHeadModel", ...).
const char* ModelClassName(Family f);
/// All supported `model_type` values, comma separated, for error messages.
std::string SupportedModelTypes();

/// The activation function as transformers' ACT2FN implements it; this decides what autograd
/// saves (see docs/activations.md).
enum class Activation {
  kRelu,           // nn.ReLU: saves its output
  kGelu,           // exact erf GELU (F.gelu): saves its input
  kGeluTanh,       // F.gelu(approximate="tanh") ("gelu_pytorch_tanh"): saves its input
  kGeluNew,        // NewGELUActivation, a chain of Python tensor ops ("gelu_new")
  kGeluFast,       // FastGELUActivation, Python ops ("gelu_fast")
  kBloomGelu,      // Bloom's GeLUFunction (custom autograd.Function): saves its input
  kSilu,           // F.silu: saves its input
};
const char* ActivationName(Activation a);

/// A norm over each attention head's query and key before rotary: Phi's optional LayerNorm
/// (qk_layernorm), Qwen3's RMSNorm (q_norm, k_norm) or Gemma 3's Gemma-style RMSNorm (computed
/// in fp32, scaled by 1 + weight), each with a weight of head_dim.
enum class QkNorm { kNone, kLayerNorm, kRms, kRmsGemma };

struct ModelSpec {
  std::string name;        // catalog name or the config path it came from
  std::string model_type;  // config.json model_type
  Family family = Family::kGpt2;

  // Sizes common to all families (transformer body).
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;          // decoder-only: blocks; T5: encoder blocks; BERT: encoder blocks
  int64_t num_decoder_layers = 0;  // T5 only
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;        // = num_heads without GQA/MQA
  int64_t head_dim = 0;
  int64_t intermediate_size = 0;   // MLP inner size (per expert for MoE)
  int64_t max_positions = 0;       // learned absolute position table rows (before any offset)

  Activation activation = Activation::kGelu;
  bool gated_mlp = false;          // act(gate(x)) * up(x)
  double norm_eps = 1e-5;
  bool tie_word_embeddings = false;

  // Dropout probabilities active in model.train().
  double embd_dropout = 0;    // after the embeddings
  double attn_dropout = 0;    // on attention probabilities
  double hidden_dropout = 0;  // on the residual branches (attention output, MLP output)

  // Sliding-window attention (mistral sliding_window, qwen2 with use_sliding_window, mixtral):
  // 0 = none. Decides whether transformers builds a mask for SDPA.
  int64_t sliding_window = 0;
  // The layers that slide (gemma2, qwen3: layer_types); empty: every layer (when the window is
  // set).
  std::vector<bool> sliding_layers;
  // Soft-capping (gemma2): scores -> tanh(scores / c) * c before the mask in eager attention
  // (transformers 5.17's SDPA path does not apply it), and the same on the logits. 0 = none.
  double attn_softcap = 0;
  double final_softcap = 0;

  // Rotary position embeddings (llama, mistral, qwen2, mixtral, gptj, gpt_neox, phi, falcon).
  int64_t rotary_dim = 0;  // dimensions rotated per head (0 = no rotary)

  // Mixture of experts (mixtral, qwen3_moe).
  int64_t num_experts = 0;
  int64_t experts_per_token = 0;
  int64_t moe_intermediate_size = 0;  // qwen3_moe moe_intermediate_size (0: intermediate_size)
  std::vector<bool> moe_layers;       // qwen3_moe: which layers are sparse (empty: all of them)
  bool router_aux_loss = false;       // output_router_logits: the load-balancing loss runs
  /// Whether block |i| runs the experts (else the dense MLP of intermediate_size).
  bool sparse_layer(int64_t i) const {
    return num_experts > 0 && (moe_layers.empty() || moe_layers[static_cast<size_t>(i)]);
  }
  int64_t expert_intermediate() const {
    return moe_intermediate_size > 0 ? moe_intermediate_size : intermediate_size;
  }

  // Family-specific switches, each read from the key named in the comment.
  bool parallel_residual = false;    // gptj, phi: always; gpt_neox use_parallel_residual; falcon parallel_attn
  int64_t falcon_num_ln_parallel = 0;   // falcon: 2 (ln_attn + ln_mlp) or 1 (input_layernorm)
  bool falcon_new_arch = false;      // falcon new_decoder_architecture
  bool falcon_multi_query = false;   // falcon multi_query
  bool alibi = false;                // bloom (always), falcon alibi
  bool linear_bias = true;           // falcon `bias`, opt enable_bias, neox attention_bias, qwen2 q/k/v
  bool mlp_bias = false;             // llama mlp_bias
  bool attention_bias = false;       // llama/mistral/gemma attention_bias (q,k,v,o)
  int64_t opt_word_embed_proj_dim = 0;  // opt word_embed_proj_dim (= hidden_size when absent)
  bool opt_norm_before = true;       // opt do_layer_norm_before
  bool opt_final_norm = true;        // opt: final_layer_norm exists
  QkNorm qk_norm = QkNorm::kNone;    // phi qk_layernorm, qwen3/gemma3 q_norm/k_norm
  int64_t t5_rel_buckets = 32;       // t5 relative_attention_num_buckets
  int64_t t5_rel_max_distance = 128; // t5 relative_attention_max_distance
  bool t5_rescale_output = true;     // t5: config tie_word_embeddings is not false (see below)
  int64_t bert_type_vocab = 2;       // bert type_vocab_size
  int64_t position_offset = 0;       // opt: 2 extra rows in the position table

  bool encoder_decoder() const { return family == Family::kT5; }
  /// Total transformer blocks (encoder + decoder).
  int64_t total_blocks() const { return num_layers + num_decoder_layers; }
};

/// Builds a ModelSpec from a HuggingFace config, reading the keys transformers reads for the
/// config's model_type with transformers' defaults. |name| labels the result. Errors name the
/// source file and key: unsupported model_type (listing the supported ones), wrong types,
/// non-positive sizes, hidden size not divisible by the head count, and similar.
Result<ModelSpec> ModelSpecFromHf(const HfConfig& config, const std::string& name);

}  // namespace dsplan

#endif  // DSPLAN_CORE_MODEL_SPEC_H_
