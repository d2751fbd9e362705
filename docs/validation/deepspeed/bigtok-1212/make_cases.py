#!/usr/bin/env python3
"""Cases of bigtok-1212 (see README.md): the top plan of `dsplan --model M --gpus 1 [shape]`, as
emitted, with dsplan's prediction, for small models whose planned micro-batches put 30-130 k
tokens through each Linear: above the 16,384 tokens where the profiles' GEMM tables stop (the
affine extension of session 36, docs/simulator.md "GEMMs beyond the measured token counts").
Two of the models are not in the catalog (pythia-160m and pythia-410m, given by their public
config.json, beside this file). Ids start with bigtok_.
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

# (name, catalog model or config file beside this script, sequence arguments, harness lengths)
CHOICES = [
    ("pythia-160m", "pythia-160m.json", ["--seq-len", "1024"], {"seq_len": 1024}),
    ("pythia-410m", "pythia-410m.json", ["--seq-len", "1024"], {"seq_len": 1024}),
    ("gpt2", "gpt2", ["--seq-len", "512"], {"seq_len": 512}),
    ("bert-large-uncased", "bert-large-uncased", ["--seq-len", "256"], {"seq_len": 256}),
    ("opt-125m", "opt-125m", ["--seq-len", "2048"], {"seq_len": 2048}),
    ("flan-t5-base", "flan-t5-base", ["--seq-len", "256", "--target-len", "64"], {"src_len": 256, "tgt_len": 64}),
]


def main():
    dsplan, hw = sys.argv[1], sys.argv[2]
    a = SimpleNamespace(dsplan=os.path.abspath(dsplan), gpus=1, hardware=hw)
    env = dict(os.environ, DSPLAN_DATA_DIR=ROOT)
    os.environ["DSPLAN_DATA_DIR"] = ROOT
    plans = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, model, seq, sh in CHOICES:
            if model.endswith(".json"):
                model = os.path.join(HERE, model)
                cfg = json.load(open(model))
            else:
                cfg = G.catalog(os.path.join(ROOT, "models"), model)
            cmd = [a.dsplan, "--model", model, "--gpus", "1"] + seq + ["--json", "--no-emit"] + G.hw_args(a)
            p = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, env=env, timeout=600)
            if p.returncode != 0:
                raise SystemExit(f"{' '.join(cmd)}: rc {p.returncode}: {p.stderr.strip()[:300]}")
            j = json.loads(p.stdout)
            top = sorted(j["recommendations"], key=lambda r: r.get("rank", 99))[0]
            tag = f"{name}_" + "_".join(x.lstrip("-").replace("seq-len", "s").replace("target-len", "t") for x in seq)
            case, record = G.top_plan_case(a, model, (name, cfg), top, seq, sh, f"bigtok_{tag}", "top plan", tmp)
            rel = os.path.relpath(model, ROOT) if os.path.isabs(model) else model
            plans.append({"model": rel, **record, "command": " ".join(["dsplan", "--model", rel] + cmd[3:])})
            print(json.dumps(case))
    G.write_jsonl(os.path.join(HERE, f"plans-dsplan-{hw}.jsonl"), plans)


if __name__ == "__main__":
    main()
