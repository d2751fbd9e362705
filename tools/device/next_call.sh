#!/bin/bash
# The next device call (written in session 26, when no machine came; updated session 28): what to measure, by card.
# Session 41, suggested calls: (1) GEMMNEW=0 SDPAMASK=0 bash tools/device/next_call.sh 565 (pair-1217, ~7 min, then the
# lists below as time allows); (2) bash tools/device/next_call.sh 565 (the new catalog entries' GEMM rows,
# ~2 min, tools/device/gemm_newfam.sh, and masked SDPA, ~1 min, then the lists).
# Session 41: pair-1217 first on either card, then window-1217 (Mistral cut to 4 layers at 4095 and 4096 tokens: is the
# SDPA mask built at the window's own length?), (registered: each session-40 miss beside a measured family's control,
# alternating in one process, to tell the family's mechanism from the host's speed). The H100 default then runs gemma2-1215
# (its 8192-token and eager cases) and phi3-1215; qwen3-1215, gemma3-1216 and moe-1216 ran there in session 40.
# Session 40: gemma3-1216 (Gemma 3's language model) and moe-1216 (the experts' trace: depth-cut Qwen3-30B-A3B and
# Mixtral-8x7B), both registered, after the three 1215 sets, on either card; transformers-src adds qwen3_moe, qwen2_moe, mixtral.
# Session 39: MALLOCTRACE=1 runs malloctrace-1215 (below). qwen3-1215, phi3-1215 and gemma2-1215 first on either card (registered: Qwen3 top plans, a family no run has; the driver records
# transformers' n_params, which must equal dsplan's count). CASES_H100 defaults to its H100 list.
# H200: bigtok-1212's and accum3-1211's H200 lists (sessions 36, 35), accum-1210's H200 list (registered session 34: top plans with gradient accumulation),
# accum2-1211's H200 list (registered session 35), then wsweep-1207's two H200 cases (t5-11b's allocator history, llama-3.1-8b's stage-3 plan as
# rank 0) and t511b-1208 (t5-11b under a kernel profile); CASES="FILES" runs other lists instead.
# H100: fetchwait-1214 (registered session 38, either card: CASES_H100=docs/validation/deepspeed/fetchwait-1214/cases-fetchwait.jsonl;
# on an H200 add it to CASES); bigtok-1212's and accum3-1211's H100 lists ran in session 36; CASES_H100="FILES" runs lists.
# accum-1210's and accum2-1211's H100 lists, perrank-1209 and retain-1208's history ran on the H100 (sessions 34-35).
# PLACEMENT=1 adds host_placement.py (~60 s). Session 37's plan for the next H200: STACKREP=3 GEMMX=1 (stackrep-h200-1213's
# registered rule, and h200-measured's GEMM table to 131072 tokens: tools/device/gemmx.sh), then the lists above.
# Since session 38 h200-measured holds derived rows there (tools/dev/derive_gemm_rows.py): put the measured ones in with
# profile_gemm_rows.py --normalize on the profile as it was before commit 302c806 (git show 4a21fa3:profiles/h200-measured.yaml),
# not on today's, whose derived keys --normalize would keep.
# Usage (device side, repository root): bash tools/device/next_call.sh SECONDS; stage dist/ with
# tools/device/stage.sh and carry [".dsbench", "dist"] (.dsbench: cp tools/device/dsbench/* .dsbench/ plus site/).
T0=$(date +%s)
bundle() {
  find "$OUT" -name torch_ext.tgz -delete
  tar -czf /tmp/call-bundle.tgz -C "$OUT" . && rm -rf "${OUT:?}"/* && mv /tmp/call-bundle.tgz "$OUT/bundle.tgz"
  ls -la "$OUT"
}
# A call cut short by the device's time limit (less device time left than asked) still returns
# what ran, as one archive.
trap 'echo "terminated at $(( $(date +%s) - T0 ))s: bundling what ran"; bundle; exit 124' TERM INT
G=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "GPU: $G"
grep -m1 "model name" /proc/cpuinfo; nproc; uptime
export LD_LIBRARY_PATH=$PWD/dist${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
DSPLAN_DATA_DIR=$PWD dist/dsplan --model gpt2 --gpus 1 > $OUT/nvml-plan.txt 2>&1; echo "plan rc=$?"
head -12 $OUT/nvml-plan.txt
DSPLAN_DATA_DIR=$PWD dist/dsplan --model gpt2 --gpus 1 --json > $OUT/nvml-plan.json 2>$OUT/nvml-plan-json.err; echo "json rc=$?"
python3 -c "import json;d=json.load(open('$OUT/nvml-plan.json'));print('hardware:',{k:v for k,v in d['hardware'].items() if k in ('name','advice','memory_gib')})" 2>&1 | head -3
# What the fake process group of the emulated runs does on the GPU (session 33; seconds). Ran on
# the H100 in session 34 (a torch fact, not the card's): only with FAKEPG=1 now.
[ -n "$FAKEPG" ] && timeout 60 python3 tools/probes/fake_pg_probe.py --out $OUT/fake-pg.json > /dev/null 2> $OUT/fake-pg.log; echo "fake_pg rc=$?"; tail -8 $OUT/fake-pg.log
# torch.optim.AdamW's foreach step rate beside the step's other kernels (session 33; ~20 s), and
# DeepSpeed's FusedAdam from .dsbench/site (both measured on H100s in sessions 34-35: only with PROBES=1 now) (session 34: without it on the path the H100 call
# measured no FusedAdam). Its just-in-time build (~60 s) lands in go.sh's extension folder, so
# the cases after it do not build it again.
mkdir -p /tmp/torch_ext
if [ -n "$PROBES" ]; then
PYTHONPATH=$PWD/.dsbench/site TORCH_EXTENSIONS_DIR=/tmp/torch_ext timeout 200 python3 tools/probes/optimizer_kernels.py --out $OUT/optimizer-kernels.json > /dev/null 2> $OUT/optimizer-kernels.log; echo "optkernels rc=$?"
python3 -c "import json;d=json.load(open('$OUT/optimizer-kernels.json'))['kernels'];print({k:round(v.get('bytes_per_s',0)/1e12,2) for k,v in d.items()}, 'norm loop us/tensor', 1e6*d.get('norm_loop',{}).get('host_seconds_per_tensor',0))" 2>&1 | tail -2
# ZeRO-1's engine.step() per parameter tensor at widths 64, 512 and 1536 (session 34: real models'
# step ran 8-26 ms longer than the 64-wide stacks' per-tensor cost on an H100; ~60 s).
PYTHONPATH=$PWD/.dsbench/site TORCH_EXTENSIONS_DIR=/tmp/torch_ext timeout 150 python3 tools/probes/z12_step_width.py --out $OUT/z12-step-width.json > /dev/null 2> $OUT/z12-step-width.log; echo "z12width rc=$?"; grep width $OUT/z12-step-width.log
fi
# Session 36: Linear GEMMs above the profile tables' last token count (16384), which the
# planner's large micro-batches of small models reach (bert-base mb 218: 111,616 tokens); the cost
# model extends each measured series affinely in time (docs/simulator.md). ~30 s.
# GEMMX=1 (session 37) measures instead every catalog Linear up to 2560 wide (the 49 nt series
# of the H100 table with max(out, in) <= 10240 and min <= 2560) at 24576-131072 tokens, and the
# vocabulary heads of hidden <= 2560 at 24576-65536 (<= 51200 rows) or 24576-32768 (larger
# vocabularies: logits memory), so that no planned micro-batch of a small model extrapolates.
# (gemm-tokens, the probe that ran here by default until session 40, measured those rows on H100s
# twice: docs/validation/stack/gemm-tokens-*-h100-1207/1216.json; GEMMTOK=1 runs it again.)
if [ -n "$GEMMX" ]; then
  bash tools/device/gemmx.sh
elif [ -n "$GEMMTOK" ]; then
timeout 90 python3 tools/probes/torch_gemm.py --linears 768x768,3072x768,768x3072,2304x768,1024x1024,4096x1024,1024x4096,2048x2048,8192x2048,2048x8192:4096,8192,16384,31744,32768,65536,131072 --out $OUT/gemm-tokens.json 2> $OUT/gemm-tokens.log; echo "gemm-tokens rc=$?"
timeout 60 python3 tools/probes/torch_gemm.py --linears 30522x768,50257x768,50272x1024:4096,8192,16384,32768,65536 --out $OUT/gemm-tokens-heads.json 2>> $OUT/gemm-tokens.log; echo "gemm-tokens-heads rc=$?"
fi
# Session 41: the new catalog entries' Linear shapes, which neither profile's table holds (~2 min;
# GEMMNEW=0 skips). Put them in with profile_gemm_rows.py (tools/device/gemm_newfam.sh says how).
if [ "${GEMMNEW:-1}" != "0" ]; then bash tools/device/gemm_newfam.sh; fi
# Session 41: SDPA with a sliding-window mask (transformers' call for Gemma 3's local layers from
# 512 tokens, Mistral-7B v0.1's and Gemma 2's from 4096), which dsplan prices on the plain
# non-causal rows at the whole square's FLOPs; the same points without a mask on this machine
# beside them (~40 s; SDPAMASK=0 skips).
if [ "${SDPAMASK:-1}" != "0" ]; then
  timeout 90 python3 tools/probes/torch_sdpa.py --dtypes bf16 --head-dims 128,256 --seqs 1024,2048,4096 --mask-window 512 --out $OUT/sdpa-mask.json 2> $OUT/sdpa-mask.log; echo "sdpa-mask rc=$?"
  timeout 90 python3 tools/probes/torch_sdpa.py --dtypes bf16 --head-dims 128,256 --seqs 1024,2048,4096 --out $OUT/sdpa-nomask.json 2>> $OUT/sdpa-mask.log; echo "sdpa-nomask rc=$?"
  # Grouped-query K/V (enable_gqa, 4 query heads per K/V head: Gemma 3, Llama 3), which the table's
  # rows (as many K/V heads as query heads) price today.
  timeout 90 python3 tools/probes/torch_sdpa.py --dtypes bf16 --head-dims 128,256 --seqs 1024,2048,4096 --gqa 4 --out $OUT/sdpa-gqa.json 2>> $OUT/sdpa-mask.log; echo "sdpa-gqa rc=$?"
fi
# transformers 5.17's parameter counts of the whole catalog (meta device, seconds; session 40 moved the staged Qwen3, Phi-3,
# Gemma 2 and Gemma 3 entries into models/ after their counts equalled dsplan's).
python3 tools/hf_param_counts.py models > $OUT/hf-counts-models.json 2> $OUT/hf-counts-models.err; echo "hf counts (whole catalog; compare with tests/fixtures/hf_counts_transformers_5.17.json) rc=$?"
# Session 39: transformers' own modeling code for the families users ask for and dsplan lacks (phi3, gemma2,
# gemma3) and for qwen3 (added from a stored snapshot, to check against the installed 5.17), a few seconds.
mkdir -p $OUT/transformers-src
python3 -c "
import importlib, inspect, shutil, sys
for m in ['qwen3', 'phi3', 'gemma2', 'gemma3', 'qwen3_moe', 'qwen2_moe', 'mixtral']:
    for part in ['modeling', 'configuration']:
        try:
            mod = importlib.import_module(f'transformers.models.{m}.{part}_{m}')
            shutil.copy(inspect.getsourcefile(mod), '$OUT/transformers-src/')
        except Exception as e:
            print(m, part, repr(e)[:200], file=sys.stderr)
# The shared pieces the traces rely on: the experts' implementations (grouped_mm's kernels and
# saved tensors), the mask rules (when SDPA gets a mask) and the SDPA call (is_causal).
for m in ['integrations.moe', 'masking_utils', 'integrations.sdpa_attention', 'modeling_utils']:
    try:
        mod = importlib.import_module(f'transformers.{m}')
        shutil.copy(inspect.getsourcefile(mod), '$OUT/transformers-src/')
    except Exception as e:
        print(m, repr(e)[:200], file=sys.stderr)
" 2> $OUT/transformers-src/errors.txt; echo "transformers-src: $(ls $OUT/transformers-src | wc -l) files"
if [ -n "$PLACEMENT" ]; then
  timeout 100 python3 tools/probes/host_placement.py --reps 20 --out $OUT/host-placement.json 2> $OUT/host-placement.log; echo "placement rc=$?"; tail -14 $OUT/host-placement.log
fi
# STACKREP=N (session 36): N fresh stack_costs.py processes (op_kinds and families only, the
# current block estimator) before the cases, for stackrep-1206e's per-entry median rule on the
# H200 profile (h200-measured's qwen2 and mistral blocks look like single-process outliers:
# session 36's closing note). Each process is cut at 200 s.
if [ -n "$STACKREP" ]; then
  # stack_costs.py measures no family without --models: dsplan profile's list (as stackrep_call.sh).
  # Session 39: plus qwen3, phi3 and gemma2 from their config.json (families the catalog lacks; the *-1215 sets are predicted without them).
  MODELS=${MODELS:-gpt2-xl,t5-3b,llama-2-7b,opt-2.7b,pythia-1.4b,qwen2-1.5b,bloom-3b,gemma-2b,phi-2,falcon-7b,gpt-j-6b,mistral-7b,bert-large-uncased,mixtral-8x7b,$PWD/docs/validation/deepspeed/qwen3-1215/qwen3-1.7b.json,$PWD/docs/validation/deepspeed/phi3-1215/phi-4-mini.json,$PWD/docs/validation/deepspeed/gemma2-1215/gemma-2-2b.json,$PWD/docs/validation/deepspeed/gemma3-1216/gemma-3-1b.json}
  speed() {  # the host's loop speed now, in a process of its own (one JSON line)
    PYTHONPATH=$PWD/tools/probes python3 -c "import json,time,probe_util;print(json.dumps(dict(tag='$1',t=round(time.time()),**probe_util.host_speed())))" >> "$OUT/host-speed.jsonl" 2>> "$OUT/host-speed.err"
    tail -1 "$OUT/host-speed.jsonl"
  }
  for i in $(seq 1 "$STACKREP"); do
    speed "before$i"
    timeout 200 python3 tools/probes/stack_costs.py --only op_kinds,families --models "$MODELS" --out $OUT/stackrep-$i.json > /dev/null 2> $OUT/stackrep-$i.log; echo "stackrep $i rc=$? at $(( $(date +%s) - T0 ))s"
  done
  speed "after"
fi
# MALLOCTRACE=1 (session 39, either card, ~3 min): malloctrace-1215, opt-1.3b's and gemma-2b's offloaded ZeRO-3 steps
# under tools/device/malloc_trace.c (which of the gradient copies' host temporaries glibc serves from fresh pages).
if [ -n "$MALLOCTRACE" ]; then
  gcc -O2 -shared -fPIC tools/device/malloc_trace.c -o /tmp/malloc_trace.so && \
    bash .dsbench/go.sh 0 300 docs/validation/deepspeed/malloctrace-1215/cases-malloctrace.jsonl 2>&1 | tail -8
  for f in $OUT/malloc-trace/*.tsv; do [ "$(wc -l < $f)" -gt 50 ] && python3 tools/device/malloc_trace_table.py --skip 2 $f | head -30; done
fi
# Session 41: every case adds one step under the kernel profiler after its timed steps
# (DSBENCH_KPROF: per phase, wall time against the GPU's busy time and the kernels by name; the
# timed steps are unchanged). It tells a host-bound phase from a GPU-bound one directly, which
# pair-1217 needs. KPROF=0 turns it off.
if [ "${KPROF:-1}" != "0" ]; then export DSBENCH_KPROF=1; fi
if echo "$G" | grep -q H200; then
  # Fresh set 15 and t5res-1207 ran in session 30; wsweep-1207's two H200 cases did not (no H200).
  LEFT=$((${1:-585} - ($(date +%s) - T0)))
  bash .dsbench/go.sh 0 $LEFT ${CASES:-docs/validation/deepspeed/pair-1217/cases-pair-h200.jsonl docs/validation/deepspeed/window-1217/cases-window-h200.jsonl docs/validation/deepspeed/qwen3-1215/cases-qwen3-h200.jsonl docs/validation/deepspeed/phi3-1215/cases-phi3-h200.jsonl docs/validation/deepspeed/gemma2-1215/cases-gemma2-h200.jsonl docs/validation/deepspeed/gemma3-1216/cases-gemma3-h200.jsonl docs/validation/deepspeed/moe-1216/cases-moe-h200.jsonl docs/validation/deepspeed/bigtok-1212/cases-bigtok-h200.jsonl docs/validation/deepspeed/accum3-1211/cases-accum3-h200.jsonl docs/validation/deepspeed/accum-1210/cases-accum-h200.jsonl docs/validation/deepspeed/accum2-1211/cases-accum2-h200.jsonl docs/validation/deepspeed/wsweep-1207/cases-h200.jsonl docs/validation/deepspeed/t511b-1208/cases-h200.jsonl} 2>&1 | tail -30
else
  # H100: the lists CASES_H100 names, by default qwen3-1215's H100 list (session 39).
  LEFT=$((${1:-585} - ($(date +%s) - T0)))
  bash .dsbench/go.sh 0 $LEFT ${CASES_H100:-docs/validation/deepspeed/pair-1217/cases-pair-h100.jsonl docs/validation/deepspeed/window-1217/cases-window-h100.jsonl docs/validation/deepspeed/gemma2-1215/cases-gemma2-h100.jsonl docs/validation/deepspeed/phi3-1215/cases-phi3-h100.jsonl} 2>&1 | tail -30
fi
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader
echo "total $(( $(date +%s) - T0 ))s"
# The device tool returns only a few files (8 came back in session 27, the rest were dropped):
# everything goes back as one archive, cases.jsonl files included. torch_ext.tgz (19 MB) is over
# its size limit anyway.
bundle
