#!/usr/bin/env python3
"""Cases of moe-1216 (see README.md): the top plan of `dsplan --model M --gpus 1 [pins]`, as
emitted, with dsplan's prediction, for the mixture-of-experts trace (Mixtral's and Qwen3-MoE's
grouped_mm experts, a path no run of the record has taken): depth-cut configs of
Qwen3-30B-A3B (4 of 48 layers) and Mixtral-8x7B (2 of 32) beside this script, so that one GPU
holds them. Ids start with moe_. make_gpu_cases.top_plan_list does the work.
usage: make_cases.py BUILD/dsplan HARDWARE > cases.jsonl   (plans-dsplan-HARDWARE.jsonl is written beside)"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "..", "tools", "device"))
import make_gpu_cases as G  # noqa: E402

# (name, config file beside this script, sequence arguments, harness lengths, planner pins)
CHOICES = [
    ("qwen3-30b-a3b-4l", "qwen3-30b-a3b-4l.json", ["--seq-len", "1024"], {"seq_len": 1024}, []),
    # The load-balancing loss (output_router_logits): a softmax over every sparse layer's router
    # rows and int64 one-hot masks of the chosen experts.
    ("qwen3-30b-a3b-4l-aux", "qwen3-30b-a3b-4l-aux.json", ["--seq-len", "1024"], {"seq_len": 1024}, []),
    ("mixtral-8x7b-2l", "mixtral-8x7b-2l.json", ["--seq-len", "1024"], {"seq_len": 1024}, []),
]


if __name__ == "__main__":
    G.top_plan_list(HERE, "moe", CHOICES, sys.argv[1:])
