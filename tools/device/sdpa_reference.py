"""PyTorch's own fused attention on the same shapes as dsplan_attention_bench's defaults, for
comparison only (docs/runtime.md, "Fused attention"): scaled_dot_product_attention with the
FLASH_ATTENTION backend (PyTorch's FlashAttention-2) and the CUDNN_ATTENTION backend, bf16,
causal. CUDA events, 3 warm-up + 10 timed, median; L2 not flushed. FLOPs as the bench counts
them: forward 4 B H s^2 d / 2 (causal), backward 2.5x."""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def median_ms(fn, warmup=3, timed=10):
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(timed):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]


shapes = [("gpt2-xl mb8", 8, 25, 1024, 64), ("llama-2-7b mb1", 1, 32, 4096, 128)]
print(f"# torch {torch.__version__} on {torch.cuda.get_device_name()}")
for name, b, h, s, d in shapes:
    q, k, v, do = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16,
                               requires_grad=i < 3) for i in range(4))
    flops = 4 * b * h * s * s * d / 2
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION):
        try:
            with sdpa_kernel(backend):
                def fwd():
                    return F.scaled_dot_product_attention(q, k, v, is_causal=True)
                fms = median_ms(fwd)
                o = fwd()
                bms = median_ms(lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True))
            print(f"sdpa {name:15} {backend.name:16} fwd {fms:7.3f} ms {flops / fms / 1e9:6.1f} "
                  f"TFLOP/s  bwd {bms:7.3f} ms {2.5 * flops / bms / 1e9:6.1f} TFLOP/s")
        except Exception as e:  # a backend this build or GPU lacks
            print(f"sdpa {name:15} {backend.name:16} failed: {str(e)[:120]}")
