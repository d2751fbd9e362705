// Entry functions of dsplan's fuzz targets: one per reader (HF config.json, ds_config.json,
// hardware profile YAML, catalog YAML) and the command-line parser.
//
// Each takes raw bytes and runs them through the same code a user's file or command line goes
// through. Besides crashing (which the sanitizers and libFuzzer catch), a target aborts when an
// error message breaks dsplan's rule: one line, bounded length, no raw control bytes. The same
// functions run under libFuzzer (tests/fuzz/libfuzzer_main.cc, scripts/fuzz.sh) and under the
// replay driver (tests/fuzz/replay_main.cc) that ctest runs over tests/fuzz/corpus/ in every build.
#ifndef DSPLAN_TESTS_FUZZ_FUZZ_TARGETS_H_
#define DSPLAN_TESTS_FUZZ_FUZZ_TARGETS_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.h"

namespace dsplan::fuzz {

using TargetFn = int (*)(const uint8_t* data, size_t size);

int HfConfig(const uint8_t* data, size_t size);
int DsConfig(const uint8_t* data, size_t size);
int ProfileYaml(const uint8_t* data, size_t size);
int CatalogYaml(const uint8_t* data, size_t size);
/// The input split at NUL bytes is argv[1..]; parsed as dsplan would parse it (no command runs).
int CliArgs(const uint8_t* data, size_t size);

/// Aborts (a fuzz finding) when |s| is an error whose message breaks dsplan's one-line rule.
void CheckMessage(const Status& s, const char* target);

/// The target named |name| (hf_config, ds_config, profile_yaml, catalog_yaml, cli_args), or
/// nullptr.
TargetFn FindTarget(const std::string& name);

}  // namespace dsplan::fuzz

#endif  // DSPLAN_TESTS_FUZZ_FUZZ_TARGETS_H_
