#!/usr/bin/env python3
"""What ZeRO-3's offloaded gradient copy costs, piece by piece (no DeepSpeed needed).

DeepSpeed 0.14.5's stage-3 `partition_grads` (offload_optimizer) copies each parameter's 16-bit
gradient partition into the CPU fp32 gradient buffer with a blocking

    fp32_grad_tensor.copy_(grad_buffer)          # CUDA bf16 -> CPU fp32, non_blocking=False

PyTorch (aten/src/ATen/native/cuda/Copy.cu, copy_requires_temporaries) converts a blocking
cross-device copy on the CPU: it allocates a pageable CPU bf16 temporary, copies device to host
into it (same dtype), then converts bf16 -> fp32 on the CPU into the destination. This probe
times, per tensor size:
  d2h_fresh      D2H bf16 into a freshly allocated pageable tensor (what Copy.cu does)
  d2h_reused     D2H bf16 into one preallocated pageable tensor (no page faults)
  d2h_pinned     D2H bf16 into pinned memory
  convert        CPU bf16 -> fp32 into the (pinned) destination, from a warm pageable source
  copy_          the real call: pinned fp32 narrow view .copy_(CUDA bf16)
  copy_pageable  the same into a pageable fp32 destination
and, for whole models, the real call over every parameter in backward order (one backward's
worth of partition_grads copies), at the process's default intra-op thread count and at 1, and
from inside a backward (autograd's device thread, where partition_grads runs).

With --h2d it times instead the other direction, ZeRO-3's step with the optimizer offloaded and
the parameters on the GPU: each sub-group's updated fp32 partition goes back with a blocking

    fp16_partitioned_groups_flat[i].data.copy_(fp32_partitioned_groups_flat[i].data)
                                                  # CPU fp32 -> CUDA bf16

which PyTorch converts on the CPU into a fresh pageable bf16 temporary (a sub-group is far above
glibc's 32 MiB mmap threshold, so every page of it is faulted in, on the conversion's threads)
and then copies host to device. Per sub-group size (16 M to 1 G elements), at the default
intra-op thread count and at 1:
  h2d_cast         the real call
  h2d_reused       the same conversion into one preallocated pageable bf16 tensor, then its copy
  first_touch      torch.empty(n, bfloat16).fill_(0): the page faults alone
The differences give the page-fault rate of the conversion (docs/simulator.md, Known gaps: the
step's fresh temporaries are not priced until this is measured).

Usage: python3 offload_copy_probe.py OUT.jsonl [--models gpt2-xl,qwen2-1.5b] [--h2d]
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

MODELS = {
    "gpt2-xl": {"model_type": "gpt2", "n_embd": 1600, "n_layer": 48, "n_head": 25, "vocab_size": 50257,
                "n_positions": 1024},
    "qwen2-1.5b": {"model_type": "qwen2", "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28,
                   "num_attention_heads": 12, "num_key_value_heads": 2, "vocab_size": 151936,
                   "tie_word_embeddings": True},
}


def timed(fn, reps):
    fn()
    ts = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts), min(ts)


def per_size(out, reps):
    sizes = [1 << k for k in range(14, 28, 1)]
    big = max(sizes)
    src = torch.randn(big, device="cuda").to(torch.bfloat16)
    pin_bf16 = torch.empty(big, dtype=torch.bfloat16).pin_memory()
    page_bf16 = torch.empty(big, dtype=torch.bfloat16)
    page_bf16.zero_()
    dst_pin = torch.zeros(big, dtype=torch.float32).pin_memory()
    dst_page = torch.zeros(big, dtype=torch.float32)
    for n in sizes:
        s = src.narrow(0, 0, n)
        row = {"kind": "size", "numel": n, "bytes_bf16": 2 * n, "threads": torch.get_num_threads()}
        cases = {
            "d2h_fresh": lambda: torch.empty(n, dtype=torch.bfloat16).copy_(s),
            "d2h_reused": lambda: page_bf16.narrow(0, 0, n).copy_(s),
            "d2h_pinned": lambda: pin_bf16.narrow(0, 0, n).copy_(s),
            "convert": lambda: dst_pin.narrow(0, 0, n).copy_(page_bf16.narrow(0, 0, n)),
            "copy_": lambda: dst_pin.narrow(0, 0, n).copy_(s),
            "copy_pageable": lambda: dst_page.narrow(0, 0, n).copy_(s),
        }
        for name, fn in cases.items():
            med, best = timed(fn, reps)
            row[name + "_s"] = round(med, 7)
            row[name + "_min_s"] = round(best, 7)
        out.write(json.dumps(row) + "\n")
        out.flush()
        print(json.dumps(row), flush=True)


def h2d_casts(out, reps):
    sizes = [1 << k for k in range(24, 31, 2)]  # 16 M .. 1 G elements (4 GiB of fp32)
    big = max(sizes)
    src = torch.rand(big, dtype=torch.float32)
    gpu = torch.empty(big, dtype=torch.bfloat16, device="cuda")
    page_bf16 = torch.zeros(big, dtype=torch.bfloat16)
    default_threads = torch.get_num_threads()
    for threads in (default_threads, 1):
        torch.set_num_threads(threads)
        for n in sizes:
            s, g, p = src.narrow(0, 0, n), gpu.narrow(0, 0, n), page_bf16.narrow(0, 0, n)
            row = {"kind": "h2d_size", "numel": n, "bytes_bf16": 2 * n, "threads": threads}
            cases = {
                "h2d_cast": lambda: g.copy_(s),
                "h2d_reused": lambda: g.copy_(p.copy_(s)),
                "first_touch": lambda: torch.empty(n, dtype=torch.bfloat16).fill_(0),
            }
            for name, fn in cases.items():
                med, best = timed(fn, reps)
                row[name + "_s"] = round(med, 6)
                row[name + "_min_s"] = round(best, 6)
            row["fault_bytes_per_s"] = round(2 * n / max(row["h2d_cast_s"] - row["h2d_reused_s"], 1e-9))
            out.write(json.dumps(row) + "\n")
            out.flush()
            print(json.dumps(row), flush=True)
    torch.set_num_threads(default_threads)


def param_numels(name):
    from transformers import AutoConfig, AutoModelForCausalLM
    cfg = dict(MODELS[name])
    mt = cfg.pop("model_type")
    conf = AutoConfig.for_model(mt, **cfg)
    with torch.device("meta"):
        m = AutoModelForCausalLM.from_config(conf)
    return [p.numel() for p in m.parameters()]


def whole_model(out, name, reps):
    numels = param_numels(name)
    total = sum(numels)
    src = torch.randn(max(numels), device="cuda").to(torch.bfloat16)
    dst = torch.zeros(total, dtype=torch.float32).pin_memory()
    offs, o = [], 0
    for n in numels:
        offs.append(o)
        o += n
    order = list(range(len(numels)))[::-1]

    def one_backward():
        for i in order:
            dst.narrow(0, offs[i], numels[i]).copy_(src.narrow(0, 0, numels[i]))

    # partition_grads runs inside backward hooks, on autograd's device thread, not the main
    # thread: PyTorch's intra-op threads may differ there. The same loop from a backward.
    class InBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            InBackward.threads = torch.get_num_threads()
            one_backward()
            return g

    x = torch.zeros(1, device="cuda", requires_grad=True)

    def in_backward():
        InBackward.apply(x).sum().backward()

    default_threads = torch.get_num_threads()
    for threads, where, fn in ((default_threads, "main", one_backward), (1, "main", one_backward),
                               (default_threads, "backward", in_backward)):
        torch.set_num_threads(threads)
        med, best = timed(fn, reps)
        row = {"kind": "model", "model": name, "params": len(numels), "numel": total, "threads": threads,
               "thread": where, "copy_all_s": round(med, 5), "copy_all_min_s": round(best, 5),
               "bytes_per_s_bf16": round(2 * total / med)}
        if where == "backward":
            row["threads_in_backward"] = InBackward.threads
        out.write(json.dumps(row) + "\n")
        out.flush()
        print(json.dumps(row), flush=True)
    torch.set_num_threads(default_threads)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--models", default="gpt2-xl,qwen2-1.5b")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--model-reps", type=int, default=3)
    ap.add_argument("--h2d", action="store_true", help="time the step's sub-group casts back instead")
    a = ap.parse_args()
    with open(a.out, "w") as out:
        head = {"kind": "machine", "torch": torch.__version__, "threads": torch.get_num_threads(),
                "cpus": os.cpu_count(), "gpu": torch.cuda.get_device_name(0),
                "malloc_env": {k: v for k, v in os.environ.items() if k.startswith("MALLOC_")}}
        out.write(json.dumps(head) + "\n")
        print(json.dumps(head), flush=True)
        if a.h2d:
            h2d_casts(out, a.reps)
            return 0
        per_size(out, a.reps)
        for m in a.models.split(","):
            whole_model(out, m, a.model_reps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
