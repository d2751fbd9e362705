#!/usr/bin/env python3
"""Cases of qwen3-1215 (see README.md): the top plan of `dsplan --model M --gpus 1 [pins]`, as
emitted, with dsplan's prediction, for Qwen3 models (a family no run of the record has, whose
host time dsplan has never measured: config.json files beside this file, the public configs'
architecture keys). Ids start with qwen3_. make_gpu_cases.top_plan_list does the work.
usage: make_cases.py BUILD/dsplan HARDWARE > cases.jsonl   (plans-dsplan-HARDWARE.jsonl is written beside)"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "..", "tools", "device"))
import make_gpu_cases as G  # noqa: E402

# (name, config file beside this script, sequence arguments, harness lengths, planner pins)
CHOICES = [
    ("qwen3-0.6b", "qwen3-0.6b.json", ["--seq-len", "1024"], {"seq_len": 1024}, []),
    ("qwen3-1.7b", "qwen3-1.7b.json", ["--seq-len", "1024"], {"seq_len": 1024}, []),
    ("qwen3-4b", "qwen3-4b.json", ["--seq-len", "1024"], {"seq_len": 1024}, []),
    # ZeRO-3's hooks on Qwen3's module tree (two more modules per attention: q_norm, k_norm).
    ("qwen3-1.7b", "qwen3-1.7b.json", ["--seq-len", "1024"], {"seq_len": 1024}, ["--stage", "3", "--no-offload"]),
    # Recompute through the per-head norms.
    ("qwen3-0.6b", "qwen3-0.6b.json", ["--seq-len", "1024"], {"seq_len": 1024}, ["--gradient-checkpointing"]),
]


if __name__ == "__main__":
    G.top_plan_list(HERE, "qwen3", CHOICES, sys.argv[1:])
