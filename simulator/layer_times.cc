#include "simulator/layer_times.h"

#include <algorithm>

#include <fmt/format.h>

namespace dsplan {
namespace {

// Two blocks repeat each other when their ops match in kind and shape (names differ by index).
bool SameOps(const Layer& a, const Layer& b) {
  if (a.kind != b.kind || a.ops.size() != b.ops.size() || a.checkpointed != b.checkpointed) {
    return false;
  }
  for (size_t i = 0; i < a.ops.size(); ++i) {
    const Op& x = a.ops[i];
    const Op& y = b.ops[i];
    if (x.kind != y.kind || x.m != y.m || x.n != y.n || x.k != y.k || x.batch != y.batch ||
        x.fwd_bytes != y.fwd_bytes || x.bwd_bytes != y.bwd_bytes) {
      return false;
    }
  }
  return true;
}

double Ms(double s) { return 1e3 * s; }

}  // namespace

std::vector<LayerTimes> PriceLayers(const Workload& w, const CostModel& cost, bool all_layers) {
  const std::vector<LayerCost> costs = cost.Layers(w);
  const double ratio = cost.WorkloadSustainedRatio(w);
  std::vector<LayerTimes> out;
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const Layer& l = w.layers[i];
    const bool block = l.kind == LayerKind::kEncoderBlock || l.kind == LayerKind::kDecoderBlock;
    if (!all_layers && block && i > 0 && SameOps(w.layers[i - 1], l)) continue;
    LayerTimes t;
    t.layer = &l;
    t.cost = costs[i];
    t.sustained_ratio = ratio;
    for (const Op& op : l.ops) {
      const bool tensor = op.kind == OpKind::kGemm || op.kind == OpKind::kBatchedGemm ||
                          op.kind == OpKind::kAttention;
      const double r = tensor ? ratio : 1.0;
      const double mem = cost.BackwardMemoryBoundPart(op);
      t.ops.push_back(
          {&op, r * cost.OpForwardSeconds(op), r * (cost.OpBackwardSeconds(op) - mem) + mem});
    }
    out.push_back(std::move(t));
  }
  return out;
}

std::string LayerTimesText(const std::vector<LayerTimes>& layers) {
  std::string o;
  for (const LayerTimes& t : layers) {
    const LayerCost& c = t.cost;
    o += fmt::format("{} ({}{}{})\n", t.layer->name, LayerKindName(t.layer->kind),
                     t.layer->checkpointed ? ", checkpointed" : "",
                     t.sustained_ratio != 1
                         ? fmt::format("; GEMMs and attention x{:.3f} for sustained load",
                                       t.sustained_ratio)
                         : "");
    size_t width = 4;
    for (const OpTime& op : t.ops) width = std::max(width, op.op->name.size());
    o += fmt::format("  {:<{}}  {:<13}  {:>9}  {:>9}\n", "op", width, "kind", "fwd ms", "bwd ms");
    for (const OpTime& op : t.ops) {
      o += fmt::format("  {:<{}}  {:<13}  {:>9.3f}  {:>9.3f}\n", op.op->name, width,
                       OpKindName(op.op->kind), Ms(op.fwd_s), Ms(op.bwd_s));
    }
    o += fmt::format(
        "  kernels: fwd {:.3f} ms (GEMM {:.3f}, attention {:.3f}, memory-bound {:.3f}), bwd "
        "{:.3f} ms (GEMM {:.3f}, attention {:.3f}, memory-bound {:.3f})\n",
        Ms(c.FwdGpuSeconds()), Ms(c.fwd_gemm_s), Ms(c.fwd_attention_s), Ms(c.fwd_memory_s),
        Ms(c.BwdGpuSeconds()), Ms(c.bwd_gemm_s), Ms(c.bwd_attention_s), Ms(c.bwd_memory_s));
    o += fmt::format("  host: fwd {:.3f} ms, bwd {:.3f} ms{}; the layer takes fwd {:.3f} ms, bwd "
                     "{:.3f} ms (before ZeRO-3 hooks)\n\n",
                     Ms(c.fwd_dispatch_s), Ms(c.bwd_dispatch_s),
                     t.layer->checkpointed
                         ? fmt::format(", recompute {:.3f} ms", Ms(c.recompute_dispatch_s))
                         : "",
                     Ms(c.fwd_s), Ms(c.bwd_s));
  }
  return o;
}

nlohmann::json LayerTimesJson(const std::vector<LayerTimes>& layers) {
  nlohmann::json out = nlohmann::json::array();
  for (const LayerTimes& t : layers) {
    const LayerCost& c = t.cost;
    nlohmann::json ops = nlohmann::json::array();
    for (const OpTime& op : t.ops) {
      ops.push_back({{"name", op.op->name},
                     {"kind", OpKindName(op.op->kind)},
                     {"fwd_s", op.fwd_s},
                     {"bwd_s", op.bwd_s}});
    }
    out.push_back({{"layer", t.layer->name},
                   {"kind", LayerKindName(t.layer->kind)},
                   {"checkpointed", t.layer->checkpointed},
                   {"sustained_ratio", t.sustained_ratio},
                   {"ops", ops},
                   {"kernels_fwd_s", c.FwdGpuSeconds()},
                   {"kernels_bwd_s", c.BwdGpuSeconds()},
                   {"gemm_fwd_s", c.fwd_gemm_s},
                   {"gemm_bwd_s", c.bwd_gemm_s},
                   {"attention_fwd_s", c.fwd_attention_s},
                   {"attention_bwd_s", c.bwd_attention_s},
                   {"memory_fwd_s", c.fwd_memory_s},
                   {"memory_bwd_s", c.bwd_memory_s},
                   {"host_fwd_s", c.fwd_dispatch_s},
                   {"host_bwd_s", c.bwd_dispatch_s},
                   {"host_recompute_s", c.recompute_dispatch_s},
                   {"fwd_s", c.fwd_s},
                   {"bwd_s", c.bwd_s}});
  }
  return out;
}

}  // namespace dsplan
