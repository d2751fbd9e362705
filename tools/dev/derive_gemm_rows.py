#!/usr/bin/env python3
"""Add to one profile's stack GEMM table (`stack.gemm`) the rows another profile measured and it
lacks, each scaled by the two tables' ratio on the same series, beyond the largest token count the target measured. For two cards that run the same
cuBLAS kernels on the same die (an H100 SXM and an H200: 3264 shared rows at 256-16384 tokens
agree to a median of 1.011), a series measured further on one card says how the other's rates
go on where it stopped.

A series is a layer shape in one layout: (dtype, layout, batch, n, k) for nt and nn, whose m is
the tokens, and (dtype, layout, batch, m, n) for tn, whose k is. Each added row is the source's
rate times target / source at the series' largest token count both tables hold. Series the target
has no row of (another dtype, a shape it never measured) and token counts inside the target's
own range are left out: the target's interpolation stays its own. Rows the target has are never
changed. The added rows are derived, not measured: say so in the target's stack.gemm_source
(this script prints a line to put there), and replace them with measured rows when the target's
card runs tools/device/gemmx.sh (profile_gemm_rows.py, without --normalize: the keys are then
the table's own).

usage: derive_gemm_rows.py --source profiles/h100-measured.yaml --target profiles/h200-measured.yaml [--dry-run]
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "device"))
from gemm_rows import Table, fmt  # noqa: E402


def series(key):
    dtype, m, n, k, layout, batch = key
    return (dtype, layout, batch, n, k) if layout in ("nt", "nn") else (dtype, layout, batch, m, n)


def tokens(key):
    return key[3] if key[4] == "tn" else key[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True)
    ap.add_argument("--target", required=True)
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args()
    target = Table(a.target)
    src, dst = Table(a.source).rows, target.rows
    lines, last, indent = target.lines, target.last, target.indent
    if not src or not dst or last is None:
        sys.exit(f"{a.source} or {a.target}: no stack.gemm rows")
    shared = [k for k in src if k in dst]
    if len(shared) < 20:
        sys.exit(f"only {len(shared)} shared rows: too few to relate the two cards")
    top = {}
    for k in shared:
        s = series(k)
        if s not in top or tokens(k) > tokens(top[s]):
            top[s] = k
    whole = statistics.median(dst[k] / src[k] for k in shared)
    added, skipped = [], 0
    for k, rate in src.items():
        if k in dst:
            continue
        s = series(k)
        if s not in top or tokens(k) <= tokens(top[s]):
            skipped += 1
            continue
        added.append((k, rate * dst[top[s]] / src[top[s]]))
    print(f"{len(shared)} shared rows, median target/source {whole:.4f}; adding {len(added)} rows "
          f"beyond the target's series; {skipped} rows of series (or token counts) the target does not "
          f"measure at all left out")
    if not added:
        return
    lo = min(tokens(k) for k, _ in added)
    hi = max(tokens(k) for k, _ in added)
    print(f"for stack.gemm_source: rows of {lo}-{hi} tokens the table lacked are derived from {a.source}'s "
          f"measured rows times this card's ratio to it on the same series at the largest token count both "
          f"hold (median {whole:.3f} over {len(shared)} shared rows; tools/dev/derive_gemm_rows.py)")
    if a.dry_run:
        return
    out = [fmt(indent, k, rate) for k, rate in added]
    try:
        with open(a.target, "w") as f:
            f.writelines(lines[: last + 1] + out + lines[last + 1:])
    except OSError as e:
        sys.exit(f"{a.target}: not written: {e}")


if __name__ == "__main__":
    main()
