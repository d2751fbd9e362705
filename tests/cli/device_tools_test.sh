#!/usr/bin/env bash
# The device-side report tools on record sets already on disk (no GPU needed):
# tools/device/registered_report.py against fresh set 6, whose README recorded its results when
# the set ran (2026-12-04: step 5.5 % mean, 16.3 % worst, 6 of 7 in the registered band, 6 of 7
# within 10 % throughput; three stage 0-2 plans that FusedAdam did not train: two losses
# unchanged, one risen).
# And tools/device/make_offload_cases.py, which registers offload cases with dsplan's prediction.
# Usage: device_tools_test.sh SOURCE_DIR DSPLAN
set -u
src=$1
bin=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"
cd "$src" || exit 1

python3 tools/device/registered_report.py docs/validation/deepspeed/fresh-1204g >"$tmp/out" 2>"$tmp/err"
check "registered_report exits 0" test $? -eq 0
check "one row per registered plan, all ran" test "$(grep -c '| ok |$' "$tmp/out")" -eq 7
check "the step summary of fresh set 6" \
  grep -q "mean |error| 5.5 %, worst -16.3 % (phi-2)" "$tmp/out"
check "6 of 7 in the registered band" grep -q "Inside the registered band: 6 of 7" "$tmp/out"
check "6 of 7 within 10 % throughput" grep -q "within 10 % of the registered prediction: 6 of 7" "$tmp/out"
check "the losses that did not fall are flagged (two unchanged, one rose)" \
  test "$(grep -c '(unchanged)' "$tmp/out")" -eq 2 -a "$(grep -c '(rose)' "$tmp/out")" -eq 1
# deepspeed_records.py writes the config DeepSpeed was given: after FusedAdam failed to build in
# fresh set 15's call, the runner reran four cases with torch.optim.AdamW (the group's
# optimizer_override), which their records must say (optimizer_inner AdamW in the results).
mkdir -p "$tmp/emu"
cp docs/validation/deepspeed/emu13-1207/results-callH200s30a.jsonl "$tmp/emu/"
python3 tools/device/deepspeed_records.py "$tmp/emu" >"$tmp/emu.jsonl" 2>"$tmp/err"
check "deepspeed_records exits 0" test $? -eq 0
check "torch_adam in exactly the records of the cases that ran torch.optim.AdamW" python3 - \
  "$tmp/emu.jsonl" docs/validation/deepspeed/emu13-1207/results-callH200s30a.jsonl <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
inner = {s["sub_id"]: s.get("optimizer_inner") for l in open(sys.argv[2]) if l.strip()
         for s in json.loads(l)["subs"]}
ta = {r["id"]: bool(r["ds_config"]["optimizer"]["params"].get("torch_adam")) for r in recs}
ok = len(ta) == 6 and all(ta[i] == (inner[i] == "AdamW") for i in ta) and sum(ta.values()) == 5
sys.exit(0 if ok else 1)
PY

# A registered plan without a run is listed as missing, not dropped.
mkdir -p "$tmp/set"
cp docs/validation/deepspeed/fresh-1204g/plans-dsplan.jsonl "$tmp/set/"
head -3 docs/validation/deepspeed/fresh-1204g/results-callM.jsonl >"$tmp/set/results-callM.jsonl"
python3 tools/device/registered_report.py "$tmp/set" >"$tmp/out" 2>"$tmp/err"
check "a partial set reports" test $? -eq 0
check "the plans that did not run are missing" test "$(grep -c ': missing\.$' "$tmp/out")" -eq 4

# A case registration (make_offload_cases.py's files): runs matched by case id, the allocator
# recording case left out, NVMe traffic set against the block device's bytes per step.
mkdir -p "$tmp/cases"
cp docs/validation/deepspeed/offfresh-1205/cases-memhist.jsonl "$tmp/cases/"
cp docs/validation/deepspeed/nvme-1205/cases-nvme-a.jsonl "$tmp/cases/"
python3 - "$tmp/cases" <<'PY'
import json, sys
d = sys.argv[1]
case = json.loads(open(d + "/cases-nvme-a.jsonl").readline())
p = case["pred"][0]
steps = [2 * p["step_s"]] + [1.08 * p["step_s"]] * 4
per = [{"disk_read_mb": 100.0 * (i + 1), "disk_write_mb": 50.0} for i in range(5)]
sub = {"status": "ok", "median_step_s": 1.08 * p["step_s"], "step_times_s": steps, "per_step": per,
       "losses": [12.0, 11.0], "steps_max_alloc_mb": p["peak_allocated_mb"] * 1.01}
