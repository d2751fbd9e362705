#!/usr/bin/env python3
"""Times, op by op, the eager kernels of transformers' rotary embedding and fused-QKV split in
the memory layouts transformers gives them, and the same ops on contiguous tensors.

In a block, the query and key reach apply_rotary_pos_emb as [b, h, s, d] views of a projection
laid out [b, s, h, d] (Llama: q_proj(x).view(b, s, h, d).transpose(1, 2); GPT-NeoX: one fused
[b, s, h, 3d] projection, transposed and chunked in three). PyTorch's TensorIterator runs its
vectorized kernel only when every operand is contiguous in one layout; a transposed view, a
broadcast cos/sin [1, 1, s, d] or a narrow slice sends an op to the generic strided kernel, and a
cat with a strided piece to the non-vectorized copy path. This probe measures each op of the
sequence as it runs in the model, so that the cost model can charge each to its kernel class.

Per case (b, h, s, d, rotary dim, layout), median of 7 batches of 10 calls, CUDA events, bf16:
  fwd ops:   x_rot * cos, neg(x2), cat(-x2, x1), rot * sin, add, cat(embedded, pass) (partial)
  fwd whole: apply_rotary_pos_emb(q, k) as transformers writes it
  bwd whole: autograd.grad of the (q, k) embedded outputs back to the projection's output
  split bwd: the gradient of a fused projection's chunk/transposes (GPT-NeoX), or of a
             separate projection's transpose (Llama): what autograd runs from the attention's
             dq, dk, dv back to the Linear's output
bytes count each element read or written once; rate = bytes / time.

usage: rotary_kernels.py [--out F]
Prints JSON (schema dsplan-rotary-kernels/1).
"""
import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import probe_util  # noqa: E402

DEV = "cuda"
BF = torch.bfloat16


def timeit(fn, reps=10, batches=7):
    return probe_util.batched_time(fn, reps, batches)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(q, k, cos, sin):
    rd = cos.shape[-1]
    q_rot, q_pass = q[..., :rd], q[..., rd:]
    k_rot, k_pass = k[..., :rd], k[..., rd:]
    q_e = (q_rot * cos) + (rotate_half(q_rot) * sin)
    k_e = (k_rot * cos) + (rotate_half(k_rot) * sin)
    if rd < q.shape[-1]:
        q_e = torch.cat([q_e, q_pass], dim=-1)
        k_e = torch.cat([k_e, k_pass], dim=-1)
    return q_e, k_e


def make(b, h, s, d, layout, requires_grad=False):
    """The projection output and the q, k, v views of it as transformers builds them."""
    if layout == "fused":  # GPT-NeoX: [b, s, h, 3d] -> transpose -> chunk
        proj = torch.randn(b, s, h * 3 * d, device=DEV, dtype=BF, requires_grad=requires_grad)
        qkv = proj.view(b, s, h, 3 * d).transpose(1, 2)
        q, k, v = qkv.chunk(3, dim=-1)
        return [proj], q, k, v
    if layout == "separate":  # Llama: three projections, each viewed and transposed
        projs = [torch.randn(b, s, h * d, device=DEV, dtype=BF, requires_grad=requires_grad)
                 for _ in range(3)]
        q, k, v = (p.view(b, s, h, d).transpose(1, 2) for p in projs)
        return projs, q, k, v
    q, k, v = (torch.randn(b, h, s, d, device=DEV, dtype=BF, requires_grad=requires_grad)
               for _ in range(3))  # contiguous [b, h, s, d]
    return [q, k, v], q, k, v


def case(b, h, s, d, rd, layout):
    el = b * h * s * d
    er = b * h * s * rd
    E = 2  # bytes per element
    cos = torch.randn(1, 1, s, rd, device=DEV, dtype=BF)
    sin = torch.randn(1, 1, s, rd, device=DEV, dtype=BF)
    _, q, k, v = make(b, h, s, d, layout)
    q_rot, q_pass = q[..., :rd], q[..., rd:]
    x2 = q_rot[..., rd // 2:]
    x1 = q_rot[..., : rd // 2]
    n = -x2
    rh = torch.cat((n, x1), dim=-1)
    a = q_rot * cos
    c = rh * sin
    e = a + c
    ops = {
        "mul_cos": (lambda: q_rot * cos, 2 * er * E),
        "neg_half": (lambda: -x2, er * E),
        "cat_rotate_half": (lambda: torch.cat((n, x1), dim=-1), 2 * er * E),
        "mul_sin": (lambda: rh * sin, 2 * er * E),
        "add": (lambda: a + c, 3 * er * E),
    }
    if rd < d:
        ops["cat_pass"] = (lambda: torch.cat([e, q_pass], dim=-1), 2 * el * E)
    res = {"b": b, "h": h, "s": s, "d": d, "rotary_dim": rd, "layout": layout, "ops": {}}
    for name, (fn, by) in ops.items():
        t = timeit(fn)
        res["ops"][name] = {"s": t, "bytes": by, "tb_per_s": by / t / 1e12}
    t = timeit(lambda: apply_rotary(q, k, cos, sin))
    res["fwd_whole_s"] = t
    del q, k, v, a, c, e, rh, n
    # Backward of the rotary (q and k) and of the split, from the attention's input gradients
    # back to the projection output(s).
    projs, q, k, v = make(b, h, s, d, layout, requires_grad=True)
    qe, ke = apply_rotary(q, k, cos, sin)
    gq, gk = torch.randn_like(qe), torch.randn_like(ke)
    gv = torch.randn(b, h, s, d, device=DEV, dtype=BF)
    res["bwd_rotary_and_split_s"] = timeit(
        lambda: torch.autograd.grad((qe, ke, v), projs, (gq, gk, gv), retain_graph=True))
    # The split alone: q, k, v straight into the attention (no rotary).
    res["bwd_split_s"] = timeit(
        lambda: torch.autograd.grad((q, k, v), projs, (gq, gk, gv), retain_graph=True))
    res["tensor_bytes"] = el * E
    del projs, q, k, v, qe, ke, gq, gk, gv
    torch.cuda.empty_cache()
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="-")
    args = ap.parse_args()
    t0 = time.time()
    cases = [
        # (b, h, s, d, rotary_dim, layout)
        (31, 16, 1024, 128, 32, "fused"),      # pythia-1.4b at micro-batch 31
        (31, 16, 1024, 128, 32, "contiguous"),
        (8, 32, 1024, 128, 32, "fused"),       # pythia-6.9b
        (16, 32, 1024, 80, 32, "separate"),    # phi-2 (partial 0.4)
        (22, 32, 1024, 64, 64, "separate"),    # llama-3.2-1b
        (22, 32, 1024, 64, 64, "contiguous"),
        (8, 32, 1024, 128, 128, "separate"),   # llama-2-7b
        (14, 12, 1024, 128, 128, "separate"),  # qwen2-1.5b
        (16, 16, 1024, 64, 16, "fused"),       # gpt-neox at d 64, rotary 0.25
    ]
    out = {"schema": "dsplan-rotary-kernels/1", "torch": torch.__version__,
           "gpu": torch.cuda.get_device_name(0), "date": time.strftime("%Y-%m-%d"), "cases": []}
    for c in cases:
        try:
            out["cases"].append(case(*c))
        except Exception as e:  # noqa: BLE001
            out["cases"].append({"case": list(c), "error": str(e)[:300]})
    out["seconds"] = round(time.time() - t0, 1)
    probe_util.write_doc(out, None if args.out == "-" else args.out)


if __name__ == "__main__":
    main()
