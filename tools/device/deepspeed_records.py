#!/usr/bin/env python3
"""Flattens the DeepSpeed validation groups of docs/validation/deepspeed/results-call*.jsonl into
run records that `dsplan accuracy --calibration FILE` reads (the format of
../shared/calibration/README.md: one run per line).

usage: deepspeed_records.py DIR > DIR/records-h200.jsonl

Which runs are kept, and how:
  * The cases of a group ran one after another in one process. After a stage-0/1/2 engine the
    process frees its memory (the next case's steps start at most 65 MiB higher); after a
    stage-3 engine it does not (docs/validation/deepspeed/README.md, "Caveats"). So a case
    after a stage-3 case of its group keeps only its step time (memory_valid false); the others
    keep memory too.
  * ok runs: peak allocated and reserved over the steps, median step time of steps 3..n.
  * runs of a group that recorded the allocator's history (env DSBENCH_MEMHIST): their steps
    are slowed by the recording, so they keep memory but are marked timing_valid false.
  * oom runs: kept as a verdict (dsplan must say "does not fit") when their memory is valid.
  * groups run as rank 0 of N under PyTorch's fake process group (the case's
    emulate_world_size, recorded by the driver as emulated_world_size): world_size N and
    "emulated"; their memory is one rank's, their step time moved no data (timing_valid false;
    dsplan accuracy compares it with a prediction of that emulation: no link crossed, the fake
    backend's all-gathers priced as local copies).
  * cases the runner reran with torch.optim.AdamW after FusedAdam failed to build (the group's
    optimizer_override "torch_adam"): the record's ds_config gets optimizer.params.torch_adam,
    as DeepSpeed was given it.
Nothing is fitted or adjusted.
"""
import glob
import json
import os
import sys


def ran_ds_config(group, sub):
    """The ds_config DeepSpeed was given for |sub| of |group|. The runner reruns a case with
    torch.optim.AdamW when FusedAdam failed to build (runner.py's optimizer_override); the driver
    adds torch_adam to the config it passes DeepSpeed, not to the sub's recorded one."""
    ds_config = sub["ds_config"]
    if ((group.get("optimizer_override") or sub.get("optimizer_override")) == "torch_adam"
            and sub.get("offload_optimizer", "none") == "none"):
        ds_config = json.loads(json.dumps(ds_config))
        ds_config.setdefault("optimizer", {}).setdefault("params", {})["torch_adam"] = True
    return ds_config


def main():
    d = sys.argv[1]
    for f in sorted(glob.glob(os.path.join(d, "results-call*.jsonl"))):
        call = os.path.basename(f).split("-")[-1].split(".")[0]
        for line in open(f):
            if not line.strip():
                continue
            g = json.loads(line)
            after_stage3 = False
            for s in g.get("subs", []):
                status = s.get("status")
                valid = not after_stage3
                if s.get("stage") == 3:
                    after_stage3 = True
                if status not in ("ok", "oom") or (status == "oom" and not valid):
                    continue
                cfg = dict(s["model_config"])
                ds_config = ran_ds_config(g, s)
                r = {
                    "id": s["sub_id"],
                    "model": g.get("model") or s["sub_id"],
                    "source": f"docs/validation/deepspeed/results-{call}.jsonl",
                    "model_config": cfg,
                    "attn_implementation": s.get("attn_implementation") or "sdpa",
                    "ds_config": ds_config,
                    "mb": s["mb"],
                    "seq_len": s.get("seq_len"),
                    "src_len": s.get("src_len"),
                    "tgt_len": s.get("tgt_len"),
                    "grad_checkpointing": bool(s.get("grad_checkpointing")),
                    "optimizer_wrapper": s.get("optimizer_wrapper"),
                    "status": status,
                    "memory_valid": valid,
                }
                world = int(g.get("emulated_world_size") or 1)
                if world > 1:
                    r["world_size"] = world
                    r["emulated"] = "fake process group (torch.testing._internal.distributed.fake_pg)"
                    r["emulated_rank"] = int(g.get("emulated_rank") or 0)
                    r["timing_valid"] = False
                env = g.get("env") or {}
                if env.get("DSBENCH_MEMHIST"):
                    r["timing_valid"] = False
                    if world > 1:  # not even a step without communication
                        r["step_without_communication"] = False
                # glibc's malloc held to its heap (dsplan's Plan::malloc_heap, kMallocHeapEnv).
                if (env.get("MALLOC_ARENA_MAX") == "1" and env.get("MALLOC_MMAP_MAX_") == "0"
                        and "MALLOC_TRIM_THRESHOLD_" in env):
                    r["malloc_heap"] = True
                if status == "ok":
                    if valid:
                        r["steps_max_alloc_mb_corrected"] = s["steps_max_alloc_mb"]
                        r["steps_max_reserved_mb_corrected"] = s["steps_max_reserved_mb"]
                    r["median_step_s_3to8"] = s.get("median_step_s")
                    r["step_times_s"] = s.get("step_times_s")
                if "phase_sync" in s:  # the driver's, from 2026-12-04: False = one sync per step
                    r["phase_sync"] = bool(s["phase_sync"])
                for k in ("host_speed_before", "host_speed_after"):  # the driver's, from 2026-12-04
                    if s.get(k):
                        r[k] = s[k]
                print(json.dumps(r))


if __name__ == "__main__":
    main()
