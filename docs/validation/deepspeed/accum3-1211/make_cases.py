#!/usr/bin/env python3
"""Cases of accum3-1211 (see README.md): accum-1210's method (the top plan of `dsplan --model M
--gpus 1 --global-batch G [pins]`, as emitted, with dsplan's prediction) for the accumulation
paths no run has taken yet: ZeRO-3 with the optimizer or the parameters on the CPU, and
checkpointing with accumulation at stages 2 and 3. Ids start with accum3_.
usage: make_cases.py BUILD/dsplan HARDWARE > cases.jsonl   (plans-dsplan-HARDWARE.jsonl is written beside)"""
import importlib.util
import os

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("accum2", os.path.join(HERE, "..", "accum2-1211", "make_cases.py"))
accum2 = importlib.util.module_from_spec(spec)
spec.loader.exec_module(accum2)

CHOICES = [
    ("qwen2-0.5b", 128, ["--offload-optimizer", "cpu", "--stage", "3"]),  # ZeRO-3's per-micro-step host copies
    ("llama-3.2-1b", 64, ["--stage", "3", "--gradient-checkpointing"]),   # stage 3, recompute, accumulation
    ("gpt2-large", 64, ["--stage", "2", "--gradient-checkpointing"]),     # stage 2, recompute, accumulation
    ("pythia-1.4b", 64, ["--offload-optimizer", "cpu", "--offload-param", "cpu"]),  # both offloads
]

if __name__ == "__main__":
    accum2.main(CHOICES, "accum3_", HERE)
