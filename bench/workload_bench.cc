// How long the workload model takes to build (the planner builds it for every candidate micro
// batch, so it must stay cheap). Run: build/bench/workload_bench
#include <benchmark/benchmark.h>

#include "core/model_catalog.h"
#include "simulator/workload.h"

namespace dsplan {
namespace {

void BM_BuildWorkload(benchmark::State& state, const char* model) {
  auto spec = LoadModel(model, DSPLAN_BENCH_DATA_DIR);
  if (!spec.ok()) {
    state.SkipWithError(spec.status().ToString().c_str());
    return;
  }
  RunShape o;
  o.micro_batch = 8;
  o.seq_len = spec->encoder_decoder() ? 512 : 1024;
  for (auto _ : state) {
    auto w = BuildWorkload(*spec, o);
    benchmark::DoNotOptimize(w);
  }
}
BENCHMARK_CAPTURE(BM_BuildWorkload, gpt2_xl, "gpt2-xl")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_BuildWorkload, t5_3b, "t5-3b")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_BuildWorkload, llama_2_70b, "llama-2-70b")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_BuildWorkload, mixtral_8x7b, "mixtral-8x7b")->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace dsplan

BENCHMARK_MAIN();
