#!/usr/bin/env bash
# Issue 7's multi-GPU validation, for a device kind with N H200s (nvidia-h200-x2/x4/x8):
#   LD_LIBRARY_PATH=$PWD/dist DSPLAN_DATA_DIR=$PWD tools/device/multi_gpu_matrix.sh N
# 1. `dsplan profile` measures NCCL busbw across the N GPUs -> $OUT/h200x<N>-measured.yaml
#    (commit as profiles/h200x<N>-measured.yaml);
# 2. `dsplan validate --gpus N` for stages 1-3 of gpt2-xl and t5-3b, stage 3 + CPU optimizer
#    offload of llama-2-7b, and two bucket sizes and overlap on/off for gpt2-xl stage 2, each
#    predicted with the new profile. Reports land in $OUT (CASE.txt, CASE.json);
#    tools/device/summarize_validation.py turns them into docs.
set -u
cd "$(dirname "$0")/../.."
n=${1:?usage: multi_gpu_matrix.sh NUM_GPUS}
bin=${DSPLAN_BIN:-dist/dsplan}
out=${OUT:-validation-out}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
prof="$out/h200x$n-measured.yaml"
"$bin" profile --quick --base h200-measured --name "h200x$n-measured" --out "$prof" >"$out/profile.txt" 2>&1
echo "profile rc=$?" >>"$out/profile.txt"
hw=$prof
[ -s "$prof" ] || hw=h200-measured
vc=docs/validation/configs
cases=(
  "gpt2-xl_s1_mb8|gpt2-xl|$vc/s1_mb8.json"
  "gpt2-xl_s2_mb8|gpt2-xl|$vc/s2_mb8.json"
  "gpt2-xl_s3_mb8|gpt2-xl|$vc/s3_mb8.json"
  "gpt2-xl_s2_mb8_bucket5e7|gpt2-xl|$vc/s2_mb8_bucket5e7.json"
  "gpt2-xl_s2_mb8_overlap|gpt2-xl|$vc/s2_mb8_overlap.json"
  "t5-3b_s1_mb8|t5-3b|$vc/s1_mb8.json"
  "t5-3b_s2_mb8|t5-3b|$vc/s2_mb8.json"
  "t5-3b_s3_mb8|t5-3b|$vc/s3_mb8.json"
  "llama-7b_s3_mb2_offopt-cpu|llama-2-7b|$vc/s3_mb2_offopt-cpu.json"
)
for c in "${cases[@]}"; do
  IFS='|' read -r name model cfg <<<"$c"
  timeout 200 "$bin" validate --model "$model" --ds-config "$cfg" --gpus "$n" --hardware "$hw" \
    --json-out "$out/${name}_x$n.json" >"$out/${name}_x$n.txt" 2>"$out/${name}_x$n.err"
  echo "rc=$?" >>"$out/${name}_x$n.err"
done
grep -h "^PASS\|^FAIL\|^OOM" "$out"/*_x"$n".txt
