#!/usr/bin/env python3
"""Cases of phi3-1215 (see README.md): the top plan of `dsplan --model M --gpus 1 [pins]`, as
emitted, with dsplan's prediction, for Phi-3 models (a family no run of the record has, whose
host time dsplan has never measured: config.json files beside this file, the public configs'
architecture keys). Ids start with phi3_. make_gpu_cases.top_plan_list does the work.
usage: make_cases.py BUILD/dsplan HARDWARE > cases.jsonl   (plans-dsplan-HARDWARE.jsonl is written beside)"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "..", "tools", "device"))
import make_gpu_cases as G  # noqa: E402

# (name, config file beside this script, sequence arguments, harness lengths, planner pins)
CHOICES = [
    ("phi-3-mini-4k", "phi-3-mini-4k.json", ["--seq-len", "1024"], {"seq_len": 1024}, []),
    ("phi-4-mini", "phi-4-mini.json", ["--seq-len", "1024"], {"seq_len": 1024}, []),
    # Longer than Phi-3-mini's sliding window (2047): transformers builds the mask, SDPA reads it.
    ("phi-3-mini-4k", "phi-3-mini-4k.json", ["--seq-len", "4096"], {"seq_len": 4096}, []),
    # Recompute through the fused projections.
    ("phi-4-mini", "phi-4-mini.json", ["--seq-len", "1024"], {"seq_len": 1024}, ["--gradient-checkpointing"]),
]


if __name__ == "__main__":
    G.top_plan_list(HERE, "phi3", CHOICES, sys.argv[1:])