json.dump({"id": case["id"], "model": case["model"], "subs": [sub]}, open(d + "/results-callX.jsonl", "w"))
PY
python3 tools/device/registered_report.py "$tmp/cases" >"$tmp/out" 2>"$tmp/err"
check "registered_report reads a case registration" test $? -eq 0
check "every NVMe case listed, the memhist case left out" test "$(grep -c '^| qwen2-1.5b' "$tmp/out")" -eq 0 -a "$(grep -c 'missing\.$' "$tmp/out")" -eq 2
check "the run matched by id: -7.4 % (predicted 1/1.08 of measured), in band, within 10 %" \
  grep -q "| -7.4% | yes | yes |" "$tmp/out"
check "NVMe bytes: the median of steps 3-5 (400 / 50 MiB) beside the registration" \
  grep -q "| 7538 / 7538 MiB | 400 / 50 MiB |" "$tmp/out"

# An NVMe case: the ds_config DeepSpeed will get (NVMe for both, the parameters all on the drive
# behind 2.5e8-element buffers), the async_io build flagged, and the prediction's NVMe traffic.
# qwen2-0.5b has 494,032,768 parameters; with the optimizer on NVMe each step reads fp32 master,
# both Adam states and the swapped gradients (16 bytes each) and writes the same 16 (the
# gradients in the backward, master and states after), plus at every gather the 16-bit
# parameters (2 bytes), and after the step their update (2 bytes).
python3 tools/device/make_offload_cases.py --dsplan "$bin" --models models --out "$tmp/nv.jsonl" \
  --set t --case qwen2-0.5b:3:cpu:8:nvme --case qwen2-0.5b:3:nvme:8:nvme >"$tmp/out" 2>"$tmp/err"
check "make_offload_cases registers NVMe cases" test $? -eq 0
check "NVMe cases: config, flags and predicted traffic" python3 - "$tmp/nv.jsonl" <<'PY'
import json, sys
a, b = [json.loads(l) for l in open(sys.argv[1])]
P, MiB = 494032768, 2 ** 20
za, zb = a["ds_config"]["zero_optimization"], b["ds_config"]["zero_optimization"]
assert a["id"] == "t_qwen2-0.5b_s3_mb8_optnvme_paramcpu", a["id"]
assert za["offload_optimizer"]["device"] == "nvme" and za["offload_optimizer"]["nvme_path"]
assert za["offload_param"] == {"device": "cpu", "pin_memory": True}, za["offload_param"]
assert zb["offload_param"]["device"] == "nvme" and zb["offload_param"]["max_in_cpu"] == 0
assert zb["offload_param"]["buffer_size"] == 250000000
assert a["needs_aio"] and b["needs_aio"] and a["needs_cpu_adam"]
pa, pb = a["pred"][0], b["pred"][0]
assert abs(pa["nvme_read_mb_per_step"] - 16 * P / MiB) < 0.1, pa["nvme_read_mb_per_step"]
assert abs(pa["nvme_write_mb_per_step"] - 16 * P / MiB) < 0.1, pa["nvme_write_mb_per_step"]
# The parameters: at least one 16-bit read (every layer's forward gather) and one write.
assert pb["nvme_read_mb_per_step"] >= pa["nvme_read_mb_per_step"] + 2 * P / MiB - 1, pb
assert abs(pb["nvme_write_mb_per_step"] - 18 * P / MiB) < 0.1, pb["nvme_write_mb_per_step"]
assert pb["step_s"] > pa["step_s"] and pa["time_band"]["unvalidated_nvme_share"] > 0.5
PY
python3 tools/device/make_offload_cases.py --dsplan "$bin" --models models --out "$tmp/nv.jsonl" \
  --set t --case qwen2-0.5b:3:cpu:8:nvme >"$tmp/out" 2>"$tmp/err"
