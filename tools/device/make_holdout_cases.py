#!/usr/bin/env python3
"""Writes a hold-out set of real-DeepSpeed cases (models and configurations never run before)
for tools/device/dsbench/runner.py, to test dsplan's step-time and memory model out of sample.
No dsplan prediction is stored: `dsplan accuracy --calibration` computes them from the records.

usage: make_holdout_cases.py OUT.jsonl
"""
import json
import os
import sys

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
CATALOG = os.path.join(HERE, "..", "..", "models")

# (model, [(stage, micro-batch, checkpointing), ...]) -- one process per model, the subs in order
# (memory is usable only for subs before the first stage-3 engine; time for all).
GROUPS = [
    ("qwen2-0.5b", [(2, 8, False), (3, 8, True)]),
    ("opt-1.3b", [(1, 12, False), (3, 12, True)]),
    ("bloom-1b7", [(2, 6, False), (3, 6, True)]),
    ("gpt2-medium", [(2, 16, False), (3, 16, False)]),
    ("phi-1_5", [(1, 8, False), (3, 8, True)]),
    ("flan-t5-large", [(2, 16, False), (3, 16, True)]),
    ("llama-3.2-1b", [(3, 8, False)]),
    ("gemma-2b", [(2, 4, True)]),
]


def ds_config(stage, mb):
    z = {"stage": stage, "overlap_comm": True, "contiguous_gradients": True,
         "reduce_bucket_size": 200000000}
    if stage == 3:
        z.update({"stage3_param_persistence_threshold": 100000, "stage3_prefetch_bucket_size": 50000000,
                  "stage3_max_live_parameters": 1000000000, "stage3_max_reuse_distance": 1000000000})
    return {"train_micro_batch_size_per_gpu": mb, "gradient_accumulation_steps": 1, "train_batch_size": mb,
            "bf16": {"enabled": True}, "gradient_clipping": 1.0, "optimizer": {"type": "AdamW"},
            "zero_optimization": z, "steps_per_print": 1000000, "wall_clock_breakdown": False}


def main():
    out = sys.argv[1]
    with open(out, "w") as f:
        for model, subs in GROUPS:
            cfg = yaml.safe_load(open(os.path.join(CATALOG, model + ".yaml")))["config"]
            t5 = cfg.get("model_type") == "t5"
            lens = {"src_len": 512, "tgt_len": 128} if t5 else {"seq_len": 1024}
            group = {"id": "holdout_" + model, "model": model, "model_config": cfg, "plan_rank": None,
                     "variant": "hold-out", "stage": None, "mb": subs[0][1], "grad_checkpointing": False,
                     "offload_optimizer": "none", "offload_param": "none", "ds_config": ds_config(*subs[0][:2]),
                     "pred": None, "n_steps": 5, "est_s": 45 + 15 * len(subs), "subs": [], **lens}
            for stage, mb, gc in subs:
                sid = f"{model}_s{stage}_mb{mb}" + ("_gc" if gc else "")
                group["subs"].append({"sub_id": sid, "mb": mb, "stage": stage, "grad_checkpointing": gc,
                                      "offload_optimizer": "none", "offload_param": "none",
                                      "ds_config": ds_config(stage, mb), "model_config": cfg, "pred": None,
                                      "variant": "hold-out", "n_steps": 5, **lens})
            f.write(json.dumps(group) + "\n")


if __name__ == "__main__":
    main()
