#include "simulator/param_fetch.h"

#include <algorithm>

namespace dsplan {
namespace {

// One pass of the coordinator: a micro-step's forward, or its backward with the recomputes:
// tasks [begin, end) of the pass list, and the layers whose partitions it copies from the host
// ([fetched_begin, fetched_end) of the fetched-layer list).
struct Pass {
  int micro = -1;
  bool forward = true;
  size_t begin = 0, end = 0;
  size_t fetched_begin = 0, fetched_end = 0;
};

// A layer's partitioned tensors as the fetch hook gathers them: numels in model.parameters()
// order (a tied head's shared table last), each one's copy time, and the op (forward order) of
// the module that fetches it.
struct LayerFetch {
  bool ready = false;
  std::vector<int64_t> numels;
  std::vector<double> copy_s;
  std::vector<int> ops;
  int64_t total = 0;
};

struct Fetch {
  int64_t numel = 0;
  double copy_s = 0;
  int batch = -1;
  int op = 0;  // the op (in the task's call order) at which the host first needs it
};

bool IsLayerTask(const Task& t) {
  return t.layer >= 0 && (t.kind == TaskKind::kForward || t.kind == TaskKind::kRecompute ||
                          t.kind == TaskKind::kBackward);
}

// Copy times by tensor size: a model's layers repeat a few shapes.
using CopyCache = std::vector<std::pair<int64_t, double>>;

void Prepare(const Layer& layer, const LayerParams& lp, int64_t threshold, int64_t elem,
             int64_t ranks, const CostModel& cost, CopyCache* cache, LayerFetch* f) {
  f->ready = true;
  for (int64_t n : lp.tensor_numels) {
    if (n > threshold) f->numels.push_back(n);
  }
  if (lp.tied_numel > 0) f->numels.push_back(lp.tied_numel);
  for (int64_t n : f->numels) {
    f->total += n;
    auto hit = std::find_if(cache->begin(), cache->end(),
                            [n](const std::pair<int64_t, double>& c) { return c.first == n; });
    if (hit == cache->end()) {
      const double bytes = static_cast<double>(elem * ((n + ranks - 1) / ranks));
      cache->emplace_back(n, cost.CopySeconds(true, true, bytes));
      hit = cache->end() - 1;
    }
    f->copy_s.push_back(hit->second);
  }
  // The layer's weight ops (GEMMs, embedding lookups) in order where there is one per tensor,
  // else spread evenly over its ops.
  for (size_t i = 0; i < layer.ops.size(); ++i) {
    const OpKind k = layer.ops[i].kind;
    if (k == OpKind::kGemm || k == OpKind::kEmbedding) f->ops.push_back(static_cast<int>(i));
  }
  if (f->ops.size() != f->numels.size()) {
    const size_t ops = std::max<size_t>(1, layer.ops.size());
    const size_t count = std::max<size_t>(1, f->numels.size());
    f->ops.resize(f->numels.size());
    for (size_t i = 0; i < f->numels.size(); ++i) f->ops[i] = static_cast<int>(i * ops / count);
  }
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
  const size_t num_layers = std::min(workload.layers.size(), layer_params.size());

  // Passes, and the layers each copies: a partition copy belongs to the pass of the next layer
  // task (the builder adds a fetch or prefetch before the task that first needs it).
  std::vector<Pass> passes;
  std::vector<TaskId> tasks;
  std::vector<int> fetched;         // per pass, its layers with copies (Pass::fetched_*)
  std::vector<int> pending_layers;  // layers whose copies came since the last layer task
  for (TaskId id = 0; id < graph.size(); ++id) {
    const Task& t = graph.task(id);
    if (t.kind == TaskKind::kCopyH2D && t.param_fetch && t.layer >= 0 &&
        static_cast<size_t>(t.layer) < num_layers) {
      pending_layers.push_back(t.layer);
      continue;
    }
    if (!IsLayerTask(t) || static_cast<size_t>(t.layer) >= num_layers) continue;
    const bool forward = t.kind == TaskKind::kForward;
    if (passes.empty() || passes.back().micro != t.micro_step || passes.back().forward != forward) {
      passes.push_back(
          Pass{t.micro_step, forward, tasks.size(), tasks.size(), fetched.size(), fetched.size()});
    }
    tasks.push_back(id);
    passes.back().end = tasks.size();
    fetched.insert(fetched.end(), pending_layers.begin(), pending_layers.end());
    passes.back().fetched_end = fetched.size();
    pending_layers.clear();
  }

  std::vector<LayerFetch> prepared(num_layers);
  CopyCache copy_cache;
  std::vector<char> in_pass(num_layers, 0), in_next(num_layers, 0), assigned(num_layers, 0);
  std::vector<int64_t> release(num_layers, 0);
  std::vector<Fetch> trace;
  std::vector<size_t> task_first, task_count;
  std::vector<char> waited;  // per batch: its handle has been waited for
  std::vector<size_t> batch;
  const int64_t bucket = z.stage3_prefetch_bucket_size;
  int64_t available = 0;  // elements fetched and not released (the coordinator's count)
  for (size_t p = 0; p < passes.size(); ++p) {
    const Pass& pass = passes[p];
    if (pass.fetched_begin == pass.fetched_end) {
      if (!pass.forward) available = 0;
      continue;
    }
    for (size_t i = pass.fetched_begin; i < pass.fetched_end; ++i) in_pass[fetched[i]] = 1;
    // A forward's layer stays gathered into the backward when the backward does not fetch it
    // again (the builder's retention: reuse distance, or kept for the backward).
    const bool has_next =
        p + 1 < passes.size() && !passes[p + 1].forward && passes[p + 1].micro == pass.micro;
    if (has_next) {
      for (size_t i = passes[p + 1].fetched_begin; i < passes[p + 1].fetched_end; ++i) {
        in_next[fetched[i]] = 1;
      }
    }
    // The pass's trace: each fetched layer's tensors at its first task, in the order the host
    // meets them (a backward walks its ops in reverse).
    trace.clear();
    const size_t n = pass.end - pass.begin;
    task_first.assign(n, 0);
    task_count.assign(n, 0);
    for (size_t k = 0; k < n; ++k) {
      const Task& t = graph.task(tasks[pass.begin + k]);
      const int l = t.layer;
      task_first[k] = trace.size();
      if (!in_pass[l] || assigned[l] || t.parts > 1) continue;
      assigned[l] = 1;
      LayerFetch& f = prepared[l];
      if (!f.ready) {
        Prepare(workload.layers[l], layer_params[l], threshold, elem, ranks, cost, &copy_cache, &f);
      }
      const int ops = static_cast<int>(std::max<size_t>(1, workload.layers[l].ops.size()));
      const bool reversed = t.kind == TaskKind::kBackward;
      const size_t first = trace.size();
      for (size_t i = 0; i < f.numels.size(); ++i) {
        const int op = std::min(f.ops[i], ops - 1);
        trace.push_back(Fetch{f.numels[i], f.copy_s[i], -1, reversed ? ops - 1 - op : op});
      }
      std::stable_sort(trace.begin() + static_cast<std::ptrdiff_t>(first), trace.end(),
                       [](const Fetch& a, const Fetch& b) { return a.op < b.op; });
      task_count[k] = trace.size() - first;
      // Released unless a forward's layer is kept into the backward (not fetched there again).
      const bool kept = pass.forward && !(has_next && in_next[l]);
      if (!kept) release[l] = f.total;
    }
    // The coordinator, in host time |host| against the all-gather stream's |stream|.
    double host = 0, stream = 0;
    waited.clear();
    size_t queue = 0;  // the next trace entry not popped off the fetch queue
    auto issue = [&]() {
      double secs = 0;
      for (size_t i : batch) {
        trace[i].batch = static_cast<int>(waited.size());
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
    for (size_t k = 0; k < n; ++k) {
      const Task& t = graph.task(tasks[pass.begin + k]);
      const int l = t.layer;
      double gpu = 0, task_host = 0;
      cost.LayerTaskParts(t, layers, &gpu, &task_host);
      const int ops = static_cast<int>(std::max<size_t>(1, workload.layers[l].ops.size()));
      const double h = task_host / ops;
      const double start = host;
      size_t next_fetch = task_first[k];
      const size_t fetch_end = task_first[k] + task_count[k];
      for (int op = 0; op < ops; ++op) {
        // This module's own tensors: fetched now if no prefetch took them, then waited for.
        const size_t own_begin = next_fetch;
        while (next_fetch < fetch_end && trace[next_fetch].op == op) ++next_fetch;
        if (own_begin < next_fetch) {
          batch.clear();
          for (size_t i = own_begin; i < next_fetch; ++i) {
            if (trace[i].batch < 0) batch.push_back(i);
          }
          if (!batch.empty()) issue();
          for (size_t i = own_begin; i < next_fetch; ++i) {
            const int b = trace[i].batch;
            if (!waited[b]) {
              host = std::max(host, stream);  // the stream's synchronize drains every queued copy
              waited[b] = 1;
            }
          }
          queue = std::max(queue, next_fetch);
        }
        if (bucket > 0 && queue < trace.size()) {
          const int64_t room = std::min(z.stage3_max_live_parameters - available, bucket);
          batch.clear();
          int64_t numel = 0;
          while (queue < trace.size() && numel < room) {
            if (trace[queue].batch < 0) {
              batch.push_back(queue);
              numel += trace[queue].numel;
            }
            ++queue;
          }
          if (!batch.empty()) issue();
        }
        host += h;
        // Until this task's next own fetch nothing can change when no prefetch can issue: add
        // the ops between at once.
        if (bucket <= 0 || queue >= trace.size() || z.stage3_max_live_parameters <= available) {
          const int to = next_fetch < fetch_end ? trace[next_fetch].op : ops;
          if (to > op + 1) {
            host += h * (to - op - 1);
            op = to - 1;
          }
        }
      }
      wait[tasks[pass.begin + k]] = std::max(0.0, host - start - task_host);
      // Released after the layer's forward, or after its backward (not its recompute).
      if (t.kind != TaskKind::kRecompute && release[l] > 0) {
        available = std::max<int64_t>(0, available - release[l]);
        release[l] = 0;
      }
    }
    if (!pass.forward) available = 0;
    for (size_t i = pass.fetched_begin; i < pass.fetched_end; ++i) {
      in_pass[fetched[i]] = 0;
      assigned[fetched[i]] = 0;
    }
    if (has_next) {
      for (size_t i = passes[p + 1].fetched_begin; i < passes[p + 1].fetched_end; ++i) {
        in_next[fetched[i]] = 0;
      }
    }
  }
  return wait;
}

}  // namespace dsplan
