#!/usr/bin/env python3
"""Where ZeRO-3's forward host time goes, and whether it follows the number of gather calls.

At width 64 ZeRO-3's hooks cost 188 us per submodule and 121 us per gathered tensor (forward;
stack_costs.py "zero3"). At real width (zero3_host_waits.py --interleave) the same blocks cost
1.4-2.1 times that. One suspected mechanism: DeepSpeed's prefetch bucket
(stage3_prefetch_bucket_size, 5e7 elements) gathers a whole tiny model in one coalesced call,
but a 7B model in about one call per weight matrix, and every call has its own handle, stream
switch, stream synchronization and event. This probe separates the two:

  stacks  Stacks of n Linear(w, w) (no bias), n in {8, 24}, w in {64, 1024, 4096}, every
          parameter partitioned (threshold 0), at stage 2 and at stage 3 with prefetch buckets
          0 (no prefetch: one call per module), 5e7 (the default) and 1e12 (one call for all).
  models  Catalog models at real width (vocabulary cut to 1024), 2 and 6 blocks, checkpointed,
          the zero_optimization section dsplan emits, at stage 2 and at stage 3 with bucket 5e7
          and 1e12 (and max live parameters 1e12).

Engines of one group are stepped in turn (one step each per round) at one sample of 8 or 32
tokens, so the GPU is nearly idle and wall time is host time. Then one more step per stage-3
engine runs with DeepSpeed's hook functions wrapped by timers (inclusive seconds and counts per
function and phase), and with the number of gather calls and of parameters per call.

Every process also times a fixed eager loop (host_speed) before and after, so that results of
different processes can be compared at the host's speed of the moment.

usage: zero3_gather_calls.py --stacks [--widths 64,1024,4096] [--out F]
       zero3_gather_calls.py --models bloom-7b1,llama-2-7b [--out F]
Prints a JSON document (schema dsplan-zero3-gather-calls/1).
"""
import argparse
import collections
import gc
import os
import sys
import time
import traceback

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_models  # noqa: E402
from zero3_host_waits import checkpointed_model  # noqa: E402
from probe_util import (host_speed, interleaved_step_times, release_engine, single_rank_env,  # noqa: E402
                        write_doc)

DEV = "cuda"
DT = torch.bfloat16


def med(xs):
    s = sorted(xs)
    return s[len(s) // 2]


def quick_host_speed():
    return host_speed(n=400, reps=1)


def zero_config(stage, bucket, threshold, live=1_000_000_000, reduce=50_000_000):
    z = {"stage": stage, "contiguous_gradients": True, "overlap_comm": True,
         "reduce_bucket_size": reduce, "reduce_scatter": True}
    if stage == 3:
        z.update({"stage3_param_persistence_threshold": threshold,
                  "stage3_prefetch_bucket_size": bucket,
                  "stage3_max_live_parameters": live,
                  "stage3_max_reuse_distance": 1_000_000_000, "sub_group_size": 1_000_000_000})
    return {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
            "bf16": {"enabled": True}, "gradient_clipping": 1.0,
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-5, "torch_adam": True}},
            "zero_optimization": z, "steps_per_print": 10 ** 9, "wall_clock_breakdown": False}


# (tag, stage, prefetch bucket, max live parameters[, reduce bucket])
VARIANTS = {"s2": (2, 0, 10 ** 9), "s3": (3, 50_000_000, 10 ** 9), "s3_b0": (3, 0, 10 ** 9),
            "s3_ball": (3, 10 ** 12, 10 ** 12)}
# --reduce-sweep: stage 3 with everything gathered in one call, and the reduce bucket holding
# one 4096 x 4096 gradient (one flush per module) or all of the deepest stack (one flush per
# step; stage 3 allocates the bucket whole, so not 1e12).
REDUCE_VARIANTS = {"s2": (2, 0, 10 ** 9), "s3_r1": (3, 10 ** 12, 10 ** 12, 4096 * 4096),
                   "s3_rall": (3, 10 ** 12, 10 ** 12, 24 * 4096 * 4096)}


