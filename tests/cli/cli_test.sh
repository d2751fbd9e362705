#!/usr/bin/env bash
# End-to-end tests of the dsplan binary: real commands, their output and exit codes.
# Usage: cli_test.sh PATH/TO/dsplan SOURCE_DIR
set -u
bin=$1
export DSPLAN_DATA_DIR=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"

# The main job: the planner ranks plans for t5-3b on 4 GPUs and writes the chosen config.
(cd "$tmp" && "$bin" --model t5-3b --gpus 4 >"$tmp/out" 2>"$tmp/err")
rc=$?
check "main job exits 0" test "$rc" -eq 0
check "main job uses T5's default lengths" grep -q "sequence 512 + target 128" "$tmp/out"
check "main job lists ranked plans" grep -qE "^ ?1 +[0-3](=[0-3])* " "$tmp/out"
check "main job writes ds_config.json" test -s "$tmp/ds_config.json"
check "main job prints the launch command" grep -q "deepspeed --num_gpus 4" "$tmp/out"
check "written config is JSON with a ZeRO stage" python3 -c "import json; c=json.load(open('$tmp/ds_config.json')); assert c['zero_optimization']['stage'] in (0,1,2,3); assert c['train_micro_batch_size_per_gpu'] >= 1"

run models
check "models exits 0" test "$rc" -eq 0
check "models lists at least 30" test "$(grep -c . "$tmp/out")" -ge 31
check "models shows llama-2-70b's count" grep -qE "^llama-2-70b +llama +68976648192" "$tmp/out"
run models --json
check "models --json has 30+ entries with params" json "len(j) >= 30 and all(e['params'] > 0 for e in j)"

run model t5-3b --micro-batch 4 --seq-len 512 --target-len 128 --json
check "model --json exits 0" test "$rc" -eq 0
check "model --json params exact" json "j['params'] == 2851598336"
check "model --json layer params sum to total" json "sum(l['params'] for l in j['layers']) == j['params']"
check "model --json has 24+24 blocks" json "sum(1 for l in j['layers'] if l['kind'].endswith('block')) == 48"
check "model --json totals are layer sums" json "abs(sum(l['activation_bytes'] for l in j['layers']) - j['activation_bytes']) == 0 and abs(sum(l['fwd_flops']+l['bwd_flops'] for l in j['layers']) - j['flops_per_step']) < 1e-6 * j['flops_per_step']"
check "model --json tokens" json "j['tokens'] == 4 * (512 + 128)"

run model t5-3b --micro-batch 4 --seq-len 512 --target-len 128 --gradient-checkpointing --json
check "checkpointing adds recompute FLOPs" json "j['recompute_flops'] > 0 and j['options']['gradient_checkpointing']"

run model gpt2-xl --micro-batch 2 --seq-len 512
check "model table exits 0" test "$rc" -eq 0
check "model table folds repeated blocks" grep -qE "transformer\.h\.0-47 +48" "$tmp/out"

# --times: each op's predicted kernel time and each layer's host time, from the profile.
run model gpt2-xl --micro-batch 2 --seq-len 512 --times
check "model --times exits 0" test "$rc" -eq 0
check "model --times names the profile" grep -q "per layer on h200" "$tmp/out"
check "model --times lists a block's GEMMs" grep -qE "transformer\.h\.0\.attn\.c_attn +gemm +[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+" "$tmp/out"
run model gpt2-xl --micro-batch 2 --seq-len 512 --times --json
check "model --times --json: one block of 48 (repeats folded), op times add up to the kernels" json "len([l for l in j['times']['layers'] if l['kind'] == 'decoder_block']) == 1 and all(abs(sum(o['fwd_s'] for o in l['ops']) - l['kernels_fwd_s']) <= 1e-9 + 1e-6 * l['kernels_fwd_s'] and abs(sum(o['bwd_s'] for o in l['ops']) - l['kernels_bwd_s']) <= 1e-9 + 1e-6 * l['kernels_bwd_s'] for l in j['times']['layers'])"
check "model --times --json: GEMMs cost more at 4x the batch" sh -c "'$bin' model gpt2-xl --micro-batch 8 --seq-len 512 --times --json | python3 -c \"import json,sys; a=json.load(open('$tmp/out')); b=json.load(sys.stdin); f=lambda j: [l for l in j['times']['layers'] if l['kind'] == 'decoder_block'][0]['gemm_fwd_s']; assert f(b) > 2.5 * f(a)\""
run model gpt2-xl --hardware h200-sxm
check "model --hardware without --times is an error" test "$rc" -eq 2
run model gpt2-xl --times --hardware no-such-profile
check "model --times with an unknown profile exits 2" test "$rc" -eq 2

# A user's config.json, as a file and as a folder.
mkdir -p "$tmp/m"
echo '{"model_type": "llama", "hidden_size": 512, "intermediate_size": 1024, "num_hidden_layers": 2, "num_attention_heads": 8, "vocab_size": 1000}' >"$tmp/m/config.json"
run model "$tmp/m" --json
check "config folder loads" json "j['params'] == 2*1000*512 + 2*(4*512*512 + 3*512*1024 + 2*512) + 512"
run model "$tmp/m/config.json" --json
check "config file loads" test "$rc" -eq 0

# Bad input: one clear line, exit code 2, no crash.
run model llama-2-7 --json
check "unknown model exits 2" test "$rc" -eq 2
check "unknown model suggests" grep -q "did you mean llama-2-7b" "$tmp/err"
echo '{"model_type": "gpt2", "n_embd": 64,' >"$tmp/bad.json"
run model "$tmp/bad.json"
check "malformed config exits 2" test "$rc" -eq 2
check "malformed config names the file" grep -qE "bad.json:[0-9]+:[0-9]+: malformed JSON" "$tmp/err"
echo '{"model_type": "rwkv"}' >"$tmp/rwkv.json"
run model "$tmp/rwkv.json"
check "unsupported model_type exits 2" test "$rc" -eq 2
check "unsupported model_type lists supported" grep -q "supported: t5, gpt2" "$tmp/err"
echo '{"model_type": "gpt2", "n_embd": 100, "n_head": 3}' >"$tmp/heads.json"
run model "$tmp/heads.json"
check "indivisible heads exits 2" test "$rc" -eq 2
check "indivisible heads names the key" grep -q "'hidden_size'" "$tmp/err"
run --model gpt2 --gpus 0
check "zero gpus exits 2" test "$rc" -eq 2
run model gpt2 --micro-batch 0
check "zero micro-batch exits 2" test "$rc" -eq 2
run model gpt2 --seq-len 4096
check "too long for learned positions exits 2" test "$rc" -eq 2
run model bloom-560m --attention sdpa
check "sdpa on bloom exits 2" test "$rc" -eq 2
check "sdpa on bloom says what to use" grep -q "use --attention eager" "$tmp/err"
run model gpt2 --precision fp8
check "bad precision exits 2" test "$rc" -eq 2
run model gpt2 --no-such-flag
check "unknown flag exits 2" test "$rc" -eq 2
run model llama-2-70b --micro-batch 1099511627776 --seq-len 1048576
check "overflow exits 2" test "$rc" -eq 2
check "overflow is named" grep -q "overflows" "$tmp/err"
run
check "no arguments exits 2" test "$rc" -eq 2

finish
