#!/usr/bin/env bash
# Installs what dsplan needs to build (Debian packages, via apt-get) and builds it in build/.
# Idempotent and quiet when nothing is missing. Usage: scripts/setup.sh [--quiet]
set -euo pipefail
cd "$(dirname "$0")/.."
quiet=0
[ "${1:-}" = "--quiet" ] && quiet=1
say() { [ "$quiet" -eq 1 ] || echo "setup: $*"; }

# Build tools and header/library packages (Debian 12 names). OpenMPI: ranks as processes under
# mpirun (docs/runtime-host.md); its tests run under mpirun -np 2 and 4. Qt 6 Widgets, Charts
# and Svg: dsplan-gui (docs/gui.md); its tests run offscreen.
packages=(cmake ninja-build g++ git python3 libfmt-dev libyaml-cpp-dev nlohmann-json3-dev
          libcli11-dev libboost-graph-dev libgtest-dev libgmock-dev libbenchmark-dev
          openmpi-bin libopenmpi-dev python3-jsonschema qt6-base-dev qt6-charts-dev
          qt6-svg-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ ! -f build/build.ninja ]; then
  say "configuring build/ (log: build/configure.log)"
  mkdir -p build
  if ! cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDSPLAN_WITH_MPI=ON \
      >build/configure.log 2>&1; then
    cat build/configure.log
    exit 1
  fi
  [ "$quiet" -eq 1 ] || grep "dsplan:" build/configure.log | sed 's/^-- /setup: /'
fi
if ! cmake --build build -- --quiet >build/build.log 2>&1; then
  cat build/build.log
  echo "setup: build failed (log above, also in build/build.log)"
  exit 1
fi
say "built build/dsplan$( [ -x build/dsplan-gui ] && echo " and build/dsplan-gui" )"
