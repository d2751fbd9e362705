// Decoder-only families: GPT-2, GPT-J, GPT-NeoX, OPT, BLOOM, Llama, Mistral, Qwen2, Mixtral,
// Falcon, Phi, Gemma. Each block function follows the family's modeling_*.py forward in train
// mode; docs/activations.md lists the facts relied on.
#include <string>

#include <fmt/format.h>

#include "simulator/families/families.h"

namespace dsplan {
namespace {

struct Ctx {
  Tracer& tr;
  const ModelSpec& s;
  int64_t b = 0;
  int64_t n = 0;  // sequence length
  T cos, sin;     // rotary tables from the model-level rotary embedding (when used)
  bool rope = false;
};

std::string L(const std::string& prefix, int64_t i) { return fmt::format("{}.{}", prefix, i); }

// Splits a [b, n, heads * hd] projection into a [b, heads, n, hd] view.
T Heads(Ctx& c, const T& x, int64_t heads, int64_t hd) {
  return c.tr.View(x, {c.b, heads, c.n, hd});
}

// repeat_kv in eager attention materializes K/V for every query head when kv_heads < heads.
T RepeatKv(Ctx& c, const std::string& name, const T& x) {
  if (c.tr.sdpa() || x.dim(1) == c.s.num_heads) return x;
  T y = c.tr.New(name, {c.b, c.s.num_heads, c.n, x.dim(3)});
  return y;
}

// Attention over separate q/k/v projections with optional rotary (Llama, Mistral, Qwen2,
// Mixtral, Gemma, Phi, GPT-J-style wiring is handled by its own block).
struct ProjNames {
  const char* q;
  const char* k;
  const char* v;
  const char* o;
};

T SeparateQkvAttention(Ctx& c, const std::string& p, const T& x, const ProjNames& names,
                       bool qkv_bias, bool o_bias, bool softmax_fp32) {
  const ModelSpec& s = c.s;
  Tracer& tr = c.tr;
  T q = Linear(tr, p + "." + names.q, x, s.num_heads * s.head_dim, qkv_bias);
  T k = Linear(tr, p + "." + names.k, x, s.num_kv_heads * s.head_dim, qkv_bias);
  T v = Linear(tr, p + "." + names.v, x, s.num_kv_heads * s.head_dim, qkv_bias);
  T qh = Heads(c, q, s.num_heads, s.head_dim);
  T kh = Heads(c, k, s.num_kv_heads, s.head_dim);
  T vh = Heads(c, v, s.num_kv_heads, s.head_dim);
  if (s.qk_layernorm) {
    qh = LayerNorm(tr, p + ".q_layernorm", qh);
    kh = LayerNorm(tr, p + ".k_layernorm", kh);
  }
  if (c.rope) {
    qh = Rotary(tr, p + ".rotary_q", qh, s.rotary_dim, c.cos, c.sin);
    kh = Rotary(tr, p + ".rotary_k", kh, s.rotary_dim, c.cos, c.sin);
  }
  AttentionArgs a;
  a.name = p;
  a.q = qh;
  a.k = RepeatKv(c, p + ".k_repeated", kh);
  a.v = RepeatKv(c, p + ".v_repeated", vh);
  a.causal = true;
  a.dropout = s.attn_dropout;
  a.eager_softmax_fp32 = softmax_fp32;
  T ctx = Attention(tr, a);
  return Linear(tr, p + "." + names.o, ctx, s.hidden_size, o_bias);
}

T Mlp2(Ctx& c, const std::string& p, const T& x, const char* up, const char* down, bool bias) {
  T h = Linear(c.tr, p + "." + up, x, c.s.intermediate_size, bias);
  h = Activate(c.tr, p + ".act", h, c.s.activation);
  return Linear(c.tr, p + "." + down, h, c.s.hidden_size, bias);
}

T GatedMlp(Ctx& c, const std::string& p, const T& x, int64_t inter, bool bias) {
  T g = Linear(c.tr, p + ".gate_proj", x, inter, bias);
  T a = Activate(c.tr, p + ".act_fn", g, c.s.activation);
  T u = Linear(c.tr, p + ".up_proj", x, inter, bias);
  T h = MulSaveBoth(c.tr, p + ".act_mul_up", a, u);
  return Linear(c.tr, p + ".down_proj", h, c.s.hidden_size, bias);
}

// Mixtral's sparse MoE block. Routing is modeled as uniform: each expert receives
// tokens * top_k / num_experts rows (the expectation under a balanced router).
T MoeBlock(Ctx& c, const std::string& p, const T& x) {
  const ModelSpec& s = c.s;
  Tracer& tr = c.tr;
  const int64_t tokens = x.rows();
  const int64_t d = s.hidden_size, inter = s.intermediate_size, e = s.num_experts;
  const int64_t routed = tr.Mul(tokens, s.experts_per_token, "routed tokens");
  T flat = tr.View(x, {tokens, d});
  T logits = Linear(tr, p + ".gate", flat, e, false);
  // softmax(router_logits, dtype=float) saves its fp32 output; topk saves the indices.
  T probs = tr.New(p + ".routing_probs", {tokens, e}, DType::kF32);
  tr.Save(probs);
  T idx = tr.New(p + ".topk_indices", {tokens, s.experts_per_token}, DType::kI64);
  tr.Save(idx);
  T weights = tr.New(p + ".routing_weights", {tokens, s.experts_per_token});
  {
    Op op;
    op.name = p + ".router_softmax_topk";
    op.kind = OpKind::kSoftmax;
    op.fwd_flops = 6.0 * tokens * e;
    op.bwd_flops = 4.0 * tokens * e;
    op.fwd_bytes = 2.0 * tokens * e * 4;
    op.bwd_bytes = 3.0 * tokens * e * 4;
    tr.AddOp(std::move(op));
  }
  (void)logits;
  // Experts: parameters per expert; activations for all routed rows together.
  for (int64_t i = 0; i < e; ++i) {
    tr.Param(fmt::format("{}.experts.{}.w1.weight", p, i), {inter, d});
    tr.Param(fmt::format("{}.experts.{}.w2.weight", p, i), {d, inter});
    tr.Param(fmt::format("{}.experts.{}.w3.weight", p, i), {inter, d});
  }
  T gathered = tr.New(p + ".expert_inputs", {routed, d});  // hidden_states[top_x] copies
  T w1 = tr.New(p + ".experts.w1.out", {routed, inter});
  T act = tr.New(p + ".experts.act.out", {routed, inter});
  T w3 = tr.New(p + ".experts.w3.out", {routed, inter});
  T prod = tr.New(p + ".experts.act_mul_w3", {routed, inter});
  T w2 = tr.New(p + ".experts.w2.out", {routed, d});
  T rw = tr.New(p + ".experts.routing_weight_rows", {routed, 1});
  tr.Save(gathered);  // by w1 and w3
  tr.Save(w1);        // by silu
  tr.Save(act);       // by the mul
  tr.Save(w3);        // by the mul
  tr.Save(prod);      // by w2
  tr.Save(w2);        // by the mul with the routing weight
  tr.Save(rw);
  (void)weights;
  const int64_t per_expert = (routed + e - 1) / e;
  auto expert_gemm = [&](const std::string& name, int64_t n_out, int64_t k_in) {
    Op op;
    op.name = name;
    op.kind = OpKind::kGemm;
    op.m = per_expert;
    op.n = n_out;
    op.k = k_in;
    op.batch = e;
    const double mnk = static_cast<double>(routed) * n_out * k_in;
    op.fwd_flops = 2 * mnk;
    op.bwd_flops = 4 * mnk;
    const double el = DTypeBytes(x.dtype);
    op.fwd_bytes = el * (static_cast<double>(routed) * (k_in + n_out) +
                         static_cast<double>(e) * n_out * k_in);
    op.bwd_bytes = 2 * op.fwd_bytes;
    tr.AddOp(std::move(op));
  };
  expert_gemm(p + ".experts.w1", inter, d);
  expert_gemm(p + ".experts.w3", inter, d);
  expert_gemm(p + ".experts.w2", d, inter);
  {
    Op op;
    op.name = p + ".experts.elementwise";
    op.kind = OpKind::kElementwise;
    op.fwd_flops = 10.0 * routed * inter;
    op.bwd_flops = 20.0 * routed * inter;
    op.fwd_bytes = 6.0 * routed * inter * DTypeBytes(x.dtype);
    op.bwd_bytes = 12.0 * routed * inter * DTypeBytes(x.dtype);
    tr.AddOp(std::move(op));
  }
  T out = tr.New(p + ".out", x.shape);  // index_add_ into zeros: saves only the indices
  return out;
}

// ---------------------------------------------------------------------------------------------

void TailAndLoss(Ctx& c, const T& h, const std::string& final_norm, const std::string& head,
                 const T& tied, bool head_bias, bool logits_fp32) {
  Tracer& tr = c.tr;
  const ModelSpec& s = c.s;
  T x = h;
  if (!final_norm.empty()) {
    tr.BeginLayer(final_norm, LayerKind::kFinalNorm, false);
    switch (s.family) {
      case Family::kLlama:
      case Family::kMistral:
      case Family::kQwen2:
      case Family::kMixtral: x = RmsNormLlama(tr, final_norm, h); break;
      case Family::kGemma: x = RmsNormGemma(tr, final_norm, h); break;
      default: x = LayerNorm(tr, final_norm, h); break;
    }
    if (s.family == Family::kOpt && s.opt_word_embed_proj_dim != s.hidden_size) {
      x = Linear(tr, "model.decoder.project_out", x, s.opt_word_embed_proj_dim, false);
    }
  }
  tr.BeginLayer(head, LayerKind::kHead, false);
  if (final_norm.empty() && s.family == Family::kOpt &&
      s.opt_word_embed_proj_dim != s.hidden_size) {
    x = Linear(tr, "model.decoder.project_out", x, s.opt_word_embed_proj_dim, false);
  }
  const T* tie = s.tie_word_embeddings ? &tied : nullptr;
  T logits = Linear(tr, head, x, s.vocab_size, head_bias, tie);
  if (logits_fp32 && logits.dtype != DType::kF32) {
    logits = Copy(tr, head + ".logits_fp32", logits, DType::kF32);
  }
  tr.KeepAsOutput(logits);
  tr.BeginLayer("loss", LayerKind::kLoss, false);
  CrossEntropy(tr, "loss", logits, /*upcast=*/true);
}

// Rotary tables computed once per forward by the model-level rotary embedding, in the
// activation dtype, [b, n, rotary_dim].
void MakeRotary(Ctx& c, const std::string& name) {
  if (c.s.rotary_dim <= 0) return;
  c.cos = c.tr.New(name + ".cos", {c.b, c.n, c.s.rotary_dim});
  c.sin = c.tr.New(name + ".sin", {c.b, c.n, c.s.rotary_dim});
  c.rope = true;
}

void BeginBlock(Ctx& c, const std::string& name, const T& h) {
  c.tr.BeginLayer(name, LayerKind::kDecoderBlock, true);
  c.tr.CheckpointArg(h);
  if (c.rope) {
    c.tr.CheckpointArg(c.cos);
    c.tr.CheckpointArg(c.sin);
  }
}

void Gpt2(Ctx& c, const T& ids) {
  Tracer& tr = c.tr;
  const ModelSpec& s = c.s;
  tr.BeginLayer("transformer.embeddings", LayerKind::kEmbedding, false);
  T wte;
  T tok = Embedding(tr, "transformer.wte", ids, s.vocab_size, s.hidden_size, &wte);
  T pos_ids = tr.Input("position_ids", {1, c.n}, DType::kI64);
  T pos = Embedding(tr, "transformer.wpe", pos_ids, s.max_positions, s.hidden_size);
  T h = AddT(tr, "transformer.embed_add", tok, pos);
  h = Dropout(tr, "transformer.drop", h, s.embd_dropout);
  for (int64_t i = 0; i < s.num_layers; ++i) {
    const std::string p = L("transformer.h", i);
    BeginBlock(c, p, h);
    T x = LayerNorm(tr, p + ".ln_1", h);
    T qkv = Linear(tr, p + ".attn.c_attn", x, 3 * s.hidden_size, true);
    AttentionArgs a;
    a.name = p + ".attn";
    a.q = tr.View(qkv, {c.b, s.num_heads, c.n, s.head_dim});
    a.k = a.q;
    a.v = a.q;
    a.dropout = s.attn_dropout;
    a.eager_softmax_fp32 = false;
    T o = Linear(tr, p + ".attn.c_proj", Attention(tr, a), s.hidden_size, true);
    o = Dropout(tr, p + ".attn.resid_dropout", o, s.hidden_dropout);
    T h2 = AddT(tr, p + ".residual_1", h, o);
    x = LayerNorm(tr, p + ".ln_2", h2);
    T m = Mlp2(c, p + ".mlp", x, "c_fc", "c_proj", true);
    m = Dropout(tr, p + ".mlp.dropout", m, s.hidden_dropout);
    h = AddT(tr, p + ".residual_2", h2, m);
  }
  TailAndLoss(c, h, "transformer.ln_f", "lm_head", wte, false, false);
}

void GptJ(Ctx& c, const T& ids) {
  Tracer& tr = c.tr;
  const ModelSpec& s = c.s;
  tr.BeginLayer("transformer.embeddings", LayerKind::kEmbedding, false);
  T wte;
  T h = Embedding(tr, "transformer.wte", ids, s.vocab_size, s.hidden_size, &wte);
  h = Dropout(tr, "transformer.drop", h, s.embd_dropout);
  const int64_t rot = s.rotary_dim > 0 ? s.rotary_dim : s.head_dim;
  for (int64_t i = 0; i < s.num_layers; ++i) {
    const std::string p = L("transformer.h", i);
    BeginBlock(c, p, h);
    T x = LayerNorm(tr, p + ".ln_1", h);
    T q = Linear(tr, p + ".attn.q_proj", x, s.hidden_size, false);
    T k = Linear(tr, p + ".attn.k_proj", x, s.hidden_size, false);
    T v = Linear(tr, p + ".attn.v_proj", x, s.hidden_size, false);
    // Per-layer sin/cos gathered from the embed_positions buffer, repeat_interleave'd to the
    // rotary width; the rotary muls save them.
    T sin = tr.New(p + ".attn.sin", {c.b, c.n, 1, rot});
    T cos = tr.New(p + ".attn.cos", {c.b, c.n, 1, rot});
    T qh = Rotary(tr, p + ".attn.rotary_q", Heads(c, q, s.num_heads, s.head_dim), rot, cos, sin);
    T kh = Rotary(tr, p + ".attn.rotary_k", Heads(c, k, s.num_heads, s.head_dim), rot, cos, sin);
    AttentionArgs a;
    a.name = p + ".attn";
    a.q = qh;
    a.k = kh;
    a.v = Heads(c, v, s.num_heads, s.head_dim);
    a.dropout = s.attn_dropout;
    a.eager_upcast_qk = true;
    a.eager_softmax_fp32 = true;
    T o = Linear(tr, p + ".attn.out_proj", Attention(tr, a), s.hidden_size, false);
    o = Dropout(tr, p + ".attn.resid_dropout", o, s.hidden_dropout);
    T m = Mlp2(c, p + ".mlp", x, "fc_in", "fc_out", true);
    m = Dropout(tr, p + ".mlp.dropout", m, s.hidden_dropout);
    T sum = AddT(tr, p + ".parallel_add", o, m);
    h = AddT(tr, p + ".residual", sum, h);
  }
  // GPTJForCausalLM casts the logits to fp32 in the model (and returns them in fp32).
  TailAndLoss(c, h, "transformer.ln_f", "lm_head", wte, true, true);
}

void GptNeoX(Ctx& c, const T& ids) {
  Tracer& tr = c.tr;
  const ModelSpec& s = c.s;
  tr.BeginLayer("gpt_neox.embeddings", LayerKind::kEmbedding, false);
  T emb;
  T h = Embedding(tr, "gpt_neox.embed_in", ids, s.vocab_size, s.hidden_size, &emb);
  h = Dropout(tr, "gpt_neox.emb_dropout", h, s.hidden_dropout);
  MakeRotary(c, "gpt_neox.rotary_emb");
  for (int64_t i = 0; i < s.num_layers; ++i) {
    const std::string p = L("gpt_neox.layers", i);
    BeginBlock(c, p, h);
    T x = LayerNorm(tr, p + ".input_layernorm", h);
    T qkv = Linear(tr, p + ".attention.query_key_value", x, 3 * s.hidden_size, s.linear_bias);
    T q = tr.View(qkv, {c.b, s.num_heads, c.n, s.head_dim});
    AttentionArgs a;
    a.name = p + ".attention";
    a.q = Rotary(tr, p + ".attention.rotary_q", q, s.rotary_dim, c.cos, c.sin);
    a.k = Rotary(tr, p + ".attention.rotary_k", q, s.rotary_dim, c.cos, c.sin);
    a.v = q;  // a view of the fused projection
    a.dropout = s.attn_dropout;
    T o = Linear(tr, p + ".attention.dense", Attention(tr, a), s.hidden_size, s.linear_bias);
    o = Dropout(tr, p + ".post_attention_dropout", o, s.hidden_dropout);
    if (s.parallel_residual) {
      T x2 = LayerNorm(tr, p + ".post_attention_layernorm", h);
      T m = Mlp2(c, p + ".mlp", x2, "dense_h_to_4h", "dense_4h_to_h", true);
      m = Dropout(tr, p + ".post_mlp_dropout", m, s.hidden_dropout);
      T sum = AddT(tr, p + ".parallel_add", m, o);
      h = AddT(tr, p + ".residual", sum, h);
    } else {
      T h2 = AddT(tr, p + ".residual_1", o, h);
      T x2 = LayerNorm(tr, p + ".post_attention_layernorm", h2);
      T m = Mlp2(c, p + ".mlp", x2, "dense_h_to_4h", "dense_4h_to_h", true);
      m = Dropout(tr, p + ".post_mlp_dropout", m, s.hidden_dropout);
      h = AddT(tr, p + ".residual_2", m, h2);
    }
  }
  TailAndLoss(c, h, "gpt_neox.final_layer_norm", "embed_out", emb, false, false);
}

void Opt(Ctx& c, const T& ids) {
  Tracer& tr = c.tr;
  const ModelSpec& s = c.s;
  const bool project = s.opt_word_embed_proj_dim != s.hidden_size;
  tr.BeginLayer("model.decoder.embeddings", LayerKind::kEmbedding, false);
  T emb;
  T tok = Embedding(tr, "model.decoder.embed_tokens", ids, s.vocab_size, s.opt_word_embed_proj_dim,
                    &emb);
  if (project) tok = Linear(tr, "model.decoder.project_in", tok, s.hidden_size, false);
  T pos_ids = tr.Input("position_ids", {c.b, c.n}, DType::kI64);
  T pos = Embedding(tr, "model.decoder.embed_positions", pos_ids,
                    s.max_positions + s.position_offset, s.hidden_size);
  T h = AddT(tr, "model.decoder.embed_add", tok, pos);
  h = Dropout(tr, "model.decoder.dropout", h, s.hidden_dropout);
  const ProjNames names{"q_proj", "k_proj", "v_proj", "out_proj"};
  for (int64_t i = 0; i < s.num_layers; ++i) {
    const std::string p = L("model.decoder.layers", i);
    BeginBlock(c, p, h);
    T x = s.opt_norm_before ? LayerNorm(tr, p + ".self_attn_layer_norm", h) : h;
    T o = SeparateQkvAttention(c, p + ".self_attn", x, names, s.linear_bias, s.linear_bias, true);
    o = Dropout(tr, p + ".dropout_1", o, s.hidden_dropout);
    T h2 = AddT(tr, p + ".residual_1", h, o);
    if (!s.opt_norm_before) h2 = LayerNorm(tr, p + ".self_attn_layer_norm", h2);
    x = s.opt_norm_before ? LayerNorm(tr, p + ".final_layer_norm", h2) : h2;
    T m = Mlp2(c, p, x, "fc1", "fc2", s.linear_bias);
    m = Dropout(tr, p + ".dropout_2", m, s.hidden_dropout);
    h = AddT(tr, p + ".residual_2", h2, m);
    if (!s.opt_norm_before) h = LayerNorm(tr, p + ".final_layer_norm", h);
  }
  TailAndLoss(c, h, s.opt_final_norm ? "model.decoder.final_layer_norm" : "", "lm_head", emb,
              false, false);
}

void Bloom(Ctx& c, const T& ids) {
  Tracer& tr = c.tr;
  const ModelSpec& s = c.s;
  tr.BeginLayer("transformer.embeddings", LayerKind::kEmbedding, false);
  T emb;
  T h = Embedding(tr, "transformer.word_embeddings", ids, s.vocab_size, s.hidden_size, &emb);
  h = LayerNorm(tr, "transformer.word_embeddings_layernorm", h);
  // ALiBi [b * heads, 1, n]: an input of baddbmm that needs no gradient, so it is not saved.
  T alibi = tr.New("transformer.alibi", {c.b * s.num_heads, 1, c.n});
  for (int64_t i = 0; i < s.num_layers; ++i) {
    const std::string p = L("transformer.h", i);
    BeginBlock(c, p, h);
    tr.CheckpointArg(alibi);
    T x = LayerNorm(tr, p + ".input_layernorm", h);
    T qkv = Linear(tr, p + ".self_attention.query_key_value", x, 3 * s.hidden_size, true);
    T qh = tr.View(qkv, {c.b, s.num_heads, c.n, s.head_dim});
    AttentionArgs a;
    a.name = p + ".self_attention";
    if (tr.sdpa()) {
      a.q = a.k = a.v = qh;
    } else {
      // reshape(batch * heads, n, hd) of a transposed view copies q, k and v.
      a.q = Copy(tr, p + ".self_attention.q", qh, qh.dtype);
      a.k = Copy(tr, p + ".self_attention.k", qh, qh.dtype);
      a.v = Copy(tr, p + ".self_attention.v", qh, qh.dtype);
    }
    a.dropout = s.attn_dropout;
    a.float_mask = &alibi;
    T o = Linear(tr, p + ".self_attention.dense", Attention(tr, a), s.hidden_size, true);
    o = Dropout(tr, p + ".self_attention.dropout", o, s.hidden_dropout);
    T h2 = AddT(tr, p + ".residual_1", o, h);
    x = LayerNorm(tr, p + ".post_attention_layernorm", h2);
    T m = Mlp2(c, p + ".mlp", x, "dense_h_to_4h", "dense_4h_to_h", true);
    m = Dropout(tr, p + ".mlp.dropout", m, s.hidden_dropout);
    h = AddT(tr, p + ".residual_2", m, h2);
  }
  TailAndLoss(c, h, "transformer.ln_f", "lm_head", emb, false, false);
}

void Falcon(Ctx& c, const T& ids) {
  Tracer& tr = c.tr;
  const ModelSpec& s = c.s;
  tr.BeginLayer("transformer.embeddings", LayerKind::kEmbedding, false);
  T emb;
  T h = Embedding(tr, "transformer.word_embeddings", ids, s.vocab_size, s.hidden_size, &emb);
  T alibi;
  if (s.alibi) alibi = tr.New("transformer.alibi", {c.b * s.num_heads, 1, c.n});
  MakeRotary(c, "transformer.rotary_emb");
  int64_t qkv_out = 3 * s.hidden_size;
  if (s.falcon_new_arch) {
    qkv_out = (2 * s.num_kv_heads + s.num_heads) * s.head_dim;
  } else if (s.falcon_multi_query) {
    qkv_out = s.hidden_size + 2 * s.head_dim;
  }
  for (int64_t i = 0; i < s.num_layers; ++i) {
    const std::string p = L("transformer.h", i);
    BeginBlock(c, p, h);
    if (s.alibi) tr.CheckpointArg(alibi);
    T x_attn, x_mlp;
    if (s.parallel_residual && s.falcon_num_ln_parallel == 2) {
      x_attn = LayerNorm(tr, p + ".ln_attn", h);
      x_mlp = LayerNorm(tr, p + ".ln_mlp", h);
    } else {
      x_attn = x_mlp = LayerNorm(tr, p + ".input_layernorm", h);
    }
    T qkv = Linear(tr, p + ".self_attention.query_key_value", x_attn, qkv_out, s.linear_bias);
    T q = tr.View(qkv, {c.b, s.num_heads, c.n, s.head_dim});
    // K and V are picked out with index lists ([..., [-2], :]), which copies them.
    T k = tr.New(p + ".self_attention.k", {c.b, s.num_kv_heads, c.n, s.head_dim});
    T v = tr.New(p + ".self_attention.v", {c.b, s.num_kv_heads, c.n, s.head_dim});
    AttentionArgs a;
    a.name = p + ".self_attention";
    if (c.rope) {
      q = Rotary(tr, p + ".self_attention.rotary_q", q, s.rotary_dim, c.cos, c.sin);
      k = Rotary(tr, p + ".self_attention.rotary_k", k, s.rotary_dim, c.cos, c.sin);
    }
    a.q = q;
    a.k = RepeatKv(c, p + ".self_attention.k_repeated", k);
    a.v = RepeatKv(c, p + ".self_attention.v_repeated", v);
    a.dropout = s.attn_dropout;
    if (s.alibi) a.float_mask = &alibi;
    T o = Linear(tr, p + ".self_attention.dense", Attention(tr, a), s.hidden_size, s.linear_bias);
    if (s.parallel_residual) {
      T m = Mlp2(c, p + ".mlp", x_mlp, "dense_h_to_4h", "dense_4h_to_h", s.linear_bias);
      T sum = AddT(tr, p + ".parallel_add", m, o);
      sum = Dropout(tr, p + ".dropout", sum, s.hidden_dropout);
      h = AddT(tr, p + ".residual", sum, h);
    } else {
      o = Dropout(tr, p + ".attn_dropout", o, s.hidden_dropout);
      T h2 = AddT(tr, p + ".residual_1", o, h);
      T x2 = LayerNorm(tr, p + ".post_attention_layernorm", h2);
      T m = Mlp2(c, p + ".mlp", x2, "dense_h_to_4h", "dense_4h_to_h", s.linear_bias);
      m = Dropout(tr, p + ".mlp_dropout", m, s.hidden_dropout);
      h = AddT(tr, p + ".residual_2", m, h2);
    }
  }
  TailAndLoss(c, h, "transformer.ln_f", "lm_head", emb, false, false);
}

void Phi(Ctx& c, const T& ids) {
  Tracer& tr = c.tr;
  const ModelSpec& s = c.s;
  tr.BeginLayer("model.embeddings", LayerKind::kEmbedding, false);
  T emb;
  T h = Embedding(tr, "model.embed_tokens", ids, s.vocab_size, s.hidden_size, &emb);
  h = Dropout(tr, "model.embed_dropout", h, s.embd_dropout);
  MakeRotary(c, "model.rotary_emb");
  const ProjNames names{"q_proj", "k_proj", "v_proj", "dense"};
  for (int64_t i = 0; i < s.num_layers; ++i) {
    const std::string p = L("model.layers", i);
    BeginBlock(c, p, h);
    T x = LayerNorm(tr, p + ".input_layernorm", h);
    T o = SeparateQkvAttention(c, p + ".self_attn", x, names, true, true, true);
    o = Dropout(tr, p + ".resid_dropout_attn", o, s.hidden_dropout);
    T m = Mlp2(c, p + ".mlp", x, "fc1", "fc2", true);
    m = Dropout(tr, p + ".resid_dropout_mlp", m, s.hidden_dropout);
    T sum = AddT(tr, p + ".parallel_add", o, m);
    h = AddT(tr, p + ".residual", sum, h);
  }
  TailAndLoss(c, h, "model.final_layernorm", "lm_head", emb, true, false);
}

void LlamaLike(Ctx& c, const T& ids) {
  Tracer& tr = c.tr;
  const ModelSpec& s = c.s;
  const bool gemma = s.family == Family::kGemma;
  tr.BeginLayer("model.embeddings", LayerKind::kEmbedding, false);
  T emb;
  T h = Embedding(tr, "model.embed_tokens", ids, s.vocab_size, s.hidden_size, &emb);
  if (gemma) h = Copy(tr, "model.embed_scale", h, h.dtype);  // * sqrt(hidden), saves no tensor
  MakeRotary(c, "model.rotary_emb");
  auto norm = [&](const std::string& name, const T& x) {
    return gemma ? RmsNormGemma(tr, name, x) : RmsNormLlama(tr, name, x);
  };
  const bool qkv_bias = s.family == Family::kQwen2 || s.attention_bias;
  const ProjNames names{"q_proj", "k_proj", "v_proj", "o_proj"};
  for (int64_t i = 0; i < s.num_layers; ++i) {
    const std::string p = L("model.layers", i);
    BeginBlock(c, p, h);
    T x = norm(p + ".input_layernorm", h);
    T o = SeparateQkvAttention(c, p + ".self_attn", x, names, qkv_bias, s.attention_bias, true);
    T h2 = AddT(tr, p + ".residual_1", h, o);
    x = norm(p + ".post_attention_layernorm", h2);
    T m = s.num_experts > 0 ? MoeBlock(c, p + ".block_sparse_moe", x)
                            : GatedMlp(c, p + ".mlp", x, s.intermediate_size, s.mlp_bias);
    h = AddT(tr, p + ".residual_2", h2, m);
  }
  TailAndLoss(c, h, "model.norm", "lm_head", emb, false, false);
}

}  // namespace

void TraceDecoderOnly(Tracer& tr) {
  const ModelSpec& s = tr.spec();
  Ctx c{tr, s, tr.options().micro_batch, tr.options().seq_len, {}, {}, false};
  T ids = tr.Input("input_ids", {c.b, c.n}, DType::kI64);
  switch (s.family) {
    case Family::kGpt2: Gpt2(c, ids); break;
    case Family::kGptJ: GptJ(c, ids); break;
    case Family::kGptNeoX: GptNeoX(c, ids); break;
    case Family::kOpt: Opt(c, ids); break;
    case Family::kBloom: Bloom(c, ids); break;
    case Family::kFalcon: Falcon(c, ids); break;
    case Family::kPhi: Phi(c, ids); break;
    case Family::kLlama:
    case Family::kMistral:
    case Family::kQwen2:
    case Family::kMixtral:
    case Family::kGemma: LlamaLike(c, ids); break;
    case Family::kT5:
    case Family::kBert: break;  // traced by their own files
  }
}

}  // namespace dsplan
