#!/usr/bin/env bash
# End-to-end tests of `dsplan simulate` and `dsplan estimate`: the JSON keys issue 3 promises,
# sane values, the Chrome trace, and bad input (exit 2, one line naming the problem).
# Usage: sim_cli_test.sh PATH/TO/dsplan SOURCE_DIR
set -u
bin=$1
export DSPLAN_DATA_DIR=$2
fx=$2/tests/fixtures/ds_configs
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"

# --- simulate --json: every key of issue 3, with sane values ---
run simulate --model gpt2-xl --gpus 1 --ds-config "$fx/calib_gpt2-xl_s2_mb4.json" --json
check "simulate --json exits 0" test "$rc" -eq 0
for key in fits model.params gpu.peak_allocated_bytes gpu.peak_reserved_bytes gpu.capacity_bytes \
  gpu.breakdown_at_peak host.peak_bytes_per_node host.pinned_bytes_per_node nvme.bytes_per_node \
  step.time_s step.samples_per_s step.tokens_per_s step.tflops_per_gpu step.mfu step.breakdown_s \
  bottleneck; do
  check "simulate --json has $key" json "__import__('functools').reduce(lambda d, k: d[k], '$key'.split('.'), j) is not None"
done
check "fits is a bool, true for the calibration run" json "j['fits'] is True"
check "model.params is gpt2-xl's exact count" json "j['model']['params'] == 1557611200"
check "0 < peak allocated <= reserved <= capacity" \
  json "0 < j['gpu']['peak_allocated_bytes'] <= j['gpu']['peak_reserved_bytes'] <= j['gpu']['capacity_bytes']"
check "breakdown has the ten categories, none negative" \
  json "len(j['gpu']['breakdown_at_peak']) == 10 and min(j['gpu']['breakdown_at_peak'].values()) >= 0"
check "breakdown sums to reserved + context" \
  json "abs(sum(j['gpu']['breakdown_at_peak'].values()) - j['gpu']['peak_reserved_bytes'] - j['gpu']['context_bytes']) <= 1024"
check "host peak covers pinned; no NVMe without offload" \
  json "j['host']['peak_bytes_per_node'] >= j['host']['pinned_bytes_per_node'] == 0 and j['nvme']['bytes_per_node'] == 0"
check "step time positive and below a minute" json "0 < j['step']['time_s'] < 60"
check "samples/s x time = train batch (4)" \
  json "abs(j['step']['samples_per_s'] * j['step']['time_s'] - 4) < 1e-6"
check "tokens/s x time = 4 x 1024 tokens" \
  json "abs(j['step']['tokens_per_s'] * j['step']['time_s'] - 4096) < 1e-3"
check "0 < mfu < 1 and TFLOP/s below the H200's bf16 dense peak" \
  json "0 < j['step']['mfu'] < 1 and 0 < j['step']['tflops_per_gpu'] < 1000"
check "time breakdown is non-negative and sums to the step time (critical path)" \
  json "min(j['step']['breakdown_s'].values()) >= 0 and abs(sum(j['step']['breakdown_s'].values()) - j['step']['time_s']) <= 1e-9 + 1e-6 * j['step']['time_s']"
check "bottleneck is named" json "isinstance(j['bottleneck'], str) and len(j['bottleneck']) > 0"

# Offload moves bytes to pinned host memory; NVMe offload to the drive.
run simulate --model gpt2-xl --gpus 1 --ds-config "$fx/calib_gpt2-xl_s3_mb8_offopt-cpu_offparam-cpu.json" --json
check "stage 3 offload exits 0" test "$rc" -eq 0
check "stage 3 offload pins host memory" json "j['host']['pinned_bytes_per_node'] > 2 * 1557611200 // 2"
run simulate --model gpt2-xl --gpus 1 --ds-config "$fx/zero3_nvme.json" --json
check "NVMe offload exits 0" test "$rc" -eq 0
check "NVMe offload uses the drive" json "j['nvme']['bytes_per_node'] >= 12 * 1557611200"

