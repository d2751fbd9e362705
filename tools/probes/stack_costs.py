#!/usr/bin/env python3
"""Measures the host-side costs of the training stack (PyTorch eager + transformers, and DeepSpeed
ZeRO when it is importable) that dsplan's cost model prices per op, per block and per hook.

Every number is a measurement of a mechanism on tiny shapes, where the GPU finishes each kernel
before the host issues the next, so wall time is host time. None is fitted to a training run:
  op_kinds     host time of one op of each traced kind (tiny bf16 tensors, autograd recording),
               forward, and backward through autograd.
  families     for each model family: host time of one transformer block in forward and in
               backward (the difference between 2- and 4-layer models of the family at width 64,
               so embedding, head and loss cancel), with and without non-reentrant gradient
               checkpointing, and the rest of the model (embedding, head, loss).
  zero3        DeepSpeed ZeRO-3's hooks on synthetic stacks of tiny modules (every parameter
               partitioned): host time per submodule and per parameter in forward, backward and
               step, from a least-squares fit over several stacks, against the same stacks at
               stage 2.
  zero3_release  the same stacks with stage3_max_reuse_distance 0 (release after every use, gather
               again) against the default, stepped in turn (docs/stack-costs.md 4b).
  zero3_families  ZeRO-3's extra host time per block of each family (stage 3 minus stage 2,
               6- minus 2-block models, plain and checkpointed; the eight engines of a family
               stepped in turn), with the partition threshold set so that the tiny model's
               matrices are gathered and its vectors persist, as in the full-size model. Not
               read by dsplan: a record (docs/stack-costs.md 4b).
  bf16_step    stage 0's BF16_Optimizer.step() on the host (docs/stack-costs.md 6), with
               bf16_optimizer_parts.py's models of 64, 256 and 768 tiny parallel Linear modules,
               gradient_clipping 0 (no clip loop) and 1e-6 (the clip loop always runs): engine.step()
               synchronized, median of 10 after 3; dsplan fits t = a + b * tensors per setting.
  optimizer_kernels  the optimizer step's kernels on large flat tensors (optimizer_kernels.py):
               the norm loop's fp64 copy and norm, the flat passes (flatten, unscale, copy back),
               FusedAdam (when DeepSpeed imports) and torch.optim's foreach AdamW, in bytes read
               + written per second; GPU time (CUDA events), not host time.
  zero3_calls  ZeRO-3's host time per gather call and per reduce-bucket flush (docs/stack-costs.md
               4c), with zero3_gather_calls.py's stacks: 8 and 24 Linear(1024, 1024), every
               parameter partitioned, at stage 3 with a prefetch bucket of 0 (a gather call per
               module) or of everything (one call per step), and a reduce bucket of one gradient
               (a flush per module) or of all of them (one flush per step). Per call: the forward
               per added module, bucket 0 less everything; per flush: the backward per added
               module, one gradient less all. Minimum over the rounds (the host's speed varies
               between rounds; the minimum is the undisturbed cost).

usage: stack_costs.py [--models gpt2-xl,t5-3b,...] [--zero3-models M,...] [--catalog DIR]
                      [--no-deepspeed] [--out F]
The models are catalog ids (DIR/<id>.yaml, default ../../models beside this script); one per
family is enough. Prints a JSON document (schema dsplan-stack-costs/1) to --out or stdout.
"""
import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
import traceback

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_models  # noqa: E402
from probe_util import interleaved_step_times, release_engine  # noqa: E402
from hf_models import load_catalog  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DEV = "cuda"
DT = torch.bfloat16


def sync():
    torch.cuda.synchronize()


def med(xs):
    return statistics.median(xs) if xs else None


def iqr(xs):
    """The interquartile range of |xs| (at least two values): the spread kept beside a median."""
    q = statistics.quantiles(xs, n=4)
    return q[2] - q[0]


def timed(fn, reps=7, warm=2):
    out = []
    for i in range(warm + reps):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        if i >= warm:
            out.append(time.perf_counter() - t0)
    return med(out)


# --- per-op kinds ---------------------------------------------------------------------------
N_CHAIN = 400
W = 64


