// Whole planner searches per second: what `dsplan --model M --gpus G` spends in the search
// (issue 4: "about a second"). Run: build/bench/planner_bench
#include <benchmark/benchmark.h>

#include "core/hardware_profile.h"
#include "core/model_catalog.h"
#include "planner/search.h"

namespace dsplan {
namespace {

void BM_Plan(benchmark::State& state, const char* model, int gpus, int64_t seq, int64_t target,
             int threads) {
  auto spec = LoadModel(model, DSPLAN_BENCH_DATA_DIR);
  auto profile = FindHardwareProfile("h200-measured", DSPLAN_BENCH_DATA_DIR);
  if (!spec.ok() || !profile.ok()) {
    state.SkipWithError("cannot load the model or the profile");
    return;
  }
  PlannerRequest r;
  r.spec = *spec;
  r.gpus_per_node = gpus;
  r.profile = &*profile;
  r.seq_len = seq;
  r.target_len = target;
  r.threads = threads;
  int64_t simulated = 0;
  for (auto _ : state) {
    auto res = RunPlanner(r);
    if (!res.ok()) {
      state.SkipWithError(res.status().ToString().c_str());
      return;
    }
    simulated += res->plans_simulated;
    benchmark::DoNotOptimize(res->ranked.size());
  }
  state.counters["simulations_per_search"] =
      benchmark::Counter(static_cast<double>(simulated) / state.iterations());
}

BENCHMARK_CAPTURE(BM_Plan, t5_3b_4gpu_2threads, "t5-3b", 4, 512, 128, 2)
    ->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Plan, t5_3b_4gpu_1thread, "t5-3b", 4, 512, 128, 1)
    ->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Plan, llama_2_7b_8gpu_2threads, "llama-2-7b", 8, 4096, 0, 2)
    ->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace dsplan

BENCHMARK_MAIN();
