#!/usr/bin/env python3
"""Cases of gemma3-1216 (see README.md): the top plan of `dsplan --model M --gpus 1 [pins]`, as
emitted, with dsplan's prediction, for Gemma 3's language model (model_type gemma3_text: a family
no run of the record has, whose host time dsplan has never measured; the config.json files
beside this script). Ids start with gemma3_. make_gpu_cases.top_plan_list does the work.
usage: make_cases.py BUILD/dsplan HARDWARE > cases.jsonl   (plans-dsplan-HARDWARE.jsonl is written beside)"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "..", "tools", "device"))
import make_gpu_cases as G  # noqa: E402

# (name, config file beside this script, sequence arguments, harness lengths, planner pins)
CHOICES = [
    ("gemma-3-270m", "gemma-3-270m.json", ["--seq-len", "1024"], {"seq_len": 1024}, []),
    ("gemma-3-1b", "gemma-3-1b.json", ["--seq-len", "1024"], {"seq_len": 1024}, []),
    # Past the 512-token window on both: five layers of six read the sliding mask and K/V
    # repeated to every query head.
    ("gemma-3-1b", "gemma-3-1b.json", ["--seq-len", "4096"], {"seq_len": 4096}, []),
    # Checkpointed: the recompute runs through the per-head norms.
    ("gemma-3-1b", "gemma-3-1b.json", ["--seq-len", "1024"], {"seq_len": 1024}, ["--gradient-checkpointing"]),
]


if __name__ == "__main__":
    G.top_plan_list(HERE, "gemma3", CHOICES, sys.argv[1:])
