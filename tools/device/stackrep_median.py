#!/usr/bin/env python3
"""The ZeRO-3 host costs from several stack_costs.py processes (stackrep-1206e's rule): for each
row of the synthetic grid (kind, n), the median across processes of stage 3 minus stage 2 in the
forward and the backward and of each stage's engine.step(); then the same fits dsplan profile
makes from one process (stack_costs.lstsq for the hooks, runtime/profiler/stack_probe.cc
StepFromGrid's line for the step), and the median of the per-call and per-flush costs.

usage: stackrep_median.py [--log PROFILE_LOG] [--calls GATHER_S,FLUSH_S] STACK_JSON...
--log reads the grid lines ("zero3 grid KIND n=N: {...}") that stack_costs.py prints to stderr
(a profile's log); --calls adds one process's per-gather-call and per-bucket-flush seconds.
Prints one JSON document."""
import argparse
import ast
import json
import statistics
import sys


def grid_from_log(path):
    rows = []
    for line in open(path):
        if line.startswith("zero3 grid ") and ": {" in line:
            rows.append(ast.literal_eval(line.split(": ", 1)[1].strip()))
    return rows


def solve3(m, v):
    """Gaussian elimination with partial pivoting for a 3x3 system (no numpy on the dev machine)."""
    a = [row[:] + [x] for row, x in zip(m, v)]
    for c in range(3):
        p = max(range(c, 3), key=lambda r: abs(a[r][c]))
        a[c], a[p] = a[p], a[c]
        for r in range(3):
            if r != c:
                f = a[r][c] / a[c][c]
                a[r] = [x - f * y for x, y in zip(a[r], a[c])]
    return [a[i][3] / a[i][i] for i in range(3)]


def lstsq(rows):
    """t = a + b*modules + c*params by least squares (the normal equations; stack_costs.lstsq)."""
    xs = [(1.0, float(m), float(p)) for m, p, _ in rows]
    ata = [[sum(x[i] * x[j] for x in xs) for j in range(3)] for i in range(3)]
    aty = [sum(x[i] * t for x, (_, _, t) in zip(xs, rows)) for i in range(3)]
    c = solve3(ata, aty)
    return {"intercept_s": c[0], "per_module_s": c[1], "per_param_s": c[2]}


def line(points):
    """t = a + b*x by least squares, each clamped at 0 (StepFromGrid)."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    b = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)
    return max(0.0, my - b * mx), max(0.0, b)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--log", action="append", default=[])
    ap.add_argument("--calls", action="append", default=[])
    ap.add_argument("stack", nargs="*")
    args = ap.parse_args()
    procs, calls = [], []
    for path in args.log:
        procs.append(("log:" + path, grid_from_log(path)))
    for c in args.calls:
        g, f = (float(v) for v in c.split(","))
        calls.append({"per_gather_call_s": g, "per_bucket_flush_s": f})
    for path in args.stack:
        doc = json.load(open(path))
        procs.append((path, doc.get("zero3", {}).get("grid", [])))
        zc = doc.get("zero3_calls", {})
        if "per_gather_call_s" in zc:
            calls.append({k: zc[k] for k in ("per_gather_call_s", "per_bucket_flush_s")})
    keyed = {}
    for name, grid in procs:
        if len(grid) != 6:
            sys.exit(f"stackrep_median: {name}: {len(grid)} grid rows, expected 6")
        for r in grid:
            keyed.setdefault((r["kind"], r["n"]), []).append(r)
    med_rows = []
    for (kind, n), rs in sorted(keyed.items()):
        med_rows.append({
            "kind": kind, "n": n, "modules": rs[0]["modules"], "params": rs[0]["params"], "processes": len(rs),
            "fwd_s": statistics.median(r["s3_minus_s2"]["fwd_s"] for r in rs),
            "bwd_s": statistics.median(r["s3_minus_s2"]["bwd_s"] for r in rs),
            "s2_step_s": statistics.median(r["s2"]["step_s"] for r in rs),
            "s3_step_s": statistics.median(r["s3"]["step_s"] for r in rs)})
    out = {"processes": [n for n, _ in procs], "rows": med_rows}
    out["zero3"] = {ph: lstsq([(r["modules"], r["params"], r[ph]) for r in med_rows]) for ph in ("fwd_s", "bwd_s")}
    z12 = line([(r["params"], r["s2_step_s"]) for r in med_rows])
    z3 = line([(r["params"], r["s3_step_s"]) for r in med_rows])
    out["optimizer_step"] = {"zero12_s": z12[0], "zero12_per_param_s": z12[1], "zero3_s": z3[0], "zero3_per_param_s": z3[1]}
    if calls:
        out["calls"] = {k: statistics.median(c[k] for c in calls) for k in ("per_gather_call_s", "per_bucket_flush_s")}
    # each process's own fit, per typical module (one submodule, two gathered tensors), for the README
    per = {}
    for name, grid in procs:
        f = {ph: lstsq([(r["modules"], r["params"], r["s3_minus_s2"][ph]) for r in grid]) for ph in ("fwd_s", "bwd_s")}
        per[name] = {ph: round(1e6 * (f[ph]["per_module_s"] + 2 * f[ph]["per_param_s"]), 1) for ph in f}
    out["typical_module_us"] = per
    out["typical_module_us_median_fit"] = {ph: round(1e6 * (out["zero3"][ph]["per_module_s"] + 2 * out["zero3"][ph]["per_param_s"]), 1)
                                           for ph in ("fwd_s", "bwd_s")}
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
