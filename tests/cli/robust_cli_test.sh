#!/usr/bin/env bash
# Issue 14 end to end: the inputs the fuzzing campaign found crashing, hanging or answering wrong
# with exit 0. Each must now exit 2 with one line on stderr, print nothing on stdout and write no
# file (the planner runs in an empty folder that must stay empty).
# Usage: robust_cli_test.sh PATH/TO/dsplan SOURCE_DIR
set -u
bin=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
src=$2
export DSPLAN_DATA_DIR=$src
ex=$src/examples/host
tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"
work=$tmp/work
mkdir -p "$work"
cd "$work" || exit 1

# bad NAME PATTERN ARGS, and the working folder stays empty.
badnf() {
  bad "$@"
  check "$1 writes no file" test -z "$(ls -A "$work")"
}

# --- flag values: refused, not clamped, wrapped or ignored ---
badnf "gpus x nodes overflow" "--gpus .* --nodes .*65536" --model gpt2 --gpus 2147483647 --nodes 2
badnf "nodes overflow" "65536" --model gpt2 --gpus 8 --nodes 100000
badnf "memory fraction nan" "--max-gpu-memory-fraction" --model gpt2 --gpus 1 --max-gpu-memory-fraction nan
badnf "memory fraction 0" "--max-gpu-memory-fraction" --model gpt2 --gpus 1 --max-gpu-memory-fraction 0
badnf "price nan" "--price-per-gpu-hour" --model gpt2 --gpus 1 --price-per-gpu-hour nan
badnf "price negative" "--price-per-gpu-hour" --model gpt2 --gpus 1 --price-per-gpu-hour -3
badnf "host memory 0" "--host-memory must be more than 0" --model gpt2 --gpus 1 --host-memory 0
badnf "target len 0 (planner)" "--target-len" --model t5-small --gpus 1 --target-len 0
bad "target len 0 (model)" "--target-len" model t5-small --target-len 0
badnf "seq len 0 (planner)" "--seq-len" --model gpt2 --gpus 1 --seq-len 0
badnf "huge reduce bucket" "--reduce-bucket-size" --model gpt2 --gpus 1 --reduce-bucket-size 1000000000000000000
badnf "host name with a space" "--host 'a b' is not a host name" --model gpt2 --gpus 1 --host 'a b'
badnf "host name with a newline" "is not a host name" --model gpt2 --gpus 1 --nodes 2 --host a --host $'b\nc'
badnf "huge micro-batch pin" "--micro-batch" --model gpt2 --gpus 1 --micro-batch 4611686018427387904
badnf "gpus beyond one node with --nodes" "a node of profile .* has 8" --model gpt2 --gpus 12 --nodes 2 --hardware h200-sxm
badnf "gpus not a whole number of nodes" "give --nodes 2 --gpus 8" --model gpt2 --gpus 12 --hardware h200-sxm
bad "simulate gpus overflow" "65536" simulate --model gpt2 --gpus 2147483647 --nodes 2 --ds-config "$ex/zero2_gas2.json"
bad "estimate params overflow" "--params" estimate --params 9000000000000000000

# GPUs beyond one node become nodes (the profile's node has 8 GPUs).
run --model gpt2 --gpus 16 --hardware h200-sxm --no-emit --top 1
check "--gpus 16 on 8-GPU nodes exits 0" test "$rc" -eq 0
check "--gpus 16 on 8-GPU nodes is 2 nodes x 8" grep -q "on 2 node(s) x 8 GPU(s)" "$tmp/out"