check "a registered file is never overwritten" test $? -ne 0
check "the refusal says so" grep -q "never overwritten" "$tmp/err"
python3 tools/device/make_offload_cases.py --dsplan "$bin" --models models --out "$tmp/bad.jsonl" \
  --case qwen2-0.5b:2:none:8:nvme >"$tmp/out" 2>"$tmp/err"
check "NVMe optimizer offload below stage 3 is refused" test $? -ne 0 -a ! -e "$tmp/bad.jsonl"
check "the refusal names the rule" grep -q "OPT is cpu or nvme (stage 3 only)" "$tmp/err"

# ZeRO-3's gathered parameters when the backward starts, dsplan's builder against
# tools/dev/zero3_coordinator_emu.py (an independent replay of DeepSpeed 0.14.5's coordinator on
# transformers' module tree), for qwen2-1.5b at one rank with the parameters offloaded (where a
# gather allocates): within one decoder layer (46.8 M elements), at the defaults, a small
# max_live, no prefetch, a tiny max_live and no reuse window; and, for a model built outside
# deepspeed.zero.Init (--no-zero-init against the emulator's --linear-views), what is allocated
# then, gathered or held by released Linears' saved views.
check "gathered parameters at the backward's start track DeepSpeed's coordinator" python3 - "$bin" <<'PY'
import json, os, subprocess, sys, tempfile
sys.path.insert(0, "tools/dev")
import zero3_coordinator_emu as emu
layer = 46_792_704
for live, reuse, bucket in [(1e9, 1e9, 5e7), (3e8, 1e9, 5e7), (1e9, 1e9, 0), (1e8, 1e8, 5e7), (1e9, 0, 5e7)]:
    z = {"stage": 3, "reduce_bucket_size": 50000000, "stage3_max_live_parameters": int(live),
         "stage3_max_reuse_distance": int(reuse), "stage3_prefetch_bucket_size": int(bucket),
         "offload_optimizer": {"device": "cpu", "pin_memory": True},
         "offload_param": {"device": "cpu", "pin_memory": True}}
    cfg = {"bf16": {"enabled": True}, "train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1,
           "optimizer": {"type": "AdamW", "params": {"lr": 5e-5}}, "zero_optimization": z}
    gathered, held = emu.at_backward("qwen2-1.5b", live, reuse, bucket)
    for extra, ref in (([], gathered), (["--no-zero-init"], gathered + held)):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "c.json")
            json.dump(cfg, open(path, "w"))
            out = subprocess.run([sys.argv[1], "simulate", "--model", "qwen2-1.5b", "--ds-config", path,
                                  "--json"] + extra, capture_output=True, text=True, check=True).stdout
        j = json.loads(out)
        assert j["gpu"]["peak_at"] == "bwd loss (micro-step 0)", j["gpu"]["peak_at"]
        ours = j["gpu"]["breakdown_at_peak"]["gathered_params"] / 2
        assert abs(ours - ref) <= layer, (live, reuse, bucket, extra, ours, ref)
PY

# The emulator with the saved views against the real run: the caching allocator's record of
# qwen2-1.5b at ZeRO-3 with both offloads, defaults, model built outside zero.Init
# (docs/validation/deepspeed/offfresh-1205/memhist, DeepSpeed 0.14.5 on an H100). Replayed to the
# largest allocated point of step 3's backward, the blocks of the model's weight sizes (by hand
# from the config: MLP 8960 x 1536, q/o 1536 x 1536, k/v 256 x 1536, the tied 151936 x 1536
# table, 2 bytes each) against what the emulator says is allocated then, within one layer.
check "the emulator's gathered and held weights match the allocator's record" python3 - <<'PY'
import gzip, json, sys
sys.path.insert(0, "tools/dev")
import zero3_coordinator_emu as emu
d = json.load(gzip.open("docs/validation/deepspeed/offfresh-1205/memhist/off_qwen2-1.5b_s3_mb8_optcpu_paramcpu_mh.json.gz"))
marks = dict(d["marks"])
lo, hi = marks["step3:bwd"], marks["step3:opt"]
sizes = {2 * 8960 * 1536, 2 * 1536 * 1536, 2 * 256 * 1536, 2 * 151936 * 1536}
live, cur, best, best_weights = {}, 0, -1, 0
for seg in d["segments_start"]:
    cur += sum(sz for sz, st in seg[4] if st == "active_allocated")