# Text report and --trace.
run simulate --model gpt2-xl --gpus 1 --ds-config "$fx/calib_gpt2-xl_s2_mb4.json" --trace "$tmp/trace.json"
check "simulate text exits 0" test "$rc" -eq 0
check "text report names the profile" grep -q "h200-measured" "$tmp/out"
check "trace file written" test -s "$tmp/trace.json"
check "trace is JSON with traceEvents" python3 -c "
import json, sys
t = json.load(open('$tmp/trace.json'))
ev = t['traceEvents']
ok = isinstance(ev, list) and len(ev) > 10 and all('ph' in e and 'name' in e for e in ev)
sys.exit(0 if ok else 1)"

# --fake-process-group: one rank emulated on one GPU (the validation harness's emulation). The
# step is shorter than with the links' collectives, memory is the same, the header says so.
run simulate --model gpt2 --gpus 4 --ds-config "$fx/calib_gpt2-xl_s1_mb4.json" --rank 2 --json
cp "$tmp/out" "$tmp/linked.json"
run simulate --model gpt2 --gpus 4 --ds-config "$fx/calib_gpt2-xl_s1_mb4.json" --rank 2 --json \
  --fake-process-group
check "--fake-process-group exits 0" test "$rc" -eq 0
check "--fake-process-group: same memory, no link's collectives in the step" python3 -c "
import json, sys
a = json.load(open('$tmp/linked.json')); b = json.load(open('$tmp/out'))
ok = (a['gpu']['peak_allocated_bytes'] == b['gpu']['peak_allocated_bytes']
      and 0 < b['step']['time_s'] < a['step']['time_s'])
sys.exit(0 if ok else 1)"
run simulate --model gpt2 --gpus 4 --ds-config "$fx/calib_gpt2-xl_s1_mb4.json" --rank 2 \
  --fake-process-group
check "--fake-process-group's header names the emulation" grep -q "^emulated   rank 2 of 4" "$tmp/out"
bad "--fake-process-group with dsplan's runtime" "--fake-process-group .*--stack dsplan-runtime" \
  simulate --model gpt2 --gpus 4 --ds-config "$fx/calib_gpt2-xl_s1_mb4.json" --fake-process-group \
  --stack dsplan-runtime

# --- simulate: bad input ---
bad "missing --ds-config file" "nonexistent.json" \
  simulate --model gpt2-xl --gpus 1 --ds-config "$tmp/nonexistent.json"
bad "malformed JSON" "bad_malformed.json.*malformed JSON" \
  simulate --model gpt2-xl --gpus 1 --ds-config "$fx/bad_malformed.json"
bad "stage 2 with offload_param" "offload_param.*stage 3" \
  simulate --model gpt2-xl --gpus 1 --ds-config "$fx/bad_offload_param_stage2.json"
bad "train_batch_size mismatch" "train_batch_size 64" \
  simulate --model gpt2-xl --gpus 1 --ds-config "$fx/bad_batch_mismatch.json"
bad "unknown --hardware" "nosuchgpu" \
  simulate --model gpt2-xl --gpus 1 --ds-config "$fx/calib_gpt2-xl_s2_mb4.json" --hardware nosuchgpu
bad "unknown model" "unknown model 'nosuchmodel'" \
  simulate --model nosuchmodel --gpus 1 --ds-config "$fx/calib_gpt2-xl_s2_mb4.json"
bad "simulate --gpus 0" "--gpus" \
  simulate --model gpt2-xl --gpus 0 --ds-config "$fx/calib_gpt2-xl_s2_mb4.json"

# --- estimate ---
# t5-3b: Psi = 2851598336, a multiple of 4, so 16 Psi / 4 is exact.
run estimate --model t5-3b --gpus 4 --json
check "estimate --json exits 0" test "$rc" -eq 0
check "estimate has params, gpus and 8 rows" \
  json "j['params'] == 2851598336 and j['gpus'] == 4 and len(j['rows']) == 8"
check "estimate rows have the issue's keys" \
  json "all(set(['stage','offload_optimizer','offload_param','paper_bytes_per_gpu','deepspeed_estimator_gpu_bytes','deepspeed_estimator_cpu_bytes','dsplan_peak_bytes_per_gpu']) <= set(r) for r in j['rows'])"
