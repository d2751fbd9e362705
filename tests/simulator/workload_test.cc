// The workload model: FLOPs against closed forms, activation accounting against what autograd
// keeps (hand counts from the HF code), checkpointing, and bad input.
#include <gtest/gtest.h>

#include <string>

#include "core/hf_config.h"
#include "core/model_catalog.h"
#include "core/model_spec.h"
#include "simulator/workload.h"

namespace dsplan {
namespace {

const std::string kData = DSPLAN_TEST_DATA_DIR;

ModelSpec Model(const std::string& name) {
  auto s = LoadModel(name, kData);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? *s : ModelSpec{};
}

Workload Build(const ModelSpec& spec, RunShape o) {
  auto w = BuildWorkload(spec, o);
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  return w.ok() ? *w : Workload{};
}

const Layer& FindLayer(const Workload& w, const std::string& name) {
  for (const Layer& l : w.layers)
    if (l.name == name) return l;
  ADD_FAILURE() << "no layer " << name;
  return w.layers.front();
}

// A model from config.json keys: |json| (model_type and the keys that differ) plus |shape|.
ModelSpec FromConfig(const std::string& json, const std::string& shape) {
  auto cfg = HfConfig::Parse("{" + json + "," + shape + "}", "inline");
  EXPECT_TRUE(cfg.ok()) << cfg.status().ToString();
  if (!cfg.ok()) return ModelSpec{};
  auto s = ModelSpecFromHf(*cfg, "inline");
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? *s : ModelSpec{};
}

// A two-block model of |type| (256 wide, 4 heads, 2 KV heads, |extra| keys) at micro-batch 3,
// 128 tokens, SDPA: the family comparisons below build the same shape for two families.
Workload SmallDecoder(const std::string& type, const std::string& extra = "") {
  RunShape o;
  o.micro_batch = 3;
  o.seq_len = 128;
  o.attention = AttentionImpl::kSdpa;
  return Build(FromConfig("\"model_type\":\"" + type + "\"" + extra,
                          R"("vocab_size":1000,"hidden_size":256,"intermediate_size":512,
      "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,
      "tie_word_embeddings":false)"),
               o);
}

// Decoder-only: flops = 6 * (N - input embedding tables) * tokens + 12 * L * s * d * tokens
// (the PaLM/Megatron closed form with full, not causal-halved, attention), up to the small
// elementwise terms.
TEST(WorkloadTest, DecoderOnlyFlopsMatchClosedForm) {
  for (const char* name : {"llama-2-7b", "gpt2-xl", "mistral-7b", "opt-6.7b", "bloom-7b1"}) {
    ModelSpec s = Model(name);
    RunShape o;
    o.micro_batch = 2;
    o.seq_len = 1024;
    o.attention = AttentionImpl::kAuto;
    Workload w = Build(s, o);
    double emb = static_cast<double>(s.vocab_size) *
                 (s.family == Family::kOpt ? s.opt_word_embed_proj_dim : s.hidden_size);
    if (s.tie_word_embeddings) emb = 0;  // the table is also the LM head's GEMM weight
    if (s.family == Family::kGpt2) emb += static_cast<double>(s.max_positions) * s.hidden_size;
    if (s.family == Family::kOpt)
      emb += static_cast<double>(s.max_positions + s.position_offset) * s.hidden_size;
    const double tokens = 2.0 * 1024;
    const double expected = 6.0 * (w.params - emb) * tokens +
                            12.0 * s.num_layers * 1024.0 * s.num_heads * s.head_dim * tokens;
    EXPECT_NEAR(w.flops_per_step / expected, 1.0, 0.02) << name;
    EXPECT_NEAR(w.bwd_flops / w.fwd_flops, 2.0, 0.05) << name;
  }
}

TEST(WorkloadTest, RecomputeAddsOneForward) {
  ModelSpec s = Model("llama-2-7b");
  RunShape o;
  o.seq_len = 2048;
  Workload plain = Build(s, o);
  o.gradient_checkpointing = true;
  Workload ckpt = Build(s, o);
  double block_fwd = 0;
  for (const Layer& l : ckpt.layers)
    if (l.checkpointed) block_fwd += l.fwd_flops;
  EXPECT_GT(block_fwd, 0.9 * plain.fwd_flops);
  EXPECT_DOUBLE_EQ(ckpt.recompute_flops, block_fwd);
  EXPECT_DOUBLE_EQ(ckpt.flops_per_step, plain.flops_per_step + block_fwd);
}



TEST(WorkloadTest, CheckpointingKeepsOnlyBlockInputs) {
  ModelSpec s = Model("llama-2-7b");
  RunShape o;
  o.micro_batch = 1;
  o.seq_len = 4096;
  Workload plain = Build(s, o);
  o.gradient_checkpointing = true;
  Workload ckpt = Build(s, o);
  const int64_t bsd = 4096LL * s.hidden_size * 2;
  const Layer& block = FindLayer(ckpt, "model.layers.7");
  EXPECT_TRUE(block.checkpointed);
  EXPECT_EQ(block.activation_bytes, bsd);  // its hidden-state input
  // Without checkpointing a Llama block never saves its input (RMSNorm saves an fp32 copy), so
  // everything it saves is made inside it and is rematerialized in backward.
  EXPECT_EQ(block.recompute_bytes, FindLayer(plain, "model.layers.7").saved_bytes);
  EXPECT_LT(ckpt.activation_bytes, plain.activation_bytes / 5);
  EXPECT_GT(ckpt.recompute_peak_bytes, 0);
}

// Qwen3's per-head q_norm and k_norm are Llama-style RMSNorms over head_dim: each saves the fp32
// copy of its input (pow and the product read it), the fp32 rsqrt per row and the normalized
// bf16 tensor (the weight's product reads it), and its input, the projection's output, is no
// longer saved by anything. A Qwen3 block keeps that much more than a Llama block of the same
// shape (the rotary and attention save the same tensors either way).
TEST(WorkloadTest, Qwen3QkNormsSaveTheirFp32Inputs) {
  Workload qwen3 = SmallDecoder("qwen3", R"(,"head_dim":32)");
  Workload llama = SmallDecoder("llama", R"(,"head_dim":32)");
  const int64_t rows_q = 3LL * 128 * 4, rows_k = 3LL * 128 * 2;
  const int64_t per_block = (4 + 2) * 32 * (rows_q + rows_k) + 4 * (rows_q + rows_k);
  EXPECT_EQ(FindLayer(qwen3, "model.layers.1").saved_bytes,
            FindLayer(llama, "model.layers.1").saved_bytes + per_block);
  EXPECT_EQ(qwen3.params, llama.params + 2 * 2 * 32);
}

// Phi-3's block against a Llama block of the same shape (modeling_phi3.py): v is a slice of the
// fused qkv_proj output, so SDPA's saved v keeps the whole fused output ((H + 2 KV) hd instead
// of Llama's KV hd); the rotary always ends in a cat, so q is contiguous [b, h, s, d] and the
// output projection reads a transposed copy of the attention output (H hd more); the fused
// gate_up output, the activation and the product keep what Llama's gate, up, activation and
// product keep. Parameters: the same counts in fewer tensors.
TEST(WorkloadTest, Phi3FusedProjectionsKeepTheirWholeOutputs) {
  Workload phi3 = SmallDecoder("phi3");
  Workload llama = SmallDecoder("llama");
  const int64_t tokens = 3LL * 128, H = 4, KV = 2, hd = 64;
  EXPECT_EQ(
      FindLayer(phi3, "model.layers.1").saved_bytes,
      FindLayer(llama, "model.layers.1").saved_bytes + tokens * (2 * (H + KV) * hd + 2 * H * hd));
  EXPECT_EQ(phi3.params, llama.params);
}

// Gemma 2 (modular_gemma2.py) against Gemma of the same shape: two more GemmaRMSNorms per block
// (on the attention output and the MLP output), each saving its fp32 input and normalized copy,
// the fp32 rsqrt per row and (1 + weight) in fp32; the logits soft-capped (the tanh saves its
// bf16 output; the raw logits and the quotient are transients); and in eager attention the
// scores soft-capped the same way (one bf16 tanh output more per score). SDPA ignores the
// attention cap (transformers 5.17's SDPA path does not read it).
TEST(WorkloadTest, Gemma2NormsAndSoftCaps) {
  const std::string shape = R"("vocab_size":1000,"hidden_size":256,"intermediate_size":512,
      "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":64)";
  auto spec = [&](const std::string& json) { return FromConfig(json, shape); };
  RunShape o;
  o.micro_batch = 3;
  o.seq_len = 128;
  o.attention = AttentionImpl::kSdpa;
  const int64_t tokens = 3LL * 128, d = 256, V = 1000, H = 4;
  Workload g2 = Build(spec(R"("model_type":"gemma2")"), o);
  Workload g1 = Build(spec(R"("model_type":"gemma")"), o);
  const int64_t norm = tokens * (8 * d + 4) + 4 * d;
  EXPECT_EQ(FindLayer(g2, "model.layers.1").saved_bytes,
            FindLayer(g1, "model.layers.1").saved_bytes + 2 * norm);
  EXPECT_EQ(FindLayer(g2, "lm_head").saved_bytes,
            FindLayer(g1, "lm_head").saved_bytes + 2 * V * tokens);
  EXPECT_EQ(FindLayer(g2, "lm_head").fwd_transient_bytes, 2 * V * tokens);
  EXPECT_EQ(g2.params, g1.params + 2 * 2 * d);
  Workload uncapped = Build(spec(R"("model_type":"gemma2","final_logit_softcapping":null,
      "attn_logit_softcapping":null)"),
                            o);
  EXPECT_EQ(FindLayer(uncapped, "lm_head").saved_bytes, FindLayer(g1, "lm_head").saved_bytes);
  EXPECT_EQ(FindLayer(uncapped, "model.layers.1").saved_bytes,
            FindLayer(g2, "model.layers.1").saved_bytes);
  o.attention = AttentionImpl::kEager;
  Workload eager = Build(spec(R"("model_type":"gemma2")"), o);
  Workload eager_uncapped =
      Build(spec(R"("model_type":"gemma2","attn_logit_softcapping":null)"), o);
  EXPECT_EQ(FindLayer(eager, "model.layers.1").saved_bytes,
            FindLayer(eager_uncapped, "model.layers.1").saved_bytes + 2 * H * tokens * 128);
}

// Gemma 2 slides its window on every other layer (layer_types, from the first): past the
// window, a sliding layer's SDPA reads the mask and K/V repeated to every query head, a full
// layer neither; within it the two keep the same.
TEST(WorkloadTest, Gemma2WindowOnEveryOtherLayer) {
  const ModelSpec s = FromConfig(R"("model_type":"gemma2","sliding_window":64)",
                                 R"("vocab_size":1000,"hidden_size":256,"intermediate_size":512,
      "num_hidden_layers":4,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":64)");
  RunShape o;
  o.micro_batch = 2;
  o.attention = AttentionImpl::kSdpa;
  o.seq_len = 63;
  Workload within = Build(s, o);
  EXPECT_EQ(FindLayer(within, "model.layers.2").saved_bytes,
            FindLayer(within, "model.layers.3").saved_bytes);
  // At the window's own length transformers already builds the mask (kv_length < window is
  // what skips it): the sliding layers read it and K/V repeated.
  o.seq_len = 64;
  Workload at = Build(s, o);
  EXPECT_GT(FindLayer(at, "model.layers.2").saved_bytes,
            FindLayer(at, "model.layers.3").saved_bytes);
  o.seq_len = 128;
  Workload past = Build(s, o);
  EXPECT_GT(FindLayer(past, "model.layers.2").saved_bytes,
            FindLayer(past, "model.layers.3").saved_bytes);
  EXPECT_EQ(FindLayer(past, "model.layers.1").saved_bytes,
            FindLayer(past, "model.layers.3").saved_bytes);
}

// Gemma 3 (modular_gemma3.py) against Gemma 2 of the same shape with its caps off: one
// GemmaRMSNorm more over each query head and each key head (q_norm, k_norm on head_dim rows),
// each saving what a block norm saves per row (fp32 input and normalized copy, the rsqrt) and
// its (1 + weight) once; by default its window slides on five layers of six.
TEST(WorkloadTest, Gemma3PerHeadNormsAndPattern) {
  const std::string shape = R"("vocab_size":1000,"hidden_size":256,"intermediate_size":512,
      "num_hidden_layers":6,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":64,
      "sliding_window":96)";
  RunShape o;
  o.micro_batch = 3;
  o.seq_len = 64;
  o.attention = AttentionImpl::kSdpa;
  const int64_t tokens = 3LL * 64, H = 4, KV = 2, hd = 64;
  Workload g3 = Build(FromConfig(R"("model_type":"gemma3_text")", shape), o);
  Workload g2 = Build(FromConfig(R"("model_type":"gemma2","final_logit_softcapping":null,
      "attn_logit_softcapping":null)",
                                 shape),
                      o);
  const int64_t qk = tokens * (H + KV) * (8 * hd + 4) + 2 * 4 * hd;
  EXPECT_EQ(FindLayer(g3, "model.layers.1").saved_bytes,
            FindLayer(g2, "model.layers.1").saved_bytes + qk);
  EXPECT_EQ(FindLayer(g3, "lm_head").saved_bytes, FindLayer(g2, "lm_head").saved_bytes);
  EXPECT_EQ(g3.params, g2.params + 6 * 2 * hd);
  // Past the window the sliding layers read the mask and repeated K/V; layer 5 is full.
  // (Layer 0 also holds the rotary tables, its first user.)
  o.seq_len = 128;
  Workload past = Build(FromConfig(R"("model_type":"gemma3_text")", shape), o);
  EXPECT_EQ(FindLayer(past, "model.layers.1").saved_bytes,
            FindLayer(past, "model.layers.4").saved_bytes);
  EXPECT_GT(FindLayer(past, "model.layers.4").saved_bytes,
            FindLayer(past, "model.layers.5").saved_bytes);
  // transformers tells SDPA is_causal only when it passes no mask: the sliding layers' kernel
  // computes the whole square (priced non-causal), the full layer's skips the upper half.
  auto sdpa_causal = [&](const Workload& w, const std::string& layer) {
    for (const Op& op : FindLayer(w, layer).ops) {
      if (op.kind == OpKind::kAttention) return op.causal;
    }
    ADD_FAILURE() << "no SDPA op in " << layer;
    return true;
  };
  EXPECT_FALSE(sdpa_causal(past, "model.layers.4"));
  EXPECT_TRUE(sdpa_causal(past, "model.layers.5"));
  // Inside the window no mask is built and every layer's kernel is causal.
  EXPECT_TRUE(sdpa_causal(g3, "model.layers.4"));
  // A sequence exactly as long as the window gets the mask too (masking_utils skips it only
  // while kv_length < the window), although it masks nothing.
  o.seq_len = 96;
  Workload at = Build(FromConfig(R"("model_type":"gemma3_text")", shape), o);
  EXPECT_FALSE(sdpa_causal(at, "model.layers.4"));
  EXPECT_TRUE(sdpa_causal(at, "model.layers.5"));
}

