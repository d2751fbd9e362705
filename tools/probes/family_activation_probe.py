#!/usr/bin/env python3
"""Per-family activation, loss and timing probe in plain PyTorch (no DeepSpeed), one GPU.

usage: family_activation_probe.py CONFIGS_JSON OUT_JSONL [--deadline SECONDS]

CONFIGS_JSON (written by tools/device/make_gpu_cases.py) is a list of
  {"family", "catalog", "n_layers", "model_config" (HF config.json keys, layers reduced),
   "seq_len" | "src_len"+"tgt_len", "mbs": [1, 4]}
in priority order. For each entry: the model is built the way the calibration runs build it
(HF config -> model on the GPU with random fp32 weights, train mode, transformers' default
attention, use_cache False), then cast to bf16 as DeepSpeed's bf16 engine casts the module
(module.bfloat16(); no autocast). For each checkpointing setting (off, then on with
use_reentrant=False) and micro-batch: one warm-up forward+loss+backward, then REPS measured ones,
each with .grad set to None first, empty_cache before the first. Recorded (MiB = 2^20 bytes):
  before_fwd_alloc    memory_allocated before forward (bf16 params + the batch)
  fwd_peak_alloc      max_memory_allocated during forward incl. the loss (peak reset before)
  after_fwd_alloc     allocated after forward, the output (logits, loss) still held
  bwd_peak_alloc      max_memory_allocated during loss.backward() (peak reset before)
  after_bwd_alloc     allocated after backward, output released (params + bf16 grads + leftovers)
  max_reserved        max_memory_reserved over the measured reps
  fwd_s, bwd_s        medians over the measured reps (host clock between cuda.synchronize())
One JSON line per (entry, checkpointing, micro-batch) is appended to OUT_JSONL as it finishes.
"""
import gc
import json
import sys
import time

import torch
import transformers

MiB = 2.0 ** 20
REPS = 3


def build(entry):
    cfgd = dict(entry["model_config"])
    mt = cfgd.pop("model_type")
    cfg = transformers.AutoConfig.for_model(mt, **cfgd)
    cfg.use_cache = False
    is_t5 = bool(getattr(cfg, "is_encoder_decoder", False))
    if is_t5 and getattr(cfg, "decoder_start_token_id", None) is None:
        cfg.decoder_start_token_id = getattr(cfg, "pad_token_id", None) or 0
    torch.manual_seed(0)
    with torch.device("cuda"):
        if is_t5:
            model = transformers.AutoModelForSeq2SeqLM.from_config(cfg)
        elif mt == "bert":
            model = transformers.AutoModelForMaskedLM.from_config(cfg)
        else:
            model = transformers.AutoModelForCausalLM.from_config(cfg)
    model = model.float().bfloat16()
    model.train()
    return model, cfg, is_t5


def make_batch(entry, cfg, is_t5, mb):
    V = int(cfg.vocab_size)
    g = torch.Generator(device="cuda")
    g.manual_seed(1234)
    if is_t5:
        return {"input_ids": torch.randint(0, V, (mb, entry["src_len"]), device="cuda", generator=g),
                "labels": torch.randint(0, V, (mb, entry["tgt_len"]), device="cuda", generator=g)}
    ids = torch.randint(0, V, (mb, entry["seq_len"]), device="cuda", generator=g)
    return {"input_ids": ids, "labels": ids}


def one(model, batch, rec=None):
    model.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    a0 = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    out = model(**batch)
    loss = out.loss
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    fp = torch.cuda.max_memory_allocated()
    a1 = torch.cuda.memory_allocated()
    res_f = torch.cuda.max_memory_reserved()
    torch.cuda.reset_peak_memory_stats()
    t2 = time.perf_counter()
    loss.backward()
    torch.cuda.synchronize()
    t3 = time.perf_counter()
    bp = torch.cuda.max_memory_allocated()
    res_b = torch.cuda.max_memory_reserved()
    lv = float(loss.detach().float().item())
    logits_shape = list(out.logits.shape) if getattr(out, "logits", None) is not None else None
    del out, loss
    torch.cuda.synchronize()
    a2 = torch.cuda.memory_allocated()
    if rec is not None:
        rec.update(before_fwd_alloc_mb=round(a0 / MiB, 2), fwd_peak_alloc_mb=round(fp / MiB, 2),
                   after_fwd_alloc_mb=round(a1 / MiB, 2), bwd_peak_alloc_mb=round(bp / MiB, 2),
                   after_bwd_alloc_mb=round(a2 / MiB, 2), loss=lv, logits_shape=logits_shape)
    return t1 - t0, t3 - t2, max(res_f, res_b)


