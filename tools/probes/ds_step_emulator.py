"""Emulate one DeepSpeed 0.14.5 training step's GPU allocations (world size 1) in plain PyTorch.

Used to check docs/research/deepspeed-memory-timeline.md against the calibration runs
(../shared/calibration/deepspeed-h200.jsonl). No DeepSpeed needed: the emulators reproduce the
tensor allocations and frees of BF16_Optimizer (stage 0) and DeepSpeedZeroOptimizer (stage 1, 2)
as read from the DeepSpeed source, with torch.optim.AdamW (foreach) as the inner optimizer.
Every interval between two marks records (allocated at the mark, peak since the previous mark).

Run: python3 tools/probes/ds_step_emulator.py [out.json]
"""
import gc, json, sys, time
import torch
from transformers import GPT2Config, GPT2LMHeadModel, T5Config, T5ForConditionalGeneration

MiB = 2 ** 20
dev = torch.device("cuda")
RBS = 500_000_000


class Tracker:
    def __init__(self):
        self.rows = []
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()

    def mark(self, tag):
        torch.cuda.synchronize()
        self.rows.append((tag, torch.cuda.memory_allocated() / MiB, torch.cuda.max_memory_allocated() / MiB))
        torch.cuda.reset_peak_memory_stats()

    def peak(self):
        return max(r[2] for r in self.rows)

    def top(self, n=6):
        return [(t, round(a, 1), round(p, 1)) for t, a, p in sorted(self.rows, key=lambda r: -r[2])[:n]]

    def named(self):
        return [(t, round(a, 1), round(p, 1)) for t, a, p in self.rows if not t.startswith("g:")]


GPT2XL = dict(vocab_size=50257, n_positions=1024, n_embd=1600, n_layer=48, n_head=25)
T5L = dict(vocab_size=32128, d_model=1024, d_kv=64, d_ff=4096, num_layers=24, num_decoder_layers=24, num_heads=16,
           feed_forward_proj="relu", tie_word_embeddings=True)


def build(name):
    if name == "gpt2-xl":
        cfg = GPT2Config(**GPT2XL)
        cls = GPT2LMHeadModel
    else:
        cfg = T5Config(**T5L)
        cls = T5ForConditionalGeneration
    cfg._attn_implementation = "sdpa"
    with torch.device(dev):
        m = cls(cfg)
    m.train()
    m = m.to(torch.bfloat16)  # the engine's module.bfloat16(): fp32 copy freed param by param
    params = [p for p in m.parameters() if p.requires_grad]
    return m, params


def batch(name, mb):
    g = torch.Generator(device="cpu").manual_seed(0)
    if name == "gpt2-xl":
        ids = torch.randint(0, 50257, (mb, 1024), generator=g).to(dev)
        return dict(input_ids=ids, labels=ids)
    src = torch.randint(0, 32128, (mb, 512), generator=g).to(dev)
    lab = torch.randint(0, 32128, (mb, 128), generator=g).to(dev)
    return dict(input_ids=src, labels=lab)


def flatten_params(params):
    flat = torch.cat([p.data.reshape(-1) for p in params])
    off = 0
    for p in params:
        n = p.numel()
        p.data = flat.narrow(0, off, n).view_as(p)
        off += n
    return flat


def fwd(model, b, tr):
    tr.mark("pre_fwd")
    out = model(**b)
    tr.mark("fwd_end")
    return out


def add_logits_hook(out, tr):
    out.logits.register_hook(lambda g: tr.mark("loss_bwd_done(logits grad)"))


