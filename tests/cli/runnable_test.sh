#!/usr/bin/env bash
# Issue 16, "plans a user can run as printed", end to end: memory headroom and the error band
# (plan and check), the global batch, complete configs and launch lines, the NVMe buffer rule,
# "auto" keys, never overwriting inputs or existing files, failed writes, swap-file cleanup, and
# the smaller items (hub ids, flash_attention_2, MFU peak, cost column, aligned columns, messages).
# Usage: runnable_test.sh PATH/TO/dsplan SOURCE_DIR
set -u
bin=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
src=$2
export DSPLAN_DATA_DIR=$src
fx=$src/tests/fixtures/ds_configs
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"
cd "$tmp" || exit 1
py() { python3 -c "$@"; }

# ---------------------------------------------------------------- headroom and the error band
run --model gpt2 --gpus 2 --json
check "plan --json exits 0" test "$rc" -eq 0
check "a JSON query writes no file" test ! -e ds_config.json
check "the JSON reports the headroom and the band" \
  json "j['memory']['headroom_bytes'] > 0 and abs(j['memory']['band_upper'] - 0.06) < 1e-9 and j['memory']['band_upper_bytes'] >= 0 and j['memory']['band_provisional'] is False and 'validated' in j['memory']['band_basis']"
check "every recommendation: reserved x (1+band) + largest transient + context + NCCL + headroom <= the GPU" \
  json "all(r['gpu']['peak_reserved_bytes'] * (1 + r['gpu']['memory_band']['upper']) + r['gpu']['memory_band']['upper_bytes'] + r['gpu']['context_bytes'] + r['gpu']['nccl_bytes'] + r['gpu']['headroom_bytes'] <= r['gpu']['capacity_bytes'] for r in j['recommendations'])"
check "two GPUs count NCCL's buffers" json "all(r['gpu']['nccl_bytes'] > 0 for r in j['recommendations'])"
check "the default headroom is 3% of the GPU" \
  json "abs(j['memory']['headroom_bytes'] - 0.03 * j['recommendations'][0]['gpu']['capacity_bytes']) < 2"
run --model llama-2-7b --gpus 1 --json --top 1
check "a family with validation runs gets the validated band (+6%), one GPU no NCCL" \
  json "abs(j['memory']['band_upper'] - 0.06) < 1e-9 and j['recommendations'][0]['gpu']['nccl_bytes'] == 0"
run --model bert-large-uncased --gpus 1 --json --top 1
check "a family without DeepSpeed runs gets the provisional band (+9%)" \
  json "abs(j['memory']['band_upper'] - 0.09) < 1e-9 and j['memory']['band_provisional'] is True"
run --model gpt2 --gpus 2 --headroom 60% --json
check "--headroom 60% exits 0" test "$rc" -eq 0
check "--headroom 60% keeps 60% free" \
  json "all(r['gpu']['upper_total_bytes'] + 0.6 * r['gpu']['capacity_bytes'] <= r['gpu']['capacity_bytes'] + 2 for r in j['recommendations'])"
run --model gpt2 --gpus 2 --headroom 20GiB --json
check "--headroom 20GiB is a size" json "j['memory']['headroom_bytes'] == 20 * 2**30"
run --model gpt2 --gpus 2 --max-gpu-memory-fraction 0.5 --json
check "--max-gpu-memory-fraction 0.5 is --headroom 50%" \
  json "abs(j['memory']['headroom_bytes'] - 0.5 * j['recommendations'][0]['gpu']['capacity_bytes']) < 2"
bad "--headroom abc" "--headroom" --model gpt2 --gpus 2 --headroom abc
bad "--headroom 100%" "--headroom" --model gpt2 --gpus 2 --headroom 100%
bad "--headroom with --max-gpu-memory-fraction" "same thing" --model gpt2 --gpus 2 --headroom 5% --max-gpu-memory-fraction 0.9
run --model t5-3b --gpus 4 --no-emit
check "the text header states band, NCCL and headroom" \
  bash -c "grep -q 'headroom 3%' '$tmp/out' && grep -q 'band +6% of reserved (validated' '$tmp/out' && grep -q 'NCCL 1.00 GiB' '$tmp/out'"
