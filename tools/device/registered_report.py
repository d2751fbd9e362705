#!/usr/bin/env python3
"""A pre-registered fresh set against what ran: the issue's plan targets, from the files alone.

usage: registered_report.py DIR [--cases NAME ...] [--results GLOB] > DIR/registered.md

--cases limits the registration to the named case lists of DIR (a set that registered one list
per card, whose cases share ids), --results the runs to the results files matching GLOB in DIR
(default results-call*.jsonl).

DIR holds the registration, written before any run, and what ran (`results-call*.jsonl`,
tools/device/dsbench/driver.py groups). The registration is either `plans-dsplan.jsonl` (one
`dsplan --model M --gpus 1 --json` rank-1 recommendation per line, with its step time, band and
peak allocated; each registered model is matched with the sub of the group whose `model` is
the same) or, without it, the `cases-*.jsonl` that tools/device/make_offload_cases.py wrote
(each case's `pred`; matched by case id; cases run under DSBENCH_MEMHIST are not timing data and
are left out). Where a case predicted NVMe traffic, its bytes per step are set against what the
run read from and wrote to the block device (the median over the timed steps of
`per_step.disk_read_mb` / `disk_write_mb`).

Per plan: the registered step time and band, the measured median step, the error
(predicted - measured) / measured, whether the measured step is inside the band, whether the
measured throughput is within 10 % of the registered one (the issue's target), peak allocated
registered against measured, whether the loss fell, stayed or rose from the first to the last
step (a hint of a plan that does not train, not a proof: see the summary line), and the run's
status (ok / oom / missing).
Nothing is fitted or adjusted; a plan without a run is listed as missing, not dropped.
"""
import argparse
import glob
import json
import os
import sys

MiB = 2.0 ** 20


def registered(d, case_files=None):
    """The registered predictions, one dict each: key (what a run is matched by), model, label,
    mb, pred_s, band (relative low, high), pred_alloc (MiB) and the NVMe MiB per step (or None)."""
    out = []
    plans = os.path.join(d, "plans-dsplan.jsonl")
    cases = ([os.path.join(d, c) for c in case_files] if case_files
             else sorted(glob.glob(os.path.join(d, "cases-*.jsonl"))))
    if os.path.exists(plans) and not case_files:
        with open(plans) as f:
            for line in f:
                if not line.strip():
                    continue
                p = json.loads(line)
                if "plan" not in p:  # no recommendation for this model: nothing was registered to run
                    continue
                band = p["step"].get("time_band") or {}
                out.append({"key": ("model", p["model"]), "model": p["model"],
                            "label": p.get("summary", ""), "mb": p["plan"]["micro_batch"],
                            "pred_s": p["step"]["time_s"], "band": (band.get("low", 0), band.get("high", 0)),
                            "pred_alloc": p["gpu"]["peak_allocated_bytes"] / MiB,
                            "nvme": None})
        # The bench driver builds the model outside deepspeed.zero.Init, the plan assumes the HF
        # Trainer's zero.Init: at ZeRO-3 the two peaks differ (docs/deepspeed-facts.md, "What
        # keeps a released weight"). make_gpu_cases.py registered the bench's prediction too (each
        # case's pred, `simulate --no-zero-init`): memory is judged against that one.
        bench = {}
        for path in sorted(glob.glob(os.path.join(d, "cases-*.jsonl"))):
            for line in open(path):
                if line.strip():
                    c = json.loads(line)
                    pr = (c.get("pred") or [{}])[0]
                    if pr.get("peak_allocated_mb") is not None and c.get("model") not in bench:
                        bench[c.get("model")] = pr["peak_allocated_mb"]
        for r in out:
            b = bench.get(r["model"])
            if b is not None and abs(b - r["pred_alloc"]) > 0.5:
                r["plan_alloc"], r["pred_alloc"] = r["pred_alloc"], b
        return out
    for path in cases:
        for line in open(path):
            if not line.strip():
                continue
            c = json.loads(line)
            if (c.get("env") or {}).get("DSBENCH_MEMHIST"):
                continue
            p = c["pred"][0]
            band = p.get("time_band") or {}
            nv = (p.get("nvme_read_mb_per_step"), p.get("nvme_write_mb_per_step"))
            out.append({"key": ("id", c["id"]), "model": c["model"], "label": c.get("variant", ""),
                        "mb": c.get("mb"), "pred_s": p["step_s"],
                        "band": (band.get("low", 0), band.get("high", 0)),
                        "pred_alloc": p["peak_allocated_mb"],
                        "nvme": nv if (nv[0] or nv[1]) else None})
    return out


