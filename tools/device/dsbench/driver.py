#!/usr/bin/env python3
"""A group of DeepSpeed ZeRO cases on one GPU, world size 1, in one process.

usage: driver.py CASE_JSON RESULT_JSON

Extends ../shared/deepspeed-bench/driver.py (same method: shared/calibration/README.md) with
  * sub-cases: case["subs"] is a list run in order in this process. Consecutive subs with the same
    model_config, ds_config and grad_checkpointing share one engine (a micro-batch sweep: the
    engine is stepped at each sub's "mb" in turn, empty_cache + reset_peak_memory_stats between);
    otherwise the previous engine is destroyed and a new model + engine is built. A case without
    "subs" is one sub (the case itself).
  * per step and per phase (forward incl. loss, backward, step) peaks of allocated and reserved
    memory and times (torch.cuda.synchronize() between the phases);
  * module and parameter counts (for the stage-3 hook analysis).
An OOM ends the group: later subs are recorded as "not_run_after_oom" (an engine that ran out of
memory half-way through a backward is not trusted for further measurements).
"""
import faulthandler
import gc
import signal
import json
import os
import shutil
import sys
import threading
import time
import traceback

T_PROC0 = time.time()
MiB = 2.0 ** 20

case = json.load(open(sys.argv[1]))
result_path = sys.argv[2]
N_STEPS = int(case.get("n_steps", 8))

R = {
    "record_type": "group",
    "id": case["id"],
    "model": case["model"],
    "plan_rank": case.get("plan_rank"),
    "variant": case.get("variant"),
    "stage": case.get("stage"),
    "status": "started",
    "oom": False,
    "phase": "import",
    "n_steps": N_STEPS,
    "ds_config": case.get("ds_config"),
    "pred": case.get("pred"),
    "optimizer_override": case.get("optimizer_override"),
    "env": case.get("env", {}),
    "pytorch_cuda_alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
    "subs": [],
}


def dump():
    tmp = result_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(R, f, default=str)
    os.replace(tmp, result_path)


dump()

import psutil  # noqa: E402

# The runner sends SIGUSR1 before it kills a case at its timeout: every thread's stack goes to
# the log, so a case stuck somewhere says where.
faulthandler.register(signal.SIGUSR1, all_threads=True)
# DSBENCH_STACK_EVERY=S: also every S seconds, to tell a slow loop (frames move) from a hang.
if os.environ.get("DSBENCH_STACK_EVERY"):
    faulthandler.dump_traceback_later(float(os.environ["DSBENCH_STACK_EVERY"]), repeat=True)

try:
    import pynvml  # nvidia-ml-py

    pynvml.nvmlInit()
    _nvh = pynvml.nvmlDeviceGetHandleByIndex(0)
except Exception as e:  # noqa: BLE001
    pynvml = None
    R["nvml_error"] = repr(e)


class Sampler:
    def __init__(self):
        self.proc = psutil.Process()
        self.lock = threading.Lock()
        self.nvml_peak = self.rss_peak = 0.0
        self.stop = False
        self.t = threading.Thread(target=self.loop, daemon=True)
        self.t.start()

    def reset(self):
        with self.lock:
            self.nvml_peak = self.rss_peak = 0.0

    def sample(self):
        nv = 0.0
        if pynvml is not None:
            try:
                nv = pynvml.nvmlDeviceGetMemoryInfo(_nvh).used / MiB
            except Exception:  # noqa: BLE001
                nv = 0.0
        rss = self.proc.memory_info().rss / MiB
        with self.lock:
            self.nvml_peak = max(self.nvml_peak, nv)
            self.rss_peak = max(self.rss_peak, rss)
        return nv, rss

    def loop(self):
        while not self.stop:
            try:
                self.sample()
            except Exception:  # noqa: BLE001
                pass
            time.sleep(0.05)

    def snap(self, D, prefix):
        nv, rss = self.sample()
        with self.lock:
            D[prefix + "_nvml_used_peak_mb"] = round(self.nvml_peak, 1)
            D[prefix + "_host_rss_peak_mb"] = round(self.rss_peak, 1)
        D[prefix + "_nvml_used_mb"] = round(nv, 1)


S = Sampler()

t0 = time.time()
import torch  # noqa: E402

# The host's eager speed before and after each sub's steps (tools/probes/probe_util.py
# host_speed; the device call runs in the repository root), so that host-bound step times from
# different processes can be compared at the host speed each one had.
try:
    sys.path.insert(0, os.path.join(os.getcwd(), "tools", "probes"))
    from probe_util import host_speed as HOST_SPEED  # noqa: E402
except Exception as _e:  # noqa: BLE001
    R["host_speed_error"] = repr(_e)

    def HOST_SPEED():
        return None
import transformers  # noqa: E402

R["import_torch_transformers_s"] = round(time.time() - t0, 2)
R["torch"] = torch.__version__
R["transformers"] = transformers.__version__
try:
    t0 = time.time()
    import deepspeed  # noqa: E402

    R["ds_import_s"] = round(time.time() - t0, 2)
    R["deepspeed"] = deepspeed.__version__
