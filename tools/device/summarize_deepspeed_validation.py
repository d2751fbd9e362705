#!/usr/bin/env python3
"""Tables of docs/validation/deepspeed/ (the 2026-12-03 H200 session) from its raw records.

usage: summarize_deepspeed_validation.py DIR > DIR/tables.md

Reads DIR/results-call*.jsonl (DeepSpeed groups, tools/device/dsbench/driver.py), DIR/probes-call*.jsonl
(tools/probes/family_activation_probe.py) and DIR/probe-predictions.jsonl (dsplan model).
Errors are (predicted - measured) / measured, as in docs/accuracy.md. MiB = 2^20 bytes.
Nothing here is fitted: every number is a measurement, a dsplan prediction, or a difference of them.
"""
import glob
import json
import os
import sys

MiB = 2.0 ** 20


def load(pattern):
    rows = []
    for f in sorted(glob.glob(pattern)):
        call = os.path.basename(f).split("-")[-1].split(".")[0]
        for line in open(f):
            if line.strip():
                r = json.loads(line)
                r["_call"] = call
                rows.append(r)
    return rows


def err(p, m):
    if p is None or m is None or m == 0:
        return ""
    return f"{100.0 * (p - m) / m:+.1f}%"


def f1(x, nd=1):
    return "" if x is None else f"{x:.{nd}f}"


def peak_phase(s):
    ps = s.get("per_step") or []
    if len(ps) < 2:
        return ""
    best, where = -1, ""
    for i, p in enumerate(ps[1:], start=2):
        for k in ("fwd", "bwd", "opt"):
            if p[k + "_peak_mb"] > best:
                best, where = p[k + "_peak_mb"], k
    return where


