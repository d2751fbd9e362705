#!/usr/bin/env python3
"""Where the time of DeepSpeed's BF16_Optimizer (ZeRO stage 0, bf16) step and backward goes, part
by part, on models whose tensors are large enough that the GPU's share matters.

The models are n parallel Linear(W, W) modules (n parameter tensors of W*W elements), so the
parameter count and the tensor count can be varied apart. For each, with gradient_clipping 1.0
(the loss is large, so the clip loop runs), 8 steps; the parts of engine.step() and
engine.backward() are wrapped with timers:
  host_s   perf_counter from the part's entry to its return (no synchronisation added): host time,
           plus any wait inside the part for the GPU (the step's norm check and clip test
           synchronise)
  sync_s   the same step run again with torch.cuda.synchronize() at the part's entry and return:
           the part's host and GPU time with nothing overlapping it
Parts of step: norm (get_global_norm_of_tensors), clip (clip_tensors_by_global_norm), adam
(the inner FusedAdam.step), update_lp (update_lp_params), clear (clear_hp_grads), and the whole
engine.step(). Parts of backward: autograd (loss.backward inside the optimizer's backward),
update_hp (update_hp_grads), allreduce (engine.allreduce_gradients), the whole engine.backward().

Nothing here is a training run: it shows which parts of the step overlap and which serialise.
usage: bf16_step_timeline.py [--out F]   (needs deepspeed importable)
"""
import argparse
import functools
import gc
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from probe_util import Parallel, single_rank_env, write_doc  # noqa: E402


STATE = {"sync": False, "rec": None}


def timed_part(name, fn):
    @functools.wraps(fn)
    def inner(*a, **k):
        if STATE["sync"]:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        r = fn(*a, **k)
        if STATE["sync"]:
            torch.cuda.synchronize()
        if STATE["rec"] is not None:
            STATE["rec"][name] = STATE["rec"].get(name, 0.0) + time.perf_counter() - t0
        return r
    return inner


def run(n, w, steps=8, warm=3):
    import deepspeed
    import deepspeed.runtime.bf16_optimizer as bfo
    torch.manual_seed(0)
    model = Parallel(n, w).to("cuda")
    cfg = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
           "bf16": {"enabled": True}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-5}},
           "zero_optimization": {"stage": 0}, "gradient_clipping": 1.0,
           "steps_per_print": 10 ** 9, "wall_clock_breakdown": False}
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
    opt = engine.optimizer
    saved = (bfo.get_global_norm_of_tensors, bfo.clip_tensors_by_global_norm)
    bfo.get_global_norm_of_tensors = timed_part("norm", saved[0])
    bfo.clip_tensors_by_global_norm = timed_part("clip", saved[1])
    opt.optimizer.step = timed_part("adam", opt.optimizer.step)
    opt.update_lp_params = timed_part("update_lp", opt.update_lp_params)
    opt.clear_hp_grads = timed_part("clear", opt.clear_hp_grads)
    opt.update_hp_grads = timed_part("update_hp", opt.update_hp_grads)
    engine.allreduce_gradients = timed_part("allreduce", engine.allreduce_gradients)
    x = torch.randn(2, 4, w, device="cuda", dtype=torch.bfloat16)
    out = {"n": n, "w": w, "params": n * w * w, "wrapper": type(opt).__name__}
    for mode in ("host", "sync"):
        recs = []
        for i in range(warm + steps):
            STATE["sync"] = mode == "sync"
            rec = {}
            STATE["rec"] = rec
            loss = engine(x).float().pow(2).sum()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            engine.backward(loss)
            torch.cuda.synchronize()
            t1 = time.perf_counter()
            engine.step()
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            rec["backward"] = t1 - t0
            rec["step"] = t2 - t1
            if i >= warm:
                recs.append(rec)
        STATE["rec"] = None
        out[mode + "_s"] = {k: statistics.median(r.get(k, 0.0) for r in recs) for k in recs[0]}
    try:
        out["grad_norm"] = float(opt._global_grad_norm)
    except Exception:  # noqa: BLE001
        pass
    bfo.get_global_norm_of_tensors, bfo.clip_tensors_by_global_norm = saved
    try:
        engine.destroy()
    except Exception:  # noqa: BLE001
        pass
    del engine, model, opt
    gc.collect()
    torch.cuda.empty_cache()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--grid", default="64x16,256x16,64x2048,256x1024,128x2048,384x1024,64x4096")
    a = ap.parse_args()
    single_rank_env(29514)
    import deepspeed
    deepspeed.init_distributed()
    rows, t0 = [], time.time()
    for g in a.grid.split(","):
        n, w = (int(v) for v in g.split("x"))
        r = run(n, w)
        rows.append(r)
        print(json.dumps(r), f"({time.time() - t0:.0f} s)", file=sys.stderr, flush=True)
    doc = {"schema": "dsplan-bf16-step-timeline/1", "torch": torch.__version__,
           "deepspeed": deepspeed.__version__, "device": torch.cuda.get_device_name(0),
           "date": time.strftime("%Y-%m-%d"), "rows": rows}
    write_doc(doc, a.out)


if __name__ == "__main__":
    main()