# check: the same rule, with "at risk" when only the band and headroom are missing.
run check --model gpt2 --gpus 1 --ds-config "$fx/calib_gpt2-xl_s2_mb4.json" --headroom 95%
check "check --headroom 95%: fits the GPU but at risk" grep -qE "^verdict: fits with .* to spare: at risk" "$tmp/out"
run check --model gpt2 --gpus 1 --ds-config "$fx/calib_gpt2-xl_s2_mb4.json" --headroom 95% --json
check "check --json: verdict at_risk, fits false" json "j['verdict'] == 'at_risk' and j['fits'] is False and j['gpu']['spare_bytes'] > 0"
run check --model gpt2 --gpus 1 --ds-config "$fx/calib_gpt2-xl_s2_mb4.json" --headroom 0
check "check --headroom 0: fits with the spare stated" grep -qE "^verdict: fits, with .* to spare" "$tmp/out"
run simulate --model gpt2 --gpus 1 --ds-config "$fx/calib_gpt2-xl_s2_mb4.json" --headroom 95% --json
check "simulate applies the same rule" json "j['verdict'] == 'at_risk'"

# ---------------------------------------------------------------- the global batch
run --model t5-3b --gpus 4 --json
check "t5-3b: every recommendation states its global batch = micro x accum x GPUs" \
  json "all(r['global_batch'] == r['plan']['micro_batch'] * r['plan']['grad_accum'] * 4 for r in j['recommendations'])"
check "t5-3b: the batch is said to be free, with its tolerance" \
  json "j['batch']['global_batch_pinned'] is False and abs(j['batch']['tolerance'] - 0.03) < 1e-12"
check "t5-3b: no checkpointing row at hundreds of samples per GPU (was 396-426)" \
  json "all(r['plan']['micro_batch'] <= 128 for r in j['recommendations'])"
check "t5-3b: no two rows are the same plan" \
  json "len(set((r['plan']['micro_batch'], r['plan']['gradient_checkpointing'], r['plan']['offload_optimizer'], round(r['step']['tokens_per_s']), r['gpu']['peak_total_bytes']) for r in j['recommendations'])) == len(j['recommendations'])"
run --model gpt2-xl --gpus 4 --json
check "gpt2-xl: stages 1 and 2 with the same plan are one row" \
  json "any(2 in r['same_as_stages'] for r in j['recommendations']) and len(set((r['plan']['micro_batch'], r['plan']['gradient_checkpointing'], r['plan']['offload_optimizer'], round(r['step']['tokens_per_s']), r['gpu']['peak_total_bytes']) for r in j['recommendations'])) == len(j['recommendations'])"
run --model t5-3b --gpus 4 --no-emit
check "the table has a global column and says the batch is not pinned" \
  bash -c "grep -q ' global ' '$tmp/out' && grep -q 'global batch not pinned' '$tmp/out' && grep -q 'within 3%' '$tmp/out'"
check "table columns line up (every right-aligned column ends where its header ends)" py "
import sys
lines = open('$tmp/out').read().splitlines()
h = next(i for i, l in enumerate(lines) if l.startswith('#  '))
head = lines[h]
rows = []
for l in lines[h + 1:]:
    if not l[:1].isdigit(): break
    rows.append(l)
ends = [head.index(n) + len(n) for n in ('global', 'peak GPU', 'spare', 'host RAM', 'step s', 'tokens/s', 'MFU')]
ok = len(rows) >= 3 and all(r[e - 1] != ' ' and r[e:e + 2] == '  ' for r in rows for e in ends)
sys.exit(0 if ok else 1)"
run --model gpt2 --gpus 2 --global-batch 64 --json
check "a pinned global batch is said to be pinned" json "j['batch']['global_batch_pinned'] is True and all(r['global_batch'] == 64 for r in j['recommendations'])"