check "estimate rows are the stage/offload grid" \
  json "[(r['stage'], r['offload_optimizer'], r['offload_param']) for r in j['rows']] == [(0,'none','none'),(1,'none','none'),(1,'cpu','none'),(2,'none','none'),(2,'cpu','none'),(3,'none','none'),(3,'cpu','none'),(3,'cpu','cpu')]"
check "paper stage 3 = 16 Psi / N exactly" \
  json "[r for r in j['rows'] if r['stage'] == 3 and r['offload_optimizer'] == 'none'][0]['paper_bytes_per_gpu'] == 16 * 2851598336 // 4 == 11406393344"
check "paper stage 0 = 16 Psi" json "j['rows'][0]['paper_bytes_per_gpu'] == 16 * 2851598336"
check "DeepSpeed has no stage 0/1 estimator (null)" \
  json "all(r['deepspeed_estimator_gpu_bytes'] is None for r in j['rows'] if r['stage'] < 2)"
check "DeepSpeed stage 2 = 2 Psi + int(18 Psi / 4)" \
  json "j['rows'][3]['deepspeed_estimator_gpu_bytes'] == 2 * 2851598336 + 18 * 2851598336 // 4"
check "DeepSpeed stage 3 full offload = 4 x largest layer (t5-3b's 32128 x 1024 embedding)" \
  json "j['largest_layer_params'] == 32128 * 1024 and j['rows'][7]['deepspeed_estimator_gpu_bytes'] == 4 * 32128 * 1024"
# Stage 0 bf16 is DeepSpeed's BF16_Optimizer, which partitions fp32 master and Adam states over
# the data-parallel ranks, so the paper's unpartitioned 16 Psi is not a floor there (t5-3b, 4 GPUs:
# 37.1 GB allocated at the step); it still exceeds the paper's stage 1 (16-bit params and grads
# whole, optimizer states partitioned).
check "dsplan's peak exceeds the paper's model states in every ZeRO row, stage 0 the paper's stage 1" \
  json "all(r['dsplan_peak_bytes_per_gpu'] > r['paper_bytes_per_gpu'] for r in j['rows'] if r['stage'] > 0) and j['rows'][0]['dsplan_peak_bytes_per_gpu'] > j['rows'][1]['paper_bytes_per_gpu']"
run estimate --params 1000000000 --gpus 8 --nodes 2 --json
check "estimate --params exits 0" test "$rc" -eq 0
check "estimate --params omits dsplan's column" \
  json "j['params'] == 10**9 and all('dsplan_peak_bytes_per_gpu' not in r for r in j['rows'])"
check "estimate --params stage 3 paper = 16 Psi / 16" json "j['rows'][5]['paper_bytes_per_gpu'] == 10**9"
run estimate --model gpt2 --gpus 2
check "estimate text exits 0" test "$rc" -eq 0
check "estimate text has a row per option" test "$(grep -cE '^ +[0-3] +(none|cpu) +(none|cpu) \|' "$tmp/out")" -eq 8
bad "estimate unknown model" "unknown model 'nosuchmodel'" estimate --model nosuchmodel --gpus 4
bad "estimate --gpus 0" "--gpus" estimate --model gpt2 --gpus 0
bad "estimate --params 0" "--params" estimate --params 0 --gpus 4
bad "estimate --params negative" "--params" estimate --params -7 --gpus 4
bad "estimate without model or params" "--model.*--params" estimate --gpus 4

# --- simulate --stack: dsplan's runtime has no Python between kernels and no DeepSpeed hooks ---
run simulate --model gpt2-xl --gpus 1 --ds-config "$fx/calib_gpt2-xl_s3_mb8.json" --json
ds=$(python3 -c "import json; print(json.load(open('$tmp/out'))['step']['time_s'])")
run simulate --model gpt2-xl --gpus 1 --ds-config "$fx/calib_gpt2-xl_s3_mb8.json" --json --stack dsplan-runtime
check "simulate --stack dsplan-runtime exits 0" test "$rc" -eq 0
check "the runtime's stage-3 step is faster than PyTorch + DeepSpeed's" json "j['step']['time_s'] < $ds"
check "the stack changes no memory" json "j['gpu']['peak_allocated_bytes'] > 0"
bad "simulate --stack unknown" "stack" simulate --model gpt2-xl --ds-config "$fx/calib_gpt2-xl_s2_mb4.json" --stack tensorflow

