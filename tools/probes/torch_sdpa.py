#!/usr/bin/env python3
"""Measures PyTorch's fused scaled-dot-product attention (the kernels transformers' "sdpa"
attention runs: cuDNN or flash on Hopper, as PyTorch selects them) forward and backward, as a
table the cost model prices the PyTorch stack's attention from (profile key stack.attention).

Inputs are laid out as transformers passes them: q, k, v are [b, h, s, d] views (transpose(1, 2))
of [b, s, h, d] projections; the causal rows pass is_causal=True (no mask tensor), as transformers
does for a causal model without padding. The backward is autograd's through the same call, the
gradient of the output contiguous.

Method: uniform random operands; per point 2 warm-up + 7 timed calls, each behind a 1 ms
busy-wait (so that the launch is not on the clock), CUDA events around the call, the median.
FLOPs as the profile's attention table counts them: forward 4·b·h·s²·d (halved when causal),
backward 2.5x the forward.

usage: torch_sdpa.py [--dtypes bf16,fp16] [--out F] [--quick] [--dropout P] [--head-dims L] [--seqs L]
                     [--mask-window W] [--gqa G]
(--dropout: every row with that attention dropout, as a model with attn_pdrop trains)
(--mask-window: every row passes a bool sliding-window causal mask [b, 1, s, s] of window W and
is_causal=False, with K and V contiguous [b, h, s, d], as transformers 5.17 calls SDPA for a
sliding layer once the sequence reaches its window (masking_utils; K/V are repeat_kv's copies);
the rows' "causal" is False and their FLOPs are the whole square's, as dsplan prices them. Not
for the profile's table: a check of the non-causal rows against what a masked call runs.)
(--gqa G: K and V with one head per G query heads, called with enable_gqa=True, as transformers
5.17 calls SDPA for a grouped-query model without a mask (Llama 3, Qwen3, Gemma 3); FLOPs as for
the query heads. A check of the table's rows, measured with as many K/V heads as query heads.)
Prints a JSON document (schema dsplan-torch-sdpa/1): versions, method, backend in use, and rows
[dtype, head_dim, causal, seq, batch_heads, fwd_flops_per_s, bwd_flops_per_s]; "layout" rows
time the same points with contiguous [b, h, s, d] inputs (not in the table: a check).
"""
import argparse
import os
import platform
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import probe_util  # noqa: E402

DT = {"bf16": torch.bfloat16, "fp16": torch.float16}


def timed(fn):
    return probe_util.gpu_time(fn, reps=7, warm=2, sleep=1_000_000)


def window_mask(seq, window, dev):
    """transformers' sliding-window causal mask as SDPA gets it: True where a query may attend
    (kv <= q and q - kv < window), [1, 1, s, s], broadcast over the batch."""
    i = torch.arange(seq, device=dev)
    d = i[:, None] - i[None, :]
    return ((d >= 0) & (d < window))[None, None]