for action, addr, size, _, t in d["events"]:
    if action == "alloc":
        live[addr] = size
        cur += size
        if lo <= t < hi and cur > best:
            best, best_weights = cur, sum(s for s in live.values() if s in sizes)
    elif action == "free_completed" and addr in live:
        cur -= live.pop(addr)
gathered, held = emu.at_backward("qwen2-1.5b", 1e9, 1e9, 5e7)
assert held > 0 and abs(2 * (gathered + held) - best_weights) <= 2 * 46_792_704, (gathered, held, best_weights)
PY

# make_offload_cases.py --env and --steps: the driver's modes and step count go into each case,
# and the time estimate allows for the extra steps; bad values are refused.
python3 tools/device/make_offload_cases.py --dsplan "$bin" --models models --out "$tmp/ph.jsonl" \
  --set t --case gpt2:3:cpu:2 --env DSBENCH_PHASE_SYNC=1 --env DSBENCH_TIMELINE=1 --steps 8 \
  >"$tmp/out" 2>"$tmp/err"
check "make_offload_cases takes --env and --steps" test $? -eq 0
check "the case carries the driver's variables and 8 steps, with a longer estimate" \
  python3 - "$tmp/ph.jsonl" <<'PY'
import json, sys
c = json.loads(open(sys.argv[1]).readline())
assert c["env"] == {"DSBENCH_PHASE_SYNC": "1", "DSBENCH_TIMELINE": "1"}, c["env"]
assert c["n_steps"] == 8, c["n_steps"]
# 90 s base, plus (3 profiled steps + 3 more timed steps) x the predicted step.
assert c["est_s"] == 90 + round(6 * c["pred"][0]["step_s"]), (c["est_s"], c["pred"][0]["step_s"])
PY
python3 tools/device/make_offload_cases.py --dsplan "$bin" --models models --out "$tmp/bad.jsonl" \
  --set t --case gpt2:3:cpu:2 --env TIMELINE=1 >"$tmp/out" 2>"$tmp/err"
check "--env without the DSBENCH_ or MALLOC_ prefix is refused, nothing written" \
  bash -c "grep -q \"expected DSBENCH_NAME=VALUE or MALLOC_NAME=VALUE\" '$tmp/err' && test ! -e '$tmp/bad.jsonl'"
# glibc's malloc tunables go to the driver's process too (the runner starts one per case).
python3 tools/device/make_offload_cases.py --dsplan "$bin" --models models --out "$tmp/malloc.jsonl" \
  --set t --case gpt2:3:cpu:2 --env MALLOC_MMAP_MAX_=0 >"$tmp/out" 2>"$tmp/err"
check "--env MALLOC_MMAP_MAX_=0 goes into the case" \
  python3 -c "import json,sys; c=json.loads(open(sys.argv[1]).readline()); assert c['env']['MALLOC_MMAP_MAX_'] == '0', c['env']" "$tmp/malloc.jsonl"
python3 tools/device/make_offload_cases.py --dsplan "$bin" --models models --out "$tmp/bad.jsonl" \
  --set t --case gpt2:3:cpu:2 --steps 2 >"$tmp/out" 2>"$tmp/err"
check "--steps below 3 is refused" bash -c "grep -q 'expected 3 to 20' '$tmp/err' && test ! -e '$tmp/bad.jsonl'"

# copy_table.py on offphase-1206's runs: gemma-2b's backward spent 2.833 s in 164 D2H copies into
# pageable memory (its kernel profile), 5.01 GB of bf16 parameters at 1.8 GB/s, and faulted in
# 4.67 GB a step (1,140,8xx pages); a stage-2 run without offload has no cast copies to rate.
python3 tools/device/copy_table.py docs/validation/deepspeed/offphase-1206/results-callH100p.jsonl \
  docs/validation/deepspeed/pipeline-1205/results-callH100p.jsonl >"$tmp/out" 2>"$tmp/err"
check "copy_table exits 0" test $? -eq 0
check "copy_table: gemma-2b's faults, copies and their rate" \
  grep -q "^| offphase_gemma-2b_s3_mb4_optcpu_paramcpu | 4.991 | 4.67 (4.67) | 164, 2.833, 1.8 |" "$tmp/out"
