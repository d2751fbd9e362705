#!/usr/bin/env python3
"""The loss's kernels at the shapes training runs them: transformers' causal-LM loss
(`logits.float()`, then `F.cross_entropy`, i.e. log_softmax and nll_loss) forward and backward,
over rows x vocabulary.

Why: the stack-cost probe (stack_costs.py "kernels") times log_softmax on 1,334 rows of 50,304
(64 Mi elements), where kernel profiles of real steps run 10-20 k rows; the real steps' loss
kernels ran 20-50 % faster than the rate from that shape (docs/stack-costs.md, "The loss").

Per point (rows, vocab), each timed alone behind a busy-wait (probe_util.gpu_time: the launch is
not on the clock), median of 5 after 2 warm-ups:
  * cast_up: bf16 logits -> fp32 (`logits.float()`), bytes 2 + 4 per element;
  * log_softmax forward (fp32 in, fp32 out), bytes 4 + 4;
  * nll_loss forward on the log-probabilities (a gather and a mean);
  * backward of nll_loss(log_softmax(x)) through autograd: nll_loss_backward's zero fill of a
    dense fp32 gradient and its scatter, then log_softmax_backward (reads the gradient and the
    output, writes the input's gradient: 4 + 4 + 4);
  * cast_down: the fp32 gradient -> bf16 (the backward of `.float()`), bytes 4 + 2.
Rates are bytes / seconds with those byte counts (the fill counted apart: 4 per element).

usage: loss_kernels.py [--out F] [--quick]
Prints (and with --out writes) a JSON document, schema dsplan-loss-kernels/1.
"""
import argparse
import json
import os
import platform
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import probe_util  # noqa: E402


def timed(fn):
    return probe_util.gpu_time(fn, reps=5, warm=2, sleep=2_000_000)


def point(rows, vocab):
    n = rows * vocab
    logits = torch.randn(rows, vocab, device="cuda", dtype=torch.bfloat16)
    target = torch.randint(0, vocab, (rows,), device="cuda")
    x = logits.float().requires_grad_(True)
    logp = torch.log_softmax(x, -1)
    loss = F.nll_loss(logp, target)
    t_cast_up = timed(lambda: logits.float())
    t_lsm = timed(lambda: torch.log_softmax(x.detach(), -1))
    lp = logp.detach()
    t_nll = timed(lambda: F.nll_loss(lp, target))

    def bwd():
        torch.autograd.grad(loss, x, retain_graph=True)
    t_bwd = timed(bwd)
    g = torch.randn(rows, vocab, device="cuda", dtype=torch.float32)
    t_cast_down = timed(lambda: g.to(torch.bfloat16))
    z = torch.empty(rows, vocab, device="cuda", dtype=torch.float32)
    t_fill = timed(lambda: z.zero_())
    del logits, x, logp, loss, g, z
    torch.cuda.empty_cache()
    return {
        "rows": rows, "vocab": vocab, "elements": n,
        "cast_up_s": t_cast_up, "cast_up_bytes_per_s": 6 * n / t_cast_up,
        "log_softmax_fwd_s": t_lsm, "log_softmax_fwd_bytes_per_s": 8 * n / t_lsm,
        "nll_fwd_s": t_nll,
        "loss_bwd_s": t_bwd, "fill_s": t_fill, "fill_bytes_per_s": 4 * n / t_fill,
        "log_softmax_bwd_bytes_per_s": 12 * n / max(t_bwd - t_fill, 1e-9),
        "cast_down_s": t_cast_down, "cast_down_bytes_per_s": 6 * n / t_cast_down,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    vocabs = [30522, 50257, 50304, 151936, 256000]
    rows_list = [1334, 4096, 16384, 32768]
    if a.quick:
        vocabs, rows_list = [50304], [1334, 16384]
    free = torch.cuda.mem_get_info()[0]
    pts, skipped = [], []
    for v in vocabs:
        for r in rows_list:
            # logits bf16 + x, logp, grad, g, z fp32 (and autograd's temporaries): about 26 B/elem
            if 28 * r * v > 0.8 * free:
                skipped.append([r, v])
                continue
            pts.append(point(r, v))
            print(json.dumps(pts[-1]), file=sys.stderr, flush=True)
    doc = {
        "schema": "dsplan-loss-kernels/1",
        "versions": {"torch": torch.__version__, "cuda": torch.version.cuda,
                     "gpu": torch.cuda.get_device_name(0), "python": platform.python_version()},
        "method": "each op alone behind a busy-wait (probe_util.gpu_time), CUDA events, median of 5 "
                  "after 2 warm-ups; random bf16 logits, fp32 upcast, uniform targets",
        "points": pts, "skipped_for_memory": skipped,
    }
    s = json.dumps(doc, indent=1)
    print(s)
    if a.out:
        with open(a.out, "w") as f:
            f.write(s + "\n")


if __name__ == "__main__":
    sys.exit(main())
