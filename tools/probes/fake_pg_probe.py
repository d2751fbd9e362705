#!/usr/bin/env python3
"""What PyTorch's fake process group does on the GPU, per collective (docs/deepspeed-facts.md,
"An emulated rank's collectives").

The bench harness emulates one rank of N on one GPU with torch.distributed's "fake" backend
(tools/device/dsbench/driver.py). Its collectives move no data between GPUs, but some copy
locally: PyTorch's FakeProcessGroup copies an all-gather's input into every output chunk, and
later versions also copy a reduce-scatter's chunk. Those copies are GPU time inside an emulated
step. This probe times each collective DeepSpeed 0.14.5 calls, on bf16 buffers, and checks
whether it wrote its output (filled with a sentinel first).

Usage: python3 tools/probes/fake_pg_probe.py [--world 8] [--rank 7] [--mib 512] [--out FILE]
"""
import argparse
import json
import sys

import torch
import torch.distributed as dist


def timed(fn, reps=5):
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    times.sort()
    return times[len(times) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=8)
    ap.add_argument("--rank", type=int, default=7)
    ap.add_argument("--mib", type=int, default=512, help="full (gathered) buffer size, MiB")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    from torch.testing._internal.distributed.fake_pg import FakeStore
    dist.init_process_group(backend="fake", rank=a.rank, world_size=a.world, store=FakeStore())
    n = a.mib * (1 << 20) // 2
    n -= n % a.world
    part = n // a.world
    dev = "cuda"
    full = torch.empty(n, dtype=torch.bfloat16, device=dev)
    src = torch.ones(part, dtype=torch.bfloat16, device=dev)
    res = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "world": a.world,
           "rank": a.rank, "full_bytes": 2 * n, "collectives": {}}

    def record(name, fn, out, expect_written):
        out.fill_(-7.0)
        torch.cuda.synchronize()
        fn()
        torch.cuda.synchronize()
        written = bool((out != -7.0).any().item())
        s = timed(fn)
        res["collectives"][name] = {"seconds": s, "output_written": written,
                                    "bytes_if_copied": expect_written}
        print(f"{name}: {1e3 * s:.3f} ms, output written: {written}", file=sys.stderr)

    # Stage 1/2's step (all_gather_into_tensor_dp_groups): the rank's partition is a view of the
    # flat buffer, as in DeepSpeed; its own chunk's copy is a same-data copy.
    flat = torch.empty(n, dtype=torch.bfloat16, device=dev)
    own = flat.narrow(0, a.rank * part, part)
    own.fill_(1.0)
    record("all_gather_into_tensor_own_view",
           lambda: dist.all_gather_into_tensor(flat, own), flat.narrow(0, 0, part) if a.rank else
           flat.narrow(0, part, part), 2 * 2 * part * (a.world - 1))
    record("all_gather_into_tensor", lambda: dist.all_gather_into_tensor(full, src), full,
           2 * 2 * n)
    outs = [torch.empty(part, dtype=torch.bfloat16, device=dev) for _ in range(a.world)]
    record("all_gather_list", lambda: dist.all_gather(outs, src), outs[0], 2 * 2 * n)
    rs_out = torch.empty(part, dtype=torch.bfloat16, device=dev)
    full.fill_(1.0)
    record("reduce_scatter_tensor", lambda: dist.reduce_scatter_tensor(rs_out, full), rs_out,
           2 * 2 * part)
    ar = torch.ones(n, dtype=torch.bfloat16, device=dev)
    res["collectives"]["all_reduce"] = {"seconds": timed(lambda: dist.all_reduce(ar))}
    res["collectives"]["reduce"] = {"seconds": timed(lambda: dist.reduce(ar, dst=0))}
    # The same bytes as one plain device copy, for the rate.
    dst = torch.empty(part, dtype=torch.bfloat16, device=dev)
    res["copy_partition_seconds"] = timed(lambda: dst.copy_(src))
    res["copy_full_seconds"] = timed(lambda: full.copy_(ar))
    text = json.dumps(res, indent=1)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    sys.exit(main())