except BaseException as e:  # noqa: BLE001
    R["status"] = "error"
    R["error"] = "import deepspeed: " + (str(e) or repr(e))[:2000]
    R["error_traceback"] = traceback.format_exc()[-6000:]
    dump()
    os._exit(0)
R["gpu_name"] = torch.cuda.get_device_name(0)


def proc_io():
    """This process's block-device bytes (all its threads, DeepSpeed's aio threads included):
    (read_bytes, write_bytes) from /proc/self/io, or (0, 0) where it cannot be read."""
    try:
        with open("/proc/self/io") as f:
            d = dict(line.split(":", 1) for line in f if ":" in line)
        return int(d["read_bytes"]), int(d["write_bytes"])
    except Exception:  # noqa: BLE001
        return 0, 0


def proc_faults():
    """This process's page faults and context switches so far (all threads):
    (minor faults, major faults, involuntary switches, host CPU seconds). A step's minor faults
    tell whether its host temporaries were fresh pages (the stage-3 offload copies' suspected
    day-to-day cost); CPU seconds against wall time tell how busy the host threads were."""
    import resource
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_minflt, r.ru_majflt, r.ru_nivcsw, r.ru_utime + r.ru_stime


def nvme_paths(ds_config, case_id, D):
    """Point every NVMe offload of |ds_config| at a fresh folder of this case on the machine's
    disk ($DSBENCH_NVME_DIR, default /tmp/dsbench_nvme), recording where and the space free."""
    z = ds_config.get("zero_optimization") or {}
    root = os.environ.get("DSBENCH_NVME_DIR", "/tmp/dsbench_nvme")
    path = None
    for key in ("offload_optimizer", "offload_param"):
        o = z.get(key) or {}
        if o.get("device") == "nvme":
            if path is None:
                path = os.path.join(root, case_id)
                shutil.rmtree(path, ignore_errors=True)
                os.makedirs(path, exist_ok=True)
                D["nvme_dir"] = path
                D["nvme_disk_free_gb_before"] = round(shutil.disk_usage(path).free / 2**30, 1)
            o["nvme_path"] = path
    return path


def mem(D, prefix):
    torch.cuda.synchronize()
    st = torch.cuda.memory_stats()
    D[prefix + "_alloc_mb"] = round(torch.cuda.memory_allocated() / MiB, 1)
    D[prefix + "_reserved_mb"] = round(torch.cuda.memory_reserved() / MiB, 1)
    D[prefix + "_max_alloc_mb"] = round(torch.cuda.max_memory_allocated() / MiB, 1)
    D[prefix + "_max_reserved_mb"] = round(torch.cuda.max_memory_reserved() / MiB, 1)
    D[prefix + "_num_alloc_retries"] = st.get("num_alloc_retries", 0)
    S.snap(D, prefix)
    try:
        hs = torch.cuda.host_memory_stats()
        D[prefix + "_pinned_mb_current"] = round(hs.get("allocated_bytes.current", 0) / MiB, 1)
        D[prefix + "_pinned_mb_peak"] = round(hs.get("allocated_bytes.peak", 0) / MiB, 1)
    except Exception:  # noqa: BLE001
        pass


# A case with "emulate_world_size": N > 1 runs one rank of N data-parallel ranks on this one GPU:
# torch.distributed gets PyTorch's fake process group (torch.testing._internal.distributed.fake_pg)
# before DeepSpeed looks, so DeepSpeed partitions, pads, buckets and allocates exactly as that rank
# of N would, while every collective returns at once without moving data. Its memory is one
# rank's; its step time is not (no communication), and gathered stage-3 weights hold whatever
# the allocator's blocks held, so the loss means nothing.
# "emulate_rank" (default 0) picks which rank: ranks of ZeRO-1/2 differ in when their partition's
# gradients arrive in the backward (the last rank owns the last parameters, reduced first, so its
# grads_in_partition buffer is allocated earliest) and in the padding the last partition holds;
# dsplan predicts the rank with the highest peak, which make_gpu_cases registers (N - 1).
EMULATE = int(case.get("emulate_world_size") or 1)
EMU_RANK = int(case.get("emulate_rank") or 0)
if not 0 <= EMU_RANK < EMULATE:
    raise SystemExit(f"case {case.get('id')}: emulate_rank {EMU_RANK} is outside 0-{EMULATE - 1}")
for k, v in dict(RANK=str(EMU_RANK), LOCAL_RANK="0", WORLD_SIZE=str(EMULATE), MASTER_ADDR="127.0.0.1",
                 MASTER_PORT=os.environ.get("MASTER_PORT", "29500")).items():
    os.environ.setdefault(k, v)

