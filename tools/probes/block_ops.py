#!/usr/bin/env python3
"""One block's GPU time, op by op: which PyTorch op launched each kernel, forward or backward.

step_kernels.py groups a step's kernels by what they are (GEMM, copy, ...); this probe says who
launched them, so that a family's block can be compared op by op with `dsplan model --times`.
For each case (catalog model, micro-batch) the model is built at full width with 2 and with 4
blocks (bf16, transformers' default attention unless the case names one), runs 3 warm-up steps
(forward + backward, no optimizer), then torch.profiler records 2 steps with CPU ops and CUDA
kernels. Each kernel is charged to the innermost ATen op that launched it (FunctionEvent.kernels
of the op's own, not its children's), keyed by pass (forward: the main thread; backward:
autograd's thread), op name and input shapes. The 4- minus 2-block difference over 2 is one
block's share. Also per case: the SM clock and power sampled while profiling (a step is long
enough to pull the clock down, docs/stack-costs.md section 7).

Nothing is fitted here: it is the ground truth the per-op prices are checked against.

usage: block_ops.py --cases pythia-1.4b:31,llama-3.2-1b:22 [--seq 1024] [--out F]
Prints (or writes) a JSON document, schema dsplan-block-ops/1:
  cases[case] = {model, mb, attn, ops: [{pass, op, shapes, per_block_s, per_block_count,
                 kernels: [name...]}], block_s: {fwd, bwd}, rest_s: {fwd, bwd}, clocks}
"""
import argparse
import collections
import gc
import os
import subprocess
import sys
import threading
import time
import traceback

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_models  # noqa: E402
from hf_models import load_catalog, with_layers  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DEV = "cuda"


def smi_sampler(samples, stop):
    while not stop.is_set():
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw",
                                  "--format=csv,noheader,nounits"], capture_output=True,
                                 text=True, timeout=5).stdout.strip().split(",")
            samples.append([float(x) for x in out[:2]])
        except Exception:  # noqa: BLE001
            return
        stop.wait(0.2)


def one_step(model, batch):
    loss = model(**batch).loss
    loss.backward()
    model.zero_grad(set_to_none=True)


def kernel_us(k):
    return getattr(k, "duration", None) or getattr(k, "device_time", 0.0) or 0.0


def profile_ops(model, batch, steps=2):
    for _ in range(3):
        one_step(model, batch)
    torch.cuda.synchronize()
    from torch.profiler import profile, ProfilerActivity
    samples, stop = [], threading.Event()
    th = threading.Thread(target=smi_sampler, args=(samples, stop), daemon=True)
    th.start()
    main_tid = threading.get_ident()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                 record_shapes=True) as prof:
        for _ in range(steps):
            one_step(model, batch)
        torch.cuda.synchronize()
    stop.set()
    th.join()
    events = prof.events()
    # The forward runs on the thread that called the model; find it as the thread of the first
    # top-level op (the profiler's thread ids are not Python's).
    threads = collections.Counter(e.thread for e in events if e.device_type != torch.autograd.DeviceType.CUDA)
    fwd_thread = None
    for e in events:
        if e.device_type != torch.autograd.DeviceType.CUDA and e.cpu_parent is None:
            fwd_thread = e.thread
            break
    ops = collections.defaultdict(lambda: [0.0, 0, set()])
    total = {"fwd": 0.0, "bwd": 0.0}
    for e in events:
        if e.device_type == torch.autograd.DeviceType.CUDA or not e.kernels:
            continue
        ps = "fwd" if e.thread == fwd_thread else "bwd"
        shapes = str([list(s) for s in (e.input_shapes or []) if s])[:160]
        rec = ops[(ps, e.name, shapes)]
        for k in e.kernels:
            us = kernel_us(k)
            rec[0] += us / 1e6 / steps
            total[ps] += us / 1e6 / steps
            rec[2].add(k.name[:90])
        rec[1] += 1
    del main_tid, threads
    out = {}
    for (ps, name, shapes), (s, n, ks) in ops.items():
        out[f"{ps}|{name}|{shapes}"] = {"pass": ps, "op": name, "shapes": shapes, "s": s,
                                         "count": n / steps, "kernels": sorted(ks)}
    clocks = None
    if samples:
        half = samples[len(samples) // 2:]
        clocks = {"sm_mhz_median": sorted(x[0] for x in half)[len(half) // 2],
                  "power_w_median": sorted(x[1] for x in half)[len(half) // 2], "n": len(samples)}
    return out, total, clocks


def batch_for(cfg, s2s, mb, seq, src, tgt):
    return hf_models.lm_batch(cfg, s2s, mb, seq, src, tgt, DEV)


def per_block(r2, r4):
    keys = set(r2) | set(r4)
    rows = []
    for k in keys:
        a, b = r2.get(k), r4.get(k)
        s = ((b["s"] if b else 0.0) - (a["s"] if a else 0.0)) / 2
        n = ((b["count"] if b else 0) - (a["count"] if a else 0)) / 2
        ref = b or a
        if abs(s) < 1e-6 and n == 0:
            continue
        rows.append({"pass": ref["pass"], "op": ref["op"], "shapes": ref["shapes"],
                     "per_block_s": s, "per_block_count": n, "kernels": ref["kernels"]})
    rows.sort(key=lambda r: (r["pass"], -r["per_block_s"]))
    return rows


def main():
    ap = argparse.ArgumentParser()
    hf_models.add_case_args(ap)
    args = ap.parse_args()
    import transformers
    doc = hf_models.case_doc("dsplan-block-ops/1", args, transformers=transformers.__version__)
    t0 = time.time()
    for case in args.cases.split(","):
        name, mb, attn = hf_models.parse_case(case)
        try:
            cfg = load_catalog(args.catalog, name)
            runs = {}
            for L in (2, 4):
                m, s2s = hf_models.build(with_layers(cfg, L), DEV, torch.bfloat16, attn)
                m.train()
                batch = batch_for(cfg, s2s, mb, args.seq, args.src, args.tgt)
                runs[L] = profile_ops(m, batch)
                del m, batch
                gc.collect()
                torch.cuda.empty_cache()
            (o2, t2, c2), (o4, t4, c4) = runs[2], runs[4]
            doc["cases"][case] = {
                "model": name, "mb": mb, "attn": attn,
                "block_s": {p: (t4[p] - t2[p]) / 2 for p in ("fwd", "bwd")},
                "rest_s": {p: t2[p] - (t4[p] - t2[p]) for p in ("fwd", "bwd")},
                "clocks": {"L2": c2, "L4": c4},
                "ops": per_block(o2, o4)}
        except Exception:  # noqa: BLE001
            doc["errors"][case] = traceback.format_exc()[-2000:]
        print(f"block_ops: {case} done at {time.time() - t0:.1f} s", file=sys.stderr)
        hf_models.save_cases(doc, args.out)
    hf_models.save_cases(doc, args.out, final=True)


if __name__ == "__main__":
    main()
