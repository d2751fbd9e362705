#!/usr/bin/env python3
"""pair-1217's and window-1217's registered rules, applied to what ran (session 41).

usage: pair_report.py pair DIR CASES.jsonl [--results GLOB] > DIR/registered-CARD.md
       pair_report.py window DIR CASES.jsonl [--results GLOB] > DIR/registered-CARD.md

DIR holds the case list written before any run (CASES.jsonl: each case's subs, with dsplan's
prediction `pred`) and what ran (`results-call*.jsonl` unless --results says otherwise:
tools/device/dsbench/driver.py groups, one sub per sub_id; the first run of a sub_id counts).

pair: each case runs a new family and a measured family's control alternately (sub ids
pair_TAG_MODEL_rN). Per round, m = measured / predicted step of the new family and c the same of
the control; the family's own miss is m / c, and the rule of pair-1217/README.md reads it (mean
over the rounds whose two subs' host-speed loops are within 1.3x of each other): 0.9-1.1 the host,
1.2 or more the family, between reported as it is. Memory: peak allocated within 3 % and never
more than 2 % under.
window: the subs alternate 4095 and 4096 tokens (sub ids window_MODEL_sSEQ_rN); the measured peak
allocated at 4096 less that at 4095, averaged over the rounds, against the rule of
window-1217/README.md (400 MiB or more: the mask is built at the window's length; 100 MiB or
less: it is not).
Nothing is fitted; a sub that did not run is listed as missing.
"""
import argparse
import glob
import json
import os
import re
import statistics
import sys


def load_cases(path):
    subs = {}
    with open(path) as f:
        for line in f:
            if line.strip():
                for s in json.loads(line).get("subs", []):
                    subs[s["sub_id"]] = s
    if not subs:
        sys.exit(f"pair_report.py: {path}: no subs")
    return subs


def load_runs(d, pattern):
    runs = {}
    for path in sorted(glob.glob(os.path.join(d, pattern))):
        with open(path) as f:
            for line in f:
                if not line.strip():
                    continue
                for s in json.loads(line).get("subs", []):
                    runs.setdefault(s.get("sub_id"), s)
    return runs


def loop_us(run):
    vals = [x["linear_fwd_us"] for x in (run.get("host_speed_before"), run.get("host_speed_after"))
            if isinstance(x, dict) and x.get("linear_fwd_us")]
    return statistics.mean(vals) if vals else None


def ok(run):
    return run is not None and run.get("status") == "ok" and run.get("median_step_s")


def memory_line(sid, sub, run):
    pred = sub["pred"]["peak_allocated_mb"]
    meas = run.get("steps_max_alloc_mb")
    if not meas:
        return f"| {sid} | {pred:.0f} | - | - | - |"
    err = (pred - meas) / meas
    held = abs(err) <= 0.03 and err >= -0.02
    return f"| {sid} | {pred:.0f} | {meas:.0f} | {100 * err:+.1f}% | {'yes' if held else 'NO'} |"


def pair_report(subs, runs):
    groups = {}
    for sid, s in subs.items():
        m = re.match(r"pair_([a-z0-9]+)_(.+)_r(\d+)$", sid)
        if not m:
            continue
        groups.setdefault(m.group(1), {}).setdefault(int(m.group(3)), []).append((sid, s))
    print("| pair | round | new: measured / predicted step | control: measured / predicted | "
          "m / c | host loop new / control (us) | round used |")
    print("|---|---|---|---|---|---|---|")
    verdicts = []
    for tag in sorted(groups):
        ratios = []
        for rnd in sorted(groups[tag]):
            members = groups[tag][rnd]
            if len(members) != 2:
                continue
            (sn, new), (sc, ctl) = members  # case order: new family first, then its control
            rn, rc = runs.get(sn), runs.get(sc)
            if not (ok(rn) and ok(rc)):
                print(f"| {tag} | {rnd} | {'missing' if rn is None else rn.get('status')} | "
                      f"{'missing' if rc is None else rc.get('status')} | - | - | no |")
                continue
            m = rn["median_step_s"] / new["pred"]["step_s"]
            c = rc["median_step_s"] / ctl["pred"]["step_s"]
            ln, lc = loop_us(rn), loop_us(rc)
            used = ln is not None and lc is not None and max(ln, lc) <= 1.3 * min(ln, lc)
            if used:
                ratios.append(m / c)
            loops = f"{ln:.1f} / {lc:.1f}" if ln and lc else "-"
            print(f"| {tag} | {rnd} | {rn['median_step_s']:.3f} / {new['pred']['step_s']:.3f} s "
                  f"({m:.2f}x) | {rc['median_step_s']:.3f} / {ctl['pred']['step_s']:.3f} s "
                  f"({c:.2f}x) | {m / c:.2f} | {loops} | {'yes' if used else 'no (loops > 1.3x apart)'} |")
        if ratios:
            r = statistics.mean(ratios)
            v = ("the host (0.9-1.1)" if 0.9 <= r <= 1.1 else "the family (1.2 or more)" if r >= 1.2
                 else "reported as it is")
            verdicts.append(f"- {tag}: m / c {r:.2f} over {len(ratios)} round(s): {v}.")
        else:
            verdicts.append(f"- {tag}: no usable round.")
    print()
    print("\n".join(verdicts))


