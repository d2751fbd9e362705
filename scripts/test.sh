#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs every test: the GoogleTest suites and the end-to-end CLI
# tests, through ctest. Components skipped by the build (no CUDA, no Qt) are listed first.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
if [ -s build/skipped.txt ]; then
  echo "test: not built here, so not tested:"
  sed 's/^/test:   /' build/skipped.txt
fi
cd build
ctest --output-on-failure -j "$(nproc)" "$@"