TEST(WorkloadTest, LogitsKeptAndUpcastForCausalLmLoss) {
  ModelSpec s = Model("llama-2-7b");
  RunShape o;
  o.micro_batch = 2;
  o.seq_len = 1024;
  Workload w = Build(s, o);
  const int64_t bsv = 2LL * 1024 * s.vocab_size;
  EXPECT_EQ(FindLayer(w, "lm_head").activation_bytes, 2 * bsv + 2 * 1024 * 2 * s.hidden_size);
  // fp32 log_softmax output, int64 targets and the fp32 total weight.
  EXPECT_EQ(FindLayer(w, "loss").activation_bytes, 4 * bsv + 8 * 2 * 1024 + 4);
  // logits.float() is saved by no op (log_softmax saves its output) but alive while
  // log_softmax writes: the loss's forward transient (usecache-1205: gpt2-xl at stage 0 peaked
  // in the loss forward with both fp32 buffers).
  EXPECT_EQ(FindLayer(w, "loss").fwd_transient_bytes, 4 * bsv);
  EXPECT_EQ(FindLayer(w, "lm_head").fwd_transient_bytes, 0);
}

TEST(WorkloadTest, T5PositionBiasHeldByCheckpointedBlocks) {
  ModelSpec s = Model("t5-3b");
  RunShape o;
  o.micro_batch = 4;
  o.seq_len = 512;
  o.target_len = 128;
  o.gradient_checkpointing = true;
  Workload w = Build(s, o);
  const int64_t enc_bias = 1LL * s.num_heads * 512 * 512 * 2;  // [1, h, s, s], not per sample
  const int64_t hidden = 4LL * 512 * s.hidden_size * 2;
  // Block 1 holds its hidden input and the encoder's position bias (made in block 0).
  EXPECT_EQ(FindLayer(w, "encoder.block.1").activation_bytes, hidden + enc_bias);
  EXPECT_EQ(FindLayer(w, "encoder.block.2").activation_bytes, hidden);
  EXPECT_EQ(w.tokens, 4 * (512 + 128));
}