def op_kind_costs():
    """Forward and backward host time per op for each traced kind, on a chain of N_CHAIN ops."""
    torch.manual_seed(0)
    kinds = {}

    def chain(make_step, x0):
        def fwd_bwd():
            x = x0.detach().clone().requires_grad_(True)
            sync()
            t0 = time.perf_counter()
            y = x
            for s in steps:
                y = s(y)
            sync()
            t1 = time.perf_counter()
            y.float().sum().backward()
            sync()
            t2 = time.perf_counter()
            return t1 - t0, t2 - t1
        steps = [make_step(i) for i in range(N_CHAIN)]
        f, b = [], []
        for i in range(7):
            tf, tb = fwd_bwd()
            if i >= 2:
                f.append(tf)
                b.append(tb)
        return med(f) / N_CHAIN, med(b) / N_CHAIN

    x2 = torch.randn(4, 16, W, device=DEV, dtype=DT)
    lin = [nn.Linear(W, W) for _ in range(N_CHAIN)]
    for m in lin:
        nn.init.orthogonal_(m.weight)  # in fp32 on the host (QR has no bf16 kernel); keeps the chain bounded
        m.to(DEV, DT)
    kinds["gemm"] = chain(lambda i: lin[i], x2)
    norms = [nn.LayerNorm(W).to(DEV, DT) for _ in range(N_CHAIN)]
    kinds["norm"] = chain(lambda i: norms[i], x2)
    act = nn.GELU()
    kinds["activation"] = chain(lambda i: act, x2)
    drop = nn.Dropout(0.1).train()
    kinds["dropout"] = chain(lambda i: (lambda y: drop(y) * 0.9), x2)  # dropout + one mul
    y2 = torch.randn_like(x2) * 1e-3
    kinds["elementwise"] = chain(lambda i: (lambda y: y + y2), x2)
    kinds["softmax"] = chain(lambda i: (lambda y: torch.softmax(y, -1)), x2)
    q = torch.randn(1, 4, 16, 16, device=DEV, dtype=DT)
    k = torch.randn(1, 4, 16, 16, device=DEV, dtype=DT)
    kinds["batched_gemm"] = chain(lambda i: (lambda y: torch.matmul(y, k) * 0.25), q)
    kinds["attention"] = chain(lambda i: (lambda y: F.scaled_dot_product_attention(y, k, k, is_causal=True)), q)
    # the dropout and batched_gemm chains carry one extra elementwise op each: remove it
    e_f, e_b = kinds["elementwise"]
    for kk in ("dropout", "batched_gemm"):
        f, b = kinds[kk]
        kinds[kk] = (max(f - e_f, 0.0), max(b - e_b, 0.0))
    return {k: {"fwd_s": v[0], "bwd_s": v[1]} for k, v in kinds.items()}


# --- PyTorch's memory-bound kernels at full size ----------------------------------------------
def kernel_seconds(fn, src, reps=3):
    """Per call, the summed CUDA kernel durations of fn(src) and of its backward, from the
    profiler (device activity only; each pass in its own profile, the gradient cleared between
    backward calls so no accumulation kernel is counted)."""
    from torch.profiler import profile, ProfilerActivity

    def device_s(prof):
        t = 0.0
        for ev in prof.events():
            if ev.device_type == torch.autograd.DeviceType.CUDA:
                t += ev.time_range.elapsed_us() / 1e6
        return t

    a = src.detach().clone().requires_grad_(True)
    fn(a).backward(torch.ones_like(fn(a)))  # warm the kernels and the allocator
    a.grad = None
    sync()
    with profile(activities=[ProfilerActivity.CUDA]) as pf:
        for _ in range(reps):
            o = fn(a)
            del o
        sync()
    outs = [fn(a) for _ in range(reps)]
    grads = [torch.ones_like(o) for o in outs]
    sync()
    with profile(activities=[ProfilerActivity.CUDA]) as pb:
        for o, g in zip(outs, grads):
            o.backward(g)
            a.grad = None
        sync()
    del outs, grads, a
    return device_s(pf) / reps, device_s(pb) / reps


