#!/usr/bin/env python3
"""Call 3 of the 2026-12-03 session: what calls 1-2 left open (see docs/validation/deepspeed/README.md).
usage: make_call3_cases.py --dsplan BUILD/dsplan --models MODELS_DIR --out DIR [--bench .dsbench]
  * the deferred gpt2-large stage 2 / 3 pair (from cases-stage3.jsonl)
  * t5-large stage 2 with checkpointing in a fresh process (in call 2 it ran after stage-3 engines)
  * the 7B plans (stage 3, checkpointing) at 60 % of the planned micro-batch, a second point below the 75 % OOM
"""
import argparse, copy, json, os, shutil, sys, tempfile
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_gpu_cases as M

ap = argparse.ArgumentParser()
ap.add_argument("--dsplan", required=True); ap.add_argument("--models", required=True)
ap.add_argument("--out", required=True); ap.add_argument("--bench", default=None)
a = ap.parse_args()
scratch = tempfile.mkdtemp(prefix="dsplan_scratch_")
S = {json.loads(l)["id"]: json.loads(l) for l in open(os.path.join(a.out, "cases-stage3.jsonl"))}
P = {json.loads(l)["id"]: json.loads(l) for l in open(os.path.join(a.out, "cases-plans.jsonl"))}
out = []
g = S["s3pair_gpt2-large"]
for s in g["subs"]:
    seq, _ = M.seq_args(s["model_config"])
    s["pred"] = M.simulate(a, "gpt2-large", s["ds_config"], scratch, seq, s["grad_checkpointing"])
g["pred"] = [s["pred"] for s in g["subs"]]
t5 = copy.deepcopy(S["s3pair_t5-large"])
sub = [s for s in t5["subs"] if s["sub_id"].endswith("_s2-gc")][0]
seq, _ = M.seq_args(sub["model_config"])
sub["pred"] = M.simulate(a, "t5-large", sub["ds_config"], scratch, seq, True)
sub["sub_id"] += "-fresh"
t5.update(id="s3pair_t5-large_s2gc_fresh", subs=[sub], grad_checkpointing=True, est_s=40, pred=[sub["pred"]])
def sixty(mid):
    c = copy.deepcopy(P["plan_" + mid]); mb = c["mb"]; x = (6 * mb) // 10
    s = copy.deepcopy(c["subs"][0]); s["mb"] = x; s["ds_config"] = M.with_mb(c["ds_config"], x)
    seq, _ = M.seq_args(c["model_config"])
    s["pred"] = M.simulate(a, mid, s["ds_config"], scratch, seq, c["grad_checkpointing"])
    s["sub_id"] = f"{mid}_r1_mb{x}"; s["variant"] = f"60% of planned micro-batch {mb}"
    c.update(id=f"plan60_{mid}", subs=[s], pred=[s["pred"]], est_s=70, n_steps=4, variant="60 % point")
    return c
out = [g, sixty("llama-2-7b"), t5, sixty("mistral-7b"), sixty("falcon-7b")]
shutil.rmtree(scratch, ignore_errors=True)
for d in [a.out] + ([a.bench] if a.bench else []):
    with open(os.path.join(d, "cases-call3.jsonl"), "w") as f:
        for c in out: f.write(json.dumps(c) + "\n")
print([(c["id"], [(s["sub_id"], s["pred"]["peak_allocated_mb"] if s["pred"] else None) for s in c["subs"]]) for c in out])
