#!/usr/bin/env python3
"""The per-op host costs and family blocks of a profile from several stack_costs.py processes
(stackrep-1206e's follow-up rule, registered in session 30 before the run).

Each process's output is converted to the profile's form by dsplan's own code: it is merged into a
complete stack_costs.py output (FILL, default docs/validation/stack/stack-costs-call2.json with
kernel-rates.json's kernel classes; its op_kinds and families are replaced by the process's, and
a process without families keeps none, so that FILL's never count), handed to
`dsplan profile --stack` through a stand-in interpreter (as tools/dev/h200_stack_section.sh does),
and the `stack:` section it writes is read back. Only `ops`, `kernel_s`, `blocks` and `rests` are
taken; they are read from op_kinds and families alone (runtime/profiler/stack_probe.cc), so
FILL's other sections do not reach them.

Then, entry by entry, the median over the base profile's own values and every process that has
the entry (ops and kernel_s: the profile and each process with op_kinds; a family's block and rest
time: the profile and each process that measured the family). Module and parameter counts are
not medians: they must agree, or the tool stops.

usage: stackrep_host_median.py --dsplan BUILD/dsplan [--profile profiles/h100-measured.yaml]
       [--base NAME] [--fill STACK_JSON] [--apply] STACK_JSON...
Prints one JSON document (the medians, and each source's converted values); --apply rewrites
those four keys of the profile's stack section in place (the other lines are left as they are).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import yaml

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
STACK = os.path.join(ROOT, "docs", "validation", "stack")
KEYS = ("ops", "kernel_s", "blocks", "rests")


def stack_section(text):
    """The profile's stack: mapping (PyYAML reads the whole file)."""
    return yaml.safe_load(text)["stack"]


def convert(dsplan, process, fill, base):
    """One process's stack_costs.py output as dsplan's profile writes it: ops, kernel_s, blocks, rests."""
    doc = json.load(open(fill))
    if "kernels" not in doc:
        doc["kernels"] = json.load(open(os.path.join(STACK, "kernel-rates.json")))["kernels"]
    doc["op_kinds"] = process["op_kinds"]
    doc["families"] = process.get("families") or {}
    with tempfile.TemporaryDirectory() as tmp:
        merged = os.path.join(tmp, "merged.json")
        json.dump(doc, open(merged, "w"))
        py = os.path.join(tmp, "python")
        with open(py, "w") as f:
            f.write("#!/bin/sh\n"
                    "if [ \"$1\" = -c ]; then echo 2.11.0+cu130; echo 1; exit 0; fi\n"
                    "script=$1; out=''\n"
                    "while [ $# -gt 0 ]; do case $1 in --out) out=$2;; esac; shift; done\n"
                    f"case $script in */stack_costs.py) cp '{merged}' \"$out\";; *) exit 1;; esac\n")
        os.chmod(py, 0o755)
        out = os.path.join(tmp, "p.yaml")
        # --only cpu-adam --stack: the stack section from the interpreter, nothing measured here;
        # torch_gemm.py is refused, so the base profile's GEMM table stays (its note is expected).
        r = subprocess.run([dsplan, "profile", "--test-sizes", "--base", base, "--only", "cpu-adam", "--stack",
                            "--python", py, "--out", out], capture_output=True, text=True,
                           env=dict(os.environ, DSPLAN_DATA_DIR=ROOT))
        if r.returncode != 0 or not os.path.exists(out):
            sys.exit(f"stackrep_host_median: dsplan profile failed ({r.returncode}):\n{r.stdout}{r.stderr}")
        s = stack_section(open(out).read())
    if not doc["families"]:
        s["blocks"], s["rests"] = [], []
    return {k: s.get(k) for k in KEYS}