# ---------------------------------------------------------------- what is emitted
run --model gpt2 --gpus 2 --emit "$tmp/ds.json" --json
cp "$tmp/out" "$tmp/plan.json"
check "a complete optimizer and scheduler" py "
import json, sys
c = json.load(open('$tmp/ds.json'))
p = c['optimizer']['params']
s = c['scheduler']
ok = c['optimizer']['type'] == 'AdamW' and all(k in p for k in ('lr', 'betas', 'eps', 'weight_decay'))
ok = ok and s['type'] == 'WarmupLR' and s['params']['warmup_max_lr'] == p['lr'] and s['params']['warmup_num_steps'] > 0
sys.exit(0 if ok else 1)"
# The HF Trainer's fill_match rules (transformers integrations/deepspeed.py
# trainer_config_process): an explicit value must equal the Trainer argument.
trainer_matches='
import json, sys, shlex
c = json.load(open(sys.argv[1]))
launch = json.load(open(sys.argv[2]))["launch"]
a = shlex.split(launch["hf_trainer"])
args = {}
i = 0
while i < len(a):
    if a[i].startswith("--"):
        if i + 1 < len(a) and not a[i + 1].startswith("--"):
            args[a[i][2:]] = a[i + 1]; i += 2
        else:
            args[a[i][2:]] = True; i += 1
    else:
        i += 1
def same(cfg, arg, conv=float):
    return cfg == "auto" or conv(cfg) == conv(arg)
o = c["optimizer"]["params"]; s = c["scheduler"]["params"]
ok = same(c["train_micro_batch_size_per_gpu"], args["per_device_train_batch_size"], int)
ok &= same(c["gradient_accumulation_steps"], args["gradient_accumulation_steps"], int)
ok &= same(c["gradient_clipping"], args["max_grad_norm"])
ok &= same(o["lr"], args["learning_rate"]) and same(s["warmup_max_lr"], args["learning_rate"])
ok &= o["betas"] == "auto" or [float(x) for x in o["betas"]] == [float(args["adam_beta1"]), float(args["adam_beta2"])]
ok &= same(o["eps"], args["adam_epsilon"]) and same(o["weight_decay"], args["weight_decay"])
ok &= same(s["warmup_num_steps"], args["warmup_steps"], int)
bf = c.get("bf16", {}).get("enabled", False)
ok &= bf == "auto" or bool(bf) == ("bf16" in args)
ok &= args.get("deepspeed") == launch["hf_trainer"].split("--deepspeed ")[1].split()[0]
sys.exit(0 if ok else 1)'
check "the HF Trainer launch carries every argument the config must match" python3 -c "$trainer_matches" "$tmp/ds.json" "$tmp/plan.json"
check "the plain DeepSpeed launch uses --deepspeed --deepspeed_config" \
  json "j['launch']['deepspeed_script'].endswith('--deepspeed --deepspeed_config $tmp/ds.json') and j['launch']['torchrun'].startswith('torchrun --nproc_per_node 2 ')"
run --model gpt2 --gpus 2 --hf-auto --emit "$tmp/hf.json" --json
check "--hf-auto: the same Trainer arguments fill the \"auto\" file" python3 -c "$trainer_matches" "$tmp/hf.json" "$tmp/out"
run --model gpt2 --gpus 2 --stage 3 --emit "$tmp/z3.json" --json
check "ZeRO-3 files gather 16-bit weights on save (else the Trainer saves none)" \
  py "import json,sys; sys.exit(0 if json.load(open('$tmp/z3.json'))['zero_optimization']['stage3_gather_16bit_weights_on_model_save'] is True else 1)"
run --model gpt2-xl --gpus 1 --gradient-checkpointing --emit "$tmp/gc.json" --json
check "a checkpointing plan says so in the file" \
  py "import json,sys; sys.exit(0 if json.load(open('$tmp/gc.json'))['dsplan']['gradient_checkpointing'] is True else 1)"
check "... and in the launch (--gradient_checkpointing)" json "'--gradient_checkpointing' in j['launch']['hf_trainer']"
run check --model gpt2-xl --gpus 1 --ds-config "$tmp/gc.json" --json
check "check of the emitted checkpointing file reads it back and fits" \
  json "j['plan']['gradient_checkpointing'] is True and j['fits'] is True"
# Several nodes: the hostfile the launch names is written.
run --model gpt2 --gpus 2 --nodes 2 --emit "$tmp/mn.json" --hostfile "$tmp/hosts" --json
check "--nodes 2: the hostfile is written where the launch says" \
  json "j['hostfile_written'] == '$tmp/hosts' and '--hostfile $tmp/hosts' in j['launch']['hf_trainer'] and 'srun --nodes 2' in j['launch']['srun']"
