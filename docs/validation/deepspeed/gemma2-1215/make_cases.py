#!/usr/bin/env python3
"""Cases of gemma2-1215 (see README.md): the top plan of `dsplan --model M --gpus 1 [pins]`, as
emitted, with dsplan's prediction, for Gemma 2 (a family no run of the record has, whose host
time dsplan has never measured: gemma-2-2b's config.json beside this file). Ids start with
gemma2_. A choice with attn_implementation in its harness lengths builds the model with it.
usage: make_cases.py BUILD/dsplan HARDWARE > cases.jsonl   (plans-dsplan-HARDWARE.jsonl is written beside)"""
import json
import os
import subprocess
import sys
import tempfile
from types import SimpleNamespace

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "device"))
import make_gpu_cases as G  # noqa: E402

# (name, config file beside this script, sequence arguments, harness lengths, planner pins)
CHOICES = [
    ("gemma-2-2b", "gemma-2-2b.json", ["--seq-len", "1024"], {"seq_len": 1024}, []),
    # Past the 4096-token window: every other layer reads the sliding mask and repeated K/V.
    ("gemma-2-2b", "gemma-2-2b.json", ["--seq-len", "8192"], {"seq_len": 8192}, []),
    # Eager attention, where the scores are soft-capped too (SDPA, the default, skips it).
    ("gemma-2-2b", "gemma-2-2b.json", ["--seq-len", "1024", "--attention", "eager"],
     {"seq_len": 1024, "attn_implementation": "eager"}, []),
]


def main():
    dsplan, hw = sys.argv[1], sys.argv[2]
    a = SimpleNamespace(dsplan=os.path.abspath(dsplan), gpus=1, hardware=hw)
    env = dict(os.environ, DSPLAN_DATA_DIR=ROOT)
    os.environ["DSPLAN_DATA_DIR"] = ROOT
    plans = []
    seen = set()
    with tempfile.TemporaryDirectory() as tmp:
        for name, model, seq, sh, pins in CHOICES:
            if model.endswith(".json"):
                model = os.path.join(HERE, model)
                cfg = json.load(open(model))
            else:
                cfg = G.catalog(os.path.join(ROOT, "models"), model)
            cmd = [a.dsplan, "--model", model, "--gpus", "1"] + seq + pins + ["--json", "--no-emit"] + G.hw_args(a)
            p = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, env=env, timeout=600)
            if p.returncode != 0:
                raise SystemExit(f"{' '.join(cmd)}: rc {p.returncode}: {p.stderr.strip()[:300]}")
            j = json.loads(p.stdout)
            top = sorted(j["recommendations"], key=lambda r: r.get("rank", 99))[0]
            tag = f"{name}_" + "_".join(x.lstrip("-").replace("seq-len", "s").replace("target-len", "t").replace("gradient-checkpointing", "gc") for x in seq + pins)
            case, record = G.top_plan_case(a, model, (name, cfg), top, seq, sh, f"gemma2_{tag}", "top plan", tmp)
            rel = os.path.relpath(model, ROOT) if os.path.isabs(model) else model
            # A pinned choice whose plan is one already listed (the top plan had it) is not run twice.
            key = (name, json.dumps(sh, sort_keys=True), case["mb"], case["grad_checkpointing"],
                   json.dumps(case["ds_config"], sort_keys=True))
            if key in seen:
                continue
            seen.add(key)
            plans.append({"model": rel, **record, "command": " ".join(["dsplan", "--model", rel] + cmd[3:])})
            print(json.dumps(case))
    G.write_jsonl(os.path.join(HERE, f"plans-dsplan-{hw}.jsonl"), plans)


if __name__ == "__main__":
    main()
