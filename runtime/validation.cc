#include "runtime/validation.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/text.h"
#include "core/units.h"
#include "simulator/prediction_report.h"

namespace dsplan {
namespace {

constexpr std::array<const char*, kNumTaskClasses> kClassNames = {
    "forward GEMMs",    "forward attention", "forward memory-bound",
    "backward GEMMs",   "backward attention", "backward memory-bound",
    "recompute",        "gradient copies",   "GPU optimizer",
    "all-reduce",       "reduce-scatter",    "all-gather",
    "D2H copies",       "H2D copies",        "CPU Adam",
    "NVMe read",        "NVMe write",
};

int Idx(TaskClass c) { return static_cast<int>(c); }

// The class of a task that is not a layer's forward or backward.
TaskClass ClassOfKind(TaskKind k) {
  switch (k) {
    case TaskKind::kForward: return TaskClass::kForwardMemory;
    case TaskKind::kRecompute: return TaskClass::kRecompute;
    case TaskKind::kBackward: return TaskClass::kBackwardMemory;
    case TaskKind::kGradCopy: return TaskClass::kGradCopy;
    case TaskKind::kAllReduce: return TaskClass::kAllReduce;
    case TaskKind::kReduceScatter: return TaskClass::kReduceScatter;
    case TaskKind::kAllGather: return TaskClass::kAllGather;
    case TaskKind::kCopyD2H: return TaskClass::kCopyD2H;
    case TaskKind::kCopyH2D: return TaskClass::kCopyH2D;
    case TaskKind::kGpuOptimizer: return TaskClass::kGpuOptimizer;
    case TaskKind::kCpuOptimizer: return TaskClass::kCpuOptimizer;
    case TaskKind::kNvmeRead: return TaskClass::kNvmeRead;
    case TaskKind::kNvmeWrite: return TaskClass::kNvmeWrite;
  }
  return TaskClass::kGradCopy;
}

void AddTo(ClassSeconds& c, TaskClass k, double s) {
  c.seconds[Idx(k)] += s;
  c.tasks[Idx(k)] += 1;
}


std::string Pct(double e) { return fmt::format("{:+.1f}%", 100 * e); }

// The ratio predicted / measured of |c| when both sides did enough work to trust it (0 else).
double Ratio(const ValidationReport& r, TaskClass c) {
  const double p = r.predicted.seconds[Idx(c)];
  const double m = r.measured.seconds[Idx(c)];
  if (p <= 1e-5 || m <= 1e-5) return 0;
  return p / m;
}
// Predicted / measured summed over |classes|; 0 when either side has under 10 us.
double RatioOf(const ValidationReport& r, std::initializer_list<TaskClass> classes) {
  double p = 0, m = 0;
  for (TaskClass c : classes) {
    p += r.predicted.seconds[Idx(c)];
    m += r.measured.seconds[Idx(c)];
  }
  if (p <= 1e-5 || m <= 1e-5) return 0;
  return p / m;
}
double Ratio2(const ValidationReport& r, TaskClass a, TaskClass b) { return RatioOf(r, {a, b}); }

}  // namespace

const char* TaskClassName(TaskClass c) { return kClassNames[Idx(c)]; }

double ValidationRow::Error() const {
  if (measured == 0) return predicted == 0 ? 0 : INFINITY;
  return (predicted - measured) / measured;
}

ClassSeconds PredictedClassSeconds(const Prediction& p, const Workload& w,
                                   const std::vector<LayerCost>& layer_costs) {
  ClassSeconds c;
  const StepGraph& g = p.graph;
  for (TaskId id = 0; id < g.size() && id < static_cast<int>(p.durations.size()); ++id) {
    const Task& t = g.task(id);
    const bool layer = t.layer >= 0 && t.layer < static_cast<int>(layer_costs.size());
    if (t.kind == TaskKind::kForward && layer) {
      const LayerCost& lc = layer_costs[t.layer];
      AddTo(c, TaskClass::kForwardGemm, lc.fwd_gemm_s);
      AddTo(c, TaskClass::kForwardAttention, lc.fwd_attention_s);
      AddTo(c, TaskClass::kForwardMemory, lc.fwd_memory_s);
    } else if (t.kind == TaskKind::kBackward && layer) {
      const LayerCost& lc = layer_costs[t.layer];
      AddTo(c, TaskClass::kBackwardGemm, lc.bwd_gemm_s);
      AddTo(c, TaskClass::kBackwardAttention, lc.bwd_attention_s);
      AddTo(c, TaskClass::kBackwardMemory, lc.bwd_memory_s);
    } else if (t.kind == TaskKind::kRecompute && layer) {
      const LayerCost& lc = layer_costs[t.layer];
      AddTo(c, TaskClass::kRecompute, lc.fwd_gemm_s + lc.fwd_attention_s + lc.fwd_memory_s);
    } else {
      AddTo(c, ClassOfKind(t.kind), p.durations[id]);
    }
  }
  (void)w;
  return c;
}

ClassSeconds MeasuredClassSeconds(const StepGraph& g, const Execution& e) {
  ClassSeconds c;
  const bool split = e.op_class.size() == static_cast<size_t>(g.size());
  for (TaskId id = 0; id < g.size() && id < static_cast<int>(e.end_s.size()); ++id) {
    const Task& t = g.task(id);
    const double dur = std::max(0.0, e.end_s[id] - e.start_s[id]);
    if (split && t.layer >= 0 && (t.kind == TaskKind::kForward || t.kind == TaskKind::kBackward)) {
      const OpClassSeconds& o = e.op_class[id];
      const bool fwd = t.kind == TaskKind::kForward;
      AddTo(c, fwd ? TaskClass::kForwardGemm : TaskClass::kBackwardGemm, o.gemm_s);
      AddTo(c, fwd ? TaskClass::kForwardAttention : TaskClass::kBackwardAttention, o.attention_s);
      AddTo(c, fwd ? TaskClass::kForwardMemory : TaskClass::kBackwardMemory, o.memory_s);
    } else if (split && t.layer >= 0 && t.kind == TaskKind::kRecompute) {
      const OpClassSeconds& o = e.op_class[id];
      AddTo(c, TaskClass::kRecompute, o.gemm_s + o.attention_s + o.memory_s);
    } else {
      AddTo(c, ClassOfKind(t.kind), dur);
    }
  }
  return c;
}

ValidationReport CompareExecution(const Prediction& p, const Workload& w,
                                  const std::vector<LayerCost>& layer_costs, const Execution& e,
                                  const ValidationThresholds& t) {
  ValidationReport r;
  r.predicted = PredictedClassSeconds(p, w, layer_costs);
  r.predicted_step_s = p.step_time_s;
  if (e.out_of_memory) {
    r.out_of_memory = true;
    const std::string where = e.oom_task >= 0 && e.oom_task < p.graph.size()
                                  ? TaskName(p.graph, w, e.oom_task)
                                  : "setup (model states)";
    r.oom_line = fmt::format(
        "OOM at {}: {} requested with {} allocated; predicted peak was {} ({})", where,
        FormatBytes(static_cast<double>(e.oom_request_bytes)),
        FormatBytes(static_cast<double>(e.oom_allocated_bytes)),
        FormatBytes(static_cast<double>(p.gpu_total_bytes)),
        p.fits ? "predicted to fit" : "predicted not to fit: " + p.reason);
    // Running out of memory agrees with a prediction that the plan does not fit.
    r.pass = !p.fits;
    r.verdict = r.pass ? "PASS: the plan ran out of memory, as predicted"
                       : "FAIL: the plan ran out of memory but was predicted to fit";
    return r;
  }
  r.measured = MeasuredClassSeconds(p.graph, e);
  r.measured_step_s = Median(e.step_s);
  r.rows.push_back({"step time", false, r.predicted_step_s, r.measured_step_s, true});
  for (int c = 0; c < kNumTaskClasses; ++c) {
    if (r.predicted.tasks[c] == 0 && r.measured.tasks[c] == 0) continue;
    if (r.predicted.seconds[c] == 0 && r.measured.seconds[c] == 0) continue;
    r.rows.push_back({kClassNames[c], false, r.predicted.seconds[c], r.measured.seconds[c], false});
  }
  const double measured_device =
      static_cast<double>(std::max<int64_t>(0, e.device_used_peak_bytes - e.scratch_bytes));
  r.rows.push_back({"peak allocated", true, static_cast<double>(p.gpu_peak_allocated_bytes),
                    static_cast<double>(e.peak_allocated_bytes), true});
  r.rows.push_back({"peak reserved", true, static_cast<double>(p.gpu_peak_reserved_bytes),
                    static_cast<double>(e.peak_reserved_bytes), false});
  r.rows.push_back({"context (outside allocator)", true, static_cast<double>(p.gpu_context_bytes),
                    static_cast<double>(e.context_bytes), false});
  r.rows.push_back({"device memory (driver)", true, static_cast<double>(p.gpu_total_bytes),
                    measured_device, true});

  std::vector<std::string> misses, hits;
  for (const ValidationRow& row : r.rows) {
    if (!row.judged) continue;
    const double limit = row.bytes ? t.memory : t.time;
    const double err = row.Error();
    const std::string s = fmt::format("{} {} (limit {:.0f}%)", row.quantity, Pct(err), 100 * limit);
    (std::abs(err) <= limit ? hits : misses).push_back(s);
  }
  r.pass = misses.empty();
  auto join = [](const std::vector<std::string>& v) {
    std::string out;
    for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + v[i];
    return out;
  };
  r.verdict = r.pass ? "PASS: " + join(hits) : "FAIL: " + join(misses);
  return r;
}

Result<HardwareProfile> CalibratedProfile(const HardwareProfile& base, const ValidationReport& r,
                                          const std::string& method) {
  if (r.out_of_memory) {
    return Status::InvalidArgument(
        "--calibrate needs a run that completed; this one ran out of memory");
  }
  HardwareProfile hw = base;
  hw.file.clear();
  hw.name = base.name + "-calibrated";
  hw.description = fmt::format("{} corrected by dsplan validate ({})", base.name, method);
  const Source measured{SourceKind::kMeasured, method};
  int corrected = 0;
  // GEMMs: predicted/measured > 1 means the profile's rates are too low. The forward's ratio
  // corrects the forward-layout rows (nt), the backward's the gradient layouts (nn, tn); a table
  // without layouts takes the ratio of both.
  const double gemm = Ratio2(r, TaskClass::kForwardGemm, TaskClass::kBackwardGemm);
  if (gemm > 0) {
    const double fwd = Ratio(r, TaskClass::kForwardGemm), bwd = Ratio(r, TaskClass::kBackwardGemm);
    bool layouts = false;
    for (const GemmPoint& pt : hw.gpu.gemm) layouts |= pt.layout != GemmLayout::kNT;
    for (GemmPoint& pt : hw.gpu.gemm) {
      const double k = !layouts ? gemm : pt.layout == GemmLayout::kNT ? (fwd > 0 ? fwd : gemm)
                                                                       : (bwd > 0 ? bwd : gemm);
      pt.flops_per_s *= k;
    }
    if (hw.gpu.gemm_efficiency.value > 0) {
      hw.gpu.gemm_efficiency = {std::min(1.0, hw.gpu.gemm_efficiency.value * gemm), measured};
    }
    hw.gpu.gemm_source = measured;
    ++corrected;
  }
  // Memory-bound kernels: the layers' elementwise ops, the gradient copies and the GPU
  // optimizer all run the streaming kernel; its per-launch curve (or, without one, the
  // efficiency) scales by the ratio.
  const double mem = RatioOf(r, {TaskClass::kForwardMemory, TaskClass::kBackwardMemory,
                                 TaskClass::kGradCopy, TaskClass::kGpuOptimizer});
  if (mem > 0 && !hw.gpu.streaming.empty()) {
    for (StreamPoint& pt : hw.gpu.streaming) pt.seconds /= mem;
    hw.gpu.streaming_source = measured;
    ++corrected;
  } else if (mem > 0 && hw.gpu.memory_bound_efficiency.value > 0) {
    hw.gpu.memory_bound_efficiency = {hw.gpu.memory_bound_efficiency.value * mem, measured};
    ++corrected;
  }
  // Attention: the run timed dsplan's own kernel, so only its table (the runtime stack's
  // pricing) is corrected, forward and backward apart. attention_efficiency describes PyTorch's
  // SDPA kernels, which this run did not time: it keeps its source.
  const double att_f = Ratio(r, TaskClass::kForwardAttention);
  const double att_b = Ratio(r, TaskClass::kBackwardAttention);
  if ((att_f > 0 || att_b > 0) && !hw.gpu.attention.empty()) {
    for (AttentionPoint& pt : hw.gpu.attention) {
      if (att_f > 0) pt.fwd_flops_per_s *= att_f;
      if (att_b > 0) pt.bwd_flops_per_s *= att_b;
    }
    hw.gpu.attention_source = measured;
    ++corrected;
  }
  auto scale_copy = [&](CopyCurve& c, double k) {
    for (BandwidthPoint& pt : c.points) pt.bytes_per_s *= k;
    c.bytes_per_s = {c.bytes_per_s.value * k, measured};
  };
  if (double k = Ratio(r, TaskClass::kCopyD2H); k > 0) {
    scale_copy(hw.links.d2h_pinned, k);
    scale_copy(hw.links.d2h_pageable, k);
    ++corrected;
  }
  if (double k = Ratio(r, TaskClass::kCopyH2D); k > 0) {
    scale_copy(hw.links.h2d_pinned, k);
    scale_copy(hw.links.h2d_pageable, k);
    ++corrected;
  }
  if (double k = Ratio(r, TaskClass::kCpuOptimizer); k > 0) {
    for (CpuAdamPoint& pt : hw.host.cpu_adam) pt.elements_per_s *= k;
    hw.host.cpu_adam_source = measured;
    ++corrected;
  }
  if (double k = Ratio(r, TaskClass::kNvmeRead); k > 0 && hw.nvme.read_bytes_per_s.value > 0) {
    hw.nvme.read_bytes_per_s = {hw.nvme.read_bytes_per_s.value * k, measured};
    ++corrected;
  }
  if (double k = Ratio(r, TaskClass::kNvmeWrite); k > 0 && hw.nvme.write_bytes_per_s.value > 0) {
    hw.nvme.write_bytes_per_s = {hw.nvme.write_bytes_per_s.value * k, measured};
    ++corrected;
  }
  for (TaskClass c : {TaskClass::kAllReduce, TaskClass::kReduceScatter, TaskClass::kAllGather}) {
    const double k = Ratio(r, c);
    if (k <= 0) continue;
    const Collective op = c == TaskClass::kAllReduce       ? Collective::kAllReduce
                          : c == TaskClass::kReduceScatter ? Collective::kReduceScatter
                                                           : Collective::kAllGather;
    for (CollectiveCurve& cc : hw.links.collectives) {
      if (cc.op != op || cc.inter_node) continue;
      for (BandwidthPoint& pt : cc.points) pt.bytes_per_s *= k;
      cc.busbw_bytes_per_s = {cc.busbw_bytes_per_s.value * k, measured};
      ++corrected;
    }
  }
  if (corrected == 0) {
    return Status::InvalidArgument(
        "--calibrate: this run measured no task class with enough work to correct the profile "
        "(each class needs at least 10 us predicted and measured)");
  }
  return hw;
}

nlohmann::json ValidationToJson(const ValidationReport& r, const Execution& e) {
  nlohmann::json rows = nlohmann::json::array();
  for (const ValidationRow& row : r.rows) {
    rows.push_back({{"quantity", row.quantity},
                    {"unit", row.bytes ? "bytes" : "s"},
                    {"predicted", row.predicted},
                    {"measured", row.measured},
                    {"error", std::isfinite(row.Error()) ? nlohmann::json(row.Error()) : nullptr},
                    {"judged", row.judged}});
  }
  nlohmann::json j = {{"pass", r.pass},
                      {"verdict", r.verdict},
                      {"out_of_memory", r.out_of_memory},
                      {"rows", rows},
                      {"step_s", e.step_s},
                      {"device",
                       {{"name", e.device_name},
                        {"driver", e.driver},
                        {"libraries", e.libraries},
                        {"attention_path", e.attention_path},
                        {"total_bytes", e.device_total_bytes},
                        {"world_size", e.world_size}}},
                      {"host_pinned_bytes", e.host_pinned_bytes},
                      {"host_pageable_bytes", e.host_pageable_bytes},
                      {"nvme_bytes", e.nvme_bytes},
                      {"scratch_bytes", e.scratch_bytes}};
  if (r.out_of_memory) j["oom"] = r.oom_line;
  return j;
}

std::string ValidationTable(const ValidationReport& r) {
  std::string out;
  if (r.out_of_memory) {
    out += r.oom_line + "\n";
    out += r.verdict + "\n";
    return out;
  }
  out += fmt::format("#  {:<28} {:>14} {:>14} {:>9}\n", "quantity", "predicted", "measured",
                     "error");
  for (const ValidationRow& row : r.rows) {
    const std::string p = row.bytes ? FormatBytes(row.predicted) : fmt::format("{:.4f} s", row.predicted);
    const std::string m = row.bytes ? FormatBytes(row.measured) : fmt::format("{:.4f} s", row.measured);
    const double err = row.Error();
    // A class with under 0.1 ms on either side has no meaningful ratio (launch noise).
    const bool tiny = !row.bytes && (row.predicted < 1e-4 || row.measured < 1e-4);
    out += fmt::format("   {:<28} {:>14} {:>14} {:>9}{}\n", row.quantity, p, m,
                       std::isfinite(err) && !tiny ? Pct(err) : "-", row.judged ? "  *" : "");
  }
  out += "#  (* judged; the task classes are busy time summed over the step, overlapped or not)\n";
  out += r.verdict + "\n";
  return out;
}

nlohmann::json ValidationTrace(const Prediction& p, const Workload& w, const Execution& e) {
  nlohmann::json trace = ChromeTrace(p, w);
  nlohmann::json& events = trace["traceEvents"];
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 0},
                    {"args", {{"name", "predicted"}}}});
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 1},
                    {"args", {{"name", "measured on " + e.device_name}}}});
  for (int res = 0; res < kNumResources; ++res) {
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", 1},
                      {"tid", res},
                      {"args", {{"name", ResourceName(static_cast<Resource>(res))}}}});
  }
  const StepGraph& g = p.graph;
  for (TaskId id = 0; id < g.size() && id < static_cast<int>(e.end_s.size()); ++id) {
    const double dur = e.end_s[id] - e.start_s[id];
    if (dur <= 0) continue;
    const Task& t = g.task(id);
    events.push_back({{"name", TaskName(g, w, id)},
                      {"cat", TaskKindName(t.kind)},
                      {"ph", "X"},
                      {"pid", 1},
                      {"tid", static_cast<int>(t.resource)},
                      {"ts", e.start_s[id] * 1e6},
                      {"dur", dur * 1e6},
                      {"args", {{"id", id}, {"bytes", t.bytes}}}});
  }
  return trace;
}

}  // namespace dsplan
