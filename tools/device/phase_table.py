#!/usr/bin/env python3
"""Measured phase times of phase-synced DeepSpeed runs against dsplan's predicted phases.

usage: phase_table.py --dsplan BUILD/dsplan [--hardware P] [--host-pipeline] RESULTS.jsonl [...]

For every ok sub-case of tools/device/dsbench/driver.py's results that was timed phase by phase
(`phase_sync` true) with one micro-step per step: the median over steps 3..n of the forward,
backward and `engine.step()` times, and the last step's, against the phases of
`dsplan simulate --trace` for the same model config, ds_config, lengths and checkpointing.
dsplan's phases are read off the simulated schedule: forward ends with the last forward task;
the optimizer phase starts with the first optimizer task (GPU or CPU) and runs to the end of
the step; backward is what lies between. The simulated step has no synchronization between
phases, so a phase can borrow a little from its neighbour; the sum is the simulated step.
Stage-3 runs are predicted with --no-zero-init (the driver builds the model outside
deepspeed.zero.Init). Nothing is fitted.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from deepspeed_records import ran_ds_config  # noqa: E402

FORWARD = {"forward"}
OPTIMIZER = {"gpu_optimizer", "cpu_optimizer"}


def predicted_phases(dsplan, hardware, host_pipeline, sub, scratch, world=1, rank=0):
    cfg = os.path.join(scratch, "model.json")
    dsc = os.path.join(scratch, "ds_config.json")
    trace = os.path.join(scratch, "trace.json")
    with open(cfg, "w") as f:
        json.dump(sub["model_config"], f)
    ds = dict(sub["ds_config"])  # as DeepSpeed was given it (main passes ran_ds_config's)
    ds["dsplan"] = {"gradient_checkpointing": bool(sub.get("grad_checkpointing"))}
    with open(dsc, "w") as f:
        json.dump(ds, f)
    cmd = [dsplan, "simulate", "--model", cfg, "--gpus", str(world), "--ds-config", dsc, "--trace",
           trace, "--force", "--json"]
    if world > 1:
        # An emulated run (the harness's emulate_world_size): its own rank, under the fake
        # process group (no link crossed; all-gathers copied on the GPU).
        cmd += ["--rank", str(rank), "--fake-process-group"]
    if hardware:
        cmd += ["--hardware", hardware]
    if host_pipeline:
        cmd.append("--host-pipeline")
    if sub.get("stage") == 3:
        cmd.append("--no-zero-init")
    if sub.get("src_len"):
        cmd += ["--seq-len", str(sub["src_len"]), "--target-len", str(sub["tgt_len"])]
    elif sub.get("seq_len"):
        cmd += ["--seq-len", str(sub["seq_len"])]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return None, (p.stderr or p.stdout).strip().splitlines()[-1:]
    step = json.loads(p.stdout)["step"]["time_s"]
    ev = json.load(open(trace))
    ev = ev["traceEvents"] if isinstance(ev, dict) else ev
    spans = [e for e in ev if e.get("ph") == "X"]
    fwd_end = max((e["ts"] + e["dur"] for e in spans if e.get("cat") in FORWARD), default=0.0) / 1e6
    opt_start = min((e["ts"] for e in spans if e.get("cat") in OPTIMIZER), default=step * 1e6) / 1e6
    return {"fwd_s": fwd_end, "bwd_s": max(0.0, opt_start - fwd_end), "opt_s": max(0.0, step - opt_start),
            "step_s": step}, None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsplan", required=True)
    ap.add_argument("--hardware", default="")
    ap.add_argument("--host-pipeline", action="store_true")
    ap.add_argument("results", nargs="+")
    a = ap.parse_args()
    print(f"Predicted with `dsplan simulate{' --host-pipeline' if a.host_pipeline else ''}"
          f"{' --hardware ' + a.hardware if a.hardware else ''}`; ms, measured median of steps 3..n "
          "(last step) / predicted\n")
    print("| case | forward | backward | step() | whole step |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as scratch:
        for path in a.results:
            for line in open(path):
                if not line.strip():
                    continue
                group = json.loads(line)
                world = int(group.get("emulated_world_size") or 1)
                rank = int(group.get("emulated_rank") or 0)
                for s in group.get("subs", []):
                    s = dict(s, ds_config=ran_ds_config(group, s))
                    per = s.get("per_step") or []
                    if (s.get("status") != "ok" or not s.get("phase_sync") or len(per) < 3
                            or int(s["ds_config"].get("gradient_accumulation_steps", 1)) != 1):
                        continue
                    pred, err = predicted_phases(a.dsplan, a.hardware, a.host_pipeline, s, scratch,
                                                 world, rank)
                    if pred is None:
                        print(f"| {s['sub_id']} | dsplan failed: {' '.join(err)} | | | |")
                        continue
                    cells = []
                    for k in ("fwd_s", "bwd_s", "opt_s"):
                        med = statistics.median(p[k] for p in per[2:])
                        cells.append(f"{1e3 * med:.0f} ({1e3 * per[-1][k]:.0f}) / {1e3 * pred[k]:.0f}")
                    steps = s.get("step_times_s") or []
                    whole = statistics.median(steps[2:]) if len(steps) >= 3 else float("nan")
                    last = steps[-1] if steps else float("nan")
                    cells.append(f"{1e3 * whole:.0f} ({1e3 * last:.0f}) / {1e3 * pred['step_s']:.0f}")
                    print(f"| {s['sub_id']} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    sys.exit(main())