def optimizer_kernels():
    """optimizer_kernels.py's rates, over 256 Mi elements (64 Mi on a GPU of less than 24 GiB)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import optimizer_kernels as ok
    big = torch.cuda.get_device_properties(0).total_memory >= 24 * 2 ** 30
    return {"elements": 1 << (28 if big else 26), "kernels": ok.measure(1 << (28 if big else 26), 64)}


def kernel_rates():
    """Bytes per second that PyTorch's own memory-bound kernels reach on large bf16 tensors
    (forward op and its autograd backward), by kind, counting each tensor read or written once.
    The cost model prices traced memory-bound ops with these instead of its streaming kernel."""
    n = 1 << 26  # 64 Mi elements: 128 MiB per bf16 tensor, past the L2
    x = torch.randn(n, device=DEV, dtype=DT)
    y = torch.randn(n, device=DEV, dtype=DT)
    rows = x.view(-1, 4096)
    ln = nn.LayerNorm(4096).to(DEV, DT)
    e = 2  # bytes per element
    kinds = {
        # kind: (forward fn, forward bytes, backward bytes)
        "elementwise": (lambda a: a + y, 3 * n * e, 2 * n * e),
        "activation": (lambda a: F.gelu(a), 2 * n * e, 3 * n * e),
        # the other activation functions the catalog's families use (recorded; dsplan prices all
        # of them in the activation class until they are read)
        "activation_silu": (lambda a: F.silu(a), 2 * n * e, 3 * n * e),
        "activation_relu": (lambda a: F.relu(a), 2 * n * e, 3 * n * e),
        "activation_gelu_tanh": (lambda a: F.gelu(a, approximate="tanh"), 2 * n * e, 3 * n * e),
        "dropout": (lambda a: F.dropout(a, 0.1, True), 2 * n * e + n, 2 * n * e + n),
        "norm": (lambda a: ln(a.view(-1, 4096)), 2 * n * e, 3 * n * e),
        "softmax": (lambda a: torch.softmax(a.view(-1, 4096), -1), 2 * n * e, 3 * n * e),
        "cast_fp32": (lambda a: a.float(), n * e + n * 4, n * 4 + n * e),
    }
    # fp32 work of eager modules (RMSNorm's upcast math, the loss) and dtype conversions
    x32 = torch.randn(n, device=DEV, dtype=torch.float32)
    y32 = torch.randn(n, device=DEV, dtype=torch.float32)
    # The loss at a training shape: 16 Ki rows of 50,304 (a micro-batch of 16 x 1024 tokens).
    # At 1,334 rows (64 Mi elements) log_softmax ran 15-30 % below its rate at 4 Ki rows and
    # more, where training runs it (tools/probes/loss_kernels.py; docs/stack-costs.md 1b).
    V = 50304
    rows = 16384
    # about ten fp32 tensors of that size are alive while the kernel-timed pass runs
    while rows > 1024 and 10 * 4 * rows * V > 0.6 * torch.cuda.mem_get_info()[0]:
        rows //= 2
    logits = torch.randn(rows, V, device=DEV, dtype=torch.float32)
    nl = logits.numel()
    kinds.update({
        "elementwise_fp32": (lambda a: a * y32, 12 * n, 12 * n, x32),
        "reduce_fp32_lastdim": (lambda a: a.view(-1, 2048).mean(-1, keepdim=True), 4 * n, 4 * n, x32),
        "cast_fp32_to_bf16": (lambda a: a.to(torch.bfloat16), 6 * n, 6 * n, x32),
        "log_softmax_vocab": (lambda a: torch.log_softmax(a, -1), 8 * nl, 12 * nl, logits),
        "rmsnorm_fp32_module": (lambda a: rms(a.view(-1, 2048)), None, None, x),
    })
    w_rms = torch.ones(2048, device=DEV, dtype=DT)

    def rms(h):  # transformers' LlamaRMSNorm forward, as eager tensor ops
        h32 = h.to(torch.float32)
        var = h32.pow(2).mean(-1, keepdim=True)
        return w_rms * (h32 * torch.rsqrt(var + 1e-6)).to(h.dtype)

    out = {}
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for k, spec in kinds.items():
        fn, fb, bb = spec[:3]
        src = spec[3] if len(spec) > 3 else x
        a = src.detach().clone().requires_grad_(True)
        f, b = [], []
        for i in range(8):
            start.record()
            o = fn(a)
            end.record()
            sync()
            tf = start.elapsed_time(end) / 1e3
            g = torch.ones_like(o)
            start.record()
            o.backward(g)
            end.record()
            sync()
            tb = start.elapsed_time(end) / 1e3
            a.grad = None
            del o, g
            if i >= 2:
                f.append(tf)
                b.append(tb)
        out[k] = ({"fwd_s": med(f), "bwd_s": med(b), "elements": a.numel()} if fb is None else
                  {"fwd_bytes_per_s": fb / med(f), "bwd_bytes_per_s": bb / med(b), "elements": a.numel()})
        # The same ops timed by their kernels alone (the profiler's kernel durations): the events
        # above include each op's launch on an idle GPU, which a training step's back-to-back
        # kernels do not pay (docs/stack-costs.md 1). Recorded beside, not read by dsplan yet.
        # A profiler failure must not cost the section its event-timed rates (what dsplan reads).
        try:
            kf, kb = kernel_seconds(fn, a)
            if fb is not None:
                out[k]["kernel_fwd_bytes_per_s"] = fb / kf if kf > 0 else None
                out[k]["kernel_bwd_bytes_per_s"] = bb / kb if kb > 0 else None
            else:
                out[k]["kernel_fwd_s"], out[k]["kernel_bwd_s"] = kf, kb
        except Exception as ex:  # noqa: BLE001
            out[k]["kernel_timing_error"] = repr(ex)[:300]
        del a
    # the reference: a plain device-to-device copy (bytes read + written)
    z = torch.empty_like(x)
    c = []
    for i in range(8):
        start.record()
        z.copy_(x)
        end.record()
        sync()
        if i >= 2:
            c.append(start.elapsed_time(end) / 1e3)
    out["copy"] = {"bytes_per_s": 2 * n * e / med(c)}
    return out


# --- families ---------------------------------------------------------------------------------
def shrink(cfg, layers, dec_layers=None):
    """The family's config at width 64 (4 heads of 16, the same kv-head sharing), |layers| blocks."""
    c = dict(cfg)
    mt = c["model_type"]
    heads = 4
    def setk(keys, v):
        for k in keys:
            if k in c:
                c[k] = v
    hidden_keys = ["hidden_size", "n_embd", "d_model", "word_embed_proj_dim"]
    setk(hidden_keys, 64)
    if mt in ("gpt2",):
        c["n_embd"] = 64
    setk(["num_attention_heads", "n_head", "num_heads"], heads)
    for kv in ("num_key_value_heads", "num_kv_heads"):
        if kv in c and c[kv]:
            orig_h = cfg.get("num_attention_heads") or cfg.get("n_head") or heads
            c[kv] = 1 if c[kv] == 1 else (heads if c[kv] >= orig_h else 2)
    if "head_dim" in c:
        c["head_dim"] = 16
    if c.get("rotary_dim"):  # GPT-J: rotary over a part of each head
        c["rotary_dim"] = 8
    if "d_kv" in c:
        c["d_kv"] = 16
    setk(["intermediate_size", "n_inner", "d_ff", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim"], 128)
    if mt == "gpt2":
        c["n_inner"] = 128
    if "vocab_size" in c:
        c["vocab_size"] = 1024
    setk(["num_hidden_layers", "n_layer", "num_layers"], layers)
    if mt == "t5":
        c["num_layers"] = layers
        c["num_decoder_layers"] = dec_layers if dec_layers is not None else 2
    if "moe_intermediate_size" in c:
        c["moe_intermediate_size"] = 128
    return c


def build(cfgd):
    m, s2s = hf_models.build(cfgd, DEV)
    return m.to(DT).train(), s2s


SEQ, SRC, TGT = 32, 32, 16


def batch_for(model, is_s2s):
    V = model.config.vocab_size
    g = torch.Generator(device=DEV)
    g.manual_seed(1)
    if is_s2s:
        return {"input_ids": torch.randint(0, V, (1, SRC), device=DEV, generator=g),
                "labels": torch.randint(0, V, (1, TGT), device=DEV, generator=g)}
    ids = torch.randint(0, V, (1, SEQ), device=DEV, generator=g)
    return {"input_ids": ids, "labels": ids}


def fwd_bwd_once(model, batch):
    sync()
    t0 = time.perf_counter()
    loss = model(**batch).loss
    sync()
    t1 = time.perf_counter()
    loss.backward()
    sync()
    t2 = time.perf_counter()
    model.zero_grad(set_to_none=True)
    return t1 - t0, t2 - t1


FAMILY_ROUNDS, FAMILY_WARM = 30, 4
FAMILY_DEPTHS = (2, 8)


def family_costs(cfg, rounds=FAMILY_ROUNDS, warm=FAMILY_WARM):
    """Per-block forward/backward host time (plain eager), with and without checkpointing.

    The 2- and 6-block models (plain and checkpointed) are built first and then run in turn, one
    forward+backward each per round, so that a drift of the host's speed between rounds moves
    all four alike; each round gives its own per-block difference, and the estimate is the median
    of those differences (the host of a shared machine has slow spells of several rounds, which a
    median of each model's times taken one after the other turns into a wrong difference).
    The interquartile range of the per-round differences is kept as the estimate's spread."""
    mt = cfg["model_type"]
    out = {"model_type": mt, "rounds": rounds}
    if mt != "t5":  # T5 reports encoder_ and decoder_ blocks; the others one kind of block
        out["block_kind"] = "encoder" if mt == "bert" else "decoder"  # BERT: encoder-only
    variants = [("", None)]
    if mt == "t5":
        variants = [("encoder_", "enc"), ("decoder_", "dec")]
    lo, hi = FAMILY_DEPTHS
    for prefix, which in variants:
        res = {}
        counts = {}
        models = {}
        for ckpt in (False, True):
            for L in (lo, hi):
                c = shrink(cfg, L, 2) if which == "enc" else shrink(cfg, 2, L) if which == "dec" else shrink(cfg, L)
                m, s2s = build(c)
                if not ckpt:
                    counts[L] = (sum(1 for _ in m.modules()), sum(1 for _ in m.parameters()))
                else:
                    m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
                models[(ckpt, L)] = (m, batch_for(m, s2s))
        per = {k: ([], []) for k in models}
        for r in range(warm + rounds):
            for k, (m, b) in models.items():
                f, bw = fwd_bwd_once(m, b)
                if r >= warm:
                    per[k][0].append(f)
                    per[k][1].append(bw)
        for ckpt in (False, True):
            tag = "ckpt_" if ckpt else ""
            for i, ph in enumerate(("fwd_s", "bwd_s")):
                d = [(a - b) / (hi - lo) for a, b in zip(per[(ckpt, hi)][i], per[(ckpt, lo)][i])]
                block = med(d)
                res[tag + "block_" + ph] = block
                res[tag + "block_" + ph.replace("_s", "_iqr_s")] = iqr(d)
                res[tag + "rest_" + ph] = med(per[(ckpt, lo)][i]) - lo * block
        del models
        gc.collect()
        res["modules_per_block"] = (counts[hi][0] - counts[lo][0]) / (hi - lo)
        res["params_per_block"] = (counts[hi][1] - counts[lo][1]) / (hi - lo)
        res["modules_rest"] = counts[lo][0] - lo * res["modules_per_block"]
        res["params_rest"] = counts[lo][1] - lo * res["params_per_block"]
        for k, v in res.items():
            out[prefix + k] = v
    return out


# --- DeepSpeed ZeRO-3 hooks ---------------------------------------------------------------------
def ds_config(stage, threshold):
    c = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
         "bf16": {"enabled": True},
         "optimizer": {"type": "AdamW", "params": {"lr": 1e-5, "torch_adam": True}},
         "zero_optimization": {"stage": stage},
         "steps_per_print": 10 ** 9, "wall_clock_breakdown": False}
    if stage == 3:
        c["zero_optimization"]["stage3_param_persistence_threshold"] = threshold
    return c


def engine_times(model, cfg, make_loss, reps=12, warm=3):
    import deepspeed
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
    f, b, s = interleaved_step_times({0: (engine, make_loss)}, reps, warm)[0]
    release_engine(engine)
    del engine
    return med(f), med(b), med(s)


class Leaf(nn.Module):
    def __init__(self, bias):
        super().__init__()
        self.lin = nn.Linear(W, W, bias=bias)

    def forward(self, x):
        return self.lin(x)


class Pair(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(W, W, bias=False)
        self.b = nn.Linear(W, W, bias=False)

    def forward(self, x):
        return self.b(self.a(x))


class Stack(nn.Module):
    def __init__(self, kind, n):
        super().__init__()
        mk = {"leaf": lambda: nn.Linear(W, W, bias=False), "leaf_bias": lambda: nn.Linear(W, W, bias=True),
              "pair": Pair}[kind]
        self.blocks = nn.ModuleList([mk() for _ in range(n)])

    def forward(self, x):
        for m in self.blocks:
            x = m(x)
        return x


def stack_counts(kind, n):
    # (submodules that run hooks, parameters), the root module included
    mods = {"leaf": n, "leaf_bias": n, "pair": 3 * n}[kind] + 1  # + the root (the ModuleList is never called)
    params = {"leaf": n, "leaf_bias": 2 * n, "pair": 2 * n}[kind]
    return mods, params


def lstsq(rows):
    """Least squares t = a + b*modules + c*params over rows (modules, params, t)."""
    import numpy as np
    A = np.array([[1.0, r[0], r[1]] for r in rows])
    y = np.array([r[2] for r in rows])
    coef, *_ = np.linalg.lstsq(A, y, rcond=None)
    resid = y - A @ coef
    return {"intercept_s": float(coef[0]), "per_module_s": float(coef[1]), "per_param_s": float(coef[2]),
            "max_abs_residual_s": float(abs(resid).max())}


Z3_GRID_ROUNDS, Z3_GRID_WARM = 20, 3


def zero3_synthetic(rounds=Z3_GRID_ROUNDS, warm=Z3_GRID_WARM):
    """Stage 3 minus stage 2 on stacks of tiny modules. The two engines of a stack are built first
    and stepped in turn, one step each per round; each round gives its own stage-3-minus-stage-2
    difference and a row keeps the median of those (as family_costs: a slow spell of the host
    moves both engines alike). The fit is over the rows' medians."""
    import deepspeed
    grid = []
    for kind in ("leaf", "leaf_bias", "pair"):
        for n in (32, 128):
            row = {"kind": kind, "n": n}
            row["modules"], row["params"] = stack_counts(kind, n)
            engines = {}
            for stage in (2, 3):
                torch.manual_seed(0)
                model = Stack(kind, n).to(DEV)
                e, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                                  config=ds_config(stage, 0))
                engines[stage] = e
            x = torch.randn(1, 8, W, device=DEV, dtype=DT)
            times = interleaved_step_times({k: (e, lambda e: e(x).float().sum()) for k, e in engines.items()},
                                           rounds, warm)
            for stage in (2, 3):
                row[f"s{stage}"] = {ph: med(v) for ph, v in zip(("fwd_s", "bwd_s", "step_s"), times[stage])}
            row["s3_minus_s2"] = {}
            for i, ph in enumerate(("fwd_s", "bwd_s", "step_s")):
                d = [a - b for a, b in zip(times[3][i], times[2][i])]
                row["s3_minus_s2"][ph] = med(d)
                row["s3_minus_s2"][ph.replace("_s", "_iqr_s")] = iqr(d)
            grid.append(row)
            print(f"zero3 grid {kind} n={n}: {row}", file=sys.stderr)
            for e in engines.values():
                release_engine(e)
            del engines
    fit = {}
    for phase in ("fwd_s", "bwd_s", "step_s"):
        fit[phase] = lstsq([(r["modules"], r["params"], r["s3_minus_s2"][phase]) for r in grid])
    return {"grid": grid, "fit_stage3_minus_stage2": fit, "rounds": rounds,
            "note": "every parameter partitioned (stage3_param_persistence_threshold 0); width 64; "
                    "stage 2 and stage 3 engines stepped in turn, median of per-round differences"}


def zero3_release():
    """ZeRO-3's cost of releasing a parameter after a module and gathering it again at its next
    use. Stacks of tiny modules hold far fewer than stage3_max_reuse_distance (1e9) elements, so
    with the default every parameter, once gathered, stays for the whole step; with a reuse
    distance of 0 each is released after every use and gathered again in backward. The same
    stacks at both settings (and at stage 2), one step each per round in turn."""
    import deepspeed
    rows = []
    for kind in ("leaf", "pair"):
        for n in (32, 128):
            engines = {}
            for tag, stage, reuse in (("s2", 2, None), ("s3", 3, None), ("s3_reuse0", 3, 0)):
                torch.manual_seed(0)
                model = Stack(kind, n).to(DEV)
                cfg = ds_config(stage, 0)
                if reuse is not None:
                    cfg["zero_optimization"]["stage3_max_reuse_distance"] = reuse
                e, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
                engines[tag] = e
            x = torch.randn(1, 8, W, device=DEV, dtype=DT)
            times = interleaved_step_times({k: (e, lambda e: e(x).float().sum()) for k, e in engines.items()},
                                           12, 3)
            row = {"kind": kind, "n": n}
            row["modules"], row["params"] = stack_counts(kind, n)
            for k, v in times.items():
                row[k] = {"fwd_s": med(v[0]), "bwd_s": med(v[1]), "step_s": med(v[2])}
            rows.append(row)
            print(f"zero3_release {kind} n={n}: {row}", file=sys.stderr)
            for e in engines.values():
                release_engine(e)
    fit = {}
    for ph in ("fwd_s", "bwd_s"):
        fit["release_" + ph] = lstsq([(r["modules"], r["params"], r["s3_reuse0"][ph] - r["s3"][ph]) for r in rows])
        fit["stage3_" + ph] = lstsq([(r["modules"], r["params"], r["s3"][ph] - r["s2"][ph]) for r in rows])
    return {"grid": rows, "fit": fit,
            "note": "width 64, every parameter partitioned (threshold 0); release_*: reuse distance 0 "
                    "minus the default 1e9; stage3_*: the default minus stage 2"}


def block_counts(model, batch, is_s2s):
    """Submodule forward calls, parameter tensors and tensors passed in and out of submodules in
    one forward of |model| (plain PyTorch): what ZeRO-3's hooks iterate over."""
    calls = [0, 0, 0]  # module calls, tensors in, tensors out

    def ntensors(x):
        if isinstance(x, torch.Tensor):
            return 1
        if isinstance(x, (list, tuple)):
            return sum(ntensors(y) for y in x)
        if isinstance(x, dict):
            return sum(ntensors(y) for y in x.values())
        return 0

    def hook(mod, args, kwargs, out):
        calls[0] += 1
        calls[1] += ntensors(args) + ntensors(kwargs)
        calls[2] += ntensors(out)

    hs = [m.register_forward_hook(hook, with_kwargs=True) for m in model.modules()]
    with torch.no_grad():
        model(**batch)
    for h in hs:
        h.remove()
    return {"module_calls": calls[0], "tensors_in": calls[1], "tensors_out": calls[2],
            "param_tensors": sum(1 for _ in model.parameters()),
            "gathered_tensors": sum(1 for p in model.parameters() if p.numel() > Z3_THRESHOLD)}


Z3_THRESHOLD = 300  # width 64: matrices (>= 64*16 elements) are gathered, vectors (<= 192) persist
Z3_LAYERS = (2, 6)


def zero3_family(cfg, rounds=15, warm=3):
    """ZeRO-3's extra host time per block: stage 3 minus stage 2, 6- minus 2-block models, plain
    and under non-reentrant checkpointing. The eight engines of a family (stage x blocks x
    checkpointing) are built first and then stepped in turn, one step each per round, so that a
    drift of the host's speed affects all eight alike; medians over the rounds."""
    import deepspeed
    mt = cfg["model_type"]
    out = {"model_type": mt, "threshold": Z3_THRESHOLD, "layers": list(Z3_LAYERS), "rounds": rounds}
    variants = [("", None)] if mt != "t5" else [("encoder_", "enc"), ("decoder_", "dec")]
    for prefix, which in variants:
        engines = {}
        counts = {}
        for L in Z3_LAYERS:
            c = shrink(cfg, L, 2) if which == "enc" else shrink(cfg, 2, L) if which == "dec" else shrink(cfg, L)
            for ckpt in (False, True):
                for stage in (2, 3):
                    torch.manual_seed(0)
                    m, s2s = build(c)
                    m = m.float()  # DeepSpeed's bf16 engine casts
                    batch = batch_for(m, s2s)
                    if stage == 2 and not ckpt:
                        counts[L] = block_counts(m, batch, s2s)
                    if ckpt:
                        m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
                    e, _, _, _ = deepspeed.initialize(model=m, model_parameters=m.parameters(),
                                                      config=ds_config(stage, Z3_THRESHOLD))
                    engines[(stage, L, ckpt)] = (e, batch)
        times = interleaved_step_times(
            {k: (e, lambda e, b=b: e(**b).loss) for k, (e, b) in engines.items()}, rounds, warm)
        t = {k: tuple(med(x) for x in v) for k, v in times.items()}
        spread = {k: tuple(iqr(x) for x in v) for k, v in times.items()}
        n = Z3_LAYERS[1] - Z3_LAYERS[0]
        for ckpt in (False, True):
            tag = "ckpt_" if ckpt else ""
            for i, ph in enumerate(("fwd_s", "bwd_s", "step_s")):
                d3 = (t[(3, Z3_LAYERS[1], ckpt)][i] - t[(3, Z3_LAYERS[0], ckpt)][i]) / n
                d2 = (t[(2, Z3_LAYERS[1], ckpt)][i] - t[(2, Z3_LAYERS[0], ckpt)][i]) / n
                out[prefix + tag + "block_stage3_extra_" + ph] = d3 - d2
                out[prefix + tag + "block_stage2_" + ph] = d2
        for key in counts[Z3_LAYERS[0]]:
            out[prefix + "block_" + key] = (counts[Z3_LAYERS[1]][key] - counts[Z3_LAYERS[0]][key]) / n
        out[prefix + "raw_median"] = {f"s{k[0]}_L{k[1]}{'_ckpt' if k[2] else ''}": v for k, v in t.items()}
        out[prefix + "raw_iqr"] = {f"s{k[0]}_L{k[1]}{'_ckpt' if k[2] else ''}": v for k, v in spread.items()}
        for e, _ in engines.values():
            release_engine(e)
        del engines
    return out


Z3_CALLS_WIDTH = 1024
Z3_CALLS_DEPTHS = (8, 24)


def zero3_calls(width=Z3_CALLS_WIDTH, depths=Z3_CALLS_DEPTHS, rounds=10, warm=3):
    """Per gather call and per reduce-bucket flush (module docstring), with zero3_gather_calls'
    stacks() and its VARIANTS set to these three (restored after)."""
    import zero3_gather_calls as zg
    lo, hi = depths
    w2 = width * width
    # (stage, prefetch bucket, max live parameters, reduce bucket), as zg.VARIANTS
    variants = {"s3_b0": (3, 0, 10 ** 9, hi * w2),            # a gather call per module
                "s3_ball": (3, 10 ** 12, 10 ** 12, hi * w2),  # one call, one flush per step
                "s3_r1": (3, 10 ** 12, 10 ** 12, w2)}         # a flush per module
    attrib = zg.Attrib()
    attrib.install()  # wraps DeepSpeed's hooks for the rest of the process: the last section
    saved = dict(zg.VARIANTS)
    zg.VARIANTS.clear()
    zg.VARIANTS.update(variants)
    try:
        row = zg.stacks([width], depths, rounds, warm, attrib)[0]
    finally:
        zg.VARIANTS.clear()
        zg.VARIANTS.update(saved)
    ph = ("fwd_s", "bwd_s", "step_s")
    mins = {v: {n: dict(zip(ph, map(min, row["raw"][str((v, n))]))) for n in depths} for v in variants}
    per = {v: {p: (m[hi][p] - m[lo][p]) / (hi - lo) for p in ph} for v, m in mins.items()}
    counts = {v: {"gather_calls": {p: c["calls"] for p, c in a["gather_calls"].items()},
                  "flushes": {r["phase"]: r["count"] for r in a["fns"]
                              if r["fn"].endswith("__reduce_and_partition_ipg_grads")}}
              for v, a in row["attrib"].items()}
    return {"per_gather_call_s": per["s3_b0"]["fwd_s"] - per["s3_ball"]["fwd_s"],
            "per_bucket_flush_s": per["s3_r1"]["bwd_s"] - per["s3_ball"]["bwd_s"],
            "width": width, "depths": list(depths), "rounds": rounds, "variants": variants,
            "min_s": mins, "per_module_min_s": per, "attributed_counts": counts, "stacks": row}


BF16_STEP_SIZES = (64, 256, 768)


def bf16_step():
    import bf16_optimizer_parts as parts
    rows, wrappers = [], set()
    for clip in (0.0, 1e-6):
        for n in BF16_STEP_SIZES:
            times, wrapper, grad_norm, clipped = parts.host_parts(n, clip)
            wrappers.add(wrapper)
            rows.append({"tensors": n, "gradient_clipping": clip, "step_s": times["step"],
                         "update_hp_grads_s": times["update"], "grad_norm": grad_norm,
                         "clipped": clipped})
    return {"wrapper": ",".join(sorted(wrappers)), "rows": rows}


def cpu_model():
    """The host CPU's model name (/proc/cpuinfo), or None: host costs differ between CPU models,
    and a device machine may be another one on each call (docs/validation/deepspeed/sameday-1204f)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def _cast_copy_points(reps, warm):
    points = []
    for numel in [1 << k for k in range(14, 28)]:
        src = torch.randn(numel, device="cuda", dtype=torch.bfloat16)
        dst = torch.empty(numel, dtype=torch.float32).pin_memory()
        ts = []
        for i in range(warm + reps):
            sync()
            t = time.perf_counter()
            dst.copy_(src)
            dt = time.perf_counter() - t
            if i >= warm:
                ts.append(dt)
        points.append([2 * numel, med(ts)])
        del src, dst
    return points


# What `dsplan --malloc-heap` tells users to export (core/plan.h kMallocHeapEnv).
MALLOC_HEAP_ENV = {"MALLOC_ARENA_MAX": "1", "MALLOC_MMAP_MAX_": "0",
                   "MALLOC_TRIM_THRESHOLD_": "68719476736"}


def cast_copy(reps=5, warm=2, heap_child=True):
    """PyTorch's blocking copy of a bf16 CUDA tensor into a pinned fp32 CPU tensor (ZeRO-3's
    offloaded gradient copy, `fp32_grad_tensor.copy_(grad_buffer)`): PyTorch copies into a
    pageable temporary of the source's dtype and converts on the host. Median seconds by source
    bytes, 32 kB to 256 MiB. The same tensor pair is copied repeatedly, as in a training loop:
    below glibc's largest mmap threshold (32 MiB) the temporary comes from the heap, whose pages
    stay mapped; from 32 MiB up it is a fresh mapping on every copy, so those points include
    faulting every page in (dsplan prices the two regimes from their own points).

    Then the same curve in a child process started with malloc held to its heap
    (`points_heap`: MALLOC_ARENA_MAX=1 MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=64GiB, which
    glibc reads at start, as `dsplan --malloc-heap` tells users to set them). If the child
    fails, `points_heap` is missing and `heap_error` says why."""
    out = {"threads": torch.get_num_threads()}
    env = {k: v for k, v in os.environ.items() if k.startswith("MALLOC_") or k.startswith("GLIBC_TUNABLES")}
    if env:
        out["malloc_env"] = env  # started with malloc tunables: "points" are not the default regime
    out["points"] = _cast_copy_points(reps, warm)
    if not heap_child:
        return out
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "heap.json")
        cmd = [sys.executable, os.path.abspath(__file__), "--no-deepspeed", "--only", "cast_copy",
               "--no-heap-child", "--out", path]
        try:
            r = subprocess.run(cmd, env={**os.environ, **MALLOC_HEAP_ENV}, capture_output=True,
                               text=True, timeout=300)
            child = json.load(open(path)) if os.path.exists(path) else {}
            pts = child.get("cast_copy", {}).get("points")
            if r.returncode != 0 or not pts:
                raise RuntimeError(f"child rc={r.returncode}: {r.stderr[-600:]}")
            out["points_heap"] = pts
            out["heap_env"] = MALLOC_HEAP_ENV
        except Exception as e:  # noqa: BLE001
            out["heap_error"] = repr(e)
    return out


def versions(have_ds):
    v = {"python": platform.python_version(), "torch": torch.__version__,
         "cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name(0),
         "cpu": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
         "cpu_model": cpu_model()}
    try:
        import transformers
        v["transformers"] = transformers.__version__
    except Exception:  # noqa: BLE001
        v["transformers"] = None
    if have_ds:
        import deepspeed
        v["deepspeed"] = deepspeed.__version__
    else:
        v["deepspeed"] = None
    return v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="")
    ap.add_argument("--catalog", default=os.path.join(HERE, "..", "..", "models"))
    ap.add_argument("--zero3-models", default=None,
                    help="the models whose ZeRO-3 block hooks are measured (default: --models)")
    ap.add_argument("--no-deepspeed", action="store_true")
    ap.add_argument("--out", default="-")
    ap.add_argument("--no-heap-child", action="store_true",
                    help="cast_copy: skip the curve of a child process with malloc held to its heap")
    ap.add_argument("--only", default="op_kinds,kernels,cast_copy,optimizer_kernels,families,zero3,bf16_step,"
                    "zero3_calls",
                    help="comma-separated sections to measure (also: zero3_release, "
                         "zero3_families)")
    args = ap.parse_args()
    have_ds = False
    if not args.no_deepspeed:
        try:
            import deepspeed  # noqa: F401
            for k, val in dict(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                               MASTER_PORT=os.environ.get("MASTER_PORT", "29511")).items():
                os.environ.setdefault(k, val)
            deepspeed.init_distributed()
            have_ds = True
        except Exception as e:  # noqa: BLE001
            print(f"stack_costs: DeepSpeed not usable ({e!r}); measuring PyTorch only", file=sys.stderr)
    torch.cuda.set_device(0)
    doc = {"schema": "dsplan-stack-costs/1", "versions": versions(have_ds),
           "date": time.strftime("%Y-%m-%d"), "errors": {}}
    t0 = time.time()

    def save():
        doc["wall_s"] = round(time.time() - t0, 1)
        text = json.dumps(doc, indent=1)
        if args.out == "-":
            return
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, args.out)

    def section(key, fn, label=None):
        try:
            doc[key] = fn()
        except Exception:  # noqa: BLE001
            doc["errors"][label or key] = traceback.format_exc()[-3000:]
        print(f"stack_costs: {label or key} done at {time.time() - t0:.1f} s", file=sys.stderr)
        gc.collect()
        torch.cuda.empty_cache()
        save()

    only = set(args.only.split(","))
    if "op_kinds" in only:
        section("op_kinds", op_kind_costs)
    if "kernels" in only:
        section("kernels", kernel_rates)
    if "cast_copy" in only:
        section("cast_copy", lambda: cast_copy(heap_child=not args.no_heap_child))
    if "optimizer_kernels" in only:
        section("optimizer_kernels", optimizer_kernels)
    cfgs = {}
    for name in [m for m in args.models.split(",") if m]:
        try:
            cfgs[name] = load_catalog(args.catalog, name)
        except Exception as e:  # noqa: BLE001
            doc["errors"]["catalog:" + name] = repr(e)
    doc["families"] = {}
    for name, cfg in (cfgs.items() if "families" in only else []):
        section("_family", lambda: dict(family_costs(cfg), measured_with=name), "family:" + name)
        if "_family" in doc:
            doc["families"][cfg["model_type"]] = doc.pop("_family")
    if have_ds:
        if "zero3" in only:
            section("zero3", zero3_synthetic)
        if "zero3_release" in only:
            section("zero3_release", zero3_release)
        doc["zero3_families"] = {}
        z3 = cfgs if args.zero3_models is None else {
            n: load_catalog(args.catalog, n) for n in args.zero3_models.split(",") if n}
        for name, cfg in (z3.items() if "zero3_families" in only else []):
            section("_z3", lambda: dict(zero3_family(cfg), measured_with=name), "zero3_family:" + name)
            if "_z3" in doc:
                doc["zero3_families"][cfg["model_type"]] = doc.pop("_z3")
        if "bf16_step" in only:
            section("bf16_step", bf16_step)
        # last: it wraps DeepSpeed's hook functions with timers for the rest of the process
        if "zero3_calls" in only:
            section("zero3_calls", zero3_calls)
    save()
    if args.out == "-":
        print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
