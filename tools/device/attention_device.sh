#!/bin/bash
# What one device call runs for the fused attention kernel (docs/runtime.md, "Fused attention"):
# the correctness test, compute-sanitizer (memcheck, racecheck) on small cases, the benchmark of
# every tile configuration, PyTorch's SDPA on the same shapes for comparison, `dsplan profile
# --only attention` (on top of h200-measured) and `dsplan validate` of two plans with it.
# Expects the binaries and libfmt/libyaml-cpp in dist-attn/ (carried to the device); leaves
# attn.tgz in $OUT.
cd "$(dirname "$0")/../.."
D=$PWD/dist-attn
export LD_LIBRARY_PATH=$D:$LD_LIBRARY_PATH DSPLAN_DATA_DIR=$PWD NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/out}
W=/tmp/attn
mkdir -p "$OUT" "$W"
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0)) s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw \
  --format=csv | tee "$W/smi.txt"
stamp "== test"
timeout 120 "$D/flash_attention_test" >"$W/test.log" 2>&1
echo "test rc=$?"
grep -E "rel err|FAILED|Failure|PASSED" "$W/test.log" | sed 's/^  *//' | head -60
stamp "== bench"
timeout 100 "$D/dsplan_attention_bench" >"$W/bench.log" 2>&1
echo "bench rc=$?"
stamp "== memcheck"
timeout 75 compute-sanitizer --tool memcheck --print-limit 5 "$D/flash_attention_test" \
  --gtest_filter='*CausalMoreQueries*:*CrossAttention*:*CausalHeadDim128Ragged*' >"$W/memcheck.log" 2>&1
echo "memcheck rc=$?"; tail -2 "$W/memcheck.log"
stamp "== racecheck"
timeout 90 compute-sanitizer --tool racecheck --print-limit 5 "$D/flash_attention_test" \
  --gtest_filter='*CausalTileAligned*:*CausalHeadDim128Ragged*:*CausalMoreQueries*' >"$W/racecheck.log" 2>&1
echo "racecheck rc=$?"; tail -2 "$W/racecheck.log"
stamp "== profile"
timeout 90 "$D/dsplan" profile --only attention --base h200-measured --name h200-attention \
  --out "$W/h200-attention.yaml" >"$W/profile.log" 2>&1
echo "profile rc=$?"
stamp "== validate"
for c in gpt2-xl_s0_mb8 gpt2-xl_s0_mb4 t5-large_s0_mb8; do
  m=${c%%_*}
  timeout 60 "$D/dsplan" validate --model "$m" --ds-config "tests/fixtures/ds_configs/calib_$c.json" \
    --hardware "$W/h200-attention.yaml" --json-out "$W/validate-$c.json" >"$W/validate-$c.txt" 2>&1
  echo "validate $c rc=$?"
done
stamp "== sdpa reference"
timeout 45 python3 tools/device/sdpa_reference.py >"$W/sdpa.log" 2>&1
stamp "done"
tar -C "$W" -czf "$OUT/attn.tgz" .
echo; grep -E "^#  |attention|step time|verdict|PASS|FAIL" "$W"/validate-*.txt | head -30
echo; grep -A45 "# Fused attention" "$W/profile.log" | head -48
echo; cat "$W/sdpa.log"
echo; sed -n '/# summary/,$p' "$W/bench.log"