check "copy_table: no rate where there is no offloaded cast copy" \
  grep -q "^| pl_gpt2-xl_s2_mb8_gc | 0.466 | 0.00 (0.00) | -, - |" "$tmp/out"
python3 tools/device/copy_table.py "$tmp/none.jsonl" >"$tmp/out" 2>"$tmp/err"
check "copy_table: a missing file is one line naming it" \
  bash -c "test \$(wc -l < '$tmp/err') -eq 1 && grep -q 'none.jsonl' '$tmp/err'"

# phase_table.py on pipeline-1205's run: measured phase medians (steps 3..5) and dsplan's phases,
# which add up to its step; the t5-3b case ran out of memory and is left out.
python3 tools/device/phase_table.py --dsplan "$bin" --hardware h100-sxm \
  docs/validation/deepspeed/pipeline-1205/results-callH100p.jsonl >"$tmp/out" 2>"$tmp/err"
check "phase_table exits 0" test $? -eq 0
check "phase_table: one row per phase-synced run that finished" test "$(grep -c '^| pl_' "$tmp/out")" -eq 4
# gpt2-xl's forward took 103.9, 103.7 and 140.2 ms in steps 3-5: median 104, last 140.
check "phase_table: measured medians and last steps from per_step" \
  grep -q "^| pl_gpt2-xl_s2_mb8_gc | 104 (140) / " "$tmp/out"
check "phase_table: the predicted phases sum to the predicted step" python3 - "$tmp/out" <<'PY'
import re, sys
rows = [l for l in open(sys.argv[1]) if l.startswith("| pl_")]
for l in rows:
    pred = [float(x) for x in re.findall(r"/ ([0-9.]+)", l)]
    assert len(pred) == 4 and abs(sum(pred[:3]) - pred[3]) <= 2, l
PY


# Multi-GPU plans emulated on one GPU: make_gpu_cases.py --gpus 4 registers the rank-1 plan of
# `dsplan --model gpt2 --gpus 4` with emulate_world_size 4 (the last rank) and a train_batch_size of 4 ranks;
# deepspeed_records.py turns a run of it into a record of world size 4 that counts for memory
# only; dsplan accuracy predicts it as one rank of four.
python3 tools/device/make_gpu_cases.py --dsplan "$bin" --models models --out "$tmp/emu" \
  --skip probes,stage3 --fractions 100 --gpus 4 --plan-models gpt2 >"$tmp/out" 2>"$tmp/err"
check "make_gpu_cases --gpus 4 registers a case" test $? -eq 0
check "the case runs rank 0 of 4, its batch counts 4 ranks" python3 - "$tmp/emu/cases-plans.jsonl" <<'PY'
import json, sys
c = json.loads(open(sys.argv[1]).readline())
s = c["subs"][0]
assert c["emulate_world_size"] == 4 and c["id"] == "plan_gpt2_w4", c["id"]
assert c["emulate_rank"] == 3, c.get("emulate_rank")  # the last rank, whose peak dsplan predicts
d = s["ds_config"]
assert d["train_batch_size"] == 4 * d["train_micro_batch_size_per_gpu"] * d["gradient_accumulation_steps"], d
assert s["sub_id"].endswith("_w4") and s["pred"]["peak_allocated_mb"] > 0
PY
python3 tools/device/make_gpu_cases.py --dsplan "$bin" --models models --out "$tmp/emu2" \
  --fractions 100 --gpus 4 --plan-models gpt2 >"$tmp/out" 2>"$tmp/err"
check "make_gpu_cases --gpus 4 without --skip probes,stage3 is refused" test $? -ne 0
check "and says which --skip it needs" grep -q "skip probes,stage3" "$tmp/err"
mkdir -p "$tmp/emurun"
python3 - "$tmp/emu/cases-plans.jsonl" "$tmp/emurun/results-callE.jsonl" <<'PY'
import json, sys
c = json.loads(open(sys.argv[1]).readline())
s = dict(c["subs"][0])
p = s["pred"]
s.update(status="ok", steps_max_alloc_mb=p["peak_allocated_mb"], steps_max_reserved_mb=p["peak_reserved_mb"],
         median_step_s=0.01, step_times_s=[0.01] * 8)