# --- CLI11's messages, made one clear line ---
badnf "flag value missing" "--gpus needs an integer" --gpus --model gpt2
bad "two commands" "one command|unexpected" models model gpt2
badnf "stray tokens in order" "unexpected arguments 'a', 'b', 'c'" --model gpt2 --gpus 1 a b c
# An empty argument (an unset variable in quotes) crashed the error message until session 41
# (found by the cli_args fuzzer).
badnf "an empty argument" "unexpected empty argument \"\" on the command line" --model gpt2 --gpus 1 ""
badnf "empty arguments after a stray one" "unexpected argument 'a'" --model gpt2 --gpus 1 a "" ""
# An option given an empty value is refused, not read as absent (which would fall back to a
# default: --hardware '' planned on h200-measured until session 41).
badnf "empty --hardware" "--hardware was given an empty value" --model gpt2 --gpus 1 --hardware ""
badnf "empty --node" "--node was given an empty value" --model gpt2 --gpus 1 --node ""
badnf "empty --precision" "--precision was given an empty value" --model gpt2 --gpus 1 --precision ""
badnf "empty --offload-optimizer" "--offload-optimizer was given an empty value" --model gpt2 --gpus 1 --offload-optimizer ""
badnf "empty --headroom" "--headroom was given an empty value" --model gpt2 --gpus 1 --headroom ""
badnf "empty subcommand option" "--calibration was given an empty value.*dsplan accuracy --help" accuracy --calibration ""
badnf "empty positional" "the model argument was given an empty value" model ""
badnf "a flag given two values" "unexpected argument .5.; run" --model gpt2 --gpus 4 5
badnf "a mistyped command" "unexpected argument .simulat. \\(did you mean the command .simulate.\\?\\)" simulat --model gpt2
badnf "a config where the planner takes none" "unexpected argument .cfg.json. \\(to judge a DeepSpeed config: dsplan check .cfg.json. --model M --gpus N\\)" cfg.json --model gpt2 --gpus 1
long=$(head -c 100000 /dev/zero | tr '\0' 9)
badnf "a 100 KB value is cut" "--gpus" --model gpt2 --gpus "$long"
check "the 100 KB value message is short" test "$(wc -c <"$tmp/err")" -lt 600
badnf "a value with a newline" "gpt2\\\\nsecond" --model $'gpt2\nsecond' --gpus 1
badnf "a non-integer" "--gpus needs an integer, got 'x'" --model gpt2 --gpus x