def plans_table(groups, out):
    out.append("### Rank-1 plans of `dsplan --model M --gpus 1` (seq 1024; T5 512/128)\n")
    out.append("Peak allocated / reserved: max over steps (the driver's per-phase peaks); step: median of steps 3..n "
               "(n = 5; 4 for the stage-3 7B plans). `step1` = peak of step 1 (Adam states not yet created); "
               "`at` = phase of the step>=2 peak (fwd includes the loss; opt = engine.step()).\n")
    out.append("| model | plan | mb (of plan) | call | status | peak alloc MiB meas / pred / err | reserved MiB meas / pred / err "
               "| step s meas / pred / err | step1 peak | (step>=2 - step1) B/param | at | note |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    seen = {}
    for g in groups:
        if not (g["id"].startswith("plan")):
            continue
        for s in g["subs"]:
            p = s.get("pred") or {}
            planned = g.get("mb")
            pct = f"{s['mb']} ({round(100 * s['mb'] / planned)}%)" if planned else str(s["mb"])
            plan = f"s{s.get('stage')}{' gc' if s.get('grad_checkpointing') else ''}"
            note = ""
            st = s["status"]
            if st == "oom":
                ph = s.get("error_phase", "")
                tb = s.get("error_traceback", "")
                where = "loss (cross_entropy)" if "cross_entropy" in tb else ("backward" if "backward" in tb else
                                                                             ("step" if "step" in tb.split("\n")[-8:][0] else ""))
                if "deepspeed_initialize" in ph:
                    note = ("ARTIFACT: OOM in deepspeed.initialize because the previous stage-3 engine of the same "
                            "process was not freed; see the fresh-process rows")
                else:
                    import re
                    mm = re.search(r"Tried to allocate ([0-9.]+) GiB", s.get("error", ""))
                    cfg = s["model_config"]
                    ratio = ""
                    if mm and s.get("seq_len"):
                        req = float(mm.group(1)) * 1024
                        ratio = f" = {req / (s['mb'] * s['seq_len'] * cfg['vocab_size'] * 4 / MiB):.2f} x bsV4"
                    note = f"OOM in {ph.split(':')[-1]} {where}; request {mm.group(1) if mm else '?'} GiB{ratio}; " \
                           f"max allocated before it {f1(s.get('oom_max_alloc_mb'))} MiB"
            elif st == "not_run_after_oom":
                note = "not run (group stopped at the OOM above)"
            key = (g["model"], s["mb"])
            meas_a = s.get("steps_max_alloc_mb") if st == "ok" else None
            meas_r = s.get("steps_max_reserved_mb") if st == "ok" else None
            meas_t = s.get("median_step_s") if st == "ok" else None
            out.append(f"| {g['model']} | {plan} | {pct} | {g['_call']} | {st} | {f1(meas_a)} / {f1(p.get('peak_allocated_mb'))} / "
                       f"{err(p.get('peak_allocated_mb'), meas_a)} | {f1(meas_r)} / {f1(p.get('peak_reserved_mb'))} / "
                       f"{err(p.get('peak_reserved_mb'), meas_r)} | {f1(meas_t, 3)} / {f1(p.get('step_s'), 3)} / "
                       f"{err(p.get('step_s'), meas_t)} | {f1(s.get('step1_max_alloc_mb')) if st == 'ok' else ''} | "
                       f"{f1((s['step2on_max_alloc_mb'] - s['step1_max_alloc_mb']) * MiB / s['n_params'], 2) if st == 'ok' and s.get('n_params') and s.get('step2on_max_alloc_mb') else ''} | "
                       f"{peak_phase(s) if st == 'ok' else ''} | {note} |")
            seen[key] = s
    out.append("")
    # slopes
    out.append("### Growth per sample of micro-batch (two measured micro-batches of the same plan)\n")
    out.append("Slope = (peak(mb2) - peak(mb1)) / (mb2 - mb1), MiB per sample; intercept error = what is left of the "
               "peak error at the smaller micro-batch after removing the slope error times the micro-batch.\n")
    out.append("| model | mb1, mb2 | measured MiB/sample | dsplan MiB/sample | slope err | peak err at mb1 MiB | of which slope x mb1 | rest (intercept) MiB |")
    out.append("|---|---|---|---|---|---|---|---|")
    by_model = {}
    for (m, mb), s in seen.items():
        if s["status"] == "ok" and s.get("pred"):
            by_model.setdefault(m, {})[mb] = s
    for m, d in by_model.items():
        mbs = sorted(d)
        if len(mbs) < 2:
            continue
        a, b = mbs[0], mbs[-1]
        sa, sb = d[a], d[b]
        ms = (sb["steps_max_alloc_mb"] - sa["steps_max_alloc_mb"]) / (b - a)
        ps = (sb["pred"]["peak_allocated_mb"] - sa["pred"]["peak_allocated_mb"]) / (b - a)
        e = sa["pred"]["peak_allocated_mb"] - sa["steps_max_alloc_mb"]
        out.append(f"| {m} | {a}, {b} | {ms:.1f} | {ps:.1f} | {err(ps, ms)} | {e:+.0f} | {(ps - ms) * a:+.0f} | "
                   f"{e - (ps - ms) * a:+.0f} |")
    out.append("")


def probe_tables(probes, preds, out):
    P = {}
    for r in probes:
        if r.get("record_type") == "probe" and r.get("status") == "ok":
            P[(r["family"], r["n_layers"], r["mb"], r["grad_checkpointing"])] = r
    Q = {(r["family"], r["n_layers"], r["mb"], r["grad_checkpointing"]): r for r in preds if "error" not in r}
    fams = []
    for r in probes:
        if r.get("record_type") == "probe" and r["family"] not in fams:
            fams.append(r["family"])

    def act(r):  # measured bytes kept after forward (saved tensors + output), MiB
        return r["after_fwd_alloc_mb"] - r["before_fwd_alloc_mb"]

    out.append("### Activations kept from forward to backward, plain PyTorch, bf16 (no DeepSpeed)\n")
    out.append("Measured = allocated after forward (output held) - allocated before forward. Per layer = "
               "(L4 - L2) / 2, per sample = at micro-batch 4 divided by 4 (mb 1 in brackets). Head+loss = L2 - 2 x per layer "
               "(embedding, final norm, head, logits and loss). dsplan = `dsplan model <config> --json` "
               "`activation_bytes` the same way. MiB.\n")
    out.append("| family (catalog widths) | attn | per layer per sample meas (mb1) | dsplan | err | head+loss per sample meas (mb1) | dsplan | err | "
               "with gc: per layer per sample meas | dsplan | err |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|")
    rows_t = []
    for fam in fams:
        k = lambda L, mb, g: (fam, L, mb, g)  # noqa: E731
        if not all(x in P for x in (k(2, 4, False), k(4, 4, False), k(2, 1, False), k(4, 1, False))):
            continue
        pl4 = (act(P[k(4, 4, False)]) - act(P[k(2, 4, False)])) / 2 / 4
        pl1 = (act(P[k(4, 1, False)]) - act(P[k(2, 1, False)])) / 2
        hd4 = (act(P[k(2, 4, False)]) - 2 * 4 * pl4) / 4
        hd1 = act(P[k(2, 1, False)]) - 2 * pl1
        dp = dh = None
        if k(4, 4, False) in Q and k(2, 4, False) in Q:
            dp = (Q[k(4, 4, False)]["activation_bytes"] - Q[k(2, 4, False)]["activation_bytes"]) / 2 / 4 / MiB
            dh = (Q[k(2, 4, False)]["activation_bytes"] / MiB - 2 * 4 * dp) / 4
        g_m = g_p = None
        if k(4, 4, True) in P and k(2, 4, True) in P:
            g_m = (act(P[k(4, 4, True)]) - act(P[k(2, 4, True)])) / 2 / 4
        if k(4, 4, True) in Q and k(2, 4, True) in Q:
            g_p = (Q[k(4, 4, True)]["activation_bytes"] - Q[k(2, 4, True)]["activation_bytes"]) / 2 / 4 / MiB
        r0 = P[k(2, 4, False)]
        out.append(f"| {fam} ({r0['catalog']}) | {r0.get('attn_implementation')} | {pl4:.1f} ({pl1:.1f}) | {f1(dp)} | {err(dp, pl4)} | "
                   f"{hd4:.1f} ({hd1:.1f}) | {f1(dh)} | {err(dh, hd4)} | {f1(g_m, 2)} | {f1(g_p, 2)} | {err(g_p, g_m)} |")
        rows_t.append((fam, r0))
    out.append("")

    out.append("### Transients at micro-batch 4 (plain PyTorch, bf16)\n")
    out.append("fwd = max allocated during forward+loss - allocated after forward; bwd = max allocated during "
               "backward - allocated after forward (the backward's working set; .grad was None before, so gradients "
               "created before the peak are in it). Unit bsV4 = b x s x V x 4 bytes, one fp32 copy of the logits "
               "(T5: decoder tokens). L2 and L4 shown: equal ratios mean the transient is the head/loss's, not a layer's. MiB.\n")
    out.append("| family | bsV4 | fwd L4 | fwd / bsV4 | bwd L2 | bwd L4 | bwd L4 / bsV4 | with gc: fwd / bsV4 | with gc: bwd L4 / bsV4 |")
    out.append("|---|---|---|---|---|---|---|---|---|")
    for fam, _ in rows_t:
        r, r2, rg = P.get((fam, 4, 4, False)), P.get((fam, 2, 4, False)), P.get((fam, 4, 4, True))
        if not (r and r2):
            continue
        V = r["logits_shape"][-1]
        u = r["logits_shape"][0] * r["logits_shape"][1] * V * 4 / MiB
        ft = r["fwd_peak_alloc_mb"] - r["after_fwd_alloc_mb"]
        bt = r["bwd_peak_alloc_mb"] - r["after_fwd_alloc_mb"]
        bt2 = r2["bwd_peak_alloc_mb"] - r2["after_fwd_alloc_mb"]
        gf = rg and (rg["fwd_peak_alloc_mb"] - rg["after_fwd_alloc_mb"]) / u
        gb = rg and (rg["bwd_peak_alloc_mb"] - rg["after_fwd_alloc_mb"]) / u
        out.append(f"| {fam} | {u:.0f} | {ft:.0f} | {ft / u:.2f} | {bt2:.0f} | {bt:.0f} | {bt / u:.2f} | {f1(gf, 2)} | {f1(gb, 2)} |")
    out.append("")

    out.append("### Time per layer and the checkpointing recompute (plain PyTorch, mb 4)\n")
    out.append("Per layer = (L4 - L2) / 2 of the medians of 3 reps (host clock between cuda.synchronize()). recompute = "
               "per-layer backward with gc - without; ratio = recompute / per-layer forward (1.0 = one extra forward). "
               "dsplan fwd FLOPs per layer / measured time = achieved TFLOP/s. ms.\n")
    out.append("| family | fwd/layer | bwd/layer | bwd/fwd | recompute/layer | recompute / fwd | fwd TFLOP/s (dsplan FLOPs) | head+loss fwd+bwd (L2 - 2 layers) |")
    out.append("|---|---|---|---|---|---|---|---|")
    for fam, _ in rows_t:
        k = lambda L, g: (fam, L, 4, g)  # noqa: E731
        if not all(x in P for x in (k(2, False), k(4, False), k(2, True), k(4, True))):
            continue
        fl = (P[k(4, False)]["fwd_s"] - P[k(2, False)]["fwd_s"]) / 2 * 1e3
        bl = (P[k(4, False)]["bwd_s"] - P[k(2, False)]["bwd_s"]) / 2 * 1e3
        bg = (P[k(4, True)]["bwd_s"] - P[k(2, True)]["bwd_s"]) / 2 * 1e3
        rc = bg - bl
        tf = ""
        if k(4, False) in Q and k(2, False) in Q and fl > 0:
            fflops = (Q[k(4, False)]["fwd_flops"] - Q[k(2, False)]["fwd_flops"]) / 2
            tf = f"{fflops / (fl * 1e-3) / 1e12:.0f}"
        hl = (P[k(2, False)]["fwd_s"] + P[k(2, False)]["bwd_s"]) * 1e3 - 2 * (fl + bl)
        out.append(f"| {fam} | {fl:.2f} | {bl:.2f} | {bl / fl if fl > 0 else 0:.2f} | {rc:.2f} | "
                   f"{rc / fl if fl > 0 else 0:.2f} | {tf} | {hl:.2f} |")
    out.append("")


def stage3_tables(groups, out):
    S = {}
    for g in groups:
        for s in g["subs"]:
            if s["status"] == "ok":
                S[s["sub_id"]] = s
    out.append("### ZeRO stage 3 vs 2, world size 1, tiny models (mb 1; T5 src 128 / tgt 32, llama seq 128; 12 steps, median of 3..12)\n")
    out.append("Phase medians in ms (fwd includes the loss; opt = engine.step()). Per layer = (L12 - L6) / 6. "
               "Modules, parameter tensors per layer likewise from the built model. `persist0` = "
               "stage3_param_persistence_threshold 0 (every parameter gathered; default 1e5 keeps the small ones resident).\n")
    out.append("| model | variant | fwd L6 | fwd L12 | bwd L6 | bwd L12 | opt L6 | opt L12 | step L6 | step L12 | (fwd+bwd)/layer | minus s2 /layer |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    hook = []
    for arch in ("t5", "llama"):
        base = None
        for v in ("s2", "s3", "s3-persist0"):
            a, b = S.get(f"tiny-{arch}-L6_{v}"), S.get(f"tiny-{arch}-L12_{v}")
            if not (a and b):
                continue
            fb = ((b["median_fwd_s"] + b["median_bwd_s"]) - (a["median_fwd_s"] + a["median_bwd_s"])) / 6 * 1e3
            if v == "s2":
                base = fb
            d = fb - base if base is not None else None
            out.append(f"| tiny-{arch} | {v} | {a['median_fwd_s'] * 1e3:.1f} | {b['median_fwd_s'] * 1e3:.1f} | "
                       f"{a['median_bwd_s'] * 1e3:.1f} | {b['median_bwd_s'] * 1e3:.1f} | {a['median_opt_s'] * 1e3:.1f} | "
                       f"{b['median_opt_s'] * 1e3:.1f} | {a['median_step_s'] * 1e3:.1f} | {b['median_step_s'] * 1e3:.1f} | "
                       f"{fb:.2f} | {f1(d, 2)} |")
            if v != "s2" and d is not None:
                mods = (b["n_modules"] - a["n_modules"]) / 6
                pmods = (b["n_modules_with_direct_params"] - a["n_modules_with_direct_params"]) / 6
                pt = (b["n_param_tensors"] - a["n_param_tensors"]) / 6
                big = (b["n_param_tensors_ge_1e5"] - a["n_param_tensors_ge_1e5"]) / 6
                hook.append((arch, v, d, mods, pmods, pt, big))
    out.append("")
    out.append("Per layer: modules, modules that own parameters, parameter tensors, tensors >= 1e5 elements; stage-3 "
               "extra (fwd+bwd) per layer divided by each count, in microseconds.\n")
    out.append("| model | variant | s3 - s2 per layer ms | modules | with params | param tensors | tensors >= 1e5 | us / module | us / module with params | us / param tensor |")
    out.append("|---|---|---|---|---|---|---|---|---|---|")
    for arch, v, d, mods, pmods, pt, big in hook:
        out.append(f"| tiny-{arch} | {v} | {d:.2f} | {mods:.0f} | {pmods:.0f} | {pt:.0f} | {big:.0f} | {d * 1e3 / mods:.0f} | "
                   f"{d * 1e3 / pmods:.0f} | {d * 1e3 / pt:.0f} |")
    out.append("")
    out.append("### Real-size stage 2 / 3 and checkpointing pairs (mb 8; t5-large 512/128, gpt2-large 1024)\n")
    out.append("Only the first sub of each group, the `-fresh` one and the stage-3 ones (memory is freed at a stage-2 -> "
               "stage-3 switch but not after stage 3) have clean memory; `start` = allocated at the start of the steps. "
               "Times are unaffected. ms unless marked.\n")
    out.append("| case | call | start MiB | peak alloc MiB meas / pred / err | reserved MiB meas / pred / err | fwd | bwd | opt | step s meas / pred / err | clean memory |")
    out.append("|---|---|---|---|---|---|---|---|---|---|")
    for g in groups:
        if not g["id"].startswith("s3pair"):
            continue
        for i, s in enumerate(g["subs"]):
            if s["status"] != "ok":
                continue
            p = s.get("pred") or {}
            clean = i == 0 or "fresh" in s["sub_id"] or (s.get("stage") == 3 and g["subs"][i - 1].get("stage") == 2)
            ma = s["steps_max_alloc_mb"] if clean else None
            mr = s["steps_max_reserved_mb"] if clean else None
            out.append(f"| {s['sub_id']} | {g['_call']} | {s['steps_start_alloc_mb']:.0f} | {f1(s['steps_max_alloc_mb'])} / "
                       f"{f1(p.get('peak_allocated_mb'))} / {err(p.get('peak_allocated_mb'), ma)} | "
                       f"{f1(s['steps_max_reserved_mb'])} / {f1(p.get('peak_reserved_mb'))} / {err(p.get('peak_reserved_mb'), mr)} | "
                       f"{s['median_fwd_s'] * 1e3:.0f} | {s['median_bwd_s'] * 1e3:.0f} | {s['median_opt_s'] * 1e3:.0f} | "
                       f"{s['median_step_s']:.3f} / {f1(p.get('step_s'), 3)} / {err(p.get('step_s'), s['median_step_s'])} | "
                       f"{'yes' if clean else 'no'} |")
    out.append("")


def layer_key_n(cfg):
    for k in ("num_hidden_layers", "n_layer", "num_layers"):
        if k in cfg:
            return cfg[k]
    return None


def probe_layer_err(probes, preds):
    """catalog -> measured - dsplan activation bytes per layer per sample (MiB), mb 4, no checkpointing."""
    P = {(r["catalog"], r["n_layers"], r["mb"], r["grad_checkpointing"]): r for r in probes
         if r.get("record_type") == "probe" and r.get("status") == "ok"}
    Q = {(r["catalog"], r["n_layers"], r["mb"], r["grad_checkpointing"]): r for r in preds if "error" not in r}
    out = {}
    for (cat, L, mb, g) in P:
        if L != 4 or mb != 4 or g:
            continue
        k4, k2 = (cat, 4, 4, False), (cat, 2, 4, False)
        if k2 in P and k4 in Q and k2 in Q:
            a = lambda r: r["after_fwd_alloc_mb"] - r["before_fwd_alloc_mb"]  # noqa: E731
            m = (a(P[k4]) - a(P[k2])) / 8
            d = (Q[k4]["activation_bytes"] - Q[k2]["activation_bytes"]) / 8 / MiB
            out[cat] = m - d
    return out


def reprediction_table(groups, perr, out):
    out.append("### The DeepSpeed peaks re-predicted with the two probe measurements (no fitting)\n")
    out.append("Applies to the ok plan runs whose predicted peak is at `bwd loss`. d_loss = 2.0 x b x s x V x 4 bytes "
               "(the probes' backward working set of the fp32 loss, above the after-forward level) - dsplan's "
               "`temporaries` at that peak (f4e3975 puts 0.5 x b x s x V x 4 there); d_layers = mb x layers x "
               "(measured - dsplan) activation bytes per layer per sample from the probes (no checkpointing only). "
               "Neither number was taken from a DeepSpeed run. MiB.\n")
    out.append("| run | measured | dsplan | err | d_loss | d_layers | dsplan + d | err |")
    out.append("|---|---|---|---|---|---|---|---|")
    for g in groups:
        if not g["id"].startswith("plan"):
            continue
        for s in g["subs"]:
            p = s.get("pred") or {}
            if s["status"] != "ok" or not str(p.get("peak_at", "")).startswith("bwd loss"):
                continue
            cfg = s["model_config"]
            if cfg.get("model_type") == "t5":
                continue
            V, L = cfg["vocab_size"], layer_key_n(cfg)
            u = s["mb"] * s["seq_len"] * V * 4 / MiB
            tmp = (p.get("breakdown_at_peak_mb") or {}).get("temporaries", 0.0)
            dl = 2.0 * u - tmp
            dy = 0.0 if s.get("grad_checkpointing") else s["mb"] * L * perr.get(g["model"], 0.0)
            m, q = s["steps_max_alloc_mb"], p["peak_allocated_mb"]
            out.append(f"| {s['sub_id']} | {m:.0f} | {q:.0f} | {err(q, m)} | {dl:+.0f} | {dy:+.0f} | {q + dl + dy:.0f} | "
                       f"{err(q + dl + dy, m)} |")
    out.append("")


def phase_table(groups, out):
    out.append("### Step time by phase: measured (medians of steps 3..n, synchronize between phases) vs dsplan's critical-path breakdown\n")
    out.append("dsplan: forward; backward + recompute; optimizer; rest = exposed comm + grad copies + offload. "
               "Measured fwd includes the loss; opt = engine.step(). ms.\n")
    out.append("| run | fwd meas / pred / err | bwd meas / pred / err | opt meas / pred / err | pred rest |")
    out.append("|---|---|---|---|---|")
    for g in groups:
        for s in g["subs"]:
            p = s.get("pred") or {}
            b = p.get("step_breakdown_s") or {}
            if s["status"] != "ok" or not b:
                continue
            pf, pb, po = b.get("forward", 0), b.get("backward", 0) + b.get("recompute", 0), b.get("optimizer", 0)
            rest = sum(v for k, v in b.items() if k not in ("forward", "backward", "recompute", "optimizer"))
            mf, mb_, mo = s["median_fwd_s"], s["median_bwd_s"], s["median_opt_s"]
            out.append(f"| {s['sub_id']} | {mf * 1e3:.0f} / {pf * 1e3:.0f} / {err(pf, mf)} | {mb_ * 1e3:.0f} / {pb * 1e3:.0f} / "
                       f"{err(pb, mb_)} | {mo * 1e3:.0f} / {po * 1e3:.0f} / {err(po, mo)} | {rest * 1e3:.0f} |")
    out.append("")


def main():
    d = sys.argv[1]
    groups = load(os.path.join(d, "results-call*.jsonl"))
    probes = load(os.path.join(d, "probes-call*.jsonl"))
    preds = [json.loads(x) for x in open(os.path.join(d, "probe-predictions.jsonl")) if x.strip()]
    out = ["# Tables (generated by tools/device/summarize_deepspeed_validation.py; do not edit)\n"]
    plans_table(groups, out)
    reprediction_table(groups, probe_layer_err(probes, preds), out)
    phase_table(groups, out)
    probe_tables(probes, preds, out)
    stage3_tables(groups, out)
    print("\n".join(out))


if __name__ == "__main__":
    main()
