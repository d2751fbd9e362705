#!/usr/bin/env bash
# The device-side report tools on record sets already on disk (no GPU needed):
# tools/device/registered_report.py against fresh set 6, whose README recorded its results when
# the set ran (2026-12-04: step 5.5 % mean, 16.3 % worst, 6 of 7 in the registered band, 6 of 7
# within 10 % throughput; three stage 0-2 plans that FusedAdam did not train: two losses
# unchanged, one risen).
# Usage: device_tools_test.sh SOURCE_DIR
set -u
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"
cd "$src" || exit 1

python3 tools/device/registered_report.py docs/validation/deepspeed/fresh-1204g >"$tmp/out" 2>"$tmp/err"
check "registered_report exits 0" test $? -eq 0
check "one row per registered plan, all ran" test "$(grep -c '| ok |$' "$tmp/out")" -eq 7
check "the step summary of fresh set 6" \
  grep -q "mean |error| 5.5 %, worst -16.3 % (phi-2)" "$tmp/out"
check "6 of 7 in the registered band" grep -q "Inside the registered band: 6 of 7" "$tmp/out"
check "6 of 7 within 10 % throughput" grep -q "within 10 % of the registered prediction: 6 of 7" "$tmp/out"
check "the losses that did not fall are flagged (two unchanged, one rose)" \
  test "$(grep -c '(unchanged)' "$tmp/out")" -eq 2 -a "$(grep -c '(rose)' "$tmp/out")" -eq 1
# A registered plan without a run is listed as missing, not dropped.
mkdir -p "$tmp/set"
cp docs/validation/deepspeed/fresh-1204g/plans-dsplan.jsonl "$tmp/set/"
head -3 docs/validation/deepspeed/fresh-1204g/results-callM.jsonl >"$tmp/set/results-callM.jsonl"
python3 tools/device/registered_report.py "$tmp/set" >"$tmp/out" 2>"$tmp/err"
check "a partial set reports" test $? -eq 0
check "the plans that did not run are missing" test "$(grep -c ': missing\.$' "$tmp/out")" -eq 4

echo "device_tools_test: $pass passed, $fail failed"
test "$fail" -eq 0
