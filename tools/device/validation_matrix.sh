#!/usr/bin/env bash
# The single-GPU validation matrix of docs/accuracy.md, run on the device machine:
#   LD_LIBRARY_PATH=$PWD/dist DSPLAN_DATA_DIR=$PWD tools/device/validation_matrix.sh [CASE...]
# Each case runs `dsplan validate` and leaves CASE.txt (the report) and CASE.json in $OUT (or
# ./validation-out). With no CASE, all of them. The summary table prints last.
# The prediction uses DSPLAN_HARDWARE (a profile name or YAML path) when set: validate against
# a profile measured on this same machine (tools/device/session_profile.sh), because device
# machines differ in their CPU, PCIe and NVMe. DSPLAN_TRACE_CASES (space-separated case names)
# also writes CASE.trace.json for those.
set -u
cd "$(dirname "$0")/../.."
bin=${DSPLAN_BIN:-dist/dsplan}
out=${OUT:-validation-out}
hw=()
[ -n "${DSPLAN_HARDWARE:-}" ] && hw=(--hardware "$DSPLAN_HARDWARE")
mkdir -p "$out"
fx=tests/fixtures/ds_configs
vc=docs/validation/configs
export NCCL_NVLS_ENABLE=0
# name | model | config | extra flags
# Most informative first: a run cut short by the device budget still covers the most.
cases=(
  "gpt2-xl_s0_mb8|gpt2-xl|$fx/calib_gpt2-xl_s0_mb8.json|"
  "t5-large_s0_mb8|t5-large|$fx/calib_t5-large_s0_mb8.json|"
  "llama-7b_s2_mb2_oom|llama-2-7b|$vc/llama-7b_s2_mb2.json|--steps 1 --warmup 0"
  "gpt2-xl_s2_mb8_offopt-cpu|gpt2-xl|$fx/calib_gpt2-xl_s2_mb8_offopt-cpu.json|"
  "gpt2-xl_s3_mb8_offopt-cpu_offparam-cpu|gpt2-xl|$fx/calib_gpt2-xl_s3_mb8_offopt-cpu_offparam-cpu.json|"
  "t5-3b_s3_mb8_gc|t5-3b|$vc/t5-3b_s3_mb8.json|--gradient-checkpointing"
  "gpt2-xl_s1_mb8|gpt2-xl|$fx/calib_gpt2-xl_s1_mb8.json|"
  "gpt2-xl_s0_mb4|gpt2-xl|$fx/calib_gpt2-xl_s0_mb4.json|"
  "gpt2_s3_mb8_offopt-nvme|gpt2|$vc/gpt2_s3_mb8_offopt-nvme.json|--steps 2 --warmup 1"
  "llama-7b_s3_mb1_offopt-cpu_gc|llama-2-7b|$vc/llama-7b_s3_mb1_offopt-cpu.json|--gradient-checkpointing --steps 2 --warmup 1"
  "gpt2-xl_s2_mb8_gc|gpt2-xl|$fx/calib_gpt2-xl_s2_mb8_gc.json|--gradient-checkpointing"
  "gpt2-xl_s2_mb8|gpt2-xl|$fx/calib_gpt2-xl_s2_mb8.json|"
  "gpt2-xl_s3_mb8|gpt2-xl|$fx/calib_gpt2-xl_s3_mb8.json|"
  "t5-large_s2_mb4|t5-large|$fx/calib_t5-large_s2_mb4.json|"
  "t5-large_s2_mb8_offopt-cpu|t5-large|$fx/calib_t5-large_s2_mb8_offopt-cpu.json|"
  "t5-3b_s2_mb8|t5-3b|$vc/t5-3b_s2_mb8.json|"
  "gpt2-xl_s2_mb4_gc|gpt2-xl|$vc/gpt2-xl_s2_mb4_gc.json|--gradient-checkpointing"
)
want=("$@")
for c in "${cases[@]}"; do
  IFS='|' read -r name model cfg extra <<<"$c"
  if [ "${#want[@]}" -gt 0 ] && [[ ! " ${want[*]} " =~ " $name " ]]; then continue; fi
  mkdir -p /tmp/dsplan-nvme
  trace=()
  [[ " ${DSPLAN_TRACE_CASES:-} " =~ " $name " ]] && trace=(--trace "$out/$name.trace.json")
  # shellcheck disable=SC2086
  timeout 150 "$bin" validate --model "$model" --ds-config "$cfg" $extra "${hw[@]}" "${trace[@]}" \
    --json-out "$out/$name.json" >"$out/$name.txt" 2>"$out/$name.err"
  echo "rc=$?" >>"$out/$name.err"
done
python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
print(f"{'case':44} {'step pred':>9} {'meas':>9} {'err':>7} {'dev pred':>9} {'meas':>9} {'err':>7} {'MFU':>6} verdict")
for f in sorted(os.listdir(out)):
    if not f.endswith('.json'): continue
    j = json.load(open(os.path.join(out, f)))
    rows = {r['quantity']: r for r in j.get('rows', [])}
    s, d = rows.get('step time'), rows.get('device memory (driver)')
    fmt = lambda r, k, sc: f"{r[k]/sc:9.3f}" if r else f"{'-':>9}"
    pct = lambda r: f"{100*r['error']:+6.1f}%" if r and r['error'] is not None else f"{'-':>7}"
    print(f"{f[:-5]:44} {fmt(s,'predicted',1)} {fmt(s,'measured',1)} {pct(s)} {fmt(d,'predicted',2**30)} {fmt(d,'measured',2**30)} {pct(d)} {100*j.get('mfu',0):5.1f}% {j['verdict'][:60]}")
PY
for f in "$out"/*.err; do grep -v "^rc=0" "$f" | sed "s|^|$(basename "$f" .err): |" | tail -3; done
