// Full simulations per second (issue 15's goal: >= 20,000 per core for t5-3b on 4 GPUs, stage 3
// with offload). Each iteration is one Simulate(): build the StepGraph, price every task, schedule,
// walk the memory timeline and replay the caching allocator. "ReuseContext" reuses one
// SimulationContext (the workload's layer costs and parameter facts); "SimulatorSimulate" goes
// through a Simulator, which finds that context in its cache, as the planner and the commands
// do; "WithContext" also builds the context each time. The workload itself is built once (see
// workload_bench for its cost). Run: build/bench/simulate_bench
#include <benchmark/benchmark.h>

#include <optional>
#include <string>

#include "core/hardware_profile.h"
#include "core/model_catalog.h"
#include "core/plan.h"
#include "simulator/simulate.h"
#include "simulator/workload.h"

namespace dsplan {
namespace {

struct Case {
  const char* model;
  int gpus;
  int stage;
  OffloadDevice offload_optimizer;
  OffloadDevice offload_param;
  int64_t micro_batch;
  int64_t seq_len;
};

// t5-3b, 4 GPUs, stage 3, offload_optimizer + offload_param cpu, micro-batch 4, 512 + 128.
constexpr Case kT5Stage3Offload = {"t5-3b", 4, 3, OffloadDevice::kCpu, OffloadDevice::kCpu, 4, 512};
// gpt2-xl, 4 GPUs, stage 2, micro-batch 4, 1024 tokens.
constexpr Case kGpt2XlStage2 = {"gpt2-xl", 4, 2, OffloadDevice::kNone, OffloadDevice::kNone, 4,
                                1024};

struct Setup {
  ModelSpec spec;
  Workload workload;
  HardwareProfile profile;
  Plan plan;
};

// Builds the workload, profile and plan of |c|; nullopt (with the error in |err|) on failure.
std::optional<Setup> Prepare(const Case& c, std::string* err) {
  auto spec = LoadModel(c.model, DSPLAN_BENCH_DATA_DIR);
  if (!spec.ok()) {
    *err = spec.status().ToString();
    return std::nullopt;
  }
  Plan p;
  p.gpus_per_node = c.gpus;
  p.micro_batch = c.micro_batch;
  p.precision = Precision::kBf16;
  p.optimizer = OptimizerType::kAdamW;
  p.zero.stage = c.stage;
  p.zero.offload_optimizer.device = c.offload_optimizer;
  p.zero.offload_param.device = c.offload_param;
  p.seq_len = c.seq_len;
  p.target_len = spec->encoder_decoder() ? 128 : 0;
  auto w = BuildWorkload(*spec, p.shape());
  if (!w.ok()) {
    *err = w.status().ToString();
    return std::nullopt;
  }
  auto hw = FindHardwareProfile("h200-measured", DSPLAN_BENCH_DATA_DIR);
  if (!hw.ok()) hw = FindHardwareProfile("h200-sxm", DSPLAN_BENCH_DATA_DIR);
  if (!hw.ok()) {
    *err = hw.status().ToString();
    return std::nullopt;
  }
  return Setup{*spec, std::move(*w), std::move(*hw), p};
}

int64_t Threshold(const Plan& p) {
  return p.zero.stage == 3 ? p.zero.stage3_param_persistence_threshold : 0;
}

// Times Simulate of |plan| with a context made once, as the planner reuses it.
void SimulateLoop(benchmark::State& state, const Workload& w, const HardwareProfile& profile,
                  const Plan& plan) {
  const SimulationContext ctx = MakeSimulationContext(w, profile, plan.precision, Threshold(plan));
  for (auto _ : state) {
    auto pred = Simulate(ctx, plan);
    if (!pred.ok()) {
      state.SkipWithError(pred.status().ToString().c_str());
      return;
    }
    benchmark::DoNotOptimize(pred->step_time_s);
  }
  state.SetItemsProcessed(state.iterations());
}


void BM_SimulateReuseContext(benchmark::State& state, Case c) {
  std::string err;
  auto s = Prepare(c, &err);
  if (!s) {
    state.SkipWithError(err.c_str());
    return;
  }
  SimulateLoop(state, s->workload, s->profile, s->plan);
}

// The same simulation through the Simulator, as every caller now makes it: the plan's workload
// and context come from the Simulator's cache (built before the timed loop).
void BM_SimulatorSimulate(benchmark::State& state, Case c) {
  std::string err;
  auto s = Prepare(c, &err);
  if (!s) {
    state.SkipWithError(err.c_str());
    return;
  }
  Simulator sim(s->spec, s->profile);
  for (auto _ : state) {
    auto pred = sim.Simulate(s->plan);
    if (!pred.ok()) {
      state.SkipWithError(pred.status().ToString().c_str());
      return;
    }
    benchmark::DoNotOptimize(pred->step_time_s);
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_SimulateWithContext(benchmark::State& state, Case c) {
  std::string err;
  auto s = Prepare(c, &err);
  if (!s) {
    state.SkipWithError(err.c_str());
    return;
  }
  for (auto _ : state) {
    const SimulationContext ctx =
        MakeSimulationContext(s->workload, s->profile, s->plan.precision, Threshold(s->plan));
    auto pred = Simulate(ctx, s->plan);
    if (!pred.ok()) {
      state.SkipWithError(pred.status().ToString().c_str());
      return;
    }
    benchmark::DoNotOptimize(pred->step_time_s);
  }
  state.SetItemsProcessed(state.iterations());
}

// The planner's screening pass: the same simulation without the caching-allocator replay
// (peak allocated, time and host memory; reserved memory is computed for the finalists).
void BM_SimulateNoAllocatorModel(benchmark::State& state, Case c) {
  std::string err;
  auto s = Prepare(c, &err);
  if (!s) {
    state.SkipWithError(err.c_str());
    return;
  }
  const SimulationContext ctx =
      MakeSimulationContext(s->workload, s->profile, s->plan.precision, Threshold(s->plan));
  SimulateOptions o;
  o.model_allocator = false;
  for (auto _ : state) {
    auto pred = Simulate(ctx, s->plan, o);
    if (!pred.ok()) {
      state.SkipWithError(pred.status().ToString().c_str());
      return;
    }
    benchmark::DoNotOptimize(pred->step_time_s);
  }
  state.SetItemsProcessed(state.iterations());
}

// Gradient accumulation (docs/simulator.md "Gradient accumulation"): one Simulate() of
// gpt2-xl on 8 GPUs, micro-batch 4, at GAS = state.range(0). The compact step graph holds four
// micro-steps whatever GAS is, so the time must stay flat from GAS 1 to 4096 (before it, the
// graph held every micro-step: 34 s to plan at GAS 256).
void BM_SimulateGradAccum(benchmark::State& state, Case c, bool offload) {
  std::string err;
  c.gpus = 8;
  auto s = Prepare(c, &err);
  if (!s) {
    state.SkipWithError(err.c_str());
    return;
  }
  s->plan.grad_accum = state.range(0);
  if (offload) s->plan.zero.offload_optimizer.device = OffloadDevice::kCpu;
  SimulateLoop(state, s->workload, s->profile, s->plan);
}

constexpr Case kGpt2XlStage1 = {"gpt2-xl", 8, 1, OffloadDevice::kNone, OffloadDevice::kNone, 4,
                                1024};
constexpr Case kGpt2XlStage3 = {"gpt2-xl", 8, 3, OffloadDevice::kNone, OffloadDevice::kNone, 4,
                                1024};
BENCHMARK_CAPTURE(BM_SimulateGradAccum, gpt2_xl_8gpu_s1, kGpt2XlStage1, false)
    ->Arg(1)->Arg(16)->Arg(256)->Arg(4096)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_SimulateGradAccum, gpt2_xl_8gpu_s2_offload_cpu, kGpt2XlStage2, true)
    ->Arg(1)->Arg(16)->Arg(256)->Arg(4096)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_SimulateGradAccum, gpt2_xl_8gpu_s3, kGpt2XlStage3, false)
    ->Arg(1)->Arg(16)->Arg(256)->Arg(4096)->Unit(benchmark::kMicrosecond);

BENCHMARK_CAPTURE(BM_SimulateNoAllocatorModel, t5_3b_4gpu_s3_offload_cpu, kT5Stage3Offload)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_SimulateReuseContext, t5_3b_4gpu_s3_offload_cpu, kT5Stage3Offload)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_SimulatorSimulate, t5_3b_4gpu_s3_offload_cpu, kT5Stage3Offload)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_SimulateWithContext, t5_3b_4gpu_s3_offload_cpu, kT5Stage3Offload)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_SimulateReuseContext, gpt2_xl_4gpu_s2, kGpt2XlStage2)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_SimulateWithContext, gpt2_xl_4gpu_s2, kGpt2XlStage2)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace dsplan

BENCHMARK_MAIN();
