#include "runtime/reference_trainers/host_validation.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace dsplan {
namespace {

// Partitioned runs sum the same gradients in another order. Adam divides each gradient by its
// own magnitude, so for elements whose true gradient is zero or nearly (the attention key bias:
// softmax is shift-invariant) it turns rounding residues into updates of up to lr: those
// elements differ whatever the plan. Hence a fraction, not every element:
// fp32: at most 1 % of the elements beyond 1e-5 (~1 % of one step at lr 1e-3), none beyond
// 4 x lr; bf16: at most 1 % beyond one bf16 ulp + 1e-4, none by more than 4 x lr.
constexpr double kFp32Tolerance = 1e-5;
constexpr double kFractionBeyond = 0.01;
// Summation-order differences then compound through training (a chaotic system): after tens of
// steps the two runs drift apart element by element although both train correctly. Parameters
// are compared after this step (or the last, if earlier); the loss of every step is compared.
constexpr int kParamsCompareStep = 3;
// Every step's mean loss against the reference's, relative to the first step's loss: fp32, bf16.
constexpr double kFp32LossTolerance = 1e-3;
constexpr double kBf16LossTolerance = 1e-2;

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
  ref.micro_batch = plan.train_batch();  // checked (ValidatePlan bounds it)
  ref.grad_accum = 1;
  v.reference_plan = ref;
  RunShape ro = w.shape;
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
  const bool fp32 = plan.precision == Precision::kFp32;
  const auto allowed = [&](double ref) {
    return fp32 ? kFp32Tolerance : std::ldexp(std::fabs(ref), -7) + 1e-4;
  };
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
      const double tol = allowed(b[i]);
      const double excess = d - tol;
      if (!(excess <= v.excess_beyond_ulp)) v.excess_beyond_ulp = std::isnan(excess) ? HUGE_VAL : excess;
      beyond += !(d <= tol);
      ++n;
    }
  }
  for (const std::vector<double>* losses : {&v.run.losses, &v.reference.losses}) {
    for (double l : *losses) v.non_finite += !std::isfinite(l);
  }
  if (v.run.losses.size() != v.reference.losses.size()) {
    return Status::Internal("host validation: the two runs trained different step counts");
  }
  // Relative to the first step's loss (the task's scale): a loss that trains towards zero makes
  // a relative difference per step meaningless.
  const double scale = v.reference.losses.empty() ? 1.0 : std::max(std::fabs(v.reference.losses[0]), 1e-12);
  for (size_t i = 0; i < v.run.losses.size(); ++i) {
    const double a = v.run.losses[i], b = v.reference.losses[i];
    const double rel = std::fabs(a - b) / scale;
    if (!(rel <= v.max_loss_rel_diff)) v.max_loss_rel_diff = std::isnan(rel) ? HUGE_VAL : rel;
  }
  const double loss_tol = fp32 ? kFp32LossTolerance : kBf16LossTolerance;
  v.fraction_beyond_ulp = n ? static_cast<double>(beyond) / n : 0;
  const double lr = plan.optimizer_params.lr.value_or(options.default_lr);
  v.tolerance = fmt::format(
      "after step {}: at most {:.0f}% of the elements beyond {}, and none by more than 4 x lr = "
      "{:g}; every step's loss within {:g} of the first step's",
      v.run.params_step, 100 * kFractionBeyond,
      fp32 ? fmt::format("{:g}", kFp32Tolerance) : std::string("one bf16 ulp + 1e-4"), 4 * lr,
      loss_tol);
  // Written so that NaN fails every comparison.
  v.params_match = v.non_finite == 0 && v.fraction_beyond_ulp <= kFractionBeyond &&
                   v.excess_beyond_ulp <= 4 * lr && v.max_loss_rel_diff <= loss_tol;
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
                                      const HostRunOptions& run_options) {
  HostRunOptions options = run_options;
  options.params_after_step = std::min(run_options.steps, kParamsCompareStep);
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
  out += fmt::format("# parameters after step {} against unpartitioned training on one rank ({} "
                     "elements): max |difference| {:.3g}; {:.3f}% beyond the element tolerance; "
                     "losses within {:.2g} of the first step's\n",
                     v.run.params_step, v.run.numel, v.max_abs_diff,
                     100 * v.fraction_beyond_ulp, v.max_loss_rel_diff);
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
