// Decoder-only families: GPT-2, GPT-J, GPT-NeoX, OPT, BLOOM, Llama, Mistral, Qwen2, Qwen3,
// Mixtral, Falcon, Phi, Phi-3, Gemma, Gemma 2. Each block function follows the family's
// modeling_*.py forward in train mode; docs/activations.md lists the facts relied on.
#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "simulator/families/families.h"

namespace dsplan {
namespace {

struct Ctx {
  Ctx(Tracer& t, const ModelSpec& spec) : tr(t), s(spec) {}
  Tracer& tr;
  const ModelSpec& s;
  int64_t b = 0;
  int64_t n = 0;  // sequence length
  T cos, sin;     // rotary tables from the model-level rotary embedding (when used)
  bool rope = false;
  T mask;          // the 4-D mask built once per forward when attention needs one
  bool has_mask = false;
  bool layer_slides = true;  // the block being traced uses the sliding window (ModelSpec)
};

std::string L(const std::string& prefix, int64_t i) { return fmt::format("{}.{}", prefix, i); }

// Splits a [b, n, heads * hd] projection into a [b, heads, n, hd] view.
T Heads(Ctx& c, const T& x, int64_t heads, int64_t hd) {
  return c.tr.View(x, {c.b, heads, c.n, hd});
}

// Layout of q/k after rotary: Llama-style RoPE over the whole head keeps the projection's
// [b, s, h, d] memory layout; a partial rotary ends in a cat, which is contiguous [b, h, s, d].
Layout RopeLayout(const ModelSpec& s) {
  return s.rotary_dim < s.head_dim ? Layout::kBhsd : Layout::kBshd;
}

// Whether transformers builds a 4-D mask for SDPA: only when the sequence reaches the sliding
// window (no padding is modeled). masking_utils skips the mask only while kv_length <
// local_size, so a sequence exactly as long as the window (Mistral-7B v0.1's and Gemma 2's 4096
// at 4096 tokens) gets one although it masks nothing. Eager attention always gets a float mask.
bool SdpaNeedsMask(const Ctx& c) {
  return c.layer_slides && c.s.sliding_window > 0 && c.n >= c.s.sliding_window;
}

// The mask made once per forward in the model (create_causal_mask): float [b, 1, n, n] in the
// activation dtype for eager, bool [b, 1, n, n] for SDPA. Blocks read it as an argument, so
// activation checkpointing keeps it alive.
void MakeMask(Ctx& c, const std::string& name, bool needed) {
  if (!needed) return;
  c.mask = c.tr.New(name, {c.b, 1, c.n, c.n}, c.tr.sdpa() ? DType::kBool : c.tr.act_dtype());
  c.has_mask = true;
}

// Attention over separate q/k/v projections with optional rotary (Llama, Mistral, Qwen2,
// Qwen3, Mixtral, Gemma, Phi, OPT).
struct ProjNames {
  const char* q;
  const char* k;
  const char* v;
  const char* o;
};

// With a mask (eager always; SDPA past a sliding window), repeat_kv materializes K/V for every
// query head (contiguous [b, h, s, d] copies) where SDPA without one passes enable_gqa; and SDPA
// gets a bf16 attn_bias that cuDNN makes of the bool mask, per call (into |bias|). Returns
// whether SDPA reads that bias.
bool RepeatKvForMask(Ctx& c, const std::string& p, AttentionArgs* a, T* bias) {
  const ModelSpec& s = c.s;
  Tracer& tr = c.tr;
  const bool mask = tr.sdpa() ? SdpaNeedsMask(c) : true;
  if (s.num_kv_heads < s.num_heads && mask) {
    a->k = tr.New(Cat(p, ".k_repeated"), {c.b, s.num_heads, c.n, s.head_dim});
    a->v = tr.New(Cat(p, ".v_repeated"), {c.b, s.num_heads, c.n, s.head_dim});
    a->k_layout = a->v_layout = Layout::kBhsd;
  }
  if (!tr.sdpa() || !mask) return false;
  *bias = tr.New(Cat(p, ".attn_bias"), {c.b, 1, c.n, c.n});
  return true;
}

T SeparateQkvAttention(Ctx& c, const std::string& p, const T& x, const ProjNames& names,
                       bool qkv_bias, bool o_bias, bool softmax_fp32, bool scale_q = false) {
  const ModelSpec& s = c.s;
  Tracer& tr = c.tr;
  T q = Linear(tr, Cat(p, ".") + names.q, x, s.num_heads * s.head_dim, qkv_bias);
  if (scale_q) q = Copy(tr, Cat(p, ".q_scaled"), q, q.dtype);  // q_proj(x) * scaling (OPT)
  T k = Linear(tr, Cat(p, ".") + names.k, x, s.num_kv_heads * s.head_dim, qkv_bias);
  T v = Linear(tr, Cat(p, ".") + names.v, x, s.num_kv_heads * s.head_dim, qkv_bias);
  AttentionArgs a;
  a.name = p;
  a.q = Heads(c, q, s.num_heads, s.head_dim);
  a.k = Heads(c, k, s.num_kv_heads, s.head_dim);
  a.v = Heads(c, v, s.num_kv_heads, s.head_dim);
  // Per-head norms over the [b, n, heads, head_dim] projections, before rotary; each output
  // is a new contiguous tensor in the projection's layout.
  if (s.qk_norm == QkNorm::kLayerNorm) {
    a.q = LayerNorm(tr, Cat(p, ".q_layernorm"), a.q);
    a.k = LayerNorm(tr, Cat(p, ".k_layernorm"), a.k);
  } else if (s.qk_norm == QkNorm::kRms) {
    a.q = RmsNormLlama(tr, Cat(p, ".q_norm"), a.q);
    a.k = RmsNormLlama(tr, Cat(p, ".k_norm"), a.k);
  } else if (s.qk_norm == QkNorm::kRmsGemma) {
    a.q = RmsNormGemma(tr, Cat(p, ".q_norm"), a.q);
    a.k = RmsNormGemma(tr, Cat(p, ".k_norm"), a.k);
  }
  if (c.rope) {
    a.q = Rotary(tr, Cat(p, ".rotary_q"), a.q, s.rotary_dim, c.cos, c.sin);
    a.k = Rotary(tr, Cat(p, ".rotary_k"), a.k, s.rotary_dim, c.cos, c.sin);
    a.q_layout = a.k_layout = RopeLayout(s);
  }
  T bias;
  if (RepeatKvForMask(c, p, &a, &bias)) a.float_mask = &bias;
  a.causal = true;
  a.dropout = s.attn_dropout;
  a.eager_softmax_fp32 = softmax_fp32;
  a.softcap = s.attn_softcap;
  T ctx = Attention(tr, a);
  return Linear(tr, Cat(p, ".") + names.o, ctx, s.hidden_size, o_bias);
}

T Mlp2(Ctx& c, const std::string& p, const T& x, const char* up, const char* down, bool bias) {
  T h = Linear(c.tr, Cat(p, ".") + up, x, c.s.intermediate_size, bias);
  h = Activate(c.tr, Cat(p, ".act"), h, c.s.activation);
  return Linear(c.tr, Cat(p, ".") + down, h, c.s.hidden_size, bias);
}

T GatedMlp(Ctx& c, const std::string& p, const T& x, int64_t inter, bool bias) {
  T g = Linear(c.tr, Cat(p, ".gate_proj"), x, inter, bias);
  T a = Activate(c.tr, Cat(p, ".act_fn"), g, c.s.activation);
  T u = Linear(c.tr, Cat(p, ".up_proj"), x, inter, bias);
  T h = MulSaveBoth(c.tr, Cat(p, ".act_mul_up"), a, u);
  return Linear(c.tr, Cat(p, ".down_proj"), h, c.s.hidden_size, bias);
}

// Mixtral's sparse MoE block as transformers 5 runs it (MixtralTopKRouter + MixtralExperts with
// the default grouped_mm implementation). Routing is modeled as uniform: each expert receives
// tokens * top_k / num_experts rows (the expectation under a balanced router).
T MoeBlock(Ctx& c, const std::string& p, const T& x) {
  const ModelSpec& s = c.s;
  Tracer& tr = c.tr;
  const int64_t tokens = x.rows();
  const int64_t d = s.hidden_size, inter = s.expert_intermediate(), e = s.num_experts;
  const int64_t k = s.experts_per_token;
  const int64_t routed = tr.Mul(tokens, k, "routed tokens");
  T flat = tr.View(x, {tokens, d});
  T router_w = tr.Param(Cat(p, ".gate.weight"), {e, d});
  T logits = Linear(tr, Cat(p, ".gate"), flat, e, false, &router_w);
  (void)logits;
  // softmax(logits.float()) saves its fp32 output; topk saves the indices; the renormalized
  // top-k weights are fp32 in Mixtral's router, cast back to the logits' dtype in Qwen3-MoE's
  // (Qwen3MoeTopKRouter: router_top_value.to(router_logits.dtype)), and the experts' forward
  // keeps them sorted in that dtype.
  const DType wdt = s.family == Family::kQwen3Moe ? x.dtype : DType::kF32;
  T probs = tr.New(Cat(p, ".router_probs"), {tokens, e}, DType::kF32);
  T idx = tr.New(Cat(p, ".topk_indices"), {tokens, k}, DType::kI64);
  T weights = tr.New(Cat(p, ".topk_weights"), {tokens, k}, wdt);
  for (const T* t : {&probs, &idx, &weights}) tr.Save(*t);
  {
    Op op;
    op.name = Cat(p, ".router_softmax_topk");
    op.kind = OpKind::kSoftmax;
    op.fwd_flops = 6.0 * tokens * e;
    op.bwd_flops = 4.0 * tokens * e;
    op.fwd_bytes = 2.0 * tokens * e * 4;
    op.bwd_bytes = 3.0 * tokens * e * 4;
    tr.AddOp(std::move(op));
  }
  tr.Param(Cat(p, ".experts.gate_up_proj"), {e, 2 * inter, d});
  tr.Param(Cat(p, ".experts.down_proj"), {e, d, inter});
  // grouped_mm_experts_forward: gather rows per expert, one grouped GEMM for gate+up, silu(gate)
  // * up, a grouped GEMM down, times the fp32 routing weight, scatter back and sum over top-k.
  T gathered = tr.New(Cat(p, ".experts.inputs"), {routed, d});
  T gate_up = tr.New(Cat(p, ".experts.gate_up"), {routed, 2 * inter});
  T act = tr.New(Cat(p, ".experts.act"), {routed, inter});
  T prod = tr.New(Cat(p, ".experts.act_mul_up"), {routed, inter});
  T down = tr.New(Cat(p, ".experts.down"), {routed, d});
  for (const T* t : {&gathered, &gate_up, &act, &prod, &down}) tr.Save(*t);
  // Bookkeeping the backward needs: gather and inverse-permutation indices, the sorted routing
  // weights, and the masked_fill masks of both grouped GEMM outputs.
  for (const char* n : {".experts.gather_index", ".experts.inverse_perm"})
    tr.Save(tr.New(p + n, {routed}, DType::kI64));
  tr.Save(tr.New(Cat(p, ".experts.sorted_weights"), {routed, 1}, wdt));
  for (const char* n : {".experts.gate_up_fill_mask", ".experts.down_fill_mask"})
    tr.Save(tr.New(p + n, {routed, 1}, DType::kBool));
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
  expert_gemm(Cat(p, ".experts.gate_up_proj"), 2 * inter, d);
  expert_gemm(Cat(p, ".experts.down_proj"), d, inter);
  {
    Op op;
    op.name = Cat(p, ".experts.elementwise");
    op.kind = OpKind::kElementwise;
    op.fwd_flops = 10.0 * routed * inter + 3.0 * routed * d;
    op.bwd_flops = 2 * op.fwd_flops;
    op.fwd_bytes = (6.0 * routed * inter + 6.0 * routed * d) * DTypeBytes(x.dtype);
    op.bwd_bytes = 2 * op.fwd_bytes;
    tr.AddOp(std::move(op));
  }
  return tr.New(Cat(p, ".out"), x.shape);
}

// ---------------------------------------------------------------------------------------------

// load_balancing_loss_func as transformers 5.17 runs it (modeling_mixtral.py and
// modeling_qwen3_moe.py), with output_router_logits: the model output holds every sparse layer's
// router logits (the gate's bf16 [tokens, E] output, which nothing else keeps); the loss walks
// the layers one at a time: a softmax of the logits (saved: its bf16 output), a top-k of it
// (saved: the int64 indices) and an fp32 copy for the per-expert sums (a transient of one
// layer). The per-expert accumulators are [E]: negligible.
void RouterAuxLoss(Ctx& c, int64_t tokens) {
  Tracer& tr = c.tr;
  const ModelSpec& s = c.s;
  const int64_t e = s.num_experts, k = s.experts_per_token;
  int64_t sparse = 0;
  for (int64_t i = 0; i < s.num_layers; ++i) {
    if (!s.sparse_layer(i)) continue;
    ++sparse;
    const std::string p = L("loss.router_aux", i);
    tr.KeepAsOutput(tr.New(Cat(p, ".router_logits"), {tokens, e}));
    tr.Save(tr.New(Cat(p, ".softmax"), {tokens, e}));
    tr.Save(tr.New(Cat(p, ".topk_indices"), {tokens, k}, DType::kI64));
    (void)tr.New(Cat(p, ".probs_fp32"), {tokens, e}, DType::kF32);
  }
  const double cells = static_cast<double>(sparse) * static_cast<double>(tokens) * e;
  Op op;
  op.name = "loss.router_aux";
  op.kind = OpKind::kSoftmax;
  op.fwd_flops = 8.0 * cells;
  op.bwd_flops = 4.0 * cells;
  op.fwd_bytes = cells * (2 + 2 + 2 + 4 + 4) + 8.0 * k * sparse * static_cast<double>(tokens);
  op.bwd_bytes = cells * 3 * 2;
  tr.AddOp(std::move(op));
}

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
      case Family::kQwen3:
      case Family::kQwen3Moe:
      case Family::kPhi3:
      case Family::kMixtral: x = RmsNormLlama(tr, final_norm, h); break;
      case Family::kGemma:
      case Family::kGemma2:
      case Family::kGemma3:
        x = RmsNormGemma(tr, final_norm, h);
        break;
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
  if (s.final_softcap > 0) logits = SoftCap(tr, Cat(head, ".softcap"), logits);
  if (logits_fp32 && logits.dtype != DType::kF32) {
    logits = Copy(tr, Cat(head, ".logits_fp32"), logits, DType::kF32);
  }
  tr.KeepAsOutput(logits);
  tr.BeginLayer("loss", LayerKind::kLoss, false);
  CrossEntropy(tr, "loss", logits, /*upcast=*/true);
  if (s.router_aux_loss && s.num_experts > 0) RouterAuxLoss(c, logits.rows());
}

// Rotary tables computed once per forward by the model-level rotary embedding (under no_grad),
// in the activation dtype, [1, n, rotary_dim] for the default position ids.
void MakeRotary(Ctx& c, const std::string& name) {
  if (c.s.rotary_dim <= 0) return;
  c.cos = c.tr.New(Cat(name, ".cos"), {1, c.n, c.s.rotary_dim});
  c.sin = c.tr.New(Cat(name, ".sin"), {1, c.n, c.s.rotary_dim});
  c.rope = true;
}

void BeginBlock(Ctx& c, const std::string& name, const T& h) {
  c.tr.BeginLayer(name, LayerKind::kDecoderBlock, true);
  c.tr.CheckpointArg(h);
  if (c.rope) {
    c.tr.CheckpointArg(c.cos);
    c.tr.CheckpointArg(c.sin);
  }
  if (c.has_mask) c.tr.CheckpointArg(c.mask);
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
  MakeMask(c, "transformer.causal_mask", !tr.sdpa());
  // GPT-2's blocks use transformers' Conv1D: torch.addmm(bias, x, weight) keeps the weight
  // Parameter itself for backward (WeightSave::kParameter); its LM head is an nn.Linear.
  tr.SetLinearWeightSave(WeightSave::kParameter);
  for (int64_t i = 0; i < s.num_layers; ++i) {
    const std::string p = L("transformer.h", i);
    BeginBlock(c, p, h);
    T x = LayerNorm(tr, Cat(p, ".ln_1"), h);
    T qkv = Linear(tr, Cat(p, ".attn.c_attn"), x, 3 * s.hidden_size, true);
    AttentionArgs a;
    a.name = Cat(p, ".attn");
    a.q = a.k = a.v = tr.View(qkv, {c.b, s.num_heads, c.n, s.head_dim});
    a.q_layout = a.k_layout = a.v_layout = Layout::kFused;
    a.dropout = s.attn_dropout;
    a.eager_softmax_fp32 = false;  // GPT-2's eager softmax runs in the activation dtype
    T o = Linear(tr, Cat(p, ".attn.c_proj"), Attention(tr, a), s.hidden_size, true);
    o = Dropout(tr, Cat(p, ".attn.resid_dropout"), o, s.hidden_dropout);
    T h2 = AddT(tr, Cat(p, ".residual_1"), h, o);
    x = LayerNorm(tr, Cat(p, ".ln_2"), h2);
    T m = Mlp2(c, Cat(p, ".mlp"), x, "c_fc", "c_proj", true);
    m = Dropout(tr, Cat(p, ".mlp.dropout"), m, s.hidden_dropout);
    h = AddT(tr, Cat(p, ".residual_2"), h2, m);
  }
  tr.SetLinearWeightSave(WeightSave::kFunctionalLinear);
  TailAndLoss(c, h, "transformer.ln_f", "lm_head", wte, false, false);
}

void GptJ(Ctx& c, const T& ids) {
  Tracer& tr = c.tr;
  const ModelSpec& s = c.s;
  tr.BeginLayer("transformer.embeddings", LayerKind::kEmbedding, false);
  T wte;
  T h = Embedding(tr, "transformer.wte", ids, s.vocab_size, s.hidden_size, &wte);
  h = Dropout(tr, "transformer.drop", h, s.embd_dropout);
  MakeMask(c, "transformer.causal_mask", true);
  const int64_t rot = s.rotary_dim > 0 ? s.rotary_dim : s.head_dim;
  for (int64_t i = 0; i < s.num_layers; ++i) {
    const std::string p = L("transformer.h", i);
    BeginBlock(c, p, h);
    T x = LayerNorm(tr, Cat(p, ".ln_1"), h);
    T q = Linear(tr, Cat(p, ".attn.q_proj"), x, s.hidden_size, false);
    T k = Linear(tr, Cat(p, ".attn.k_proj"), x, s.hidden_size, false);
    T v = Linear(tr, Cat(p, ".attn.v_proj"), x, s.hidden_size, false);
    // sin/cos gathered per layer from the embed_positions buffer and repeat_interleave'd, once
    // for q and once for k: four [1, n, 1, rot] tensors the rotary muls save.
    T rq_sin = tr.New(Cat(p, ".attn.q_sin"), {1, c.n, 1, rot});
    T rq_cos = tr.New(Cat(p, ".attn.q_cos"), {1, c.n, 1, rot});
    T rk_sin = tr.New(Cat(p, ".attn.k_sin"), {1, c.n, 1, rot});
    T rk_cos = tr.New(Cat(p, ".attn.k_cos"), {1, c.n, 1, rot});
    AttentionArgs a;
    a.name = Cat(p, ".attn");
    a.q = Rotary(tr, Cat(p, ".attn.rotary_q"), Heads(c, q, s.num_heads, s.head_dim), rot, rq_cos,
                 rq_sin);
    a.k = Rotary(tr, Cat(p, ".attn.rotary_k"), Heads(c, k, s.num_heads, s.head_dim), rot, rk_cos,
                 rk_sin);
    a.v = Heads(c, v, s.num_heads, s.head_dim);
    a.dropout = s.attn_dropout;
    a.eager_upcast_qk = true;  // _attn casts q and k to fp32: an FP32 score matmul
    a.eager_softmax_fp32 = true;
    T o = Linear(tr, Cat(p, ".attn.out_proj"), Attention(tr, a), s.hidden_size, false);
    o = Dropout(tr, Cat(p, ".attn.resid_dropout"), o, s.hidden_dropout);
    T m = Mlp2(c, Cat(p, ".mlp"), x, "fc_in", "fc_out", true);
    m = Dropout(tr, Cat(p, ".mlp.dropout"), m, s.hidden_dropout);
    T sum = AddT(tr, Cat(p, ".parallel_add"), o, m);
    h = AddT(tr, Cat(p, ".residual"), sum, h);
  }
  TailAndLoss(c, h, "transformer.ln_f", "lm_head", wte, true, false);
}

void GptNeoX(Ctx& c, const T& ids) {
  Tracer& tr = c.tr;
  const ModelSpec& s = c.s;
  tr.BeginLayer("gpt_neox.embeddings", LayerKind::kEmbedding, false);
  T emb;
  T h = Embedding(tr, "gpt_neox.embed_in", ids, s.vocab_size, s.hidden_size, &emb);
  h = Dropout(tr, "gpt_neox.emb_dropout", h, s.hidden_dropout);
  MakeRotary(c, "gpt_neox.rotary_emb");
  MakeMask(c, "gpt_neox.causal_mask", !tr.sdpa());
  for (int64_t i = 0; i < s.num_layers; ++i) {
    const std::string p = L("gpt_neox.layers", i);
    BeginBlock(c, p, h);
    T x = LayerNorm(tr, Cat(p, ".input_layernorm"), h);
    T qkv = Linear(tr, Cat(p, ".attention.query_key_value"), x, 3 * s.hidden_size, s.linear_bias);
    T heads = tr.View(qkv, {c.b, s.num_heads, c.n, s.head_dim});  // per-head interleaved q|k|v
    FusedQkvSplit(tr, Cat(p, ".attention.qkv_split"), qkv);
    AttentionArgs a;
    a.name = Cat(p, ".attention");
    a.q = Rotary(tr, Cat(p, ".attention.rotary_q"), heads, s.rotary_dim, c.cos, c.sin,
                 Layout::kFused);
    a.k = Rotary(tr, Cat(p, ".attention.rotary_k"), heads, s.rotary_dim, c.cos, c.sin,
                 Layout::kFused);
    a.q_layout = a.k_layout = RopeLayout(s);
    a.v = heads;
    a.v_layout = Layout::kFused;
    a.dropout = s.attn_dropout;
    T o = Linear(tr, Cat(p, ".attention.dense"), Attention(tr, a), s.hidden_size, s.linear_bias);
    o = Dropout(tr, Cat(p, ".post_attention_dropout"), o, s.hidden_dropout);
    if (s.parallel_residual) {
      T x2 = LayerNorm(tr, Cat(p, ".post_attention_layernorm"), h);
      T m = Mlp2(c, Cat(p, ".mlp"), x2, "dense_h_to_4h", "dense_4h_to_h", true);
      m = Dropout(tr, Cat(p, ".post_mlp_dropout"), m, s.hidden_dropout);
      T sum = AddT(tr, Cat(p, ".parallel_add"), m, o);
      h = AddT(tr, Cat(p, ".residual"), sum, h);
    } else {
      T h2 = AddT(tr, Cat(p, ".residual_1"), o, h);
      T x2 = LayerNorm(tr, Cat(p, ".post_attention_layernorm"), h2);
      T m = Mlp2(c, Cat(p, ".mlp"), x2, "dense_h_to_4h", "dense_4h_to_h", true);
      m = Dropout(tr, Cat(p, ".post_mlp_dropout"), m, s.hidden_dropout);
      h = AddT(tr, Cat(p, ".residual_2"), m, h2);
    }
  }
  TailAndLoss(c, h, "gpt_neox.final_layer_norm", "lm_head", emb, false, false);
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
  T h = AddT(tr, "model.decoder.embed_add", tok, pos);  // no embedding dropout in OPT
  MakeMask(c, "model.decoder.causal_mask", !tr.sdpa());
  const ProjNames names{"q_proj", "k_proj", "v_proj", "out_proj"};
  for (int64_t i = 0; i < s.num_layers; ++i) {
    const std::string p = L("model.decoder.layers", i);
    BeginBlock(c, p, h);
    T x = s.opt_norm_before ? LayerNorm(tr, Cat(p, ".self_attn_layer_norm"), h) : h;
    T o =
        SeparateQkvAttention(c, Cat(p, ".self_attn"), x, names, s.linear_bias, s.linear_bias, true,
                             /*scale_q=*/true);
    o = Dropout(tr, Cat(p, ".dropout_1"), o, s.hidden_dropout);
    T h2 = AddT(tr, Cat(p, ".residual_1"), h, o);
    if (!s.opt_norm_before) h2 = LayerNorm(tr, Cat(p, ".self_attn_layer_norm"), h2);
    x = s.opt_norm_before ? LayerNorm(tr, Cat(p, ".final_layer_norm"), h2) : h2;
    T m = Mlp2(c, p, x, "fc1", "fc2", s.linear_bias);
    m = Dropout(tr, Cat(p, ".dropout_2"), m, s.hidden_dropout);
    h = AddT(tr, Cat(p, ".residual_2"), h2, m);
    if (!s.opt_norm_before) h = LayerNorm(tr, Cat(p, ".final_layer_norm"), h);
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
  // ALiBi [b * heads, 1, n] feeds baddbmm as `self` (no gradient, so not saved); the eager
  // causal mask [b, 1, n, n] is added to the scores.
  T alibi = tr.New("transformer.alibi", {c.b * s.num_heads, 1, c.n});
  MakeMask(c, "transformer.causal_mask", true);
  for (int64_t i = 0; i < s.num_layers; ++i) {
    const std::string p = L("transformer.h", i);
    BeginBlock(c, p, h);
    tr.CheckpointArg(alibi);
    T x = LayerNorm(tr, Cat(p, ".input_layernorm"), h);
    T qkv = Linear(tr, Cat(p, ".self_attention.query_key_value"), x, 3 * s.hidden_size, true);
    AttentionArgs a;
    a.name = Cat(p, ".self_attention");
    a.q = a.k = a.v = tr.View(qkv, {c.b, s.num_heads, c.n, s.head_dim});
    a.q_layout = a.k_layout = a.v_layout = Layout::kFused;
    a.dropout = s.attn_dropout;
    a.score_bias = &alibi;
    if (c.has_mask) a.eager_mask = &c.mask;
    T o = Linear(tr, Cat(p, ".self_attention.dense"), Attention(tr, a), s.hidden_size, true);
    o = Dropout(tr, Cat(p, ".self_attention.dropout"), o, s.hidden_dropout);
    T h2 = AddT(tr, Cat(p, ".residual_1"), o, h);
    x = LayerNorm(tr, Cat(p, ".post_attention_layernorm"), h2);
    T m = Mlp2(c, Cat(p, ".mlp"), x, "dense_h_to_4h", "dense_4h_to_h", true);
    m = Dropout(tr, Cat(p, ".mlp.dropout"), m, s.hidden_dropout);
    h = AddT(tr, Cat(p, ".residual_2"), m, h2);
  }
  TailAndLoss(c, h, "transformer.ln_f", "lm_head", emb, false, false);
}

void Falcon(Ctx& c, const T& ids) {
  Tracer& tr = c.tr;
  const ModelSpec& s = c.s;
  tr.BeginLayer("transformer.embeddings", LayerKind::kEmbedding, false);
  T emb;
  T h = Embedding(tr, "transformer.word_embeddings", ids, s.vocab_size, s.hidden_size, &emb);
  MakeRotary(c, "transformer.rotary_emb");
  // FalconModel builds its 4-D mask for SDPA too (allow_is_causal_skip=False); with ALiBi the
  // mask becomes a float bias [b, heads, n, n].
  if (s.alibi) {
    c.mask = tr.New("transformer.alibi_mask", {c.b, s.num_heads, c.n, c.n});
    c.has_mask = true;
  } else {
    MakeMask(c, "transformer.causal_mask", true);
  }
  int64_t qkv_out = 3 * s.hidden_size;
  if (s.falcon_new_arch) {
    qkv_out = (2 * s.num_kv_heads + s.num_heads) * s.head_dim;
  } else if (s.falcon_multi_query) {
    qkv_out = s.hidden_size + 2 * s.head_dim;
  }
  const bool mha = !s.falcon_new_arch && !s.falcon_multi_query;
  // Falcon's blocks use FalconLinear, whose forward is `input @ self.weight.T`: a transposed
  // view kept to the backward with or without zero.Init; its LM head is an nn.Linear.
  tr.SetLinearWeightSave(WeightSave::kTransposedMatmul);
  for (int64_t i = 0; i < s.num_layers; ++i) {
    const std::string p = L("transformer.h", i);
    BeginBlock(c, p, h);
    T x_attn, x_mlp;
    if (s.parallel_residual && s.falcon_num_ln_parallel == 2) {
      x_attn = LayerNorm(tr, Cat(p, ".ln_attn"), h);
      x_mlp = LayerNorm(tr, Cat(p, ".ln_mlp"), h);
    } else {
      x_attn = x_mlp = LayerNorm(tr, Cat(p, ".input_layernorm"), h);
    }
    const std::string sa = Cat(p, ".self_attention");
    T qkv = Linear(tr, Cat(sa, ".query_key_value"), x_attn, qkv_out, s.linear_bias);
    T fused = tr.View(qkv, {c.b, s.num_heads, c.n, s.head_dim});
    AttentionArgs a;
    a.name = sa;
    a.q = a.k = a.v = fused;
    a.q_layout = a.k_layout = a.v_layout = Layout::kBshd;  // MHA: views pinning the fused qkv
    if (!mha) {
      // New architecture: K/V broadcast to every query head and flattened (copies); multi-query:
      // one K/V head picked with an index list (copies).
      const int64_t kv = s.falcon_new_arch ? s.num_heads : 1;
      a.q = tr.New(Cat(sa, ".q"), {c.b, s.num_heads, c.n, s.head_dim});
      a.k = tr.New(Cat(sa, ".k"), {c.b, kv, c.n, s.head_dim});
      a.v = tr.New(Cat(sa, ".v"), {c.b, kv, c.n, s.head_dim});
    }
    if (c.rope) {
      // MHA: views into the fused projection; otherwise contiguous copies.
      const Layout in = mha ? Layout::kFused : Layout::kBhsd;
      a.q = Rotary(tr, Cat(sa, ".rotary_q"), a.q, s.rotary_dim, c.cos, c.sin, in);
      a.k = Rotary(tr, Cat(sa, ".rotary_k"), a.k, s.rotary_dim, c.cos, c.sin, in);
    }
    T bias;
    if (tr.sdpa()) {
      if (s.alibi) {
        a.float_mask = &c.mask;
      } else if (a.k.dim(1) == s.num_heads) {
        bias =
            tr.New(Cat(sa, ".attn_bias"), {c.b, 1, c.n, c.n});  // the bool mask as bf16, per call
        a.float_mask = &bias;
      } else {
        // One K/V head without enable_gqa: the fp32 math path, which adds the 4-D mask to its
        // scores in place (attn.add_), a broadcast over the heads.
        a.backend = SdpaBackend::kMath;
        a.eager_mask = &c.mask;
      }
    }
    // The rotary path passes dropout_p=0 to SDPA and has no eager dropout; eager softmax runs
    // in the activation dtype there and in fp32 on the ALiBi path.
    a.dropout = s.alibi ? s.attn_dropout : 0.0;
    a.eager_softmax_fp32 = false;
    T o = Linear(tr, Cat(sa, ".dense"), Attention(tr, a), s.hidden_size, s.linear_bias);
    if (s.parallel_residual) {
      T m = Mlp2(c, Cat(p, ".mlp"), x_mlp, "dense_h_to_4h", "dense_4h_to_h", s.linear_bias);
      T sum = AddT(tr, Cat(p, ".parallel_add"), m, o);
      sum = Dropout(tr, Cat(p, ".dropout"), sum, s.hidden_dropout);
      h = AddT(tr, Cat(p, ".residual"), sum, h);
    } else {
      // The post-attention residual dropout uses attention_dropout (as in FalconDecoderLayer).
      o = Dropout(tr, Cat(p, ".attn_dropout"), o, s.attn_dropout);
      T h2 = AddT(tr, Cat(p, ".residual_1"), o, h);
      T x2 = LayerNorm(tr, Cat(p, ".post_attention_layernorm"), h2);
      T m = Mlp2(c, Cat(p, ".mlp"), x2, "dense_h_to_4h", "dense_4h_to_h", s.linear_bias);
      m = Dropout(tr, Cat(p, ".mlp_dropout"), m, s.hidden_dropout);
      h = AddT(tr, Cat(p, ".residual_2"), m, h2);
    }
  }
  tr.SetLinearWeightSave(WeightSave::kFunctionalLinear);
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
  MakeMask(c, "model.causal_mask", !tr.sdpa());
  const ProjNames names{"q_proj", "k_proj", "v_proj", "dense"};
  for (int64_t i = 0; i < s.num_layers; ++i) {
    const std::string p = L("model.layers", i);
    BeginBlock(c, p, h);
    T x = LayerNorm(tr, Cat(p, ".input_layernorm"), h);
    T o = SeparateQkvAttention(c, Cat(p, ".self_attn"), x, names, true, true, true);
    o = Dropout(tr, Cat(p, ".resid_dropout_attn"), o, s.hidden_dropout);
    T m = Mlp2(c, Cat(p, ".mlp"), x, "fc1", "fc2", true);
    m = Dropout(tr, Cat(p, ".resid_dropout_mlp"), m, s.hidden_dropout);
    T sum = AddT(tr, Cat(p, ".parallel_add"), o, m);
    h = AddT(tr, Cat(p, ".residual"), sum, h);
  }
  TailAndLoss(c, h, "model.final_layernorm", "lm_head", emb, true, false);
}

// Phi3ForCausalLM (modeling_phi3.py, MistralModel's stack): Llama's block with one fused
// qkv_proj whose q, k and v are slices of the last dim, a rotary that always ends in a cat, a
// fused gate_up_proj chunked in two, and resid_pdrop dropouts before both residual adds.
void Phi3(Ctx& c, const T& ids) {
  Tracer& tr = c.tr;
  const ModelSpec& s = c.s;
  tr.BeginLayer("model.embeddings", LayerKind::kEmbedding, false);
  T emb;
  T h = Embedding(tr, "model.embed_tokens", ids, s.vocab_size, s.hidden_size, &emb);
  MakeRotary(c, "model.rotary_emb");
  MakeMask(c, "model.causal_mask", !tr.sdpa() || SdpaNeedsMask(c));
  const int64_t qkv_out = (s.num_heads + 2 * s.num_kv_heads) * s.head_dim;
  for (int64_t i = 0; i < s.num_layers; ++i) {
    const std::string p = L("model.layers", i);
    const std::string sa = Cat(p, ".self_attn");
    BeginBlock(c, p, h);
    T x = RmsNormLlama(tr, Cat(p, ".input_layernorm"), h);
    T qkv = Linear(tr, Cat(sa, ".qkv_proj"), x, qkv_out, false);
    SlicedSplit(tr, Cat(sa, ".qkv_split"), qkv, 3);
    AttentionArgs a;
    a.name = sa;
    a.q = tr.View(qkv, {c.b, s.num_heads, c.n, s.head_dim});
    a.k = tr.View(qkv, {c.b, s.num_kv_heads, c.n, s.head_dim});
    a.v = tr.View(qkv, {c.b, s.num_kv_heads, c.n, s.head_dim});
    a.q_layout = a.k_layout = a.v_layout = Layout::kFused;
    if (c.rope) {
      a.q = Rotary(tr, Cat(sa, ".rotary_q"), a.q, s.rotary_dim, c.cos, c.sin, Layout::kFused, true);
      a.k = Rotary(tr, Cat(sa, ".rotary_k"), a.k, s.rotary_dim, c.cos, c.sin, Layout::kFused, true);
      a.q_layout = a.k_layout = Layout::kBhsd;
    }
    T bias;
    if (RepeatKvForMask(c, sa, &a, &bias)) a.float_mask = &bias;
    a.causal = true;
    a.dropout = s.attn_dropout;
    T o = Linear(tr, Cat(sa, ".o_proj"), Attention(tr, a), s.hidden_size, false);
    o = Dropout(tr, Cat(p, ".resid_attn_dropout"), o, s.hidden_dropout);
    T h2 = AddT(tr, Cat(p, ".residual_1"), h, o);
    x = RmsNormLlama(tr, Cat(p, ".post_attention_layernorm"), h2);
    // up_states.chunk(2): gate and up are views of the fused output; the activation saves gate
    // and the product saves up, so the whole gate_up output stays for backward.
    T gu = Linear(tr, Cat(p, ".mlp.gate_up_proj"), x, 2 * s.intermediate_size, false);
    ChunkSplit(tr, Cat(p, ".mlp.gate_up_split"), gu);
    T gate = tr.View(gu, {c.b, c.n, s.intermediate_size});
    T up = tr.View(gu, {c.b, c.n, s.intermediate_size});
    T act = Activate(tr, Cat(p, ".mlp.activation_fn"), gate, s.activation);
    T prod = MulSaveBoth(tr, Cat(p, ".mlp.up_mul_act"), up, act);
    T m = Linear(tr, Cat(p, ".mlp.down_proj"), prod, s.hidden_size, false);
    m = Dropout(tr, Cat(p, ".resid_mlp_dropout"), m, s.hidden_dropout);
    h = AddT(tr, Cat(p, ".residual_2"), h2, m);
  }
  TailAndLoss(c, h, "model.norm", "lm_head", emb, false, false);
}

void LlamaLike(Ctx& c, const T& ids) {
  Tracer& tr = c.tr;
  const ModelSpec& s = c.s;
  // Gemma 2 and Gemma 3 blocks: four norms each.
  const bool four_norms = s.family == Family::kGemma2 || s.family == Family::kGemma3;
  const bool gemma = s.family == Family::kGemma || four_norms;
  tr.BeginLayer("model.embeddings", LayerKind::kEmbedding, false);
  T emb;
  T h = Embedding(tr, "model.embed_tokens", ids, s.vocab_size, s.hidden_size, &emb);
  if (gemma) h = Copy(tr, "model.embed_scale", h, h.dtype);  // * sqrt(hidden), saves no tensor
  MakeRotary(c, "model.rotary_emb");
  auto slides = [&](int64_t i) {
    return s.sliding_layers.empty() || s.sliding_layers[static_cast<size_t>(i)];
  };
  // The model builds the window's mask once when some layer slides (Gemma 2's every other one).
  c.layer_slides =
      s.sliding_layers.empty() ||
      std::find(s.sliding_layers.begin(), s.sliding_layers.end(), true) != s.sliding_layers.end();
  MakeMask(c, "model.causal_mask", !tr.sdpa() || SdpaNeedsMask(c));
  auto norm = [&](const std::string& name, const T& x) {
    return gemma ? RmsNormGemma(tr, name, x) : RmsNormLlama(tr, name, x);
  };
  const bool qkv_bias = s.family == Family::kQwen2 || s.attention_bias;
  const ProjNames names{"q_proj", "k_proj", "v_proj", "o_proj"};
  for (int64_t i = 0; i < s.num_layers; ++i) {
    const std::string p = L("model.layers", i);
    BeginBlock(c, p, h);
    c.layer_slides = slides(i);
    T x = norm(Cat(p, ".input_layernorm"), h);
    T o = SeparateQkvAttention(c, Cat(p, ".self_attn"), x, names, qkv_bias, s.attention_bias, true);
    // Gemma 2 normalizes each branch's output too, before its residual add (post_attention_
    // layernorm on the attention output, pre_ and post_feedforward_layernorm around the MLP).
    if (four_norms) o = norm(Cat(p, ".post_attention_layernorm"), o);
    T h2 = AddT(tr, Cat(p, ".residual_1"), h, o);
    x = norm(Cat(p, four_norms ? ".pre_feedforward_layernorm" : ".post_attention_layernorm"), h2);
    T m = s.sparse_layer(i) ? MoeBlock(c, Cat(p, ".mlp"), x)
                            : GatedMlp(c, Cat(p, ".mlp"), x, s.intermediate_size, s.mlp_bias);
    if (four_norms) m = norm(Cat(p, ".post_feedforward_layernorm"), m);
    h = AddT(tr, Cat(p, ".residual_2"), h2, m);
  }
  TailAndLoss(c, h, "model.norm", "lm_head", emb, false, false);
}

}  // namespace

void TraceDecoderOnly(Tracer& tr) {
  const ModelSpec& s = tr.spec();
  Ctx c(tr, s);
  c.b = tr.options().micro_batch;
  c.n = tr.options().seq_len;
  T ids = tr.Input("input_ids", {c.b, c.n}, DType::kI64);
  switch (s.family) {
    case Family::kGpt2: Gpt2(c, ids); break;
    case Family::kGptJ: GptJ(c, ids); break;
    case Family::kGptNeoX: GptNeoX(c, ids); break;
    case Family::kOpt: Opt(c, ids); break;
    case Family::kBloom: Bloom(c, ids); break;
    case Family::kFalcon: Falcon(c, ids); break;
    case Family::kPhi: Phi(c, ids); break;
    case Family::kPhi3:
      Phi3(c, ids);
      break;
    case Family::kLlama:
    case Family::kMistral:
    case Family::kQwen2:
    case Family::kQwen3:
    case Family::kQwen3Moe:
    case Family::kMixtral:
    case Family::kGemma:
    case Family::kGemma2:
    case Family::kGemma3:
      LlamaLike(c, ids);
      break;
    case Family::kT5:
    case Family::kBert: break;  // traced by their own files
  }
}

}  // namespace dsplan
