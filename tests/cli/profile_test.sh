#!/usr/bin/env bash
# End-to-end tests of `dsplan profile` at test sizes (--test-sizes: seconds, numbers meaningless).
# Usage: profile_test.sh PATH/TO/dsplan SOURCE_DIR
set -u
bin=$1
export DSPLAN_DATA_DIR=$2
tmp=$(mktemp -d -p "${TMPDIR:-/tmp}")
# The NVMe test needs a folder on a disk (O_DIRECT); the build folder is one.
disk=$(mktemp -d -p "$PWD")
trap 'rm -rf "$tmp" "$disk"' EXIT
. "$(dirname "$0")/lib.sh"

yaml() {  # yaml PYTHON-EXPR FILE: evaluates EXPR with y = the parsed YAML file
  python3 -c "import sys, yaml; y = yaml.safe_load(open('$2')); sys.exit(0 if ($1) else 1)" 2>/dev/null
}

have_pyyaml=0
python3 -c "import yaml" 2>/dev/null && have_pyyaml=1

# A CPU-and-NVMe profile on the H200 datasheet base.
run profile --test-sizes --base h200-sxm --only cpu-adam,host,nvme,gemm --nvme-path "$disk" \
    --out "$tmp/box.yaml"
check "profile exits 0" test "$rc" -eq 0
check "profile writes the file" test -s "$tmp/box.yaml"
check "profile names the file" grep -q "wrote $tmp/box.yaml (box)" "$tmp/out"
check "profile prints the CPU Adam table" grep -q "^# CPU Adam" "$tmp/out"
check "profile prints units" grep -q "(M elem/s)" "$tmp/out"
if grep -q "no CUDA device" "$tmp/out"; then
  check "no-GPU message names the base" \
      grep -q "GPU measurements skipped (gemm, hbm, h2d/d2h, nccl); those stay datasheet values from h200-sxm" "$tmp/out"
fi
check "the NVMe table or its reason is printed" grep -qE "^# NVMe at|NVMe not measured" "$tmp/out"
check "left no NVMe test file" test -z "$(ls -A "$disk")"
# The profile's provenance names the commit the binary was built from (read at every build, not
# at configure time: a binary built after a new commit must not name the old one).
if head=$(git -C "$DSPLAN_DATA_DIR" rev-parse --short HEAD 2>/dev/null); then
  check "profile names the binary's commit" grep -q "dsplan [0-9.]* ($head)" "$tmp/box.yaml"
  "$bin" --version > "$tmp/version" 2>&1
  check "--version names the source commit" grep -q "($head)" "$tmp/version"
fi
if [ "$have_pyyaml" -eq 1 ]; then
  check "profile is measured for CPU Adam" \
      yaml "'measured' in y['host']['cpu_adam_source'] and len(y['host']['cpu_adam']) == 2" "$tmp/box.yaml"
  check "profile keeps the base's NVLink numbers" \
      yaml "y['base'] == 'h200-sxm' and len(y['links']['collectives']) == 6" "$tmp/box.yaml"
fi
# The written profile is a valid profile: `profile --base FILE` loads it.
run profile --test-sizes --base "$tmp/box.yaml" --only cpu-adam --out "$tmp/again.yaml"
check "a written profile loads as a base" test "$rc" -eq 0

# NVMe on tmpfs: a clear reason, and the rest is still measured and written.
if [ -d /dev/shm ] && [ "$(stat -f -c %T /dev/shm)" = tmpfs ]; then
  run profile --test-sizes --base h200-sxm --only cpu-adam,nvme --nvme-path /dev/shm \
      --out "$tmp/shm.yaml"
  check "tmpfs NVMe path still exits 0" test "$rc" -eq 0
  check "tmpfs NVMe path says why" grep -q "is on tmpfs.*O_DIRECT" "$tmp/out"
  check "tmpfs NVMe path still writes the profile" test -s "$tmp/shm.yaml"
fi

# --stack without an interpreter, or with one that has no torch: one line says so, the profile is
# still written and has no stack section.
run profile --test-sizes --base h200-sxm --only cpu-adam --stack --python /nonexistent-dsplan-py \
    --out "$tmp/nostack.yaml"
check "--stack without python exits 0" test "$rc" -eq 0
check "--stack without python says so" \
    grep -q "stack not measured: '/nonexistent-dsplan-py' not found.*no stack section" "$tmp/out"
