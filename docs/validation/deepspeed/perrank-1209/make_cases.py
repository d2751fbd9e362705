#!/usr/bin/env python3
"""Cases of perrank-1209 (see README.md): retain-1208's t5-3b stage-1 configuration (8 ranks,
checkpointing, micro-batch 24, buckets 1e7 and 5e7) as rank 7 (the last) and rank 3 (a middle
one) under the fake process group, with dsplan's per-rank predictions for each.
usage: make_cases.py BUILD/dsplan HARDWARE > cases.jsonl"""
import copy
import json
import os
import subprocess
import sys
import tempfile

MiB = 2.0 ** 20
ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", ".."))
dsplan, hw = sys.argv[1], sys.argv[2]
base = json.loads(open(os.path.join(ROOT, "docs/validation/deepspeed/retain-1208/cases-retain.jsonl")).readline())
WORLD = base["emulate_world_size"]
with tempfile.TemporaryDirectory() as tmp:
    for rank in (7, 3):
        case = copy.deepcopy(base)
        case["id"] = f"perrank_t5-3b_w{WORLD}_rank{rank}"
        case["emulate_rank"] = rank
        case["variant"] = "rank sweep"
        case["dsplan_summary"] = f"retain-1208's two buckets as rank {rank} of {WORLD}"
        for sub in case["subs"]:
            path = os.path.join(tmp, "c.json")
            json.dump(sub["ds_config"], open(path, "w"))
            cmd = [dsplan, "simulate", "--model", "t5-3b", "--gpus", str(WORLD), "--ds-config", path, "--json",
                   "--no-zero-init", "--hardware", hw, "--seq-len", "512", "--target-len", "128",
                   "--gradient-checkpointing", "--rank", str(rank)]
            j = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=tmp,
                                          env=dict(os.environ, DSPLAN_DATA_DIR=ROOT)).stdout)
            g = j["gpu"]
            assert g["rank"] == rank
            sub["sub_id"] = sub["sub_id"].replace("_rank0_", f"_rank{rank}_")
            sub["pred"] = {"fits": j.get("fits"), "rank": g["rank"],
                           "peak_allocated_mb": round(g["peak_allocated_bytes"] / MiB, 1),
                           "peak_reserved_mb": round(g["peak_reserved_bytes"] / MiB, 1),
                           "peak_at": g.get("peak_at"), "step_s": j["step"].get("time_s"),
                           "command": " ".join(cmd[1:])}
        print(json.dumps(case))
