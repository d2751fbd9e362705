#include "simulator/param_fetch.h"

#include <algorithm>
#include <map>
#include <set>

namespace dsplan {
namespace {

// One pass of the coordinator: a micro-step's forward, or its backward with the recomputes.
struct Pass {
  int micro = -1;
  bool forward = true;
  std::vector<TaskId> tasks;  // layer tasks, in issue order
  std::set<int> fetched;      // layers whose partitions the pass copies from the host
};

// A module call: the host work before the next one, and the tensors it fetches (indices into
// the pass's trace).
struct Call {
  double host_s = 0;
  int first = 0, count = 0;  // trace[first, first + count)
};

struct Fetch {
  int64_t numel = 0;
  double copy_s = 0;
  int batch = -1;
};

bool IsLayerTask(const Task& t) {
  return t.layer >= 0 && (t.kind == TaskKind::kForward || t.kind == TaskKind::kRecompute ||
                          t.kind == TaskKind::kBackward);
}

// The partitioned tensors of layer |lp| in model.parameters() order (a tied head's shared
// table last), as the fetch hook gathers them.
std::vector<int64_t> GatheredNumels(const LayerParams& lp, int64_t threshold) {
  std::vector<int64_t> out;
  for (int64_t n : lp.tensor_numels) {
    if (n > threshold) out.push_back(n);
  }
  if (lp.tied_numel > 0) out.push_back(lp.tied_numel);
  return out;
}

// The op (in forward order) whose module fetches each of |count| tensors: the layer's weight
// ops (GEMMs, embedding lookups) in order where there is one per tensor, else spread evenly.
std::vector<int> FetchOps(const Layer& layer, size_t count) {
  std::vector<int> weight_ops;
  for (size_t i = 0; i < layer.ops.size(); ++i) {
    const OpKind k = layer.ops[i].kind;
    if (k == OpKind::kGemm || k == OpKind::kEmbedding) weight_ops.push_back(static_cast<int>(i));
  }
  if (weight_ops.size() == count) return weight_ops;
  const size_t ops = std::max<size_t>(1, layer.ops.size());
  std::vector<int> out(count);
  for (size_t i = 0; i < count; ++i)
    out[i] = static_cast<int>(i * ops / std::max<size_t>(1, count));
  return out;
}

}  // namespace

std::vector<double> OffloadedFetchWaits(const StepGraph& graph, const Workload& workload,
                                        const std::vector<LayerParams>& layer_params,
                                        const Plan& plan, const CostModel& cost,
                                        const std::vector<LayerCost>& layers) {
  std::vector<double> wait(graph.size(), 0.0);
  const ZeroConfig& z = plan.zero;
  if (z.stage != 3 || z.offload_param.device != OffloadDevice::kCpu) return wait;
  const int64_t ranks = std::max(1, plan.dp_size());
  const int64_t elem = PrecisionBytes(plan.precision);
  const int64_t threshold = z.stage3_param_persistence_threshold;

  // Passes, and the layers each copies: a partition copy belongs to the pass of the next layer
  // task (the builder adds a fetch or prefetch before the task that first needs it).
  std::vector<Pass> passes;
  std::vector<int> pending;
  for (TaskId id = 0; id < graph.size(); ++id) {
    const Task& t = graph.task(id);
    if (t.kind == TaskKind::kCopyH2D && t.param_fetch && t.layer >= 0) {
      pending.push_back(t.layer);
      continue;
    }
    if (!IsLayerTask(t) || t.layer >= static_cast<int>(workload.layers.size())) continue;
    const bool forward = t.kind == TaskKind::kForward;
    if (passes.empty() || passes.back().micro != t.micro_step || passes.back().forward != forward) {
      passes.push_back(Pass{t.micro_step, forward, {}, {}});
    }
    passes.back().tasks.push_back(id);
    passes.back().fetched.insert(pending.begin(), pending.end());
    pending.clear();
  }

  int64_t available = 0;  // elements fetched and not released (the coordinator's count)
  for (size_t p = 0; p < passes.size(); ++p) {
    const Pass& pass = passes[p];
    // A forward's layer stays gathered into the backward when the backward does not fetch it
    // again (the builder's retention: reuse distance, or kept for the backward).
    const Pass* next =
        p + 1 < passes.size() && !passes[p + 1].forward && passes[p + 1].micro == pass.micro
            ? &passes[p + 1]
            : nullptr;
    std::vector<Fetch> trace;
    std::vector<Call> calls;
    std::vector<std::pair<size_t, size_t>> task_calls;  // [begin, end) into calls, per task
    std::vector<double> task_host(pass.tasks.size(), 0.0);
    std::vector<int64_t> task_release(pass.tasks.size(), 0);
    std::set<int> assigned;
    std::map<int, int64_t> release;  // per layer: elements its last task in the pass releases
    for (size_t k = 0; k < pass.tasks.size(); ++k) {
      const Task& t = graph.task(pass.tasks[k]);
      const Layer& layer = workload.layers[t.layer];
      double gpu = 0, host = 0;
      cost.LayerTaskParts(t, layers, &gpu, &host);
      task_host[k] = host;
      const size_t ops = std::max<size_t>(1, layer.ops.size());
      const size_t begin = calls.size();
      for (size_t i = 0; i < ops; ++i) calls.push_back(Call{host / static_cast<double>(ops), 0, 0});
      if (pass.fetched.count(t.layer) != 0 && assigned.insert(t.layer).second && t.parts <= 1 &&
          t.layer < static_cast<int>(layer_params.size())) {
        const std::vector<int64_t> numels = GatheredNumels(layer_params[t.layer], threshold);
        const std::vector<int> at = FetchOps(layer, numels.size());
        const bool reversed = t.kind == TaskKind::kBackward;
        // Tensors in call order: the trace is the order the host meets them.
        std::vector<std::pair<size_t, int64_t>> order;
        for (size_t i = 0; i < numels.size(); ++i) {
          const size_t op = std::min<size_t>(static_cast<size_t>(at[i]), ops - 1);
          order.emplace_back(reversed ? ops - 1 - op : op, numels[i]);
        }
        std::stable_sort(order.begin(), order.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
        for (const auto& [call, numel] : order) {
          Call& c = calls[begin + call];
          if (c.count == 0) c.first = static_cast<int>(trace.size());
          ++c.count;
          const double bytes = static_cast<double>(elem * ((numel + ranks - 1) / ranks));
          trace.push_back(Fetch{numel, cost.CopySeconds(true, true, bytes), -1});
        }
        const bool retained =
            pass.forward && (next == nullptr || next->fetched.count(t.layer) == 0);
        if (!retained) {
          for (int64_t n : numels) release[t.layer] += n;
        }
      }
      // Released after the layer's forward, or after its backward (not its recompute).
      if (t.kind != TaskKind::kRecompute) {
        task_release[k] = release[t.layer];
        release.erase(t.layer);
      }
      task_calls.emplace_back(begin, calls.size());
    }
    if (trace.empty()) {
      if (!pass.forward) available = 0;
      continue;
    }
    // The coordinator, in host time |host| against the all-gather stream's |stream|.
    double host = 0, stream = 0;
    std::vector<char> waited;  // per batch: its handle has been waited for
    size_t queue = 0;          // the next trace entry not popped off the fetch queue
    auto issue = [&](const std::vector<size_t>& list) {
      const int b = static_cast<int>(waited.size());
      double secs = 0;
      for (size_t i : list) {
        trace[i].batch = b;
        secs += trace[i].copy_s;
        available += trace[i].numel;
      }
      if (ranks > 1) {
        // all_gather_coalesced: each partition's blocking `.to(device)` before the collective.
        host = std::max(host, stream) + secs;
        stream = host;
        waited.push_back(1);
      } else {
        stream = std::max(stream, host) + secs;
        waited.push_back(0);
      }
    };
    const int64_t bucket = z.stage3_prefetch_bucket_size;
    for (size_t k = 0; k < pass.tasks.size(); ++k) {
      const double start = host;
      for (size_t ci = task_calls[k].first; ci < task_calls[k].second; ++ci) {
        const Call& c = calls[ci];
        std::vector<size_t> own;
        for (int i = c.first; i < c.first + c.count; ++i) {
          if (trace[i].batch < 0) own.push_back(static_cast<size_t>(i));
          queue = std::max(queue, static_cast<size_t>(i) + 1);
        }
        if (!own.empty()) issue(own);
        for (int i = c.first; i < c.first + c.count; ++i) {
          const int b = trace[i].batch;
          if (!waited[b]) {
            host = std::max(host, stream);  // the stream's synchronize drains every queued copy
            waited[b] = 1;
          }
        }
        if (bucket > 0) {
          const int64_t room = std::min(z.stage3_max_live_parameters - available, bucket);
          std::vector<size_t> ahead;
          int64_t numel = 0;
          while (queue < trace.size() && numel < room) {
            if (trace[queue].batch < 0) {
              ahead.push_back(queue);
              numel += trace[queue].numel;
            }
            ++queue;
          }
          if (!ahead.empty()) issue(ahead);
        }
        host += c.host_s;
      }
      wait[pass.tasks[k]] = std::max(0.0, host - start - task_host[k]);
      available = std::max<int64_t>(0, available - task_release[k]);
    }
    if (!pass.forward) available = 0;
  }
  return wait;
}

}  // namespace dsplan
