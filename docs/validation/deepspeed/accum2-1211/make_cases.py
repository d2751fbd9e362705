#!/usr/bin/env python3
"""Cases of accum2-1211 (see README.md): accum-1210's method (the top plan of `dsplan --model M
--gpus 1 --global-batch G [pins]`, as emitted, with dsplan's prediction) for choices that take
the accumulation paths session 35 priced: the optimizer on the CPU at stages 1 and 2 (the 16-bit
host accumulator's round trips) and gradients that accumulate in `.grad` (stage 1,
FP16_Optimizer: autograd's in-place add). Ids start with accum2_.
usage: make_cases.py BUILD/dsplan HARDWARE > cases.jsonl   (plans-dsplan-HARDWARE.jsonl is written beside)"""
import contextlib
import importlib.util
import io
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("accum1210", os.path.join(HERE, "..", "accum-1210", "make_cases.py"))
base = importlib.util.module_from_spec(spec)
spec.loader.exec_module(base)

CHOICES = [
    ("llama-3.2-1b", 64, ["--offload-optimizer", "cpu"]),                # the free choice: stage 1 since session 35
    ("qwen2-0.5b", 128, ["--offload-optimizer", "cpu", "--stage", "2"]),  # stage 2's round trips, another family
    ("gpt2-xl", 64, ["--offload-optimizer", "cpu", "--stage", "2"]),      # stage 2's round trips, 48 blocks
    ("phi-1_5", 64, ["--stage", "1"]),                                    # in-place add, another family
    ("opt-1.3b", 64, ["--stage", "0", "--precision", "fp16"]),            # FP16_Optimizer's in-place add
    ("t5-base", 256, ["--offload-optimizer", "cpu", "--stage", "1"]),     # encoder-decoder, stage 1 on the CPU
]

def main(choices, prefix, here):
    """Writes the top plans of |choices| as cases with ids prefix + tag to stdout (and the
    planner answers to |here|/plans-dsplan-HARDWARE.jsonl): accum-1210's main, renamed."""
    base.HERE = here
    base.CHOICES = choices
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        base.main()
    seen_cpu_adam = False
    for line in buf.getvalue().splitlines():
        if not line.strip():
            continue
        d = json.loads(line)
        d["id"] = d["id"].replace("accum_", prefix, 1)
        for s in d["subs"]:
            s["sub_id"] = s["sub_id"].replace("accum_", prefix, 1)
        # CPU Adam builds just in time once per call (about 40 s); the later offload cases reuse it.
        if d["offload_optimizer"] == "cpu":
            if seen_cpu_adam:
                d["est_s"] -= 60
            seen_cpu_adam = True
        print(json.dumps(d))


if __name__ == "__main__":
    main(CHOICES, "accum2_", HERE)