# --- integer counts in scientific notation (1e6): the exact integer, or one line naming the
# flag and its range; "010" is ten, not CLI11's octal eight ---
run --model gpt2-xl --gpus 8 --grad-accum 1e6 --top 1 --no-emit
check "--grad-accum 1e6 exits 0" test "$rc" -eq 0
check "--grad-accum 1e6 plans 1,000,000 micro-steps" grep -q "accumulation 1000000 x 8 GPU(s)" "$tmp/out"
run --model gpt2 --gpus 1 --grad-accum 2.5E1 --top 1 --no-emit
check "--grad-accum 2.5E1 is 25" grep -q "accumulation 25 x 1 GPU(s)" "$tmp/out"
run --model gpt2 --gpus 1 --grad-accum 010 --top 1 --no-emit
check "--grad-accum 010 is ten" grep -q "accumulation 10 x 1 GPU(s)" "$tmp/out"
run --model gpt2 --gpus 1 --global-batch 2.56e2 --top 1 --no-emit
check "--global-batch 2.56e2 is 256" grep -q "= global batch 256$" "$tmp/out"
run --model gpt2 --gpus 2e0 --nodes 1e0 --micro-batch 4e0 --top 1 --no-emit
check "--gpus 2e0 --nodes 1e0 --micro-batch 4e0 exit 0" test "$rc" -eq 0
check "--gpus 2e0 --micro-batch 4e0 are 2 GPUs and micro-batch 4" grep -q "micro-batch 4 x .* x 2 GPU(s)" "$tmp/out"
run estimate --model gpt2 --gpus 2e0 --micro-batch 3e0
check "estimate --gpus 2e0 is 2 GPUs" grep -q "on 1 node(s) x 2 GPU(s)" "$tmp/out"
check "estimate --micro-batch 3e0 is 3" grep -q "micro-batch 3," "$tmp/out"
badnf "grad-accum not a whole number" "^dsplan: error: --grad-accum must be an integer from 1 to 1048576, got '1.5e0' \(not a whole number\)$" --model gpt2 --gpus 1 --grad-accum 1.5e0
badnf "grad-accum beyond its range" "^dsplan: error: --grad-accum must be an integer from 1 to 1048576, got '1e7'$" --model gpt2 --gpus 1 --grad-accum 1e7
badnf "grad-accum zero" "--grad-accum must be an integer from 1 to 1048576, got '0e5'" --model gpt2 --gpus 1 --grad-accum 0e5
badnf "grad-accum negative" "--grad-accum must be an integer from 1 to 1048576, got '-1e3'" --model gpt2 --gpus 1 --grad-accum=-1e3
badnf "grad-accum huge exponent" "--grad-accum must be an integer from 1 to 1048576" --model gpt2 --gpus 1 --grad-accum 1e999999999999999999
badnf "global batch beyond its range" "--global-batch must be an integer from 1 to 1099511627776, got '1e300'" --model gpt2 --gpus 1 --global-batch 1e300
badnf "gpus beyond its range" "--gpus must be an integer from 1 to 65536, got '1e5'" --model gpt2 --gpus 1e5
badnf "nodes not a whole number" "--nodes must be an integer from 1 to 65536, got '2e-1' \(not a whole number\)" --model gpt2 --gpus 1 --nodes 2e-1
badnf "micro-batch not a whole number" "--micro-batch must be an integer from 1 to 1048576, got '2.5e0'" --model gpt2 --gpus 1 --mb 2.5e0
badnf "an exponent without digits" "--grad-accum needs an integer, got '1e'" --model gpt2 --gpus 1 --grad-accum 1e
bad "simulate micro-batch beyond its range" "--micro-batch must be an integer from 1 to 1048576, got '1e30'" simulate --model gpt2 --gpus 1 --ds-config "$ex/zero2_gas2.json" --micro-batch 1e30
bad "simulate grad-accum not a whole number" "--grad-accum must be an integer .*'1.55e1' \(not a whole number\)" simulate --model gpt2 --gpus 1 --ds-config "$ex/zero2_gas2.json" --grad-accum 1.55e1
bad "estimate gpus beyond its range" "--gpus must be an integer from 1 to 65536, got '1e9'" estimate --model gpt2 --gpus 1e9
bad "model micro-batch not a whole number" "--micro-batch must be an integer from 1 to 1048576, got '5e-1'" model gpt2 --mb 5e-1

# --- readers: nesting, numbers, bytes, devices, folders ---
python3 -c "print('[' * 100000 + ']' * 100000)" >"$tmp/deep.json"
bad "deeply nested config" "nested deeper than" model "$tmp/deep.json"
echo '{"model_type": "gpt2", "n_embd": 1e400}' >"$tmp/big.json"
bad "number outside double range" "1e400" model "$tmp/big.json"
check "no library prefix in the message" test "$(grep -c 'json.exception' "$tmp/err")" -eq 0
echo '{"model_type": "bloom", "hidden_size": 4000000000000, "n_head": 8}' >"$tmp/bloom.json"
bad "bloom with a huge hidden size" "hidden_size" model "$tmp/bloom.json"
echo '{"model_type": "gpt2", "n_layer": 1e7}' >"$tmp/layers.json"
bad "ten million layers" "num_hidden_layers|n_layer" model "$tmp/layers.json"
bad "a device file as config" "not a regular file" model /dev/zero
bad "a device file as ds_config" "not a regular file" simulate --model gpt2 --ds-config /dev/zero
bad "a folder as ds_config" "is a folder" simulate --model gpt2 --ds-config "$tmp"
bad "a device file as profile" "not a regular file" --model gpt2 --gpus 1 --hardware /dev/zero
printf '{"model_type": "gp\xfft2"}' >"$tmp/bytes.json"
bad "non-UTF-8 in a config" "UTF-8" model "$tmp/bytes.json"
# A non-UTF-8 file name with --json: valid JSON out, exit 0.
cp "$ex/gpt2-tiny.json" "$tmp/$(printf 'tiny\xff.json')"
run model "$tmp/$(printf 'tiny\xff.json')" --json
check "non-UTF-8 file name with --json exits 0" test "$rc" -eq 0
check "non-UTF-8 file name with --json prints JSON" json "j['params'] > 0"

