#!/usr/bin/env python3
"""Where one training micro-step's GPU time goes, kernel by kernel, for models at full width.

For each case (catalog model, micro-batch, lengths), the model is built at its real width with
2 and with 4 blocks (T5: encoder and decoder both), bf16 weights, transformers' default
attention (or the case's), and runs forward + backward (no optimizer). torch.profiler records
every CUDA kernel of two steps; the kernels are grouped by what they are (GEMM, attention,
softmax/loss, norm, elementwise, copy/cast, reduce) and the 4- minus 2-block difference gives one
block's share, the 2-block run minus two blocks the rest (embedding, head, loss). Beside them:
the wall time of forward and backward (synchronized), so that wall minus kernel time shows how
much of the step the GPU waited for the host.

Nothing here is fitted: it is the ground truth dsplan's per-op prices are checked against.

usage: step_kernels.py --cases gemma-2b:10,gpt2-xl:11,t5-3b:10 [--seq 1024] [--out F]
"""
import argparse
import collections
import gc
import os
import re
import statistics
import sys
import time
import traceback

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_models  # noqa: E402
from hf_models import load_catalog, with_layers  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DEV = "cuda"


def build(cfgd, attn):
    m, s2s = hf_models.build(cfgd, DEV, torch.bfloat16, attn)
    return m.train(), s2s


CATS = [
    ("gemm", r"gemm|nvjet|cutlass|xmma|sm90_|sm80_|cublas|matmul"),
    ("attention", r"flash|fmha|attention|sdpa|cudnn"),
    ("softmax_loss", r"softmax|nll|cross_entropy|log_softmax"),
    ("norm", r"norm|rms"),
    ("dropout", r"dropout|fused_dropout|bernoulli"),
    ("copy_cast", r"copy|cast|to_copy|convert"),
    ("reduce", r"reduce|sum_kernel|mean"),
    ("elementwise", r"elementwise|vectorized|unrolled|pointwise|gelu|silu|mul|add|tanh"),
]


def category(name):
    n = name.lower()
    for c, rx in CATS:
        if re.search(rx, n):
            return c
    return "other"


def one_step(model, batch):
    loss = model(**batch).loss
    loss.backward()
    model.zero_grad(set_to_none=True)


def measure(model, batch, reps=5):
    for _ in range(3):
        one_step(model, batch)
    torch.cuda.synchronize()
    f, b = [], []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = model(**batch).loss
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        loss.backward()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        model.zero_grad(set_to_none=True)
        f.append(t1 - t0)
        b.append(t2 - t1)
    from torch.profiler import profile, ProfilerActivity
    steps = 2
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            one_step(model, batch)
        torch.cuda.synchronize()
    by_cat = collections.defaultdict(float)
    by_kernel = collections.defaultdict(lambda: [0.0, 0])
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        us = e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
        by_cat[category(e.name)] += us / 1e6 / steps
        k = by_kernel[e.name[:120]]
        k[0] += us / 1e6 / steps
        k[1] += 1
    top = sorted(by_kernel.items(), key=lambda kv: -kv[1][0])[:25]
    return {"wall_fwd_s": statistics.median(f), "wall_bwd_s": statistics.median(b),
            "kernel_s": sum(by_cat.values()), "by_category_s": dict(by_cat),
            "top_kernels": [{"name": n, "s": v[0], "count": v[1] // steps} for n, v in top],
            "peak_allocated_bytes": torch.cuda.max_memory_allocated()}


def batch_for(cfg, s2s, mb, seq, src, tgt):
    return hf_models.lm_batch(cfg, s2s, mb, seq, src, tgt, DEV)


def main():
    ap = argparse.ArgumentParser()
    hf_models.add_case_args(ap)
    args = ap.parse_args()
    doc = hf_models.case_doc("dsplan-step-kernels/1", args)
    t0 = time.time()
    for case in args.cases.split(","):
        name, mb, attn = hf_models.parse_case(case)
        try:
            cfg = load_catalog(args.catalog, name)
            res = {"model": name, "mb": mb, "attn": attn}
            for L in (2, 4):
                torch.cuda.reset_peak_memory_stats()
                m, s2s = build(with_layers(cfg, L), attn)
                batch = batch_for(cfg, s2s, mb, args.seq, args.src, args.tgt)
                res[f"L{L}"] = measure(m, batch)
                del m, batch
                gc.collect()
                torch.cuda.empty_cache()
            doc["cases"][case] = res
        except Exception:  # noqa: BLE001
            doc["errors"][case] = traceback.format_exc()[-2000:]
        print(f"step_kernels: {case} done at {time.time() - t0:.1f} s", file=sys.stderr)
        gc.collect()
        torch.cuda.empty_cache()
        hf_models.save_cases(doc, args.out)
    hf_models.save_cases(doc, args.out, final=True)


if __name__ == "__main__":
    main()
