#!/usr/bin/env python3
"""Measures PyTorch's copy-like CUDA kernels whose speed depends on the layout, not only on the
bytes moved: torch.cat along the last dimension with narrow pieces (partial rotary embeddings
cat a 16-64-wide rotated part with the rest of each head), the copy that makes a permuted
tensor contiguous, and a binary op on strided inputs. Each is timed with CUDA events over
repeated launches (median of 7 batches of 20), on tensors of ~128 MiB, in bf16.

usage: copy_kernels.py OUT.json
Also Linear products (F.linear, bf16) alone and interleaved with a 256 MiB elementwise kernel,
for rows of kind linear_alone / linear_interleaved / linear_sustained (after ~1.5 s of load), whose "tb_per_s" holds TFLOP/s.
Output: {"torch", "gpu", "rows": [{"kind", "shape", "pieces", "bytes_moved", "s", "tb_per_s"}]}
bytes_moved counts each element read once and written once.
"""
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import probe_util  # noqa: E402


def timeit(fn, reps=20, batches=7):
    return probe_util.batched_time(fn, reps, batches)


def clocks():
    """SM clock (MHz) and board power (W) now, when NVML is there."""
    try:
        import pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        return {"sm_clock_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                "power_w": pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0}
    except Exception:  # noqa: BLE001
        return {}


def main():
    out = sys.argv[1]
    dev = "cuda"
    bf = torch.bfloat16
    rows = []
    B, H, S = 16, 32, 1024  # 512 Ki rows of a head
    for hd in (64, 80, 128, 256):
        for rot in sorted({16, 32, hd // 4, hd // 2, hd * 2 // 5}):
            if rot <= 0 or rot >= hd or rot % 2:
                continue
            x = torch.randn(B, H, S, rot, device=dev, dtype=bf)
            y = torch.randn(B, H, S, hd - rot, device=dev, dtype=bf)
            t = timeit(lambda: torch.cat((x, y), dim=-1))
            moved = 2 * B * H * S * hd * 2
            rows.append({"kind": "cat_last_dim", "shape": [B, H, S, hd], "pieces": [rot, hd - rot],
                         "bytes_moved": moved, "s": t, "tb_per_s": moved / t / 1e12})
            # rotate_half: cat of two halves of the rotated part, the first negated
            h1 = x[..., : rot // 2]
            h2 = x[..., rot // 2:]
            t = timeit(lambda: torch.cat((-h2, h1), dim=-1))
            moved = 2 * B * H * S * rot * 2
            rows.append({"kind": "rotate_half", "shape": [B, H, S, rot], "pieces": [rot // 2, rot // 2],
                         "bytes_moved": moved, "s": t, "tb_per_s": moved / t / 1e12})
            # slicing a part and multiplying (strided read)
            full = torch.randn(B, H, S, hd, device=dev, dtype=bf)
            cos = torch.randn(1, 1, S, rot, device=dev, dtype=bf)
            t = timeit(lambda: full[..., :rot] * cos)
            moved = 2 * B * H * S * rot * 2
            rows.append({"kind": "mul_strided_slice", "shape": [B, H, S, hd], "pieces": [rot],
                         "bytes_moved": moved, "s": t, "tb_per_s": moved / t / 1e12})
        # [b, s, h, d] -> [b, h, s, d] contiguous
        x = torch.randn(B, S, H, hd, device=dev, dtype=bf)
        t = timeit(lambda: x.transpose(1, 2).contiguous())
        moved = 2 * B * H * S * hd * 2
        rows.append({"kind": "permute_copy", "shape": [B, S, H, hd], "pieces": [hd], "bytes_moved": moved,
                     "s": t, "tb_per_s": moved / t / 1e12})
        # the contiguous baseline
        t = timeit(lambda: x.clone())
        rows.append({"kind": "contiguous_copy", "shape": [B, S, H, hd], "pieces": [hd], "bytes_moved": moved,
                     "s": t, "tb_per_s": moved / t / 1e12})
    # Linear products alone (back to back, as the GEMM profile measures them) and interleaved with
    # a memory-bound kernel over 256 MiB (as in a training step, where the operands are not in L2
    # and elementwise kernels run between products): the interleaved product's time is the loop's
    # less the add's time alone.
    big = torch.randn(64 * 2**20, device=dev, dtype=bf)
    for m, n, k in ((22528, 8192, 2048), (22528, 2048, 8192), (22528, 2048, 2048), (31744, 6144, 2048),
                    (31744, 2048, 8192), (20480, 16384, 4096), (20480, 4096, 4096)):
        x = torch.randn(m, k, device=dev, dtype=bf)
        w = torch.randn(n, k, device=dev, dtype=bf)
        alone = timeit(lambda: torch.nn.functional.linear(x, w))
        idle_clocks = clocks()
        add = timeit(lambda: big.add_(1.0))

        def both():
            torch.nn.functional.linear(x, w)
            big.add_(1.0)
        inter = timeit(both) - add
        # sustained: ~1.5 s of back-to-back products first (power and clocks settle), then timed
        t_end = time.perf_counter() + 1.5
        while time.perf_counter() < t_end:
            for _ in range(50):
                torch.nn.functional.linear(x, w)
            torch.cuda.synchronize()
        sustained = timeit(lambda: torch.nn.functional.linear(x, w), reps=30, batches=5)
        rows.append({"kind": "linear_sustained", "shape": [m, n, k], "pieces": [], "bytes_moved": 0,
                     "s": sustained, "tb_per_s": 2.0 * m * n * k / sustained / 1e12, **clocks()})
        rows.append({"kind": "linear_alone", "shape": [m, n, k], "pieces": [], "bytes_moved": 0, "s": alone,
                     "tb_per_s": 2.0 * m * n * k / alone / 1e12, **idle_clocks})
        rows.append({"kind": "linear_interleaved", "shape": [m, n, k], "pieces": [], "bytes_moved": 0, "s": inter,
                     "tb_per_s": 2.0 * m * n * k / inter / 1e12})
    json.dump({"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0), "rows": rows}, open(out, "w"),
              indent=1)
    for r in rows:
        print(f"{r['kind']:18s} {str(r['shape']):22s} {str(r['pieces']):10s} {r['tb_per_s']:.2f} TB/s "
              f"{r.get('sm_clock_mhz', '')} {r.get('power_w', '')}")


if __name__ == "__main__":
    main()
