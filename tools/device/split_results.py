#!/usr/bin/env python3
"""Files one device call's results into the registered sets they belong to.

A device call runs the cases of several sets in one go (go.sh writes them all to one
cases.jsonl). Each set's folder under docs/validation/deepspeed/ holds the case lists it
registered (cases*.jsonl); this script reads those lists, and writes every result line whose id one
of them registered to DIR/results-<call>.jsonl of that set. Lines whose id no set registered are
reported and left out. An existing results file is never overwritten (pick another call name).

  tools/device/split_results.py --call callK1 RESULTS.jsonl SET_DIR [SET_DIR ...]
"""
import argparse
import glob
import json
import os
import sys


def registered_ids(set_dir):
    ids = set()
    files = sorted(glob.glob(os.path.join(set_dir, "cases*.jsonl")))
    if not files:
        raise SystemExit(f"split_results: {set_dir}: no cases*.jsonl (is it a registered set?)")
    for path in files:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    ids.add(json.loads(line)["id"])
                except (ValueError, KeyError) as e:
                    raise SystemExit(f"split_results: {path}:{n}: not a case line with an id ({e})")
    return ids


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--call", required=True, help="the call's name; output files are results-<call>.jsonl")
    ap.add_argument("results", help="the call's cases.jsonl (one result record per line)")
    ap.add_argument("sets", nargs="+", help="registered set folders")
    a = ap.parse_args()
    owner = {}
    for d in a.sets:
        for i in registered_ids(d):
            if i in owner:
                raise SystemExit(f"split_results: id {i} is registered by both {owner[i]} and {d}")
            owner[i] = d
    out = {d: [] for d in a.sets}
    stray = []
    with open(a.results) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rid = json.loads(line)["id"]
            except (ValueError, KeyError) as e:
                raise SystemExit(f"split_results: {a.results}:{n}: not a result line with an id ({e})")
            if rid in owner:
                out[owner[rid]].append(line if line.endswith("\n") else line + "\n")
            else:
                stray.append(rid)
    for d, lines in out.items():  # refuse before writing anything
        path = os.path.join(d, f"results-{a.call}.jsonl")
        if lines and os.path.exists(path):
            raise SystemExit(f"split_results: {path} exists; pass another --call name")
    for d, lines in out.items():
        if not lines:
            print(f"{d}: no results in this call")
            continue
        path = os.path.join(d, f"results-{a.call}.jsonl")
        try:
            with open(path, "x") as f:
                f.writelines(lines)
        except OSError as e:
            raise SystemExit(f"split_results: cannot write {path}: {e}")
        print(f"{path}: {len(lines)} results")
    if stray:
        print(f"not registered by any set given ({len(stray)}): {' '.join(stray)}", file=sys.stderr)


if __name__ == "__main__":
    main()
