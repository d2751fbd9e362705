"""Helpers shared by the GPU probes in this folder (run on the GPU machine; torch required)."""
import os
import statistics

import torch
import torch.nn as nn


def gpu_time(fn, reps=10, warm=3, sleep=20_000_000):
    """Median GPU seconds of fn() alone: a busy-wait kernel first, so that the host queues the
    start event, fn's kernels and the stop event while the GPU is still busy (the host's dispatch
    is then not in the interval)."""
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for i in range(warm + reps):
        torch.cuda._sleep(sleep)
        s.record()
        fn()
        e.record()
        e.synchronize()
        if i >= warm:
            ts.append(s.elapsed_time(e) / 1e3)
    return statistics.median(ts)


def batched_time(fn, reps=10, batches=7):
    """Median seconds per call of fn() launched |reps| times back to back between two CUDA events,
    over |batches| batches (one warm-up call first): throughput timing of a kernel that runs long
    enough for the launches to queue ahead of it."""
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(batches):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(reps):
            fn()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b) / 1e3 / reps)
    return statistics.median(ts)


def host_speed(n=2000, reps=5):
    """The host's eager speed at this moment, from fixed loops (medians over |reps|): microseconds
    per in-place add of two 64-element CUDA tensors, per forward of a Linear(64, 64) on 4 rows
    (both far below the GPU's time, so host-bound), and nanoseconds per iteration of a plain
    Python loop. Recorded next to host-bound measurements so that runs made in different
    processes, or on different days, can be compared at the host speed each one had."""
    import time
    a = torch.zeros(64, device="cuda")
    b = torch.ones(64, device="cuda")
    lin = nn.Linear(64, 64, device="cuda")
    x = torch.randn(4, 64, device="cuda")

    def add():
        for _ in range(n):
            a.add_(b)

    def linear():
        with torch.no_grad():
            for _ in range(n // 4):
                lin(x)

    def py():
        s = 0
        for i in range(100_000):
            s += i
        return s

    out = {}
    for key, fn, count, scale in (("add_us", add, n, 1e6), ("linear_fwd_us", linear, n // 4, 1e6),
                                  ("python_loop_ns", py, 100_000, 1e9)):
        fn()
        ts = []
        for _ in range(reps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            ts.append((time.perf_counter() - t0) / count * scale)
        out[key] = round(statistics.median(ts), 3)
    return out


def engine_step_times(engine, make_loss):
    """One synchronized training step of a DeepSpeed |engine|: wall seconds of the forward
    (make_loss(engine)), engine.backward and engine.step, each between two synchronizations."""
    import time
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    loss = make_loss(engine)
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    engine.backward(loss)
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    engine.step()
    torch.cuda.synchronize()
    t3 = time.perf_counter()
    return t1 - t0, t2 - t1, t3 - t2


def interleaved_step_times(engines, rounds, warm, each_round=None):
    """{key: ([fwd], [bwd], [step])} for |engines| {key: (engine, make_loss)}, stepped in turn,
    one step each per round, so that a drift of the host's speed affects all alike; the first
    |warm| rounds are not kept. With |each_round|, its result for every kept round is listed
    under the key "each_round" (e.g. the host's speed at that round)."""
    times = {k: ([], [], []) for k in engines}
    if each_round is not None:
        times["each_round"] = []
    for r in range(warm + rounds):
        if each_round is not None and r >= warm:
            times["each_round"].append(each_round())
        for k, (e, make_loss) in engines.items():
            t = engine_step_times(e, make_loss)
            if r >= warm:
                for i, v in enumerate(t):
                    times[k][i].append(v)
    return times


def release_engine(engine):
    """Destroy a DeepSpeed engine (its hooks and buffers) and give its memory back to the GPU.
    The caller drops its own references to the engine and the model first."""
    import gc
    try:
        engine.destroy()
    except Exception:  # noqa: BLE001
        pass
    gc.collect()
    torch.cuda.empty_cache()


def fit_per_tensor(rows):
    """Least squares t = a + b * n over rows (n, t); with the largest residual."""
    n = len(rows)
    sx = sum(r[0] for r in rows)
    sy = sum(r[1] for r in rows)
    sxx = sum(r[0] * r[0] for r in rows)
    sxy = sum(r[0] * r[1] for r in rows)
    b = (n * sxy - sx * sy) / (n * sxx - sx * sx)
    a = (sy - b * sx) / n
    return {"fixed_s": a, "per_param_tensor_s": b,
            "max_abs_residual_s": max(abs(r[1] - a - b * r[0]) for r in rows)}


class Parallel(nn.Module):
    """n Linear(w, w) modules applied to the same input and summed: n parameter tensors whose
    gradients are all non-zero and bounded (no deep chain to underflow in bf16)."""

    def __init__(self, n, w):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(w, w, bias=False) for _ in range(n)])

    def forward(self, x):
        out = None
        for m in self.blocks:
            y = m(x)
            out = y if out is None else out + y
        return out


def single_rank_env(port):
    """The environment torch.distributed needs for one process on one GPU."""
    for k, val in dict(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=os.environ.get("MASTER_PORT", str(port))).items():
        os.environ.setdefault(k, val)


def write_doc(doc, out):
    """Print the JSON document, and write it to |out| when given."""
    import json
    text = json.dumps(doc, indent=1)
    if out:
        with open(out, "w") as f:
            f.write(text)
    print(text)
