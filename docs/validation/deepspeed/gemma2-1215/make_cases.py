#!/usr/bin/env python3
"""Cases of gemma2-1215 (see README.md): the top plan of `dsplan --model M --gpus 1 [pins]`, as
emitted, with dsplan's prediction, for Gemma 2 (a family no run of the record has, whose host
time dsplan has never measured: gemma-2-2b's config.json beside this file). Ids start with
gemma2_. A choice with attn_implementation in its harness lengths builds the model with it.
make_gpu_cases.top_plan_list does the work.
usage: make_cases.py BUILD/dsplan HARDWARE > cases.jsonl   (plans-dsplan-HARDWARE.jsonl is written beside)"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "..", "tools", "device"))
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


if __name__ == "__main__":
    G.top_plan_list(HERE, "gemma2", CHOICES, sys.argv[1:])
