#!/bin/bash
# Session 28's H100 call: nonmono-1206c (bloom-3b stage 3 at mb 1, 2, 3, one engine each), then
# set 14's last case (opt-2.7b x2; done.txt skips the eleven that ran). One bundle.tgz back.
# Usage (device side): bash tools/device/nonmono_call.sh SECONDS, carry [".dsbench"].
T0=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
cat docs/validation/deepspeed/emuworld-h100b-1206/results-*.jsonl | python3 -c "import json,sys; [print(json.loads(l)['id']) for l in sys.stdin if l.strip()]" > .dsbench/done.txt
bash .dsbench/go.sh 0 $(( ${1:-430} - 10 )) docs/validation/deepspeed/nonmono-1206c/cases-nonmono.jsonl docs/validation/deepspeed/emuworld-h100b-1206/cases-plans.jsonl 2>&1 | grep -E "sub |end |defer|restored|error|Error" | cut -c1-200
rm -f .dsbench/done.txt
echo "total $(( $(date +%s) - T0 ))s"
find "$OUT" -name torch_ext.tgz -delete
tar -czf /tmp/call-bundle.tgz -C "$OUT" . && rm -rf "${OUT:?}"/* && mv /tmp/call-bundle.tgz "$OUT/bundle.tgz"
ls -la "$OUT"
