// T5ForConditionalGeneration (t5, t5 v1.1, flan-t5) as modeling_t5.py runs it in train mode.
#include <fmt/format.h>

#include "simulator/families/families.h"

namespace dsplan {
namespace {

struct T5Ctx {
  Tracer& tr;
  const ModelSpec& s;
  int64_t b = 0;
  int64_t inner = 0;  // num_heads * d_kv
};

// T5Attention: q/k/v/o without bias, no score scaling, a position bias added to the scores.
// Eager: softmax in the activation dtype. SDPA: the bias (or the causal `where` over it) is a
// float mask whose last dim is strided, which sends self-attention to the fp32 math kernel;
// cross-attention's zero bias is contiguous, so cuDNN runs it and saves the bias.
T T5Attention(T5Ctx& c, const std::string& p, const T& x, const T& kv_source, int64_t sq,
              int64_t sk, const T& bias, bool causal, bool self_attention) {
  const ModelSpec& s = c.s;
  Tracer& tr = c.tr;
  T q = Linear(tr, Cat(p, ".q"), x, c.inner, false);
  T k = Linear(tr, Cat(p, ".k"), kv_source, c.inner, false);
  T v = Linear(tr, Cat(p, ".v"), kv_source, c.inner, false);
  AttentionArgs a;
  a.name = p;
  a.q = tr.View(q, {c.b, s.num_heads, sq, s.head_dim});
  a.k = tr.View(k, {c.b, s.num_heads, sk, s.head_dim});
  a.v = tr.View(v, {c.b, s.num_heads, sk, s.head_dim});
  a.causal = causal;
  a.dropout = s.attn_dropout;
  a.eager_softmax_fp32 = false;
  if (self_attention) {
    a.backend = SdpaBackend::kMath;
    // The decoder's mask is torch.where(causal, bias, min): its bool condition is saved.
    if (causal && tr.sdpa())
      tr.Save(tr.New(Cat(p, ".causal_condition"), {1, 1, sq, sk}, DType::kBool));
    // The math path adds the bias to its fp32 scores in place (attn.add_(mask)): one [1, h]
    // bias over the batch, the unvectorized broadcast kernel, as falcon-7b's mask
    // (docs/stack-costs.md 8b). Eager T5 adds it the same way (scores += position_bias_masked). The
    // bias comes from the first block's relative-attention embedding, so its gradient is the
    // scores' gradient summed over the batch, in every block's backward.
    a.eager_mask = &bias;
    a.mask_takes_grad = true;
  } else {
    a.float_mask = &bias;
  }
  return Linear(tr, Cat(p, ".o"), Attention(tr, a), s.hidden_size, false);
}

T T5Ff(T5Ctx& c, const std::string& p, const T& h) {
  const ModelSpec& s = c.s;
  Tracer& tr = c.tr;
  T x = RmsNormT5(tr, Cat(p, ".layer_norm"), h);
  const std::string d = Cat(p, ".DenseReluDense");
  T inner;
  if (s.gated_mlp) {
    T g = Activate(tr, Cat(d, ".act"), Linear(tr, Cat(d, ".wi_0"), x, s.intermediate_size, false),
                   s.activation);
    T lin = Linear(tr, Cat(d, ".wi_1"), x, s.intermediate_size, false);
    inner = MulSaveBoth(tr, Cat(d, ".gate_mul"), g, lin);
  } else {
    inner = Activate(tr, Cat(d, ".act"), Linear(tr, Cat(d, ".wi"), x, s.intermediate_size, false),
                     s.activation);
  }
  inner = Dropout(tr, Cat(d, ".dropout"), inner, s.hidden_dropout);
  T y = Linear(tr, Cat(d, ".wo"), inner, s.hidden_size, false);
  y = Dropout(tr, Cat(p, ".dropout"), y, s.hidden_dropout);
  return AddT(tr, Cat(p, ".residual"), h, y);
}

// The relative position bias of a stack, computed in its first block and passed to the others:
// an embedding of the bucket ids [sq, sk] (saved), permuted to a strided [1, h, sq, sk] view.
// transformers 5 keeps the attention mask separate from it.
T RelativeBias(T5Ctx& c, const std::string& p, int64_t sq, int64_t sk) {
  Tracer& tr = c.tr;
  T buckets = tr.New(Cat(p, ".relative_position_bucket"), {sq, sk}, DType::kI64);
  T table =
      Embedding(tr, Cat(p, ".relative_attention_bias"), buckets, c.s.t5_rel_buckets, c.s.num_heads);
  return tr.View(table, {1, c.s.num_heads, sq, sk});
}

}  // namespace

void TraceT5(Tracer& tr) {
  const ModelSpec& s = tr.spec();
  const int64_t b = tr.options().micro_batch;
  const int64_t src = tr.options().seq_len;
  const int64_t tgt = tr.options().target_len > 0 ? tr.options().target_len : src;
  T5Ctx c{tr, s, b, s.num_heads * s.head_dim};

  // Encoder.
  T ids = tr.Input("input_ids", {b, src}, DType::kI64);
  tr.BeginLayer("encoder.embeddings", LayerKind::kEmbedding, false);
  T shared;
  T h = Embedding(tr, "shared", ids, s.vocab_size, s.hidden_size, &shared);
  h = Dropout(tr, "encoder.dropout", h, s.embd_dropout);
  T enc_bias;
  for (int64_t i = 0; i < s.num_layers; ++i) {
    const std::string p = fmt::format("encoder.block.{}", i);
    tr.BeginLayer(p, LayerKind::kEncoderBlock, true);
    tr.CheckpointArg(h);
    const std::string a = Cat(p, ".layer.0");
    if (i == 0) {
      enc_bias = RelativeBias(c, Cat(a, ".SelfAttention"), src, src);
    } else {
      tr.CheckpointArg(enc_bias);
    }
    T x = RmsNormT5(tr, Cat(a, ".layer_norm"), h);
    T o = T5Attention(c, Cat(a, ".SelfAttention"), x, x, src, src, enc_bias, false, true);
    o = Dropout(tr, Cat(a, ".dropout"), o, s.hidden_dropout);
    h = AddT(tr, Cat(a, ".residual"), h, o);
    h = T5Ff(c, Cat(p, ".layer.1"), h);
  }
  tr.BeginLayer("encoder.final_layer_norm", LayerKind::kFinalNorm, false);
  T enc = RmsNormT5(tr, "encoder.final_layer_norm", h);
  enc = Dropout(tr, "encoder.final_dropout", enc, s.hidden_dropout);

  // Decoder.
  T dec_ids = tr.Input("decoder_input_ids", {b, tgt}, DType::kI64);
  tr.BeginLayer("decoder.embeddings", LayerKind::kEmbedding, false);
  h = EmbeddingShared(tr, "decoder.embed_tokens", dec_ids, shared);
  h = Dropout(tr, "decoder.dropout", h, s.embd_dropout);
  T dec_bias, cross_bias;
  // Eager decoders get the causal mask as a float [b, 1, tgt, tgt] built once per forward.
  T causal_mask;
  if (!tr.sdpa()) causal_mask = tr.New("decoder.causal_mask", {b, 1, tgt, tgt});
  for (int64_t i = 0; i < s.num_decoder_layers; ++i) {
    const std::string p = fmt::format("decoder.block.{}", i);
    tr.BeginLayer(p, LayerKind::kDecoderBlock, true);
    tr.CheckpointArg(h);
    tr.CheckpointArg(enc);
    if (!tr.sdpa()) tr.CheckpointArg(causal_mask);
    const std::string a = Cat(p, ".layer.0");
    const std::string x_ = Cat(p, ".layer.1");
    if (i == 0) {
      dec_bias = RelativeBias(c, Cat(a, ".SelfAttention"), tgt, tgt);
      // Cross attention has no relative bias: zeros [1, h, tgt, src], made in block 0 and
      // reused by the later blocks.
      cross_bias = tr.New(Cat(x_, ".EncDecAttention.position_bias"), {1, s.num_heads, tgt, src});
    } else {
      tr.CheckpointArg(dec_bias);
      tr.CheckpointArg(cross_bias);
    }
    T x = RmsNormT5(tr, Cat(a, ".layer_norm"), h);
    T o = T5Attention(c, Cat(a, ".SelfAttention"), x, x, tgt, tgt, dec_bias, true, true);
    o = Dropout(tr, Cat(a, ".dropout"), o, s.hidden_dropout);
    h = AddT(tr, Cat(a, ".residual"), h, o);
    x = RmsNormT5(tr, Cat(x_, ".layer_norm"), h);
    o = T5Attention(c, Cat(x_, ".EncDecAttention"), x, enc, tgt, src, cross_bias, false, false);
    o = Dropout(tr, Cat(x_, ".dropout"), o, s.hidden_dropout);
    h = AddT(tr, Cat(x_, ".residual"), h, o);
    h = T5Ff(c, Cat(p, ".layer.2"), h);
  }
  tr.BeginLayer("decoder.final_layer_norm", LayerKind::kFinalNorm, false);
  T out = RmsNormT5(tr, "decoder.final_layer_norm", h);
  out = Dropout(tr, "decoder.final_dropout", out, s.hidden_dropout);

  tr.BeginLayer("lm_head", LayerKind::kHead, false);
  // The decoder output is rescaled by d_model**-0.5 (a scalar mul, nothing saved) unless the
  // config said tie_word_embeddings: false.
  if (s.t5_rescale_output) out = Copy(tr, "lm_head.rescale", out, out.dtype);
  T logits = Linear(tr, "lm_head", out, s.vocab_size, false,
                    s.tie_word_embeddings ? &shared : nullptr);
  tr.KeepAsOutput(logits);
  tr.BeginLayer("loss", LayerKind::kLoss, false);
  CrossEntropy(tr, "loss", logits, /*upcast=*/false);
}

}  // namespace dsplan
