#!/usr/bin/env python3
"""ZeRO-1's engine.step() per parameter tensor, at three tensor sizes (session 34).

Why: dsplan prices the stage-1/2 step's host work as a fixed part plus a part per parameter
tensor, measured on stacks of 64-wide modules (stack_costs.py "zero3" grid), and its kernels by
their bytes. Real models with hundreds of mid-sized tensors ran engine.step() 8-26 ms longer
than that on an H100 (bert-large, gpt2-medium/large, opt-350m; 1-6 ms on the H200), so the cost
per tensor may grow with the tensor's size beyond its bytes (each tensor's norm-loop kernels
queued behind the host, then the .item() that waits for them). This probe measures it: stacks
of 64 and 256 Linear(W, W) with bias (128 and 512 parameter tensors) for W = 64, 512 and 1536,
a ZeRO stage-1 engine each (bf16, FusedAdam, gradient clipping 1.0, one GPU), the two engines of
a width stepped in turn, median engine.step() over the rounds. Per tensor = the difference of
the two medians over the 384 tensors between them; the stacks' element counts are in the
output, so that the kernels' share (bytes at the optimizer_kernels rates) can be set beside it.

usage: z12_step_width.py [--rounds N] [--out F]      (DeepSpeed importable: .dsbench/site)
"""
import argparse
import os
import sys
import time

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from probe_util import host_speed, interleaved_step_times, release_engine, single_rank_env, write_doc  # noqa: E402


class Stack(nn.Module):
    def __init__(self, width, n):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(width, width, bias=True) for _ in range(n)])

    def forward(self, x):
        for m in self.blocks:
            x = m(x)
        return x


def config(adam):
    opt = {"lr": 1e-5, "weight_decay": 0.0}
    if adam == "torch":
        opt["torch_adam"] = True
    return {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
            "gradient_clipping": 1.0, "bf16": {"enabled": True},
            "optimizer": {"type": "AdamW", "params": opt},
            "zero_optimization": {"stage": 1}, "steps_per_print": 10 ** 9, "wall_clock_breakdown": False}


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--widths", default="64,512,1536")
    ap.add_argument("--adam", default="fused", choices=("fused", "torch"))
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    single_rank_env(29517)
    import deepspeed
    rows = []
    doc = {"schema": "dsplan-z12-step-width/1", "device": torch.cuda.get_device_name(0),
           "torch": torch.__version__, "deepspeed": deepspeed.__version__, "date": time.strftime("%Y-%m-%d"),
           "adam": a.adam, "rounds": a.rounds, "host_speed_before": host_speed(), "rows": rows}
    for w in (int(x) for x in a.widths.split(",")):
        engines = {}
        for n in (64, 256):
            torch.manual_seed(0)
            model = Stack(w, n).cuda()
            e, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config(a.adam))
            engines[n] = e
        x = torch.randn(1, 8, w, device="cuda", dtype=torch.bfloat16)
        times = interleaved_step_times({n: (e, lambda e: e(x).float().sum()) for n, e in engines.items()},
                                       a.rounds, 3)
        step = {n: median(times[n][2]) for n in engines}
        tensors = {n: 2 * n for n in engines}
        elements = {n: n * (w * w + w) for n in engines}
        per = (step[256] - step[64]) / (tensors[256] - tensors[64])
        row = {"width": w, "tensors": tensors, "elements": elements,
               "step_s_median": step, "step_s_all": {n: times[n][2] for n in engines},
               "per_tensor_s": per, "elements_per_tensor": (w * w + w) / 2}
        rows.append(row)
        print(f"width {w}: step {step[64] * 1e3:.2f} / {step[256] * 1e3:.2f} ms for {tensors[64]} / "
              f"{tensors[256]} tensors: {per * 1e6:.1f} us per tensor", file=sys.stderr)
        for e in engines.values():
            release_engine(e)
        del engines
    doc["host_speed_after"] = host_speed()
    write_doc(doc, a.out)


if __name__ == "__main__":
    main()
