#!/usr/bin/env bash
# End-to-end tests of the planner command (`dsplan --model M --gpus G`) and `dsplan check`:
# the emitted ds_config.json simulates to the planner's own prediction, the JSON keys issue 4
# promises, --hf-auto, hostfile, --quiet, pins, and bad input (exit 2, one line naming the flag).
# Usage: plan_cli_test.sh PATH/TO/dsplan SOURCE_DIR
set -u
bin=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")  # absolute: the script cds below
export DSPLAN_DATA_DIR=$2
fx=$2/tests/fixtures/ds_configs
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"
# The planner writes ds_config.json into the working directory by default: keep it in $tmp.
cd "$tmp" || exit 1

# --- emit, then simulate the emitted file: the same prediction as the planner's ---
run --model gpt2 --gpus 2 --emit "$tmp/ds.json"
check "plan exits 0" test "$rc" -eq 0
check "plan writes the config" test -s "$tmp/ds.json"
check "the config is a DeepSpeed JSON object with batch keys and a ZeRO block" python3 -c "
import json, sys
c = json.load(open('$tmp/ds.json'))
mb, gas = c['train_micro_batch_size_per_gpu'], c['gradient_accumulation_steps']
ok = isinstance(mb, int) and isinstance(gas, int) and mb >= 1 and gas >= 1
ok = ok and c.get('train_batch_size', mb * gas * 2) == mb * gas * 2
ok = ok and isinstance(c['zero_optimization']['stage'], int)
sys.exit(0 if ok else 1)"
check "the table says where it wrote the config" grep -q "$tmp/ds.json" "$tmp/out"
check "the table prints a deepspeed launch command" grep -q "deepspeed" "$tmp/out"
check "no ds_config.json in the working directory when --emit names a file" test ! -e "$tmp/ds_config.json"

run --model gpt2 --gpus 2 --json --no-emit
check "plan --json exits 0" test "$rc" -eq 0
cp "$tmp/out" "$tmp/plan.json"
check "--no-emit writes nothing" test ! -e "$tmp/ds_config.json"
check "--json says nothing was emitted" json "j['emitted'] == ''"
best_tps=$(python3 -c "import json; print(json.load(open('$tmp/plan.json'))['recommendations'][0]['step']['tokens_per_s'])")
ckpt=$(python3 -c "import json; print('--gradient-checkpointing' if json.load(open('$tmp/plan.json'))['recommendations'][0]['plan']['gradient_checkpointing'] else '')")
# shellcheck disable=SC2086  # $ckpt is one flag or nothing
run simulate --model gpt2 --gpus 2 --ds-config "$tmp/ds.json" --json $ckpt
check "simulate of the emitted config exits 0" test "$rc" -eq 0
check "the emitted config fits" json "j['fits'] is True"
check "simulated tokens/s = the planner's best ($best_tps) within 0.1%" \
  json "abs(j['step']['tokens_per_s'] - $best_tps) <= 1e-3 * $best_tps"
check "the emitted config is the best recommendation's ds_config" python3 -c "
import json, sys
emitted = json.load(open('$tmp/ds.json'))
rec = json.load(open('$tmp/plan.json'))['recommendations'][0]['ds_config']
sys.exit(0 if emitted == rec else 1)"

# --- plan --json: the keys issue 4 promises ---
cp "$tmp/plan.json" "$tmp/out"
check "recommendations is a non-empty list" json "isinstance(j['recommendations'], list) and len(j['recommendations']) >= 1"
check "at most 5 recommendations by default" json "len(j['recommendations']) <= 5"
check "each recommendation has ds_config, step and gpu" \
  json "all(isinstance(r['ds_config'], dict) and 'tokens_per_s' in r['step'] and 'peak_total_bytes' in r['gpu'] for r in j['recommendations'])"
check "every recommendation fits under 98% of the GPU" \
  json "all(r['fits'] is True and r['gpu']['peak_total_bytes'] <= 0.98 * r['gpu']['capacity_bytes'] for r in j['recommendations'])"
