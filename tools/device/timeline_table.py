#!/usr/bin/env python3
"""The stream timelines of driver.py's DSBENCH_TIMELINE step as a Markdown table.

usage: timeline_table.py RESULTS.jsonl [...]
One row per sub-case and phase: the phase's wall time, the compute stream's busy time (union of
its kernels), its idle time split into gaps while a side stream was busy (the compute stream
waiting on, e.g., a ZeRO-3 gather) and gaps with the whole GPU idle (the host late), the GEMM
share of the compute stream, side-stream time that ran beside compute kernels, and how many
compute kernels started within 20 us of their launch (the queue had run dry). Then, where the
driver recorded them (from 2026-12-05), the runtime calls that can block the host, per phase:
count and total milliseconds. With gradient accumulation the driver profiles every micro-step:
the earlier micro-steps' phases (fwd@0, bwd@0, ...) come first, the boundary's (fwd, bwd, opt)
last; the timed median column is the whole step's per-phase median (summed over micro-steps).
"""
import json
import sys


def rows(paths):
    for p in paths:
        for line in open(p):
            r = json.loads(line)
            for d in r.get("subs", []):
                if "timeline" in d or "timeline_error" in d:
                    yield d


def phases(timeline):
    """The profiled phases in step order: fwd@0, bwd@0, opt@0, ..., then fwd, bwd, opt."""
    early = sorted((k for k in timeline if "@" in k), key=lambda k: (int(k.split("@")[1]), ("fwd", "bwd", "opt").index(k.split("@")[0])))
    return early + [k for k in ("fwd", "bwd", "opt") if k in timeline]


def main():
    print("| case | phase | timed median s | wall s | compute busy s | gaps: GPU idle s | gaps: side busy s "
          "| GEMM s | side beside compute s | starved kernels (s) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for d in rows(sys.argv[1:]):
        if "timeline_error" in d:
            print(f"| {d['sub_id']} | error: {d['timeline_error'].strip().splitlines()[-1][:80]} |")
            continue
        for ph in phases(d["timeline"]):
            t = d["timeline"].get(ph) or {}
            if "wall_s" not in t:  # no GPU work in the phase (a non-boundary micro-step's step())
                continue
            print(f"| {d['sub_id']} | {ph} | {d.get('median_' + ph.split('@')[0] + '_s', 0) if '@' not in ph else 0:.4f} | {t['wall_s']:.4f} | "
                  f"{t['compute_busy_s']:.4f} | {t['gaps_gpu_idle_s']:.4f} | {t['gaps_with_side_busy_s']:.4f} | "
                  f"{t['compute_gemm_s']:.4f} | {t['side_concurrent_s']:.4f} | "
                  f"{t['starved_kernels']} of {t['launch_lag_known']} ({t['starved_kernel_s']:.4f}) |")
    waits = [(d["sub_id"], ph, d["timeline"][ph]["host_waits"]) for d in rows(sys.argv[1:])
             if "timeline" in d for ph in phases(d["timeline"])
             if (d["timeline"].get(ph) or {}).get("host_waits") is not None]
    if waits:
        print()
        print("| case | phase | host-blocking runtime calls: count, total ms |")
        print("|---|---|---|")
        for sub, ph, w in waits:
            calls = ", ".join(f"{k} {v[0]} ({v[1]:.1f} ms)" for k, v in sorted(w.items(), key=lambda kv: -kv[1][1]))
            print(f"| {sub} | {ph} | {calls or 'none'} |")


if __name__ == "__main__":
    main()