class Attrib:
    """Inclusive wall time and call counts of chosen DeepSpeed functions, per phase, while
    active. Wraps class or module attributes, which DeepSpeed looks up at call time."""

    def __init__(self):
        self.active = False
        self.phase = ""
        self.rows = collections.defaultdict(lambda: [0, 0.0])
        self.gather_sizes = collections.Counter()

    def wrap(self, owner, name, label=None):
        orig = owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name)
        if orig is None:
            return
        label = label or f"{getattr(owner, '__name__', owner)}.{name}"
        me = self

        def wrapped(*a, **k):
            if not me.active:
                return orig(*a, **k)
            t0 = time.perf_counter()
            try:
                return orig(*a, **k)
            finally:
                row = me.rows[(me.phase, label)]
                row[0] += 1
                row[1] += time.perf_counter() - t0
        wrapped.__name__ = getattr(orig, "__name__", name)
        setattr(owner, name, wrapped)

    def install(self):
        from deepspeed.runtime.zero import parameter_offload as po
        from deepspeed.runtime.zero import partition_parameters as pp
        from deepspeed.runtime.zero import partitioned_param_coordinator as pc
        from deepspeed.runtime.zero import stage3 as s3
        off, coord = po.DeepSpeedZeRoOffload, pc.PartitionedParameterCoordinator
        for n in ("pre_sub_module_forward_function", "post_sub_module_forward_function",
                  "pre_sub_module_backward_function", "post_sub_module_backward_function"):
            self.wrap(off, n)
        for n in ("fetch_sub_module", "release_sub_module", "trace_prologue", "record_module",
                  "_PartitionedParameterCoordinator__all_gather_params",
                  "_PartitionedParameterCoordinator__release_param"):
            self.wrap(coord, n)
        self.wrap(pp.NoGatherHandle, "__init__")
        self.wrap(pp.NoGatherHandle, "wait")
        self.wrap(pp.NoGatherCoalescedHandle, "__init__")
        self.wrap(pp.NoGatherCoalescedHandle, "wait")
        self.wrap(pp, "free_param")
        self.wrap(po, "apply_to_tensors_only", "parameter_offload.apply_to_tensors_only")
        self.wrap(po.ZeROOrderedDict, "__getitem__")
        opt = s3.DeepSpeedZeroOptimizer_Stage3
        for n in ("reduce_ready_partitions_and_remove_grads",
                  "_DeepSpeedZeroOptimizer_Stage3__reduce_and_partition_ipg_grads",
                  "_DeepSpeedZeroOptimizer_Stage3__add_grad_to_ipg_bucket"):
            self.wrap(opt, n)
        # the number of parameters in each gather call (one call = one handle)
        orig = pp._no_gather_coalesced
        me = self

        def counted(params):
            params = list(params)
            if me.active:
                me.gather_sizes[(me.phase, len(params))] += 1
            return orig(params)
        pp._no_gather_coalesced = counted

    def table(self):
        out = [{"phase": k[0], "fn": k[1], "count": v[0], "s": v[1]} for k, v in self.rows.items()]
        out.sort(key=lambda r: (r["phase"], -r["s"]))
        calls = collections.defaultdict(lambda: {"calls": 0, "params": 0, "sizes": {}})
        for (ph, n), c in self.gather_sizes.items():
            calls[ph]["calls"] += c
            calls[ph]["params"] += n * c
            calls[ph]["sizes"][str(n)] = c
        return out, dict(calls)


def attributed_step(engine, make_loss, attrib):
    attrib.rows.clear()
    attrib.gather_sizes.clear()
    attrib.active = True
    wall = {}
    try:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        attrib.phase = "fwd"
        loss = make_loss(engine)
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        attrib.phase = "bwd"
        engine.backward(loss)
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        attrib.phase = "step"
        engine.step()
        torch.cuda.synchronize()
        wall = {"fwd_s": t1 - t0, "bwd_s": t2 - t1, "step_s": time.perf_counter() - t2}
    finally:
        attrib.active = False
    fns, calls = attrib.table()
    return {"wall": wall, "fns": fns, "gather_calls": calls}


def summarize(times, key_depth, depths):
    """Per-variant medians and per-unit (block or matrix) differences between the depths."""
    out = {}
    lo, hi = depths
    for k, (f, b, s) in times.items():
        out[str(k)] = {"fwd_s": med(f), "bwd_s": med(b), "step_s": med(s)}
    per = {}
    for v in VARIANTS:
        if (v, hi) in times and (v, lo) in times:
            per[v] = {ph: (out[str((v, hi))][ph] - out[str((v, lo))][ph]) / (hi - lo)
                      for ph in ("fwd_s", "bwd_s", "step_s")}
    for v in list(per):
        if v != "s2" and "s2" in per:
            per[v + "_minus_s2"] = {ph: per[v][ph] - per["s2"][ph] for ph in per[v]}
    return out, per


