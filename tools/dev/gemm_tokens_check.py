#!/usr/bin/env python3
"""Checks the cost model's rule for Linear GEMMs above a profile table's last token count against
`tools/probes/torch_gemm.py --linears` measurements (session 36).

For every measured row (dtype, m, n, k, FLOP/s, layout) whose layer shape and layout the profile's
stack GEMM table also has: the table's series for that shape, then at each measured token count
the rate the two rules give, the last point's rate (clamped, before session 36) and the affine
extension from the last two points (`LinearSeriesRate`, capped at the dense peak), against the
measured rate. Rows at or below the table's last count compare the table with this machine.

usage: gemm_tokens_check.py PROFILE.yaml MEASURED.json [...]   (prints a markdown table and a summary)
"""
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "device"))
from gemm_rows import Table  # noqa: E402


def stack_rows(path):
    """The table's unbatched rows as (dtype, m, n, k, FLOP/s, layout)."""
    return [(k[0], k[1], k[2], k[3], rate, k[4]) for k, rate in Table(path).rows.items() if k[5] == 1]


def peak(path):
    m = re.search(r"peak_flops_bf16:\s*\{?\s*(?:value:\s*)?([0-9.eE+]+)", open(path).read())
    return float(m.group(1)) if m else 0.0


def key(layout, m, n, k):
    """(layout, layer a, layer b) and the token count, as the cost model reads a row."""
    return ((layout, m, n) if layout == "tn" else (layout, n, k)), (k if layout == "tn" else m)


def main():
    prof, files = sys.argv[1], sys.argv[2:]
    series = {}
    for dt, m, n, k, r, lay in stack_rows(prof):
        if dt != "bf16":
            continue
        kk, t = key(lay, m, n, k)
        series.setdefault(kk, {})[t] = r
    pk = peak(prof)
    print(f"profile {prof}: {len(series)} bf16 layer series; dense peak {pk / 1e12:.0f} TFLOP/s\n")
    print("| layout | layer | tokens | measured TFLOP/s | table last point | clamped / measured | affine / measured |")
    print("|---|---|---|---|---|---|---|")
    err = {"clamped": [], "affine": []}
    for f in files:
        for dt, m, n, k, r, lay, *rest in json.load(open(f))["rows"]:
            kk, t = key(lay, m, n, k)
            s = series.get(kk)
            if dt != "bf16" or not s or len(s) < 2:
                continue
            pts = sorted(s.items())
            (x1, r1), (x2, r2) = pts[-2], pts[-1]
            if t <= x2:
                if t in s:
                    print(f"| {lay} | {kk[1]}x{kk[2]} | {t} | {r / 1e12:.0f} | (table {s[t] / 1e12:.0f}) | {s[t] / r:.3f} | - |")
                continue
            tau1, tau2 = x1 / r1, x2 / r2
            aff = r2
            if tau2 > tau1:
                aff = t / (tau2 + (t - x2) * (tau2 - tau1) / (x2 - x1))
                if pk > 0:
                    aff = max(r2, min(aff, pk))
            err["clamped"].append(r2 / r - 1)
            err["affine"].append(aff / r - 1)
            print(f"| {lay} | {kk[1]}x{kk[2]} | {t} | {r / 1e12:.0f} | {x2}: {r2 / 1e12:.0f} | {r2 / r:.3f} | {aff / r:.3f} |")
    for name, e in err.items():
        if e:
            print(f"\n{name}: rate / measured above the table, {len(e)} rows: mean {statistics.mean(e):+.3f}, "
                  f"mean |.| {statistics.mean(abs(x) for x in e):.3f}, min {min(e):+.3f}, max {max(e):+.3f}")


if __name__ == "__main__":
    main()