def main():
    entries = json.load(open(sys.argv[1]))
    out_path = sys.argv[2]
    deadline = float(sys.argv[sys.argv.index("--deadline") + 1]) if "--deadline" in sys.argv else 1e9
    T0 = time.time()
    dev = torch.cuda.get_device_properties(0)
    meta = {"record_type": "probe_meta", "torch": torch.__version__, "transformers": transformers.__version__,
            "gpu": dev.name, "gpu_total_mb": round(dev.total_memory / MiB, 1), "reps": REPS,
            "cudnn": torch.backends.cudnn.version()}
    with open(out_path, "a") as f:
        f.write(json.dumps(meta) + "\n")
    print(json.dumps(meta), flush=True)
    for e in entries:
        if time.time() - T0 > deadline:
            print(f"[probe] deadline: skip {e['family']} L{e['n_layers']}", flush=True)
            continue
        tb = time.time()
        try:
            model, cfg, is_t5 = build(e)
        except Exception as ex:  # noqa: BLE001
            rec = {"record_type": "probe", "family": e["family"], "catalog": e["catalog"], "n_layers": e["n_layers"],
                   "status": "error", "error": (str(ex) or repr(ex))[:1500]}
            with open(out_path, "a") as f:
                f.write(json.dumps(rec) + "\n")
            print(rec, flush=True)
            continue
        build_s = time.time() - tb
        n_params = sum(p.numel() for p in model.parameters())
        param_mb = sum(p.numel() * p.element_size() for p in model.parameters()) / MiB
        for gck in (False, True):
            if gck:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            else:
                if getattr(model, "is_gradient_checkpointing", False):
                    model.gradient_checkpointing_disable()
            for mb in e["mbs"]:
                if time.time() - T0 > deadline:
                    break
                rec = {"record_type": "probe", "family": e["family"], "catalog": e["catalog"],
                       "n_layers": e["n_layers"], "mb": mb, "grad_checkpointing": gck,
                       "seq_len": e.get("seq_len"), "src_len": e.get("src_len"), "tgt_len": e.get("tgt_len"),
                       "n_params": n_params, "param_bf16_mb": round(param_mb, 2), "build_s": round(build_s, 2),
                       "attn_implementation": getattr(model.config, "_attn_implementation", None),
                       "is_gradient_checkpointing": bool(getattr(model, "is_gradient_checkpointing", False)),
                       "model_class": type(model).__name__, "status": "started"}
                try:
                    batch = make_batch(e, cfg, is_t5, mb)
                    model.zero_grad(set_to_none=True)
                    gc.collect()
                    torch.cuda.empty_cache()
                    one(model, batch)  # warm-up
                    torch.cuda.empty_cache()
                    torch.cuda.reset_peak_memory_stats()
                    fw, bw, res = [], [], 0
                    for r in range(REPS):
                        f_s, b_s, rs = one(model, batch, rec if r == 0 else None)
                        fw.append(f_s)
                        bw.append(b_s)
                        res = max(res, rs)
                    fw.sort()
                    bw.sort()
                    rec.update(fwd_s=round(fw[len(fw) // 2], 5), bwd_s=round(bw[len(bw) // 2], 5),
                               fwd_s_all=[round(x, 5) for x in fw], bwd_s_all=[round(x, 5) for x in bw],
                               max_reserved_mb=round(torch.cuda.max_memory_reserved() / MiB, 2),
                               max_reserved_rep_mb=round(res / MiB, 2), status="ok")
                    del batch
                except torch.cuda.OutOfMemoryError as ex:
                    rec.update(status="oom", error=(str(ex) or repr(ex))[:1500])
                except Exception as ex:  # noqa: BLE001
                    rec.update(status="error", error=(str(ex) or repr(ex))[:1500])
                model.zero_grad(set_to_none=True)
                with open(out_path, "a") as f:
                    f.write(json.dumps(rec) + "\n")
                print(f"[probe {time.time() - T0:6.1f}s] {e['family']} L{e['n_layers']} mb{mb} gc={int(gck)} "
                      f"{rec['status']} fwdpk={rec.get('fwd_peak_alloc_mb')} aftf={rec.get('after_fwd_alloc_mb')} "
                      f"bwdpk={rec.get('bwd_peak_alloc_mb')} f={rec.get('fwd_s')} b={rec.get('bwd_s')} "
                      f"{str(rec.get('error', ''))[:200]}", flush=True)
        del model
        gc.collect()
        torch.cuda.empty_cache()
    print(f"[probe] done in {time.time() - T0:.1f}s", flush=True)


if __name__ == "__main__":
    main()
