#!/usr/bin/env python3
"""Emulates DeepSpeed 0.14.5's ZeRO-3 PartitionedParameterCoordinator over a module trace, without
torch: which non-persistent parameters are gathered at the end of the forward and when the
backward starts, in a step with a complete trace (the second and later).

It follows partitioned_param_coordinator.py line by line where it matters: fetch_sub_module
(gather the module's parameters; pop them off the parameter queue; prefetch from the queue until
stage3_prefetch_bucket_size elements of not-available parameters, at most
stage3_max_live_parameters minus what is available, marking every popped parameter, available or
not, with the step of its next use), release_sub_module / __params_to_release (release unless
marked for a later step or used again within stage3_max_reuse_distance elements of the trace,
which runs on into the backward; cached per module and step as the lru_cache there does), hooks
on every module (parameter_offload.py). The module trees are transformers' Qwen2ForCausalLM and
GPT2LMHeadModel written out by hand (forward call order; the backward order is the reverse with
each container's pre-backward hook before its children's), with the defaults (persistence 1e5,
bucket 5e7, max live 1e9, reuse 1e9).

--linear-views adds what a model built outside deepspeed.zero.Init keeps on top: PyTorch's
torch.nn.functional.linear saves weight.t() for backward, a view of the gathered buffer, so a
Linear released after its forward keeps its weight allocated until its backward runs
(docs/deepspeed-facts.md, "What keeps a released weight"); the line is then the elements
allocated when the backward starts, gathered or held.

usage: python3 tools/dev/zero3_coordinator_emu.py
       python3 tools/dev/zero3_coordinator_emu.py --model qwen2-1.5b --max-live 3e8 --reuse 1e9 \
           --bucket 5e7 [--linear-views]
           (one line: the elements gathered, or allocated, when the backward starts)
"""
import collections

PERSIST = 100000
BUCKET = 50_000_000
MAX_LIVE = 1_000_000_000
REUSE = 1_000_000_000

class P:
    _n = 0
    def __init__(s, name, numel):
        s.name, s.numel = name, numel
        s.id = P._n; P._n += 1
        s.persist = numel <= PERSIST
        s.avail = s.persist
        s.active = set()

class M:
    def __init__(s, name, params=(), linear=False):
        s.name, s.params, s.linear = name, list(params), linear

def run(fwd, bwd, stop_step=None):
    """(non-persistent elements gathered, the coordinator's available count, elements a Linear's
    saved view holds after its release) just before trace step |stop_step| runs."""
    trace = fwd + bwd
    held = {}  # param -> elements kept by a released nn.Linear's saved view, until its backward
    order = []  # (param, step)
    for step, m in enumerate(trace):
        for p in sorted(set(m.params), key=lambda p: p.id):
            order.append((p, step))
    queue = collections.deque(order)
    fetched_for = collections.defaultdict(lambda: -10**10)
    n_avail = 0
    cache = {}
    def gather(ps):
        nonlocal n_avail
        for p in ps:
            if not p.avail:
                p.avail = True
                n_avail += p.numel
    def params_to_release(m, step):
        key = (id(m), step)
        if key in cache:
            return cache[key]
        rel = set(p for p in m.params if not p.persist)
        for p in m.params:
            if fetched_for[p] > step:
                rel.discard(p)
        trav = 0
        for mm in trace[step:]:
            if trav >= REUSE:
                break
            for p in mm.params:
                rel.discard(p)
                trav += p.numel
        cache[key] = rel
        return rel
    for step, m in enumerate(trace):
        # fetch
        gather(m.params)
        for p in m.params:
            p.active.add(id(m))
        # pop the current module's params off the queue
        need = set(p for p in m.params if fetched_for[p] < step)
        got = set()
        while queue and len(got) < len(need):
            p, s = queue.popleft()
            fetched_for[p] = s
            got.add(p)
        assert got == need, (m.name, [p.name for p in got], [p.name for p in need])
        # prefetch
        mx = min(MAX_LIVE - n_avail, BUCKET)
        pre, numel = [], 0
        while queue and numel < mx:
            p, s = queue.popleft()
            do = (not p.avail) and p not in pre
            fetched_for[p] = max(fetched_for[p], s)
            if do:
                pre.append(p); numel += p.numel
        gather(pre)
        cur = step + 1
        if stop_step is not None and step == stop_step:
            allp = set(pp for mm in trace for pp in mm.params)
            return (sum(p.numel for p in allp if p.avail and not p.persist), n_avail,
                    sum(held.values()))
        # release after the module (forward and backward alike)
        rel = params_to_release(m, cur)
        for p in m.params:
            p.active.discard(id(m))
            if p in rel and p.avail and not p.active and not p.persist:
                p.avail = False
                n_avail -= p.numel
                if m.linear and step < len(fwd) and p is m.params[0]:
                    held[p] = p.numel  # the weight (addmm saves no bias)
        if m.linear and step >= len(fwd):
            for p in m.params:
                held.pop(p, None)  # the Linear's backward has used its saved view
    return None

