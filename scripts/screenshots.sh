#!/usr/bin/env bash
# Renders one screenshot per dsplan-gui page (t5-3b on 4 GPUs, the best plan selected) into
# docs/images/gui-*.png at 1280x800, offscreen (no display needed). Usage: scripts/screenshots.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-docs/images}"
if [ ! -x build/dsplan-gui ]; then
  scripts/setup.sh --quiet
fi
[ -x build/dsplan-gui ] || { echo "screenshots: build/dsplan-gui was not built (see build/skipped.txt)"; exit 1; }
QT_QPA_PLATFORM=offscreen build/dsplan-gui --model t5-3b --gpus 4 --screenshots "$out"
