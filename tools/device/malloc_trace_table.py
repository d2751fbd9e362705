#!/usr/bin/env python3
"""Summarizes tools/device/malloc_trace.c logs: how glibc served a process's large blocks.

usage: malloc_trace_table.py [--skip N] FILE.tsv...

For each file (one process), the blocks by size, by how glibc served them (an mmap of its own;
the main arena's heap; a per-thread arena's heap) and by whether their pages were fresh: the
share of the block's 4 KiB pages the allocating thread faulted in while the block lived (about
1 when fresh memory was written in full, about 0 when the pages were reused). Blocks freed on
another thread have no fault count and are listed apart. --skip N leaves out each size's first N
blocks (the first step's, before glibc's dynamic mmap threshold has moved).
"""
import argparse
import collections
import sys


def rows(path):
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            tid, size, mm, arena, addr, life_us, faults = line.rstrip("\n").split("\t")
            yield {"tid": int(tid), "bytes": int(size), "mmapped": mm == "1",
                   "thread_arena": arena == "1", "address": int(addr, 16),
                   "life_us": int(life_us), "faults": int(faults)}


def how(r):
    if r["mmapped"]:
        return "mmap"
    return "thread arena" if r["thread_arena"] else "main arena"


def summarize(path, skip):
    seen = collections.Counter()
    groups = collections.defaultdict(lambda: {"n": 0, "pages": 0, "faults": 0, "other": 0})
    for r in rows(path):
        seen[r["bytes"]] += 1
        if seen[r["bytes"]] <= skip:
            continue
        g = groups[(r["bytes"], how(r))]
        g["n"] += 1
        if r["faults"] < 0:
            g["other"] += 1
            continue
        g["pages"] += -(-r["bytes"] // 4096)
        g["faults"] += r["faults"]
    print(f"{path}: blocks of each size after its first {skip}")
    print("| bytes | served from | blocks | freed on another thread | pages faulted / pages |")
    print("|---|---|---|---|---|")
    for (size, where), g in sorted(groups.items()):
        share = g["faults"] / g["pages"] if g["pages"] else float("nan")
        print(f"| {size:,} | {where} | {g['n']} | {g['other']} | {share:.2f} |")
    print()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--skip", type=int, default=1)
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    for f in a.files:
        try:
            summarize(f, a.skip)
        except (OSError, ValueError) as e:
            print(f"malloc_trace_table.py: {f}: {e}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
