#!/usr/bin/env python3
"""Every rank of ZeRO-1/2 plans of catalog models (`dsplan simulate --rank R`), against what
`dsplan simulate` reports without --rank (docs/simulator.md, "Ranks differ"): 11 models, 2-16
GPUs, stages 1-2, buckets 1e7/5e7/5e8, with and without checkpointing, micro-batch 2. One JSON
line per plan: the plan, the reported rank and peaks, each rank's peak allocated and reserved,
the rank(s) that allocate the most, and whether the report is the most of any rank (it should
be, for both numbers). Session 32 used it to find that the first, the last and the widest rank
miss the worst one in 17 of the 528 plans, and one rank for both numbers misses the other.
usage: rank_sweep.py BUILD/dsplan > sweep.jsonl   (about a minute on 2 cores)"""
import itertools
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DSPLAN = sys.argv[1]
MODELS = ["llama-2-7b", "t5-3b", "gpt2-xl", "falcon-7b", "opt-6.7b", "qwen2-7b", "bloom-7b1", "gemma-7b",
          "mistral-7b", "phi-2", "flan-t5-xl"]
GPUS, STAGES, BUCKETS = [2, 4, 8, 16], [1, 2], [int(1e7), int(5e7), int(5e8)]
MB = 2
tmp = tempfile.mkdtemp()


def config_path(n, stage, bucket):
    path = os.path.join(tmp, f"c_{n}_{stage}_{bucket}.json")
    if not os.path.exists(path):
        json.dump({"bf16": {"enabled": True}, "train_micro_batch_size_per_gpu": MB,
                   "gradient_accumulation_steps": 1, "train_batch_size": MB * n,
                   "optimizer": {"type": "AdamW", "params": {"lr": 1e-5}},
                   "zero_optimization": {"stage": stage, "overlap_comm": True, "contiguous_gradients": True,
                                         "reduce_bucket_size": bucket, "reduce_scatter": True}},
                  open(path, "w"))
    return path


def simulate(model, n, stage, bucket, gc, rank):
    cmd = [DSPLAN, "simulate", "--model", model, "--gpus", str(n), "--ds-config", config_path(n, stage, bucket),
           "--json", "--hardware", "h200-measured"] + (["--gradient-checkpointing"] if gc else []) + \
          (["--rank", str(rank)] if rank is not None else [])
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, DSPLAN_DATA_DIR=ROOT))
    if r.returncode != 0:
        return None
    g = json.loads(r.stdout)["gpu"]
    return g["peak_allocated_bytes"], g["peak_reserved_bytes"], g["rank"]


def one(plan):
    model, n, stage, bucket, gc = plan
    reported = simulate(*plan, None)
    if reported is None:
        return None
    per = [simulate(*plan, r) for r in range(n)]
    alloc = [p[0] for p in per]
    out = {"plan": {"model": model, "gpus": n, "stage": stage, "bucket": bucket, "checkpointing": gc},
           "reported": {"rank": reported[2], "peak_allocated_bytes": reported[0], "peak_reserved_bytes": reported[1]},
           "peak_allocated_bytes": alloc, "peak_reserved_bytes": [p[1] for p in per],
           "allocates_most": [r for r in range(n) if alloc[r] == max(alloc)]}
    out["reports_the_most"] = reported[0] == max(alloc) and reported[1] == max(out["peak_reserved_bytes"])
    return out


plans = list(itertools.product(MODELS, GPUS, STAGES, BUCKETS, [False, True]))
done = []
with ThreadPoolExecutor(os.cpu_count() or 2) as ex:
    for res in ex.map(one, plans):
        if res is not None:
            print(json.dumps(res), flush=True)
            done.append(res["reports_the_most"])
print(f"{sum(done)} of {len(done)} plans report the most of any rank", file=sys.stderr)