check "recommendations are best first (choices within 2% count as a tie, broken by the narrower band, then memory)" \
  json "all(a['step']['tokens_per_s'] >= 0.98 * b['step']['tokens_per_s'] and (a['step']['tokens_per_s'] >= b['step']['tokens_per_s'] or a['step']['time_band']['high'] < b['step']['time_band']['high'] - 0.01 or (abs(a['step']['time_band']['high'] - b['step']['time_band']['high']) <= 0.01 and a['gpu']['peak_total_bytes'] <= b['gpu']['peak_total_bytes'])) for a, b in zip(j['recommendations'], j['recommendations'][1:]))"
check "on 2 GPUs each band marks its exposed communication as outside the one-GPU record" \
  json "all(abs(r['step']['time_band']['unvalidated_comm_share'] - r['step']['breakdown_s']['exposed_comm'] / r['step']['time_s']) <= 1e-9 for r in j['recommendations'])"
check "each recommendation's ds_config matches its plan" \
  json "all(r['ds_config']['train_micro_batch_size_per_gpu'] == r['plan']['micro_batch'] and r['ds_config']['gradient_accumulation_steps'] == r['plan']['grad_accum'] and r['ds_config']['zero_optimization']['stage'] == r['plan']['stage'] for r in j['recommendations'])"
check "rejected is a list of family + reason" \
  json "isinstance(j['rejected'], list) and all(isinstance(r['family'], str) and isinstance(r['reason'], str) for r in j['rejected'])"
check "search has plans_considered, plans_simulated, seconds" \
  json "j['search']['plans_considered'] > 0 and j['search']['plans_simulated'] > 0 and j['search']['seconds'] > 0"
check "a single node has no hostfile" json "'hostfile' not in j"
check "launch command uses 2 GPUs" json "j['launch']['hf_trainer'].startswith('deepspeed --num_gpus 2 ')"

# --- --hf-auto: the Trainer form ---
run --model gpt2 --gpus 2 --hf-auto --emit "$tmp/hf.json"
check "--hf-auto exits 0" test "$rc" -eq 0
check "--hf-auto writes \"auto\" micro-batch" python3 -c "
import json, sys
c = json.load(open('$tmp/hf.json'))
sys.exit(0 if c['train_micro_batch_size_per_gpu'] == 'auto' else 1)"
check "--hf-auto keeps dsplan's ZeRO stage" python3 -c "
import json, sys
c = json.load(open('$tmp/hf.json'))
sys.exit(0 if isinstance(c['zero_optimization']['stage'], int) else 1)"

# --- several nodes: a hostfile in DeepSpeed's format ---
run --model gpt2 --gpus 2 --nodes 2 --no-emit
check "--nodes 2 exits 0" test "$rc" -eq 0
check "--nodes 2 prints a hostfile with slots=2" grep -qE "^[^ ]+ slots=2\$" "$tmp/out"
check "--nodes 2 hostfile has two hosts" test "$(grep -cE "slots=2\$" "$tmp/out")" -eq 2
check "--nodes 2 launch names the hostfile" grep -qE "deepspeed .*--hostfile" "$tmp/out"
run --model gpt2 --gpus 2 --nodes 2 --no-emit --json
check "--nodes 2 --json has a hostfile" json "j['hostfile'].count('slots=2') == 2"
check "--nodes 2 plans use 2 nodes" json "all(r['plan']['nodes'] == 2 for r in j['recommendations'])"

# --- --quiet: one line ---
run --model gpt2 --gpus 2 --quiet --no-emit
check "--quiet exits 0" test "$rc" -eq 0
check "--quiet prints one line" test "$(wc -l <"$tmp/out")" -eq 1
check "--quiet line has tokens/s" grep -q "tokens/s" "$tmp/out"

