#!/usr/bin/env python3
"""Write the GPU session's inputs: probe configs, DeepSpeed case lists, and dsplan's predictions.

usage: make_gpu_cases.py --dsplan BUILD/dsplan --models MODELS_DIR --out DIR [--bench .dsbench]

Writes into DIR (docs/validation/deepspeed/ in the repository):
  probe-configs.json          the plain-PyTorch probe entries (tools/probes/family_activation_probe.py)
  probe-configs/<fam>-L<n>/config.json   the same reduced configs as HF config.json files
  probe-predictions.jsonl     `dsplan model <config.json> --micro-batch N --seq-len S [--gradient-checkpointing] --json`
                              reduced to its activation numbers, one line per probe shape
  plans-dsplan.jsonl          rank-1 plan of `dsplan --model M --gpus 1 --json` per model (run in a scratch dir;
                              decoder-only models at --seq-len, default 1024)
  cases-plans.jsonl           one group per model: the rank-1 plan at 50 %, 75 % and 100 % of its
                              micro-batch (--fractions; ascending, one engine), pred = `dsplan simulate` of each
  cases-stage3.jsonl          stage-2 vs stage-3 groups (tiny models at 6 and 12 layers, t5-large, gpt2-large)
and copies the case lists and probe configs to BENCH (the folder carried to the GPU machine).
Every dsplan call is read-only (the scratch dir absorbs any file it writes).
"""
import argparse
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile

import yaml

MiB = 2.0 ** 20

# family label, catalog entry (its real widths, heads and vocabulary), layer key(s)
PROBE_FAMILIES = [
    ("llama", "llama-2-7b"), ("qwen2", "qwen2-1.5b"), ("gpt_neox", "pythia-1.4b"), ("opt", "opt-2.7b"),
    ("bloom", "bloom-3b"), ("gemma", "gemma-2b"), ("phi", "phi-2"), ("gpt2", "gpt2-xl"), ("t5", "t5-3b"),
    ("mistral", "mistral-7b"), ("falcon", "falcon-7b"), ("gptj", "gpt-j-6b"), ("bert", "bert-large-uncased"),
    ("t5-gated", "flan-t5-xl"), ("llama3", "llama-3.2-1b"),
]
LAYER_KEYS = {"gpt2": ["n_layer"], "bloom": ["n_layer"], "gptj": ["n_layer"],
              "t5": ["num_layers", "num_decoder_layers"]}

# models whose rank-1 plan is run in real DeepSpeed, in priority order
PLAN_MODELS = ["llama-2-7b", "qwen2-1.5b", "pythia-1.4b", "opt-2.7b", "bloom-3b", "gemma-2b", "phi-2",
               "llama-3.2-1b", "mistral-7b", "gpt2-xl", "t5-3b", "falcon-7b"]


def catalog(models_dir, name):
    d = yaml.safe_load(open(os.path.join(models_dir, name + ".yaml")))
    return d["config"]


def reduced(cfg, n):
    c = copy.deepcopy(cfg)
    keys = LAYER_KEYS.get(c["model_type"], ["num_hidden_layers"])
    for k in keys:
        c[k] = n
    if c["model_type"] == "t5":
        c["num_decoder_layers"] = n
    if c["model_type"] == "qwen2" and "max_window_layers" in c:
        c["max_window_layers"] = n
    return c


def shapes(cfg):
    if cfg["model_type"] == "t5":
        return {"src_len": 512, "tgt_len": 128}
    if cfg["model_type"] == "bert":
        return {"seq_len": 512}
    return {"seq_len": 1024}


def run_json(cmd, cwd):
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)
    if p.returncode not in (0, 3):
        raise RuntimeError(f"{' '.join(cmd)}: rc {p.returncode}: {p.stderr.strip()[:500]}")
    return json.loads(p.stdout)


def probe_inputs(a, out):
    entries = []
    cdir = os.path.join(out, "probe-configs")
    for fam, cat in PROBE_FAMILIES:
        base = catalog(a.models, cat)
        for n in (2, 4):
            c = reduced(base, n)
            sh = shapes(c)
            entries.append(dict(family=fam, catalog=cat, n_layers=n, model_config=c, mbs=[1, 4], **sh))
            d = os.path.join(cdir, f"{fam}-L{n}")
            os.makedirs(d, exist_ok=True)
            json.dump(c, open(os.path.join(d, "config.json"), "w"), indent=1)
    json.dump(entries, open(os.path.join(out, "probe-configs.json"), "w"), indent=1)
    return entries


