#!/usr/bin/env python3
"""Counts parameters of every catalog model with HuggingFace transformers, for tests.

Builds each model from its catalog config on the meta device (no memory, no weights) and prints
JSON {name: sum(p.numel() for p in model.parameters())}. Run where transformers is installed
(the device machine has transformers 5.17 at /opt/torch/.venv):
    python3 tools/hf_param_counts.py models/ > counts.json
"""
import glob
import json
import os
import sys

import torch
import transformers
import yaml

CLASSES = {"t5": transformers.T5ForConditionalGeneration, "bert": transformers.BertForMaskedLM}


def count(cfg_dict):
    cfg = transformers.AutoConfig.for_model(**cfg_dict)
    cls = CLASSES.get(cfg_dict["model_type"], transformers.AutoModelForCausalLM)
    with torch.device("meta"):
        if cls is transformers.AutoModelForCausalLM:
            model = cls.from_config(cfg)
        else:
            model = cls(cfg)
    return sum(p.numel() for p in model.parameters())


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else "models"
    out = {"transformers": transformers.__version__, "torch": torch.__version__, "counts": {}}
    for path in sorted(glob.glob(os.path.join(folder, "*.yaml"))):
        entry = yaml.safe_load(open(path))
        name = os.path.splitext(os.path.basename(path))[0]
        try:
            out["counts"][name] = count(dict(entry["config"]))
        except Exception as e:  # report, keep going
            out["counts"][name] = f"error: {type(e).__name__}: {e}"
    json.dump(out, sys.stdout, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