check "--stack without python writes the profile" test -s "$tmp/nostack.yaml"
check "--stack without python writes no stack section" bash -c "! grep -q '^stack:' '$tmp/nostack.yaml'"
check "the summary names the built-in stack costs" \
    grep -q "stack costs: built-in, measured on H200 with PyTorch 2.11 / DeepSpeed 0.14.5" "$tmp/out"
printf '#!/bin/sh\necho "ModuleNotFoundError: No module named torch" >&2\nexit 1\n' >"$tmp/py-no-torch"
chmod +x "$tmp/py-no-torch"
run profile --test-sizes --base h200-sxm --only cpu-adam --stack --python "$tmp/py-no-torch" \
    --out "$tmp/notorch.yaml"
check "--stack without torch exits 0" test "$rc" -eq 0
check "--stack without torch says why in one line" \
    grep -q "stack not measured: '$tmp/py-no-torch' cannot import torch (ModuleNotFoundError: No module named torch)" "$tmp/out"
check "--stack without torch writes no stack section" bash -c "! grep -q '^stack:' '$tmp/notorch.yaml'"
check "--stack without torch says the GEMM sustained-load curve is not measured" \
    grep -q "GEMM sustained-load curve not measured (needs python with torch): GEMMs priced at the table's rate" "$tmp/out"

# --stack-models takes catalog names and config.json paths (a family the catalog lacks): each is
# loaded before anything is measured, a bad one is one line and exit 2, and paths reach
# stack_costs.py absolute. A stand-in interpreter records the script's arguments and fails.
cp "$DSPLAN_DATA_DIR/docs/validation/deepspeed/qwen3-1215/qwen3-0.6b.json" "$tmp/qwen3.json"
{
  echo '#!/bin/sh'
  echo 'if [ "$1" = -c ]; then echo 2.11.0+cu130; echo 1; exit 0; fi'
  echo "case \$1 in */stack_costs.py) echo \"\$@\" >> '$tmp/stack-args';; esac"
  echo 'exit 1'
} >"$tmp/py-args"
chmod +x "$tmp/py-args"
(cd "$tmp" && "$bin" profile --test-sizes --base h200-sxm --only cpu-adam --stack --python "$tmp/py-args" \
    --stack-models gpt2,qwen3.json --out "$tmp/qwen3-stack.yaml" >"$tmp/out" 2>"$tmp/err")
rc=$?
check "--stack-models with a config path exits 0" test "$rc" -eq 0
check "the config path reaches stack_costs.py absolute, beside the catalog name" \
    grep -q -- "--models gpt2,$tmp/qwen3.json " "$tmp/stack-args"
run profile --test-sizes --base h200-sxm --only cpu-adam --stack --python "$tmp/py-args" \
    --stack-models gpt2,no-such-model --out "$tmp/bad-stack.yaml"
check "--stack-models with an unknown model exits 2" test "$rc" -eq 2
check "--stack-models names the bad model in one line" \
    bash -c "grep -c . '$tmp/err' | grep -qx 1 && grep -q -- \"--stack-models.*no-such-model\" '$tmp/err'"
check "--stack-models with an unknown model writes nothing" test ! -e "$tmp/bad-stack.yaml"
check "--stack-models with an unknown model measures nothing" test ! -s "$tmp/out"
printf '{"model_type": "qwen3", "hidden_size": "wide"}' >"$tmp/bad-qwen3.json"
run profile --test-sizes --base h200-sxm --only cpu-adam --stack --python "$tmp/py-args" \
    --stack-models "$tmp/bad-qwen3.json" --out "$tmp/bad-stack.yaml"
check "--stack-models with a bad config exits 2 naming its key" \
    bash -c "test $rc -eq 2 && grep -q 'hidden_size' '$tmp/err'"
# The probes' loader reads the same path as the catalog entry's config.
check "hf_models.load_catalog reads a config.json path" python3 -c "
import sys; sys.path.insert(0, '$DSPLAN_DATA_DIR/tools/probes'); import hf_models
c = hf_models.load_catalog('$DSPLAN_DATA_DIR/models', '$tmp/qwen3.json')
sys.exit(0 if c['model_type'] == 'qwen3' and c['head_dim'] == 128 else 1)"