R["phase"] = "init_distributed"
if EMULATE > 1:
    import torch.distributed as tdist  # noqa: E402
    from torch.testing._internal.distributed.fake_pg import FakeStore  # noqa: E402

    tdist.init_process_group(backend="fake", rank=EMU_RANK, world_size=EMULATE, store=FakeStore())
    R["emulated_world_size"] = EMULATE
    R["emulated_rank"] = EMU_RANK
deepspeed.init_distributed()
torch.cuda.set_device(0)
subs = case.get("subs") or [dict(case, sub_id=case["id"])]
STATE = {"engine": None, "key": None, "cfg": None, "is_t5": False, "is_mlm": False}


def engine_key(s):
    return json.dumps([s["model_config"], s["ds_config"], bool(s["grad_checkpointing"]),
                       s.get("optimizer_override")], sort_keys=True)


def teardown():
    eng = STATE["engine"]
    STATE["engine"] = None
    STATE["key"] = None
    if eng is not None:
        try:
            if hasattr(eng, "destroy"):
                eng.destroy()
        except Exception:  # noqa: BLE001
            pass
        try:
            opt = getattr(eng, "optimizer", None)
            if opt is not None and hasattr(opt, "destroy"):
                opt.destroy()
        except Exception:  # noqa: BLE001
            pass
    del eng
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def build(s, D):
    R["phase"] = "build_model"
    torch.manual_seed(0)
    cfgd = dict(s["model_config"])
    model_type = cfgd.pop("model_type")
    cfg = transformers.AutoConfig.for_model(model_type, **cfgd)
    # transformers' default is True (a DynamicCache of K/V copies returned with the output);
    # dsplan models use_cache False. A case may ask for the default ("use_cache": true) to
    # measure what the cache holds (docs/validation/deepspeed/usecache-1205/).
    cfg.use_cache = bool(s.get("use_cache", False))
    is_t5 = bool(getattr(cfg, "is_encoder_decoder", False))
    if is_t5 and getattr(cfg, "decoder_start_token_id", None) is None:
        cfg.decoder_start_token_id = getattr(cfg, "pad_token_id", None) or 0
    is_mlm = model_type == "bert"
    mem(D, "before_build")
    t0 = time.time()
    # A case may name the attention implementation (dsplan --attention); else transformers' default.
    kw = {"attn_implementation": s["attn_implementation"]} if s.get("attn_implementation") else {}
    with torch.device("cuda"):
        if is_t5:
            model = transformers.AutoModelForSeq2SeqLM.from_config(cfg, **kw)
        elif is_mlm:
            model = transformers.AutoModelForMaskedLM.from_config(cfg, **kw)
        else:
            model = transformers.AutoModelForCausalLM.from_config(cfg, **kw)
    if sorted({str(p.dtype) for p in model.parameters()}) != ["torch.float32"]:
        model = model.float()
    model.train()
    if s["grad_checkpointing"]:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    torch.cuda.synchronize()
    D["build_model_s"] = round(time.time() - t0, 2)
    D["model_class"] = type(model).__name__
    D["n_params"] = sum(p.numel() for p in model.parameters())
    D["n_param_tensors"] = sum(1 for _ in model.parameters())
    D["n_modules"] = sum(1 for _ in model.modules())
    D["n_modules_with_direct_params"] = sum(1 for m in model.modules() if any(True for _ in m.parameters(recurse=False)))
    D["n_param_tensors_ge_1e5"] = sum(1 for p in model.parameters() if p.numel() >= 100000)
    D["attn_implementation"] = getattr(model.config, "_attn_implementation", None)
    # Mixture-of-experts models (transformers 5's @use_experts_implementation): which experts
    # forward ran (grouped_mm, batched_mm or the per-expert eager loop) decides their step time.
    D["experts_implementation"] = getattr(model.config, "_experts_implementation", None)
    D["is_gradient_checkpointing"] = bool(getattr(model, "is_gradient_checkpointing", False))
    mem(D, "after_build")
    R["phase"] = "deepspeed_initialize"
    ds_config = json.loads(json.dumps(s["ds_config"]))
    if s.get("optimizer_override") == "torch_adam":
        ds_config.setdefault("optimizer", {}).setdefault("params", {})["torch_adam"] = True
    nvme_paths(ds_config, s.get("sub_id") or s["id"], D)
    S.reset()
    t0 = time.time()
    engine, optimizer, _, _ = deepspeed.initialize(
        model=model, model_parameters=[p for p in model.parameters() if p.requires_grad], config=ds_config)
    torch.cuda.synchronize()
    D["ds_init_s"] = round(time.time() - t0, 2)
    opt = engine.optimizer
    D["optimizer_wrapper"] = type(opt).__name__
    inner = getattr(opt, "optimizer", None)
    D["optimizer_inner"] = type(inner).__name__ if inner is not None else None
    mem(D, "after_init")
    D["after_init_nonpytorch_gpu_mb"] = round(D["after_init_nvml_used_mb"] - D["after_init_reserved_mb"], 1)
    del model, optimizer
    STATE.update(engine=engine, key=engine_key(s), cfg=cfg, is_t5=is_t5, is_mlm=is_mlm)