TEST(WorkloadTest, Fp32DoublesActivationBytesOfBf16) {
  ModelSpec s = Model("gpt2");
  RunShape o;
  o.micro_batch = 2;
  o.seq_len = 256;
  o.attention = AttentionImpl::kEager;
  const Layer bf16 = FindLayer(Build(s, o), "transformer.h.0");
  o.precision = Precision::kFp32;
  const Layer fp32 = FindLayer(Build(s, o), "transformer.h.0");
  EXPECT_GT(fp32.activation_bytes, 1.8 * bf16.activation_bytes);
  EXPECT_LT(fp32.activation_bytes, 2.0 * bf16.activation_bytes);
}

TEST(WorkloadTest, MixtralRoutesTopKTokensPerExpert) {
  ModelSpec s = Model("mixtral-8x7b");
  RunShape o;
  o.seq_len = 1024;
  Workload w = Build(s, o);
  const Layer& block = FindLayer(w, "model.layers.0");
  double expert_flops = 0;
  for (const Op& op : block.ops)
    if (op.kind == OpKind::kGemm && op.name.find(".experts.") != std::string::npos)
      expert_flops += op.fwd_flops;
  EXPECT_DOUBLE_EQ(expert_flops, 2.0 * 1024 * s.experts_per_token * 3 * s.hidden_size *
                                     s.intermediate_size);
}

