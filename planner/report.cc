#include "planner/report.h"

#include <algorithm>
#include <utility>

#include "simulator/caching_allocator.h"
#include "simulator/workload.h"

namespace dsplan {

Result<PlanReport> BuildPlanReport(const PlannerRequest& request) {
  if (request.profile == nullptr) {
    return Status::InvalidArgument("BuildPlanReport: the request has no hardware profile");
  }
  DSPLAN_ASSIGN_OR_RETURN(PlannerResult res, RunPlanner(request));
  DSPLAN_ASSIGN_OR_RETURN(int64_t params, CountParameters(request.spec));
  PlanReport r;
  r.model_name = request.spec.name;
  r.params = params;
  r.nodes = request.nodes;
  r.gpus_per_node = request.gpus_per_node;
  r.seq_len = request.shape.seq_len;
  r.target_len = request.shape.target_len;
  r.profile_name = request.profile->name;
  r.profile_sources = request.profile->SourceSummary();
  r.gpu_capacity_bytes = static_cast<int64_t>(request.profile->gpu.memory_bytes.value);
  // What a plan may use before its error band, context and NCCL: the device less the headroom
  // (SimulateOptions::headroom, docs/planner.md "Memory headroom").
  r.usable_gpu_bytes = static_cast<double>(r.gpu_capacity_bytes -
                                           request.headroom.Bytes(r.gpu_capacity_bytes));
  r.recommendations = std::move(res.recommendations);
  r.ranked = std::move(res.ranked);
  r.pareto = std::move(res.pareto);
  r.rejected = std::move(res.rejected);
  r.plans_considered = res.plans_considered;
  r.plans_simulated = res.plans_simulated;
  r.seconds = res.seconds;
  return r;
}

namespace {

// Reserved bytes after each task's effects, second replay (the first warms the cache, as in
// SimulateCachingAllocator). Same capacity rule as Simulate.
std::vector<int64_t> ReservedCurve(const StepGraph& g, int64_t capacity) {
  CountingSegmentSource source(capacity);
  CachingAllocator a(&source);
  EffectReplayer replay(&a);
  (void)replay.AllocateInitial(g);
  std::vector<int64_t> out(static_cast<size_t>(g.size()), 0);
  for (int it = 0; it < 2; ++it) {
    for (TaskId id = 0; id < g.size(); ++id) {
      for (int phase = 0; phase < 2; ++phase) {
        for (const MemEffect* e = g.effects_begin(id); e != g.effects_end(id); ++e) {
          if (e->space != MemSpace::kGpu || e->at_end != (phase == 1) || e->bytes == 0) continue;
          (void)replay.Apply(*e);
        }
      }
      if (it == 1) out[static_cast<size_t>(id)] = a.reserved();
    }
  }
  return out;
}

}  // namespace

Result<StepDetail> SimulateStepDetail(const ModelSpec& spec, const HardwareProfile& profile,
                                      const Plan& plan, const SimulateOptions& options) {
  Simulator sim(spec, profile);
  DSPLAN_ASSIGN_OR_RETURN(const Workload* wp, sim.WorkloadFor(plan.shape()));
  const Workload& w = *wp;
  SimulateOptions o = options;
  o.keep_graph = true;
  DSPLAN_ASSIGN_OR_RETURN(Prediction p, sim.Simulate(plan, o));
  StepDetail d;
  const StepGraph& g = p.graph;
  const Schedule& s = p.schedule;
  d.tasks.reserve(static_cast<size_t>(g.size()));
  for (TaskId id = 0; id < g.size(); ++id) {
    const Task& t = g.task(id);
    TimelineTask tt;
    tt.name = TaskName(g, w, id);
    tt.resource = t.resource;
    tt.kind = t.kind;
    tt.start_s = id < static_cast<TaskId>(s.start_s.size()) ? s.start_s[id] : 0;
    tt.end_s = id < static_cast<TaskId>(s.end_s.size()) ? s.end_s[id] : 0;
    tt.bytes = t.bytes;
    tt.flops = t.flops;
    d.tasks.push_back(std::move(tt));
  }
  // The line the plan's nominal peak (reserved + context) must stay under: the device less
  // the headroom, less what the fit rule adds to that peak (the band's share of reserved and
  // NCCL's buffers).
  d.usable_gpu_bytes = static_cast<double>(p.gpu_capacity_bytes -
                                           o.headroom.Bytes(p.gpu_capacity_bytes) -
                                           (p.gpu_upper_total_bytes - p.gpu_total_bytes));
  const int64_t capacity =
      std::max<int64_t>(1, static_cast<int64_t>(d.usable_gpu_bytes) - p.gpu_context_bytes);
  const std::vector<int64_t> reserved =
      ReservedCurve(g, p.gpu_capacity_bytes > 0 ? capacity : 0);
  d.memory.reserve(p.memory.gpu_curve.size());
  for (const MemoryTimeline::Point& pt : p.memory.gpu_curve) {
    MemorySample m;
    m.task = pt.task;
    m.time_s = pt.task >= 0 && pt.task < static_cast<TaskId>(d.tasks.size())
                   ? d.tasks[static_cast<size_t>(pt.task)].start_s
                   : 0;
    m.allocated_bytes = std::max(pt.after_start, pt.after_end);
    m.reserved_bytes = pt.task >= 0 && pt.task < static_cast<TaskId>(reserved.size())
                           ? std::max(reserved[static_cast<size_t>(pt.task)], m.allocated_bytes)
                           : m.allocated_bytes;
    d.memory.push_back(m);
  }
  const MemoryPeak& peak = p.memory.peak[static_cast<int>(MemSpace::kGpu)];
  d.peak_task = peak.task;
  d.peak_time_s = peak.task >= 0 && peak.task < static_cast<TaskId>(d.tasks.size())
                      ? d.tasks[static_cast<size_t>(peak.task)].start_s
                      : 0;
  p.graph = StepGraph();
  p.schedule = Schedule();
  p.memory = MemoryTimeline();
  p.durations.clear();
  d.prediction = std::move(p);
  return d;
}

}  // namespace dsplan