def probe_predictions(a, out, entries, scratch):
    rows = []
    for e in entries:
        cfgpath = os.path.abspath(os.path.join(out, "probe-configs", f"{e['family']}-L{e['n_layers']}", "config.json"))
        for gck in (False, True):
            for mb in e["mbs"]:
                cmd = [a.dsplan, "model", cfgpath, "--micro-batch", str(mb)]
                if "src_len" in e:
                    cmd += ["--seq-len", str(e["src_len"]), "--target-len", str(e["tgt_len"])]
                else:
                    cmd += ["--seq-len", str(e["seq_len"])]
                if gck:
                    cmd.append("--gradient-checkpointing")
                cmd.append("--json")
                try:
                    j = run_json(cmd, scratch)
                except Exception as ex:  # noqa: BLE001
                    rows.append({"family": e["family"], "n_layers": e["n_layers"], "mb": mb, "grad_checkpointing": gck,
                                 "error": str(ex)[:500]})
                    continue
                layers = [{k: L.get(k) for k in ("name", "kind", "checkpointed", "params", "saved_bytes",
                                                  "activation_bytes", "recompute_bytes", "fwd_flops", "bwd_flops")}
                          for L in j.get("layers", [])]
                rows.append({"family": e["family"], "catalog": e["catalog"], "n_layers": e["n_layers"], "mb": mb,
                             "grad_checkpointing": gck, "command": " ".join(cmd[1:]),
                             "params": j.get("params"), "param_bytes": j.get("param_bytes"),
                             "activation_bytes": j.get("activation_bytes"),
                             "recompute_peak_bytes": j.get("recompute_peak_bytes"),
                             "attention": j.get("options", {}).get("attention"),
                             "fwd_flops": j.get("fwd_flops"), "bwd_flops": j.get("bwd_flops"),
                             "recompute_flops": j.get("recompute_flops"), "layers": layers})
    with open(os.path.join(out, "probe-predictions.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def hw_args(a):
    return ["--hardware", os.path.abspath(a.hardware) if os.path.exists(a.hardware) else a.hardware] if a.hardware else []


def simulate(a, model, ds_config, scratch, seq, gck):
    path = os.path.join(scratch, "sim_cfg.json")
    json.dump(ds_config, open(path, "w"))
    # The bench driver builds the model outside deepspeed.zero.Init: predict that
    # (docs/deepspeed-facts.md, "What keeps a released weight").
    cmd = [a.dsplan, "simulate", "--model", model, "--gpus", str(a.gpus), "--ds-config", path, "--json",
           "--no-zero-init"] + hw_args(a)
    cmd += seq
    if gck:
        cmd.append("--gradient-checkpointing")
    j = run_json(cmd, scratch)
    g, st = j.get("gpu", {}), j.get("step", {})
    return {"fits": j.get("fits"), "reason": j.get("reason"),
            "peak_allocated_mb": round(g.get("peak_allocated_bytes", 0) / MiB, 1),
            "peak_reserved_mb": round(g.get("peak_reserved_bytes", 0) / MiB, 1),
            "peak_total_mb": round(g.get("peak_total_bytes", 0) / MiB, 1),
            "peak_at": g.get("peak_at"),
            "breakdown_at_peak_mb": {k: round(v / MiB, 1) for k, v in (g.get("breakdown_at_peak") or {}).items()
                                     if isinstance(v, (int, float))},
            "step_s": st.get("time_s"), "step_breakdown_s": st.get("breakdown_s"),
            "command": " ".join(cmd[1:])}


def top_plan_case(a, model, name_cfg, top, seq, sh, case_id, variant, scratch):
    """One bench case (and its plans-dsplan record) for the top plan |top| of a planner answer,
    as emitted, with dsplan's prediction for its ds_config: the registered fresh sets' form
    (accum-1210 and after). |name_cfg| is (name, model_config); |model| what dsplan reads."""
    name, cfg = name_cfg
    pl, dsc = top["plan"], top["ds_config"]
    mb = int(pl["micro_batch"])
    ga = int(dsc.get("gradient_accumulation_steps", 1))
    gck = bool(pl.get("gradient_checkpointing"))
    off_o = pl.get("offload_optimizer") or "none"
    off_p = pl.get("offload_param") or "none"
    pred = simulate(a, model, dsc, scratch, seq, gck)
    pred["time_band"] = (top.get("step") or {}).get("time_band")  # the band the plan printed
    sub = dict(sub_id=f"{case_id}_mb{mb}x{ga}", mb=mb, stage=pl["stage"], grad_checkpointing=gck,
               offload_optimizer=off_o, offload_param=off_p, ds_config=dsc, model_config=cfg,
               pred=pred, variant=variant, **sh)
    case = dict(id=case_id, model=name, model_config=cfg, plan_rank=1, variant=variant, stage=pl["stage"],
                mb=mb, grad_checkpointing=gck, offload_optimizer=off_o, offload_param=off_p, ds_config=dsc,
                pred=[pred], needs_cpu_adam=off_o == "cpu", n_steps=8,
                est_s=30 + 8 * (pred["step_s"] or 1) + (120 if off_o != "none" else 0),
                subs=[sub], dsplan_summary=top.get("summary"), **sh)
    record = {"summary": top.get("summary"), "plan": pl, "step": top.get("step"), "gpu": top.get("gpu")}
    return case, record


def top_plan_list(here, prefix, choices, argv):
    """The registered top-plan sets of session 39 (qwen3-1215, phi3-1215, gemma2-1215): for each
    choice (name, model config file in |here| or catalog name, sequence arguments, harness
    lengths, planner pins), the top plan of `dsplan --model M --gpus 1 SEQ PINS` as emitted, as a
    bench case printed on stdout, and its planner record in |here|/plans-dsplan-HARDWARE.jsonl.
    A choice whose plan and lengths equal an earlier one's (a pin the top plan already had) is
    left out. Ids: PREFIX_NAME_ARGS. |argv|: [BUILD/dsplan, HARDWARE]."""
    from types import SimpleNamespace
    if len(argv) != 2:
        raise SystemExit("usage: make_cases.py BUILD/dsplan HARDWARE > cases.jsonl")
    dsplan, hw = argv
    root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    a = SimpleNamespace(dsplan=os.path.abspath(dsplan), gpus=1, hardware=hw)
    env = dict(os.environ, DSPLAN_DATA_DIR=root)
    os.environ["DSPLAN_DATA_DIR"] = root
    plans, seen = [], set()
    with tempfile.TemporaryDirectory() as tmp:
        for name, model, seq, sh, pins in choices:
            if model.endswith(".json"):
                model = os.path.join(here, model)
                cfg = json.load(open(model))
            else:
                cfg = catalog(os.path.join(root, "models"), model)
            cmd = [a.dsplan, "--model", model, "--gpus", "1"] + seq + pins + ["--json", "--no-emit"] + hw_args(a)
            p = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, env=env, timeout=600)
            if p.returncode != 0:
                raise SystemExit(f"{' '.join(cmd)}: rc {p.returncode}: {p.stderr.strip()[:300]}")
            top = sorted(json.loads(p.stdout)["recommendations"], key=lambda r: r.get("rank", 99))[0]
            tag = f"{name}_" + "_".join(
                x.lstrip("-").replace("seq-len", "s").replace("target-len", "t")
                .replace("gradient-checkpointing", "gc") for x in seq + pins)
            case, record = top_plan_case(a, model, (name, cfg), top, seq, sh, f"{prefix}_{tag}", "top plan", tmp)
            key = (name, json.dumps(sh, sort_keys=True), case["mb"], case["grad_checkpointing"],
                   json.dumps(case["ds_config"], sort_keys=True))
            if key in seen:
                continue
            seen.add(key)
            rel = os.path.relpath(model, root) if os.path.isabs(model) else model
            plans.append({"model": rel, **record, "command": " ".join(["dsplan", "--model", rel] + cmd[3:])})
            print(json.dumps(case))
    write_jsonl(os.path.join(here, f"plans-dsplan-{hw}.jsonl"), plans)


def seq_args(cfg, decoder_seq=1024):
    if cfg["model_type"] == "t5":
        return ["--seq-len", "512", "--target-len", "128"], {"src_len": 512, "tgt_len": 128}
    if cfg["model_type"] == "bert":
        return ["--seq-len", "512"], {"seq_len": 512}
    return ["--seq-len", str(decoder_seq)], {"seq_len": decoder_seq}


def with_mb(dsc, mb, world=1):
    d = copy.deepcopy(dsc)
    ga = int(d.get("gradient_accumulation_steps", 1))
    d["train_micro_batch_size_per_gpu"] = mb
    if "train_batch_size" in d:
        d["train_batch_size"] = mb * ga * world
    return d


def plan_cases(a, out, scratch):
    plans, cases = [], []
    for m in a.plan_models:
        cfg = catalog(a.models, m)
        seq, sh = seq_args(cfg, a.seq_len)
        j = run_json([a.dsplan, "--model", m, "--gpus", str(a.gpus)] + seq + ["--json"] + hw_args(a), scratch)
        recs = j.get("recommendations") or []
        if not recs:
            plans.append({"model": m, "error": "no recommendation", "fits": j.get("fits")})
            continue
        top = sorted(recs, key=lambda r: r.get("rank", 99))[0]
        plans.append({"model": m, "rank": top.get("rank"), "summary": top.get("summary"), "plan": top.get("plan"),
                      "ds_config": top.get("ds_config"), "gpu": top.get("gpu"), "step": top.get("step"),
                      "n_recommendations": len(recs)})
        p = top["plan"]
        dsc = top["ds_config"]
        mb = int(p["micro_batch"])
        gck = bool(p.get("gradient_checkpointing"))
        mbs = sorted({max(1, (f * mb) // 100) for f in a.fractions})
        off_o = p.get("offload_optimizer") or "none"
        off_p = p.get("offload_param") or "none"
        subs = []
        for x in mbs:
            d = with_mb(dsc, x, a.gpus)
            pred = simulate(a, m, d, scratch, seq, gck)
            pct = round(100.0 * x / mb)
            subs.append(dict(sub_id=f"{m}_r1_mb{x}" + (f"_w{a.gpus}" if a.gpus > 1 else ""), mb=x, stage=p["stage"], grad_checkpointing=gck,
                             offload_optimizer=off_o, offload_param=off_p, ds_config=d, model_config=cfg,
                             pred=pred, variant=f"{pct}% of planned micro-batch {mb}", **sh))
        est = 60 + 40 * (1 if "7b" in m else 0) + (120 if off_o != "none" else 0)
        # The last rank: at ZeRO-1/2 its partition's gradients come first in the backward, so
        # its grads_in_partition buffer lives longest; it also holds the padding. dsplan predicts
        # the rank whose peak is highest, so that is the rank to measure. At ZeRO-3 the ranks'
        # partitions are alike, and only rank 0 can run under the fake process group: at the end
        # of the first step DeepSpeed checks each rank's module trace against rank 0's with a
        # broadcast that the fake group does not carry (assert_ints_same_as_other_ranks; fresh
        # set 15's llama-3.1-8b stopped there as rank 1).
        last = a.gpus - 1 if p["stage"] < 3 else 0
        emulate = {"emulate_world_size": a.gpus, "emulate_rank": last} if a.gpus > 1 else {}
        cases.append(dict(id=f"plan_{m}" + (f"_w{a.gpus}" if a.gpus > 1 else ""), model=m,
                          model_config=cfg, plan_rank=1, **emulate,
                          variant="mb sweep " + "/".join(map(str, a.fractions)) + " %",
                          stage=p["stage"], mb=mb, grad_checkpointing=gck, offload_optimizer=off_o,
                          offload_param=off_p, ds_config=dsc, pred=[s["pred"] for s in subs],
                          needs_cpu_adam=off_o == "cpu", n_steps=5, est_s=est, subs=subs,
                          dsplan_summary=top.get("summary"), **sh))
    with open(os.path.join(out, "plans-dsplan.jsonl"), "w") as f:
        for r in plans:
            f.write(json.dumps(r) + "\n")
    return cases


def base_ds(stage, mb, extra=None):
    d = {"train_micro_batch_size_per_gpu": mb, "gradient_accumulation_steps": 1, "train_batch_size": mb,
         "bf16": {"enabled": True}, "gradient_clipping": 1.0,
         "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.0}},
         "zero_optimization": {"stage": stage, "overlap_comm": True, "contiguous_gradients": True},
         "steps_per_print": 1000000, "wall_clock_breakdown": False}
    if extra:
        d["zero_optimization"].update(extra)
    return d


def stage3_cases(a, out, scratch):
    tiny = {
        "t5": {"model_type": "t5", "vocab_size": 32128, "d_model": 256, "d_kv": 32, "d_ff": 1024, "num_heads": 8,
               "relative_attention_num_buckets": 32, "dropout_rate": 0.1, "is_encoder_decoder": True},
        "llama": {"model_type": "llama", "vocab_size": 32000, "hidden_size": 256, "intermediate_size": 688,
                  "num_attention_heads": 4, "num_key_value_heads": 4, "max_position_embeddings": 2048,
                  "tie_word_embeddings": False},
    }
    cases = []
    for arch in ("t5", "llama"):
        for n in (6, 12):
            cfg = reduced(tiny[arch], n)
            sh = {"src_len": 128, "tgt_len": 32} if arch == "t5" else {"seq_len": 128}
            variants = [("s2", 2, None, False), ("s3", 3, None, False),
                        ("s3-persist0", 3, {"stage3_param_persistence_threshold": 0}, False)]
            if n == 12:
                variants += [("s2-gc", 2, None, True), ("s3-gc", 3, None, True)]
            subs = []
            for tag, st, extra, gck in variants:
                d = base_ds(st, 1, extra)
                subs.append(dict(sub_id=f"tiny-{arch}-L{n}_{tag}", mb=1, stage=st, grad_checkpointing=gck,
                                 offload_optimizer="none", offload_param="none", ds_config=d, model_config=cfg,
                                 pred=None, variant=tag, n_steps=12, **sh))
            cases.append(dict(id=f"s3iso_tiny-{arch}-L{n}", model=f"tiny-{arch}-L{n}", model_config=cfg,
                              plan_rank=None, variant="stage 2 vs 3", stage=None, mb=1, grad_checkpointing=False,
                              offload_optimizer="none", offload_param="none", ds_config=subs[0]["ds_config"],
                              pred=None, n_steps=12, est_s=20 + 5 * len(subs), subs=subs, **sh))
    real = [("t5-large", 8, [("s2", 2, False), ("s3", 3, False), ("s3-gc", 3, True), ("s2-gc", 2, True)]),
            ("gpt2-large", 8, [("s2", 2, False), ("s3", 3, False), ("s3-gc", 3, True)])]
    for m, mb, vs in real:
        cfg = catalog(a.models, m)
        seq, sh = seq_args(cfg)
        subs = []
        for tag, st, gck in vs:
            d = base_ds(st, mb)
            pred = None if a.no_sim else simulate(a, m, d, scratch, seq, gck)
            subs.append(dict(sub_id=f"{m}_mb{mb}_{tag}", mb=mb, stage=st, grad_checkpointing=gck,
                             offload_optimizer="none", offload_param="none", ds_config=d, model_config=cfg,
                             pred=pred, variant=tag, n_steps=6, **sh))
        cases.append(dict(id=f"s3pair_{m}", model=m, model_config=cfg, plan_rank=None, variant="stage 2 vs 3",
                          stage=None, mb=mb, grad_checkpointing=False, offload_optimizer="none", offload_param="none",
                          ds_config=subs[0]["ds_config"], pred=[s["pred"] for s in subs], n_steps=6,
                          est_s=25 + 12 * len(subs), subs=subs, **sh))
    return cases


def write_jsonl(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsplan", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--bench", default=None)
    ap.add_argument("--hardware", default=None,
                    help="profile for the plans and predictions (name or YAML path; default: dsplan's own)")
    ap.add_argument("--plan-models", default=",".join(PLAN_MODELS))
    ap.add_argument("--no-sim", action="store_true", help="stage-3 pairs without dsplan predictions (added later)")
    ap.add_argument("--skip", default="", help="comma list of: probes,predictions,plans,stage3")
    ap.add_argument("--gpus", type=int, default=1,
                    help="plan for this many GPUs (one node); above 1 each case runs rank 0 of that "
                         "many on one GPU under PyTorch's fake process group (memory only)")
    ap.add_argument("--seq-len", type=int, default=1024, help="decoder-only models' sequence length (T5: 512 + 128, BERT: 512)")
    ap.add_argument("--fractions", default="50,75,100", help="micro-batches run per plan, in percent of the planned one")
    a = ap.parse_args()
    a.plan_models = [m for m in a.plan_models.split(",") if m]
    a.fractions = [int(f) for f in a.fractions.split(",") if f]
    skip = set(a.skip.split(","))
    if a.gpus < 1 or (a.gpus > 1 and not {"probes", "stage3"} <= skip):
        ap.error("--gpus must be 1, or above 1 with --skip probes,stage3 (those cases are one-GPU runs)")
    os.makedirs(a.out, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="dsplan_scratch_")
    try:
        if "probes" not in skip:
            entries = probe_inputs(a, a.out)
            if "predictions" not in skip:
                probe_predictions(a, a.out, entries, scratch)
        if "plans" not in skip:
            write_jsonl(os.path.join(a.out, "cases-plans.jsonl"), plan_cases(a, a.out, scratch))
        if "stage3" not in skip:
            write_jsonl(os.path.join(a.out, "cases-stage3.jsonl"), stage3_cases(a, a.out, scratch))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if a.bench:
        for fn in ("probe-configs.json", "cases-plans.jsonl", "cases-stage3.jsonl"):
            if os.path.exists(os.path.join(a.out, fn)):
                shutil.copy(os.path.join(a.out, fn), os.path.join(a.bench, fn))


if __name__ == "__main__":
    sys.exit(main())
