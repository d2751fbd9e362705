#!/usr/bin/env python3
"""Host copies and page faults of offloaded DeepSpeed runs, from the driver's results.

usage: copy_table.py RESULTS.jsonl [...]

For every ok sub-case of tools/device/dsbench/driver.py's results that has a kernel profile
(`DSBENCH_KPROF=1`, the `kprof` map of one profiled step per phase) and per-step page-fault
counts (`per_step[].minflt`):
- the step time (median of steps 3..n) and the minor page faults of steps 3..n in GB (4 KiB
  pages; median), and those of step 2 (the first step after the lazy allocations of step 1);
- per phase, the copies the kernel profile lists ("Memcpy DtoH (Device -> Pageable)" and the
  like): count and seconds;
- the rate of the backward's D2H into pageable memory, taking its bytes as the 16-bit size of
  every parameter (ZeRO-3 with the optimizer offloaded at one rank: one blocking cast copy per
  owned tensor, `partition_grads`), so only meaningful for those runs; other runs print "-".

This is what docs/validation/deepspeed/offphase-1206 read by hand and what malloc-1206's
registered criteria need (faults per step, the D2H rate, the step). Nothing is predicted here.
"""
import json
import statistics
import sys

PAGE = 4096
COPY_KINDS = [
    ("DtoH (Device -> Pageable)", "D2H pageable"),
    ("DtoH (Device -> Pinned)", "D2H pinned"),
    ("HtoD (Pageable -> Device)", "H2D pageable"),
    ("HtoD (Pinned -> Device)", "H2D pinned"),
]


def subs(path):
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            for s in json.loads(line).get("subs", []):
                yield s


def row(s):
    steps = s.get("step_times_s") or []
    per = s.get("per_step") or []
    kprof = s.get("kprof") or {}
    if s.get("status") != "ok" or len(steps) < 3 or not kprof or not all("minflt" in p for p in per):
        return None
    faults = [p["minflt"] * PAGE / 1e9 for p in per]
    out = {
        "id": s["sub_id"],
        "step_s": statistics.median(steps[2:]),
        "faults_gb": statistics.median(faults[2:]) if len(faults) > 2 else None,
        "faults_step2_gb": faults[1] if len(faults) > 1 else None,
        "copies": {},
        "d2h_pageable_rate_gbs": None,
    }
    for phase in ("fwd", "bwd", "opt"):
        top = (kprof.get(phase) or {}).get("top") or []
        for name, short in COPY_KINDS:
            hit = [t for t in top if t[0] == "Memcpy " + name]
            if hit:
                out["copies"][(phase, short)] = (hit[0][1], hit[0][2])
    z3_offload = s.get("stage") == 3 and s.get("offload_optimizer") == "cpu" and s.get("n_params")
    bwd = out["copies"].get(("bwd", "D2H pageable"))
    if z3_offload and bwd and bwd[1] > 0:
        out["d2h_pageable_rate_gbs"] = 2.0 * s["n_params"] / bwd[1] / 1e9
    return out


def fmt(x, spec):
    return "-" if x is None else format(x, spec)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__.strip().splitlines()[2])
    rows = []
    for path in sys.argv[1:]:
        try:
            rows += [r for r in map(row, subs(path)) if r]
        except (OSError, ValueError) as e:
            sys.exit(f"{path}: {e}")
    print("| case | step s | faults per step GB (step 2) | backward D2H pageable: n, s, GB/s | "
          "step() H2D pageable: n, s |")
    print("|---|---|---|---|---|")
    for r in rows:
        d2h = r["copies"].get(("bwd", "D2H pageable"))
        h2d = r["copies"].get(("opt", "H2D pageable"))
        print(f"| {r['id']} | {r['step_s']:.3f} | {fmt(r['faults_gb'], '.2f')} "
              f"({fmt(r['faults_step2_gb'], '.2f')}) | "
              f"{'-' if not d2h else f'{d2h[0]}, {d2h[1]:.3f}'}, {fmt(r['d2h_pageable_rate_gbs'], '.1f')} | "
              f"{'-' if not h2d else f'{h2d[0]}, {h2d[1]:.3f}'} |")


if __name__ == "__main__":
    main()
