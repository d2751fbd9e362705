#!/bin/bash
# One device call that measures the stack's host costs and real DeepSpeed host-bound steps on the
# same machine within minutes of each other, to tell a wrong host-cost mechanism from a host whose
# speed changes between days:
#   1. tools/probes/stack_costs.py (op kinds, family blocks, ZeRO-3 hooks and calls)  -> stack-A.json
#   2. the DeepSpeed cases through .dsbench/go.sh                                       -> cases.jsonl
#   3. stack_costs.py again                                                            -> stack-B.json
# and, all along, a once-a-second sample of the host (/proc/stat's CPU time split, steal included,
# the load average and the mean CPU clock) -> host-monitor.tsv; the CPU model -> lscpu.txt.
#   bash tools/device/same_day_host.sh MODELS CASES.jsonl CASES_S [STACK_S]
# MODELS: catalog ids for stack_costs' families; CASES_S: seconds for go.sh; STACK_S: each probe's cap.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
MODELS=$1; CASES=$2; CASES_S=$3; STACK_S=${4:-130}
mkdir -p "$OUT"
lscpu > "$OUT/lscpu.txt" 2>&1 || grep -m1 "model name" /proc/cpuinfo > "$OUT/lscpu.txt"
( while :; do
    c=$(head -1 /proc/stat); l=$(cut -d' ' -f1-3 /proc/loadavg)
    mhz=$(awk -F: '/cpu MHz/{s+=$2;n++} END{if(n) printf "%.0f", s/n}' /proc/cpuinfo)
    echo -e "$(date +%s.%N | cut -c1-14)\t$c\t$l\t$mhz"; sleep 1
  done ) > "$OUT/host-monitor.tsv" 2>/dev/null &
MON=$!
probe() {
  PYTHONPATH=$ROOT/.dsbench/site timeout "$STACK_S" python3 "$ROOT/tools/probes/stack_costs.py" \
    --models "$MODELS" --only op_kinds,families,zero3,zero3_calls --out "$OUT/$1" > "$OUT/$1.log" 2>&1
  echo "$1 rc=$? at $(( $(date +%s) - T0 ))s"; grep -E "done at" "$OUT/$1.log" | tail -3
}
T0=$(date +%s)
probe stack-A.json
bash "$ROOT/.dsbench/go.sh" 0 "$CASES_S" "$CASES"
probe stack-B.json
kill $MON
echo "total $(( $(date +%s) - T0 ))s"