# --- pins shown ---
run --model gpt2 --gpus 2 --stage 3 --json --no-emit
check "--stage 3 exits 0" test "$rc" -eq 0
check "--stage 3: every recommendation is stage 3" \
  json "len(j['recommendations']) >= 1 and all(r['plan']['stage'] == 3 and r['ds_config']['zero_optimization']['stage'] == 3 for r in j['recommendations'])"
run --model gpt2 --gpus 2 --micro-batch 3 --no-offload --json --no-emit
check "--micro-batch 3 --no-offload exits 0" test "$rc" -eq 0
check "--micro-batch 3 --no-offload: every recommendation" \
  json "len(j['recommendations']) >= 1 and all(r['plan']['micro_batch'] == 3 and r['plan']['offload_optimizer'] == 'none' and r['plan']['offload_param'] == 'none' for r in j['recommendations'])"
run --model gpt2 --gpus 2 --global-batch 64 --json --no-emit
check "--global-batch 64 exits 0" test "$rc" -eq 0
check "--global-batch 64: micro x accum x 2 = 64 everywhere" \
  json "all(r['plan']['micro_batch'] * r['plan']['grad_accum'] * 2 == 64 and r['ds_config']['train_batch_size'] == 64 for r in j['recommendations'])"
run --model gpt2 --gpus 2 --objective memory --json --no-emit
check "--objective memory exits 0" test "$rc" -eq 0
check "--objective memory: smallest peak first" \
  json "j['objective'] == 'memory' and all(a['gpu']['peak_total_bytes'] <= b['gpu']['peak_total_bytes'] for a, b in zip(j['recommendations'], j['recommendations'][1:]))"

# --- no plan fits: a result, not an error ---
run --model llama-2-70b --gpus 1 --no-offload --stage 0 --json --no-emit
check "no fit: --json has no recommendations" json "j['recommendations'] == []"
check "no fit: every family rejected at micro-batch 1 by its peak" \
  json "len(j['rejected']) >= 1 and all('micro-batch 1' in r['reason'] and 'peak' in r['reason'] for r in j['rejected'])"
check "no fit: nothing emitted" json "j['emitted'] == '' and 'launch' not in j"
# Nothing fits: exit 3, the real parameter count, and what would fit.
check "no fit: exit 3 (json)" test "$rc" -eq 3
run --model llama-2-70b --gpus 1 --no-offload --stage 0 --no-emit
check "no fit: exit 3 (text)" test "$rc" -eq 3
check "no fit: header gives the real parameter count" grep -q "69.0 B parameters" "$tmp/out"
check "no fit: says stage 0 fits nowhere" grep -q "Nothing up to 4096 GPUs" "$tmp/out"
run --model llama-2-70b --gpus 1 --no-offload --no-emit --quiet
check "no fit: exit 3 (quiet)" test "$rc" -eq 3
check "no fit: suggests a cluster" grep -qE "it would with [0-9]+ node\(s\) x [0-9]+ GPU" "$tmp/out"

# --- bad input ---
bad "--gpus 0" "--gpus" --model gpt2 --gpus 0 --no-emit
bad "--gpus 0 is a bad value, not a missing flag" "--gpus must be a positive integer \\(GPUs per node\\), got 0" --model gpt2 --gpus 0 --no-emit
bad "no --gpus" "--gpus is required" --model gpt2 --no-emit
bad "--objective fast" "--objective" --model gpt2 --gpus 2 --objective fast --no-emit
bad "--offload-param cpu --stage 2" "--offload-param" --model gpt2 --gpus 2 --offload-param cpu --stage 2 --no-emit
bad "unknown model" "no-such-model" --model no-such-model --gpus 2 --no-emit
bad "--global-batch 3 --gpus 2" "--global-batch" --model gpt2 --gpus 2 --global-batch 3 --no-emit
bad "--host-memory 12XB" "--host-memory" --model gpt2 --gpus 2 --host-memory 12XB --no-emit
bad "--offload-optimizer nvme without --nvme" "--nvme" --model gpt2 --gpus 2 --offload-optimizer nvme --no-emit
check "bad input wrote no ds_config.json" test ! -e "$tmp/ds_config.json"

