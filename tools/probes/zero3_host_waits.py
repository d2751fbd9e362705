#!/usr/bin/env python3
"""Where a ZeRO-3 step's Python thread waits for the GPU, at a model's real width.

stack_costs.py measures ZeRO-3's hook cost at width 64, where the GPU is idle and wall time is
host time. At real width a block also has GPU work, and the question is how the two combine:
the longer of the two (the host runs ahead of the GPU) or their sum (the host waits for the GPU
somewhere in every block). This probe answers it per model family:

  For each model (catalog id; real width, vocabulary cut to 1024 so that the embedding and head
  are small), for ZeRO stage 2 and 3 and for 2 and 6 blocks, under non-reentrant checkpointing,
  with the zero_optimization section dsplan emits for one GPU (buckets 5e7, persistence 1e5,
  overlap_comm), it times forward, backward and step at two shapes: a small one (one sample of
  32 tokens: the GPU does almost nothing, wall time is host time) and a large one (--big,
  default 2 x 1024 tokens). 6 blocks less 2 blocks, over 4, is one block.
  Then, for one more step per engine, it wraps torch.cuda.synchronize, Stream.synchronize,
  Event.synchronize and Tensor.item and records how often each was called, from where (the
  first caller outside torch), and how long the host was blocked in it, per phase.

usage: zero3_host_waits.py --models bloom-7b1:2x1024,opt-6.7b [--big 2x1024] [--out F]
(a model's own large shape after a colon; --big for the others)
Prints a JSON document (schema dsplan-zero3-host-waits/1).
"""
import argparse
import collections
import gc
import json
import os
import sys
import time
import traceback

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_models  # noqa: E402
from probe_util import interleaved_step_times, release_engine, single_rank_env, write_doc  # noqa: E402

DEV = "cuda"


def zero_config(stage, mb, reuse=1_000_000_000):
    z = {"stage": stage, "contiguous_gradients": True, "overlap_comm": True,
         "reduce_bucket_size": 50_000_000, "reduce_scatter": True}
    if stage == 3:
        z.update({"stage3_param_persistence_threshold": 100_000,
                  "stage3_prefetch_bucket_size": 50_000_000,
                  "stage3_max_live_parameters": 1_000_000_000,
                  "stage3_max_reuse_distance": reuse, "sub_group_size": 1_000_000_000})
    return {"train_micro_batch_size_per_gpu": mb, "gradient_accumulation_steps": 1,
            "bf16": {"enabled": True}, "gradient_clipping": 1.0,
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-5, "torch_adam": True}},
            "zero_optimization": z, "steps_per_print": 10 ** 9, "wall_clock_breakdown": False}


