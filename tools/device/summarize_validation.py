#!/usr/bin/env python3
"""Summarizes a folder of `dsplan validate --json-out` reports (tools/device/validation_matrix.sh)
into docs/validation/h200-runtime.md (every case, every task class) and the summary block of
docs/accuracy.md between the runtime-validation markers.

Usage: tools/device/summarize_validation.py RESULTS_DIR [--date 2026-12-02]
"""
import json
import os
import sys

BEGIN = "<!-- runtime-validation: begin (tools/device/summarize_validation.py) -->"
END = "<!-- runtime-validation: end -->"


def pct(x):
    return "n/a" if x is None else f"{100 * x:+.1f} %"


def main():
    src = sys.argv[1]
    date = sys.argv[sys.argv.index("--date") + 1] if "--date" in sys.argv else ""
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    cases = []
    for f in sorted(os.listdir(src)):
        if f.endswith(".json"):
            j = json.load(open(os.path.join(src, f)))
            j["case"] = f[:-5]
            cases.append(j)
    if not cases:
        sys.exit(f"{src}: no .json reports")
    dev = cases[0]["device"]
    head = (f"Measured with `dsplan validate` on one {dev['name']} ({dev['driver']}; "
            f"{dev['libraries']}){', ' + date if date else ''}. The prediction is for dsplan's own "
            "runtime (software stack `dsplan-runtime`), profile `h200-measured`.")
    # Full report.
    lines = ["# Runtime validation on the H200: every case", "", head, "",
             "Reports: `docs/validation/h200/CASE.txt` (and `.json`). Task classes are busy "
             "time summed over one step.", ""]
    for j in cases:
        lines += [f"## {j['case']}", "", f"{j['model']}: {j['plan']}, micro-batch {j['micro_batch']}"
                  f"{', checkpointing' if j.get('gradient_checkpointing') else ''}. {j['verdict']}", ""]
        if j.get("out_of_memory"):
            lines += [j.get("oom", ""), ""]
            continue
        lines += ["| quantity | predicted | measured | error |", "|---|---|---|---|"]
        for r in j["rows"]:
            if r["unit"] == "bytes":
                p, m = f"{r['predicted'] / 2**30:.2f} GiB", f"{r['measured'] / 2**30:.2f} GiB"
            else:
                p, m = f"{r['predicted']:.4f} s", f"{r['measured']:.4f} s"
            tiny = r["unit"] != "bytes" and min(r["predicted"], r["measured"]) < 1e-4
            lines.append(f"| {r['quantity']}{' (judged)' if r['judged'] else ''} | {p} | {m} | "
                         f"{'-' if tiny else pct(r['error'])} |")
        lines.append("")
    open(os.path.join(root, "docs/validation/h200-runtime.md"), "w").write("\n".join(lines) + "\n")

    # Summary block for docs/accuracy.md.
    s = [BEGIN, "", "## dsplan's runtime on the H200 (`dsplan validate`)", "", head,
         "Full tables: `docs/validation/h200-runtime.md`; what the misses are and what the memory "
         "rows do and do not show: `docs/validation/h200-findings.md`.", "",
         "| case | step predicted | measured | error | device memory predicted | measured | error | MFU | verdict |",
         "|---|---|---|---|---|---|---|---|---|"]
    step_err, mem_err = [], []
    for j in cases:
        rows = {r["quantity"]: r for r in j["rows"]}
        st, dm = rows.get("step time"), rows.get("device memory (driver)")
        if j.get("out_of_memory"):
            s.append(f"| {j['case']} | | OOM | | | | | | {j['verdict']} |")
            continue
        step_err.append(abs(st["error"]))
        mem_err.append(abs(dm["error"]))
        s.append(f"| {j['case']} | {st['predicted']:.4f} s | {st['measured']:.4f} s | {pct(st['error'])} | "
                 f"{dm['predicted'] / 2**30:.2f} GiB | {dm['measured'] / 2**30:.2f} GiB | {pct(dm['error'])} | "
                 f"{100 * j.get('mfu', 0):.1f} % | {'PASS' if j['pass'] else 'FAIL'} |")
    if step_err:
        s += ["", f"Step time: mean |error| {100 * sum(step_err) / len(step_err):.1f} %, max "
              f"{100 * max(step_err):.1f} %. Device memory: mean |error| "
              f"{100 * sum(mem_err) / len(mem_err):.1f} %, max {100 * max(mem_err):.1f} % "
              f"({len(step_err)} cases that ran; targets 10 % and 5 % on every case)."]
    s += ["", END]
    acc_path = os.path.join(root, "docs/accuracy.md")
    acc = open(acc_path).read()
    if BEGIN in acc:
        acc = acc[:acc.index(BEGIN)] + "\n".join(s) + acc[acc.index(END) + len(END):]
    else:
        acc = acc.rstrip("\n") + "\n\n" + "\n".join(s) + "\n"
    open(acc_path, "w").write(acc)
    print("\n".join(s))


if __name__ == "__main__":
    main()
