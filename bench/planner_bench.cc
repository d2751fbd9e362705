// Whole default planner searches: what `dsplan --model M --gpus G` spends in the search (issue 4:
// each default search under 1 second on a 2-core machine), and plans evaluated per second.
// Cases: t5-3b on 4 GPUs, llama-2-70b on 64 GPUs (8 nodes x 8), a 1T-parameter Llama-style
// model on 512 GPUs (64 nodes x 8). Run: build/bench/planner_bench
#include <benchmark/benchmark.h>

#include "core/hardware_profile.h"
#include "core/hf_config.h"
#include "core/model_catalog.h"
#include "simulator/workload.h"
#include "planner/search.h"

namespace dsplan {
namespace {

// A Llama-style model of about 1.0e12 parameters (138 layers of hidden 24576, MLP 65536).
constexpr const char* kLlama1T = R"({"model_type": "llama", "hidden_size": 24576,
  "intermediate_size": 65536, "num_hidden_layers": 138, "num_attention_heads": 192,
  "num_key_value_heads": 192, "vocab_size": 32000, "max_position_embeddings": 4096})";

Result<ModelSpec> Model(const char* name) {
  if (std::string(name) == "llama-1t") {
    DSPLAN_ASSIGN_OR_RETURN(HfConfig hf, HfConfig::Parse(kLlama1T, "llama-1t"));
    return ModelSpecFromHf(hf, "llama-1t");
  }
  return LoadModel(name, DSPLAN_BENCH_DATA_DIR);
}

void BM_Plan(benchmark::State& state, const char* model, int nodes, int gpus, int64_t seq,
             int64_t target, int threads) {
  auto spec = Model(model);
  auto profile = FindHardwareProfile("h200-measured", DSPLAN_BENCH_DATA_DIR);
  if (!spec.ok() || !profile.ok()) {
    state.SkipWithError("cannot load the model or the profile");
    return;
  }
  PlannerRequest r;
  r.spec = *spec;
  r.nodes = nodes;
  r.gpus_per_node = gpus;
  r.profile = &*profile;
  r.shape.seq_len = seq;
  r.shape.target_len = target;
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
  state.counters["plans_evaluated_per_s"] =
      benchmark::Counter(static_cast<double>(simulated), benchmark::Counter::kIsRate);
  if (auto p = CountParameters(*spec); p.ok()) state.counters["params"] = static_cast<double>(*p);
}

BENCHMARK_CAPTURE(BM_Plan, t5_3b_4gpu, "t5-3b", 1, 4, 512, 128, 2)
    ->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Plan, llama_2_70b_64gpu, "llama-2-70b", 8, 8, 1024, 0, 2)
    ->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Plan, llama_1t_512gpu, "llama-1t", 64, 8, 1024, 0, 2)
    ->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Plan, t5_3b_4gpu_1thread, "t5-3b", 1, 4, 512, 128, 1)
    ->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace dsplan

BENCHMARK_MAIN();
