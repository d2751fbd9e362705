#!/usr/bin/env python3
"""Does where the training process runs on the host change a host-bound step?

Host-bound DeepSpeed steps (small models, ZeRO-3's hooks, T5) measured 1.3-1.7x apart for one
config on different days of one GPU kind, while the host-speed loops (probe_util.host_speed) read
the same. This probe times one host-bound step in child processes pinned (sched_setaffinity) to
each NUMA node's CPUs, to the CPUs local to GPU 0, and to all CPUs, and records the host CPU's
model, clock and load, so that a difference in placement (or in the host) shows up as a number.

The step: a 12-layer nn.TransformerEncoder of width 64 on 4 x 32 tokens, forward, backward and
AdamW (foreach), about 400 kernels, all far below the GPU's time. Run on the GPU machine:
    python3 tools/probes/host_placement.py --out F.json
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time


def read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def parse_cpulist(text):
    cpus = []
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            a, b = part.split("-")
            cpus.extend(range(int(a), int(b) + 1))
        else:
            cpus.append(int(part))
    return cpus


def host_facts():
    # The first CPU's block; a VM may hide the model name, family / model / stepping and the
    # boot-time bogomips still tell CPU generations apart.
    model = {}
    for line in (read("/proc/cpuinfo") or "").splitlines():
        if not line.strip():
            break
        k, _, v = line.partition(":")
        if k.strip() in ("model name", "cpu family", "model", "stepping", "cache size", "bogomips",
                         "cpu MHz", "microcode"):
            model[k.strip()] = v.strip()
    nodes = {}
    base = "/sys/devices/system/node"
    if os.path.isdir(base):
        for name in sorted(os.listdir(base)):
            if name.startswith("node") and name[4:].isdigit():
                nodes[name] = parse_cpulist(read(f"{base}/{name}/cpulist"))
    gpu = {}
    try:
        bus = subprocess.run(["nvidia-smi", "--query-gpu=pci.bus_id", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.split()[0]
        dev = "/sys/bus/pci/devices/" + bus.lower()[-12:]
        gpu = {"pci_bus_id": bus, "numa_node": read(dev + "/numa_node"),
               "local_cpus": parse_cpulist(read(dev + "/local_cpulist"))}
    except Exception as e:  # noqa: BLE001
        gpu = {"error": repr(e)}
    freqs = []
    for cpu in range(os.cpu_count() or 0):
        f = read(f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_cur_freq")
        if f:
            freqs.append(int(f) / 1000)
    return {"cpu_model": model, "cpus": os.cpu_count(), "allowed_cpus": sorted(os.sched_getaffinity(0)),
            "numa_nodes": nodes, "gpu0": gpu, "loadavg": os.getloadavg(),
            "cpu_mhz_now": freqs[:64], "governor": read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"),
            "kernel": platform.release()}


def child(reps):
    import torch
    import torch.nn as nn
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from probe_util import host_speed
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(64, 4, 128, batch_first=True, device="cuda")
    model = nn.TransformerEncoder(layer, 12, enable_nested_tensor=False).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    x = torch.randn(4, 32, 64, device="cuda")

    def step():
        loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - t0) * 1e3)
    cpu = os.sched_getcpu() if hasattr(os, "sched_getcpu") else None
    return {"step_ms_median": round(statistics.median(ts), 3), "step_ms_min": round(min(ts), 3),
            "step_ms_max": round(max(ts), 3), "host_speed": host_speed(), "ran_on_cpu": cpu}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        cpus = [int(c) for c in args.child.split(",")]
        os.sched_setaffinity(0, cpus)
        print(json.dumps(child(args.reps)))
        return
    facts = host_facts()
    sets = {"all": facts["allowed_cpus"]}
    for name, cpus in facts["numa_nodes"].items():
        if cpus and len(facts["numa_nodes"]) > 1:
            sets[name] = cpus
    local = facts["gpu0"].get("local_cpus") or []
    if local and sorted(local) != sorted(facts["allowed_cpus"]):
        sets["gpu0_local"] = local
    # One CPU alone (the first and the last allowed): a process whose helper threads share its CPU.
    sets["one_cpu_first"] = facts["allowed_cpus"][:1]
    sets["one_cpu_last"] = facts["allowed_cpus"][-1:]
    results = {}
    for rnd in range(2):
        for name, cpus in sets.items():
            cpus = [c for c in cpus if c in facts["allowed_cpus"]]
            if not cpus:
                continue
            t0 = time.time()
            r = subprocess.run([sys.executable, os.path.abspath(__file__), "--out", "-", "--reps",
                                str(args.reps), "--child", ",".join(map(str, cpus))],
                               capture_output=True, text=True, timeout=300)
            try:
                res = json.loads(r.stdout.strip().splitlines()[-1])
            except Exception:  # noqa: BLE001
                res = {"error": (r.stderr or r.stdout)[-800:]}
            res["cpus"] = len(cpus)
            res["wall_s"] = round(time.time() - t0, 1)
            results.setdefault(name, []).append(res)
            print(name, rnd, res.get("step_ms_median"), res.get("host_speed"), file=sys.stderr)
    out = {"facts": facts, "placements": results}
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