def combine(sources):
    """Entry-by-entry medians over the sources (the first is the base profile)."""
    out = {"ops": {}, "kernel_s": None, "blocks": [], "rests": []}
    kinds = list(sources[0]["ops"])
    for k in kinds:
        vals = [s["ops"][k] for s in sources if s["ops"]]
        out["ops"][k] = [statistics.median([v[0] for v in vals]), statistics.median([v[1] for v in vals])]
        out.setdefault("n", {})["ops." + k] = len(vals)
    ks = [s["kernel_s"] for s in sources if s["kernel_s"]]
    out["kernel_s"] = [statistics.median([v[0] for v in ks]), statistics.median([v[1] for v in ks])]
    for b in sources[0]["blocks"]:
        fam, kind = b[0], b[1]
        rows = [r for s in sources for r in s["blocks"] if r[0] == fam and r[1] == kind]
        for r in rows:
            if r[6:8] != b[6:8]:
                sys.exit(f"stackrep_host_median: {fam} {kind}: modules/params {r[6:8]} differ from {b[6:8]}")
        out["blocks"].append([fam, kind] + [statistics.median([r[i] for r in rows]) for i in range(2, 6)] + list(b[6:8]))
        out["n"][f"blocks.{fam}.{kind}"] = len(rows)
    for b in sources[0]["rests"]:
        rows = [r for s in sources for r in s["rests"] if r[0] == b[0]]
        out["rests"].append([b[0]] + [statistics.median([r[i] for r in rows]) for i in (1, 2)])
        out["n"][f"rests.{b[0]}"] = len(rows)
    return out


def flow(v):
    """A YAML flow list as the profile writes them: bare names, full-precision numbers."""
    return "[" + ", ".join(x if isinstance(x, str) else repr(x) for x in v) + "]"


def apply(path, med):
    """Rewrites ops, kernel_s, blocks and rests inside the stack: section, keeping every other line."""
    lines = open(path).read().split("\n")
    start = next(i for i, l in enumerate(lines) if l == "stack:")
    end = next((i for i in range(start + 1, len(lines)) if lines[i] and not lines[i].startswith(" ")), len(lines))
    out, i = lines[:start + 1], start + 1
    while i < end:
        l = lines[i]
        key = l.strip().split(":")[0] if l.startswith("  ") and not l.startswith("   ") else None
        if key in KEYS:
            j = i + 1
            while j < end and lines[j].startswith("    "):
                j += 1  # the key's own block
            if key == "kernel_s":
                out.append(f"  kernel_s: {flow(med['kernel_s'])}")
            elif key == "ops":
                out.append("  ops:")
                out += [f"    {k}: {flow(v)}" for k, v in med["ops"].items()]
            else:
                out.append(f"  {key}:")
                out += [f"    - {flow(r)}" for r in med[key]]
            i = j
            continue
        out.append(l)
        i += 1
    out += lines[end:]
    text = "\n".join(out)
    got = stack_section(text)  # the rewritten file must read back to the medians
    for k in KEYS:
        if got[k] != med[k]:
            sys.exit(f"stackrep_host_median: {path}: {k} did not read back as written")
    with open(path, "w") as f:
        f.write(text)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsplan", required=True)
    ap.add_argument("--profile", default=os.path.join(ROOT, "profiles", "h100-measured.yaml"))
    ap.add_argument("--fill", default=os.path.join(STACK, "stack-costs-call2.json"))
    ap.add_argument("--base", help="the profile name dsplan profile starts from (default: --profile's file name)")
    ap.add_argument("--apply", action="store_true")
    ap.add_argument("stack", nargs="+")
    a = ap.parse_args()
    base_name = a.base or os.path.splitext(os.path.basename(a.profile))[0]
    base = stack_section(open(a.profile).read())
    sources = [{k: base.get(k) for k in KEYS}]
    names = [a.profile]
    for path in a.stack:
        proc = json.load(open(path))
        if not proc.get("op_kinds"):
            sys.exit(f"stackrep_host_median: {path}: no op_kinds")
        sources.append(convert(a.dsplan, proc, a.fill, base_name))
        names.append(path)
    med = combine(sources)
    json.dump({"sources": dict(zip(names, sources)), "median": med}, sys.stdout, indent=1)
    print()
    if a.apply:
        apply(a.profile, med)


if __name__ == "__main__":
    main()
