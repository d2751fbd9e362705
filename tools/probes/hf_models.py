"""Catalog configs and transformers models for the probes (stack_costs.py, step_kernels.py,
compare_step_kernels.py). torch and transformers are imported only by build()."""
import json
import os

CATALOG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models")


def load_catalog(catalog, name):
    """The HF config of |name| as a dict: a config.json file or a folder holding one (a family
    the catalog lacks; `dsplan profile --stack-models` passes those as absolute paths), else the
    catalog entry models/<name>.yaml."""
    if name.endswith(".json") or os.sep in name or os.path.isdir(name):
        path = os.path.join(name, "config.json") if os.path.isdir(name) else name
        with open(path) as f:
            return json.load(f)
    import yaml
    with open(os.path.join(catalog, name + ".yaml")) as f:
        return yaml.safe_load(f)["config"]


def with_layers(cfg, layers):
    """|cfg| with |layers| blocks (T5: in the encoder and the decoder)."""
    c = dict(cfg)
    for k in ("num_hidden_layers", "n_layer", "num_layers"):
        if k in c:
            c[k] = layers
    if c.get("model_type") == "t5":
        c["num_layers"] = layers
        c["num_decoder_layers"] = layers
    return c


def add_case_args(ap):
    """The command line the whole-model probes share (step_kernels.py, block_ops.py): the cases
    (catalog model:micro-batch[:attention]), the catalog, the lengths and the output file."""
    ap.add_argument("--cases", required=True, help="model:mb[:attn],... (catalog ids)")
    ap.add_argument("--catalog", default=CATALOG)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--src", type=int, default=512)
    ap.add_argument("--tgt", type=int, default=128)
    ap.add_argument("--out", default="-")


def case_doc(schema, args, **extra):
    """The header of a whole-model probe's output document: schema, versions, GPU, date, the
    lengths of |args| (add_case_args) and empty cases/errors; |extra| keys added."""
    import time
    import torch
    doc = {"schema": schema, "torch": torch.__version__, "gpu": torch.cuda.get_device_name(0),
           "date": time.strftime("%Y-%m-%d"), "seq": args.seq, "src": args.src, "tgt": args.tgt}
    doc.update(extra)
    doc.update({"cases": {}, "errors": {}})
    return doc


def save_cases(doc, out, final=False):
    """Writes |doc| to |out| through a temporary file after each case, so that a probe killed
    between cases leaves the cases done so far; with |out| "-", prints it once, when |final|."""
    import json
    if out != "-":
        with open(out + ".tmp", "w") as f:
            json.dump(doc, f, indent=1)
        os.replace(out + ".tmp", out)
    elif final:
        print(json.dumps(doc, indent=1))


def parse_case(case):
    """'model:mb[:attn]' -> (model, mb, attn or None)."""
    parts = case.split(":")
    return parts[0], int(parts[1]), (parts[2] if len(parts) > 2 else None)


def lm_batch(cfg, s2s, mb, seq, src, tgt, device="cuda"):
    """A fixed random batch for model config dict |cfg|: input_ids and labels [mb, seq] (the
    labels are the inputs, as a causal LM trains), or for a seq2seq model [mb, src] inputs and
    [mb, tgt] labels."""
    import torch
    V = cfg["vocab_size"]
    g = torch.Generator(device=device)
    g.manual_seed(1)
    if s2s:
        return {"input_ids": torch.randint(0, V, (mb, src), device=device, generator=g),
                "labels": torch.randint(0, V, (mb, tgt), device=device, generator=g)}
    ids = torch.randint(0, V, (mb, seq), device=device, generator=g)
    return {"input_ids": ids, "labels": ids}


def build(cfgd, device="cuda", dtype=None, attn=None):
    """The causal-LM (or seq2seq) model of config dict |cfgd| on |device|, use_cache off, in
    |dtype| when given; returns (model, is_seq2seq)."""
    import torch
    import transformers
    cfgd = dict(cfgd)
    mt = cfgd.pop("model_type")
    cfg = transformers.AutoConfig.for_model(mt, **cfgd)
    cfg.use_cache = False
    s2s = bool(getattr(cfg, "is_encoder_decoder", False))
    if s2s:
        if getattr(cfg, "decoder_start_token_id", None) is None:
            cfg.decoder_start_token_id = 0
        if getattr(cfg, "pad_token_id", None) is None:
            cfg.pad_token_id = 0
    kw = {"attn_implementation": attn} if attn else {}
    if dtype is not None:
        kw["dtype"] = dtype
    with torch.device(device):
        cls = transformers.AutoModelForSeq2SeqLM if s2s else transformers.AutoModelForCausalLM
        m = cls.from_config(cfg, **kw)
    return m, s2s
