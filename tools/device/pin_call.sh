#!/bin/bash
# Does pinning the training process to CPUs change a host-bound DeepSpeed step? (session 27)
# The host-placement probe (tools/probes/host_placement.py, first run 2026-12-06 on an H100 VM)
# timed a tiny eager step at 30-33 ms with all 16 CPUs allowed and 16-25 ms pinned to one CPU.
# This runs the same real DeepSpeed cases (tiny-llama, 12 layers of width 256: stage 3, stage 2
# with checkpointing, stage 3 with checkpointing; all host-bound) under different CPU placements,
# alternating (PIN_TAGS: all<N> all CPUs, four<N> the last four, one<N> the last one).
# Usage (device side, repository root): bash tools/device/pin_call.sh SECONDS  (carry .dsbench)
T0=$(date +%s)
TOTAL=${1:-300}
LAST=$(( $(nproc) - 1 ))
D=docs/validation/deepspeed/pin-1206
grep -m1 "model name" /proc/cpuinfo; nproc; nvidia-smi --query-gpu=name --format=csv,noheader
# One CPU alone cannot import torch + transformers + DeepSpeed within the runner's limit (session
# 27), so the placements are all CPUs against four, alternating. The device tool returns only a
# few files: each placement leaves one, $OUT/pin-<tag>.jsonl (its cases.jsonl).
for tag in ${PIN_TAGS:-all1 four1 all2 four2 all3 four3}; do
  LEFT=$(( TOTAL - ($(date +%s) - T0) ))
  [ "$LEFT" -lt 60 ] && { echo "skip $tag: ${LEFT}s left"; continue; }
  case $tag in
    all*) PIN="" ;;
    one*) PIN="taskset -c $LAST" ;;
    four*) PIN="taskset -c $((LAST - 3))-$LAST" ;;
  esac
  mkdir -p "$OUT/$tag"
  echo "== $tag (${PIN:-all CPUs}) ${LEFT}s left"
  OUT=$OUT/$tag $PIN bash .dsbench/go.sh 0 $(( LEFT < 110 ? LEFT : 110 )) $D/cases-$tag.jsonl 2>&1 | grep -E "sub |end |defer" | cut -c1-160
  mv "$OUT/$tag/cases.jsonl" "$OUT/pin-$tag.jsonl" 2>/dev/null
  [ -f "$OUT/pin-machine.json" ] || mv "$OUT/$tag/machine.json" "$OUT/pin-machine.json" 2>/dev/null
  rm -rf "$OUT/$tag"
done
echo "total $(( $(date +%s) - T0 ))s"