# The GEMM duty sweep (gemm_sustained.py --duty-sweep) with stand-in interpreters: stack_costs.py
# fails, the sweep copies a real H200 output (or fails). The base's curve (h200-measured's,
# transcribed from the other sweep, gemm-duty-h200.json) is replaced, and the output says so.
sweep_py() {  # sweep_py FILE SWEEP-COMMAND
  {
    echo '#!/bin/sh'
    echo 'if [ "$1" = -c ]; then echo 2.11.0+cu130; echo 1; exit 0; fi'
    echo 'script=$1; out=""; sweep=""'
    echo 'while [ $# -gt 0 ]; do case $1 in --out) out=$2;; --duty-sweep) sweep=1;; esac; shift; done'
    echo 'case $script in'
    echo "  */gemm_sustained.py) [ -n \"\$sweep\" ] || exit 5; $2;;"
    echo '  *) exit 1;;'
    echo 'esac'
  } >"$1"
  chmod +x "$1"
}
sweep_py "$tmp/py-sweep" "cp '$DSPLAN_DATA_DIR/docs/validation/stack/gemm-duty-h200-b.json' \"\$out\""
run profile --test-sizes --base h200-measured --only cpu-adam --stack --python "$tmp/py-sweep" \
    --out "$tmp/sweep.yaml"
check "--stack with the sweep exits 0" test "$rc" -eq 0
check "the base's curve is said to be replaced" \
    grep -q "the base's GEMM sustained-load curve (gpu.sustained_gemm) is not carried over (it describes the GPU it was measured on); --stack measures this one" "$tmp/out"
check "the measured curve is printed" \
    grep -q "^# GEMM sustained-load curve: 1.01x at duty 0.400 to 1.19x at duty 0.999: tools/probes/gemm_sustained.py --duty-sweep: .*, 6 points;" "$tmp/out"
check "the stack script's failure is still said" \
    grep -q "stack not measured: .*stack_costs.py exited with 1" "$tmp/out"
check "the written curve is this sweep's rows" \
    grep -qF -- "- [0.4002800051268842, 1.0074043714732273]" "$tmp/sweep.yaml"
check "the written curve's source is the sweep, measured" \
    grep -q "sustained_gemm_source: {measured: \"tools/probes/gemm_sustained.py --duty-sweep: pythia-1.4b fc1 mb31.*2026-12-04; dsplan " "$tmp/sweep.yaml"
check "the base's hand-written curve is gone" \
    bash -c "! grep -q 'docs/validation/stack/gemm-duty-h200.json' '$tmp/sweep.yaml'"
check "the summary counts the curve as measured" grep -q "measured (.*sustained GEMM clock" "$tmp/out"
check "a failing torch_sdpa.py says so" \
    grep -q "PyTorch's fused attention not measured (.*torch_sdpa.py exited with 1): plans price SDPA at gpu.attention_efficiency (no gpu.sdpa)" "$tmp/out"
check "a failing torch_sdpa.py writes no SDPA table" bash -c "! grep -q '^  sdpa' '$tmp/sweep.yaml'"
run profile --test-sizes --base "$tmp/sweep.yaml" --only cpu-adam --out "$tmp/sweep-again.yaml"
check "a profile with a measured curve loads as a base" test "$rc" -eq 0
# The sweep fails: no curve (not the base's either), and one note says so.
sweep_py "$tmp/py-sweep-fails" "exit 1"
run profile --test-sizes --base h200-measured --only cpu-adam --stack \
    --python "$tmp/py-sweep-fails" --out "$tmp/nosweep.yaml"
check "a failing sweep exits 0" test "$rc" -eq 0
check "a failing sweep says so" \
    grep -q "GEMM sustained-load curve not measured (.*gemm_sustained.py exited with 1): GEMMs priced at the table's rate" "$tmp/out"
check "a failing sweep writes no curve" bash -c "! grep -q 'sustained_gemm' '$tmp/nosweep.yaml'"
# Without --stack the base's curve is not carried over either.
run profile --test-sizes --base h200-measured --only cpu-adam --out "$tmp/nocurve.yaml"
check "without --stack the base's curve is said to be dropped" \
    grep -q "the base's GEMM sustained-load curve (gpu.sustained_gemm) is not carried over (it describes the GPU it was measured on); measure this one with --stack" "$tmp/out"
check "without --stack no curve is written" bash -c "! grep -q 'sustained_gemm' '$tmp/nocurve.yaml'"

