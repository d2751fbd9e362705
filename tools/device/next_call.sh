#!/bin/bash
# The next device call (written in session 26, when no machine came): what to measure, by card.
# H200: loss kernels + stack kernel rates (~30 s), then fresh sets 12 (emuworld-1206), 11 (band3-1206) and smallkp's H200 cases.
# H100: the rest of fresh set 14 (emuworld-h100b-1206), then pin_call.sh (all CPUs vs four). PLACEMENT=1 adds host_placement.py (~60 s).
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
  bash .dsbench/go.sh 0 $LEFT docs/validation/deepspeed/emuworld-1206/cases-plans.jsonl docs/validation/deepspeed/band3-1206/cases-plans.jsonl docs/validation/deepspeed/smallkp-1206/cases-kprof.jsonl 2>&1 | tail -30
else
  # Fresh set 14's four cases that did not run in session 27 (done.txt skips the eight that did),
  # then the pinning question (tools/device/pin_call.sh: all CPUs against four, alternating).
  cat docs/validation/deepspeed/emuworld-h100b-1206/results-*.jsonl | python3 -c "import json,sys; [print(json.loads(l)['id']) for l in sys.stdin if l.strip()]" > .dsbench/done.txt
  mkdir -p $OUT/set14
  OUT=$OUT/set14 bash .dsbench/go.sh 0 200 docs/validation/deepspeed/emuworld-h100b-1206/cases-plans.jsonl 2>&1 | grep -E "sub |end |defer" | cut -c1-170
  mv $OUT/set14/cases.jsonl $OUT/set14-cases.jsonl; rm -rf $OUT/set14; rm -f .dsbench/done.txt
  LEFT=$((${1:-585} - ($(date +%s) - T0) - 20))
  bash tools/device/pin_call.sh $LEFT 2>&1 | tail -24
fi
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader
echo "total $(( $(date +%s) - T0 ))s"
# The device tool returns only a few files (8 came back in session 27, the rest were dropped):
# everything goes back as one archive, cases.jsonl files included. torch_ext.tgz (19 MB) is over
# its size limit anyway.
find "$OUT" -name torch_ext.tgz -delete
tar -czf /tmp/call-bundle.tgz -C "$OUT" . && rm -rf "${OUT:?}"/* && mv /tmp/call-bundle.tgz "$OUT/bundle.tgz"
ls -la "$OUT"