# --- check: a loop that keeps the step's output (docs/deepspeed-facts.md, "What a kept output
# holds"): said when the room beyond the band and headroom does not cover it, silent otherwise ---
cfg() {
  printf '{"train_micro_batch_size_per_gpu": %s, "gradient_accumulation_steps": 1, "bf16": {"enabled": true}, "zero_optimization": {"stage": 1}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}\n' "$1" >"$tmp/kept$1.json"
}
cfg 20
cfg 27
# Parameters on NVMe: every config says DeepSpeed 0.14.5 did not start on that path in our runs.
printf '{"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1, "bf16": {"enabled": true}, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "nvme", "nvme_path": "/nvme", "buffer_size": 2e8, "max_in_cpu": 0}}}' > "$tmp/pnvme.json"
run check --model gpt2-large --gpus 1 --nvme 1TB --ds-config "$tmp/pnvme.json"
check "check: parameters on NVMe warn that initialization did not complete in our runs" \
  grep -q "^warning: offload_param.device nvme with parameters on the drive: in our runs DeepSpeed 0.14.5 did not get through deepspeed.initialize" "$tmp/out"
sed 's/"nvme", "nvme_path": "\/nvme", "buffer_size": 2e8, "max_in_cpu": 0/"cpu"/' "$tmp/pnvme.json" > "$tmp/pcpu.json"
run check --model gpt2-large --gpus 1 --ds-config "$tmp/pcpu.json"
check "check: parameters on the CPU get no such line" bash -c "grep -q '^verdict' '$tmp/out' && ! grep -q 'offload_param.device nvme' '$tmp/out'"
sed 's/, "max_in_cpu": 0//' "$tmp/pnvme.json" > "$tmp/pincpu.json"
run check --model gpt2-large --gpus 1 --nvme 1TB --ds-config "$tmp/pincpu.json"
check "check: NVMe with max_in_cpu (default 1e9) covering the partition gets no such line" bash -c "grep -q '^verdict' '$tmp/out' && ! grep -q 'parameters on the drive' '$tmp/out'"
# The config may come first without its flag, as users type it; the output is the same.
run check --model gpt2-large --gpus 1 --ds-config "$tmp/pcpu.json" --json
cp "$tmp/out" "$tmp/flagged.json"
run check "$tmp/pcpu.json" --model gpt2-large --gpus 1 --json
check "check: a positional config is read as --ds-config" bash -c "test $rc -eq 0 && cmp -s '$tmp/out' '$tmp/flagged.json'"
bad "check: a config both ways" "ds-config.*more than once" check "$tmp/pcpu.json" --ds-config "$tmp/pcpu.json" --model gpt2-large --gpus 1
bad "check: a second positional" "unexpected argument" check "$tmp/pcpu.json" "$tmp/pnvme.json" --model gpt2-large --gpus 1
# Stage 3 on one GPU without offload: check points to stage 2 only with both predictions.
printf '{"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1, "bf16": {"enabled": true}, "zero_optimization": {"stage": 3}}' > "$tmp/s3one.json"
run check --model gpt2-xl --gpus 1 --ds-config "$tmp/s3one.json"
check "check: single-GPU stage 3 names stage 2's fit and both step times" \
  grep -qE "^warning: ZeRO stage 3 on one GPU .*stage 2 at the same micro-batch fits .* faster \([0-9.]+ s against [0-9.]+ s per step\); set zero_optimization.stage to 2" "$tmp/out"
