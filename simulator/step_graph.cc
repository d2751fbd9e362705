#include "simulator/step_graph.h"

#include <cassert>
#include <limits>

#include "core/checked_math.h"

#include <fmt/format.h>

#include "simulator/workload.h"

namespace dsplan {

const char* ResourceName(Resource r) {
  switch (r) {
    case Resource::kCompute: return "compute";
    case Resource::kComm: return "comm";
    case Resource::kH2D: return "h2d";
    case Resource::kD2H: return "d2h";
    case Resource::kCpu: return "cpu";
    case Resource::kNvme: return "nvme";
  }
  return "?";
}

const char* TaskKindName(TaskKind k) {
  switch (k) {
    case TaskKind::kForward: return "forward";
    case TaskKind::kRecompute: return "recompute";
    case TaskKind::kBackward: return "backward";
    case TaskKind::kGradCopy: return "grad_copy";
    case TaskKind::kAllReduce: return "all_reduce";
    case TaskKind::kReduceScatter: return "reduce_scatter";
    case TaskKind::kAllGather: return "all_gather";
    case TaskKind::kCopyD2H: return "copy_d2h";
    case TaskKind::kCopyH2D: return "copy_h2d";
    case TaskKind::kGpuOptimizer: return "gpu_optimizer";
    case TaskKind::kCpuOptimizer: return "cpu_optimizer";
    case TaskKind::kNvmeRead: return "nvme_read";
    case TaskKind::kNvmeWrite: return "nvme_write";
  }
  return "?";
}

bool IsCollective(TaskKind k) {
  return k == TaskKind::kAllReduce || k == TaskKind::kReduceScatter || k == TaskKind::kAllGather;
}

Collective CollectiveOf(TaskKind k) {
  switch (k) {
    case TaskKind::kReduceScatter: return Collective::kReduceScatter;
    case TaskKind::kAllGather: return Collective::kAllGather;
    default: return Collective::kAllReduce;
  }
}

const char* MemSpaceName(MemSpace s) {
  switch (s) {
    case MemSpace::kGpu: return "gpu";
    case MemSpace::kPinnedHost: return "pinned host";
    case MemSpace::kPageableHost: return "pageable host";
    case MemSpace::kNvme: return "nvme";
  }
  return "?";
}

const char* MemCategoryName(MemCategory c) {
  switch (c) {
    case MemCategory::kParams16: return "16-bit params";
    case MemCategory::kGatheredParams: return "gathered params";
    case MemCategory::kGradients: return "gradients";
    case MemCategory::kMaster: return "fp32 master";
    case MemCategory::kOptimizerStates: return "optimizer states";
    case MemCategory::kCommBuffers: return "comm buffers";
    case MemCategory::kActivations: return "activations";
    case MemCategory::kTemporaries: return "temporaries";
    case MemCategory::kContext: return "CUDA context + workspaces";
    case MemCategory::kAllocatorOverhead: return "allocator overhead";
  }
  return "?";
}

const char* MemCategoryKey(MemCategory c) {
  switch (c) {
    case MemCategory::kParams16: return "params_16bit";
    case MemCategory::kGatheredParams: return "gathered_params";
    case MemCategory::kGradients: return "gradients";
    case MemCategory::kMaster: return "fp32_master";
    case MemCategory::kOptimizerStates: return "optimizer_states";
    case MemCategory::kCommBuffers: return "comm_buffers";
    case MemCategory::kActivations: return "activations";
    case MemCategory::kTemporaries: return "temporaries";
    case MemCategory::kContext: return "cuda_context";
    case MemCategory::kAllocatorOverhead: return "allocator_overhead";
  }
  return "?";
}

void EffectList::PushToHeap(const MemEffect& e) {
  if (size_ == kInline) heap_.assign(inline_.begin(), inline_.end());
  heap_.push_back(e);
  ++size_;
}

TaskId StepGraph::Append(const Task& task, std::initializer_list<TaskId> deps,
                         const MemEffect* effects_begin, const MemEffect* effects_end) {
  // The task is copied once, into place, and its few effects appended one by one (a search
  // builds thousands of graphs of hundreds of tasks: a range insert per task cost more).
  const TaskId id = static_cast<TaskId>(tasks_.size());
  tasks_.push_back(task);
  Task& t = tasks_.back();
  t.deps_begin = static_cast<uint32_t>(deps_.size());
  t.deps_count = 0;
  for (TaskId d : deps) {
    if (d < 0) continue;  // "no dependency" placeholders
    assert(d < id);
    deps_.push_back(d);
    ++t.deps_count;
  }
  t.mem_begin = static_cast<uint32_t>(effects_.size());
  t.mem_count = static_cast<uint32_t>(effects_end - effects_begin);
  for (const MemEffect* e = effects_begin; e != effects_end; ++e) effects_.push_back(*e);
  return id;
}

TaskId StepGraph::Add(const Task& task, std::initializer_list<TaskId> deps,
                      std::initializer_list<MemEffect> effects) {
  return Append(task, deps, effects.begin(), effects.end());
}

TaskId StepGraph::Add(const Task& task, std::initializer_list<TaskId> deps,
                      const EffectList& effects) {
  return Append(task, deps, effects.begin(), effects.end());
}

TaskId StepGraph::Add(const Task& task, const std::vector<TaskId>& deps,
                      const std::vector<MemEffect>& effects) {
  const TaskId id = Add(task, {}, {});
  for (TaskId d : deps) AddDep(d);
  for (const MemEffect& e : effects) AddEffect(e);
  return id;
}

void StepGraph::AddDep(TaskId dep) {
  assert(!tasks_.empty());
  if (dep < 0) return;
  Task& t = tasks_.back();
  assert(dep < static_cast<TaskId>(tasks_.size()) - 1);
  // Dependencies of the last task are contiguous at the end of deps_ (Add appends them last).
  assert(t.deps_begin + t.deps_count == deps_.size());
  deps_.push_back(dep);
  ++t.deps_count;
}

void StepGraph::AddEffect(const MemEffect& effect) {
  assert(!tasks_.empty());
  Task& t = tasks_.back();
  assert(t.mem_begin + t.mem_count == effects_.size());
  effects_.push_back(effect);
  ++t.mem_count;
}

void StepGraph::Reserve(size_t tasks) {
  tasks_.reserve(tasks);
  deps_.reserve(tasks * 2);
  effects_.reserve(tasks * 2);
}

void StepGraph::Clear() {
  tasks_.clear();
  deps_.clear();
  effects_.clear();
  initial = {};
  lazy_gpu_states.clear();
  pinned_rounding_bytes = 0;
  repeat = {};
}

int64_t StepGraph::unrolled_size() const {
  if (!repeat.active()) return size();
  const auto extra = CheckedMul(repeat.count - 1, repeat.size());
  const auto total = extra ? CheckedAdd(*extra, size()) : std::nullopt;
  return total.value_or(std::numeric_limits<int64_t>::max());
}

Status StepGraph::CheckRepeat() const {
  if (!repeat.active()) return Status();
  const TaskId n = repeat.size();
  if (repeat.begin - n < 0 || repeat.end > size()) {
    return Status::Internal("StepGraph: the repeated block is not inside the graph");
  }
  for (TaskId i = 0; i < n; ++i) {
    const Task& a = tasks_[repeat.begin - n + i];
    const Task& b = tasks_[repeat.begin + i];
    if (a.kind != b.kind || a.resource != b.resource || a.layer != b.layer) {
      return Status::Internal(
          "StepGraph: the repeated block differs from the micro-step before it");
    }
  }
  return Status();
}

Result<StepGraph> Unroll(const StepGraph& graph, int64_t max_tasks) {
  const int64_t total = graph.unrolled_size();
  if (total > max_tasks) {
    return Status::InvalidArgument(fmt::format(
        "the unrolled step graph would hold {} tasks, more than the {} allowed", total,
        max_tasks));
  }
  if (!graph.repeat.active()) return graph;
  DSPLAN_RETURN_IF_ERROR(graph.CheckRepeat());
  const RepeatedBlock& r = graph.repeat;
  const TaskId n = r.size();
  const TaskId near = r.begin - n;  // dependencies from here on follow the copies
  StepGraph out;
  out.initial = graph.initial;
  out.lazy_gpu_states = graph.lazy_gpu_states;
  for (StepGraph::LazyState& l : out.lazy_gpu_states) {
    if (l.task >= r.end) l.task = static_cast<TaskId>(l.task + (r.count - 1) * n);
    else if (l.task >= r.begin) l.task = -1;  // not an optimizer task: the first one's start
  }
  out.pinned_rounding_bytes = graph.pinned_rounding_bytes;
  out.Reserve(static_cast<size_t>(total));
  auto copy_task = [&](TaskId id, int64_t shift, int64_t micro_shift) {
    Task t = graph.task(id);
    if (t.micro_step >= 0) t.micro_step = static_cast<int32_t>(t.micro_step + micro_shift);
    out.Add(t, {}, {});
    for (const TaskId* d = graph.deps_begin(id); d != graph.deps_end(id); ++d) {
      out.AddDep(*d >= near ? static_cast<TaskId>(*d + shift) : *d);
    }
    for (const MemEffect* e = graph.effects_begin(id); e != graph.effects_end(id); ++e) {
      out.AddEffect(*e);
    }
  };
  for (TaskId id = 0; id < r.begin; ++id) copy_task(id, 0, 0);
  for (int64_t k = 0; k < r.count; ++k) {
    for (TaskId id = r.begin; id < r.end; ++id) copy_task(id, k * n, k);
  }
  for (TaskId id = r.end; id < graph.size(); ++id) copy_task(id, (r.count - 1) * n, 0);
  return out;
}

std::string TaskName(const StepGraph& graph, const Workload& workload, TaskId id,
                     int64_t copy) {
  const Task& t = graph.task(id);
  std::string what;
  switch (t.kind) {
    case TaskKind::kForward: what = "fwd"; break;
    case TaskKind::kRecompute: what = "recompute"; break;
    case TaskKind::kBackward: what = "bwd"; break;
    case TaskKind::kGradCopy: what = "grad copy"; break;
    case TaskKind::kAllReduce: what = "all-reduce"; break;
    case TaskKind::kReduceScatter: what = "reduce-scatter"; break;
    case TaskKind::kAllGather: what = "all-gather"; break;
    case TaskKind::kCopyD2H: what = "D2H"; break;
    case TaskKind::kCopyH2D: what = "H2D"; break;
    case TaskKind::kGpuOptimizer: what = "optimizer (GPU)"; break;
    case TaskKind::kCpuOptimizer: what = "optimizer (CPU)"; break;
    case TaskKind::kNvmeRead: what = "NVMe read"; break;
    case TaskKind::kNvmeWrite: what = "NVMe write"; break;
  }
  std::string where;
  if (t.layer >= 0 && t.layer < static_cast<int>(workload.layers.size())) {
    where = " " + workload.layers[t.layer].name;
  } else if (t.kind != TaskKind::kForward && t.kind != TaskKind::kBackward) {
    where = fmt::format(" #{}", t.index);
  }
  if (t.micro_step >= 0) {
    return fmt::format("{}{} (micro-step {})", what, where, t.micro_step + copy);
  }
  return fmt::format("{}{} (step)", what, where);
}

}  // namespace dsplan