# ---------------------------------------------------------------- stage 0: BF16_Optimizer
def run_s0(model, params, b, steps, tr, clear_after_step=False):
    flat = flatten_params(params)
    master = flat.clone().float().detach()          # fp32_groups_flat_partition (clone bf16 then float)
    master.requires_grad = True
    gflat = torch.zeros_like(flat, dtype=torch.float32)  # fp32_groups_gradients_flat
    views, off = [], 0
    for p in params:
        views.append(gflat.narrow(0, off, p.numel())); off += p.numel()
    opt = torch.optim.AdamW([master], lr=1e-4, weight_decay=0.0)
    tr.mark("init_done")
    for s in range(steps):
        out = fwd(model, b, tr)
        add_logits_hook(out, tr)
        for p in params:               # clear_lp_grads (set_to_none)
            p.grad = None
        tr.mark("bwd_start(lp grads cleared)")
        out.loss.backward()
        tr.mark("bwd_end")
        for p, v in zip(params, views):  # update_hp_grads
            v.add_(p.grad.view(-1).to(torch.float32))
        tr.mark("update_hp_grads")
        t = gflat.to(torch.bfloat16)    # engine allreduce_gradients -> allreduce_bucket (bf16 comm dtype)
        gflat.copy_(t); del t
        tr.mark("allreduce(bf16 copy)")
        norms = [torch.norm(v, 2.0) for v in views]   # get_global_norm_of_tensors
        tot = torch.norm(torch.stack(norms), 2.0); del norms
        tr.mark("norm")
        clip = torch.clamp(1.0 / (tot + 1e-6), max=1.0)
        torch._foreach_mul_(views, clip)
        tr.mark("clip")
        master.grad = gflat
        opt.step()
        tr.mark("adamw_step")
        flat.copy_(master.data)         # update_lp_params
        gflat.zero_()                   # clear_hp_grads
        master.grad = None
        if clear_after_step:
            for p in params:
                p.grad = None
        tr.mark("step_end")
        del out
        tr.mark("out_released")
    return opt, master, gflat, flat


# ---------------------------------------------------------------- stage 1/2: DeepSpeedZeroOptimizer
class Zero12:
    def __init__(self, params, stage):
        self.params, self.stage = params, stage
        self.flat = flatten_params(params)
        part = self.flat.clone()                     # .to(device).clone().float()
        self.master = part.float().detach(); del part
        self.master.requires_grad = True
        g = torch.zeros(self.flat.numel(), dtype=torch.float32, device=dev)  # initialize_optimizer_states
        self.master.grad = g; del g
        self.master.grad = None
        self.opt = torch.optim.AdamW([self.master], lr=1e-4, weight_decay=0.0)
        self.ipg = None; self.gip = None; self.gip_off = 0
        self.bucket = []; self.elems = 0; self.avg = None
        if stage == 2:
            for p in params:
                p.register_post_accumulate_grad_hook(self.hook)

    def hook(self, p):
        self.add(p)
        self.tr.mark("g:" + str(p.numel()))

    def add(self, p):
        if self.elems + p.numel() > RBS:
            self.reduce_ipg()
        g = p.grad
        dst = self.ipg.narrow(0, self.elems, p.numel())
        dst.copy_(g.view(-1))
        g.data = dst.view_as(g)
        self.elems += p.numel()
        self.bucket.append(p)

    def reduce_ipg(self):
        buf = self.ipg.narrow(0, 0, self.elems)
        buf.div_(1.0)
        slices = [buf]                      # average_tensor: one slice (rank 0), allreduce_bucket flattens it
        t = torch.cat([s.view(-1) for s in slices]) if len(slices) > 1 else torch._utils._flatten_dense_tensors(slices)
        slices[0].copy_(t); del t
        for p in self.bucket:                # copy_grads_in_partition
            if self.gip is None:
                self.gip = torch.empty(self.flat.numel(), dtype=self.flat.dtype, device=dev)
                self.gip_off = 0
            d = self.gip.narrow(0, self.gip_off, p.numel())
            d.copy_(p.grad.view(-1))
            p.grad.data = d.view_as(p.grad)
            self.gip_off += p.numel()
        self.bucket = []; self.elems = 0

    def backward(self, loss, tr):
        self.tr = tr
        self.ipg = torch.empty(RBS, dtype=self.flat.dtype, device=dev)
        tr.mark("bwd_start(ipg alloc)")
        loss.float().backward()
        tr.mark("bwd_end")
        if self.stage == 1:                  # reduce_gradients: param order
            for p in self.params:
                self.add(p)
        self.reduce_ipg()                     # epilogue
        self.avg = [p.grad.view(-1) for p in self.params]   # get_flat_partition(return_tensor_list=True)
        self.ipg = None; self.gip = None      # _release_ipg_buffers
        for p in self.params:                 # zero_grad(set_to_none=True)
            p.grad = None
        tr.mark("epilogue_end")

    def step(self, tr):
        norms = [torch.linalg.norm(g.double(), 2.0) for g in self.avg]   # get_grad_norm_direct
        tot = torch.stack(norms).square().sum().float().pow(0.5); del norms
        tr.mark("norm(double per grad)")
        sg = torch._utils._flatten_dense_tensors(self.avg).to(torch.float32)
        tr.mark("flatten_to_fp32")
        self.master.grad = sg
        self.avg = None
        tr.mark("avg_grads_released")
        clip = torch.clamp(1.0 / (tot + 1e-6), min=1.0)
        sg.mul_(1.0 / clip)
        self.opt.step()
        tr.mark("adamw_step")
        self.master.grad = None; del sg
        self.flat.copy_(self.master.data)
        tr.mark("step_end")


