#!/usr/bin/env python3
"""The kernels of eager attention with an additive bias (BLOOM's ALiBi path in transformers 5.x:
alibi.baddbmm(q, k^T), + the 4-D causal mask, softmax in fp32, cast back), each timed on its own
at the shapes of real plans, GPU time only (CUDA events behind a busy-wait):

  bmm            torch.bmm(q, kT)                    the plain scores GEMM, for reference
  baddbmm        alibi.baddbmm(q, kT, beta, alpha)   alibi [b*h, 1, k] broadcast as the GEMM's C
  mask_add       scores + mask                       mask [b, 1, q, k] broadcast over heads
  add_same       scores + other                      same shape (the streaming reference)
  cast_up        scores.float()                      bf16 -> fp32
  softmax32      softmax(scores32, -1)               fp32 in, fp32 out
  softmax_dt     softmax(scores, -1, dtype=float32)  bf16 in (what transformers calls)
  cast_down      probs32.to(bf16)
  and the backward of mask_add and of softmax_dt (autograd, through torch.autograd.grad).

Bytes per second count each kernel's reads and writes once. Nothing here is a training run.
usage: eager_attention_kernels.py [--out F]
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from probe_util import gpu_time, write_doc  # noqa: E402


def shape_rows(b, h, s, d):
    bf = torch.bfloat16
    q = torch.randn(b * h, s, d, device="cuda", dtype=bf)
    kT = torch.randn(b * h, d, s, device="cuda", dtype=bf)
    alibi = torch.randn(b * h, 1, s, device="cuda", dtype=bf)
    scores = torch.randn(b, h, s, s, device="cuda", dtype=bf)
    other = torch.randn(b, h, s, s, device="cuda", dtype=bf)
    mask = torch.randn(b, 1, s, s, device="cuda", dtype=bf)
    s32 = scores.float()
    e = scores.numel()
    r = {"b": b, "h": h, "s": s, "d": d, "score_elements": e}

    def put(name, fn, bytes_):
        t = gpu_time(fn)
        r[name] = {"s": t, "bytes": bytes_, "bytes_per_s": bytes_ / t}

    put("bmm", lambda: torch.bmm(q, kT), 2 * (q.numel() + kT.numel() + e))
    put("baddbmm", lambda: alibi.baddbmm(q, kT, beta=1.0, alpha=0.125), 2 * (q.numel() + kT.numel() + 2 * e))
    put("mask_add", lambda: scores + mask, 2 * (2 * e + mask.numel()))
    put("add_same", lambda: scores + other, 6 * e)
    put("cast_up", lambda: scores.float(), 6 * e)
    put("softmax32", lambda: torch.softmax(s32, -1), 8 * e)
    put("softmax_dt", lambda: torch.softmax(scores, -1, dtype=torch.float32), 6 * e)
    p32 = torch.softmax(s32, -1)
    put("cast_down", lambda: p32.to(torch.bfloat16), 6 * e)
    x = scores.clone().requires_grad_(True)
    y = x + mask
    g = torch.randn_like(y)
    put("mask_add_bwd", lambda: torch.autograd.grad(y, x, g, retain_graph=True), 4 * e)
    x2 = scores.clone().requires_grad_(True)
    p = torch.softmax(x2, -1, dtype=torch.float32)
    g2 = torch.randn_like(p)
    put("softmax_dt_bwd", lambda: torch.autograd.grad(p, x2, g2, retain_graph=True), 14 * e)
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    rows = []
    # BLOOM-560m and -1b7 at their planned micro-batches (16 heads, head dim 64 / 128), and a
    # smaller one.
    for b, h, s, d in ((10, 16, 1024, 64), (8, 16, 1024, 128), (4, 32, 1024, 128), (2, 16, 2048, 64)):
        r = shape_rows(b, h, s, d)
        rows.append(r)
        print(json.dumps(r), file=sys.stderr, flush=True)
        torch.cuda.empty_cache()
    doc = {"schema": "dsplan-eager-attention-kernels/1", "torch": torch.__version__,
           "device": torch.cuda.get_device_name(0), "date": time.strftime("%Y-%m-%d"), "rows": rows}
    write_doc(doc, a.out)


if __name__ == "__main__":
    main()