def qwen2_1_5b():
    H, I, KV, V, L = 1536, 8960, 256, 151936, 28
    root = M("root"); model = M("model")
    emb_w = P("embed", V * H)
    emb = M("embed_tokens", [emb_w]); rot = M("rotary")
    fwd = [root, model, emb, rot]
    layers = []
    for i in range(L):
        lay = M(f"l{i}")
        iln = M(f"l{i}.iln", [P(f"l{i}.iln.w", H)])
        att = M(f"l{i}.attn")
        q = M(f"l{i}.q", [P("qw", H * H), P("qb", H)], True)
        k = M(f"l{i}.k", [P("kw", KV * H), P("kb", KV)], True)
        v = M(f"l{i}.v", [P("vw", KV * H), P("vb", KV)], True)
        o = M(f"l{i}.o", [P("ow", H * H)], True)
        pln = M(f"l{i}.pln", [P(f"l{i}.pln.w", H)])
        mlp = M(f"l{i}.mlp")
        g = M(f"l{i}.gate", [P("gw", I * H)], True); act = M(f"l{i}.act")
        u = M(f"l{i}.up", [P("uw", I * H)], True); d = M(f"l{i}.down", [P("dw", H * I)], True)
        fwd += [lay, iln, att, q, k, v, o, pln, mlp, g, act, u, d]
        layers.append((lay, iln, att, q, k, v, o, pln, mlp, g, act, u, d))
    norm = M("norm", [P("norm.w", H)]); head = M("lm_head", [emb_w], True)
    fwd += [norm, head]
    bwd = [root, head, model, norm]
    for (lay, iln, att, q, k, v, o, pln, mlp, g, act, u, d) in reversed(layers):
        bwd += [lay, mlp, d, act, g, u, pln, att, o, v, k, q, iln]
    bwd += [emb]
    return fwd, bwd, root

def gpt2_xl():
    H, V, L, T = 1600, 50257, 48, 1024
    root = M("root"); tr = M("transformer")
    wte_w = P("wte", V * H)
    wte = M("wte", [wte_w]); wpe = M("wpe", [P("wpe", T * H)]); drop = M("drop")
    fwd = [root, tr, wte, wpe, drop]
    blocks = []
    for i in range(L):
        b = M(f"h{i}"); ln1 = M("ln1", [P("ln1w", H), P("ln1b", H)]); at = M("attn")
        ca = M("c_attn", [P("caw", H * 3 * H), P("cab", 3 * H)]); cp = M("c_proj", [P("cpw", H * H), P("cpb", H)])
        rd = M("resid_drop"); ln2 = M("ln2", [P("ln2w", H), P("ln2b", H)]); mlp = M("mlp")
        fc = M("c_fc", [P("fcw", H * 4 * H), P("fcb", 4 * H)]); act = M("act")
        mp = M("mlp_proj", [P("mpw", 4 * H * H), P("mpb", H)]); md = M("mlp_drop")
        fwd += [b, ln1, at, ca, cp, rd, ln2, mlp, fc, act, mp, md]
        blocks.append((b, ln1, at, ca, cp, rd, ln2, mlp, fc, act, mp, md))
    lnf = M("ln_f", [P("lnfw", H), P("lnfb", H)]); head = M("lm_head", [wte_w], True)
    fwd += [lnf, head]
    bwd = [root, head, tr, lnf]
    for (b, ln1, at, ca, cp, rd, ln2, mlp, fc, act, mp, md) in reversed(blocks):
        bwd += [b, mlp, md, mp, act, fc, ln2, at, rd, cp, ca, ln1]
    bwd += [drop, wpe, wte]
    return fwd, bwd, root

MODELS = {"qwen2-1.5b": qwen2_1_5b, "gpt2-xl": gpt2_xl}


def at_backward(model, max_live, reuse, bucket):
    """(non-persistent elements gathered, elements released Linears' saved views hold) after the
    backward root's fetch and prefetch."""
    global MAX_LIVE, REUSE, BUCKET
    MAX_LIVE, REUSE, BUCKET = int(max_live), int(reuse), int(bucket)
    f = MODELS[model]
    n_fwd = len(f()[0])
    P._n = 0
    fwd, bwd, _ = f()
    gathered, _, held = run(fwd, bwd, stop_step=n_fwd)
    return gathered, held


def gathered_at_backward(model, max_live, reuse, bucket):
    """Non-persistent elements gathered after the backward root's fetch and prefetch."""
    return at_backward(model, max_live, reuse, bucket)[0]


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=sorted(MODELS))
    ap.add_argument("--max-live", type=float, default=1e9)
    ap.add_argument("--reuse", type=float, default=1e9)
    ap.add_argument("--bucket", type=float, default=5e7)
    ap.add_argument("--linear-views", action="store_true",
                    help="the model is built outside deepspeed.zero.Init: add what released "
                         "Linears' saved views hold")
    a = ap.parse_args()
    if a.model:
        g, h = at_backward(a.model, a.max_live, a.reuse, a.bucket)
        print(g + h if a.linear_views else g)
        raise SystemExit(0)
    for name, f in [("qwen2-1.5b", qwen2_1_5b), ("gpt2-xl", gpt2_xl)]:
        n_fwd = len(f()[0])
        for label, stop in [("end of forward (lm_head fetched)", n_fwd - 1),
                            ("backward starts (the root's pre-backward fetch)", n_fwd)]:
            P._n = 0
            fwd, bwd, _ = f()
            g, n, _ = run(fwd, bwd, stop_step=stop)
            print(f"{name}: {label}: gathered non-persistent {g / 1e6:.1f} M elements, "
                  f"{2 * g / 2**20:.0f} MiB in bf16 (n_available {n / 1e6:.1f} M)")