# A catalog with hostile entries.
cat_dir=$tmp/data
mkdir -p "$cat_dir/models" "$cat_dir/profiles"
cp "$src/profiles/h200-sxm.yaml" "$cat_dir/profiles/"
{
  echo 'config:'
  echo '  model_type: gpt2'
  echo '  a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]'
  prev=a
  for n in b c d e f g h i; do
    echo "  $n: &$n [*$prev,*$prev,*$prev,*$prev,*$prev,*$prev,*$prev,*$prev,*$prev]"
    prev=$n
  done
} >"$cat_dir/models/bomb.yaml"
printf 'config:\n  model_type: gpt2\n  [a, b]: 1\n' >"$cat_dir/models/key.yaml"
DSPLAN_DATA_DIR=$cat_dir bad "catalog alias bomb" "aliases" model bomb
DSPLAN_DATA_DIR=$cat_dir bad "catalog non-scalar key" "list or mapping" model key
printf 'name: "h\xff"\ndescription: x\n' >"$cat_dir/profiles/bytes.yaml"
DSPLAN_DATA_DIR=$cat_dir bad "profile with non-UTF-8 name" "UTF-8" --model "$ex/gpt2-tiny.json" --gpus 1 --hardware bytes

# --- ds_config values ---
cat >"$tmp/betas.json" <<'JSON'
{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.001, "betas": [0.9, 1e19]}},
 "zero_optimization": {"stage": 2, "reduce_bucket_size": 3000}}
JSON
bad "betas out of range" "betas\[1\]" validate --executor host --model "$ex/gpt2-tiny.json" \
  --ds-config "$tmp/betas.json" --seq-len 16 --gpus 2 --steps 2
echo '{"train_micro_batch_size_per_gpu": 4611686018427387904, "gradient_accumulation_steps": 4}' >"$tmp/batch.json"
bad "batch product overflow" "overflows" simulate --model gpt2 --gpus 2 --ds-config "$tmp/batch.json"

# --- the host executor on valid plans it used to FAIL, and on training that diverges ---
cat >"$tmp/s0bf16.json" <<'JSON'
{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2, "bf16": {"enabled": true},
 "optimizer": {"type": "AdamW", "params": {"lr": 0.001, "weight_decay": 0.01}},
 "zero_optimization": {"stage": 0}}
JSON
run validate --executor host --model "$ex/gpt2-tiny.json" --ds-config "$tmp/s0bf16.json" \
  --seq-len 16 --gpus 2 --steps 10 --json
check "host: stage 0 bf16 on 2 ranks, 10 steps passes" test "$rc" -eq 0
run validate --executor host --model "$ex/gpt2-tiny.json" --ds-config "$ex/zero2_gas2.json" \
  --seq-len 16 --gpus 3 --steps 3 --json
check "host: 3 ranks (padding) pass" test "$rc" -eq 0
check "host: 3 ranks' model states equal the graph's, padding included" json "j['memory_match']"
cat >"$tmp/fp32.json" <<'JSON'
{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.001, "weight_decay": 0.01}},
 "zero_optimization": {"stage": 1}}
JSON
run validate --executor host --model "$ex/gpt2-tiny.json" --ds-config "$tmp/fp32.json" \
  --seq-len 16 --gpus 3 --steps 2 --json
check "host: fp32 on 3 ranks passes" test "$rc" -eq 0
run validate --executor host --model "$ex/gpt2-tiny.json" --ds-config "$ex/zero2_gas2.json" \
  --seq-len 8 --gpus 1 --steps 1000 --json
