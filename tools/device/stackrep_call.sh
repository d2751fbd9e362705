#!/bin/bash
# Are the H100 profile's ZeRO-3 hook costs those of a slow spell? (session 29, registered in
# docs/validation/deepspeed/stackrep-1206e/README.md before any run.)
# Measures tools/probes/stack_costs.py's op_kinds, zero3 and zero3_calls sections in REPS separate
# processes, one after another, with the host's loop speed (probe_util.host_speed) before and after
# each, then (if time is left) nonmono-1206c's bloom-3b micro-batch 2 case once more.
# Usage (device side, repository root): [ONLY=sections] bash tools/device/stackrep_call.sh SECONDS [REPS]
# (ONLY: stack_costs.py --only sections; default op_kinds,zero3,zero3_calls; session 30's follow-up: op_kinds,families)
# (carry .dsbench: its site/ holds DeepSpeed 0.14.5). Every file goes back in $OUT/bundle.tgz.
T0=$(date +%s)
TOTAL=${1:-540}
REPS=${2:-3}
HERE=$PWD/.dsbench
export PYTHONPATH=$HERE/site:$PWD/tools/probes${PYTHONPATH:+:$PYTHONPATH}
export TORCH_EXTENSIONS_DIR=/tmp/torch_ext PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name --format=csv,noheader; grep -m1 "model name" /proc/cpuinfo; nproc; uptime
speed() {  # one line of JSON: the host's loop speed now, in a process of its own
  python3 -c "import json,probe_util;print(json.dumps(dict(tag='$1',t=round(__import__('time').time()),**probe_util.host_speed())))" >> "$OUT/host-speed.jsonl" 2>> "$OUT/host-speed.err"
  tail -1 "$OUT/host-speed.jsonl"
}
# The families section measures the models named by --models (stack_costs.py's default is none):
# dsplan profile's list (runtime/profiler/stack_probe.cc DefaultStackModels).
MODELS=${MODELS:-gpt2-xl,t5-3b,llama-2-7b,opt-2.7b,pythia-1.4b,qwen2-1.5b,bloom-3b,gemma-2b,phi-2,falcon-7b,gpt-j-6b,mistral-7b,bert-large-uncased,mixtral-8x7b}
for i in $(seq 1 "$REPS"); do
  LEFT=$(( TOTAL - ($(date +%s) - T0) ))
  [ "$LEFT" -lt 110 ] && { echo "skip rep $i: ${LEFT}s left"; break; }
  speed "before$i"
  MASTER_PORT=$((29600 + i)) timeout $(( LEFT - 15 )) python3 tools/probes/stack_costs.py \
    --only "${ONLY:-op_kinds,zero3,zero3_calls}" --models "$MODELS" --out "$OUT/stack-rep$i.json" 2> "$OUT/stack-rep$i.log"
  echo "rep $i rc=$? at $(( $(date +%s) - T0 ))s"; grep "done at" "$OUT/stack-rep$i.log"
  speed "after$i"
done
LEFT=$(( TOTAL - ($(date +%s) - T0) ))
if [ "$LEFT" -ge 90 ]; then
  grep '"mb": 2' docs/validation/deepspeed/nonmono-1206c/cases-nonmono.jsonl > /tmp/stackrep-case.jsonl
  mkdir -p "$OUT/case" && OUT=$OUT/case bash .dsbench/go.sh 0 "$LEFT" /tmp/stackrep-case.jsonl 2>&1 | grep -E "sub |end |defer" | cut -c1-160
  speed "after-case"
fi
python3 - "$OUT" <<'PYEOF'
import glob, json, sys
# per typical module (one submodule, two gathered tensors), forward and backward, in us
for f in sorted(glob.glob(sys.argv[1] + "/stack-rep*.json")):
    doc = json.load(open(f))
    fit = doc.get("zero3", {}).get("fit_stage3_minus_stage2", {})
    sums = {ph: round(1e6 * (fit[ph]["per_module_s"] + 2 * fit[ph]["per_param_s"])) for ph in ("fwd_s", "bwd_s") if ph in fit}
    print(f.split("/")[-1], "per module + 2 tensors (us):", sums, "calls:", {k: v for k, v in doc.get("zero3_calls", {}).items() if k.startswith("per_")}, "errors:", list(doc.get("errors", {})))
PYEOF
echo "total $(( $(date +%s) - T0 ))s"
find "$OUT" -name torch_ext.tgz -delete
tar -czf /tmp/call-bundle.tgz -C "$OUT" . && rm -rf "${OUT:?}"/* && mv /tmp/call-bundle.tgz "$OUT/bundle.tgz"
ls -la "$OUT"
