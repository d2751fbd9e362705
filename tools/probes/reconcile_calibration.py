"""Reconcile ../shared/calibration/deepspeed-h200.jsonl peaks with the timeline rules of
docs/research/deepspeed-memory-timeline.md. Run from the repo root: python3 tools/probes/reconcile_calibration.py"""
import json
MiB = 2 ** 20
PSI = {"gpt2-xl": 1557611200, "t5-large": 737668096}
A = {("gpt2-xl", 4, False): 19831.0, ("gpt2-xl", 8, False): 39661.9, ("gpt2-xl", 8, True): 3618.4,
     ("t5-large", 4, False): 7502.5, ("t5-large", 8, False): 15000.6}
LOGITS_2TV = {"gpt2-xl": lambda mb: 2 * mb * 1024 * 50257 / MiB, "t5-large": lambda mb: 2 * mb * 128 * 32128 / MiB}
MAXNUMEL = {"gpt2-xl": 50257 * 1600, "t5-large": 32128 * 1024}
W = 65.5          # cuBLAS workspaces (32 MiB per thread handle: forward + autograd thread) + ~1.5 MiB
RBS2 = 2 * 500_000_000 / MiB
KV = {"gpt2-xl": lambda mb: 48 * 2 * mb * 1024 * 1600 * 2 / MiB}
for line in open("../shared/calibration/deepspeed-h200.jsonl"):
    r = json.loads(line)
    m, mb, gc = r["model"], r["mb"], r["grad_checkpointing"]
    P = PSI[m] / MiB
    a = A[(m, mb, gc)]
    lg = LOGITS_2TV[m](mb)
    z = r["ds_config"]["zero_optimization"]
    st = z["stage"]
    off = "offload_optimizer" in z
    offp = "offload_param" in z
    gbuf = 2 * MAXNUMEL[m] / MiB
    if st == 0:
        parts = {"20Ψ": 20 * P, "W": W, "A": a}
        where = "end of forward (lp grads of previous step alive)"
    elif st in (1, 2) and not off:
        if gc:
            parts = {"22Ψ": 22 * P, "W": W, "2TV logits held": lg}
            where = "step: flatten->fp32 / AdamW sqrt temp"
        else:
            parts = {"14Ψ": 14 * P, "W": W, "ipg 2rbs": RBS2, "A": a, "+2TV": lg}
            where = "loss backward"
    elif st in (1, 2) and off:
        parts = {"2Ψ": 2 * P, "gpu temp grad 2*maxnumel": gbuf, "W": W, "ipg 2rbs": RBS2, "A": a, "+2TV": lg}
        where = "loss backward"
    elif st == 3 and not offp:
        parts = {"16Ψ": 16 * P, "ipg 2rbs": RBS2, "W": W, "A": a, "+2TV": lg}
        where = "loss backward"
    else:
        parts = {"ipg 2rbs": RBS2, "W": W, "A": a, "+2TV": lg}
        where = "loss backward (+ live gathered params, unmodelled)"
    pred = sum(parts.values())
    meas = r["steps_max_alloc_mb_corrected"]
    print(f"{r['id']:40s} meas {meas:9.1f} pred {pred:9.1f} resid {meas - pred:+8.1f} ({100 * (meas - pred) / meas:+5.2f}%)  "
          f"[{where}] " + " + ".join(f"{k} {v:.1f}" for k, v in parts.items()))
