#!/usr/bin/env python3
"""Measures the kernels of DeepSpeed's ZeRO optimizer step (bf16, GPU optimizer) on their own, as
PyTorch runs them, on tensors past the L2 cache:

  fp64_cast     g.double()                      a 16-bit gradient copied to fp64 (2 + 8 B/element)
  fp64_norm     torch.norm(g64, 2)              the norm of that copy (8 B/element read)
  flatten       torch.cat(list of 16-bit)       the flatten of the gradient partition (2 + 2)
  cast_fp32     flat.to(torch.float32)          (2 + 4)
  unscale       g32.mul_(1 / scale)             unscale_and_clip_grads (4 + 4)
  copy_back     p16.copy_(p32)                  the fp32 master into the 16-bit partition (4 + 2)
  fused_adam    DeepSpeed FusedAdam.step()      when deepspeed imports (p, g, m, v read; p, m, v
                                                written: 28 B/element)
  norm_loop     get_grad_norm_direct's loop     host time per tensor of ZeRO-1/2's Python norm loop
                                                (g.double(), torch.norm, .to) over 2048 tiny
                                                gradients, whose kernels are shorter than it
  torch_adamw   torch.optim.AdamW.step()        torch_adam's foreach step on one flat fp32 tensor,
  torch_adamw_wd                                weight_decay 0 (72 B/element) and 0.01 (80 B;
                                                docs/deepspeed-facts.md "torch_adam")

Each: 2 warm-up + 6 timed, CUDA events, median; bytes read + written per second. Nothing here is a
training run: dsplan prices the optimizer task's bytes with these rates (docs/stack-costs.md).

usage: optimizer_kernels.py [--elements N] [--out F]
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from probe_util import gpu_time  # noqa: E402


def timed(fn):
    return gpu_time(fn, reps=6, warm=2, sleep=1000000)


def measure(n=1 << 28, k=64):
    """The kernels' rates (and the norm loop's host time) over n bf16 elements in k tensors:
    {name: {"seconds", "bytes", "bytes_per_s"} or {"error"}}. stack_costs.py's
    "optimizer_kernels" section runs it for `dsplan profile --stack`."""
    bf = torch.bfloat16
    flat16 = torch.randn(n, device="cuda", dtype=bf)
    grads = list(flat16.view(k, n // k).unbind(0))
    g32 = torch.randn(n, device="cuda", dtype=torch.float32)
    p16 = torch.empty(n, device="cuda", dtype=bf)
    out = {}

    def rate(name, fn, bytes_):
        t = timed(fn)
        out[name] = {"seconds": t, "bytes": bytes_, "bytes_per_s": bytes_ / t}

    rate("fp64_cast", lambda: [g.double() for g in grads], 10 * n)
    g64 = [g.double() for g in grads]
    rate("fp64_norm", lambda: [torch.norm(g, 2) for g in g64], 8 * n)
    del g64
    rate("flatten", lambda: torch.cat(grads), 4 * n)
    rate("cast_fp32", lambda: flat16.to(torch.float32), 6 * n)
    rate("unscale", lambda: g32.mul_(1.0), 8 * n)
    rate("copy_back", lambda: p16.copy_(g32), 6 * n)
    del p16
    try:
        from deepspeed.ops.adam import FusedAdam
        m = n // 2
        p = torch.nn.Parameter(torch.randn(m, device="cuda", dtype=torch.float32))
        p.grad = torch.randn(m, device="cuda", dtype=torch.float32)
        opt = FusedAdam([p], lr=1e-5, adam_w_mode=True)
        opt.step()
        rate("fused_adam", opt.step, 28 * m)
    except Exception as ex:  # noqa: BLE001
        out["fused_adam"] = {"error": repr(ex)[:300]}
    tiny = [torch.randn(1024, device="cuda", dtype=bf) for _ in range(2048)]

    def norm_loop():
        norms = [torch.norm(g.data.double().detach(), 2.0).to("cuda") for g in tiny]
        return torch.stack(norms).square().sum().float()
    norm_loop()
    torch.cuda.synchronize()
    host = []
    for _ in range(5):
        t0 = time.perf_counter()
        norm_loop()
        host.append(time.perf_counter() - t0)
        torch.cuda.synchronize()
    host.sort()
    out["norm_loop"] = {"host_seconds_per_tensor": host[len(host) // 2] / len(tiny),
                        "tensors": len(tiny), "numel_each": 1024}
    del tiny
    for name, wd, per in (("torch_adamw", 0.0, 72), ("torch_adamw_wd", 0.01, 80)):
        m = n // 2
        p = torch.nn.Parameter(torch.randn(m, device="cuda", dtype=torch.float32))
        p.grad = torch.randn(m, device="cuda", dtype=torch.float32)
        opt = torch.optim.AdamW([p], lr=1e-5, weight_decay=wd)
        opt.step()
        rate(name, opt.step, per * m)
        out[name]["foreach"] = opt.defaults.get("foreach")
        del opt, p
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--elements", type=int, default=1 << 28)
    ap.add_argument("--tensors", type=int, default=64, help="the gradient list's length")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    n, k = a.elements, a.tensors
    out = measure(n, k)
    doc = {"schema": "dsplan-optimizer-kernels/1", "device": torch.cuda.get_device_name(0),
           "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"), "elements": n,
           "tensors": k, "method": "2 warm-up + 6 timed, a GPU busy-wait queued first, CUDA events, median",
           "kernels": out}
    text = json.dumps(doc, indent=1)
    if a.out:
        open(a.out, "w").write(text)
    print(text)


if __name__ == "__main__":
    main()
