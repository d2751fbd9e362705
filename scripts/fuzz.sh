#!/usr/bin/env bash
# Runs one libFuzzer target under AddressSanitizer and UndefinedBehaviorSanitizer for a bounded
# time, then prints its executions and findings.
#
#   scripts/fuzz.sh TARGET SECONDS [extra libFuzzer flags]
#   TARGET: hf_config, ds_config, profile_yaml, catalog_yaml, cli_args (tests/fuzz/fuzz_targets.h)
#
# Needs clang and libFuzzer (Debian 12: apt-get install clang libclang-rt-14-dev); the normal
# build and `ctest` do not. Builds in build-fuzz/ (CUDA, MPI, GUI, tests and benchmarks off).
# Seeds: tests/fuzz/corpus/TARGET (read only); the growing corpus: build-fuzz/corpus/TARGET;
# crashes, leaks, timeouts and out-of-memory inputs: build-fuzz/findings/TARGET/. Copy a finding
# into tests/fuzz/corpus/TARGET/regress-NAME once it is fixed, so that every build replays it.
# The machine's cores are shared: run one target at a time (-jobs/-workers are not used).
# Inputs are cut at FUZZ_MAX_LEN bytes (default 4096: ~1,500 executions/s on a busy core); the
# large regression inputs (deep nesting, long keys) are replayed whole by ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 2 ]; then
  echo "usage: scripts/fuzz.sh TARGET SECONDS [libFuzzer flags]" >&2
  exit 2
fi
target=$1
seconds=$2
shift 2
case "$target" in
  hf_config|ds_config|profile_yaml|catalog_yaml|cli_args) ;;
  *) echo "fuzz: unknown target '$target' (hf_config, ds_config, profile_yaml, catalog_yaml, cli_args)" >&2; exit 2 ;;
esac
CC=${CC:-clang}
CXX=${CXX:-clang++}
command -v "$CXX" >/dev/null || { echo "fuzz: $CXX not found (apt-get install clang libclang-rt-14-dev)" >&2; exit 2; }
flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g -O1"
if [ ! -f build-fuzz/build.ninja ]; then
  cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER="$CC" -DCMAKE_CXX_COMPILER="$CXX" \
    -DCMAKE_CXX_FLAGS="$flags -fsanitize=fuzzer-no-link" -DCMAKE_C_FLAGS="$flags" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
    -DDSPLAN_FUZZ=ON -DDSPLAN_BUILD_TESTS=OFF -DDSPLAN_BUILD_BENCHMARKS=OFF \
    -DDSPLAN_WITH_CUDA=OFF -DDSPLAN_WITH_MPI=OFF -DDSPLAN_BUILD_GUI=OFF \
    -DCMAKE_CXX_COMPILER_LAUNCHER="$(command -v ccache || true)" >/dev/null
fi
cmake --build build-fuzz -j "${FUZZ_BUILD_JOBS:-2}" --target "dsplan_fuzz_$target"
corpus=build-fuzz/corpus/$target
findings=build-fuzz/findings/$target
mkdir -p "$corpus" "$findings"
log=build-fuzz/fuzz-$target.log
export DSPLAN_DATA_DIR=$PWD
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
set +e
"build-fuzz/tests/fuzz/dsplan_fuzz_$target" "$corpus" "tests/fuzz/corpus/$target" \
  -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len="${FUZZ_MAX_LEN:-4096}" \
  -artifact_prefix="$findings/" -print_final_stats=1 "$@" >"$log" 2>&1
rc=$?
set -e
execs=$(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}' | tail -1)
found=$(find "$findings" -type f | wc -l)
echo "fuzz $target: ${execs:-?} executions in ${seconds} s, $found finding(s) in $findings (exit $rc, log $log)"
if [ "$rc" -ne 0 ] || [ "$found" -ne 0 ]; then
  grep -E 'ERROR|SUMMARY|runtime error|fuzz [a-z_]+:' "$log" | head -20 >&2 || true
  exit 1
fi
