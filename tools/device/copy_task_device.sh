#!/bin/bash
# The device-side checks of the GPT-2 trainer (docs/runtime-math.md): kernel tests, the copy
# task, step timing of gpt2 and gpt2-xl, and a compute-sanitizer memcheck of a short run.
# Expects the binaries and libfmt/libyaml-cpp in dist-copy/ (carried to the device).
cd "$(dirname "$0")/../.."
export LD_LIBRARY_PATH=$PWD/dist-copy:$LD_LIBRARY_PATH DSPLAN_DATA_DIR=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.used,temperature.gpu,power.draw --format=csv
echo "== kernel tests"
dist-copy/train_kernels_test > "$OUT/test.log" 2>&1; echo "test rc=$?"
grep -E "rel err|ta=|copy task:|grad check|FAILED|Failure|Expected|Which is|PASSED" "$OUT/test.log" | sed 's/^  *//' | paste -sd'|' | fold -w 4000
echo "== copy task"
for a in "--lr 1e-3" "--lr 1e-3 --fp32" "--lr 1e-3 --seed 2" "--lr 1e-3 --seed 3"; do
  dist-copy/dsplan_copy_task_run $a > "$OUT/copy.log" 2>&1; rc=$?
  grep -E "^step +(0|25|50|100|150|200|300|399) " "$OUT/copy.log" | paste -sd' '; grep -E "COPY|error" "$OUT/copy.log"; echo "rc=$rc"
  cat "$OUT/copy.log" >> "$OUT/copy_all.log"
done
echo "== timing"
for m in gpt2 gpt2-medium gpt2-large gpt2-xl; do timeout 200 dist-copy/dsplan_copy_task_run --no-copy --time $m --time-batch 8 --time-seq 1024 --time-steps 10 2>&1 | tail -3; done
echo "== memcheck"
timeout 120 compute-sanitizer --tool memcheck --print-limit 5 dist-copy/dsplan_copy_task_run --steps 3 --batch 4 2>&1 | tail -3
timeout 120 compute-sanitizer --tool memcheck --print-limit 5 dist-copy/train_kernels_test --gtest_filter='*Gradients*:*Attention*:*LayerNorm*' 2>&1 | tail -3
echo "== racecheck"
timeout 120 compute-sanitizer --tool racecheck --print-limit 5 dist-copy/dsplan_copy_task_run --steps 2 --batch 2 2>&1 | tail -3
