#!/usr/bin/env python3
"""Split cases-plans.jsonl / cases-stage3.jsonl into the per-call lists that ran on 2026-12-03.

usage: make_call_lists.py DIR [BENCH]      (DIR = docs/validation/deepspeed; BENCH = .dsbench)
  cases-call1.jsonl  tiny-t5 L6 stage-2/3 group (checks the driver, builds FusedAdam), then five plans
  cases-call2.jsonl  the other plans, the tiny stage-3 groups, the real-size pairs (runner defers what does not fit)
  cases-call4.jsonl  llama-2-7b at 100 % and 75 %, mistral-7b at 75 % of the planned micro-batch, each in a
                     fresh process (in call 2 these ran after a stage-3 engine whose memory was not freed)
Plan groups step 5 times (4 for the stage-3 7B plans). cases-call3.jsonl is written by make_call3_cases.py.
"""
import copy
import json
import os
import sys

d = sys.argv[1]
dirs = [d] + sys.argv[2:3]
P = {json.loads(l)["id"]: json.loads(l) for l in open(os.path.join(d, "cases-plans.jsonl"))}
S = {json.loads(l)["id"]: json.loads(l) for l in open(os.path.join(d, "cases-stage3.jsonl"))}
for c in P.values():
    big = c["stage"] == 3
    c["n_steps"] = 4 if big else 5
    for s in c["subs"]:
        s["n_steps"] = c["n_steps"]
    c["est_s"] = 130 if big else 45
call1 = [S["s3iso_tiny-t5-L6"]] + [P["plan_" + m] for m in ["qwen2-1.5b", "pythia-1.4b", "opt-2.7b", "bloom-3b", "gemma-2b"]]
call2 = ([P["plan_" + m] for m in ["llama-2-7b", "phi-2", "llama-3.2-1b", "gpt2-xl", "t5-3b"]]
         + [S["s3iso_tiny-t5-L12"], S["s3iso_tiny-llama-L6"], S["s3iso_tiny-llama-L12"]]
         + [P["plan_mistral-7b"], P["plan_falcon-7b"], S["s3pair_t5-large"], S["s3pair_gpt2-large"]])
call4 = []
P = {json.loads(l)["id"]: json.loads(l) for l in open(os.path.join(d, "cases-plans.jsonl"))}  # as written (subs step 5 times)
for mid, idx in (("llama-2-7b", 2), ("llama-2-7b", 1), ("mistral-7b", 1)):
    c = copy.deepcopy(P["plan_" + mid])
    s = c["subs"][idx]
    c.update(id=f"plan_fresh_{s['sub_id']}", subs=[s], pred=[s["pred"]], est_s=55, n_steps=4,
             variant="fresh process: " + s["variant"])
    call4.append(c)
for name, L in (("cases-call1.jsonl", call1), ("cases-call2.jsonl", call2), ("cases-call4.jsonl", call4)):
    for dd in dirs:
        with open(os.path.join(dd, name), "w") as f:
            for c in L:
                f.write(json.dumps(c) + "\n")
    print(name, [c["id"] for c in L])
