#!/usr/bin/env python3
"""Host time of DeepSpeed's backward and optimizer step per parameter tensor, at ZeRO stages 0, 1
and 2, with FusedAdam (what dsplan's plans emit), on the synthetic stacks of tiny modules of
stack_costs.py ("zero3": 32 and 128 Linear modules without bias, with bias, and pairs). The
tensors are tiny, so wall time is host time. Stage 0 in bf16 is DeepSpeed's BF16_Optimizer, whose
backward also runs update_hp_grads and the engine's gradient all-reduce; stack_costs.py measured
only stages 2 and 3, with torch's AdamW.

Least squares t = a + b * parameter tensors per stage and phase; the grid is kept too.
usage: step_host_stages.py [--out F]   (needs deepspeed importable)
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stack_costs as sc  # noqa: E402
from probe_util import fit_per_tensor as fit  # noqa: E402


def ds_config(stage):
    return {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
            "bf16": {"enabled": True}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-5}},
            "zero_optimization": {"stage": stage}, "steps_per_print": 10 ** 9,
            "wall_clock_breakdown": False}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--stages", default="0,1,2")
    a = ap.parse_args()
    stages = [int(s) for s in a.stages.split(",")]
    for k, val in dict(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=os.environ.get("MASTER_PORT", "29512")).items():
        os.environ.setdefault(k, val)
    import deepspeed
    deepspeed.init_distributed()
    grid = []
    t0 = time.time()
    for kind in ("leaf", "leaf_bias", "pair"):
        for n in (32, 128):
            row = {"kind": kind, "n": n}
            row["modules"], row["params"] = sc.stack_counts(kind, n)
            for stage in stages:
                torch.manual_seed(0)
                model = sc.Stack(kind, n).to(sc.DEV)
                # Scaled so that activations keep their size through the stack: bf16 gradients
                # of a deep stack of default-initialized layers underflow to zero, and
                # BF16_Optimizer asserts a positive gradient norm.
                with torch.no_grad():
                    for p in model.parameters():
                        p.mul_(1.7)
                x = torch.randn(1, 8, sc.W, device=sc.DEV, dtype=sc.DT)
                f, b, s = sc.engine_times(model, ds_config(stage), lambda e: e(x).float().sum())
                row[f"s{stage}"] = {"fwd_s": f, "bwd_s": b, "step_s": s}
            grid.append(row)
            print(f"{kind} n={n}: {row} ({time.time() - t0:.0f} s)", file=sys.stderr, flush=True)
    fits = {}
    for stage in stages:
        for ph in ("bwd_s", "step_s"):
            fits[f"s{stage}_{ph}"] = fit([(r["params"], r[f"s{stage}"][ph]) for r in grid])
    doc = {"schema": "dsplan-step-host-stages/1", "torch": torch.__version__,
           "deepspeed": __import__("deepspeed").__version__, "device": torch.cuda.get_device_name(0),
           "date": time.strftime("%Y-%m-%d"), "optimizer": "FusedAdam (ds_config AdamW), bf16",
           "grid": grid, "fit_per_param_tensor": fits}
    text = json.dumps(doc, indent=1)
    if a.out:
        open(a.out, "w").write(text)
    print(text)


if __name__ == "__main__":
    main()