json.dump({"id": c["id"], "model": c["model"], "emulated_world_size": 4, "emulated_rank": 3, "env": {}, "subs": [s]},
          open(sys.argv[2], "w"))
PY
python3 tools/device/deepspeed_records.py "$tmp/emurun" >"$tmp/emurun/records.jsonl" 2>"$tmp/err"
check "deepspeed_records marks the run: world size 4, emulated, no timing" python3 - "$tmp/emurun/records.jsonl" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).readline())
assert r["world_size"] == 4 and r["emulated"] and r["timing_valid"] is False, r
assert r["emulated_rank"] == 3, r
PY
"$bin" accuracy --calibration "$tmp/emurun/records.jsonl" --json >"$tmp/out" 2>"$tmp/err"
check "dsplan accuracy predicts it as one rank of four: memory as registered, no step time" python3 - "$tmp/out" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
r = j["rows"][0]
assert "world size 4" in r["config"], r["config"]
assert r["step_error"] is None and r["measured_step_s"] is None, r
assert abs(r["alloc_error"]) < 1e-3, r["alloc_error"]
# its step (0.01 s, no data moved) against the prediction with every collective free
w = r["step_without_communication"]
assert r["emulated"] is True and r["world_size"] == 4, r
assert w["measured_s"] == 0.01 and abs(w["error"] - (w["predicted_s"] / 0.01 - 1)) < 1e-9, w
assert 0 < w["predicted_s"] < r["predicted_step_s"], (w, r["predicted_step_s"])
assert j["emulated_step_without_communication"]["runs"] == 1, j["emulated_step_without_communication"]
PY

# registered_report.py shows an emulated run as memory only: its step moved no data.
cp "$tmp/emurun/results-callE.jsonl" "$tmp/emu/"
python3 tools/device/registered_report.py "$tmp/emu" >"$tmp/out" 2>"$tmp/err"
check "registered_report marks the emulated run" grep -q "one rank of 4, no data moved" "$tmp/out"
check "and counts its memory apart, without a step error" python3 - "$tmp/out" <<'PY'
import sys
t = open(sys.argv[1]).read()
assert "Emulated ranks (one rank of N on one GPU): 1 of 1 ran" in t, t
assert "Step time over" not in t, t
PY

# split_results.py files one call's results into the sets that registered their ids, and refuses
# to overwrite a results file (nothing written then).
mkdir -p "$tmp/split/a" "$tmp/split/b"
printf '{"id": "x1"}\n{"id": "x2"}\n' >"$tmp/split/a/cases-plans.jsonl"
printf '{"id": "y1"}\n' >"$tmp/split/b/cases-one.jsonl"
printf '{"id": "x2", "v": 1}\n{"id": "y1", "v": 2}\n{"id": "z9", "v": 3}\n{"id": "x1", "v": 4}\n' >"$tmp/split/call.jsonl"
python3 tools/device/split_results.py --call c1 "$tmp/split/call.jsonl" "$tmp/split/a" "$tmp/split/b" \
  >"$tmp/out" 2>"$tmp/err"
check "split_results files each result into its set" python3 - "$tmp/split" <<'PY'
import json, sys
d = sys.argv[1]
a = [json.loads(l)["v"] for l in open(d + "/a/results-c1.jsonl")]
b = [json.loads(l)["v"] for l in open(d + "/b/results-c1.jsonl")]
assert a == [1, 4] and b == [2], (a, b)
PY
check "and names the id no set registered" grep -q "z9" "$tmp/err"
printf '{"id": "x1", "v": 5}\n{"id": "y1", "v": 6}\n' >"$tmp/split/call2.jsonl"
rm "$tmp/split/b/results-c1.jsonl"
python3 tools/device/split_results.py --call c1 "$tmp/split/call2.jsonl" "$tmp/split/a" "$tmp/split/b" \
  >"$tmp/out" 2>"$tmp/err"
check "split_results refuses an existing results file" test $? -ne 0
check "and writes nothing then" test ! -e "$tmp/split/b/results-c1.jsonl"

echo "device_tools_test: $pass passed, $fail failed"
test "$fail" -eq 0
