#!/usr/bin/env python3
"""Kernel profiles of real DeepSpeed steps against dsplan's per-class kernel time.

usage: kprof_table.py --dsplan BUILD/dsplan [--hardware P] RESULTS.jsonl [...]

For every ok sub-case of tools/device/dsbench/driver.py's results that carries a kernel profile
(`DSBENCH_KPROF=1`: one more step after the timed ones, forward and backward each under
torch.profiler, kernels by name with their summed time), the profile's kernel time in four
classes against `dsplan model --times --json` for the same model config, micro-batch and
lengths:
  * GEMM: cuBLAS / cuBLASLt / CUTLASS kernels (nvjet, cutlass, *gemm*, xmma);
  * attention: SDPA's fused kernels (cuDNN's sdpa and its fusion helpers, flash, fmha,
    memory-efficient attention);
  * loss: log_softmax and nll_loss kernels, forward and backward;
  * memory-bound: everything else (elementwise, norms, dropout, copies, reductions, memsets).
dsplan's side: the layers' gemm_*_s, attention_*_s, and memory_*_s (the loss op's time as loss; the
logits' casts stay memory-bound on both sides). The measured backward also holds DeepSpeed's
epilogue kernels (gradient copies into its buckets, stage 0's `update_hp_grads`), which dsplan
prices as separate tasks, not in the layers. The LM head is a GEMM in both and is also shown alone where the profile has one kernel
name that only it runs (a single call of an alignment-1 CUTLASS kernel, or the largest single
GEMM call). Checkpointing's recompute is in the profiled backward and in dsplan's recompute;
this table is for runs without it (others are skipped). Nothing is fitted.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

CLASSES = ("gemm", "attention", "loss", "memory")


def kernel_class(name):
    n = name.lower()
    if "sdpa" in n or "flash" in n or "fmha" in n or "cudnn::fusion" in n or "attention" in n:
        return "attention"
    if "softmax" in n and "log" in n or "nll_loss" in n:
        return "loss"
    if "nvjet" in n or "cutlass" in n or "gemm" in n or "xmma" in n:
        return "gemm"
    return "memory"


def measured(kprof_phase):
    out = {c: 0.0 for c in CLASSES}
    for name, count, secs in kprof_phase.get("top", []):
        out[kernel_class(name)] += secs
    out["kernel_s"] = kprof_phase.get("kernel_s", 0.0)
    return out


def predicted(dsplan, hardware, sub, scratch):
    cfg = os.path.join(scratch, "config.json")
    with open(cfg, "w") as f:
        json.dump(sub["model_config"], f)
    cmd = [dsplan, "model", cfg, "--times", "--json", "--micro-batch", str(sub["mb"])]
    if sub.get("src_len"):  # T5: encoder and decoder lengths
        cmd += ["--seq-len", str(sub["src_len"]), "--target-len", str(sub["tgt_len"])]
    elif sub.get("seq_len"):
        cmd += ["--seq-len", str(sub["seq_len"])]
    if hardware:
        cmd += ["--hardware", hardware]
    attn = sub["model_config"].get("attn_implementation")
    if attn:
        cmd += ["--attention", attn]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(" ".join(cmd) + ": " + r.stderr.strip())
    d = json.loads(r.stdout)
    out = {ph: {c: 0.0 for c in CLASSES} for ph in ("fwd", "bwd")}
    head = {"fwd": 0.0, "bwd": 0.0}
    # `times` lists each run of identical layers once, by its first layer; the others take the
    # time of the last listed layer of their kind before them.
    timed = {L["layer"]: L for L in d["times"]["layers"]}
    last = {}
    for layer in d["layers"]:
        L = timed.get(layer["name"]) or last.get(layer["kind"])
        if L is None:
            raise RuntimeError("no predicted time for layer " + layer["name"])
        last[layer["kind"]] = L
        for ph in ("fwd", "bwd"):
            o = out[ph]
            o["gemm"] += L["gemm_" + ph + "_s"]
            o["attention"] += L["attention_" + ph + "_s"]
            # The loss layer's log_softmax + nll op is the loss class; its other ops (the
            # logits' cast up to fp32 and back) are memory-bound, as their kernels are.
            loss_op = sum(op[ph + "_s"] for op in L.get("ops", []) if op["kind"] == "loss")
            o["loss"] += loss_op
            o["memory"] += L["memory_" + ph + "_s"] - loss_op
            if L["kind"] == "head":
                head[ph] += L["gemm_" + ph + "_s"]
    return out, head


def measured_head(kprof_phase):
    """The LM head's GEMM in the profile: kernels named like CUTLASS alignment-1 GEMMs (cuBLAS
    runs them only for a dimension that is not a multiple of 8: the vocabulary), else None."""
    s = [secs for name, count, secs in kprof_phase.get("top", [])
         if "cutlass" in name.lower() and "align1" in name.lower()]
    return sum(s) if sum(s) > 1e-4 else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsplan", required=True)
    ap.add_argument("--hardware")
    ap.add_argument("results", nargs="+")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for path in a.results:
            for line in open(path):
                if not line.strip():
                    continue
                g = json.loads(line)
                for s in g.get("subs", []):
                    k = s.get("kprof")
                    if s.get("status") != "ok" or not isinstance(k, dict) or "fwd" not in k:
                        continue
                    if s.get("grad_checkpointing"):
                        continue
                    pred, head = predicted(a.dsplan, a.hardware, s, scratch)
                    rows.append((s["sub_id"], k, pred, head))
    hw = a.hardware or "dsplan's default"
    print(f"Predicted with `dsplan model --times` ({hw}); ms, measured kernel time / predicted.\n")
    print("| case | phase | GEMM | of it the head | attention | loss | memory-bound | all kernels |")
    print("|---|---|---|---|---|---|---|---|")
    for sid, k, pred, head in rows:
        for ph in ("fwd", "bwd"):
            m = measured(k[ph])
            p = pred[ph]
            mh = measured_head(k[ph])
            cells = []
            for c in ("gemm",):
                cells.append("%.1f / %.1f" % (1e3 * m[c], 1e3 * p[c]))
            cells.append(("%.1f / %.1f" % (1e3 * mh, 1e3 * head[ph])) if mh is not None
                         else "- / %.1f" % (1e3 * head[ph]))
            for c in ("attention", "loss", "memory"):
                cells.append("%.1f / %.1f" % (1e3 * m[c], 1e3 * p[c]))
            cells.append("%.1f / %.1f" % (1e3 * m["kernel_s"], 1e3 * sum(p[c] for c in CLASSES)))
            print("| %s | %s | %s |" % (sid, ph, " | ".join(cells)))
    print("\nmeasured: the profile's kernels by name (`top`); a phase whose list is cut short has"
          " `all kernels` above the classes' sum.")


if __name__ == "__main__":
    sys.exit(main())
