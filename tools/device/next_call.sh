#!/bin/bash
# The next device call (written in session 26, when no machine came; updated session 28): what to measure, by card.
# H200: loss kernels + stack kernel rates (~30 s), then fresh set 12 (emuworld-1206, the main job's plan first), tied-1206b
# (bloom-7b1 stage 3 at mb 1 and 2), fresh set 11 (band3-1206) and smallkp's H200 cases.
# H100: stackrep-1206e (tools/device/stackrep_call.sh: the H100 profile's ZeRO-3 stack costs in three processes).
# PLACEMENT=1 adds host_placement.py (~60 s).
# Usage (device side, repository root): bash tools/device/next_call.sh SECONDS; stage dist/ with
# tools/device/stage.sh and carry [".dsbench", "dist"] (.dsbench: cp tools/device/dsbench/* .dsbench/ plus site/).
T0=$(date +%s)
G=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "GPU: $G"
grep -m1 "model name" /proc/cpuinfo; nproc; uptime
export LD_LIBRARY_PATH=$PWD/dist${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
DSPLAN_DATA_DIR=$PWD dist/dsplan --model gpt2 --gpus 1 > $OUT/nvml-plan.txt 2>&1; echo "plan rc=$?"
head -12 $OUT/nvml-plan.txt
DSPLAN_DATA_DIR=$PWD dist/dsplan --model gpt2 --gpus 1 --json > $OUT/nvml-plan.json 2>$OUT/nvml-plan-json.err; echo "json rc=$?"
python3 -c "import json;d=json.load(open('$OUT/nvml-plan.json'));print('hardware:',{k:v for k,v in d['hardware'].items() if k in ('name','advice','memory_gib')})" 2>&1 | head -3
[ -n "$PLACEMENT" ] && timeout 100 python3 tools/probes/host_placement.py --reps 20 --out $OUT/host-placement.json 2> $OUT/host-placement.log; echo "placement rc=$?"; cat $OUT/host-placement.log | tail -14
if echo "$G" | grep -q H200; then
  timeout 60 python3 tools/probes/loss_kernels.py --out $OUT/loss-kernels-h200.json > /dev/null 2> $OUT/loss-kernels-h200.log; echo "loss rc=$?"
  timeout 60 python3 tools/probes/stack_costs.py --no-deepspeed --only kernels --out $OUT/stack-kernels-h200.json > $OUT/stack-kernels-h200.log 2>&1; echo "kernels rc=$?"
  LEFT=$((${1:-585} - ($(date +%s) - T0)))
  bash .dsbench/go.sh 0 $LEFT docs/validation/deepspeed/emuworld-1206/cases-plans.jsonl docs/validation/deepspeed/tied-1206b/cases-tied.jsonl docs/validation/deepspeed/band3-1206/cases-plans.jsonl docs/validation/deepspeed/smallkp-1206/cases-kprof.jsonl 2>&1 | tail -30
else
  # H100: stackrep-1206e (registered session 29): the ZeRO-3 stack costs again, three processes.
  bash tools/device/stackrep_call.sh $((${1:-585} - ($(date +%s) - T0) - 20))
  exit $?  # stackrep_call.sh bundles $OUT itself
fi
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader
echo "total $(( $(date +%s) - T0 ))s"
# The device tool returns only a few files (8 came back in session 27, the rest were dropped):
# everything goes back as one archive, cases.jsonl files included. torch_ext.tgz (19 MB) is over
# its size limit anyway.
find "$OUT" -name torch_ext.tgz -delete
tar -czf /tmp/call-bundle.tgz -C "$OUT" . && rm -rf "${OUT:?}"/* && mv /tmp/call-bundle.tgz "$OUT/bundle.tgz"
ls -la "$OUT"
