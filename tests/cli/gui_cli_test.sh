#!/usr/bin/env bash
# `dsplan gui`: starts dsplan-gui from the dsplan binary's folder, passing arguments on; without
# it there, one clear line and exit 2.
# Usage: gui_cli_test.sh PATH/TO/dsplan SOURCE_DIR
set -u
bin=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
src=$2
export DSPLAN_DATA_DIR=$src
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"

# A dsplan binary with no dsplan-gui beside it.
alone=$tmp/alone
mkdir -p "$alone"
cp "$bin" "$alone/dsplan"
real_bin=$bin
bin=$alone/dsplan
bad "gui without dsplan-gui" "no dsplan-gui beside .*alone/dsplan.*scripts/setup.sh" gui
bin=$real_bin

# Beside the real build's binary (when the GUI was built): arguments reach dsplan-gui.
if [ -x "$(dirname "$bin")/dsplan-gui" ]; then
  QT_QPA_PLATFORM=offscreen "$bin" gui --help >"$tmp/out" 2>"$tmp/err"
  rc=$?
  check "gui --help exits 0" test "$rc" -eq 0
  check "gui --help is dsplan-gui's" grep -qi "dsplan-gui" "$tmp/out"
else
  echo "note: no dsplan-gui beside $bin (Qt 6 not installed): the pass-through is not checked"
fi
finish