def measured(d, results="results-call*.jsonl"):
    """Runs by ("model", name) and by ("id", group id): the first run counts, a later repeat does
    not replace it."""
    runs = {}
    for f in sorted(glob.glob(os.path.join(d, results))):
        for line in open(f):
            if not line.strip():
                continue
            g = json.loads(line)
            world = int(g.get("emulated_world_size") or 1)
            for s in g.get("subs", []):
                if world > 1:
                    s = dict(s, emulated_world_size=world)
                runs.setdefault(("model", g.get("model")), s)
                runs.setdefault(("id", g.get("id")), s)
    return runs


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return None if n == 0 else (xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2]))


def row(p, s):
    pred_s = p["pred_s"]
    lo, hi = p["band"][0] * pred_s, p["band"][1] * pred_s
    r = {"model": p["model"], "summary": p["label"], "mb": p["mb"],
         "pred_s": pred_s, "lo": lo, "hi": hi, "pred_alloc": p["pred_alloc"], "nvme": p["nvme"],
         "plan_alloc": p.get("plan_alloc"),
         "status": "missing" if s is None else s.get("status")}
    if s is None or s.get("status") != "ok":
        return r
    if p["nvme"]:
        timed = (s.get("per_step") or [])[2:]
        r["disk"] = (median([x.get("disk_read_mb", 0) for x in timed]),
                     median([x.get("disk_write_mb", 0) for x in timed]))
    m = s.get("median_step_s")
    losses = s.get("losses") or []
    r.update({"meas_s": m, "meas_alloc": s.get("steps_max_alloc_mb")})
    if r["meas_alloc"]:
        r["alloc_err"] = (p["pred_alloc"] - r["meas_alloc"]) / r["meas_alloc"]
    if s.get("emulated_world_size"):
        # One rank of N under a fake process group: no data crossed a link, so neither its step
        # (set beside the prediction of that emulation by dsplan accuracy) nor its loss (the
        # gradients were never summed, other ranks' partitions never updated) means what a
        # real run's does. Its memory does.
        r["emulated"] = s["emulated_world_size"]
        return r
    r.update({"loss_first": losses[0] if losses else None,
              "loss_last": losses[-1] if losses else None})
    if m:
        r["err"] = (pred_s - m) / m
        r["in_band"] = lo <= m <= hi
        # throughput is tokens / step time, the same tokens on both sides
        r["tput_ok"] = abs(m / pred_s - 1) <= 0.10
    if losses:
        r["trained"] = losses[-1] < losses[0]
        r["loss_move"] = ("fell" if losses[-1] < losses[0]
                          else "unchanged" if losses[-1] == losses[0] else "rose")
    return r


