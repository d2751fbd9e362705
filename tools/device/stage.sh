#!/usr/bin/env bash
# Builds dsplan with its CUDA parts into build-gpu/ and stages what the device machine needs in
# dist/ (gitignored): the binary and the two shared libraries the device image lacks (fmt,
# yaml-cpp). CUDA libraries (cudart is static; cuBLASLt, NCCL) come from the device's CUDA 13.
# The device image has no MPI, so the binary is built with -DDSPLAN_WITH_MPI=OFF (ranks are
# threads, one per GPU) and must not link libmpi; a build folder configured otherwise is switched.
# On the device:  LD_LIBRARY_PATH=$PWD/dist DSPLAN_DATA_DIR=$PWD dist/dsplan ...
# Usage: tools/device/stage.sh [build-dir]   (then pass carry: ["dist"] to the device tool)
set -euo pipefail
cd "$(dirname "$0")/../.."
bdir="${1:-build-gpu}"
if [ ! -f "$bdir/build.ninja" ]; then
  cmake -S . -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDSPLAN_BUILD_TESTS=OFF \
    -DDSPLAN_BUILD_BENCHMARKS=OFF -DDSPLAN_BUILD_GUI=OFF -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DDSPLAN_WITH_MPI=OFF >/dev/null
elif ! grep -q '^DSPLAN_WITH_MPI:STRING=OFF$' "$bdir/CMakeCache.txt"; then
  echo "stage: reconfiguring $bdir with -DDSPLAN_WITH_MPI=OFF (the device image has no MPI)"
  cmake "$bdir" -DDSPLAN_WITH_MPI=OFF >/dev/null
fi
cmake --build "$bdir" --target dsplan -- --quiet
rm -rf dist && mkdir -p dist
cp "$bdir/dsplan" dist/dsplan
if ldd dist/dsplan | grep -q libmpi; then
  echo "stage: dist/dsplan links libmpi, which the device image lacks" >&2
  exit 1
fi
for lib in $(ldd dist/dsplan | awk '/libfmt|libyaml-cpp/ {print $3}'); do cp -L "$lib" dist/; done
ls -la dist
