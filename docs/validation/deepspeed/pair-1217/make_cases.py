#!/usr/bin/env python3
"""Cases of pair-1217 (see README.md): each session-40 new-family run that missed most, with a
control of a family dsplan has measured, run alternately in one process (new, control, new,
control) with the same ds_config, so that both halves of a pair see the same host. The new
family's ds_config is the one its registered case ran (read from that set's H100 list); the
control takes it unchanged except where noted. Ids start with pair_.
usage: make_cases.py BUILD/dsplan HARDWARE > cases.jsonl"""
import copy
import json
import os
import sys
import tempfile
from types import SimpleNamespace

HERE = os.path.dirname(os.path.abspath(__file__))
DS = os.path.normpath(os.path.join(HERE, ".."))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "device"))
import make_gpu_cases as G  # noqa: E402

# (pair tag, registered list, case id there, new model (config file in that set or catalog name),
#  control (catalog name), micro-batch for both and tokens per sample (None: the registered ones))
PAIRS = [
    # ZeRO-3 without checkpointing: Qwen3's 11 parameter tensors per block against Llama's 9.
    ("z3", "qwen3-1215/cases-qwen3-h100.jsonl", "qwen3_qwen3-1.7b_s_1024_stage_3_no-offload",
     "qwen3-1.7b", "llama-3.2-1b", None, None),
    # Stage 1, head size 256 both (Gemma 3's per-head norms and 5:1 window against Gemma's plain
    # block): the ds_config of gemma-3-1b's 4096-token plan, at 1024 tokens and micro-batch 1
    # (gemma-2b's 2.5 B parameters' states at stage 1 and its 256,000-token loss leave no room
    # for more on an H100 without checkpointing). Predicted host-bound share 0.46-0.76: the pair
    # that shows the host most.
    ("s1", "gemma3-1216/cases-gemma3-h100.jsonl", "gemma3_gemma-3-1b_s_4096",
     "gemma3-1216/gemma-3-1b.json", "gemma-2b", 1, 1024),
    # ZeRO-3 with checkpointing: Gemma 2's four norms against Gemma's two.
    ("z3gc", "gemma2-1215/cases-gemma2-h100.jsonl", "gemma2_gemma-2-2b_s_1024",
     "gemma-2-2b", "gemma-2b", None, None),
    # ZeRO-3 with checkpointing: the experts' routing against a dense block.
    ("moe", "moe-1216/cases-moe-h100.jsonl", "moe_qwen3-30b-a3b-4l_s_1024",
     "moe-1216/qwen3-30b-a3b-4l.json", "llama-3.2-1b", None, None),
]


def registered(path, case_id):
    with open(os.path.join(DS, path)) as f:
        for line in f:
            c = json.loads(line)
            if c["id"] == case_id:
                return c
    raise SystemExit(f"{path}: no case {case_id}")


def main(argv):
    if len(argv) != 2:
        raise SystemExit("usage: make_cases.py BUILD/dsplan HARDWARE > cases.jsonl")
    a = SimpleNamespace(dsplan=os.path.abspath(argv[0]), gpus=1, hardware=argv[1])
    os.environ["DSPLAN_DATA_DIR"] = ROOT
    with tempfile.TemporaryDirectory() as tmp:
        for tag, path, case_id, new, control, mb, seq_len in PAIRS:
            reg = registered(path, case_id)
            dsc = copy.deepcopy(reg["ds_config"])
            if mb:
                dsc = G.with_mb(dsc, mb)
            mb = int(dsc["train_micro_batch_size_per_gpu"])
            gck = bool(reg["grad_checkpointing"])
            sh = {"seq_len": int(seq_len or reg["seq_len"])}
            seq = ["--seq-len", str(sh["seq_len"])]
            members = []
            for name in (new, control):
                if name.endswith(".json"):
                    model = os.path.join(DS, name)
                    cfg = json.load(open(model))
                    name = os.path.splitext(os.path.basename(name))[0]
                else:
                    model, cfg = name, G.catalog(os.path.join(ROOT, "models"), name)
                members.append((name, model, cfg, G.simulate(a, model, dsc, tmp, seq, gck)))
            subs = []
            for rep in (1, 2):
                for name, model, cfg, pred in members:
                    subs.append(dict(sub_id=f"pair_{tag}_{name}_r{rep}", mb=mb, stage=reg["stage"],
                                     grad_checkpointing=gck, offload_optimizer="none",
                                     offload_param="none", ds_config=dsc, model_config=cfg,
                                     pred=pred, variant=f"pair {tag}: {members[0][0]} / {members[1][0]}",
                                     n_steps=8, **sh))
            case = dict(id=f"pair_{tag}", model=f"{members[0][0]}+{members[1][0]}",
                        model_config=members[0][2], plan_rank=None, variant=subs[0]["variant"],
                        stage=reg["stage"], mb=mb, grad_checkpointing=gck, offload_optimizer="none",
                        offload_param="none", ds_config=dsc, pred=[m[3] for m in members],
                        needs_cpu_adam=False, n_steps=8,
                        est_s=4 * 25 + 16 * max((m[3]["step_s"] or 1) for m in members),
                        subs=subs, **sh)
            print(json.dumps(case))


if __name__ == "__main__":
    main(sys.argv[1:])
