// Replays a fuzz corpus through a target's entry function: `dsplan_fuzz_replay TARGET DIR...`.
// Every file under each DIR is one input. Built with the normal compiler and run by ctest, so
// every build re-checks the inputs that once crashed, hung or broke a message (tests/fuzz/corpus).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_targets.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s TARGET DIR...\n", argv[0]);
    return 2;
  }
  const dsplan::fuzz::TargetFn fn = dsplan::fuzz::FindTarget(argv[1]);
  if (fn == nullptr) {
    std::fprintf(stderr, "unknown target %s\n", argv[1]);
    return 2;
  }
  std::vector<std::filesystem::path> files;
  for (int i = 2; i < argc; ++i) {
    std::error_code ec;
    for (const auto& e : std::filesystem::recursive_directory_iterator(argv[i], ec)) {
      if (e.is_regular_file()) files.push_back(e.path());
    }
    if (ec) {
      std::fprintf(stderr, "cannot list %s: %s\n", argv[i], ec.message().c_str());
      return 2;
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    std::fprintf(stderr, "no inputs under the given folders\n");
    return 2;
  }
  double slowest = 0;
  std::string slowest_name;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto t0 = std::chrono::steady_clock::now();
    fn(reinterpret_cast<const uint8_t*>(data.data()), data.size());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > slowest) {
      slowest = s;
      slowest_name = f.filename().string();
    }
  }
  std::printf("%s: %zu inputs replayed, slowest %.3f s (%s)\n", argv[1], files.size(), slowest,
              slowest_name.c_str());
  return 0;
}