printf '{"train_micro_batch_size_per_gpu": 12, "gradient_accumulation_steps": 1, "bf16": {"enabled": true}, "zero_optimization": {"stage": 3, "reduce_bucket_size": 5e7, "stage3_prefetch_bucket_size": 5e7, "stage3_param_persistence_threshold": 1e5}, "dsplan": {"gradient_checkpointing": true}}' > "$tmp/s3big.json"
run check --model llama-2-7b --gpus 1 --ds-config "$tmp/s3big.json"
check "check: no such line where stage 2 would not fit (llama-2-7b mb 12)" bash -c "grep -q '^verdict: fits, with' '$tmp/out' && ! grep -q 'stage 3 on one GPU' '$tmp/out'"
# glibc's malloc (docs/deepspeed-facts.md, "glibc's malloc"): check names what holding malloc to its
# heap gains on a ZeRO-3 step with the optimizer offloaded; --malloc-heap predicts with it and
# says so; a step without offload gets no such line.
printf '{"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1, "bf16": {"enabled": true}, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": true}, "offload_param": {"device": "cpu", "pin_memory": true}}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}' > "$tmp/z3mal.json"
run check --model gemma-2b --gpus 1 --ds-config "$tmp/z3mal.json"
check "check: ZeRO-3 offload names the malloc environment and both step times" \
  grep -qE "^warning: host malloc: .*MALLOC_ARENA_MAX=1 MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=68719476736 .*the step is predicted [0-9.]+ s instead of [0-9.]+ s" "$tmp/out"
run simulate --model gemma-2b --gpus 1 --ds-config "$tmp/z3mal.json" --json
plain=$(python3 -c "import json; print(json.load(open('$tmp/out'))['step']['time_s'])")
check "simulate without --malloc-heap says so in its JSON" json "j['malloc_heap'] is False"
run simulate --model gemma-2b --gpus 1 --ds-config "$tmp/z3mal.json" --json --malloc-heap
check "simulate --malloc-heap: the page faults gone, the step at least 25 % faster" \
  json "j['malloc_heap'] is True and j['step']['time_s'] < 0.75 * $plain"
run simulate --model gemma-2b --gpus 1 --ds-config "$tmp/z3mal.json" --malloc-heap
check "simulate --malloc-heap states the environment it assumes" \
  grep -q "^note       host malloc: the prediction assumes MALLOC_ARENA_MAX=1" "$tmp/out"
run --model gemma-2b --gpus 1 --stage 3 --offload-optimizer cpu --json
plain_top=$(python3 -c "import json; print(json.load(open('$tmp/out'))['recommendations'][0]['step']['time_s'])")
check "the planner gives each ZeRO-3 offload plan its step with malloc on its heap" \
  json "len(j['recommendations']) > 0 and all(r['malloc_heap']['step_s'] < r['step']['time_s'] and r['malloc_heap']['env'].startswith('MALLOC_ARENA_MAX=1') for r in j['recommendations'])"
run --model gemma-2b --gpus 1 --stage 3 --offload-optimizer cpu --malloc-heap --json
check "planner --malloc-heap ranks with it: a faster top plan, no second estimate" \
  json "j['recommendations'][0]['step']['time_s'] < 0.8 * $plain_top and 'malloc_heap' not in j['recommendations'][0]"
run --model gemma-2b --gpus 1 --stage 3 --offload-optimizer cpu --malloc-heap --no-emit
check "planner --malloc-heap: the launch lines set the variables" \
  bash -c "grep -q '^  MALLOC_ARENA_MAX=1 MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=68719476736 deepspeed --num_gpus 1 ' '$tmp/out' && grep -q '^  MALLOC_ARENA_MAX=1 .* torchrun ' '$tmp/out' && grep -q '^  host malloc: the prediction assumes' '$tmp/out'"
run --model gemma-2b --gpus 1 --stage 3 --offload-optimizer cpu --no-emit
check "the planner prints the malloc line under the launch lines" grep -q "^  host malloc: ZeRO-3's offloaded gradient copies" "$tmp/out"
run check --model gpt2-xl --gpus 1 --ds-config "$tmp/s3one.json"
check "check: no malloc line without offload" bash -c "grep -q '^verdict' '$tmp/out' && ! grep -q 'host malloc' '$tmp/out'"
run check --model qwen2-0.5b --gpus 1 --ds-config "$tmp/kept27.json"
check "check mb 27 exits 0" test "$rc" -eq 0
check "check warns that a kept output does not fit, with its logits" \
  grep -q "warning: training loop: .* holds its logits 7.82 GiB.*NOT enough" "$tmp/out"
run check --model qwen2-0.5b --gpus 1 --ds-config "$tmp/kept20.json"
check "check mb 20 is silent about the loop (31 GiB of room)" bash -c "! grep -q 'training loop' '$tmp/out'"
run --model qwen2-0.5b --gpus 1 --no-emit
check "the plan always states the loop it assumes" grep -q "^  training loop: the prediction assumes model.config.use_cache = False" "$tmp/out"