// Qwen3-MoE (modular_qwen3_moe.py) against Qwen3 and Mixtral of the same shape: a dense layer
// (mlp_only_layers) keeps what a Qwen3 block keeps; a sparse one keeps Qwen3's attention and
// Mixtral's routed experts at moe_intermediate_size; output_router_logits adds the
// load-balancing loss.
TEST(WorkloadTest, Qwen3MoeSparseAndDenseLayersAndAuxLoss) {
  const std::string moe = R"(,"head_dim":32,"num_experts":4,"num_experts_per_tok":2,
      "moe_intermediate_size":512,"mlp_only_layers":[0])";
  Workload q3moe = SmallDecoder("qwen3_moe", moe);
  Workload qwen3 = SmallDecoder("qwen3", R"(,"head_dim":32)");
  Workload mixtral = SmallDecoder("mixtral", R"(,"head_dim":32,"num_local_experts":4,
      "num_experts_per_tok":2)");
  Workload llama = SmallDecoder("llama", R"(,"head_dim":32)");
  EXPECT_EQ(FindLayer(q3moe, "model.layers.0").saved_bytes,
            FindLayer(qwen3, "model.layers.0").saved_bytes);
  // Sparse layer 1: Qwen3's q/k norms on top of Mixtral's layer (Llama attention + experts),
  // less 2 bytes per routed row twice: Qwen3-MoE's router casts its top-k weights back to bf16
  // (Mixtral's stay fp32), and the experts keep them sorted in that dtype.
  const int64_t routed = 3LL * 128 * 2;
  EXPECT_EQ(FindLayer(q3moe, "model.layers.1").saved_bytes,
            FindLayer(mixtral, "model.layers.1").saved_bytes +
                FindLayer(qwen3, "model.layers.1").saved_bytes -
                FindLayer(llama, "model.layers.1").saved_bytes - 2 * 2 * routed);
  const int64_t d = 256, E = 4, I = 512;
  EXPECT_EQ(q3moe.params, qwen3.params + (E * d + E * 3 * d * I) - 3 * d * I);
  // transformers 5.17 walks the sparse layers one at a time: per layer the output holds the
  // bf16 router logits, the softmax keeps its bf16 output and top-k its int64 indices, and an
  // fp32 copy of the probabilities is a transient.
  Workload aux = SmallDecoder("qwen3_moe", moe + R"(,"output_router_logits":true)");
  const int64_t tokens = 3LL * 128, k = 2;  // one sparse layer
  EXPECT_EQ(FindLayer(aux, "loss").saved_bytes,
            FindLayer(q3moe, "loss").saved_bytes + 2 * tokens * E * 2 + tokens * k * 8);
  EXPECT_GE(FindLayer(aux, "loss").fwd_transient_bytes, tokens * E * 4);
}

