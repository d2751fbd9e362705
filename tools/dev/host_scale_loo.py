#!/usr/bin/env python3
"""How well an unmeasured family's block host time is estimated, on a profile's measured blocks.

usage: host_scale_loo.py PROFILE.yaml [...]

For each profile's `stack:` section (its per-op host costs and its measured family blocks) and
the traces dsplan keeps of the measured families (simulator/stack_costs.cc, Traces()):
  * each family's measured / per-op estimate, forward and backward;
  * the backward predicted for each family from the others, left out one at a time: the per-op
    estimate as it is (dsplan's rule) and scaled by the other families' median ratio;
  * the rule "the measured block of the family the code derives from, plus the per-op estimate
    of the ops it adds" for mistral, qwen2 and gemma (from llama) and mixtral (from mistral),
    against the median-scale rule (forward, checkpointed forward and backward).
Nothing is fitted; docs/stack-costs.md 3b quotes the output.
"""
import os
import re
import statistics
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
KINDS = ["gemm", "batched_gemm", "attention", "norm", "activation", "dropout", "elementwise",
         "embedding", "softmax", "loss"]
PARENT = {"mistral": "llama", "qwen2": "llama", "gemma": "llama", "mixtral": "mistral"}


def traces():
    src = open(os.path.join(ROOT, "simulator", "stack_costs.cc")).read()
    rows = {}
    for m in re.finditer(r'\{"(\w+)", LayerKind::k(\w+), "([\w.-]+)", \{\{([\d, ]+)\}\}, (\d+), (\d+)\}', src):
        fam, kind, _, ops, fe, be = m.groups()
        rows[(fam, kind)] = ([int(x) for x in ops.split(",")], int(fe), int(be))
    if not rows:
        sys.exit("host_scale_loo.py: no traces found in simulator/stack_costs.cc")
    return rows


def stack_section(path):
    txt = open(path).read()
    if "\nstack:" not in txt:
        sys.exit(f"host_scale_loo.py: {path} has no stack: section")
    st = txt[txt.index("\nstack:"):]
    sec = st[st.index("  ops:"):]
    ops = {}
    for k in KINDS:
        m = re.search(r"\n    %s: \[([^\]]+)\]" % k, sec)
        ops[k] = [float(x) for x in m.group(1).split(",")]
    kernel = [float(x) for x in re.search(r"\n  kernel_s: \[([^\]]+)\]", st).group(1).split(",")]
    blocks = {}
    bsec = st[st.index("\n  blocks:"):]
    for m in re.finditer(r"\n    - \[(\w+), (\w+), ([\d.e-]+), ([\d.e-]+), ([\d.e-]+), ([\d.e-]+), (\d+), (\d+)\]", bsec):
        kind = "DecoderBlock" if m.group(2) == "decoder" else "EncoderBlock"
        # fwd, bwd, checkpointed fwd, checkpointed bwd (with the recompute)
        blocks[(m.group(1), kind)] = [float(m.group(i)) for i in (3, 4, 5, 6)]
    return ops, kernel, blocks


def per_op(ops, kernel, t, bwd):
    o, fe, be = t
    i = 1 if bwd else 0
    return sum(o[j] * ops[KINDS[j]][i] for j in range(len(KINDS))) + (be if bwd else fe) * kernel[i]


def minus(a, b):
    return ([x - y for x, y in zip(a[0], b[0])], a[1] - b[1], a[2] - b[2])


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__.strip().splitlines()[2])
    rows = traces()
    for path in sys.argv[1:]:
        ops, kernel, blocks = stack_section(path)
        print(f"== {path}")
        ratio = {}
        for key, b in blocks.items():
            if key not in rows:
                continue
            t = rows[key]
            ratio[key] = (b[0] / per_op(ops, kernel, t, False), b[2] / per_op(ops, kernel, t, False),
                          b[1] / per_op(ops, kernel, t, True))
        print("block forward / per-op:", {k[0]: round(v[0], 2) for k, v in ratio.items()})
        print("block backward / per-op:", {k[0]: round(v[2], 2) for k, v in ratio.items()})
        un, sc = [], []
        for key, r in ratio.items():
            med = statistics.median(v[2] for k, v in ratio.items() if k[0] != key[0])
            un.append(1 / r[2] - 1)
            sc.append(med / r[2] - 1)
        print(f"backward, left out one at a time: per-op as is {statistics.mean(map(abs, un)):.0%} "
              f"(signed {statistics.mean(un):+.0%}), scaled by the others' median "
              f"{statistics.mean(map(abs, sc)):.0%} (signed {statistics.mean(sc):+.0%}), {len(un)} blocks")
        errs = {"median-scale": [], "derived": []}
        for fam, par in PARENT.items():
            key, pkey = (fam, "DecoderBlock"), (par, "DecoderBlock")
            if key not in ratio or pkey not in blocks:
                continue
            others = [v for k, v in ratio.items() if k[0] != fam]
            mf = statistics.median(v[0] for v in others)
            mc = statistics.median(v[1] for v in others)
            t, b, pb = rows[key], blocks[key], blocks[pkey]
            pf, pbw = per_op(ops, kernel, t, False), per_op(ops, kernel, t, True)
            d = minus(t, rows[pkey])
            df, db = per_op(ops, kernel, d, False), per_op(ops, kernel, d, True)
            meas = [b[0], b[2], b[1]]
            med_rule = [pf * mf, pf * mc, pbw]
            derived = [pb[0] + mf * df, pb[2] + mc * df, pb[1] + db]
            line = []
            for name, m, x, y in zip(("fwd", "ckpt fwd", "bwd"), meas, med_rule, derived):
                errs["median-scale"].append(abs(x / m - 1))
                errs["derived"].append(abs(y / m - 1))
                line.append(f"{name} {m * 1e3:.2f} ms: median-scale {x / m - 1:+.0%}, derived {y / m - 1:+.0%}")
            print(f"  {fam} from {par}: " + "; ".join(line))
        if errs["derived"]:
            print(f"  mean |error|: median-scale {statistics.mean(errs['median-scale']):.0%}, "
                  f"derived {statistics.mean(errs['derived']):.0%}")


if __name__ == "__main__":
    main()
