#include "simulator/scheduler.h"

#include <algorithm>
#include <cassert>
#include <limits>
#include <map>

#include "core/checked_math.h"

namespace dsplan {
namespace {

constexpr double kNever = -std::numeric_limits<double>::infinity();
using KindSeconds = std::array<double, kNumTaskKinds>;

// The host waits for a dependency's end before issuing: copies, CPU work and NVMe swaps it
// depends on block it (a blocking copy_, CPU Adam on the Python thread, a synchronous swap).
bool HostWaitsOn(Resource r) {
  return r == Resource::kD2H || r == Resource::kH2D || r == Resource::kCpu || r == Resource::kNvme;
}

// Every task in id order. With |hp| (HostPipeline) the issuing host is a stage of its own for
// the tasks it lists; without, every task's duration covers its host work. The critical path
// walks two kinds of node: a task's end, and (for a pipelined task) the end of its host work;
// each node adds the time from the node that set its start, so the path sums to the makespan.
Schedule SchedulePlain(const StepGraph& graph, const std::vector<double>& durations,
                       const HostPipeline* hp, bool critical_path) {
  const int n = graph.size();
  Schedule s;
  s.start_s.resize(n);
  s.end_s.resize(n);
  struct Node {
    TaskId task = -1;
    bool host = false;  // the end of the task's host work, else the task's end
  };
  // For the critical path: which node set each task's end (and its host work's), and the task
  // that ends last (ties: the later id).
  std::vector<Node> pred(critical_path ? n : 0);
  std::vector<Node> host_pred(critical_path && hp != nullptr ? n : 0);
  std::vector<double> host_end(hp != nullptr ? n : 0);
  std::array<double, kNumResources> free_at{};
  std::array<TaskId, kNumResources> last_on{};
  last_on.fill(-1);
  double host_free = 0;
  TaskId host_last = -1;
  TaskId last = 0;
  for (TaskId id = 0; id < n; ++id) {
    const Task& t = graph.task(id);
    const int r = static_cast<int>(t.resource);
    double start = free_at[r];
    Node from{last_on[r], false};
    for (const TaskId* d = graph.deps_begin(id); d != graph.deps_end(id); ++d) {
      if (s.end_s[*d] > start) {
        start = s.end_s[*d];
        from = {*d, false};
      }
    }
    double end = start + durations[id];
    if (hp != nullptr && hp->host_s[id] >= 0) {
      double hs = host_free;
      Node hfrom{host_last, true};
      auto wait = [&](double at, Node who) {
        if (at > hs) {
          hs = at;
          hfrom = who;
        }
      };
      for (const TaskId* d = graph.deps_begin(id); d != graph.deps_end(id); ++d) {
        if (HostWaitsOn(graph.task(*d).resource)) wait(s.end_s[*d], {*d, false});
      }
      if (hp->waits_for[id] >= 0) wait(s.end_s[hp->waits_for[id]], {hp->waits_for[id], false});
      if (hp->sync[id]) {
        for (int q = 0; q < kNumResources; ++q) wait(free_at[q], {last_on[q], false});
      }
      if (hs > start) {
        start = hs;
        from = hfrom;
      }
      end = start + durations[id];
      host_end[id] = hs + hp->host_s[id];
      host_free = host_end[id];
      host_last = id;
      if (critical_path) host_pred[id] = hfrom;
      if (host_end[id] > end) {
        end = host_end[id];
        from = hfrom;
      }
    }
    s.start_s[id] = start;
    s.end_s[id] = end;
    free_at[r] = end;
    last_on[r] = id;
    s.busy_s[r] += durations[id];
    if (critical_path) pred[id] = from;
    s.makespan_s = std::max(s.makespan_s, end);
    if (end >= s.end_s[last]) last = id;
  }
  if (critical_path && n > 0) {
    Node at{last, false};
    double at_end = s.end_s[last];
    while (at.task >= 0) {
      const Node next = at.host ? host_pred[at.task] : pred[at.task];
      const double next_end =
          next.task < 0 ? 0.0 : (next.host ? host_end[next.task] : s.end_s[next.task]);
      s.critical_s[static_cast<int>(graph.task(at.task).kind)] += at_end - next_end;
      if (!at.host) s.critical_path.push_back(at.task);
      at = next;
      at_end = next_end;
    }
    std::reverse(s.critical_path.begin(), s.critical_path.end());
  }
  return s;
}

// --- compact graphs -----------------------------------------------------------------------
//
// The block reads, from before a copy, a few times: each resource's free time (the resources
// the block uses), the end of each task of the previous copy it depends on, and the end of
// each task before the previous micro-step it depends on (a constant). These are the
// "interface" x. A copy's task ends are max-plus linear in x (start = max of the resource's
// free time and the dependencies' ends; end = start + duration), and so is the interface it
// leaves to the next copy: x' = M (x) x. Copies 0 .. count - 3 are M^(count - 2), computed by
// squaring; copies count - 2 and count - 1 are scheduled task by task, so the tail reads the
// same times as in the unrolled graph. Each matrix entry carries the time by task kind along
// its longest path, for the critical path's split.

// One max-plus coefficient: the longest path's length and its time by kind.
struct Coef {
  double w = kNever;
  KindSeconds kinds{};
};
using Matrix = std::vector<std::vector<Coef>>;  // [out][in]

Matrix Identity(size_t s) {
  Matrix m(s, std::vector<Coef>(s));
  for (size_t i = 0; i < s; ++i) m[i][i].w = 0;
  return m;
}

// (a (x) b)[i][j] = max_k a[i][k] + b[k][j]: b first, then a.
Matrix Multiply(const Matrix& a, const Matrix& b) {
  const size_t s = a.size();
  Matrix c(s, std::vector<Coef>(s));
  for (size_t i = 0; i < s; ++i) {
    for (size_t k = 0; k < s; ++k) {
      if (a[i][k].w == kNever) continue;
      for (size_t j = 0; j < s; ++j) {
        if (b[k][j].w == kNever) continue;
        const double w = a[i][k].w + b[k][j].w;
        if (w > c[i][j].w) {
          c[i][j].w = w;
          for (int q = 0; q < kNumTaskKinds; ++q) c[i][j].kinds[q] = a[i][k].kinds[q] + b[k][j].kinds[q];
        }
      }
    }
  }
  return c;
}

Matrix Power(Matrix m, int64_t e) {
  Matrix r = Identity(m.size());
  while (e > 0) {
    if (e & 1) r = Multiply(m, r);
    e >>= 1;
    if (e > 0) m = Multiply(m, m);
  }
  return r;
}

// Where a start came from, for the critical path.
enum class Region : uint8_t { kNone, kPrefix, kSecondLast, kLast, kTail, kInterface };
struct Ref {
  Region region = Region::kNone;
  int32_t id = -1;  // compact id (prefix, tail), block offset (copies), interface component
};

struct Interface {
  enum Type : uint8_t { kResource, kPrevious, kConstant };
  struct Comp {
    Type type;
    int32_t id;  // resource, block offset of the previous copy's task, or compact id
  };
  std::vector<Comp> comps;
  std::array<int, kNumResources> resource{};  // component, or -1 when the block does not use it
  std::map<int32_t, int> previous;            // block offset -> component
  std::map<int32_t, int> constant;            // compact id -> component
};

Interface FindInterface(const StepGraph& g) {
  const RepeatedBlock& r = g.repeat;
  const TaskId near = r.begin - r.size();
  Interface f;
  f.resource.fill(-1);
  for (TaskId id = r.begin; id < r.end; ++id) {
    const int res = static_cast<int>(g.task(id).resource);
    if (f.resource[res] < 0) {
      f.resource[res] = static_cast<int>(f.comps.size());
      f.comps.push_back({Interface::kResource, res});
    }
    for (const TaskId* d = g.deps_begin(id); d != g.deps_end(id); ++d) {
      if (*d >= r.begin) continue;
      if (*d >= near) {
        if (f.previous.emplace(*d - near, static_cast<int>(f.comps.size())).second) {
          f.comps.push_back({Interface::kPrevious, *d - near});
        }
      } else if (f.constant.emplace(*d, static_cast<int>(f.comps.size())).second) {
        f.comps.push_back({Interface::kConstant, *d});
      }
    }
  }
  return f;
}

// The block's map M: each task's end as a max-plus form over the interface, in the scheduler's
// order of preference (the resource's previous task, then dependencies in order; a later one
// replaces an earlier one only when strictly longer).
Matrix BlockMatrix(const StepGraph& g, const std::vector<double>& durations, const Interface& f) {
  const RepeatedBlock& r = g.repeat;
  const TaskId near = r.begin - r.size();
  const size_t s = f.comps.size();
  using Form = std::vector<Coef>;
  auto unit = [s](int comp) {
    Form x(s);
    x[comp].w = 0;
    return x;
  };
  std::vector<Form> end(r.size());
  std::array<Form, kNumResources> free_form;
  for (int res = 0; res < kNumResources; ++res) {
    if (f.resource[res] >= 0) free_form[res] = unit(f.resource[res]);
  }
  for (TaskId id = r.begin; id < r.end; ++id) {
    const Task& t = g.task(id);
    const int res = static_cast<int>(t.resource);
    Form x = free_form[res];
    auto take = [&x](const Form& y) {
      for (size_t j = 0; j < x.size(); ++j) {
        if (y[j].w > x[j].w) x[j] = y[j];
      }
    };
    for (const TaskId* d = g.deps_begin(id); d != g.deps_end(id); ++d) {
      if (*d >= r.begin) {
        take(end[*d - r.begin]);
      } else if (*d >= near) {
        take(unit(f.previous.at(*d - near)));
      } else {
        take(unit(f.constant.at(*d)));
      }
    }
    const double dur = durations[id];
    for (Coef& c : x) {
      if (c.w == kNever) continue;
      c.w += dur;
      c.kinds[static_cast<int>(t.kind)] += dur;
    }
    free_form[res] = x;
    end[id - r.begin] = std::move(x);
  }
  Matrix m(s);
  for (size_t j = 0; j < s; ++j) {
    const Interface::Comp& c = f.comps[j];
    switch (c.type) {
      case Interface::kResource: m[j] = free_form[c.id]; break;
      case Interface::kPrevious: m[j] = end[c.id]; break;
      case Interface::kConstant: m[j] = unit(static_cast<int>(j)); break;
    }
  }
  return m;
}

Schedule ScheduleCompact(const StepGraph& g, const std::vector<double>& durations,
                         bool critical_path) {
  const RepeatedBlock& r = g.repeat;
  const TaskId n = r.size();
  const TaskId near = r.begin - n;
  const int total = g.size();
  Schedule s;
  s.start_s.resize(total);
  s.end_s.resize(total);
  std::vector<Ref> pred(total);
  std::vector<double> second_start(n), second_end(n);
  std::vector<Ref> second_pred(n);

  std::array<double, kNumResources> free_at{};
  std::array<Ref, kNumResources> last_on{};
  // Schedules one task whose dependencies' ends and origins come from |dep|.
  auto run = [&](TaskId id, auto&& dep, double* start_out, double* end_out, Ref* pred_out,
                 Ref self) {
    const Task& t = g.task(id);
    const int res = static_cast<int>(t.resource);
    double start = free_at[res];
    Ref from = last_on[res];
    for (const TaskId* d = g.deps_begin(id); d != g.deps_end(id); ++d) {
      const auto [e, ref] = dep(*d);
      if (e > start) {
        start = e;
        from = ref;
      }
    }
    *start_out = start;
    *end_out = start + durations[id];
    *pred_out = from;
    free_at[res] = *end_out;
    last_on[res] = self;
  };

  // 1. Before the block: micro-steps 0 and 1 (and what precedes them).
  auto prefix_dep = [&](TaskId d) { return std::pair<double, Ref>{s.end_s[d], {Region::kPrefix, d}}; };
  for (TaskId id = 0; id < r.begin; ++id) {
    run(id, prefix_dep, &s.start_s[id], &s.end_s[id], &pred[id], {Region::kPrefix, id});
  }
  const std::array<double, kNumResources> free_before = free_at;
  const std::array<Ref, kNumResources> last_before = last_on;

  // 2. The interface entering copy 0, and entering copy count - 2 through M^(count - 2).
  const Interface f = FindInterface(g);
  const size_t comps = f.comps.size();
  std::vector<double> x0(comps);
  std::vector<Ref> x0_ref(comps);
  for (size_t j = 0; j < comps; ++j) {
    const Interface::Comp& c = f.comps[j];
    switch (c.type) {
      case Interface::kResource:
        x0[j] = free_before[c.id];
        x0_ref[j] = last_before[c.id];
        break;
      case Interface::kPrevious:
        x0[j] = s.end_s[near + c.id];
        x0_ref[j] = {Region::kPrefix, near + c.id};
        break;
      case Interface::kConstant:
        x0[j] = s.end_s[c.id];
        x0_ref[j] = {Region::kPrefix, c.id};
        break;
    }
  }
  const Matrix power = Power(BlockMatrix(g, durations, f), r.count - 2);
  std::vector<double> x(comps, kNever);
  std::vector<int> x_from(comps, -1);
  for (size_t j = 0; j < comps; ++j) {
    for (size_t i = 0; i < comps; ++i) {
      if (power[j][i].w == kNever) continue;
      const double v = power[j][i].w + x0[i];
      if (v > x[j]) {
        x[j] = v;
        x_from[j] = static_cast<int>(i);
      }
    }
  }

  // 3. Copy count - 2, entering with x; then copy count - 1.
  for (int res = 0; res < kNumResources; ++res) {
    if (f.resource[res] < 0) continue;
    free_at[res] = x[f.resource[res]];
    last_on[res] = {Region::kInterface, f.resource[res]};
  }
  auto second_dep = [&](TaskId d) -> std::pair<double, Ref> {
    if (d >= r.begin) return {second_end[d - r.begin], {Region::kSecondLast, d - r.begin}};
    if (d >= near) {
      const int c = f.previous.at(d - near);
      return {x[c], {Region::kInterface, c}};
    }
    return {s.end_s[d], {Region::kPrefix, d}};
  };
  for (TaskId id = r.begin; id < r.end; ++id) {
    const TaskId i = id - r.begin;
    run(id, second_dep, &second_start[i], &second_end[i], &second_pred[i], {Region::kSecondLast, i});
  }
  auto last_dep = [&](TaskId d) -> std::pair<double, Ref> {
    if (d >= r.begin) return {s.end_s[d], {Region::kLast, d - r.begin}};
    if (d >= near) return {second_end[d - near], {Region::kSecondLast, d - near}};
    return {s.end_s[d], {Region::kPrefix, d}};
  };
  for (TaskId id = r.begin; id < r.end; ++id) {
    run(id, last_dep, &s.start_s[id], &s.end_s[id], &pred[id], {Region::kLast, id - r.begin});
  }

  // 4. After the block: the last micro-step and the optimizer step.
  auto tail_dep = [&](TaskId d) -> std::pair<double, Ref> {
    if (d >= r.end) return {s.end_s[d], {Region::kTail, d}};
    if (d >= r.begin) return {s.end_s[d], {Region::kLast, d - r.begin}};
    if (d >= near) return {second_end[d - near], {Region::kSecondLast, d - near}};
    return {s.end_s[d], {Region::kPrefix, d}};
  };
  for (TaskId id = r.end; id < total; ++id) {
    run(id, tail_dep, &s.start_s[id], &s.end_s[id], &pred[id], {Region::kTail, id});
  }

  // Busy time: every copy once.
  std::array<double, kNumResources> block_busy{};
  for (TaskId id = 0; id < total; ++id) {
    const int res = static_cast<int>(g.task(id).resource);
    if (id >= r.begin && id < r.end) {
      block_busy[res] += durations[id];
    } else {
      s.busy_s[res] += durations[id];
    }
  }
  for (int res = 0; res < kNumResources; ++res) {
    s.busy_s[res] += block_busy[res] * static_cast<double>(r.count);
  }

  // The last task to end (ties: the later one in the unrolled order: prefix, copies, tail;
  // a task of an earlier copy never ends after the same task of the last copy, which follows
  // it on the same resource).
  Ref last;
  double last_end = kNever;
  auto consider = [&](double e, Ref ref) {
    if (e >= last_end) {
      last_end = e;
      last = ref;
    }
  };
  for (TaskId id = 0; id < r.begin; ++id) consider(s.end_s[id], {Region::kPrefix, id});
  for (TaskId id = r.begin; id < r.end; ++id) consider(s.end_s[id], {Region::kLast, id - r.begin});
  for (TaskId id = r.end; id < total; ++id) consider(s.end_s[id], {Region::kTail, id});
  s.makespan_s = std::max(0.0, last_end);

  if (critical_path) {
    // Walk back; the copies before count - 2 contribute their matrix entry's split.
    Ref at = last;
    for (int64_t guard = 0; at.region != Region::kNone && guard <= int64_t{4} * total + 8; ++guard) {
      switch (at.region) {
        case Region::kPrefix:
        case Region::kTail:
          s.critical_s[static_cast<int>(g.task(at.id).kind)] += durations[at.id];
          at = pred[at.id];
          break;
        case Region::kLast:
          s.critical_s[static_cast<int>(g.task(r.begin + at.id).kind)] += durations[r.begin + at.id];
          at = pred[r.begin + at.id];
          break;
        case Region::kSecondLast:
          s.critical_s[static_cast<int>(g.task(r.begin + at.id).kind)] += durations[r.begin + at.id];
          at = second_pred[at.id];
          break;
        case Region::kInterface: {
          const int i = x_from[at.id];
          if (i < 0) {
            at = {};
            break;
          }
          const KindSeconds& k = power[at.id][i].kinds;
          for (int q = 0; q < kNumTaskKinds; ++q) s.critical_s[q] += k[q];
          at = x0_ref[i];
          break;
        }
        case Region::kNone: break;
      }
    }
  }
  return s;
}

}  // namespace

Schedule ScheduleGraph(const StepGraph& graph, const std::vector<double>& durations,
                       const HostPipeline* host, bool critical_path) {
  if (host == nullptr) return ScheduleGraph(graph, durations, critical_path);
  assert(durations.size() == static_cast<size_t>(graph.size()));
  assert(host->host_s.size() == durations.size() && host->sync.size() == durations.size() &&
         host->waits_for.size() == durations.size());
  assert(!graph.repeat.active());
  return SchedulePlain(graph, durations, host, critical_path);
}

Schedule ScheduleGraph(const StepGraph& graph, const std::vector<double>& durations,
                       bool critical_path) {
  assert(durations.size() == static_cast<size_t>(graph.size()));
  if (!graph.repeat.active() || !graph.CheckRepeat().ok()) {
    return SchedulePlain(graph, durations, nullptr, critical_path);
  }
  return ScheduleCompact(graph, durations, critical_path);
}

namespace {

// Applies task |id|'s effects to |cur| and |total|, recording peaks as copy |copy|; appends
// its GPU effects to |gpu_order| unless null. Inlined into ComputeMemory's loop (a call per
// task, with its state in memory, cost about 1 us of a t5-3b simulation).
[[gnu::always_inline]] inline void ApplyEffects(
    const StepGraph& graph, TaskId id, int64_t copy, std::array<CategoryBytes, kNumMemSpaces>& cur,
    std::array<int64_t, kNumMemSpaces>& total, MemoryTimeline& m, bool record_curve,
    GpuEffectOrder* gpu_order) {
  const MemEffect* b = graph.effects_begin(id);
  const MemEffect* e = graph.effects_end(id);
  if (gpu_order != nullptr) {
    gpu_order->first.push_back(static_cast<int>(gpu_order->effects.size()));
  }
  // Effects apply in their listed order (start effects, then end effects); the peak is checked
  // after every allocation, so a task's transient allocations and frees sequence correctly.
  bool any_at_end = false;
  // Inlined (GCC called it per effect).
  auto apply = [&](const MemEffect& x) __attribute__((always_inline)) {
    if (gpu_order != nullptr && x.space == MemSpace::kGpu && x.bytes != 0) {
      gpu_order->effects.push_back(x);
    }
    const int sp = static_cast<int>(x.space);
    cur[sp][static_cast<int>(x.category)] += x.bytes;
    total[sp] += x.bytes;
    if (x.bytes > 0 && total[sp] > m.peak[sp].bytes) {
      m.peak[sp].bytes = total[sp];
      m.peak[sp].task = id;
      m.peak[sp].copy = copy;
      m.peak[sp].at_end = x.at_end;
      m.peak[sp].breakdown = cur[sp];
    }
  };
  for (const MemEffect* x = b; x != e; ++x) {
    if (x->at_end) {
      any_at_end = true;  // applied below, after every start effect (most tasks have none)
    } else {
      apply(*x);
    }
  }
  const int64_t after_start = total[0];
  if (any_at_end) {
    for (const MemEffect* x = b; x != e; ++x) {
      if (x->at_end) apply(*x);
    }
  }
  if (record_curve) m.gpu_curve.push_back({id, after_start, total[0]});
}

int64_t SaturatingMulAdd(int64_t base, int64_t times, int64_t delta) {
  const auto p = CheckedMul(times, delta);
  const auto s = p ? CheckedAdd(base, *p) : std::nullopt;
  if (s) return *s;
  return (delta > 0) ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
}

}  // namespace

MemoryTimeline ComputeMemory(const StepGraph& graph, bool record_curve,
                             GpuEffectOrder* gpu_order) {
  MemoryTimeline m;
  if (gpu_order != nullptr) {
    gpu_order->effects.clear();
    gpu_order->first.clear();
  }
  std::array<CategoryBytes, kNumMemSpaces> cur = graph.initial;
  std::array<int64_t, kNumMemSpaces> total{};
  for (int sp = 0; sp < kNumMemSpaces; ++sp) {
    for (int64_t b : cur[sp]) total[sp] += b;
    m.peak[sp].bytes = total[sp];
    m.peak[sp].breakdown = cur[sp];
  }
  const int n = graph.size();
  if (record_curve) m.gpu_curve.reserve(n);
  const RepeatedBlock& r = graph.repeat;
  const bool compact = r.active() && graph.CheckRepeat().ok();
  for (TaskId id = 0; id < n; ++id) {
    if (compact && id == r.begin) {
      const std::array<CategoryBytes, kNumMemSpaces> before = cur;
      for (TaskId b = r.begin; b < r.end; ++b) {
        ApplyEffects(graph, b, 0, cur, total, m, record_curve, gpu_order);
      }
      if (cur != before) {
        // Not memory-neutral (BuildStepGraph never builds this): the copies between the first
        // and the last add the block's net bytes each; the last copy is walked again.
        for (int sp = 0; sp < kNumMemSpaces; ++sp) {
          total[sp] = 0;
          for (int c = 0; c < kNumMemCategories; ++c) {
            cur[sp][c] = SaturatingMulAdd(cur[sp][c], r.count - 2, cur[sp][c] - before[sp][c]);
            total[sp] += cur[sp][c];
          }
        }
        for (TaskId b = r.begin; b < r.end; ++b) {
          ApplyEffects(graph, b, r.count - 1, cur, total, m, record_curve, nullptr);
        }
      }
      id = r.end - 1;
      continue;
    }
    ApplyEffects(graph, id, 0, cur, total, m, record_curve, gpu_order);
  }
  if (gpu_order != nullptr) {
    gpu_order->first.push_back(static_cast<int>(gpu_order->effects.size()));
  }
  m.final_bytes = total;
  return m;
}

}  // namespace dsplan
