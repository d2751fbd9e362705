#!/usr/bin/env python3
"""DeepSpeed's BF16_Optimizer (ZeRO stage 0 with bf16) taken apart, the parts timed on their own.

host   Host time per parameter tensor of each part, on models of n tiny parallel Linear modules
       (n parameter tensors, each the same small size, so wall time is host time):
         backward   engine.backward(loss): autograd + update_hp_grads + the engine's all-reduce
         update     optimizer.update_hp_grads() alone (per tensor: hp.add_(lp.grad.to(fp32)))
         allreduce  engine.allreduce_gradients() alone (the fp32 flat buffer through the
                    communication dtype, also with one rank)
         step       engine.step(): the per-tensor norm loop, clipping, FusedAdam, the copy back
       each with gradient_clipping 0 (no clip) and 1e-6 (the clip loop always runs: per tensor
       t.mul_(clip_coef)); least squares t = a + b * n per part and clip setting.
gpu    GPU time (CUDA events behind a busy-wait, so the host's dispatch is not in it) of the
       step's per-tensor kernels by tensor size: the fp32 norm (t.float().norm(2) ** 2, the copy
       into the buffer, the add), the clip's mul_, and update_hp_grads' widening cast + add; and the
       flat casts of the all-reduce. Small tensors show each kernel's floor.

Nothing here is a training run; dsplan prices stage 0's step and backward with these
(docs/stack-costs.md section 6).
usage: bf16_optimizer_parts.py [--out F] [--sizes 64,256,768]   (needs deepspeed importable)
"""
import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from probe_util import Parallel, fit_per_tensor as fit, gpu_time, release_engine, single_rank_env, write_doc  # noqa: E402

W = 16


def sync():
    torch.cuda.synchronize()


def med(xs):
    return statistics.median(xs)


def host_parts(n, clip, reps=10, warm=3):
    import deepspeed
    torch.manual_seed(0)
    model = Parallel(n, W).to("cuda")
    cfg = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
           "bf16": {"enabled": True}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-5}},
           "zero_optimization": {"stage": 0}, "gradient_clipping": clip,
           "steps_per_print": 10 ** 9, "wall_clock_breakdown": False}
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
    wrapper = type(engine.optimizer).__name__
    x = torch.randn(4, 8, W, device="cuda", dtype=torch.bfloat16)
    t = {"backward": [], "update": [], "allreduce": [], "step": []}
    for i in range(warm + reps):
        loss = engine(x).float().pow(2).sum()
        sync()
        t0 = time.perf_counter()
        engine.backward(loss)
        sync()
        t1 = time.perf_counter()
        engine.optimizer.update_hp_grads()
        sync()
        t2 = time.perf_counter()
        engine.allreduce_gradients()
        sync()
        t3 = time.perf_counter()
        engine.step()
        sync()
        t4 = time.perf_counter()
        if i >= warm:
            t["backward"].append(t1 - t0)
            t["update"].append(t2 - t1)
            t["allreduce"].append(t3 - t2)
            t["step"].append(t4 - t3)
    clipped = None
    try:
        gn = float(engine.optimizer._global_grad_norm)
        clipped = clip > 0 and gn > clip
    except Exception:  # noqa: BLE001
        gn = None
    del model
    release_engine(engine)
    del engine
    return {k: med(v) for k, v in t.items()}, wrapper, gn, clipped


def gpu_parts():
    rows = []
    buf = torch.empty([], dtype=torch.float32, device="cuda")
    acc = torch.zeros([], dtype=torch.float32, device="cuda")
    for numel in (1 << 10, 1 << 14, 1 << 17, 1 << 20, 1 << 22, 1 << 24, 1 << 26):
        k = max(1, min(64, (1 << 26) // numel))  # k tensors per timed call (past L2 for big ones)
        hp = [torch.randn(numel, device="cuda", dtype=torch.float32) for _ in range(k)]
        lp = [torch.randn(numel, device="cuda", dtype=torch.bfloat16) for _ in range(k)]

        def norm_loop():
            for t in hp:
                buf.data.copy_(t.data.float().norm(2.0) ** 2.0)
                acc.data.add_(buf.data)

        def norm_only():
            for t in hp:
                t.norm(2.0)

        coef = torch.tensor(0.5, device="cuda")

        def clip_loop():
            for t in hp:
                t.detach().mul_(coef)

        def cast_up():
            for t in lp:
                t.to(torch.float32)

        def update_hp():
            for h, g in zip(hp, lp):
                h.add_(g.to(torch.float32).view(h.shape))

        r = {"numel": numel, "tensors": k}
        for name, fn in (("norm_loop", norm_loop), ("norm_only", norm_only), ("clip_mul", clip_loop),
                         ("cast_up", cast_up), ("update_hp", update_hp)):
            r[name + "_s_per_tensor"] = gpu_time(fn, reps=20) / k
        rows.append(r)
        print(f"gpu {r}", file=sys.stderr, flush=True)
        del hp, lp
        torch.cuda.empty_cache()
    n = 1 << 28
    flat32 = torch.randn(n, device="cuda", dtype=torch.float32)
    flat16 = torch.empty(n, device="cuda", dtype=torch.bfloat16)
    flat = {"numel": n,
            "cast_down_s": gpu_time(lambda: flat16.copy_(flat32), reps=6),
            "cast_up_copy_s": gpu_time(lambda: flat32.copy_(flat16), reps=6),
            "fill_fp32_s": gpu_time(lambda: flat32.zero_(), reps=6)}
    return rows, flat


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--sizes", default="64,256,768")
    ap.add_argument("--no-host", action="store_true")
    a = ap.parse_args()
    single_rank_env(29513)
    doc = {"schema": "dsplan-bf16-optimizer-parts/1", "torch": torch.__version__,
           "device": torch.cuda.get_device_name(0), "date": time.strftime("%Y-%m-%d")}
    t0 = time.time()
    if not a.no_host:
        import deepspeed
        deepspeed.init_distributed()
        doc["deepspeed"] = deepspeed.__version__
        grid = []
        for clip in (0.0, 1e-6):
            for n in [int(s) for s in a.sizes.split(",")]:
                times, wrapper, gn, clipped = host_parts(n, clip)
                row = {"n": n, "gradient_clipping": clip, "wrapper": wrapper, "grad_norm": gn,
                       "clipped": clipped, **times}
                grid.append(row)
                print(f"host {row} ({time.time() - t0:.0f} s)", file=sys.stderr, flush=True)
        doc["host_grid"] = grid
        fits = {}
        for clip in (0.0, 1e-6):
            for part in ("backward", "update", "allreduce", "step"):
                fits[f"clip{clip:g}_{part}"] = fit([(r["n"], r[part]) for r in grid
                                                    if r["gradient_clipping"] == clip])
        doc["host_fit"] = fits
    rows, flat = gpu_parts()
    doc["gpu_per_tensor"] = rows
    doc["gpu_flat"] = flat
    write_doc(doc, a.out)


if __name__ == "__main__":
    main()
