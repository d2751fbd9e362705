#!/usr/bin/env bash
# Every command's --json against its published schema (docs/schema/*.schema.json), with
# python3-jsonschema (scripts/setup.sh installs it). A key renamed or dropped without updating
# the schema, or a schema that no longer matches, fails here.
# Usage: json_schema_test.sh PATH/TO/dsplan SOURCE_DIR
set -u
bin=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
src=$2
export DSPLAN_DATA_DIR=$src
fx=$src/tests/fixtures/ds_configs
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"
cd "$tmp" || exit 1
schemas=$src/docs/schema
valid() { python3 "$src/tests/cli/validate_json.py" "$schemas" "$1" "$tmp/out"; }
used=()
conforms() {  # conforms NAME SCHEMA ARGS...
  local name=$1 schema=$2
  shift 2
  run "$@"
  used+=("$schema")
  check "$name: valid JSON" python3 -c "import json; json.load(open('$tmp/out'))"
  check "$name matches $schema" valid "$schema"
}

check "python3-jsonschema is installed" python3 -c "import jsonschema"
conforms "plan" plan.schema.json --model gpt2 --gpus 2 --json
check "plan JSON is versioned" json "j['schema'] == 'dsplan/plan' and j['schema_version'] == 1"
conforms "plan, several nodes" plan.schema.json --model gpt2 --gpus 2 --nodes 2 --json
conforms "plan, nothing fits" plan.schema.json --model llama-2-70b --gpus 1 --no-offload --stage 0 --json
conforms "plan --objective cost" plan.schema.json --model gpt2 --gpus 2 --objective cost --price-per-gpu-hour 2 --json
conforms "simulate" simulate.schema.json simulate --model gpt2 --gpus 2 --ds-config "$fx/calib_gpt2-xl_s2_mb4.json" --json
check "simulate JSON is versioned" json "j['schema'] == 'dsplan/simulate' and j['schema_version'] == 1"
conforms "simulate, stage 1 on 4 GPUs" simulate.schema.json simulate --model gpt2 --gpus 4 --ds-config "$fx/calib_gpt2-xl_s1_mb4.json" --json
check "stage 1 on 4 GPUs compares every rank and reports the one that allocates the most" json "[r['rank'] for r in j['gpu']['ranks_compared']] == [0, 1, 2, 3] and j['gpu']['peak_allocated_bytes'] == max(r['peak_allocated_bytes'] for r in j['gpu']['ranks_compared']) and j['gpu']['rank'] in [r['rank'] for r in j['gpu']['ranks_compared']]"
conforms "simulate --rank" simulate.schema.json simulate --model gpt2 --gpus 4 --ds-config "$fx/calib_gpt2-xl_s1_mb4.json" --rank 2 --json
check "simulate --rank predicts that rank and compares none" json "j['gpu']['rank'] == 2 and 'ranks_compared' not in j['gpu']"
conforms "simulate, HF auto config" simulate.schema.json simulate --model gpt2-xl --gpus 4 --ds-config "$fx/hf_zero2_auto.json" --json
conforms "simulate --segments" simulate.schema.json simulate --model gpt2 --gpus 2 --ds-config "$fx/calib_gpt2-xl_s3_mb4.json" --segments --json
check "simulate --segments lists the replay's segments, growing to the predicted reserved peak" json "len(j['allocator_segments']) > 0 and all(a['reserved_after_bytes'] < b['reserved_after_bytes'] for a, b in zip(j['allocator_segments'], j['allocator_segments'][1:])) and j['allocator_segments'][-1]['reserved_after_bytes'] == j['gpu']['peak_reserved_bytes'] and {s['step'] for s in j['allocator_segments']} <= {1, 2}"
check "simulate without --segments has none" sh -c "'$bin' simulate --model gpt2 --gpus 2 --ds-config '$fx/calib_gpt2-xl_s3_mb4.json' --json | python3 -c 'import json,sys; sys.exit(\"allocator_segments\" in json.load(sys.stdin))'"
conforms "check" check.schema.json check --model gpt2 --gpus 2 --ds-config "$fx/calib_gpt2-xl_s3_mb4.json" --json
check "check JSON is versioned" json "j['schema'] == 'dsplan/check' and j['schema_version'] == 1"
conforms "models" models.schema.json models --json
conforms "model" model.schema.json model gpt2 --json
conforms "model --times" model.schema.json model gpt2 --times --json
check "model JSON is versioned" json "j['schema'] == 'dsplan/model' and j['schema_version'] == 1"
conforms "estimate" estimate.schema.json estimate --model gpt2 --gpus 2 --json
check "estimate JSON is versioned" json "j['schema'] == 'dsplan/estimate' and j['schema_version'] == 1"
conforms "estimate --params" estimate.schema.json estimate --params 7000000000 --gpus 8 --json
conforms "accuracy" accuracy.schema.json accuracy --json
check "accuracy JSON is versioned" json "j['schema'] == 'dsplan/accuracy' and j['schema_version'] == 1"
# Two record files are one set: their rows together, the host-share classes over all of them.
conforms "accuracy, two files" accuracy.schema.json accuracy --json \
  --calibration "$src/tests/fixtures/calibration/deepspeed-h200.jsonl" \
  --calibration "$src/docs/validation/deepspeed/plans-1203c/records-plans-h200.jsonl"
check "accuracy of two files has both files' rows" json "len(j['rows']) == 18 + 7"
check "by_file splits the runs per file" json "[(f['runs'], f['timed_runs']) for f in j['by_file']] == [(18, 18), (7, 3)]"
check "each row names its file" json "sorted(set(r['file'].split('/')[-2] for r in j['rows'])) == ['calibration', 'plans-1203c']"
check "the host-share classes count the timed rows" \
  json "sum(c['runs'] for c in j['step_error_by_host_share']) == 18 + 3"
# The calibration set's three runs with the optimizer offloaded (gpt2-xl at stages 2 and 3,
# t5-large at stage 2) form their own class, whatever their host-bound share.
check "runs with the optimizer on the CPU are a class of their own" \
  json "[c['runs'] for c in j['step_error_by_host_share'] if c['class'] == 'optimizer on the CPU'] == [sum('offload optimizer->cpu' in r['config'] and r['step_error'] is not None for r in j['rows'])] == [3]"
check "instrumented runs have no step error" \
  json "all(r['step_error'] is None for r in j['rows'] if r['id'].endswith('_memhist'))"
# Every published schema is exercised (prediction.schema.json through the others' $ref).
for f in "$schemas"/*.schema.json; do
  b=$(basename "$f")
  [ "$b" = prediction.schema.json ] && continue
  check "$b is checked by this test" bash -c "printf '%s\n' ${used[*]} | grep -qx '$b'"
done

finish
