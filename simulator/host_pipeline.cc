#include "simulator/host_pipeline.h"

#include <algorithm>

namespace dsplan {

HostPipeline BuildHostPipeline(const StepGraph& g, const Workload& w, const CostModel& cost,
                               const std::vector<LayerCost>& layers,
                               const HostPipelineOptions& options,
                               std::vector<double>* durations) {
  const int n = g.size();
  HostPipeline hp;
  hp.host_s.assign(n, -1.0);
  hp.sync.assign(n, 0);
  hp.waits_for.assign(n, -1);
  // The first layer of the model, whose stack's masks are built at the step's start anyway.
  int first_embedding = -1;
  for (size_t i = 0; i < w.layers.size(); ++i) {
    if (w.layers[i].kind == LayerKind::kEmbedding) {
      first_embedding = static_cast<int>(i);
      break;
    }
  }
  // The last phase seen per micro-step: 0 none, 1 forward, 2 backward (and recompute).
  std::vector<int> phase_of;
  for (TaskId id = 0; id < n; ++id) {
    const Task& t = g.task(id);
    double gpu = 0, host = 0;
    if (!cost.LayerTaskParts(t, layers, &gpu, &host)) continue;
    (*durations)[id] = gpu;
    hp.host_s[id] = host;
    const int micro = std::max(0, t.micro_step);
    if (static_cast<int>(phase_of.size()) <= micro) phase_of.resize(micro + 1, 0);
    const int phase = t.kind == TaskKind::kForward ? 1 : 2;
    if (phase != phase_of[micro]) {
      if (phase == 1 || options.sync_each_phase) hp.sync[id] = 1;
      phase_of[micro] = phase;
    }
    if (t.kind == TaskKind::kForward && t.layer >= 0 && t.layer != first_embedding &&
        w.layers[t.layer].kind == LayerKind::kEmbedding) {
      hp.sync[id] = 1;
    }
  }
  if (options.zero_stage == 3) {
    // Flushes in program order (at stage 3 every reduce task is a bucket's flush: the step's
    // own collectives follow the last backward), each ending with the copy into the gradient
    // partition that follows it on its stream (Builder::FlushBucket).
    std::vector<TaskId> flush_end;
    int next_flush = 0;  // flushes before the current task
    for (TaskId id = 0; id < n; ++id) {
      const Task& t = g.task(id);
      if (t.kind == TaskKind::kReduceScatter || t.kind == TaskKind::kAllReduce) {
        TaskId end = id;
        if (id + 1 < n && g.task(id + 1).kind == TaskKind::kGradCopy &&
            g.task(id + 1).resource == t.resource && g.task(id + 1).index == t.index) {
          end = id + 1;
        }
        flush_end.push_back(end);
        continue;
      }
      if (t.kind != TaskKind::kBackward || t.bucket_flushes <= 0) continue;
      // This task's hooks run flushes next_flush .. next_flush + c - 1 (added after it); the
      // last of them waits for the flush three before it, or the latest earlier one.
      const int c = t.bucket_flushes;
      const int want = std::min(next_flush + c - 4, static_cast<int>(flush_end.size()) - 1);
      if (want >= 0) hp.waits_for[id] = flush_end[want];
      next_flush += c;
    }
  }
  return hp;
}

}  // namespace dsplan
