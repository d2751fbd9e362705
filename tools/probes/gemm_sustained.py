#!/usr/bin/env python3
"""Does a GEMM run as fast inside a training step as alone? Three timings of the same GEMMs.

The profile's GEMM table (torch_gemm.py) times each GEMM alone: a busy-wait kernel, then the
call, median of 7, the GPU otherwise idle. A training step runs GEMMs back to back with
memory-bound kernels between them for seconds at a time, which can lower the SM clock (power
and thermal limits) and leaves L2 holding other data. Per shape (bf16, the Linear shapes of
real blocks at the token counts the planner picks):
  alone       as torch_gemm.py: busy-wait, one call, events around it; median of 7
  sustained   the same call back to back for --seconds, with a memory-bound pass over --evict-mib
              MiB between calls (as a block's norms and activations do); events around each call;
              median of the calls in the last half
  clocks      SM clock and power (nvidia-smi) sampled in the sustained phase's last half
Prints a JSON document (schema dsplan-gemm-sustained/1).

With --duty-sweep, one shape (pythia-1.4b's fc1) is run sustained with memory-bound passes of
0, 64, 256, 1024, 2048 and 4096 MiB between calls, so that the share of GPU time in the GEMM
(its duty: GEMM time over GEMM plus pass time, both from events) runs from 1 down to about 0.2:
how the slowdown depends on how much of the time the tensor cores are busy. Its document (schema
dsplan-gemm-duty/1) also holds the shape (m, k, n), the SM clock, power and temperature before
the sweep (idle_smi) and the board's power limit (power_limit_w), each null when nvidia-smi
cannot tell. `dsplan profile --stack` runs it and writes the curve as the profile's
gpu.sustained_gemm (runtime/profiler/stack_probe.cc).

usage: gemm_sustained.py [--seconds 4] [--evict-mib 1024] [--duty-sweep] [--out F]
"""
import argparse
import json
import statistics
import subprocess
import threading
import time

import torch
import torch.nn.functional as F

SHAPES = [  # (label, tokens m, in k, out n): F.linear(X[m,k], W[n,k])
    ("pythia-1.4b qkv mb31", 31744, 2048, 6144),
    ("pythia-1.4b fc1 mb31", 31744, 2048, 8192),
    ("llama-2-7b up mb8", 8192, 4096, 11008),
    ("llama-2-7b down mb8", 8192, 11008, 4096),
    ("opt-2.7b fc1 mb19", 19456, 2560, 10240),
    ("gpt2-xl fc mb11", 11264, 1600, 6400),
]


def smi():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True,
                             timeout=5).stdout.strip().splitlines()[0].split(",")
        return [float(x) for x in out[:3]]  # the first GPU's line
    except Exception:
        return None


def power_limit():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=power.limit",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True,
                             timeout=5).stdout.strip().splitlines()
        return float(out[0])  # the first GPU's
    except Exception:
        return None


def alone(x, w, reps=7, warm=2):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for i in range(warm + reps):
        torch.cuda._sleep(1_000_000)
        s.record()
        F.linear(x, w)
        e.record()
        e.synchronize()
        if i >= warm:
            ts.append(s.elapsed_time(e) / 1e3)
    return statistics.median(ts)


def sustained(x, w, seconds, evict, pass_times=None):
    samples, stop = [], threading.Event()

    def sample():
        while not stop.is_set():
            v = smi()
            if v:
                samples.append((time.time(), v))
            time.sleep(0.2)

    th = threading.Thread(target=sample, daemon=True)
    t0 = time.time()
    th.start()
    events = []
    while time.time() - t0 < seconds:
        batch = []
        for _ in range(20):
            p0 = torch.cuda.Event(enable_timing=True)
            p0.record()
            if evict is not None:
                evict.mul_(1.0001)  # a memory-bound pass between GEMMs, as in a block
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            F.linear(x, w)
            e.record()
            batch.append((time.time() - t0, s, e, p0))
        events.extend(batch)
        batch[-1][2].synchronize()
    torch.cuda.synchronize()
    stop.set()
    th.join()
    half = [s.elapsed_time(e) / 1e3 for (t, s, e, p) in events if t >= seconds / 2]
    passes = [p.elapsed_time(s) / 1e3 for (t, s, e, p) in events if t >= seconds / 2]
    late = [v for (t, v) in samples if t - t0 >= seconds / 2]
    g, q = statistics.median(half), statistics.median(passes)
    return {"calls": len(events), "median_s": g, "pass_median_s": q, "duty": g / (g + q),
            "sm_mhz": statistics.median([v[0] for v in late]) if late else None,
            "power_w": statistics.median([v[1] for v in late]) if late else None,
            "temp_c": max([v[2] for v in late]) if late else None}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--evict-mib", type=int, default=1024)
    ap.add_argument("--duty-sweep", action="store_true")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    if a.duty_sweep:
        return duty_sweep(a)
    torch.backends.cuda.matmul.allow_tf32 = False
    evict = torch.ones(a.evict_mib << 18, device="cuda", dtype=torch.float32)
    rows = []
    idle = smi()
    for label, m, k, n in SHAPES:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        t_alone = alone(x, w)
        sus = sustained(x, w, a.seconds, evict)
        t_alone_after = alone(x, w)
        flops = 2.0 * m * n * k
        rows.append({"label": label, "m": m, "k": k, "n": n, "alone_s": t_alone,
                     "alone_after_s": t_alone_after, "sustained": sus,
                     "alone_tflops": flops / t_alone / 1e12,
                     "sustained_tflops": flops / sus["median_s"] / 1e12,
                     "sustained_over_alone": sus["median_s"] / t_alone})
        print(json.dumps(rows[-1]), flush=True)
        del x, w
    doc = {"schema": "dsplan-gemm-sustained/1", "torch": torch.__version__,
           "device": torch.cuda.get_device_name(0), "date": time.strftime("%Y-%m-%d"),
           "idle_smi": idle, "seconds": a.seconds, "evict_mib": a.evict_mib, "rows": rows}
    text = json.dumps(doc, indent=1)
    if a.out:
        open(a.out, "w").write(text + "\n")
    else:
        print(text)


def duty_sweep(a):
    label, m, k, n = SHAPES[1]
    idle = smi()
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    t_alone = alone(x, w)
    rows = []
    for mib in (0, 64, 256, 1024, 2048, 4096):
        evict = torch.ones(mib << 18, device="cuda", dtype=torch.float32) if mib else None
        sus = sustained(x, w, a.seconds, evict)
        rows.append({"evict_mib": mib, "sustained": sus, "alone_s": t_alone,
                     "sustained_over_alone": sus["median_s"] / t_alone})
        print(json.dumps(rows[-1]), flush=True)
        del evict
        time.sleep(2)  # let the clock recover between points
    doc = {"schema": "dsplan-gemm-duty/1", "torch": torch.__version__, "shape": label,
           "m": m, "k": k, "n": n, "device": torch.cuda.get_device_name(0),
           "date": time.strftime("%Y-%m-%d"), "idle_smi": idle, "power_limit_w": power_limit(),
           "seconds": a.seconds, "rows": rows}
    text = json.dumps(doc, indent=1)
    if a.out:
        open(a.out, "w").write(text + "\n")
    else:
        print(text)


if __name__ == "__main__":
    main()
