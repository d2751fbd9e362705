#!/usr/bin/env python3
"""Run the cases of cases/master.jsonl in priority order, one process each, inside a deadline.

usage: runner.py --cases master.jsonl --out DIR --deadline SECONDS [--state DIR] [--done FILE]

A case whose estimated wall time does not fit in what is left of the deadline is deferred
(the next call runs it); the order is otherwise kept. Each case's process is killed at its
own timeout; what it had measured (the driver rewrites its result after every step) is kept.
Results go to OUT/cases.jsonl as they finish; logs to OUT/logs.tgz at the end.
"""
import argparse
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
T0 = time.time()


def log(msg):
    print(f"[runner {time.time() - T0:6.1f}s] {msg}", flush=True)


def ext_built(name):
    root = os.environ.get("TORCH_EXTENSIONS_DIR", "")
    return bool(glob.glob(os.path.join(root, "**", name, f"{name}.so"), recursive=True))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--deadline", type=float, default=555)
    ap.add_argument("--state", default="/tmp/dsbench_state")
    ap.add_argument("--done", default=None, help="carried file of ids already measured")
    ap.add_argument("--only", default=None, help="comma-separated ids to run (debug)")
    ap.add_argument("--n-steps", type=int, default=8)
    a = ap.parse_args()

    os.makedirs(a.out, exist_ok=True)
    os.makedirs(a.state, exist_ok=True)
    logdir = os.path.join(a.state, "logs")
    os.makedirs(logdir, exist_ok=True)
    done = set()
    for f in [os.path.join(a.state, "done.txt"), a.done]:
        if f and os.path.exists(f):
            done |= {l.strip() for l in open(f) if l.strip()}
    cases = [json.loads(l) for l in open(a.cases) if l.strip()]
    if a.only:
        keep = set(a.only.split(","))
        cases = [c for c in cases if c["id"] in keep]
    override_file = os.path.join(a.state, "optimizer_override")
    override = open(override_file).read().strip() if os.path.exists(override_file) else None
    log(f"{len(cases)} cases, {len(done)} done already, deadline {a.deadline}s, override={override}")

    results_path = os.path.join(a.out, "cases.jsonl")
    deferred = []
    port = 29500 + int(time.time()) % 500
    consecutive_errors = 0
    for c in cases:
        if c["id"] in done:
            continue
        if consecutive_errors >= 2:
            log(f"stop: two cases in a row ended in error; not running {c['id']} and later")
            deferred.append(c["id"])
            continue
        remaining = a.deadline - (time.time() - T0)
        est = float(c["est_s"])
        if c["offload_optimizer"] == "none" and not ext_built("fused_adam") and override is None:
            est += 90
        if c.get("needs_cpu_adam") and not ext_built("cpu_adam"):
            est += 100
        if c.get("needs_aio") and not ext_built("async_io"):
            est += 60
        if est > remaining:
            log(f"defer {c['id']}: est {est:.0f}s > {remaining:.0f}s left")
            deferred.append(c["id"])
            continue
        tries = 0
        while True:
            tries += 1
            c2 = dict(c)
            c2["n_steps"] = c.get("n_steps", a.n_steps)
            if override and c["offload_optimizer"] == "none":
                c2["optimizer_override"] = override
            cpath = os.path.join(a.state, c["id"] + ".case.json")
            rpath = os.path.join(a.state, c["id"] + ".result.json")
            lpath = os.path.join(logdir, c["id"] + ".log")
            for p in (rpath, rpath + ".live"):
                if os.path.exists(p):
                    os.remove(p)
            json.dump(c2, open(cpath, "w"))
            remaining = a.deadline - (time.time() - T0)
            tmo = max(30.0, min(remaining - 3, max(est * 2.5, est + 120)))
            port += 1
            env = dict(os.environ, MASTER_PORT=str(port), PYTHONUNBUFFERED="1")
            env.update(c.get("env", {}))
            log(f"start {c['id']} (est {est:.0f}s, timeout {tmo:.0f}s, try {tries})")
            t = time.time()
            with open(lpath, "w") as lf:
                pr = subprocess.Popen([sys.executable, os.path.join(HERE, "driver.py"), cpath, rpath],
                                      stdout=lf, stderr=subprocess.STDOUT, env=env, start_new_session=True)
                killed = False
                try:
                    rc = pr.wait(timeout=max(1.0, tmo - 4))
                except subprocess.TimeoutExpired:
                    killed = True
                    # The driver dumps every thread's Python stack on SIGUSR1 (into its log),
                    # so a case that never finishes shows where it was.
                    try:
                        pr.send_signal(signal.SIGUSR1)
                        pr.wait(timeout=3)
                    except (subprocess.TimeoutExpired, ProcessLookupError):
                        pass
                    os.killpg(pr.pid, signal.SIGKILL)
                    rc = pr.wait()
            wall = time.time() - t
            try:
                R = json.load(open(rpath))
            except Exception as e:  # noqa: BLE001
                R = {"id": c["id"], "model": c["model"], "plan_rank": c["plan_rank"], "variant": c["variant"],
                     "ds_config": c["ds_config"], "pred": c["pred"], "status": "error",
                     "error": f"no result file ({e!r})"}
            if os.path.exists(rpath + ".live"):
                try:
                    lv = json.load(open(rpath + ".live"))
                    R.update({k: v for k, v in lv.items() if k.startswith("live_")})
                    R["live_phase"], R["live_t"] = lv.get("phase"), lv.get("t")
                except Exception:  # noqa: BLE001
                    pass
            R["runner_wall_s"] = round(wall, 1)
            R["runner_rc"] = rc
            R["runner_try"] = tries
            # NVMe offload's swap files (driver.nvme_paths) go with the case.
            shutil.rmtree(os.environ.get("DSBENCH_NVME_DIR", "/tmp/dsbench_nvme"), ignore_errors=True)
            if killed:
                R["status"] = "timeout" if R.get("status") in ("started", None) else R["status"]
                R["error"] = (R.get("error") or "") + f" [killed by runner after {tmo:.0f}s in phase {R.get('phase')}]"
            elif R.get("status") == "started":
                R["status"] = "error"
                R["error"] = f"process ended rc={rc} in phase {R.get('phase')} (signal -9 = killed, e.g. host OOM)"
            if R.get("status") in ("error", "timeout"):
                try:
                    R["log_tail"] = open(lpath, errors="replace").read()[-3000:]
                except Exception:  # noqa: BLE001
                    pass
            for s in R.get("subs", []):
                log(f"  sub {s.get('sub_id')}: {s.get('status')} peak_alloc={s.get('steps_max_alloc_mb')} "
                    f"res={s.get('steps_max_reserved_mb')} med={s.get('median_step_s')} err={str(s.get('error'))[:200]}")
            log(f"end {c['id']}: {R.get('status')} phase={R.get('phase')} wall={wall:.0f}s "
                f"peak_alloc={R.get('steps_max_alloc_mb')} MiB med={R.get('median_step_s_3to8')} "
                f"opt={R.get('optimizer_wrapper')}/{R.get('optimizer_inner')} err={str(R.get('error'))[:300]}")
            txt = (R.get("error_traceback") or "") + (R.get("error") or "") + (R.get("log_tail") or "")
            if (R.get("status") == "error" and override is None and c["offload_optimizer"] == "none" and tries == 1
                    and "fused_adam" in txt and ("Error building extension" in txt or "ninja" in txt.lower())):
                override = "torch_adam"
                open(override_file, "w").write(override)
                R["status"] = "error_fused_adam_build"
                with open(results_path, "a") as f:
                    f.write(json.dumps(R, default=str) + "\n")
                log("FusedAdam failed to build: rerunning this and later no-offload cases with torch_adam=true")
                continue
            break
        consecutive_errors = consecutive_errors + 1 if R.get("status") == "error" else 0
        with open(results_path, "a") as f:
            f.write(json.dumps(R, default=str) + "\n")
        with open(os.path.join(a.state, "results.jsonl"), "a") as f:
            f.write(json.dumps(R, default=str) + "\n")
        with open(os.path.join(a.state, "done.txt"), "a") as f:
            f.write(c["id"] + "\n")
    log(f"deferred: {deferred}")
    try:
        with tarfile.open(os.path.join(a.out, "logs.tgz"), "w:gz") as tf:
            tf.add(logdir, arcname="logs")
    except Exception as e:  # noqa: BLE001
        log(f"tar logs failed: {e!r}")
    json.dump({"deferred": deferred, "runner_wall_s": round(time.time() - T0, 1), "override": override,
               "fused_adam_built": ext_built("fused_adam"), "cpu_adam_built": ext_built("cpu_adam")},
              open(os.path.join(a.out, "runner_summary.json"), "w"))


if __name__ == "__main__":
    main()