def window_report(subs, runs):
    by_round = {}
    for sid, s in subs.items():
        m = re.match(r"window_.+_s(\d+)_r(\d+)$", sid)
        if m:
            by_round.setdefault(int(m.group(2)), {})[int(m.group(1))] = (sid, s)
    print("| round | peak allocated at 4095 / 4096 tokens (MiB) | difference | predicted | "
          "step 4095 / 4096 (s) | step difference | predicted |")
    print("|---|---|---|---|---|---|---|")
    diffs = []
    for rnd in sorted(by_round):
        pair = by_round[rnd]
        if 4095 not in pair or 4096 not in pair:
            continue
        (sa, a), (sb, b) = pair[4095], pair[4096]
        ra, rb = runs.get(sa), runs.get(sb)
        pd = b["pred"]["peak_allocated_mb"] - a["pred"]["peak_allocated_mb"]
        ps = b["pred"]["step_s"] / a["pred"]["step_s"] - 1
        if not (ok(ra) and ok(rb)) or not ra.get("steps_max_alloc_mb") or not rb.get("steps_max_alloc_mb"):
            print(f"| {rnd} | missing | - | {pd:+.0f} | - | - | {100 * ps:+.1f}% |")
            continue
        d = rb["steps_max_alloc_mb"] - ra["steps_max_alloc_mb"]
        diffs.append(d)
        sd = rb["median_step_s"] / ra["median_step_s"] - 1
        print(f"| {rnd} | {ra['steps_max_alloc_mb']:.0f} / {rb['steps_max_alloc_mb']:.0f} | {d:+.0f} | "
              f"{pd:+.0f} | {ra['median_step_s']:.4f} / {rb['median_step_s']:.4f} | {100 * sd:+.1f}% | "
              f"{100 * ps:+.1f}% |")
    print()
    if diffs:
        d = statistics.mean(diffs)
        v = ("the mask is built at the window's length: the rule stands" if d >= 400 else
             "it is not: revert the rule" if d <= 100 else "reported as it is")
        print(f"- Mean difference {d:+.0f} MiB over {len(diffs)} round(s): {v}.")
    else:
        print("- No round ran both lengths.")


def main():
    ap = argparse.ArgumentParser(description="pair-1217's and window-1217's rules on what ran")
    ap.add_argument("kind", choices=("pair", "window"))
    ap.add_argument("dir")
    ap.add_argument("cases")
    ap.add_argument("--results", default="results-call*.jsonl")
    a = ap.parse_args()
    cases = a.cases if os.path.isabs(a.cases) else os.path.join(a.dir, a.cases)
    if not os.path.isfile(cases):
        sys.exit(f"pair_report.py: {cases}: no such case list")
    subs, runs = load_cases(cases), load_runs(a.dir, a.results)
    print(f"# Registered against measured: `{a.dir}` ({os.path.basename(cases)})\n")
    print(f"Generated by `python3 tools/device/pair_report.py {a.kind} {a.dir} "
          f"{os.path.basename(cases)}`.\n")
    (pair_report if a.kind == "pair" else window_report)(subs, runs)
    print("\n| sub | peak allocated predicted (MiB) | measured | error | within 3 %, not 2 % under |")
    print("|---|---|---|---|---|")
    for sid, s in subs.items():
        r = runs.get(sid)
        print(memory_line(sid, s, r) if ok(r) else f"| {sid} | {s['pred']['peak_allocated_mb']:.0f} | "
              f"{'missing' if r is None else r.get('status')} | - | - |")


if __name__ == "__main__":
    main()
