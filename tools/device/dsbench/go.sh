#!/bin/bash
# GPU-machine side of one device call: plain-PyTorch family probes, then DeepSpeed case groups.
#   bash .dsbench/go.sh PROBE_S TOTAL_S CASES.jsonl [CASES2.jsonl ...]
# PROBE_S: seconds for the probes (0 = none); TOTAL_S: the whole call's budget from now.
# Writes to $OUT: machine.json, probes.jsonl, probe.log, cases.jsonl (one group record per line),
# logs.tgz, runner_summary.json, torch_ext.tgz (the just-in-time built DeepSpeed ops, for the next call).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
T0=$(date +%s)
PROBE_S=$1; TOTAL=$2; shift 2
export PYTHONPATH=$HERE/site${PYTHONPATH:+:$PYTHONPATH}
export TORCH_EXTENSIONS_DIR=/tmp/torch_ext PYTHONUNBUFFERED=1
# NVMe offload builds DeepSpeed's async_io op, which needs libaio; the device image lacks it, so
# tools/device/dsbench/fetch_libaio.sh unpacks the Debian packages into aio/ beside this script.
if [ -d "$HERE/aio/usr/include" ]; then
  AIO_LIB=$HERE/aio/usr/lib/x86_64-linux-gnu
  export CFLAGS="-I$HERE/aio/usr/include${CFLAGS:+ $CFLAGS}" LDFLAGS="-L$AIO_LIB${LDFLAGS:+ $LDFLAGS}"
  export CPATH="$HERE/aio/usr/include${CPATH:+:$CPATH}" LIBRARY_PATH="$AIO_LIB${LIBRARY_PATH:+:$LIBRARY_PATH}"
  export LD_LIBRARY_PATH="$AIO_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "libaio from $HERE/aio"
fi
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p "$OUT" /tmp/dsbench_state /tmp/torch_ext
if [ -f "$HERE/torch_ext.tgz" ]; then
  tar -xzf "$HERE/torch_ext.tgz" -C /tmp && find /tmp/torch_ext -type f -exec touch {} + && echo "restored torch_ext: $(ls /tmp/torch_ext/*/ 2>/dev/null | tr '\n' ' ')"
fi
python3 - > "$OUT/machine.json" <<'PYEOF'
import json, os, platform, subprocess, torch, psutil, transformers
p = torch.cuda.get_device_properties(0)
def cpu_model():
    # The host CPU: host-bound steps differ between machines of one GPU kind. A VM may hide the
    # model name ("Intel(R) Xeon(R) Processor"); family / model / stepping, the cache and the
    # clock the kernel measured at boot (bogomips) still tell CPU generations apart.
    keys = ("model name", "cpu family", "model", "stepping", "cache size", "bogomips", "cpu MHz")
    out = {}
    try:
        for line in open("/proc/cpuinfo"):
            if not line.strip():
                break  # the first CPU's block
            k, _, v = line.partition(":")
            if k.strip() in keys:
                out[k.strip()] = v.strip()
    except OSError as e:
        return repr(e)
    return out
try:
    drv = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm,power.limit", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip()
except Exception as e:
    drv = repr(e)
print(json.dumps({"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
  "cudnn": torch.backends.cudnn.version(), "transformers": transformers.__version__, "gpu": p.name,
  "gpu_total_mb": round(p.total_memory / 2**20, 1), "nvidia_smi": drv, "cpus": os.cpu_count(),
  "host_mem_total_mb": round(psutil.virtual_memory().total / 2**20, 1), "kernel": platform.release(),
  "cpu_model": cpu_model(), "loadavg": os.getloadavg(), "cpu_freq_mhz": getattr(psutil.cpu_freq(), "current", None)}))
PYEOF
cat "$OUT/machine.json"
if [ "$PROBE_S" -gt 0 ]; then
  timeout $((PROBE_S + 20)) python3 "$HERE/family_activation_probe.py" "$HERE/probe-configs.json" "$OUT/probes.jsonl" \
    --deadline "$PROBE_S" > "$OUT/probe.log" 2>&1
  echo "probes rc=$? ($(grep -c '"status": "ok"' "$OUT/probes.jsonl" 2>/dev/null) ok)"; tail -4 "$OUT/probe.log"
fi
cat "$@" > /tmp/dsbench_state/cases_all.jsonl
LEFT=$((TOTAL - ($(date +%s) - T0) - 25))
echo "runner deadline ${LEFT}s"
DONE_ARGS=()
# done.txt beside this script (ids measured by an earlier call on a machine since given back)
[ -f "$HERE/done.txt" ] && DONE_ARGS=(--done "$HERE/done.txt") && echo "skipping $(wc -l < "$HERE/done.txt") ids in done.txt"
python3 "$HERE/runner.py" --cases /tmp/dsbench_state/cases_all.jsonl --out "$OUT" --deadline "$LEFT" "${DONE_ARGS[@]}"
tar -czf "$OUT/torch_ext.tgz" -C /tmp torch_ext 2>/dev/null
echo "torch_ext.tgz $(du -h "$OUT/torch_ext.tgz" | cut -f1); total $(( $(date +%s) - T0 ))s"