# --- check: which rank the memory is (ZeRO-1/2 ranks differ) ---
run check --model gpt2 --gpus 4 --ds-config "$fx/calib_gpt2-xl_s1_mb4.json"
check "check at stage 1 on 4 GPUs names the rank it reports" \
  grep -qE "^ranks: allocated is rank [0-3]'s, the most of the 4 ranks" "$tmp/out"
run check --model gpt2 --gpus 8 --nodes 3 --ds-config "$fx/calib_gpt2-xl_s1_mb4.json"
check "check beyond 16 ranks says one graph bounds them" \
  grep -q "^ranks: one graph bounds all 24 ranks" "$tmp/out"
run check --model gpt2 --gpus 4 --ds-config "$fx/calib_gpt2-xl_s3_mb4.json"
check "check at stage 3 has no ranks line (its ranks are alike)" bash -c "! grep -q '^ranks:' '$tmp/out'"

# --- check: an existing config judged, with the alternative ---
run check --model gpt2 --gpus 2 --ds-config "$fx/calib_gpt2-xl_s2_mb4.json" --json
check "check --json exits 0" test "$rc" -eq 0
check "check: the config fits" json "j['fits'] is True"
check "check: alternative with a positive speedup" \
  json "j['alternative'] is not None and j['alternative']['speedup'] > 0"
check "check: speedup = alternative tokens/s over the config's" \
  json "abs(j['alternative']['speedup'] - j['alternative']['tokens_per_s'] / j['step']['tokens_per_s']) <= 1e-9 * j['alternative']['speedup']"
check "check: the alternative is about as fast or faster (dsplan searches the config's own plan too; choices within 2% go to the narrower band, then less memory)" \
  json "j['alternative']['speedup'] >= 0.98"
check "check: the alternative keeps the global batch (4 x 1 x 2 = 8)" \
  json "j['alternative']['micro_batch'] * j['alternative']['grad_accum'] * 2 == 8 and j['alternative']['ds_config']['train_batch_size'] == 8"
check "check: warns about the 5e8 bucket on 124 M parameters" \
  json "any('reduce_bucket_size' in w for w in j['warnings'])"
run check --model gpt2 --gpus 2 --ds-config "$fx/calib_gpt2-xl_s2_mb4.json"
check "check text exits 0" test "$rc" -eq 0
check "check text gives a verdict" grep -q "verdict: fits" "$tmp/out"
check "check text warns about reduce_bucket_size" grep -q "warning: reduce_bucket_size" "$tmp/out"

# --- check: a config that fits but would not train (FusedAdam's 32-bit sizes, phi-2 at stage 1
# on one GPU: a 2.78 B-element fp32 partition) gets the warning and the alternative, not "as fast"
cat > "$tmp/phi2_s1.json" <<'CFG'
{"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1, "bf16": {"enabled": true},
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-5}}, "zero_optimization": {"stage": 1}}
CFG
run check --model phi-2 --gpus 1 --ds-config "$tmp/phi2_s1.json"
check "check: a config FusedAdam would not train exits 0 (it runs)" test "$rc" -eq 0
check "check: it is warned about" grep -q "warning: optimizer: DeepSpeed's FusedAdam would not train" "$tmp/out"
check "check: the alternative is offered, not 'as fast as': the same stage with PyTorch's AdamW" \
  grep -q "^dsplan would pick: stage 1, .*PyTorch AdamW" "$tmp/out"
run check --model phi-2 --gpus 1 --ds-config "$tmp/phi2_s1.json" --json
check "check --json: the alternative's ds_config steps with torch_adam" \
  json "j['alternative']['ds_config']['optimizer']['params']['torch_adam'] is True and 'PyTorch AdamW' in j['alternative']['summary']"
check "check --json: speedup 0 for a config that would not train" json "j['alternative']['speedup'] == 0 and j['plan']['fused_adam_skips_update'] is True and j['plan']['fused_adam_flat_numel'] > 2**31 - 1"

finish