# A measured stack section (stack_costs.py's real H200 output, with its kernel rates): written,
# and the output says what one run's host costs are good for.
python3 -c "
import json
s = '$DSPLAN_DATA_DIR/docs/validation/stack/'
d = json.load(open(s + 'stack-costs-call2.json'))
d['kernels'] = json.load(open(s + 'kernel-rates.json'))['kernels']
json.dump(d, open('$tmp/stack-merged.json', 'w'))"
{
  echo '#!/bin/sh'
  echo 'if [ "$1" = -c ]; then echo 2.11.0+cu130; echo 1; exit 0; fi'
  echo 'script=$1; out=""'
  echo 'while [ $# -gt 0 ]; do case $1 in --out) out=$2;; esac; shift; done'
  echo 'case $script in'
  echo "  */stack_costs.py) cp '$tmp/stack-merged.json' \"\$out\";;"
  echo '  *) exit 1;;'
  echo 'esac'
} >"$tmp/py-stack"
chmod +x "$tmp/py-stack"
run profile --test-sizes --base h200-measured --only cpu-adam --stack --python "$tmp/py-stack" \
    --out "$tmp/stack.yaml"
check "--stack with stack_costs.py exits 0" test "$rc" -eq 0
check "the measured stack is named" grep -q "^# stack: tools/probes/stack_costs.py" "$tmp/out"
check "the stack's host costs are said to be one run's" \
    grep -q "stack host costs are this run's: they repeat to about 10 % between runs" "$tmp/out"
check "the profile has the measured stack section" grep -q "^stack:" "$tmp/stack.yaml"

# PyTorch's fused attention (torch_sdpa.py) with a stand-in that copies the H200's real output:
# the table is written, labelled measured; the base's table is said to be replaced.
{
  echo '#!/bin/sh'
  echo 'if [ "$1" = -c ]; then echo 2.11.0+cu130; echo 1; exit 0; fi'
  echo 'script=$1; out=""'
  echo 'while [ $# -gt 0 ]; do case $1 in --out) out=$2;; esac; shift; done'
  echo 'case $script in'
  echo "  */torch_sdpa.py) cp '$DSPLAN_DATA_DIR/docs/validation/stack/torch-sdpa-h200.json' \"\$out\";;"
  echo '  *) exit 1;;'
  echo 'esac'
} >"$tmp/py-sdpa"
chmod +x "$tmp/py-sdpa"
run profile --test-sizes --base h200-measured --only cpu-adam --stack --python "$tmp/py-sdpa" \
    --out "$tmp/sdpa.yaml"
check "--stack with torch_sdpa.py exits 0" test "$rc" -eq 0
check "the base's SDPA table is said to be replaced" \
    grep -q "the base's PyTorch attention table (gpu.sdpa) is not carried over (it describes the GPU and PyTorch it was measured with); --stack measures this one" "$tmp/out"
check "the measured SDPA table is printed" \
    grep -q "^# PyTorch's fused attention: 300 points: tools/probes/torch_sdpa.py: " "$tmp/out"
check "the written SDPA table has the file's rows" \
    grep -qE -- "- \[bf16, 128, true, 1024, 256, 446369000000000(\.0)?, 320329000000000(\.0)?\]" "$tmp/sdpa.yaml"
check "the written SDPA table's source is measured" \
    grep -q "sdpa_source: {measured: \"tools/probes/torch_sdpa.py: " "$tmp/sdpa.yaml"
check "the summary counts attention as measured" grep -q "measured (.*attention" "$tmp/out"
check "a failing sweep beside it is still said" \
    grep -q "GEMM sustained-load curve not measured (.*gemm_sustained.py exited with 1)" "$tmp/out"
run profile --test-sizes --base "$tmp/sweep.yaml" --only cpu-adam --out "$tmp/nosdpa.yaml"
check "without --stack no SDPA table is written" bash -c "! grep -q '^  sdpa' '$tmp/nosdpa.yaml'"

# Bad input: exit 2 before measuring, with the reason.
run profile --test-sizes --base h200-sxm --out /nonexistent-dsplan-dir/p.yaml
check "unwritable --out exits 2" test "$rc" -eq 2
check "unwritable --out is named" grep -q "/nonexistent-dsplan-dir" "$tmp/err"
check "unwritable --out measures nothing" test ! -s "$tmp/out"
run profile --test-sizes --base h200-smx --out "$tmp/x.yaml"
check "unknown --base exits 2" test "$rc" -eq 2
check "unknown --base suggests" grep -q "did you mean h200-sxm" "$tmp/err"
run profile --test-sizes --only gemm,warp --out "$tmp/x.yaml"
check "unknown --only section exits 2" test "$rc" -eq 2
check "unknown --only lists sections" grep -q "valid: context, gemm" "$tmp/err"

echo "profile_test: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