check "host: 1000 steps on 1 rank pass" test "$rc" -eq 0
check "host: parameters compared after step 3, losses at every step" \
  json "j['params_step'] == 3 and len(j['losses']) == 1000"
cat >"$tmp/diverge.json" <<'JSON'
{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e30}},
 "zero_optimization": {"stage": 2, "reduce_bucket_size": 3000}}
JSON
run validate --executor host --model "$ex/gpt2-tiny.json" --ds-config "$tmp/diverge.json" \
  --seq-len 16 --gpus 2 --steps 3
check "host: training that diverges to NaN FAILs (exit 4), not PASS" test "$rc" -eq 4
check "host: the report says NaN" grep -q "NaN or infinite" "$tmp/out"

# --- bounded work ---
bad "host executor on a large model" "executor host trains on the CPU" validate --executor host \
  --model gpt2-xl --ds-config "$ex/zero2_gas2.json" --seq-len 16 --gpus 2 --steps 2

# --- ZeRO-Infinity flags and node profiles (docs/zero-infinity.md) ---
badnf "unknown node" "unknown node profile 'dgx-9'.*dgx-2" --model gpt2 --gpus 1 --node dgx-9
badnf "host cores 0" "--host-cores must be an integer from 1" --model gpt2 --gpus 1 --host-cores 0
bad "tiles 0" "--tiles must be an integer from 1 to 4096" simulate --model "$ex/gpt2-tiny.json" \
  --gpus 1 --ds-config "$ex/zero3_offload.json" --tiles 0
bad "rank outside the group" "--rank 4: the plan has 4 data-parallel ranks .*valid: 0 to 3" simulate \
  --model "$ex/gpt2-tiny.json" --gpus 4 --ds-config "$ex/zero2_gas2.json" --rank 4
bad "tiles below stage 3" "tiling .* needs ZeRO stage 3" check --model "$ex/gpt2-tiny.json" \
  --gpus 1 --ds-config "$ex/zero2_gas2.json" --tiles 4
printf 'name: n\ndescription: d\ngpu_profile: v100-32gb\ngpus_per_node: {value: 2.5, datasheet: "x"}\n' \
  >"$tmp/node.yaml"
bad "node profile with a fractional GPU count" "node.yaml.*gpus_per_node.*integer" \
  --model gpt2 --gpus 1 --node "$tmp/node.yaml"
check "nothing written for the node errors" test -z "$(ls -A "$work")"

# --- writes that fail say why ---
bad "a missing second --calibration" "calibration file .*no/such.jsonl" accuracy \
  --calibration "$src/tests/fixtures/calibration/deepspeed-h200.jsonl" --calibration "$tmp/no/such.jsonl"
bad "--markdown is a folder" "is a folder" accuracy --markdown "$tmp"
bad "--markdown in a missing folder" "does not exist" accuracy --markdown "$tmp/no/such/r.md"
check "nothing created for the missing folder" test ! -e "$tmp/no"
bad "--trace in a missing folder" "does not exist" simulate --model "$ex/gpt2-tiny.json" \
  --ds-config "$ex/zero2_gas2.json" --seq-len 16 --trace "$tmp/no/such/t.json"

# --- stdout that cannot be written ---
if [ -w /dev/full ]; then
  "$bin" models >/dev/full 2>"$tmp/err"
  rc=$?
  check "stdout full exits 2" test "$rc" -eq 2
  check "stdout full says so in one line" test "$(wc -l <"$tmp/err")" -eq 1
  check "stdout full names the cause" grep -q "writing the output failed" "$tmp/err"
fi
"$bin" models >&- 2>"$tmp/err"
rc=$?
check "closed stdout exits 2" test "$rc" -eq 2
check "closed stdout says so in one line" test "$(wc -l <"$tmp/err")" -eq 1

finish