check "--nodes 2: the written hostfile has two hosts with 2 slots" test "$(grep -cE '^[^#].* slots=2$' "$tmp/hosts")" -eq 2

# ---------------------------------------------------------------- NVMe buffer_size (DeepSpeed issue 3506)
py "
import json
c = json.load(open('$fx/calib_gpt2-xl_s3_mb4.json'))
z = c['zero_optimization']
z['offload_param'] = {'device': 'nvme', 'nvme_path': '/tmp', 'buffer_size': 10000000}
z['offload_optimizer'] = {'device': 'cpu'}
json.dump(c, open('$tmp/nvme_small.json', 'w'))"
run check --model gpt2 --gpus 1 --ds-config "$tmp/nvme_small.json" --json
check "check: buffer_size 1e7 < gpt2's embedding partition (38.6 M) does not fit" \
  json "j['fits'] is False and 'buffer_size' in j['reason'] and 'start-up' in j['reason']"
run --model llama-2-7b --gpus 1 --stage 3 --offload-param nvme --offload-optimizer nvme --nvme 2TB --json --top 1
check "planner: NVMe parameter buffers larger than llama-2-7b's embedding (131 M elements)" \
  json "j['recommendations'][0]['ds_config']['zero_optimization']['offload_param']['buffer_size'] > 32000 * 4096"

# ---------------------------------------------------------------- "auto" keys in check
run check --model gpt2-xl --gpus 4 --ds-config "$fx/hf_zero2_auto.json"
check "check of an HF auto config needs no --micro-batch/--grad-accum" test "$rc" -eq 0
check "check lists what each auto resolved to, defaults marked" \
  bash -c "grep -q 'gradient_accumulation_steps = 1' '$tmp/out' && grep -q 'train_micro_batch_size_per_gpu = 8' '$tmp/out' && grep -q 'a default, not a flag' '$tmp/out'"
run check --model gpt2-xl --gpus 4 --ds-config "$fx/hf_zero2_auto.json" --micro-batch 2 --json
check "check --json: auto_values with sources" \
  json "any(a['key'] == 'train_micro_batch_size_per_gpu' and a['value'] == '2' and not a['from_default'] for a in j['auto_values']) and any(a['key'] == 'gradient_accumulation_steps' and a['from_default'] for a in j['auto_values'])"

# ---------------------------------------------------------------- users' files
echo '{"mine": true}' > ds_config.json
run --model gpt2 --gpus 2
check "an existing ds_config.json is kept" grep -q '"mine"' ds_config.json
check "... the config goes next to it, and the output says so" \
  bash -c "test -s ds_config-1.json && grep -q 'ds_config.json exists: wrote ds_config-1.json' '$tmp/out'"
