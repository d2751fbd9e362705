#include "runtime/host/host_validation.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace dsplan {
namespace {

// fp32: partitioned runs sum the same gradients in another order; Adam magnifies that rounding
// for near-zero gradients to at most ~1 % of one step (lr 1e-3): 1e-5.
constexpr double kFp32Tolerance = 1e-5;
// bf16: at most 1 % of the elements beyond one bf16 ulp + 1e-4, by at most 4 x lr.
constexpr double kBf16Fraction = 0.01;

bool IsModelState(MemCategory c) {
  return c == MemCategory::kParams16 || c == MemCategory::kGatheredParams ||
         c == MemCategory::kGradients || c == MemCategory::kMaster ||
         c == MemCategory::kOptimizerStates;
}

// Rank 0's part of ValidateOnHost: the reference run on this process and the comparisons.
Status CompareWithReference(const Workload& w, const Plan& plan, const StepGraph& graph,
                            const HostRunOptions& options, HostValidation& v) {
  Plan ref = plan;
  ref.zero = ZeroConfig{};
  ref.nodes = 1;
  ref.gpus_per_node = 1;
  ref.micro_batch = plan.micro_batch * plan.grad_accum * plan.world_size();
  ref.grad_accum = 1;
  v.reference_plan = ref;
  WorkloadOptions ro = w.options;
  ro.micro_batch = ref.micro_batch;
  DSPLAN_ASSIGN_OR_RETURN(Workload rw, BuildWorkload(w.spec, ro));
  HostRunOptions ro_run = options;
  ro_run.comm = nullptr;  // one rank, on this process
  DSPLAN_ASSIGN_OR_RETURN(v.reference, RunHostTraining(rw, ref, ro_run));
  if (v.run.params.size() != v.reference.params.size()) {
    return Status::Internal("host validation: the two runs trained different parameter lists");
  }
  // NaN-safe throughout: a NaN or infinite parameter or loss (training that diverged) is a
  // difference beyond every tolerance, never one that compares away (std::max(x, NaN) is x).
  int64_t n = 0, beyond = 0;
  for (size_t t = 0; t < v.run.params.size(); ++t) {
    const std::vector<float>& a = v.run.params[t];
    const std::vector<float>& b = v.reference.params[t];
    if (a.size() != b.size()) {
      return Status::Internal("host validation: the two runs trained different tensor sizes");
    }
    for (size_t i = 0; i < a.size(); ++i) {
      if (!std::isfinite(a[i]) || !std::isfinite(b[i])) ++v.non_finite;
      const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
      if (!(d <= v.max_abs_diff)) v.max_abs_diff = std::isnan(d) ? HUGE_VAL : d;
      const double ulp = std::ldexp(std::fabs(static_cast<double>(b[i])), -7);
      const double excess = d - ulp - 1e-4;
      if (!(excess <= v.excess_beyond_ulp)) v.excess_beyond_ulp = std::isnan(excess) ? HUGE_VAL : excess;
      beyond += !(d <= ulp + 1e-4);
      ++n;
    }
  }
  for (const std::vector<double>* losses : {&v.run.losses, &v.reference.losses}) {
    for (double l : *losses) v.non_finite += !std::isfinite(l);
  }
  v.fraction_beyond_ulp = n ? static_cast<double>(beyond) / n : 0;
  if (plan.precision == Precision::kFp32) {
    v.tolerance = fmt::format("max |difference| <= {:g}", kFp32Tolerance);
    v.params_match = v.non_finite == 0 && v.max_abs_diff <= kFp32Tolerance;
  } else {
    const double lr = plan.optimizer_params.lr.value_or(options.default_lr);
    v.tolerance = fmt::format(
        "at most {:.0f}% of the elements beyond one bf16 ulp + 1e-4, and none by more than "
        "4 x lr = {:g}",
        100 * kBf16Fraction, 4 * lr);
    v.params_match = v.non_finite == 0 && v.fraction_beyond_ulp <= kBf16Fraction &&
                     v.excess_beyond_ulp <= 4 * lr;
  }
  // Model states at rest: the largest rank against the graph (one rank class).
  v.memory_match = true;
  for (int s = 0; s < kNumMemSpaces; ++s) {
    for (int c = 0; c < kNumMemCategories; ++c) {
      if (!IsModelState(static_cast<MemCategory>(c))) continue;
      int64_t most = 0;
      for (const HostRankMemory& m : v.run.rank_memory) {
        most = std::max(most, m.at_last_step_start[s][c]);
      }
      const int64_t g = graph.initial[s][c];
      if (most == 0 && g == 0) continue;
      v.memory.push_back({static_cast<MemSpace>(s), static_cast<MemCategory>(c), most, g});
      if (most != g) v.memory_match = false;
    }
  }
  v.pass = v.params_match && v.memory_match;
  return Status();
}

}  // namespace

