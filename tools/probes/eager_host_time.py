"""Host time of PyTorch eager training steps for small, host-bound workloads (no DeepSpeed).

Builds each model from its dsplan catalog config (transformers defaults for absent keys), bf16,
SDPA, train mode, on the GPU; times forward + backward (no optimizer) over 10 steps after 3
warm-up steps with torch.cuda.synchronize around each, and prints the median per model as JSON.
dsplan compares it with its prediction (ops x host time per op) to check the fitted constant.
Usage: python3 eager_host_time.py MODEL:MB:SEQ[:TGT] ...   (catalog YAMLs under ../../models)
"""
import json, os, statistics, sys, time

import torch
import transformers
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))


def build(name):
    with open(os.path.join(HERE, "..", "..", "models", name + ".yaml")) as f:
        cfg = yaml.safe_load(f)["config"]
    config = transformers.AutoConfig.for_model(**cfg)
    config._attn_implementation = "sdpa"
    if config.model_type == "t5":
        # The hub's T5 configs carry these; the catalog keeps only architecture keys.
        if getattr(config, "decoder_start_token_id", None) is None:
            config.decoder_start_token_id = 0
        if getattr(config, "pad_token_id", None) is None:
            config.pad_token_id = 0
        model = transformers.T5ForConditionalGeneration(config)
    else:
        model = transformers.AutoModelForCausalLM.from_config(config)
    return model.to("cuda", dtype=torch.bfloat16).train()


def main():
    out = []
    for spec in sys.argv[1:]:
        parts = spec.split(":")
        name, mb, seq = parts[0], int(parts[1]), int(parts[2])
        tgt = int(parts[3]) if len(parts) > 3 else 0
        model = build(name)
        vocab = model.config.vocab_size
        ids = torch.randint(0, vocab, (mb, seq), device="cuda")
        if tgt:
            labels = torch.randint(0, vocab, (mb, tgt), device="cuda")
            batch = dict(input_ids=ids, labels=labels)
        else:
            batch = dict(input_ids=ids, labels=ids)
        times = []
        for i in range(13):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            loss = model(**batch).loss
            loss.backward()
            torch.cuda.synchronize()
            if i >= 3:
                times.append(time.perf_counter() - t0)
            model.zero_grad(set_to_none=True)
        out.append({"model": name, "mb": mb, "seq": seq, "tgt": tgt,
                    "median_s": statistics.median(times), "min_s": min(times)})
        del model
        torch.cuda.empty_cache()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
