#!/usr/bin/env python3
"""Cases of retain-1208 (see README.md): t5-3b at stage 1 as rank 0 of 8 ranks (fake process
group), checkpointing, at two reduce_bucket_size values, and dsplan's predictions for them.
usage: make_cases.py BUILD/dsplan HARDWARE > cases.jsonl"""
import copy
import json
import os
import subprocess
import sys
import tempfile

import yaml

MiB = 2.0 ** 20
ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", ".."))
dsplan, hw = sys.argv[1], sys.argv[2]
template = json.loads(open(os.path.join(ROOT, "docs/validation/deepspeed/wsweep-1207/cases-h200.jsonl")).readline())
model_config = yaml.safe_load(open(os.path.join(ROOT, "models", "t5-3b.yaml")))["config"]
MB, WORLD = 24, 8
case = {"id": "retain_t5-3b_w8_rank0", "model": "t5-3b", "plan_rank": 0, "emulate_world_size": WORLD,
        "emulate_rank": 0, "variant": "bucket sweep", "stage": 1, "mb": MB, "grad_checkpointing": True,
        "offload_optimizer": "none", "offload_param": "none", "needs_cpu_adam": False, "n_steps": 4,
        "est_s": 90, "src_len": 512, "tgt_len": 128, "subs": [],
        "dsplan_summary": "stage 1, no offload, checkpointing, overlap_comm; bucket 1e7 then 5e7"}
with tempfile.TemporaryDirectory() as tmp:
    for rbs in (10_000_000, 50_000_000):
        dsc = copy.deepcopy(template["subs"][0]["ds_config"])
        dsc["train_micro_batch_size_per_gpu"] = MB
        dsc["train_batch_size"] = MB * WORLD
        dsc["zero_optimization"]["reduce_bucket_size"] = rbs
        path = os.path.join(tmp, "c.json")
        json.dump(dsc, open(path, "w"))
        cmd = [dsplan, "simulate", "--model", "t5-3b", "--gpus", str(WORLD), "--ds-config", path, "--json",
               "--no-zero-init", "--hardware", hw, "--seq-len", "512", "--target-len", "128",
               "--gradient-checkpointing"]
        j = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=tmp,
                                      env=dict(os.environ, DSPLAN_DATA_DIR=ROOT)).stdout)
        g, st = j["gpu"], j["step"]
        pred = {"fits": j.get("fits"), "reason": j.get("reason"),
                "peak_allocated_mb": round(g["peak_allocated_bytes"] / MiB, 1),
                "peak_reserved_mb": round(g["peak_reserved_bytes"] / MiB, 1),
                "peak_total_mb": round(g["peak_total_bytes"] / MiB, 1), "peak_at": g.get("peak_at"),
                "breakdown_at_peak_mb": {k: round(v / MiB, 1) for k, v in (g.get("breakdown_at_peak") or {}).items()
                                         if isinstance(v, (int, float))},
                "step_s": st.get("time_s"), "step_breakdown_s": st.get("breakdown_s"),
                "command": " ".join(cmd[1:])}
        case["subs"].append({"sub_id": f"t5-3b_mb{MB}_w8_rank0_rbs{rbs // 1_000_000}e6", "mb": MB, "stage": 1,
                             "grad_checkpointing": True, "offload_optimizer": "none", "offload_param": "none",
                             "ds_config": dsc, "model_config": model_config, "pred": pred,
                             "variant": f"reduce_bucket_size {rbs:.0e}", "src_len": 512, "tgt_len": 128})
print(json.dumps(case))