Result<HostValidation> ValidateOnHost(const Workload& w, const Plan& plan, const StepGraph& graph,
                                      const HostRunOptions& options) {
  HostValidation v;
  DSPLAN_ASSIGN_OR_RETURN(v.run, RunHostTraining(w, plan, options));
  Comm* const comm = options.comm;
  if (comm == nullptr) {
    DSPLAN_RETURN_IF_ERROR(CompareWithReference(w, plan, graph, options, v));
    return v;
  }
  // Under MPI rank 0 holds the gathered run: it compares, and every rank gets its verdict.
  Status s;
  if (comm->rank() == 0) s = CompareWithReference(w, plan, graph, options, v);
  DSPLAN_RETURN_IF_ERROR(BroadcastStatus(*comm, s, 0));
  std::string verdict = {static_cast<char>(v.params_match), static_cast<char>(v.memory_match),
                         static_cast<char>(v.pass)};
  comm->Broadcast(&verdict, 0);
  v.params_match = verdict.at(0) != 0;
  v.memory_match = verdict.at(1) != 0;
  v.pass = verdict.at(2) != 0;
  return v;
}

std::string HostValidationText(const HostValidation& v) {
  std::string out;
  if (!v.run.losses.empty()) {
    out += fmt::format("# loss      {:.4f} at step 1 -> {:.4f} at step {} (reference {:.4f} -> {:.4f})\n",
                       v.run.losses.front(), v.run.losses.back(), v.run.losses.size(),
                       v.reference.losses.front(), v.reference.losses.back());
  }
  out += fmt::format("# parameters against unpartitioned training on one rank ({} elements): max "
                     "|difference| {:.3g}; {:.3f}% beyond one bf16 ulp + 1e-4\n",
                     v.run.numel, v.max_abs_diff, 100 * v.fraction_beyond_ulp);
  if (v.non_finite > 0) {
    out += fmt::format("# {} parameter(s) or losses are NaN or infinite: training diverged\n",
                       v.non_finite);
  }
  out += fmt::format("#   tolerance: {} -> {}\n", v.tolerance, v.params_match ? "match" : "DIFFER");
  out += "# model states at rest per rank (largest rank), executor vs StepGraph:\n";
  out += fmt::format("#  {:<14} {:<20} {:>14} {:>14}\n", "space", "category", "executor B",
                     "graph B");
  for (const HostMemoryRow& r : v.memory) {
    out += fmt::format("   {:<14} {:<20} {:>14} {:>14}{}\n", MemSpaceName(r.space),
                       MemCategoryKey(r.category), r.executor, r.graph,
                       r.executor == r.graph ? "" : "  differs");
  }
  out += v.pass ? "PASS: parameters match unpartitioned training and model states match the graph\n"
                : fmt::format("FAIL:{}{}\n", v.params_match ? "" : " parameters differ beyond tolerance;",
                              v.memory_match ? "" : " model-state bytes differ from the graph");
  return out;
}

}  // namespace dsplan
