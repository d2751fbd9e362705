#!/usr/bin/env python3
"""Put measured GEMM rows (tools/probes/torch_gemm.py's JSON, schema dsplan-torch-gemm/1) into a
profile's stack GEMM table (`stack.gemm`), the one the cost model prices the PyTorch stack's
Linears with.

A row is keyed by (dtype, m, n, k, layout, batch): a key already in the table gets the new rate,
a new key is added after the table's last row. With --normalize, rows come from another machine
than the table's: keys the table has keep their rates, and they give the two machines' speed
ratio (the median of new / table over those keys, which must be at least 20); the new keys are
added divided by it, so that the table keeps describing one machine. Only the table's row lines change; the rest of the
file (comments, the gemm_source text) is left as it is, so say where the new rows came from in
stack.gemm_source by hand. Rows from a device other than --device (when given) are refused.

usage: profile_gemm_rows.py --profile profiles/h200-measured.yaml [--device H200] [--normalize] [--dry-run] JSON...
Prints how many rows were replaced and added (and by how much the replaced ones moved).
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gemm_rows import Table, fmt, key_of  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", required=True)
    ap.add_argument("--device", default="", help="refuse files whose device does not contain this")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--normalize", action="store_true",
                    help="keep the table's rates; scale the added rows by the median table / new ratio of the shared keys")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    new = {}
    for path in a.files:
        doc = json.load(open(path))
        if doc.get("schema") != "dsplan-torch-gemm/1":
            sys.exit(f"{path}: not a torch_gemm.py output (schema {doc.get('schema')!r})")
        if a.device and a.device not in doc.get("device", ""):
            sys.exit(f"{path}: measured on {doc.get('device')!r}, not a {a.device}")
        for r in doc["rows"]:
            new[key_of(r[0], r[1], r[2], r[3], r[5], r[6] if len(r) > 6 else 1)] = float(r[4])
    table = Table(a.profile)
    lines, last, indent, seen, moved = table.lines, table.last, table.indent, set(), []
    for key, old in table.rows.items():
        if key in new:
            moved.append(new[key] / old)
            if not a.normalize:
                lines[table.index[key]] = fmt(indent, key, new[key])
            seen.add(key)
    if last is None:
        sys.exit(f"{a.profile}: no stack.gemm table")
    scale = 1.0
    if a.normalize:
        if len(moved) < 20:
            sys.exit(f"--normalize needs at least 20 keys in both the table and the new rows; {len(moved)} are")
        scale = statistics.median(moved)
    added = [fmt(indent, k, v / scale) for k, v in new.items() if k not in seen]
    lines[last + 1:last + 1] = added
    print(f"{a.profile}: {len(seen)} rows {'shared (kept)' if a.normalize else 'replaced'}"
          + (f" (new / old rate: median {statistics.median(moved):.3f}, {min(moved):.3f}-{max(moved):.3f})" if moved else "")
          + f", {len(added)} added" + (f" (divided by {scale:.4f})" if a.normalize else ""))
    if not a.dry_run:
        with open(a.profile, "w") as f:
            f.writelines(lines)


if __name__ == "__main__":
    main()