def run_phase(engine, batch, name, state):
    """One phase of a step: "fwd" (the forward, its loss kept in |state|), "bwd" or "opt"."""
    if name == "fwd":
        state["loss"] = engine(**batch).loss
    elif name == "bwd":
        engine.backward(state["loss"])
    else:
        engine.step()


def profiled_phases(engine, batch, activities, ga=1):
    """One more step, each phase (forward with the loss, backward, optimizer step) under its own
    torch.profiler with |activities|, between two synchronizations: yields (phase, profiler,
    wall seconds). With gradient accumulation (|ga| micro-steps a step) every micro-step's phases
    are profiled: the last (boundary) micro-step's as "fwd", "bwd", "opt", the earlier ones' as
    "fwd@0", "bwd@0", ... (the timed steps end on a boundary, so the first profiled micro-step
    is a step's first)."""
    from torch.profiler import profile
    state = {}
    for j in range(ga):
        for name in ("fwd", "bwd", "opt"):
            torch.cuda.synchronize()
            with profile(activities=activities) as prof:
                ta = time.perf_counter()
                run_phase(engine, batch, name, state)
                torch.cuda.synchronize()
                wall = time.perf_counter() - ta
            yield (name if j == ga - 1 else f"{name}@{j}"), prof, wall
    state.clear()


def kprof_step(engine, batch, ga=1):
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity
    res = {}
    for name, prof, wall in profiled_phases(engine, batch, [ProfilerActivity.CPU, ProfilerActivity.CUDA], ga):
        by, iv, n_cpu_top = {}, [], 0
        for e in prof.events():
            if e.device_type == DeviceType.CUDA:
                d = e.time_range.elapsed_us()
                b = by.setdefault(e.name[:140], [0, 0.0])
                b[0] += 1
                b[1] += d / 1e6
                iv.append((e.time_range.start, e.time_range.end))
            elif e.cpu_parent is None and e.name.startswith("aten::"):
                n_cpu_top += 1
        iv.sort()
        busy, cur_s, cur_e = 0.0, None, None
        for s0, e0 in iv:
            if cur_e is None or s0 > cur_e:
                if cur_e is not None:
                    busy += cur_e - cur_s
                cur_s, cur_e = s0, e0
            else:
                cur_e = max(cur_e, e0)
        if cur_e is not None:
            busy += cur_e - cur_s
        top = sorted(by.items(), key=lambda kv: -kv[1][1])
        res[name] = {"wall_s": round(wall, 5), "gpu_busy_s": round(busy / 1e6, 5),
                     "kernel_s": round(sum(v[1] for v in by.values()), 5),
                     "n_kernels": sum(v[0] for v in by.values()), "n_aten_top": n_cpu_top,
                     "top": [[k, v[0], round(v[1], 6)] for k, v in top[:60]]}
    return res