# --- model construction (docs/deepspeed-facts.md, "What keeps a released weight"): a model built
# outside deepspeed.zero.Init keeps its released nn.Linear weights to their backward (max live
# 1e8 and no reuse window: the layers the prefetcher does not keep are released after their
# forward) ---
printf '{"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1, "bf16": {"enabled": true}, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}, "stage3_max_live_parameters": 1e8, "stage3_max_reuse_distance": 0}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}\n' >"$tmp/z3off.json"
run simulate --model qwen2-0.5b --gpus 1 --ds-config "$tmp/z3off.json" --json
inside=$(python3 -c "import json; print(json.load(open('$tmp/out'))['gpu']['peak_allocated_bytes'])")
run simulate --model qwen2-0.5b --gpus 1 --ds-config "$tmp/z3off.json" --json --no-zero-init
check "simulate --no-zero-init exits 0" test "$rc" -eq 0
# More, and at most every Linear weight of the model once (2 B x (24 x 14,909,440 + the tied
# 151,936 x 896 table)).
check "built outside zero.Init the peak holds released Linear weights" \
  json "0 < j['gpu']['peak_allocated_bytes'] - $inside <= 2 * (24 * 14909440 + 151936 * 896)"
run --model llama-2-7b --gpus 8 --stage 3 --no-emit
check "a ZeRO-3 plan on 8 GPUs says it assumes zero.Init, and what building outside adds" \
  grep -qE "^  model construction: the prediction assumes the script builds the model inside deepspeed.zero.Init.* [0-9.]+ GiB more at the peak" "$tmp/out"
run --model llama-2-7b --gpus 8 --stage 3 --no-emit --no-zero-init
check "planned with --no-zero-init it has nothing to add" bash -c "! grep -q 'model construction' '$tmp/out'"
run --model llama-2-7b --gpus 8 --stage 3 --no-emit --json --top 1
check "plan --json gives the same in model_construction (rank 1 holds more built outside)" \
  json "j['recommendations'][0]['model_construction']['assumes_zero_init'] is True and j['recommendations'][0]['model_construction']['extra_bytes_built_outside_zero_init'] > 2**30"
run --model gpt2 --gpus 1 --stage 3 --no-emit
check "one GPU without parameter offload: a gather copies nothing, no line" bash -c "! grep -q 'model construction' '$tmp/out'"

# --- --host-pipeline (experimental): the host runs ahead of the GPU between waits ---
run simulate --model gpt2-xl --gpus 1 --ds-config "$fx/calib_gpt2-xl_s2_mb4.json" --json
cp "$tmp/out" "$tmp/plain.json"
run simulate --model gpt2-xl --gpus 1 --ds-config "$fx/calib_gpt2-xl_s2_mb4.json" --json --host-pipeline
check "simulate --host-pipeline exits 0" test "$rc" -eq 0
check "--host-pipeline: no slower than per-layer maxima, same memory" python3 -c "
import json; a = json.load(open('$tmp/plain.json')); b = json.load(open('$tmp/out'))
assert 0 < b['step']['time_s'] <= a['step']['time_s'] * (1 + 1e-12)
assert b['gpu']['peak_reserved_bytes'] == a['gpu']['peak_reserved_bytes']"
python3 -c "
import json; c = json.load(open('$fx/calib_gpt2-xl_s2_mb4.json')); c['gradient_accumulation_steps'] = 2000
c.pop('train_batch_size', None); json.dump(c, open('$tmp/gas2000.json', 'w'))"
bad "--host-pipeline past 1024 micro-steps" "host-pipeline.*at most 1024.*2000" \
  simulate --model gpt2 --gpus 1 --ds-config "$tmp/gas2000.json" --host-pipeline
bad "--host-pipeline with dsplan's runtime" "host-pipeline.*dsplan-runtime" \
  simulate --model gpt2-xl --gpus 1 --ds-config "$fx/calib_gpt2-xl_s2_mb4.json" --host-pipeline --stack dsplan-runtime

echo "sim_cli_test: $pass passed, $fail failed"
test "$fail" -eq 0
