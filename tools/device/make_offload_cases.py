#!/usr/bin/env python3
"""Register a set of offload cases for tools/device/dsbench, with dsplan's prediction of each.

usage: make_offload_cases.py --dsplan BUILD/dsplan --models MODELS_DIR --out CASES.jsonl
                             [--set NAME] [--case MODEL:STAGE:PARAM:MB[:OPT] ...] [--env KEY=VALUE ...] [--steps N]

Each --case is a catalog model, a ZeRO stage (1-3), where the parameters go (cpu, nvme or none;
stage 3 only), a micro-batch and where the optimizer goes (cpu, the default, or nvme: stage 3
only); pin_memory true, bf16, reduce bucket 5e7, overlap_comm and contiguous_gradients on,
gradient clipping 1.0, one GPU, 1024 tokens (T5: 512 + 128). NVMe offload takes DeepSpeed's
default aio block; offloaded parameters get a swap buffer of 2.5e8 elements (the largest catalog
embedding a one-GPU case swaps must fit one buffer) and max_in_cpu 0 (all of them on the disk);
the driver points nvme_path at a fresh folder of the machine's disk. The prediction (`dsplan simulate ... --json`, peak memory, step time and its
band) is written into the case before anything runs, so the set tests the model out of sample.
Cases are timed once per step (DSBENCH_PHASE_SYNC=0), 5 steps (--steps), median of steps 3 on, unless --env
sets the driver's variables otherwise (e.g. DSBENCH_PHASE_SYNC=1 DSBENCH_TIMELINE=1: phase by phase,
with one more profiled step per phase, which the case's time estimate then allows for).
"""
import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_gpu_cases import catalog, run_json, seq_args  # noqa: E402

MiB = 2.0 ** 20


NVME_PATH = "/tmp/dsbench_nvme"  # replaced per case by the driver (driver.nvme_paths)


def ds_config(stage, param, mb, opt="cpu"):
    z = {"stage": stage, "contiguous_gradients": True, "overlap_comm": True, "reduce_bucket_size": 50000000,
         "offload_optimizer": {"device": opt, "pin_memory": True}}
    if opt == "nvme":
        z["offload_optimizer"]["nvme_path"] = NVME_PATH
    if stage == 3 and param in ("cpu", "nvme"):
        z["offload_param"] = {"device": param, "pin_memory": True}
        if param == "nvme":
            # max_in_cpu 0: every 16-bit partition lives on NVMe (the default 1e9 keeps a model this
            # size wholly in host memory, and nothing would be read from the disk).
            z["offload_param"].update(nvme_path=NVME_PATH, buffer_size=250000000, max_in_cpu=0)
    return {"bf16": {"enabled": True}, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
            "optimizer": {"type": "AdamW", "params": {"lr": 5e-05, "betas": [0.9, 0.999], "eps": 1e-08,
                                                       "weight_decay": 0.0}},
            "steps_per_print": 100, "wall_clock_breakdown": False, "train_micro_batch_size_per_gpu": mb,
            "train_batch_size": mb, "zero_optimization": z}


