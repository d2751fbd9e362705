#!/bin/bash
# Writes the `stack:` section of profiles/h200-measured.yaml from the H200 machine's committed
# probe outputs, through the same code as `dsplan profile --stack` (runtime/profiler/
# stack_probe.cc), with a stand-in interpreter that hands each script's recorded output back:
#   stack_costs.py  docs/validation/stack/stack-costs-call2.json, with kernel-rates.json's kernel
#                   classes and stack-costs-call3.json's BERT and Mixtral blocks (the numbers
#                   compiled into simulator/stack_costs.cc; tests/runtime/stack_probe_test.cc
#                   checks that they convert to them)
#   torch_gemm.py   docs/validation/stack/torch-gemm-h200-bf16-gpu.json (h200-measured's bf16 rows
#                   through PyTorch, a busy-wait before each call: the GPU's time alone, as the
#                   sustained-load curve and the SDPA table are measured)
# The duty sweep and torch_sdpa.py are not re-run here (gpu.sustained_gemm and gpu.sdpa are in
# the profile already); their notes are expected.
# usage: tools/dev/h200_stack_section.sh BUILD/dsplan > section.yaml
set -euo pipefail
DSPLAN=${1:?usage: $0 path/to/dsplan}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
S=$ROOT/docs/validation/stack
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 - "$S" "$tmp/merged.json" <<'PY'
import json, sys
s, out = sys.argv[1], sys.argv[2]
doc = json.load(open(f"{s}/stack-costs-call2.json"))
doc["kernels"] = json.load(open(f"{s}/kernel-rates.json"))["kernels"]
call3 = json.load(open(f"{s}/stack-costs-call3.json"))
for fam in ("bert", "mixtral"):
    doc["families"][fam] = call3["families"][fam]
json.dump(doc, open(out, "w"))
PY
cat > "$tmp/python" <<PY
#!/bin/sh
if [ "\$1" = -c ]; then echo 2.11.0+cu130; echo 1; exit 0; fi
script=\$1; out=''
while [ \$# -gt 0 ]; do case \$1 in --out) out=\$2;; esac; shift; done
case \$script in
  */stack_costs.py) cp '$tmp/merged.json' "\$out";;
  */torch_gemm.py) cp '$S/torch-gemm-h200-bf16-gpu.json' "\$out";;
  *) exit 1;;
esac
PY
chmod +x "$tmp/python"
DSPLAN_DATA_DIR=$ROOT "$DSPLAN" profile --test-sizes --base h200-measured --only cpu-adam --stack \
  --python "$tmp/python" --out "$tmp/p.yaml" >"$tmp/log" 2>&1 || { cat "$tmp/log" >&2; exit 1; }
grep -E "^# (stack|the base)" "$tmp/log" >&2 || true
# The section: from the top-level `stack:` key to the next top-level key (or the end).
awk '/^stack:/{on=1} on && /^[a-z_]+:/ && !/^stack:/{on=0} on' "$tmp/p.yaml"