def batch(vocab, is_s2s, mb, seq):
    g = torch.Generator(device=DEV)
    g.manual_seed(1)
    if is_s2s:
        return {"input_ids": torch.randint(0, vocab, (mb, seq), device=DEV, generator=g),
                "labels": torch.randint(0, vocab, (mb, max(1, seq // 2)), device=DEV, generator=g)}
    ids = torch.randint(0, vocab, (mb, seq), device=DEV, generator=g)
    return {"input_ids": ids, "labels": ids}


def checkpointed_model(cfg0, layers):
    """The catalog config |cfg0| with |layers| blocks and a vocabulary of 1024 (token ids above
    it set to 0), built in bf16, in training mode, with non-reentrant checkpointing."""
    cfg = hf_models.with_layers(cfg0, layers)
    if "vocab_size" in cfg:
        cfg["vocab_size"] = 1024
    for k in ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id"):
        if isinstance(cfg.get(k), int) and cfg[k] >= 1024:
            cfg[k] = 0
    torch.manual_seed(0)
    model, s2s = hf_models.build(cfg, DEV, dtype=torch.bfloat16)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    return model, s2s


class Waits:
    """Counts and times the host-blocking CUDA calls made from Python while active."""

    def __init__(self):
        self.active = False
        self.phase = ""
        self.rows = collections.defaultdict(lambda: [0, 0.0])
        self._orig = {}

    def caller(self):
        for fr in reversed(traceback.extract_stack()[:-2]):
            f = fr.filename
            if "/torch/" in f and "/torch/utils/checkpoint" not in f:
                continue
            short = f.split("site-packages/")[-1].split("/site/")[-1]
            return f"{short}:{fr.lineno} {fr.name}"
        return "?"

    def wrap(self, owner, name, label):
        orig = getattr(owner, name)
        self._orig[(owner, name)] = orig
        waits = self

        def wrapped(*a, **k):
            if not waits.active:
                return orig(*a, **k)
            t0 = time.perf_counter()
            r = orig(*a, **k)
            dt = time.perf_counter() - t0
            row = waits.rows[(waits.phase, label, waits.caller())]
            row[0] += 1
            row[1] += dt
            return r
        setattr(owner, name, wrapped)

    def install(self):
        self.wrap(torch.cuda, "synchronize", "torch.cuda.synchronize")
        self.wrap(torch.cuda.Stream, "synchronize", "Stream.synchronize")
        self.wrap(torch.cuda.Event, "synchronize", "Event.synchronize")
        self.wrap(torch.Tensor, "item", "Tensor.item")

    def table(self):
        out = [{"phase": k[0], "call": k[1], "caller": k[2], "count": v[0], "blocked_s": v[1]}
               for k, v in self.rows.items()]
        out.sort(key=lambda r: -r["blocked_s"])
        return out


def step_times(engine, b, reps, warm):
    f, bw, s = interleaved_step_times({0: (engine, lambda e: e(**b).loss)}, reps, warm)[0]
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    return {"fwd_s": med(f), "bwd_s": med(bw), "step_s": med(s), "fwd_all": f, "bwd_all": bw}


def instrumented_step(engine, b, waits):
    waits.rows.clear()
    waits.active = True
    try:
        torch.cuda.synchronize()
        waits.phase = "fwd"
        loss = engine(**b).loss
        waits.phase = "bwd"
        engine.backward(loss)
        waits.phase = "step"
        engine.step()
        torch.cuda.synchronize()
    finally:
        waits.active = False
    return waits.table()


def one_model(name, catalog, big, reps, warm, waits, stages=("2", "3")):
    if ":" in name:
        name, shape = name.split(":")
        big = tuple(int(x) for x in shape.split("x"))
    import deepspeed
    cfg0 = hf_models.load_catalog(catalog, name)
    out = {"model": name, "model_type": cfg0["model_type"], "runs": []}
    shapes = [(1, 32), big]
    for spec in stages:
        # "3r": stage 3 with stage3_max_reuse_distance 1e12 (a parameter, once gathered, is kept
        # for the whole step) against the default 1e9
        stage, reuse = (3, 10 ** 12) if spec == "3r" else (int(spec), 1_000_000_000)
        for L in (2, 6):
            model, s2s = checkpointed_model(cfg0, L)
            t0 = time.time()
            engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                                   config=zero_config(stage, 1, reuse))
            init_s = time.time() - t0
            for mb, seq in shapes:
                b = batch(1024, s2s, mb, seq)
                row = {"stage": stage, "spec": spec, "layers": L, "mb": mb, "seq": seq, "init_s": init_s}
                row.update(step_times(engine, b, reps, warm))
                row["waits"] = instrumented_step(engine, b, waits)[:25]
                out["runs"].append(row)
                print(f"{name} s{stage} L{L} {mb}x{seq}: fwd {row['fwd_s']*1e3:.1f} bwd {row['bwd_s']*1e3:.1f} "
                      f"step {row['step_s']*1e3:.1f} ms", file=sys.stderr)
            del model
            release_engine(engine)
            del engine
    per = {}
    for spec in stages:
        for mb, seq in shapes:
            r = {L: next(x for x in out["runs"] if x["spec"] == spec and x["layers"] == L and x["mb"] == mb)
                 for L in (2, 6)}
            per[f"s{spec}_{mb}x{seq}"] = {ph: (r[6][ph] - r[2][ph]) / 4 for ph in ("fwd_s", "bwd_s", "step_s")}
    out["per_block"] = per
    return out


def interleaved(name, catalog, layers, rounds, warm):
    """Host time per block at one sample of 32 tokens (the GPU nearly idle), stage 2 and 3, two
    depths, the four engines stepped in turn (one step each per round) so that a drift of the
    host's speed affects all four alike; medians over the rounds."""
    import deepspeed
    from deepspeed.runtime.zero.partitioned_param_coordinator import PartitionedParameterCoordinator
    cfg0 = hf_models.load_catalog(catalog, name)
    engines = {}
    for stage in (2, 3):
        for L in layers:
            model, s2s = checkpointed_model(cfg0, L)
            e, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                              config=zero_config(stage, 1))
            engines[(stage, L)] = (e, batch(1024, s2s, 1, 32))
    times = interleaved_step_times({k: (e, lambda e, b=b: e(**b).loss) for k, (e, b) in engines.items()},
                                   rounds, warm)
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    out = {"model": name, "model_type": cfg0["model_type"], "layers": list(layers), "rounds": rounds,
           "raw": {f"s{k[0]}_L{k[1]}": {"fwd_all": v[0], "bwd_all": v[1], "step_all": v[2]}
                   for k, v in times.items()}}
    n = layers[1] - layers[0]
    for stage in (2, 3):
        for i, ph in enumerate(("fwd_s", "bwd_s", "step_s")):
            out[f"s{stage}_block_{ph}"] = (med(times[(stage, layers[1])][i]) - med(times[(stage, layers[0])][i])) / n
    for i, ph in enumerate(("fwd_s", "bwd_s")):
        out[f"s3_extra_block_{ph}"] = out[f"s3_block_{ph}"] - out[f"s2_block_{ph}"]
    print(f"{name}: " + " ".join(f"{k} {v*1e3:.2f}" for k, v in out.items() if k.endswith("_s")), file=sys.stderr)
    for e, _ in engines.values():
        release_engine(e)
    engines.clear()
    try:  # its lru_cache holds the modules of every engine
        PartitionedParameterCoordinator._PartitionedParameterCoordinator__params_to_release.cache_clear()
    except Exception:  # noqa: BLE001
        pass
    gc.collect()
    torch.cuda.empty_cache()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="bloom-7b1,opt-6.7b")
    ap.add_argument("--catalog", default=hf_models.CATALOG)
    ap.add_argument("--big", default="2x1024")
    ap.add_argument("--reps", type=int, default=6)
    ap.add_argument("--warm", type=int, default=3)
    ap.add_argument("--stages", default="2,3", help="2, 3, and 3r (stage 3, reuse distance 1e12)")
    ap.add_argument("--interleave", default=None,
                    help="L1,L2: only the interleaved host-time measurement at these depths")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    single_rank_env(29517)
    import deepspeed
    deepspeed.init_distributed()
    torch.cuda.set_device(0)
    mb, seq = (int(x) for x in args.big.split("x"))
    waits = Waits()
    waits.install()
    import transformers
    doc = {"schema": "dsplan-zero3-host-waits/1", "date": time.strftime("%Y-%m-%d"),
           "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                        "deepspeed": deepspeed.__version__, "gpu": torch.cuda.get_device_name(0)},
           "models": [], "errors": {}}
    for name in [m for m in args.models.split(",") if m]:
        try:
            if args.interleave:
                doc["models"].append(interleaved(name.split(":")[0], args.catalog,
                                                 tuple(int(x) for x in args.interleave.split(",")),
                                                 args.reps, args.warm))
            else:
                doc["models"].append(one_model(name, args.catalog, (mb, seq), args.reps, args.warm, waits,
                                               tuple(args.stages.split(","))))
        except Exception:  # noqa: BLE001
            doc["errors"][name] = traceback.format_exc()[-3000:]
        gc.collect()
        torch.cuda.empty_cache()
        if args.out:
            with open(args.out, "w") as f:
                json.dump(doc, f, indent=1)
    write_doc(doc, args.out)


if __name__ == "__main__":
    main()