def run_z(model, params, b, steps, tr, stage):
    z = Zero12(params, stage)
    tr.mark("init_done")
    for s in range(steps):
        out = fwd(model, b, tr)
        add_logits_hook(out, tr)
        z.backward(out.loss, tr)
        z.step(tr)
        del out
        tr.mark("out_released")
    return z


def workspace_probe():
    a0 = torch.cuda.memory_allocated()
    x = torch.randn(2048, 2048, device=dev, dtype=torch.bfloat16, requires_grad=True)
    a1 = torch.cuda.memory_allocated()
    y = x @ x
    del y
    a2 = torch.cuda.memory_allocated()
    (x @ x).float().sum().backward()
    x.grad = None
    a3 = torch.cuda.memory_allocated()
    del x
    a4 = torch.cuda.memory_allocated()
    return dict(tensor=(a1 - a0) / MiB, after_fwd_matmul=(a2 - a1) / MiB, after_bwd_matmul=(a3 - a1) / MiB,
                leftover=(a4 - a0) / MiB)


def adam_probe(n):
    p = torch.zeros(n, device=dev, requires_grad=True)
    p.grad = torch.ones(n, device=dev)
    opt = torch.optim.AdamW([p], lr=1e-4, weight_decay=0.0)
    r = []
    for i in range(2):
        torch.cuda.synchronize(); base = torch.cuda.memory_allocated(); torch.cuda.reset_peak_memory_stats()
        opt.step(); torch.cuda.synchronize()
        r.append(dict(base=base / MiB, after=(torch.cuda.memory_allocated() - base) / MiB,
                      peak_over_base=(torch.cuda.max_memory_allocated() - base) / MiB, n_MiB4=4 * n / MiB))
    del opt, p
    return r


def main():
    res = {"workspace": workspace_probe(), "torch": torch.__version__}
    res["adam_100M"] = adam_probe(100_000_000)
    gc.collect(); torch.cuda.empty_cache()
    plan = [("gpt2-xl", [("s2", 4, False), ("s0", 4, False), ("s2", 8, False), ("s0", 8, False), ("s2", 8, True),
                         ("s1", 8, False)]),
            ("t5-large", [("s2", 8, False), ("s0", 4, False), ("s2", 4, False)])]
    out = sys.argv[1] if len(sys.argv) > 1 else "emulator.json"
    for name, runs in plan:
        for st, mb, gc_on in runs:
            t0 = time.time()
            model, params = build(name)
            if gc_on:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            b = batch(name, mb)
            gc.collect(); torch.cuda.empty_cache()
            tr = Tracker()
            if st == "s0":
                keep = run_s0(model, params, b, 3, tr)
            else:
                keep = run_z(model, params, b, 3, tr, int(st[1]))
            key = f"{name}_{st}_mb{mb}" + ("_gc" if gc_on else "")
            res[key] = dict(peak=round(tr.peak(), 1), top=tr.top(8), named=tr.named(), secs=round(time.time() - t0, 1))
            print(key, res[key]["peak"], res[key]["top"][:3], flush=True)
            del keep, model, params, b, tr
            gc.collect(); torch.cuda.empty_cache()
            res[key]["leftover_after_free"] = round(torch.cuda.memory_allocated() / MiB, 1)
            with open(out, "w") as f:
                json.dump(res, f, indent=1)
    print(json.dumps({k: res[k] for k in ("workspace", "adam_100M")}, indent=1))


if __name__ == "__main__":
    main()