def predict(dsplan, model, dsc, seq, scratch):
    path = os.path.join(scratch, "sim_cfg.json")
    with open(path, "w") as f:
        json.dump(dsc, f)
    # The bench driver builds the model outside deepspeed.zero.Init (from_config, then
    # deepspeed.initialize): predict that (docs/deepspeed-facts.md, "What keeps a released weight").
    cmd = [dsplan, "simulate", "--model", model, "--gpus", "1", "--ds-config", path, "--json",
           "--no-zero-init"] + seq
    j = run_json(cmd, scratch)
    g, st, h, nv = j.get("gpu", {}), j.get("step", {}), j.get("host", {}), j.get("nvme", {})
    return {"fits": j.get("fits"), "reason": j.get("reason"),
            "nvme_read_mb_per_step": round((nv.get("read_bytes_per_step") or 0) / MiB, 1),
            "nvme_write_mb_per_step": round((nv.get("write_bytes_per_step") or 0) / MiB, 1),
            "peak_allocated_mb": round(g.get("peak_allocated_bytes", 0) / MiB, 1),
            "peak_reserved_mb": round(g.get("peak_reserved_bytes", 0) / MiB, 1),
            "peak_at": g.get("peak_at"),
            "host_peak_mb": round((h.get("peak_bytes_per_node") or 0) / MiB, 1),
            "step_s": st.get("time_s"), "step_breakdown_s": st.get("breakdown_s"),
            "time_band": st.get("time_band"),
            "command": " ".join(["simulate", "--model", model, "--gpus", "1", "--ds-config",
                                 "SCRATCH/sim_cfg.json", "--json", "--no-zero-init"] + seq)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsplan", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--set", default="offfresh")
    ap.add_argument("--case", action="append", required=True, help="MODEL:STAGE:PARAM:MB[:OPT]")
    ap.add_argument("--steps", type=int, default=5, help="timed steps per case (median of step 3 on)")
    ap.add_argument("--env", action="append", default=[],
                    help="KEY=VALUE for the driver's process: DSBENCH_* (its modes, e.g. DSBENCH_TIMELINE=1) "
                         "or MALLOC_* (glibc's malloc tunables, e.g. MALLOC_MMAP_MAX_=0)")
    a = ap.parse_args()
    env = {"DSBENCH_PHASE_SYNC": "0"}
    for kv in a.env:
        key, sep, value = kv.partition("=")
        if not sep or not key.startswith(("DSBENCH_", "MALLOC_")) or not key.replace("_", "").isalnum():
            sys.exit(f"--env {kv!r}: expected DSBENCH_NAME=VALUE or MALLOC_NAME=VALUE, e.g. DSBENCH_TIMELINE=1")
        env[key] = value
    profiled = [k for k in ("DSBENCH_TIMELINE", "DSBENCH_KPROF", "DSBENCH_SYNCSITES") if env.get(k, "0") != "0"]
    if not 3 <= a.steps <= 20:
        sys.exit(f"--steps {a.steps}: expected 3 to 20 (the median starts at step 3)")
    if os.path.exists(a.out):
        sys.exit(f"{a.out} exists; registered cases are never overwritten")
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for spec in a.case:
            try:
                parts = spec.split(":")
                if len(parts) not in (4, 5):
                    raise ValueError
                model, stage, param, mb = parts[:4]
                opt = parts[4] if len(parts) == 5 else "cpu"
                stage, mb = int(stage), int(mb)
            except ValueError:
                sys.exit(f"--case {spec!r}: expected MODEL:STAGE:PARAM:MB[:OPT], e.g. phi-2:3:cpu:8 or "
                         "qwen2-0.5b:3:nvme:8:nvme")
            if (param not in ("cpu", "nvme", "none") or opt not in ("cpu", "nvme") or stage not in (1, 2, 3)
                    or (param != "none" and stage != 3) or (opt == "nvme" and stage != 3)):
                sys.exit(f"--case {spec!r}: PARAM is cpu or nvme (stage 3 only) or none; OPT is cpu or nvme "
                         "(stage 3 only); STAGE is 1, 2 or 3")
            cfg = catalog(a.models, model)
            seq, sh = seq_args(cfg)
            dsc = ds_config(stage, param, mb, opt)
            cid = f"{a.set}_{model}_s{stage}_mb{mb}_opt{opt}_param{param}"
            pred = predict(a.dsplan, model, dsc, seq, scratch)
            nvme = "nvme" in (opt, param)
            # Init (the first swap-out) and 5 steps; NVMe-bound steps take seconds each.
            est = max(90, round(60 + 8 * (pred["step_s"] or 0))) if nvme else 90
            # Timed steps beyond 5, and about three more steps (one per phase) per profiled mode.
            est += round((3 * len(profiled) + a.steps - 5) * (pred["step_s"] or 0))
            case = dict(id=cid, model=model, model_config=cfg, plan_rank=None,
                        variant=f"fresh offload, stage {stage}, optimizer {opt}, params {param}", stage=stage,
                        mb=mb, grad_checkpointing=False, offload_optimizer=opt,
                        offload_param=param if stage == 3 else "none", ds_config=dsc, pred=[pred],
                        needs_cpu_adam=True, needs_aio=nvme, n_steps=a.steps, est_s=est,
                        env=dict(env), **sh)
            rows.append(case)
            p = case["pred"][0]
            print(f"{cid}: {p['step_s']:.3f} s, peak allocated {p['peak_allocated_mb']:.0f} MiB, fits {p['fits']}",
                  file=sys.stderr)
    with open(a.out, "x") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
