#!/usr/bin/env python3
"""Register a set of CPU-offload cases for tools/device/dsbench, with dsplan's prediction of each.

usage: make_offload_cases.py --dsplan BUILD/dsplan --models MODELS_DIR --out CASES.jsonl
                             [--set NAME] [--case MODEL:STAGE:PARAM:MB ...]

Each --case is a catalog model, a ZeRO stage (1-3), where the parameters go (cpu or none; stage 3
only) and a micro-batch; the optimizer is always offloaded to the CPU (pin_memory true), bf16,
reduce bucket 5e7, overlap_comm and contiguous_gradients on, gradient clipping 1.0, one GPU,
1024 tokens (T5: 512 + 128). The prediction (`dsplan simulate ... --json`, peak memory, step time
and its band) is written into the case before anything runs, so the set tests the model out of
sample. Cases are timed once per step (DSBENCH_PHASE_SYNC=0), 5 steps, median of steps 3-5.
"""
import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_gpu_cases import catalog, run_json, seq_args  # noqa: E402

MiB = 2.0 ** 20


def ds_config(stage, param, mb):
    z = {"stage": stage, "contiguous_gradients": True, "overlap_comm": True, "reduce_bucket_size": 50000000,
         "offload_optimizer": {"device": "cpu", "pin_memory": True}}
    if stage == 3 and param == "cpu":
        z["offload_param"] = {"device": "cpu", "pin_memory": True}
    return {"bf16": {"enabled": True}, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
            "optimizer": {"type": "AdamW", "params": {"lr": 5e-05, "betas": [0.9, 0.999], "eps": 1e-08,
                                                       "weight_decay": 0.0}},
            "steps_per_print": 100, "wall_clock_breakdown": False, "train_micro_batch_size_per_gpu": mb,
            "train_batch_size": mb, "zero_optimization": z}


def predict(dsplan, model, dsc, seq, scratch):
    path = os.path.join(scratch, "sim_cfg.json")
    with open(path, "w") as f:
        json.dump(dsc, f)
    cmd = [dsplan, "simulate", "--model", model, "--gpus", "1", "--ds-config", path, "--json"] + seq
    j = run_json(cmd, scratch)
    g, st, h = j.get("gpu", {}), j.get("step", {}), j.get("host", {})
    return {"fits": j.get("fits"), "reason": j.get("reason"),
            "peak_allocated_mb": round(g.get("peak_allocated_bytes", 0) / MiB, 1),
            "peak_reserved_mb": round(g.get("peak_reserved_bytes", 0) / MiB, 1),
            "peak_at": g.get("peak_at"),
            "host_peak_mb": round((h.get("peak_bytes_per_node") or 0) / MiB, 1),
            "step_s": st.get("time_s"), "step_breakdown_s": st.get("breakdown_s"),
            "time_band": st.get("time_band"),
            "command": " ".join(["simulate", "--model", model, "--gpus", "1", "--ds-config",
                                 "SCRATCH/sim_cfg.json", "--json"] + seq)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsplan", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--set", default="offfresh")
    ap.add_argument("--case", action="append", required=True, help="MODEL:STAGE:PARAM:MB")
    a = ap.parse_args()
    if os.path.exists(a.out):
        sys.exit(f"{a.out} exists; registered cases are never overwritten")
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for spec in a.case:
            try:
                model, stage, param, mb = spec.split(":")
                stage, mb = int(stage), int(mb)
            except ValueError:
                sys.exit(f"--case {spec!r}: expected MODEL:STAGE:PARAM:MB, e.g. phi-2:3:cpu:8")
            if param not in ("cpu", "none") or stage not in (1, 2, 3) or (param == "cpu" and stage != 3):
                sys.exit(f"--case {spec!r}: PARAM is cpu (stage 3 only) or none; STAGE is 1, 2 or 3")
            cfg = catalog(a.models, model)
            seq, sh = seq_args(cfg)
            dsc = ds_config(stage, param, mb)
            cid = f"{a.set}_{model}_s{stage}_mb{mb}_optcpu_param{param}"
            case = dict(id=cid, model=model, model_config=cfg, plan_rank=None,
                        variant=f"fresh CPU offload, stage {stage}, params {param}", stage=stage, mb=mb,
                        grad_checkpointing=False, offload_optimizer="cpu", offload_param=param if stage == 3 else "none",
                        ds_config=dsc, pred=[predict(a.dsplan, model, dsc, seq, scratch)], needs_cpu_adam=True,
                        n_steps=5, est_s=90, env={"DSBENCH_PHASE_SYNC": "0"}, **sh)
            rows.append(case)
            p = case["pred"][0]
            print(f"{cid}: {p['step_s']:.3f} s, peak allocated {p['peak_allocated_mb']:.0f} MiB, fits {p['fits']}",
                  file=sys.stderr)
    with open(a.out, "x") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