def stacks(widths, ns, rounds, warm, attrib):
    import deepspeed
    rows = []
    for w in widths:
        engines = {}
        x = torch.randn(1, 8, w, device=DEV, dtype=DT)
        for v, spec in VARIANTS.items():
            for n in ns:
                torch.manual_seed(0)
                model = nn.Sequential(*[nn.Linear(w, w, bias=False) for _ in range(n)]).to(DEV)
                e, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                                  config=zero_config(spec[0], spec[1], 0, *spec[2:]))
                engines[(v, n)] = e
        times = interleaved_step_times({k: (e, lambda e: e(x).float().sum()) for k, e in engines.items()},
                                       rounds, warm, each_round=quick_host_speed)
        hs = times.pop("each_round")
        medians, per = summarize(times, "n", ns)
        row = {"width": w, "ns": list(ns), "host_speed_rounds": hs, "medians": medians, "per_matrix": per,
               "raw": {str(k): v for k, v in times.items()}, "attrib": {}}
        for (v, n), e in engines.items():
            if v != "s2" and n == ns[-1]:
                row["attrib"][v] = attributed_step(e, lambda e: e(x).float().sum(), attrib)
        rows.append(row)
        print(f"width {w}: " + " ".join(f"{v} fwd {p['fwd_s']*1e6:.0f}us" for v, p in per.items()), file=sys.stderr)
        for e in engines.values():
            release_engine(e)
        engines.clear()
        gc.collect()
        torch.cuda.empty_cache()
    return rows


def batch(is_s2s):
    g = torch.Generator(device=DEV)
    g.manual_seed(1)
    ids = torch.randint(0, 1024, (1, 32), device=DEV, generator=g)
    if is_s2s:
        return {"input_ids": ids, "labels": ids[:, :16].clone()}
    return {"input_ids": ids, "labels": ids}


def one_model(name, catalog, depths, variants, rounds, warm, attrib):
    import deepspeed
    cfg0 = hf_models.load_catalog(catalog, name)
    engines = {}
    b = None
    for v in variants:
        stage, bucket, live = VARIANTS[v]
        for L in depths:
            model, s2s = checkpointed_model(cfg0, L)
            b = batch(s2s)
            e, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                              config=zero_config(stage, bucket, 100_000, live))
            engines[(v, L)] = e
    times = interleaved_step_times({k: (e, lambda e: e(**b).loss) for k, e in engines.items()}, rounds, warm,
                                   each_round=quick_host_speed)
    hs = times.pop("each_round")
    medians, per = summarize(times, "L", depths)
    out = {"model": name, "model_type": cfg0["model_type"], "depths": list(depths), "rounds": rounds,
           "host_speed_rounds": hs, "medians": medians, "per_block": per,
           "raw": {str(k): v for k, v in times.items()}, "attrib": {}}
    for (v, L), e in engines.items():
        if v != "s2":
            out["attrib"][f"{v}_L{L}"] = attributed_step(e, lambda e: e(**b).loss, attrib)
    print(f"{name}: " + " ".join(f"{v} fwd {p['fwd_s']*1e3:.2f}ms" for v, p in per.items()), file=sys.stderr)
    for e in engines.values():
        release_engine(e)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stacks", action="store_true")
    ap.add_argument("--widths", default="64,1024,4096")
    ap.add_argument("--models", default="")
    ap.add_argument("--variants", default="s2,s3,s3_ball")
    ap.add_argument("--depths", default="2,6")
    ap.add_argument("--catalog", default=hf_models.CATALOG)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--warm", type=int, default=3)
    ap.add_argument("--reduce-sweep", action="store_true",
                    help="stacks: sweep the reduce bucket instead of the prefetch bucket")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.reduce_sweep:
        VARIANTS.clear()
        VARIANTS.update(REDUCE_VARIANTS)
    single_rank_env(29519)
    import deepspeed
    deepspeed.init_distributed()
    torch.cuda.set_device(0)
    attrib = Attrib()
    attrib.install()
    import transformers
    doc = {"schema": "dsplan-zero3-gather-calls/1", "date": time.strftime("%Y-%m-%d"),
           "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                        "deepspeed": deepspeed.__version__, "gpu": torch.cuda.get_device_name(0)},
           "host_speed_before": host_speed(), "stacks": [], "models": [], "errors": {}}
    if args.stacks:
        try:
            doc["stacks"] = stacks([int(w) for w in args.widths.split(",")], (8, 24), args.rounds, args.warm,
                                   attrib)
        except Exception:  # noqa: BLE001
            doc["errors"]["stacks"] = traceback.format_exc()[-3000:]
    for name in [m for m in args.models.split(",") if m]:
        try:
            doc["models"].append(one_model(name, args.catalog, tuple(int(d) for d in args.depths.split(",")),
                                           args.variants.split(","), args.rounds, args.warm, attrib))
        except Exception:  # noqa: BLE001
            doc["errors"][name] = traceback.format_exc()[-3000:]
        gc.collect()
        torch.cuda.empty_cache()
    doc["host_speed_after"] = host_speed()
    write_doc(doc, args.out)


if __name__ == "__main__":
    main()
