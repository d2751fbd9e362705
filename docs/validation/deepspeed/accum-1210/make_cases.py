#!/usr/bin/env python3
"""Cases of accum-1210 (see README.md): the top plan of `dsplan --model M --gpus 1
--global-batch G [pins]` for nine choices whose plan accumulates gradients over 2-8 micro-steps,
each as emitted, with dsplan's prediction for it. No record before this set had
gradient_accumulation_steps above 1.
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

# (model, global batch, pins): the stage is pinned only where the free choice would repeat a
# stage the set already has, so that each accumulation path DeepSpeed has runs once.
CHOICES = [
    ("llama-3.2-1b", 64, []),                            # stage 1: gradients accumulate in .grad
    ("qwen2-1.5b", 64, []),                              # stage 1 at 114 GiB of 140
    ("gpt2-xl", 32, ["--stage", "2"]),                   # stage 2: reduced every micro-step
    ("pythia-1.4b", 64, ["--stage", "0"]),               # BF16_Optimizer: fp32 accumulation per micro-step
    ("t5-large", 64, []),                                # encoder-decoder
    ("opt-1.3b", 64, ["--stage", "3"]),                  # stage 3: reduce-scatter every micro-step
    ("gemma-2b", 32, []),                                # 8 micro-steps, 33 GiB allocator overhead predicted
    ("bloom-1b7", 64, []),                               # eager attention, 8 micro-steps
    ("llama-3.2-1b", 64, ["--offload-optimizer", "cpu"]),  # CPU Adam after 4 micro-steps
]


def main():
    dsplan, hw = sys.argv[1], sys.argv[2]
    a = SimpleNamespace(dsplan=os.path.abspath(dsplan), gpus=1, hardware=hw)
    env = dict(os.environ, DSPLAN_DATA_DIR=ROOT)
    plans = []
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["DSPLAN_DATA_DIR"] = ROOT
        for m, gb0, pins in CHOICES:
            cfg = G.catalog(os.path.join(ROOT, "models"), m)
            seq, sh = G.seq_args(cfg)
            # If the plan for G does not accumulate (its micro-batch holds G samples on this
            # card), the global batch doubles until it does (at most twice).
            for gb in (gb0, 2 * gb0, 4 * gb0):
                cmd = [a.dsplan, "--model", m, "--gpus", "1", "--global-batch", str(gb)] + pins + seq + \
                      ["--json", "--no-emit"] + G.hw_args(a)
                p = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, env=env, timeout=600)
                if p.returncode != 0:
                    raise SystemExit(f"{' '.join(cmd)}: rc {p.returncode}: {p.stderr.strip()[:300]}")
                j = json.loads(p.stdout)
                top = sorted(j["recommendations"], key=lambda r: r.get("rank", 99))[0]
                pl, dsc = top["plan"], top["ds_config"]
                ga = int(dsc.get("gradient_accumulation_steps", 1))
                if ga > 1:
                    break
            assert ga > 1, (m, gb, pins, ga)
            tag = f"{m}_gb{gb0}" + "".join("_" + x.lstrip("-").replace("offload-optimizer", "opt") for x in pins)
            variant = f"top plan for global batch {gb}" + (" " + " ".join(pins) if pins else "")
            case, record = G.top_plan_case(a, m, (m, cfg), top, seq, sh, f"accum_{tag}", variant, tmp)
            plans.append({"model": m, "global_batch": gb, "pins": pins, **record,
                          "command": " ".join(["dsplan"] + cmd[1:])})
            print(json.dumps(case))
    G.write_jsonl(os.path.join(HERE, f"plans-dsplan-{hw}.jsonl"), plans)


if __name__ == "__main__":
    main()