def main():
    ap = argparse.ArgumentParser(description="a registered set against what ran")
    ap.add_argument("dir", nargs="?", default=".")
    ap.add_argument("--cases", action="append", default=None, help="a case list of DIR (repeatable)")
    ap.add_argument("--results", default="results-call*.jsonl", help="results files of DIR (glob)")
    a = ap.parse_args()
    d = a.dir
    for c in a.cases or []:
        if not os.path.isfile(os.path.join(d, c)):
            raise SystemExit(f"registered_report: {os.path.join(d, c)}: no such case list")
    got = measured(d, a.results)
    rows = [row(p, got.get(p["key"])) for p in registered(d, a.cases)]
    args = " ".join([d] + [f"--cases {c}" for c in a.cases or []] +
                    ([f"--results '{a.results}'"] if a.results != "results-call*.jsonl" else []))
    print(f"# Registered against measured: `{d}`\n")
    print("Generated by `python3 tools/device/registered_report.py " + args + "`.\n")
    print("| model | registered plan | step registered (band) | measured | error | in band | "
          "throughput within 10 % | peak allocated registered / measured | loss first -> last | "
          "status |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        base = (f"| {r['model']} | {r['summary']}, mb {r['mb']} | {r['pred_s']:.3f} s "
                f"({r['lo']:.2f}-{r['hi']:.2f}) |")
        if "meas_s" not in r or r.get("meas_s") is None:
            print(base + f" - | - | - | - | {r['pred_alloc']:.0f} / - | - | {r['status']} |")
            continue
        alloc = (f"{r['pred_alloc']:.0f} / {r['meas_alloc']:.0f} ({100 * r['alloc_err']:+.1f}%)"
                 if r.get("meas_alloc") else f"{r['pred_alloc']:.0f} / -")
        if r.get("plan_alloc") is not None:
            alloc += f" (as built outside zero.Init; the plan, under it: {r['plan_alloc']:.0f})"
        if r.get("emulated"):
            print(base + f" {r['meas_s']:.3f} s (one rank of {r['emulated']}, no data moved) | - | - | - | "
                  f"{alloc} | - (emulated) | {r['status']} |")
            continue
        loss = (f"{r['loss_first']:.3f} -> {r['loss_last']:.3f}"
                + ("" if r.get("trained") else f" ({r['loss_move']})")
                if r.get("loss_first") is not None else "-")
        print(base + f" {r['meas_s']:.3f} s | {100 * r['err']:+.1f}% | "
              f"{'yes' if r['in_band'] else 'NO'} | {'yes' if r['tput_ok'] else 'NO'} | {alloc} | "
              f"{loss} | {r['status']} |")
    timed = [r for r in rows if r.get("err") is not None]
    n = len(rows)
    print()
    if any(r.get("plan_alloc") is not None for r in rows):
        print("- Peak allocated is judged against the prediction for the model as the bench builds it, "
              "outside `deepspeed.zero.Init` (each case's registered `pred`, `simulate --no-zero-init`); "
              "the plan as printed assumes the HF Trainer's zero.Init, whose ZeRO-3 peak is lower "
              "(docs/deepspeed-facts.md). The bench cannot test that number.")
    emu = [r for r in rows if r.get("emulated") and r.get("alloc_err") is not None]
    if emu:
        print(f"- Emulated ranks (one rank of N on one GPU): {len(emu)} of {n} ran; peak allocated "
              f"mean |error| {100 * sum(abs(r['alloc_err']) for r in emu) / len(emu):.2f} %, "
              f"{sum(r['alloc_err'] < -0.02 for r in emu)} more than 2 % under. Their steps moved no "
              "data between GPUs: `dsplan accuracy` sets them beside the prediction of that "
              "emulation (the fake process group's local all-gather copies priced).")
    if timed:
        mean = sum(abs(r["err"]) for r in timed) / len(timed)
        worst = max(timed, key=lambda r: abs(r["err"]))
        print(f"- Step time over {len(timed)} of {n} registered plans: mean |error| "
              f"{100 * mean:.1f} %, worst {100 * worst['err']:+.1f} % ({worst['model']}).")
        print(f"- Inside the registered band: {sum(r['in_band'] for r in timed)} of {len(timed)}.")
        print(f"- Throughput within 10 % of the registered prediction: "
              f"{sum(r['tput_ok'] for r in timed)} of {len(timed)}.")
        allocs = [r for r in timed if r.get("alloc_err") is not None]
        if allocs:
            print(f"- Peak allocated: mean |error| "
                  f"{100 * sum(abs(r['alloc_err']) for r in allocs) / len(allocs):.2f} %, "
                  f"{sum(r['alloc_err'] < -0.02 for r in allocs)} more than 2 % under.")
        fell = [r for r in timed if r.get("trained") is not None]
        print(f"- Loss fell from the first to the last step: {sum(r['trained'] for r in fell)} "
              f"of {len(fell)}; unchanged {sum(r['loss_move'] == 'unchanged' for r in fell)}, "
              f"rose {sum(r['loss_move'] == 'rose' for r in fell)}. (A loss the model returns in "
              "bf16 moves in steps of 1/16 to 1/64 near 10, and a few steps of a warm-up from "
              "learning rate 0 may not move it: unchanged alone does not show a plan that does "
              "not train.)")
    nvme = [r for r in rows if r.get("nvme")]
    if nvme:
        print()
        print("| model | registered plan | NVMe read / write per step, registered | measured (block device, median of the timed steps) |")
        print("|---|---|---|---|")
        for r in nvme:
            got = r.get("disk")
            meas = (f"{got[0]:.0f} / {got[1]:.0f} MiB" if got and got[0] is not None else "-")
            print(f"| {r['model']} | {r['summary']}, mb {r['mb']} | {r['nvme'][0]:.0f} / {r['nvme'][1]:.0f} MiB | {meas} |")
    others = [r for r in rows if r.get("err") is None and not r.get("emulated")]
    for r in others:
        print(f"- {r['model']}: {r['status']}.")


if __name__ == "__main__":
    main()
