#!/usr/bin/env python3
"""Cases of window-1217 (see README.md): a 4-layer cut of Mistral-7B v0.1 (sliding window 4096)
at 4095 and 4096 tokens, alternately, on one engine (stage 1, micro-batch 2), with dsplan's
prediction for each. transformers 5.17 skips the SDPA mask only while the sequence is shorter
than the window, so at 4096 tokens every layer gets a mask, K/V repeated to every query head and
the non-causal kernel; at 4095 none. Ids start with window_.
usage: make_cases.py BUILD/dsplan HARDWARE > cases.jsonl"""
import json
import os
import sys
import tempfile
from types import SimpleNamespace

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "device"))
import make_gpu_cases as G  # noqa: E402

MB = 2
SEQS = (4095, 4096, 4095, 4096)


def main(argv):
    if len(argv) != 2:
        raise SystemExit("usage: make_cases.py BUILD/dsplan HARDWARE > cases.jsonl")
    a = SimpleNamespace(dsplan=os.path.abspath(argv[0]), gpus=1, hardware=argv[1])
    os.environ["DSPLAN_DATA_DIR"] = ROOT
    model = os.path.join(HERE, "mistral-7b-4l.json")
    cfg = json.load(open(model))
    dsc = G.base_ds(1, MB, {"overlap_comm": False, "reduce_bucket_size": 50000000})
    subs = []
    with tempfile.TemporaryDirectory() as tmp:
        preds = {seq: G.simulate(a, model, dsc, tmp, ["--seq-len", str(seq)], False)
                 for seq in sorted(set(SEQS))}
    for i, seq in enumerate(SEQS):
        subs.append(dict(sub_id=f"window_mistral-7b-4l_s{seq}_r{i // 2 + 1}", mb=MB, stage=1,
                         grad_checkpointing=False, offload_optimizer="none", offload_param="none",
                         ds_config=dsc, model_config=cfg, pred=preds[seq],
                         variant=f"{seq} tokens against a 4096-token window", n_steps=8,
                         seq_len=seq))
    case = dict(id="window_mistral-7b-4l", model="mistral-7b-4l", model_config=cfg, plan_rank=None,
                variant="sequence one short of the window, and equal to it", stage=1, mb=MB,
                grad_checkpointing=False, offload_optimizer="none", offload_param="none",
                ds_config=dsc, pred=[preds[s] for s in sorted(preds)], needs_cpu_adam=False,
                n_steps=8, est_s=60, subs=subs, seq_len=SEQS[0])
    print(json.dumps(case))


if __name__ == "__main__":
    main(sys.argv[1:])
