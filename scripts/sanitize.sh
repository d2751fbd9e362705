#!/usr/bin/env bash
# Builds dsplan with AddressSanitizer and UndefinedBehaviorSanitizer in build-sanitize/ and runs
# the test suite there (arguments go to ctest, e.g. -R 'core|cli_'). CUDA, MPI, the GUI and the
# benchmarks are off: the sanitizers check the CPU code that every user runs.
# Uses clang when present (CXX=g++ to use GCC). Slow: run it before merging, not on every change.
# On a small machine build only some targets and run their tests, e.g.
#   SANITIZE_TARGETS="core_test dsplan" scripts/sanitize.sh -R '^(core|cli_)'
# (SANITIZE_BUILD_JOBS and SANITIZE_TEST_JOBS set the parallelism, default 2.)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${CXX:-}" ]; then
  if command -v clang++ >/dev/null; then CC=clang CXX=clang++; else CC=gcc CXX=g++; fi
fi
flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g -O1"
if [ ! -f build-sanitize/build.ninja ]; then
  cmake -S . -B build-sanitize -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER="$CC" -DCMAKE_CXX_COMPILER="$CXX" \
    -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_C_FLAGS="$flags" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
    -DDSPLAN_BUILD_BENCHMARKS=OFF -DDSPLAN_WITH_CUDA=OFF -DDSPLAN_WITH_MPI=OFF \
    -DDSPLAN_BUILD_GUI=OFF -DCMAKE_CXX_COMPILER_LAUNCHER="$(command -v ccache || true)"
fi
targets=()
for t in ${SANITIZE_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build build-sanitize -j "${SANITIZE_BUILD_JOBS:-2}" "${targets[@]}"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
cd build-sanitize
ctest --output-on-failure -j "${SANITIZE_TEST_JOBS:-2}" "$@"