def point(dtype, hd, causal, seq, bh, contiguous=False, heads=16, dropout=0.0, window=0, gqa=1):
    b = max(1, bh // heads)
    h = bh // b
    dev = "cuda"
    mask = None
    kw = {}
    if gqa > 1:
        # One K/V head per |gqa| query heads (h is 16: G of 1, 2, 4, 8 or 16 divides it).
        q = torch.rand(b, seq, h, hd, device=dev, dtype=dtype, requires_grad=True)
        k, v = (torch.rand(b, seq, h // gqa, hd, device=dev, dtype=dtype, requires_grad=True)
                for _ in range(2))
        qv, kv, vv = (t.transpose(1, 2) for t in (q, k, v))
        kw = {"enable_gqa": True}
        out = F.scaled_dot_product_attention(qv, kv, vv, is_causal=causal, **kw)
        go = torch.rand_like(out)
        fwd = timed(lambda: F.scaled_dot_product_attention(qv, kv, vv, is_causal=causal, **kw))
        t_b = timed(lambda: torch.autograd.grad(out, (q, k, v), go, retain_graph=True))
        flops = 4.0 * b * h * seq * seq * hd * (0.5 if causal else 1.0)
        del q, k, v, out, go
        return b * h, flops / fwd, 2.5 * flops / t_b
    if window:
        causal, contiguous = False, True
        mask = window_mask(seq, window, dev).expand(b, 1, seq, seq)
    if contiguous:
        q, k, v = (torch.rand(b, h, seq, hd, device=dev, dtype=dtype, requires_grad=True)
                   for _ in range(3))
        qv, kv, vv = q, k, v
    else:
        q, k, v = (torch.rand(b, seq, h, hd, device=dev, dtype=dtype, requires_grad=True)
                   for _ in range(3))
        qv, kv, vv = (t.transpose(1, 2) for t in (q, k, v))
    out = F.scaled_dot_product_attention(qv, kv, vv, attn_mask=mask, is_causal=causal, dropout_p=dropout)
    go = torch.rand_like(out)
    fwd = timed(lambda: F.scaled_dot_product_attention(qv, kv, vv, attn_mask=mask, is_causal=causal,
                                                       dropout_p=dropout))

    def bwd():
        torch.autograd.grad(out, (q, k, v), go, retain_graph=True)
    t_b = timed(bwd)
    flops = 4.0 * b * h * seq * seq * hd * (0.5 if causal else 1.0)
    del q, k, v, out, go
    return b * h, flops / fwd, 2.5 * flops / t_b


def backend_in_use(dtype, window=0, gqa=1):
    """Which fused kernel PyTorch picks for a causal bf16 call (with |window|: a masked one, as
    point() makes it), from the profiler's kernel names."""
    from torch.profiler import profile, ProfilerActivity
    if gqa > 1:
        q = torch.rand(2, 1024, 8, 128, device="cuda", dtype=dtype, requires_grad=True).transpose(1, 2)
        k = torch.rand(2, 1024, 8 // min(gqa, 8), 128, device="cuda", dtype=dtype,
                       requires_grad=True).transpose(1, 2)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            o = F.scaled_dot_product_attention(q, k, k, is_causal=True, enable_gqa=True)
            o.sum().backward()
            torch.cuda.synchronize()
        return sorted({e.name[:80] for e in prof.events()
                       if any(x in e.name.lower() for x in ("flash", "fmha", "sdpa", "cudnn", "attention"))})
    if window:
        q = torch.rand(2, 8, 1024, 128, device="cuda", dtype=dtype, requires_grad=True)
        kw = {"attn_mask": window_mask(1024, window, "cuda").expand(2, 1, 1024, 1024), "is_causal": False}
    else:
        q = torch.rand(2, 1024, 8, 128, device="cuda", dtype=dtype, requires_grad=True).transpose(1, 2)
        kw = {"is_causal": True}
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        o = F.scaled_dot_product_attention(q, q, q, **kw)
        o.sum().backward()
        torch.cuda.synchronize()
    names = sorted({e.name[:80] for e in prof.events()
                    if any(x in e.name.lower() for x in ("flash", "fmha", "sdpa", "cudnn", "attention"))})
    return names


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtypes", default="bf16,fp16")
    ap.add_argument("--out", default="-")
    ap.add_argument("--quick", action="store_true", help="a few points (a smoke test)")
    ap.add_argument("--dropout", type=float, default=0.0,
                    help="attention dropout probability of every row (GPT-2 trains with 0.1)")
    ap.add_argument("--head-dims", default=None, help="comma list (default 64,80,96,128,256)")
    ap.add_argument("--seqs", default=None, help="comma list (default 256,512,1024,2048,4096)")
    ap.add_argument("--mask-window", type=int, default=0,
                    help="rows with a bool sliding-window mask of this window (see above)")
    ap.add_argument("--gqa", type=int, default=1,
                    help="query heads per K/V head, with enable_gqa=True (see above)")
    args = ap.parse_args()
    if args.mask_window < 0:
        sys.exit("torch_sdpa.py: --mask-window must be a positive window in tokens (or 0: none)")
    if args.gqa not in (1, 2, 4, 8, 16):
        sys.exit("torch_sdpa.py: --gqa must be 1, 2, 4, 8 or 16 query heads per K/V head")
    if args.gqa > 1 and args.mask_window:
        sys.exit("torch_sdpa.py: --gqa and --mask-window are separate checks; give one")
    t0 = time.time()
    head_dims = [64, 128] if args.quick else [64, 80, 96, 128, 256]
    seqs = [1024] if args.quick else [256, 512, 1024, 2048, 4096]
    if args.head_dims:
        head_dims = [int(x) for x in args.head_dims.split(",")]
    if args.seqs:
        seqs = [int(x) for x in args.seqs.split(",")]
    rows_per = [262144] if args.quick else [65536, 262144, 1048576]  # b*h*s
    rows, layout, errors = [], [], []
    for dn in args.dtypes.split(","):
        dtype = DT[dn]
        for hd in head_dims:
            for causal in ((False,) if args.mask_window else (True, False)):
                for seq in seqs:
                    for r in rows_per:
                        bh = max(1, r // seq)
                        try:
                            n, f, b = point(dtype, hd, causal, seq, bh, dropout=args.dropout,
                                            window=args.mask_window, gqa=args.gqa)
                            rows.append([dn, hd, causal, seq, n, round(f, -9), round(b, -9)])
                        except Exception as e:  # noqa: BLE001
                            errors.append(f"{dn} hd {hd} causal {causal} seq {seq} bh {bh}: {e}"[:300])
                        torch.cuda.empty_cache()
        if not args.quick and not args.dropout and not args.mask_window and args.gqa == 1:
            for hd in (64, 128):
                for seq in (1024, 2048):
                    bh = 262144 // seq
                    n, f, b = point(dtype, hd, True, seq, bh, contiguous=True)
                    layout.append([dn, hd, True, seq, n, round(f, -9), round(b, -9)])
    doc = {"schema": "dsplan-torch-sdpa/1", "torch": torch.__version__,
           "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
           "gpu": torch.cuda.get_device_name(0), "python": platform.python_version(),
           "date": time.strftime("%Y-%m-%d"),
           "kernels": backend_in_use(DT[args.dtypes.split(",")[0]], args.mask_window, args.gqa),
           "mask_window": args.mask_window, "gqa": args.gqa,
           "method": ("F.scaled_dot_product_attention with a bool sliding-window causal mask "
                      f"(window {args.mask_window}) [b,1,s,s] and is_causal=False on contiguous "
                      "[b,h,s,d] q, k, v, FLOPs of the whole square; " if args.mask_window else
                      f"F.scaled_dot_product_attention with enable_gqa=True, {args.gqa} query heads "
                      "per K/V head, [b,h,s,d] views of [b,s,h,d] tensors, is_causal for causal "
                      "rows, FLOPs of the query heads; " if args.gqa > 1 else
                      "F.scaled_dot_product_attention on [b,h,s,d] views of [b,s,h,d] tensors, "
                      "is_causal for causal rows; ") +
                     "backward: autograd.grad of the output; "
                     "2 warm-up + 7 timed behind a 1 ms busy-wait, CUDA events, median; FLOPs "
                     "4bhs^2d (halved when causal), backward 2.5x",
           "dropout_p": args.dropout, "rows": rows, "layout_contiguous": layout, "errors": errors,
           "seconds": round(time.time() - t0, 1)}
    probe_util.write_doc(doc, None if args.out == "-" else args.out)


if __name__ == "__main__":
    main()
