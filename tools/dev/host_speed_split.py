#!/usr/bin/env python3
"""Step-time error of a record split by the host speed each run had.

usage: host_speed_split.py ACCURACY.json [--slow 1.3] [--list]

ACCURACY.json is `dsplan accuracy ... --json` output. Every timed row is joined, by its record
file and id, to the record's `host_speed_before` / `host_speed_after` (tools/probes/probe_util.py
`host_speed`, which the bench driver times around each case: a Linear(64, 64) forward on 4 rows,
an in-place add of two 64-element tensors, and a Python loop). A run is "slow" when the mean of its
two Linear-forward readings is more than --slow times the median over all runs of the record that
have readings, else "normal". Nothing is fitted: the split only says where the errors are, by the
predicted host-bound share (GPU-bound < 0.1, partly 0.1-0.6, host-bound >= 0.6), in-sample and
with the run's family held out (the columns `dsplan accuracy` reports).
"""
import argparse
import json
import statistics
import sys


def load_records(path, cache):
    if path not in cache:
        rows = {}
        try:
            with open(path) as f:
                for line in f:
                    line = line.strip()
                    if not line:
                        continue
                    try:
                        r = json.loads(line)
                    except json.JSONDecodeError:
                        continue
                    if isinstance(r, dict) and r.get("id"):
                        rows[r["id"]] = r
        except OSError as e:
            sys.exit(f"host_speed_split.py: cannot read record file {path}: {e}")
        cache[path] = rows
    return cache[path]


def linear_us(rec):
    a, b = rec.get("host_speed_before"), rec.get("host_speed_after")
    vals = [x["linear_fwd_us"] for x in (a, b) if isinstance(x, dict) and "linear_fwd_us" in x]
    return statistics.mean(vals) if vals else None


def share_class(hb):
    return "GPU-bound" if hb < 0.1 else ("partly host-bound" if hb < 0.6 else "host-bound")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("accuracy_json")
    ap.add_argument("--slow", type=float, default=1.3,
                    help="a run is slow above this multiple of the median Linear-forward loop")
    ap.add_argument("--list", action="store_true", help="list the slow runs")
    a = ap.parse_args()
    if a.slow <= 1:
        sys.exit("host_speed_split.py: --slow must be above 1 (a multiple of the median loop)")
    try:
        with open(a.accuracy_json) as f:
            acc = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"host_speed_split.py: {a.accuracy_json} is not dsplan accuracy --json output: {e}")
    cache, runs = {}, []
    for r in acc.get("rows", []):
        if r.get("step_error") is None or "file" not in r:
            continue
        rec = load_records(r["file"], cache).get(r.get("id"))
        lin = linear_us(rec) if rec else None
        if lin is None:
            continue
        runs.append((r, lin))
    if not runs:
        sys.exit("host_speed_split.py: no timed run of this record has host-speed readings")
    med = statistics.median(lin for _, lin in runs)
    print(f"{len(runs)} timed runs with host-speed readings; median Linear-forward loop "
          f"{med:.1f} us; slow: above {a.slow * med:.1f} us")
    print("| predicted | host | runs | mean signed error | mean abs error | family held out |")
    print("|---|---|---|---|---|---|")
    for cls in ("GPU-bound", "partly host-bound", "host-bound"):
        for speed in ("normal", "slow"):
            sub = [r for r, lin in runs if share_class(r["host_bound_share"]) == cls and
                   (lin > a.slow * med) == (speed == "slow")]
            if not sub:
                continue
            signed = statistics.mean(r["step_error"] for r in sub)
            absd = statistics.mean(abs(r["step_error"]) for r in sub)
            held = statistics.mean(abs(r.get("step_error_family_held_out", r["step_error"]))
                                   for r in sub)
            print(f"| {cls} | {speed} | {len(sub)} | {signed:+.1%} | {absd:.1%} | {held:.1%} |")
    if a.list:
        for r, lin in sorted(runs, key=lambda x: -x[1]):
            if lin > a.slow * med:
                print(f"slow {lin:5.1f} us  share {r['host_bound_share']:.2f}  "
                      f"{r['step_error']:+.1%}  {r['id']}")


if __name__ == "__main__":
    main()
