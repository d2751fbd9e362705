#!/usr/bin/env python3
"""Measures a hardware profile's GEMM table again, through PyTorch: every row's shape and layout
as the training stack issues it (torch.nn.functional.linear for the forward, the matmuls that
autograd runs for the input and weight gradients, torch.bmm for the batched attention products).

dsplan's own probe (`dsplan profile --only gemm`) calls cuBLASLt directly with the heuristic's
first algorithm and a 32 MiB workspace. PyTorch picks its own cuBLAS/cuBLASLt path, workspace and
algorithm, so the same shape can run at a different rate; the cost model prices the PyTorch stack
from this table when the profile has one (docs/stack-costs.md).

Method, the same as dsplan's probe so that the two tables differ only in who calls cuBLAS:
uniform random operands, consecutive repetitions on different copies of the operands spanning at
least 3x the L2 cache (operands not in L2, no flush), 2 warm-up + 7 timed, CUDA events around the
call alone, the median.

Layouts, C[m,n] = op(A) op(B) as the profile names them:
  nt  F.linear(X[m,k], W[n,k])                 (forward of a Linear with n outputs)
  nn  torch.matmul(dY[m,k], W[k,n])            (input gradient)
  tn  torch.matmul(dY[k,m].t(), X[k,n])        (weight gradient)
  batched rows: torch.bmm with the same transposes.

usage: torch_gemm.py --profile h200-measured.yaml [--dtypes bf16] [--out F] [--limit N]
       torch_gemm.py --linears OUTxIN,...:TOKENS,... [--dtypes bf16] [--out F]
  (--linears: those Linear layers in the three layouts at those token counts instead of a profile's
  rows, e.g. the counts above a profile table's last one, 16384, that large micro-batches reach)
Prints a JSON document (schema dsplan-torch-gemm/1): versions, method, and rows
[dtype, m, n, k, flops_per_s, layout, batch].
"""
import argparse
import json
import platform
import re
import statistics
import sys
import time

import torch
import torch.nn.functional as F

ROW = re.compile(r"^\s*- \[(bf16|fp16|fp32), (\d+), (\d+), (\d+), ([0-9.eE+-]+), (nt|nn|tn)(?:, (\d+))?\]\s*$")
DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def read_rows(path, dtypes):
    """The rows of the profile's gpu.gemm table (not those of a stack: section's gemm)."""
    rows, in_gemm, top = [], False, None
    with open(path) as f:
        for line in f:
            key = re.match(r"^([A-Za-z_][A-Za-z0-9_]*):", line)
            if key:
                top = key.group(1)
            if top == "gpu" and re.match(r"^\s+gemm:\s*$", line):
                in_gemm = True
                continue
            if in_gemm:
                m = ROW.match(line)
                if not m:
                    if line.strip().startswith("- "):
                        continue
                    in_gemm = False
                    continue
                if m.group(1) in dtypes:
                    rows.append((m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4)),
                                 m.group(6), int(m.group(7) or 1)))
    return rows


def linear_rows(spec, dtypes):
    """Rows (dtype, m, n, k, layout, 1) of the Linears OUTxIN at the token counts of |spec|, in the
    layouts the profile names them: nt (tokens, out, in), nn (tokens, in, out), tn (out, in, tokens)."""
    layers, tokens = spec.split(":")
    rows = []
    for dt in dtypes:
        for layer in layers.split(","):
            out, inp = (int(x) for x in layer.lower().split("x"))
            for t in (int(x) for x in tokens.split(",")):
                rows += [(dt, t, out, inp, "nt", 1), (dt, t, inp, out, "nn", 1), (dt, out, inp, t, "tn", 1)]
    return rows


def operands(dt, m, n, k, layout, batch, l2_bytes):
    if layout == "nt":
        shapes = [(m, k), (n, k)]
    elif layout == "nn":
        shapes = [(m, k), (k, n)]
    else:
        shapes = [(k, m), (k, n)]
    if batch > 1:
        shapes = [(batch,) + s for s in shapes]
    elem = torch.tensor([], dtype=DT[dt]).element_size()
    per_copy = sum(a * b for a, b in [(s[-2], s[-1]) for s in shapes]) * batch * elem
    copies = max(2, min(64, -(-3 * l2_bytes // max(per_copy, 1))))
    return [[torch.rand(s, device="cuda", dtype=DT[dt]) for s in shapes] for _ in range(copies)]


def call(layout, batch, a, b):
    if batch == 1:
        if layout == "nt":
            return F.linear(a, b)
        if layout == "nn":
            return torch.matmul(a, b)
        return torch.matmul(a.t(), b)
    if layout == "nt":
        return torch.bmm(a, b.transpose(1, 2))
    if layout == "nn":
        return torch.bmm(a, b)
    return torch.bmm(a.transpose(1, 2), b)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile")
    ap.add_argument("--linears", help="OUTxIN,...:TOKENS,... (instead of --profile)")
    ap.add_argument("--dtypes", default="bf16")
    ap.add_argument("--out", default=None)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--timed", type=int, default=7)
    ap.add_argument("--sleep-cycles", type=int, default=1000000,
                    help="GPU busy-wait before each timed call (0: none, the events then include host dispatch)")
    a = ap.parse_args()
    if bool(a.profile) == bool(a.linears):
        ap.error("give one of --profile and --linears")
    rows = (read_rows(a.profile, set(a.dtypes.split(","))) if a.profile
            else linear_rows(a.linears, a.dtypes.split(",")))
    if a.limit:
        rows = rows[: a.limit]
    props = torch.cuda.get_device_properties(0)
    l2 = getattr(props, "L2_cache_size", 50 << 20)
    out_rows, t0 = [], time.time()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for i, (dt, m, n, k, layout, batch) in enumerate(rows):
        ops = operands(dt, m, n, k, layout, batch, l2)
        times = []
        for r in range(a.warmup + a.timed):
            x, w = ops[r % len(ops)]
            # A busy-wait kernel first, so that the host queues the start event, the call and the
            # stop event while the GPU is still busy: the events then time the GPU's work alone,
            # not PyTorch's dispatch (which the cost model prices as host time per op).
            torch.cuda._sleep(a.sleep_cycles)
            start.record()
            call(layout, batch, x, w)
            stop.record()
            stop.synchronize()
            if r >= a.warmup:
                times.append(start.elapsed_time(stop) / 1e3)
        t = statistics.median(times)
        out_rows.append([dt, m, n, k, 2.0 * m * n * k * batch / t, layout] + ([batch] if batch > 1 else []))
        del ops
        if i % 500 == 0:
            print(f"torch_gemm: {i}/{len(rows)} rows, {time.time() - t0:.0f} s", file=sys.stderr)
    doc = {
        "schema": "dsplan-torch-gemm/1",
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cublas_workspace": "PyTorch default (CUBLAS_WORKSPACE_CONFIG unset)",
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d"),
        "method": (("rows of " + a.profile if a.profile else "Linears " + a.linears) + "; torch F.linear (nt), matmul (nn, tn), bmm (batched); "
                   f"{a.warmup} warm-up + {a.timed} timed, operands rotated over copies spanning >= 3x L2; "
                   "CUDA events around the call; median; "
                   + (f"a {a.sleep_cycles}-cycle GPU busy-wait queued before each call, so the events time "
                      "the GPU's work alone" if a.sleep_cycles else "no busy-wait: the events include host dispatch")),
        "seconds": time.time() - t0,
        "rows": out_rows,
    }
    text = json.dumps(doc)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
