// The workload model: FLOPs against closed forms, activation accounting against what autograd
// keeps (hand counts from the HF code), checkpointing, and bad input.
#include <gtest/gtest.h>

#include <string>

#include "core/model_catalog.h"
#include "simulator/workload.h"

namespace dsplan {
namespace {

const std::string kData = DSPLAN_TEST_DATA_DIR;

ModelSpec Model(const std::string& name) {
  auto s = LoadModel(name, kData);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? *s : ModelSpec{};
}

Workload Build(const ModelSpec& spec, WorkloadOptions o) {
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

// Decoder-only: flops = 6 * (N - input embedding tables) * tokens + 12 * L * s * d * tokens
// (the PaLM/Megatron closed form with full, not causal-halved, attention), up to the small
// elementwise terms.
TEST(WorkloadTest, DecoderOnlyFlopsMatchClosedForm) {
  for (const char* name : {"llama-2-7b", "gpt2-xl", "mistral-7b", "opt-6.7b", "bloom-7b1"}) {
    ModelSpec s = Model(name);
    WorkloadOptions o;
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
  WorkloadOptions o;
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

// GPT-2 block with SDPA in bf16, counted by hand from modeling_gpt2.py + autograd (b*s*d
// units of 2 bytes unless noted): ln_1 input 1, c_attn input 1, fused qkv 3 (q, k, v are views
// saved by SDPA), SDPA output 1 (reused by c_proj), attention resid-dropout mask 0.5 (1 byte),
// ln_2 input 1, c_fc input 1, gelu_new: c_fc output 4 + tanh 4 + 0.5*x 4 + 1+tanh 4,
// c_proj input 4, MLP dropout mask 0.5. Total 29 * (b*s*d) * 2 bytes = 58 b*s*d bytes,
// plus fp32 LayerNorm statistics (2 norms * 2 * b*s * 4 bytes) and the fp32 logsumexp.
TEST(WorkloadTest, Gpt2BlockActivationsMatchHandCount) {
  ModelSpec s = Model("gpt2-xl");
  WorkloadOptions o;
  o.micro_batch = 4;
  o.seq_len = 1024;
  o.attention = AttentionImpl::kSdpa;
  Workload w = Build(s, o);
  const int64_t bs = 4 * 1024, d = s.hidden_size;
  const int64_t expected = 58 * bs * d + 2 * 2 * bs * 4 + 4 * s.num_heads * 1024 * 4;
  const Layer& block = FindLayer(w, "transformer.h.5");
  EXPECT_EQ(block.activation_bytes, expected);
  EXPECT_EQ(block.saved_bytes, expected);
}

// Eager attention adds the attention matrix: GPT-2 keeps the bf16 softmax output, the dropout
// mask and the dropped probabilities (2 + 1 + 2 bytes per b*h*s*s element), and copies the
// context (transpose + contiguous) for c_proj instead of reusing the kernel output.
TEST(WorkloadTest, EagerAttentionKeepsTheAttentionMatrix) {
  ModelSpec s = Model("gpt2-xl");
  WorkloadOptions o;
  o.micro_batch = 2;
  o.seq_len = 512;
  o.attention = AttentionImpl::kSdpa;
  const Layer sdpa = FindLayer(Build(s, o), "transformer.h.0");
  o.attention = AttentionImpl::kEager;
  const Layer eager = FindLayer(Build(s, o), "transformer.h.0");
  const int64_t bhss = 2LL * s.num_heads * 512 * 512;
  const int64_t lse = 2LL * s.num_heads * 512 * 4;
  // eager keeps: probs 2 + mask 1 + dropped 2 bytes per element; the context copy replaces the
  // SDPA output one for one; the logsumexp is gone.
  EXPECT_EQ(eager.activation_bytes - sdpa.activation_bytes, 5 * bhss - lse);
}

TEST(WorkloadTest, CheckpointingKeepsOnlyBlockInputs) {
  ModelSpec s = Model("llama-2-7b");
  WorkloadOptions o;
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

// Llama in bf16 with SDPA: RMSNorm keeps an fp32 copy of its input and the bf16 normalized
// tensor (6 bytes per element), q and k after rotary and v are saved by SDPA, SwiGLU keeps the
// gate and up projections and silu's output.
TEST(WorkloadTest, LlamaBlockActivationsMatchHandCount) {
  ModelSpec s = Model("llama-2-7b");
  WorkloadOptions o;
  o.micro_batch = 1;
  o.seq_len = 2048;
  Workload w = Build(s, o);
  const int64_t bs = 2048, d = s.hidden_size, I = s.intermediate_size;
  const int64_t norms = 2 * (6 * bs * d + 4 * bs);
  const int64_t attn = 2 * bs * d /*q_proj input (norm out)*/ + 2 * bs * d /*q rot*/ +
                       2 * bs * d /*k rot*/ + 2 * bs * d /*v*/ + 2 * bs * d /*out*/ +
                       4 * s.num_heads * bs /*lse*/;
  const int64_t mlp = 2 * bs * d /*gate/up input*/ + 2 * bs * I * 3 /*gate, silu, up*/ +
                      2 * bs * I /*down input*/;
  const Layer& block = FindLayer(w, "model.layers.3");
  EXPECT_EQ(block.activation_bytes, norms + attn + mlp);
}

TEST(WorkloadTest, LogitsKeptAndUpcastForCausalLmLoss) {
  ModelSpec s = Model("llama-2-7b");
  WorkloadOptions o;
  o.micro_batch = 2;
  o.seq_len = 1024;
  Workload w = Build(s, o);
  const int64_t bsv = 2LL * 1024 * s.vocab_size;
  EXPECT_EQ(FindLayer(w, "lm_head").activation_bytes, 2 * bsv + 2 * 1024 * 2 * s.hidden_size);
  EXPECT_EQ(FindLayer(w, "loss").activation_bytes, 4 * bsv);  // fp32 log_softmax output
}

TEST(WorkloadTest, T5PositionBiasHeldByCheckpointedBlocks) {
  ModelSpec s = Model("t5-3b");
  WorkloadOptions o;
  o.micro_batch = 4;
  o.seq_len = 512;
  o.target_len = 128;
  o.gradient_checkpointing = true;
  Workload w = Build(s, o);
  const int64_t enc_bias = 4LL * s.num_heads * 512 * 512 * 2;
  const int64_t hidden = 4LL * 512 * s.hidden_size * 2;
  // Block 1 holds its hidden input and the encoder's position bias (made in block 0).
  EXPECT_EQ(FindLayer(w, "encoder.block.1").activation_bytes, hidden + enc_bias);
  EXPECT_EQ(FindLayer(w, "encoder.block.2").activation_bytes, hidden);
  EXPECT_EQ(w.tokens, 4 * (512 + 128));
}

TEST(WorkloadTest, Fp32DoublesActivationBytesOfBf16) {
  ModelSpec s = Model("gpt2");
  WorkloadOptions o;
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
  WorkloadOptions o;
  o.seq_len = 1024;
  Workload w = Build(s, o);
  const Layer& block = FindLayer(w, "model.layers.0");
  double expert_flops = 0;
  for (const Op& op : block.ops)
    if (op.name.find(".experts.w") != std::string::npos) expert_flops += op.fwd_flops;
  EXPECT_DOUBLE_EQ(expert_flops, 2.0 * 1024 * s.experts_per_token * 3 * s.hidden_size *
                                     s.intermediate_size);
}

TEST(WorkloadTest, OpListCarriesGemmShapes) {
  ModelSpec s = Model("llama-2-7b");
  WorkloadOptions o;
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
  WorkloadOptions o;
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
  WorkloadOptions ob;
  ob.attention = AttentionImpl::kSdpa;
  EXPECT_EQ(BuildWorkload(bloom, ob).status().code(), Status::Code::kUnsupported);
}

TEST(WorkloadTest, OverflowIsReportedNotWrapped) {
  ModelSpec s = Model("llama-2-70b");
  WorkloadOptions o;
  o.micro_batch = int64_t{1} << 40;
  o.seq_len = int64_t{1} << 20;
  auto r = BuildWorkload(s, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("overflow"), std::string::npos);
}

}  // namespace
}  // namespace dsplan