TEST(WorkloadTest, OpListCarriesGemmShapes) {
  ModelSpec s = Model("llama-2-7b");
  RunShape o;
  o.micro_batch = 2;
  o.seq_len = 512;
  Workload w = Build(s, o);
  const Layer& block = FindLayer(w, "model.layers.0");
  bool found = false;
  for (const Op& op : block.ops) {
    if (op.name == "model.layers.0.mlp.down_proj") {
      found = true;
      EXPECT_EQ(op.kind, OpKind::kGemm);
      EXPECT_EQ(op.m, 1024);
      EXPECT_EQ(op.n, s.hidden_size);
      EXPECT_EQ(op.k, s.intermediate_size);
    }
  }
  EXPECT_TRUE(found);
}

TEST(WorkloadTest, BadInputIsAnError) {
  ModelSpec s = Model("gpt2");
  RunShape o;
  o.micro_batch = 0;
  EXPECT_EQ(BuildWorkload(s, o).status().code(), Status::Code::kInvalidArgument);
  o.micro_batch = 1;
  o.seq_len = -5;
  EXPECT_EQ(BuildWorkload(s, o).status().code(), Status::Code::kInvalidArgument);
  o.seq_len = 2048;  // gpt2 has 1024 learned positions
  auto r = BuildWorkload(s, o);
  EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("1024"), std::string::npos);
  o.seq_len = 128;
  o.target_len = 64;  // decoder-only
  EXPECT_EQ(BuildWorkload(s, o).status().code(), Status::Code::kInvalidArgument);
  ModelSpec bloom = Model("bloom-560m");
  RunShape ob;
  ob.attention = AttentionImpl::kSdpa;
  EXPECT_EQ(BuildWorkload(bloom, ob).status().code(), Status::Code::kUnsupported);
}

TEST(WorkloadTest, OverflowIsReportedNotWrapped) {
  ModelSpec s = Model("llama-2-70b");
  RunShape o;
  o.micro_batch = int64_t{1} << 40;
  o.seq_len = int64_t{1} << 20;
  auto r = BuildWorkload(s, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("overflow"), std::string::npos);
}

}  // namespace
}  // namespace dsplan