def stream_timeline(kernels, launches, wall_ns):
    """Where one phase's GPU time goes, stream by stream. |kernels|: (stream, start_ns, end_ns,
    name, correlation) of every kernel, copy and memset; |launches|: {correlation: host launch
    start_ns}. The compute stream is the one with the most kernel time. Its idle time inside the
    phase is split into gaps during which another stream was busy (the compute stream waits on a
    side stream's event, e.g. a ZeRO-3 gather) and gaps with the whole GPU idle (nothing queued:
    the host is late). For compute kernels with a known launch, the launch lag (kernel start less
    host launch) tells whether the queue ran dry: a kernel that starts within 20 us of its launch
    found the GPU waiting for the host."""
    def union(iv):
        iv = sorted(iv)
        out = []
        for a, b in iv:
            if out and a <= out[-1][1]:
                out[-1][1] = max(out[-1][1], b)
            else:
                out.append([a, b])
        return out

    def overlap(u, v):
        i = j = 0
        tot = 0
        while i < len(u) and j < len(v):
            a, b = max(u[i][0], v[j][0]), min(u[i][1], v[j][1])
            if b > a:
                tot += b - a
            if u[i][1] < v[j][1]:
                i += 1
            else:
                j += 1
        return tot

    if not kernels:
        return {}
    per = {}
    for st, a, b, name, corr in kernels:
        per.setdefault(st, []).append((a, b, name, corr))
    ktime = {st: sum(b - a for a, b, _, _ in v) for st, v in per.items()}
    comp = max(ktime, key=ktime.get)
    cu = union([(a, b) for a, b, _, _ in per[comp]])
    side = union([(a, b) for st, v in per.items() if st != comp for a, b, _, _ in v])
    t0, t1 = cu[0][0], cu[-1][1]
    gaps = [(cu[i][1], cu[i + 1][0]) for i in range(len(cu) - 1)]
    gap_side = overlap(gaps, side)
    gap_tot = sum(b - a for a, b in gaps)
    big = [g for g in gaps if g[1] - g[0] > 50_000]
    lags = sorted(a - launches[c] for a, b, _, c in per[comp] if c in launches)
    starved = [x for x in lags if x < 20_000]
    gemm = sum(b - a for a, b, n, _ in per[comp] if any(k in n.lower() for k in ("gemm", "nvjet", "cutlass", "xmma")))
    return {"wall_s": wall_ns / 1e9, "compute_stream": comp, "streams": len(per),
            "compute_span_s": (t1 - t0) / 1e9, "compute_busy_s": sum(b - a for a, b in cu) / 1e9,
            "compute_kernels": len(per[comp]), "compute_gemm_s": gemm / 1e9,
            "compute_gaps_s": gap_tot / 1e9, "gaps_with_side_busy_s": gap_side / 1e9,
            "gaps_gpu_idle_s": (gap_tot - gap_side) / 1e9, "gaps_over_50us": len(big),
            "gaps_over_50us_s": sum(b - a for a, b in big) / 1e9,
            "side_busy_s": sum(b - a for a, b in side) / 1e9, "side_concurrent_s": overlap(cu, side) / 1e9,
            "side_streams": {str(st): round(ktime[st] / 1e9, 6) for st in per if st != comp},
            "launch_lag_known": len(lags), "launch_lag_median_us": lags[len(lags) // 2] / 1e3 if lags else None,
            "starved_kernels": len(starved),
            "starved_kernel_s": sum(b - a for a, b, _, c in per[comp] if c in launches and a - launches[c] < 20_000) / 1e9}


def timeline_step(engine, batch, ga=1):
    """One more step, each phase under a CUDA-only torch.profiler (no CPU op recording, so the
    host is slowed as little as possible), reduced by stream_timeline."""
    from torch.profiler import ProfilerActivity
    res = {}
    for name, prof, wall_s in profiled_phases(engine, batch, [ProfilerActivity.CUDA], ga):
        wall = int(wall_s * 1e9)
        kernels, launches, waits = [], {}, {}
        for e in prof.profiler.kineto_results.events():
            dt = str(e.device_type())
            if dt.endswith("CUDA"):
                kernels.append((int(e.device_resource_id()), int(e.start_ns()), int(e.end_ns()),
                                e.name(), int(e.correlation_id())))
                continue
            if "cudaLaunch" in e.name() or "cuLaunch" in e.name() or "cudaMemcpy" in e.name():
                launches[int(e.correlation_id())] = int(e.start_ns())
            # Runtime calls that can block the host until the GPU catches up: synchronizations
            # and blocking (non-Async) copies. [count, total ms]; the phase's own closing
            # torch.cuda.synchronize() is one cudaDeviceSynchronize.
            if "Synchronize" in e.name() or e.name() in ("cudaMemcpy", "cudaMemcpy2D", "cudaMalloc", "cudaFree"):
                w = waits.setdefault(e.name(), [0, 0.0])
                w[0] += 1
                w[1] = round(w[1] + e.duration_ns() / 1e6, 3)
        res[name] = stream_timeline(kernels, launches, wall)
        res[name]["host_waits"] = waits
    return res


def syncstack_step(engine, batch):
    """One more step with every host call that can wait for the GPU wrapped and timed: the
    Python-level synchronizations (torch.cuda.synchronize, Stream.synchronize,
    Event.synchronize), device<->host Tensor.copy_ / .item() / .cpu() / .tolist() / .to(cpu),
    and the implicit synchronizations PyTorch's sync debug mode reports (not timed). Each is
    keyed by phase, kind and its innermost DeepSpeed / transformers call sites; returns the
    per-phase wall seconds and the sites sorted by time. Nothing here runs in the timed steps."""
    import traceback as tb
    import warnings
    agg, phase, busy = {}, ["fwd"], [False]

    def short(fn):
        for cut in ("site-packages/", "/site/", "dist-packages/"):
            if cut in fn:
                return fn.split(cut, 1)[1]
        return fn.rsplit("/", 1)[-1]

    def site():
        fr = tb.extract_stack()[:-3]
        keep = [f for f in fr if "deepspeed" in f.filename or "transformers" in f.filename]
        keep = (keep or fr)[-3:]
        return " < ".join(f"{short(f.filename)}:{f.lineno} {f.name}" for f in reversed(keep))

    def note(kind, dt, nbytes=0):
        a = agg.setdefault((phase[0], kind, site()), [0, 0.0, 0, 0.0])
        a[0] += 1
        a[1] += dt
        a[2] += nbytes
        a[3] = max(a[3], dt)

    def timed(kind_of, fn):
        def w(*a, **k):
            kind = None if busy[0] else kind_of(*a, **k)
            if kind is None:
                return fn(*a, **k)
            busy[0] = True
            try:
                t = time.perf_counter()
                r = fn(*a, **k)
                dt = time.perf_counter() - t
                note(kind[0], dt, kind[1])
                return r
            finally:
                busy[0] = False
        return w

    def nb(t):
        try:
            return int(t.numel()) * int(t.element_size())
        except Exception:  # noqa: BLE001
            return 0

    def copy_kind(self, src, non_blocking=False):
        if not isinstance(src, torch.Tensor) or self.device.type == src.device.type:
            return None
        way = "d2h" if src.is_cuda else "h2d"
        pin = "pinned" if (src if way == "h2d" else self).is_pinned() else "pageable"
        return (f"copy_ {way} {pin}{' non_blocking' if non_blocking else ''}", nb(src))

    def to_kind(self, *a, **k):
        dev = k.get("device", a[0] if a else None)
        if self.is_cuda and (dev == "cpu" or (isinstance(dev, torch.device) and dev.type == "cpu")):
            return (f"to cpu{' non_blocking' if k.get('non_blocking') else ''}", nb(self))
        return None

    T = torch.Tensor
    saved = [(torch.cuda, "synchronize"), (torch.cuda.Stream, "synchronize"), (torch.cuda.Event, "synchronize"),
             (T, "copy_"), (T, "item"), (T, "tolist"), (T, "cpu"), (T, "to")]
    orig = [(o, n, getattr(o, n)) for o, n in saved]
    torch.cuda.synchronize = timed(lambda *a, **k: ("torch.cuda.synchronize", 0), orig[0][2])
    torch.cuda.Stream.synchronize = timed(lambda *a, **k: ("Stream.synchronize", 0), orig[1][2])
    torch.cuda.Event.synchronize = timed(lambda *a, **k: ("Event.synchronize", 0), orig[2][2])
    T.copy_ = timed(copy_kind, orig[3][2])
    T.item = timed(lambda self: ("item", 0) if self.is_cuda else None, orig[4][2])
    T.tolist = timed(lambda self: ("tolist", 0) if self.is_cuda else None, orig[5][2])
    T.cpu = timed(lambda self, *a, **k: ("cpu()", nb(self)) if self.is_cuda else None, orig[6][2])
    T.to = timed(to_kind, orig[7][2])
    old_show = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if not busy[0]:
            note("implicit: " + str(message)[:60], 0.0)

    walls = {}
    sync0 = orig[0][2]
    try:
        warnings.showwarning = show
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = show
            torch.cuda.set_sync_debug_mode("warn")
            state = {}
            for name in ("fwd", "bwd", "opt"):
                phase[0] = name
                sync0()
                ta = time.perf_counter()
                run_phase(engine, batch, name, state)
                busy[0] = True
                sync0()
                busy[0] = False
                walls[name] = round(time.perf_counter() - ta, 4)
            state.clear()
    finally:
        torch.cuda.set_sync_debug_mode(0)
        warnings.showwarning = old_show
        busy[0] = False
        for o, n, f in orig:
            setattr(o, n, f)
    sites = [{"phase": k[0], "kind": k[1], "site": k[2], "n": v[0], "ms": round(v[1] * 1e3, 3),
              "max_ms": round(v[3] * 1e3, 3), "bytes": v[2]} for k, v in agg.items()]
    sites.sort(key=lambda r: -r["ms"])
    return {"wall_s": walls, "sites": sites[:80], "n_sites": len(sites)}


def run_sub(s, D):
    if STATE["key"] != engine_key(s):
        teardown()
        D["engine_built"] = True
        build(s, D)
    else:
        D["engine_built"] = False
    engine, cfg = STATE["engine"], STATE["cfg"]
    D["host_speed_before"] = HOST_SPEED()
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    S.reset()
    mb = int(s["mb"])
    V = int(cfg.vocab_size)
    g = torch.Generator(device="cuda")
    g.manual_seed(1234)
    if STATE["is_t5"]:
        src, tgt = int(s["src_len"]), int(s["tgt_len"])
        batch = {"input_ids": torch.randint(0, V, (mb, src), device="cuda", generator=g),
                 "labels": torch.randint(0, V, (mb, tgt), device="cuda", generator=g)}
        D["tokens_per_step"] = mb * (src + tgt)
    else:
        seq = int(s["seq_len"])
        ids = torch.randint(0, V, (mb, seq), device="cuda", generator=g)
        batch = {"input_ids": ids, "labels": ids}
        D["tokens_per_step"] = mb * seq
    ga = int(s["ds_config"].get("gradient_accumulation_steps", 1))
    D["grad_accum"] = ga
    mem(D, "steps_start")
    n_steps = int(s.get("n_steps", N_STEPS))
    times, losses, per_step = [], [], []
    D.update(step_times_s=times, losses=losses, per_step=per_step)
    run_max_a = run_max_r = 0.0
    # DSBENCH_MEMHIST=1: record every caching-allocator event of the steps (no stack traces) and
    # write them to $OUT/memhist/<sub_id>.json with the phase boundaries, so that the real
    # allocation sequence can be replayed through dsplan's allocator model offline.
    memhist = bool(os.environ.get("DSBENCH_MEMHIST")) and os.environ.get("OUT")
    marks = []
    if memhist:
        torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                                 max_entries=4000000)
        start_snap = torch.cuda.memory._snapshot()
        marks.append(("start", time.time_ns() // 1000))
    # DSBENCH_PHASE_SYNC=0: synchronize once per step only, as ../shared/deepspeed-bench and a
    # training loop do; the per-phase times are then not measured (0). By default each phase is
    # synchronized to be timed, which leaves the GPU idle while the host issues the next phase's
    # first kernels (docs/simulator.md "Known gaps").
    phase_sync = os.environ.get("DSBENCH_PHASE_SYNC", "1") != "0"
    D["phase_sync"] = phase_sync
    for i in range(n_steps):
        R["phase"] = f"{s['sub_id']}:step{i + 1}"
        torch.cuda.synchronize()
        io0 = proc_io()
        pf0 = proc_faults()
        t0 = time.perf_counter()
        ph = {"fwd_s": 0.0, "bwd_s": 0.0, "opt_s": 0.0, "fwd_peak_mb": 0.0, "bwd_peak_mb": 0.0, "opt_peak_mb": 0.0,
              "fwd_res_mb": 0.0, "bwd_res_mb": 0.0, "opt_res_mb": 0.0}
        for _ in range(ga):
            for name in ("fwd", "bwd", "opt"):
                torch.cuda.reset_peak_memory_stats()
                if memhist:
                    marks.append((f"step{i + 1}:{name}", time.time_ns() // 1000))
                ta = time.perf_counter()
                if name == "fwd":
                    out = engine(**batch)
                    prev = None  # a held output lives until the next forward returns
                    loss = out.loss
                elif name == "bwd":
                    engine.backward(loss)
                else:
                    engine.step()
                if phase_sync:
                    torch.cuda.synchronize()
                    ph[name + "_s"] += time.perf_counter() - ta
                ph[name + "_peak_mb"] = max(ph[name + "_peak_mb"], torch.cuda.max_memory_allocated() / MiB)
                ph[name + "_res_mb"] = max(ph[name + "_res_mb"], torch.cuda.max_memory_reserved() / MiB)
        if not phase_sync:
            torch.cuda.synchronize()
        times.append(round(time.perf_counter() - t0, 4))
        io1 = proc_io()
        pf1 = proc_faults()
        ph["minflt"], ph["majflt"], ph["nivcsw"] = (pf1[k] - pf0[k] for k in range(3))
        ph["cpu_s"] = pf1[3] - pf0[3]
        ph["disk_read_mb"] = (io1[0] - io0[0]) / MiB
        ph["disk_write_mb"] = (io1[1] - io0[1]) / MiB
        losses.append(float(loss.detach().float().item()))
        # "hold_output": keep this step's output object (logits, and the K/V cache with
        # use_cache) until the next step's forward returns, as a loop written
        # `out = engine(**batch); engine.backward(out.loss); engine.step()` does.
        prev = out if s.get("hold_output") else None
        del out, loss
        ph = {k: round(v, 4 if k.endswith("_s") else 1) for k, v in ph.items()}
        ph["end_alloc_mb"] = round(torch.cuda.memory_allocated() / MiB, 1)
        per_step.append(ph)
        run_max_a = max(run_max_a, ph["fwd_peak_mb"], ph["bwd_peak_mb"], ph["opt_peak_mb"])
        run_max_r = max(run_max_r, ph["fwd_res_mb"], ph["bwd_res_mb"], ph["opt_res_mb"])
        D["steps_done"] = i + 1
        D["steps_max_alloc_mb"] = round(run_max_a, 1)
        D["steps_max_reserved_mb"] = round(run_max_r, 1)
        dump()
    prev = None  # noqa: F841 (drop a held output before the extra steps and teardown)
    mem(D, "steps_end")
    D["host_speed_after"] = HOST_SPEED()
    # DSBENCH_KPROF=1: one more step after the timed ones, each phase (forward, backward,
    # optimizer step) under its own torch.profiler, reduced to the phase's wall time, the GPU's
    # busy time (union of kernel and copy intervals), and the kernels by name (count, seconds).
    # It tells where a step's time goes in real DeepSpeed without changing the timed steps. With
    # gradient accumulation every micro-step of the step is profiled (profiled_phases).
    if os.environ.get("DSBENCH_KPROF"):
        D["kprof"] = kprof_step(engine, batch, ga)
        dump()
    # DSBENCH_TIMELINE=1: one more step under a CUDA-only profiler, reduced stream by stream
    # (stream_timeline): is the compute stream idle, and waiting on a side stream or on the host?
    # DSBENCH_SYNCSITES=1: one more step with every host call that can wait for the GPU timed
    # and keyed by its DeepSpeed / transformers call site (syncstack_step).
    for env, key, extra_step in (("DSBENCH_TIMELINE", "timeline", timeline_step),
                                 ("DSBENCH_SYNCSITES", "syncsites", syncstack_step)):
        if os.environ.get(env) and (ga == 1 or key == "timeline"):
            try:
                D[key] = extra_step(engine, batch, ga) if key == "timeline" else extra_step(engine, batch)
            except Exception:  # noqa: BLE001
                D[key + "_error"] = traceback.format_exc()[-2000:]
            dump()
    if memhist:
        marks.append(("end", time.time_ns() // 1000))
        snap = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        ev = [[e["action"], e["addr"], e["size"], e.get("stream", 0), e.get("time_us", 0)]
              for e in snap["device_traces"][0]]
        segs = lambda sn: [[g["address"], g["total_size"], g.get("stream", 0), g.get("segment_type", ""),
                            [[b["size"], b["state"]] for b in g["blocks"]]] for g in sn["segments"]]
        os.makedirs(os.path.join(os.environ["OUT"], "memhist"), exist_ok=True)
        with open(os.path.join(os.environ["OUT"], "memhist", s["sub_id"] + ".json"), "w") as f:
            json.dump({"sub_id": s["sub_id"], "marks": marks, "events": ev, "segments_start": segs(start_snap),
                       "segments_end": segs(snap)}, f)
    tail = sorted(times[2:]) if len(times) > 2 else sorted(times)
    n = len(tail)
    med = tail[n // 2] if n % 2 else 0.5 * (tail[n // 2 - 1] + tail[n // 2])
    D["median_step_s"] = round(med, 4)
    D["median_over_steps"] = f"3..{len(times)}"
    for name in ("fwd", "bwd", "opt"):
        v = sorted(p[name + "_s"] for p in per_step[2:]) or [0.0]
        D["median_" + name + "_s"] = v[len(v) // 2]
    D["step1_max_alloc_mb"] = max(per_step[0][k] for k in ("fwd_peak_mb", "bwd_peak_mb", "opt_peak_mb"))
    if len(per_step) > 1:
        D["step2on_max_alloc_mb"] = max(p[k] for p in per_step[1:] for k in ("fwd_peak_mb", "bwd_peak_mb", "opt_peak_mb"))
    D["tokens_per_s"] = round(D["tokens_per_step"] * ga / max(med, 1e-9), 1)
    del batch


oom_seen = False
for s in subs:
    if case.get("optimizer_override") and s.get("offload_optimizer", "none") == "none":
        s["optimizer_override"] = case["optimizer_override"]
    D = {"sub_id": s["sub_id"], "mb": s["mb"], "stage": s.get("stage"), "grad_checkpointing": s["grad_checkpointing"],
         "offload_optimizer": s.get("offload_optimizer"), "offload_param": s.get("offload_param"),
         "seq_len": s.get("seq_len"), "src_len": s.get("src_len"), "tgt_len": s.get("tgt_len"),
         "ds_config": s["ds_config"], "model_config": s["model_config"], "pred": s.get("pred"),
         "variant": s.get("variant"), "status": "started"}
    R["subs"].append(D)
    if oom_seen:
        D["status"] = "not_run_after_oom"
        continue
    t_sub = time.time()
    try:
        run_sub(s, D)
        D["status"] = "ok"
    except torch.cuda.OutOfMemoryError as e:
        D["status"] = "oom"
        D["error"] = (str(e) or repr(e))[:2000]
        D["error_phase"] = R["phase"]
        D["error_traceback"] = traceback.format_exc()[-2500:]
        try:
            D["oom_max_alloc_mb"] = round(torch.cuda.max_memory_allocated() / MiB, 1)
            D["oom_max_reserved_mb"] = round(torch.cuda.max_memory_reserved() / MiB, 1)
            D["oom_alloc_mb"] = round(torch.cuda.memory_allocated() / MiB, 1)
        except Exception:  # noqa: BLE001
            pass
        oom_seen = True
    except Exception as e:  # noqa: BLE001
        txt = traceback.format_exc()
        D["status"] = "oom" if ("out of memory" in txt.lower()) else "error"
        D["error"] = (str(e) or repr(e))[:2000]
        D["error_phase"] = R["phase"]
        D["error_traceback"] = txt[-5000:]
        if D["status"] == "oom":
            oom_seen = True
        else:
            try:
                teardown()
            except Exception:  # noqa: BLE001
                pass
    D["sub_wall_s"] = round(time.time() - t_sub, 2)
    dump()

sts = [d["status"] for d in R["subs"]]
R["status"] = "ok" if all(x == "ok" for x in sts) else ("oom" if "oom" in sts else ("error" if "error" in sts else "partial"))
R["oom"] = "oom" in sts
if R["status"] == "error":
    R["error"] = "; ".join(f"{d['sub_id']}: {str(d.get('error'))[:300]}" for d in R["subs"] if d["status"] == "error")
    R["error_traceback"] = "\n".join(d.get("error_traceback", "") for d in R["subs"] if d["status"] == "error")[-6000:]
R["phase"] = "done"
R["case_wall_s"] = round(time.time() - T_PROC0, 2)
S.stop = True
dump()
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
