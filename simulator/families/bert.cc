// BertForMaskedLM as modeling_bert.py runs it in train mode (post-LN encoder, MLM head tied to
// the word embeddings, cross entropy over every position).
#include <fmt/format.h>

#include "simulator/families/families.h"

namespace dsplan {

void TraceBert(Tracer& tr) {
  const ModelSpec& s = tr.spec();
  const int64_t b = tr.options().micro_batch;
  const int64_t n = tr.options().seq_len;
  T ids = tr.Input("input_ids", {b, n}, DType::kI64);
  T pos_ids = tr.Input("position_ids", {1, n}, DType::kI64);
  T type_ids = tr.Input("token_type_ids", {b, n}, DType::kI64);

  tr.BeginLayer("bert.embeddings", LayerKind::kEmbedding, false);
  T word;
  T e = Embedding(tr, "bert.embeddings.word_embeddings", ids, s.vocab_size, s.hidden_size, &word);
  T p = Embedding(tr, "bert.embeddings.position_embeddings", pos_ids, s.max_positions,
                  s.hidden_size);
  T t = Embedding(tr, "bert.embeddings.token_type_embeddings", type_ids, s.bert_type_vocab,
                  s.hidden_size);
  T h = AddT(tr, "bert.embeddings.add_type", e, t);
  h = AddT(tr, "bert.embeddings.add_position", h, p);
  h = LayerNorm(tr, "bert.embeddings.LayerNorm", h);
  h = Dropout(tr, "bert.embeddings.dropout", h, s.embd_dropout);

  for (int64_t i = 0; i < s.num_layers; ++i) {
    const std::string l = fmt::format("bert.encoder.layer.{}", i);
    tr.BeginLayer(l, LayerKind::kEncoderBlock, true);
    tr.CheckpointArg(h);
    const std::string a = Cat(l, ".attention.self");
    T q = Linear(tr, Cat(a, ".query"), h, s.hidden_size, true);
    T k = Linear(tr, Cat(a, ".key"), h, s.hidden_size, true);
    T v = Linear(tr, Cat(a, ".value"), h, s.hidden_size, true);
    AttentionArgs args;
    args.name = a;
    args.q = tr.View(q, {b, s.num_heads, n, s.head_dim});
    args.k = tr.View(k, {b, s.num_heads, n, s.head_dim});
    args.v = tr.View(v, {b, s.num_heads, n, s.head_dim});
    args.causal = false;
    args.dropout = s.attn_dropout;
    args.eager_softmax_fp32 = false;
    T o = Linear(tr, Cat(l, ".attention.output.dense"), Attention(tr, args), s.hidden_size, true);
    o = Dropout(tr, Cat(l, ".attention.output.dropout"), o, s.hidden_dropout);
    T sum = AddT(tr, Cat(l, ".attention.output.residual"), o, h);
    T h2 = LayerNorm(tr, Cat(l, ".attention.output.LayerNorm"), sum);
    T m = Linear(tr, Cat(l, ".intermediate.dense"), h2, s.intermediate_size, true);
    m = Activate(tr, Cat(l, ".intermediate.act"), m, s.activation);
    m = Linear(tr, Cat(l, ".output.dense"), m, s.hidden_size, true);
    m = Dropout(tr, Cat(l, ".output.dropout"), m, s.hidden_dropout);
    T sum2 = AddT(tr, Cat(l, ".output.residual"), m, h2);
    h = LayerNorm(tr, Cat(l, ".output.LayerNorm"), sum2);
  }

  tr.BeginLayer("cls.predictions", LayerKind::kHead, false);
  T x = Linear(tr, "cls.predictions.transform.dense", h, s.hidden_size, true);
  x = Activate(tr, "cls.predictions.transform.act", x, s.activation);
  x = LayerNorm(tr, "cls.predictions.transform.LayerNorm", x);
  // The decoder weight is tied to the word embeddings; its bias is a separate parameter.
  T logits = Linear(tr, "cls.predictions.decoder", x, s.vocab_size, false,
                    s.tie_word_embeddings ? &word : nullptr);
  tr.Param("cls.predictions.bias", {s.vocab_size});
  tr.KeepAsOutput(logits);
  tr.BeginLayer("loss", LayerKind::kLoss, false);
  CrossEntropy(tr, "loss", logits, /*upcast=*/false);
}

}  // namespace dsplan
