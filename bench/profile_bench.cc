// Reading hardware profiles (issue 15: every dsplan process reads one; h200-measured.yaml holds
// about 6,500 GEMM rows). BM_LoadProfile reads h200-measured from profiles/ as the CLI does
// (FindHardwareProfile: the file, the YAML, every check). BM_LoadProfileYamlCppRows reads the
// same document with its GEMM rows' dtype quoted ("bf16"), which the fast row scanner
// (core/profile_yaml.cc) leaves to yaml-cpp: the cost of the rows without the scanner.
// BM_LoadNodeProfile: a node profile by path (dgx-h200 over h200-sxm). Run:
// build/bench/profile_bench
#include <benchmark/benchmark.h>

#include <fstream>
#include <sstream>
#include <string>

#include "core/hardware_profile.h"

namespace dsplan {
namespace {

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void BM_LoadProfile(benchmark::State& state) {
  size_t rows = 0;
  for (auto _ : state) {
    auto p = FindHardwareProfile("h200-measured", DSPLAN_BENCH_DATA_DIR);
    if (!p.ok()) {
      state.SkipWithError(p.status().message().c_str());
      return;
    }
    rows = p->gpu.gemm.size();
    benchmark::DoNotOptimize(p);
  }
  state.counters["gemm_rows"] = static_cast<double>(rows);
}
BENCHMARK(BM_LoadProfile)->Unit(benchmark::kMillisecond);

void BM_LoadProfileYamlCppRows(benchmark::State& state) {
  std::string text = ReadText(std::string(DSPLAN_BENCH_DATA_DIR) + "/profiles/h200-measured.yaml");
  size_t pos = 0;
  while ((pos = text.find("- [bf16,", pos)) != std::string::npos) {
    text.replace(pos, 8, "- [\"bf16\",");
    pos += 10;
  }
  size_t rows = 0;
  for (auto _ : state) {
    auto p = ParseHardwareProfile(text, "h200-measured-quoted.yaml");
    if (!p.ok()) {
      state.SkipWithError(p.status().message().c_str());
      return;
    }
    rows = p->gpu.gemm.size();
    benchmark::DoNotOptimize(p);
  }
  state.counters["gemm_rows"] = static_cast<double>(rows);
}
BENCHMARK(BM_LoadProfileYamlCppRows)->Unit(benchmark::kMillisecond);

void BM_LoadNodeProfile(benchmark::State& state) {
  const std::string path = std::string(DSPLAN_BENCH_DATA_DIR) + "/profiles/nodes/dgx-h200.yaml";
  for (auto _ : state) {
    auto p = FindHardwareProfile(path, DSPLAN_BENCH_DATA_DIR);
    if (!p.ok()) {
      state.SkipWithError(p.status().message().c_str());
      return;
    }
    benchmark::DoNotOptimize(p);
  }
}
BENCHMARK(BM_LoadNodeProfile)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace dsplan

BENCHMARK_MAIN();
