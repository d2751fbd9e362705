#!/usr/bin/env bash
# End-to-end tests of `dsplan validate` on a machine without a GPU (CI): bad input is refused
# with one line naming the flag or file before anything runs, and a valid request says plainly
# why it cannot run here (no CUDA build, or no CUDA device) instead of pretending.
# Usage: validate_cli_test.sh PATH/TO/dsplan SOURCE_DIR
set -u
bin=$1
export DSPLAN_DATA_DIR=$2
fx=$2/tests/fixtures/ds_configs
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"
cfg="$fx/calib_gpt2-xl_s0_mb8.json"

bad "unknown model" "gpt2-xxl.*not" validate --model gpt2-xxl --ds-config "$cfg"
bad "missing config" "nope.json" validate --model gpt2-xl --ds-config "$tmp/nope.json"
bad "malformed config" "bad_malformed.json" validate --model gpt2-xl --ds-config "$fx/bad_malformed.json"
bad "zero steps" "--steps must be between 1 and 1000" validate --model gpt2-xl --ds-config "$cfg" --steps 0
bad "negative warm-up" "--warmup" validate --model gpt2-xl --ds-config "$cfg" --warmup -1
bad "threshold as a percent" "fractions such as 0.10" validate --model gpt2-xl --ds-config "$cfg" --time-threshold 10
bad "unwritable calibrate path" "$tmp/no/such/dir/p.yaml" validate --model gpt2-xl --ds-config "$cfg" --calibrate "$tmp/no/such/dir/p.yaml"
check "unwritable calibrate path creates nothing" test ! -e "$tmp/no"

# A valid request on a machine without a GPU: exit 2 and the reason, nothing on stdout.
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  run validate --model gpt2-xl --ds-config "$cfg" --steps 1
  check "no GPU: exits 2" test "$rc" -eq 2
  check "no GPU: says why and what to do" grep -qiE "built without CUDA.*install|no CUDA device|CUDA driver" "$tmp/err"
  check "no GPU: nothing on stdout" test ! -s "$tmp/out"
fi
bad "neither model nor copy task" "needs --model and --ds-config" validate --ds-config "$cfg"
run validate --model gpt2-xl --ds-config "$cfg" --executor tpu
check "unknown executor exits 2" test "$rc" -eq 2
check "unknown executor names the valid ones" grep -q "tpu not in {gpu,host}" "$tmp/err"

# --dry-run: nothing runs; the "measured" column is the prediction replayed, on any machine.
run validate --dry-run --model gpt2-xl --ds-config "$cfg" --gpus 2
check "dry run exits 0" test "$rc" -eq 0
check "dry run says it ran nothing" grep -q "^# dry run   nothing ran" "$tmp/out"
check "dry run passes" grep -q "^PASS: step time +0.0%" "$tmp/out"
# (a row with no work on either side shows "-" for its error)
check "dry run: every row agrees to the rounding" \
  awk '/^   / && $0 !~ /([+-]0\.0%|  -)( +\*)?$/ {bad=1} END {exit bad}' "$tmp/out"
run validate --dry-run --model gpt2-xl --ds-config "$fx/calib_gpt2-xl_s2_mb8_offopt-cpu.json" --gpus 2 --json
check "dry run --json exits 0" test "$rc" -eq 0
check "dry run --json: flagged, passes, measured equals predicted" \
  json "j['dry_run'] and j['pass'] and all(abs(r['error']) < 1e-9 for r in j['rows']) and j['rows'][0]['measured'] == j['rows'][0]['predicted']"
check "dry run --json: a GPU run would not be flagged" json "'dry_run' in j"
cp "$tmp/out" "$tmp/dry-flagged.json"
run validate "$fx/calib_gpt2-xl_s2_mb8_offopt-cpu.json" --dry-run --model gpt2-xl --gpus 2 --json
check "validate: the config as the first argument is read as --ds-config" \
  bash -c "test $rc -eq 0 && python3 -c \"import json,sys; a,b=(json.load(open(p)) for p in sys.argv[1:]); sys.exit(a['rows']!=b['rows'])\" '$tmp/out' '$tmp/dry-flagged.json'"
# simulate's warnings about the config reach validate's header and JSON: bf16 without ZeRO
# (stage 0) is warned about, stage 1 is not.
run validate --dry-run --model gpt2-xl --ds-config "$cfg" --gpus 2
check "dry run: simulate's warning is a header line" grep -q "^# warning   bf16 without ZeRO" "$tmp/out"
run validate --dry-run --model gpt2-xl --ds-config "$cfg" --gpus 2 --json
check "dry run --json: warnings carries it" json "any(w.startswith('bf16 without ZeRO') for w in j['warnings'])"
run validate --dry-run --model gpt2-xl --ds-config "$fx/calib_gpt2-xl_s1_mb8.json" --gpus 2 --json
check "dry run --json: no warnings for a stage-1 config" json "j['warnings'] == []"
run validate --dry-run --model gpt2-xl --ds-config "$cfg" --trace "$tmp/dry.trace.json"
check "dry run writes the trace" test -s "$tmp/dry.trace.json"
run validate --dry-run --model llama-2-13b --ds-config "$cfg" --gpus 1
check "dry run of a plan that does not fit: out of memory as predicted, exit 0" test "$rc" -eq 0
check "dry run of a plan that does not fit: says so" grep -q "^PASS: the plan ran out of memory, as predicted" "$tmp/out"
bad "dry run with --calibrate" "--dry-run measures nothing" validate --dry-run --model gpt2-xl \
  --ds-config "$cfg" --calibrate "$tmp/cal.yaml"
check "dry run with --calibrate writes nothing" test ! -e "$tmp/cal.yaml"
bad "dry run with the host executor" "does not combine" validate --dry-run --executor host \
  --model gpt2-xl --ds-config "$cfg"

# --executor host: a real ZeRO run on CPU threads, checked against unpartitioned training.
ex=$2/examples/host
run validate --executor host --model "$ex/gpt2-tiny.json" --ds-config "$ex/zero2_gas2.json" \
  --seq-len 16 --gpus 2 --steps 3 --json
check "host stage 2 x 2 ranks passes" test "$rc" -eq 0
check "host: the loss of the first step equals the reference's" \
  json "abs(j['losses'][0] - j['reference_losses'][0]) < 1e-4"
check "host: parameters within tolerance, model states equal" \
  json "j['params_match'] and j['memory_match'] and j['pass']"
check "host: fp32 master is partitioned over 2 ranks (28544 params x 4 B / 2)" \
  json "any(r['category'] == 'fp32_master' and r['executor_bytes'] == 28544 * 4 // 2 for r in j['memory'])"
run validate --executor host --model "$ex/gpt2-tiny.json" --ds-config "$ex/zero3_offload.json" \
  --seq-len 16 --gpus 4 --steps 2
check "host stage 3 + CPU offload x 4 ranks passes" test "$rc" -eq 0
check "host: the text report ends with PASS" grep -q "^PASS" "$tmp/out"
bad "host executor, not GPT-2" "gpt2" validate --executor host --model llama-2-7b \
  --ds-config "$ex/zero2_gas2.json" --seq-len 16

# --copy-task without a GPU says why it cannot run.
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  run validate --copy-task --steps 10
  check "copy task, no GPU: exits 2" test "$rc" -eq 2
  check "copy task, no GPU: says why" grep -qiE "without CUDA|CUDA device|CUDA driver" "$tmp/err"
fi
finish