rm -f ds_config-1.json
run --model gpt2 --gpus 2 --quiet
check "--quiet writes no file" test ! -e ds_config-1.json
bad "--emit onto an existing file" "exists.*--force" --model gpt2 --gpus 2 --emit ds_config.json
check "... leaves it unchanged" grep -q '"mine"' ds_config.json
run --model gpt2 --gpus 2 --emit ds_config.json --force --quiet
check "--force replaces it" py "import json,sys; sys.exit(0 if 'zero_optimization' in json.load(open('ds_config.json')) else 1)"
mkdir -p m && cp "$src/examples/host/gpt2-tiny.json" m/config.json && cp m/config.json m/orig.json
bad "--emit onto the --model config" "input" --model m/config.json --gpus 1 --emit m/config.json --force
check "... leaves the model config unchanged" cmp -s m/config.json m/orig.json
cp "$fx/calib_gpt2-xl_s2_mb4.json" cfg.json && cp cfg.json cfg.orig
bad "simulate --trace onto --ds-config" "input" simulate --model gpt2 --gpus 1 --ds-config cfg.json --trace cfg.json --force
check "... leaves the ds_config unchanged" cmp -s cfg.json cfg.orig
run --model gpt2 --gpus 2 --emit /dev/full
check "--emit /dev/full fails" test "$rc" -ne 0
check "... saying why" grep -q "No space left" "$tmp/err"
bad "--emit into a missing folder" "does not exist" --model gpt2 --gpus 2 --emit "$tmp/no/such/dir/x.json"
run simulate --model gpt2 --gpus 1 --ds-config cfg.json --trace /dev/full
check "simulate --trace /dev/full fails" test "$rc" -ne 0
cp "$src/profiles/h200-sxm.yaml" prof.yaml && cp prof.yaml prof.orig
bad "validate --calibrate onto --hardware" "input" validate --model gpt2 --ds-config cfg.json --hardware prof.yaml --calibrate prof.yaml
check "... leaves the profile unchanged" cmp -s prof.yaml prof.orig
bad "validate --calibrate onto an existing file" "--force" validate --model gpt2 --ds-config cfg.json --calibrate prof.yaml
check "... leaves it unchanged" cmp -s prof.yaml prof.orig
bad "profile --out onto an existing file" "--force" profile --out prof.yaml --quick
check "... leaves it unchanged" cmp -s prof.yaml prof.orig
bad "profile --out onto its --base" "input" profile --out prof.yaml --base prof.yaml --force
check "... leaves it unchanged" cmp -s prof.yaml prof.orig
check "no temporary files left behind" test -z "$(ls -A | grep -E '\.tmp-' || true)"
# validate with NVMe offload: the swap files go into a private folder that is removed.
mkdir -p nvme
py "
import json
c = json.load(open('$src/examples/host/zero3_offload.json'))
c['zero_optimization']['offload_optimizer'] = {'device': 'nvme', 'nvme_path': '$tmp/nvme'}
json.dump(c, open('$tmp/z3nvme.json', 'w'))"
run validate --executor host --model "$src/examples/host/gpt2-tiny.json" --ds-config "$tmp/z3nvme.json" --seq-len 16 --gpus 2 --steps 2
check "validate --executor host with NVMe runs" test "$rc" -eq 0 -o "$rc" -eq 4
check "validate leaves no swap files in the nvme folder" test -z "$(ls -A nvme)"

# ---------------------------------------------------------------- smaller items
run --model Qwen/Qwen2-7B --gpus 8 --quiet
check "an HF hub id from the catalog resolves" test "$rc" -eq 0
run --model gpt2 --gpus 1 --attention flash_attention_2 --quiet
check "--attention flash_attention_2 is accepted" test "$rc" -eq 0
run --model gpt2 --gpus 2 --no-emit
check "the MFU's reference peak and dtype are stated" grep -qE "^MFU .*dense bf16 peak of one NVIDIA H200, [0-9]+ TFLOP/s" "$tmp/out"
run --model gpt2 --gpus 2 --precision fp32 --no-emit
check "... and for fp32, the fp32 peak" grep -qE "^MFU .*dense fp32 peak" "$tmp/out"
run simulate --model gpt2 --gpus 1 --ds-config cfg.json --json
check "simulate --json gives the MFU's peak" json "j['step']['mfu_peak_flops'] > 0 and j['step']['mfu_dtype'] == 'bf16'"
run --model gpt2 --gpus 2 --objective cost --price-per-gpu-hour 2.5 --no-emit
check "--objective cost shows GPU-hours and cost per million tokens" \
  bash -c "grep -q 'GPU-h/Mtok' '$tmp/out' && grep -q 'cost/Mtok' '$tmp/out'"
bad "missing --gpus" "--gpus is required" --model gpt2
bad "--micro-batch 3 --global-batch 64 --gpus 8" "not divisible by --micro-batch 3 x 8 GPUs = 24" --model gpt2 --gpus 8 --micro-batch 3 --global-batch 64
bad "simulate: an auto micro-batch from a --global-batch the GPUs do not divide" "hf_zero2_auto.json: train_micro_batch_size_per_gpu is \"auto\" and --global-batch 30 is not a multiple of accumulation 1 x 4 GPUs" simulate --model gpt2-xl --gpus 4 --ds-config "$fx/hf_zero2_auto.json" --global-batch 30
check "docs/cli.md no longer says the planner has not landed" bash -c "! grep -q 'Until the planner lands' '$src/docs/cli.md'"

finish
