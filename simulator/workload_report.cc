#include "simulator/workload_report.h"

#include <fmt/format.h>

#include "core/units.h"

namespace dsplan {

nlohmann::json WorkloadToJson(const Workload& w, bool with_tensors) {
  using nlohmann::json;
  const ModelSpec& s = w.spec;
  json j;
  j["model"] = {{"name", s.name},
                {"model_type", s.model_type},
                {"class", ModelClassName(s.family)},
                {"vocab_size", s.vocab_size},
                {"hidden_size", s.hidden_size},
                {"num_layers", s.num_layers},
                {"num_decoder_layers", s.num_decoder_layers},
                {"num_heads", s.num_heads},
                {"num_kv_heads", s.num_kv_heads},
                {"head_dim", s.head_dim},
                {"intermediate_size", s.intermediate_size},
                {"activation", ActivationName(s.activation)},
                {"tie_word_embeddings", s.tie_word_embeddings}};
  if (s.num_experts > 0) {
    j["model"]["num_experts"] = s.num_experts;
    j["model"]["experts_per_token"] = s.experts_per_token;
  }
  j["options"] = {{"micro_batch", w.shape.micro_batch},
                  {"seq_len", w.shape.seq_len},
                  {"precision", PrecisionName(w.shape.precision)},
                  {"attention", AttentionImplName(w.attention)},
                  {"gradient_checkpointing", w.shape.gradient_checkpointing}};
  if (s.encoder_decoder()) {
    j["options"]["target_len"] =
        w.shape.target_len > 0 ? w.shape.target_len : w.shape.seq_len;
  }
  j["params"] = w.params;
  j["param_bytes"] = w.param_bytes;
  j["tokens"] = w.tokens;
  j["fwd_flops"] = w.fwd_flops;
  j["bwd_flops"] = w.bwd_flops;
  j["recompute_flops"] = w.recompute_flops;
  j["flops_per_step"] = w.flops_per_step;
  j["activation_bytes"] = w.activation_bytes;
  j["recompute_peak_bytes"] = w.recompute_peak_bytes;
  json layers = json::array();
  for (const Layer& l : w.layers) {
    json ops = json::array();
    for (const Op& op : l.ops) {
      json o = {{"name", op.name},
                {"kind", OpKindName(op.kind)},
                {"fwd_flops", op.fwd_flops},
                {"bwd_flops", op.bwd_flops},
                {"fwd_bytes", op.fwd_bytes},
                {"bwd_bytes", op.bwd_bytes}};
      if (op.kind == OpKind::kGemm || op.kind == OpKind::kBatchedGemm ||
          op.kind == OpKind::kAttention) {
        o["m"] = op.m;
        o["n"] = op.n;
        o["k"] = op.k;
        o["batch"] = op.batch;
      }
      if (op.kind == OpKind::kAttention) o["causal"] = op.causal;
      ops.push_back(std::move(o));
    }
    layers.push_back({{"name", l.name},
                      {"kind", LayerKindName(l.kind)},
                      {"checkpointed", l.checkpointed},
                      {"params", l.params},
                      {"fwd_flops", l.fwd_flops},
                      {"bwd_flops", l.bwd_flops},
                      {"recompute_flops", l.recompute_flops},
                      {"fwd_bytes", l.fwd_bytes},
                      {"bwd_bytes", l.bwd_bytes},
                      {"saved_bytes", l.saved_bytes},
                      {"activation_bytes", l.activation_bytes},
                      {"recompute_bytes", l.recompute_bytes},
                      {"ops", std::move(ops)}});
  }
  j["layers"] = std::move(layers);
  if (with_tensors) {
    json tensors = json::array();
    for (const TensorSpec& t : w.tensors) {
      tensors.push_back({{"name", t.name},
                         {"shape", t.shape},
                         {"dtype", DTypeName(t.dtype)},
                         {"category", TensorCategoryName(t.category)},
                         {"bytes", t.bytes},
                         {"layer", t.layer},
                         {"recomputed", t.recomputed}});
    }
    j["tensors"] = std::move(tensors);
  }
  return j;
}

namespace {

bool SameShape(const Layer& a, const Layer& b) {
  return a.kind == b.kind && a.params == b.params && a.fwd_flops == b.fwd_flops &&
         a.activation_bytes == b.activation_bytes && a.recompute_bytes == b.recompute_bytes;
}

std::string BlockRange(const std::string& first, const std::string& last) {
  // "transformer.h.1" .. "transformer.h.47" -> "transformer.h.1-47"
  auto dot = last.rfind('.');
  if (dot == std::string::npos) return first + ".." + last;
  return first + "-" + last.substr(dot + 1);
}

}  // namespace

std::string WorkloadTable(const Workload& w, bool all_layers) {
  const bool ckpt = w.shape.gradient_checkpointing;
  std::string out;
  out += fmt::format("{:<42} {:>5} {:>10} {:>12} {:>12}{}\n", "layer", "count", "params",
                     "fwd FLOPs", "activations", ckpt ? fmt::format(" {:>12}", "recompute") : "");
  out += fmt::format("{:<42} {:>5} {:>10} {:>12} {:>12}{}\n", "", "", "(each)", "(each)",
                     "(each, kept)", ckpt ? fmt::format(" {:>12}", "(each, bwd)") : "");
  for (size_t i = 0; i < w.layers.size();) {
    size_t j = i + 1;
    if (!all_layers) {
      while (j < w.layers.size() && SameShape(w.layers[i], w.layers[j])) ++j;
    }
    const Layer& l = w.layers[i];
    std::string name = j - i > 1 ? BlockRange(l.name, w.layers[j - 1].name) : l.name;
    if (name.size() > 42) name = "…" + name.substr(name.size() - 41);
    out += fmt::format("{:<42} {:>5} {:>10} {:>12} {:>12}{}\n", name, j - i,
                       FormatCount(static_cast<double>(l.params)), FormatFlops(l.fwd_flops),
                       FormatBytes(static_cast<double>(l.activation_bytes)),
                       ckpt ? fmt::format(" {:>12}",
                                          l.recompute_bytes
                                              ? FormatBytes(static_cast<double>(l.recompute_bytes))
                                              : "-")
                            : "");
    i = j;
  }
  out += "\n";
  out += fmt::format("{:<30}{} ({})\n", "parameters", w.params,
                     FormatBytes(static_cast<double>(w.param_bytes)));
  out += fmt::format("{:<30}{}\n", "tokens per micro-batch", w.tokens);
  out += fmt::format("{:<30}{} (forward {}, backward {}{})\n", "FLOPs per micro-batch",
                     FormatFlops(w.flops_per_step), FormatFlops(w.fwd_flops),
                     FormatFlops(w.bwd_flops),
                     ckpt ? ", recompute " + FormatFlops(w.recompute_flops) : "");
  out += fmt::format("{:<30}{}", "activations kept for backward", FormatBytes(
                                                             static_cast<double>(w.activation_bytes)));
  if (ckpt) {
    out += fmt::format(" (+ {} while one block is recomputed)",
                       FormatBytes(static_cast<double>(w.recompute_peak_bytes)));
  }
  out += "\n";
  return out;
}

std::string ModelSummary(const ModelSpec& s, int64_t params) {
  std::string layers = s.encoder_decoder()
                           ? fmt::format("{} encoder + {} decoder blocks", s.num_layers,
                                         s.num_decoder_layers)
                           : fmt::format("{} blocks", s.num_layers);
  std::string heads = s.num_kv_heads != s.num_heads
                          ? fmt::format("{} heads ({} KV) x {}", s.num_heads, s.num_kv_heads,
                                        s.head_dim)
                          : fmt::format("{} heads x {}", s.num_heads, s.head_dim);
  std::string moe = s.num_experts > 0 ? fmt::format(", {} experts (top {})", s.num_experts,
                                                    s.experts_per_token)
                                      : "";
  return fmt::format(
      "{}: {} ({}), {} parameters ({})\n  {}, hidden {}, {}, MLP {} {}{}{}, vocab {}{}\n",
      s.name, ModelClassName(s.family), s.model_type, params, FormatCount(static_cast<double>(params)),
      layers, s.hidden_size, heads, s.intermediate_size, ActivationName(s.activation),
      s.gated_mlp ? " (gated)" : "", moe, s.vocab_size,
      s.tie_word_embeddings ? ", tied embeddings" : "");
}

}  // namespace dsplan
