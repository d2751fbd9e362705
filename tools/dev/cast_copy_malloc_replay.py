#!/usr/bin/env python3
"""Replays the host allocations of ZeRO-3's offloaded gradient copies against this machine's glibc.

PyTorch's blocking bf16 CUDA -> fp32 CPU copy (`partition_grads`' `fp32_grad_tensor.copy_`)
allocates a pageable bf16 temporary with posix_memalign(64, bytes), writes it (the D2H copy),
converts it and frees it. This script does the same per parameter tensor, in backward order,
without a GPU: posix_memalign, memset of every byte, free; and counts the minor page faults of
the writes per step, split at 32 MiB (glibc's largest mmap threshold), on the main thread or on a
second thread (where autograd runs the backward's hooks).

It reproduces the rule dsplan prices (only temporaries of 32 MiB and more fault, every step) for
all four layouts; it does not reproduce opt-1.3b's real runs, where every temporary faulted
(docs/validation/deepspeed/offphase-1206/README.md): the real process's other allocations matter.

Usage: python3 cast_copy_malloc_replay.py {opt,llama,pythia,gemma} {main,thread} [STEPS]
Environment variables such as MALLOC_ARENA_MAX=1 MALLOC_MMAP_MAX_=0 apply as usual.
"""
import ctypes
import resource
import sys
import threading

LIBC = ctypes.CDLL("libc.so.6")
LIBC.posix_memalign.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_size_t]
LIBC.free.argtypes = [ctypes.c_void_p]
LIBC.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
FRESH = 32 << 20
H = 2048
# One decoder layer's parameter tensors (elements) in registration order, and the layer count
# and word-embedding size of the catalog model with that layout.
LAYOUTS = {
    "opt": ([H * H, H] * 4 + [H, H] + [4 * H * H, 4 * H, 4 * H * H, H] + [H, H], 24, 50272 * H),
    "llama": ([H * H, 512 * H, 512 * H, H * H] + [4 * H * H] * 3 + [H, H], 16, 128256 * H),
    "pythia": ([H, H, 3 * H * H, 3 * H, H * H, H, H, H, 4 * H * H, 4 * H, 4 * H * H, H], 24, 50304 * H),
    "gemma": ([H * H, 256 * H, 256 * H, H * H] + [8 * H * H] * 3 + [H, H], 18, 256000 * H),
}


def faults():
    return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt


def replay(layout, steps, out):
    layer, layers, embedding = LAYOUTS[layout]
    order = list(reversed([embedding] + layer * layers))  # backward order
    for step in range(steps):
        big = small = 0
        for n in order:
            size = 2 * n
            p = ctypes.c_void_p()
            if LIBC.posix_memalign(ctypes.byref(p), 64, size) != 0:
                raise MemoryError(size)
            before = faults()
            LIBC.memset(p, 1, size)
            touched = faults() - before
            LIBC.free(p)
            if size >= FRESH:
                big += touched
            else:
                small += touched
        out.append({"step": step, "faulted_GB_from_32MiB": round(big * 4096 / 1e9, 3),
                    "faulted_GB_below_32MiB": round(small * 4096 / 1e9, 3)})


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in LAYOUTS or sys.argv[2] not in ("main", "thread"):
        sys.exit(__doc__.strip().splitlines()[-2])
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    out = []
    if sys.argv[2] == "thread":
        t = threading.Thread(target=replay, args=(sys.argv[1], steps, out))
        t.start()
        t.join()
    else:
        replay(sys.argv[1], steps, out)
    for row in out:
        print(sys.argv[1], sys.argv[2], row)


if __name__ == "__main__":
    main()
