#!/usr/bin/env python3
"""Puts dsplan's predicted forward + backward time of one block and of the rest of the model
(embedding, head, loss) beside step_kernels.py's measurement of the same shapes.

usage: compare_step_kernels.py STEP_KERNELS.json [--dsplan build/dsplan] [--hardware P]
Per case: the 2- and 4-block configs are simulated (stage 1, micro-batch of the case, no
checkpointing) with --trace; the compute stream's fwd/bwd/loss tasks are summed.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


from hf_models import load_catalog, with_layers  # noqa: E402


def predicted(dsplan, hardware, cfg, mb, attn, seq, src, tgt, tmp):
    cpath = os.path.join(tmp, "config.json")
    dpath = os.path.join(tmp, "ds.json")
    tpath = os.path.join(tmp, "trace.json")
    json.dump(cfg, open(cpath, "w"))
    json.dump({"train_micro_batch_size_per_gpu": mb, "gradient_accumulation_steps": 1,
               "bf16": {"enabled": True}, "optimizer": {"type": "AdamW"},
               "zero_optimization": {"stage": 1}}, open(dpath, "w"))
    s2s = cfg.get("model_type") == "t5"
    cmd = [dsplan, "simulate", "--model", cpath, "--ds-config", dpath, "--trace", tpath, "--force",
           "--quiet", "--attention", attn or "auto"]
    if hardware:
        cmd += ["--hardware", hardware]
    cmd += ["--seq-len", str(src if s2s else seq)]
    if s2s:
        cmd += ["--target-len", str(tgt)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    t = json.load(open(tpath))
    ev = t["traceEvents"] if isinstance(t, dict) else t
    total = 0.0
    for e in ev:
        if e.get("ph") == "X" and e.get("tid") == 0 and e["name"].split(" ")[0] in ("fwd", "bwd"):
            total += e["dur"] / 1e6
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("step_kernels")
    ap.add_argument("--dsplan", default=os.path.join(HERE, "..", "..", "build", "dsplan"))
    ap.add_argument("--hardware", default=None)
    ap.add_argument("--catalog", default=os.path.join(HERE, "..", "..", "models"))
    args = ap.parse_args()
    d = json.load(open(args.step_kernels))
    print(f"{'case':22s} {'block ms: meas wall/kern pred err':36s} {'rest ms: meas wall/kern pred err':36s}")
    errs = []
    with tempfile.TemporaryDirectory() as tmp:
        for case, r in d["cases"].items():
            cfg = load_catalog(args.catalog, r["model"])
            p = {L: predicted(args.dsplan, args.hardware, with_layers(cfg, L), r["mb"], r["attn"],
                              d["seq"], d["src"], d["tgt"], tmp) for L in (2, 4)}
            w = {L: r[f"L{L}"]["wall_fwd_s"] + r[f"L{L}"]["wall_bwd_s"] for L in (2, 4)}
            k = {L: r[f"L{L}"]["kernel_s"] for L in (2, 4)}
            pb, wb, kb = (p[4] - p[2]) / 2, (w[4] - w[2]) / 2, (k[4] - k[2]) / 2
            pr, wr, kr = p[2] - 2 * pb, w[2] - 2 * wb, k[2] - 2 * kb
            e4 = (p[4] - w[4]) / w[4]
            errs.append((case, e4))
            print(f"{case:22s} {wb*1e3:7.2f}/{kb*1e3:7.2f} {pb*1e3:7.2f} {100*(pb-wb)/wb:+6.1f}%      "
                  f"{wr*1e3:7.2f}/{kr*1e3:7.2f} {pr*1e3:7.2f} {100*(pr-wr)/wr:+6.1f}%   4-block step {100*e4:+.1f}%")
    print("mean |error| of the 4-block fwd+bwd:", round(100 * sum(abs(e) for _, e in errs) / len(errs), 1), "%")


if __name__ == "__main__":
    main()
