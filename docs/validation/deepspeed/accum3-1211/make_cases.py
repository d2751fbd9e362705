#!/usr/bin/env python3
"""Cases of accum3-1211 (see README.md): accum-1210's method (the top plan of `dsplan --model M
--gpus 1 --global-batch G [pins]`, as emitted, with dsplan's prediction) for the accumulation
paths no run has taken yet: ZeRO-3 with the optimizer or the parameters on the CPU, and
checkpointing with accumulation at stages 2 and 3. Ids start with accum3_.
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

base.HERE = HERE
base.CHOICES = [
    ("qwen2-0.5b", 128, ["--offload-optimizer", "cpu", "--stage", "3"]),  # ZeRO-3's per-micro-step host copies
    ("llama-3.2-1b", 64, ["--stage", "3", "--gradient-checkpointing"]),   # stage 3, recompute, accumulation
    ("gpt2-large", 64, ["--stage", "2", "--gradient-checkpointing"]),     # stage 2, recompute, accumulation
    ("pythia-1.4b", 64, ["--offload-optimizer", "cpu", "--offload-param", "cpu"]),  # both offloads
]

if __name__ == "__main__":
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        base.main()
    seen_cpu_adam = False
    for line in buf.getvalue().splitlines():
        if not line.strip():
            continue
        d = json.loads(line)
        d["id"] = d["id"].replace("accum_", "accum3_", 1)
        for s in d["subs"]:
            s["sub_id"] = s["sub_id"].replace("accum_", "accum3_", 1)
        # CPU Adam builds just in time once per call (about 40 s); the later offload cases reuse it.
        if d["offload_optimizer"] == "cpu":
            if seen_cpu_adam:
                d["est_s"] -= 60
            seen_cpu_adam = True
        print(json.dumps(d))
