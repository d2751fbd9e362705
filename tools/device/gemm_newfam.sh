#!/bin/bash
# The Linear layers of the catalog entries added in sessions 39-40 (Qwen3 0.6B-32B, Phi-3-mini-4k,
# Phi-4-mini, Gemma 2 2B/9B/27B, Gemma 3 270M/1B) that neither profile's GEMM table holds: 47 layer
# shapes and 12 vocabulary heads, in the three layouts (forward, input and weight gradients) at the
# tables' token counts 256-16384, and the 27 narrow layers (min side <= 2560, max <= 10240) also at
# 24576-65536 (their planned micro-batches pass 16384 tokens), through tools/probes/torch_gemm.py into
# $OUT/gemm-newfam-{layers,small,heads}.json (about 2 minutes on an H100).
# Without them the cost model prices these models' Linears from the nearest measured shape of their
# alignment class, up to 1.4x away in a dimension (gemma-3-1b: 43 % of its Linear FLOPs); such tables
# put GPT-2's and BERT's steps 12-31 % fast (docs/validation/deepspeed/h100plans-1206).
# Then: tools/device/profile_gemm_rows.py --profile PROFILE [--normalize] $OUT/gemm-newfam-*.json
# (--normalize when the rows come from another machine than the table's).
# The list was made from `dsplan model NAME --json` of those 13 entries against both tables (session 41).
# Usage (device side, repository root): bash tools/device/gemm_newfam.sh   (next_call.sh runs it unless GEMMNEW=0)
LAYERS=256x640,256x1152,640x1024,640x2048,1024x640,1024x1152,1024x2048,1024x2304,1024x2560,1024x3072,1024x5120,1152x1024,1152x6912,2048x640,2048x1024,2048x2304,2048x3584,2048x4608,2048x6144,2304x2048,2304x9216,2560x4096,2560x9728,3072x3072,3072x8192,3584x4096,3584x14336,4096x2560,4096x3584,4096x4608,4096x12288,4608x4096,4608x36864,5120x3072,5120x8192,5120x17408,5120x25600,6912x1152,8192x5120,9216x2304,9216x3072,9728x2560,14336x3584,16384x3072,17408x5120,25600x5120,36864x4608
SMALL=256x640,256x1152,640x1024,640x2048,1024x640,1024x1152,1024x2048,1024x2304,1024x2560,1024x3072,1024x5120,1152x1024,1152x6912,2048x640,2048x1024,2048x2304,2048x3584,2048x4608,2048x6144,2304x2048,2304x9216,2560x4096,2560x9728,4096x2560,6912x1152,9216x2304,9728x2560
HEADS=32064x3072,151936x1024,151936x2048,151936x2560,151936x4096,151936x5120,200064x3072,256000x2304,256000x3584,256000x4608,262144x640,262144x1152
T0=$(date +%s)
timeout 200 python3 tools/probes/torch_gemm.py --linears $LAYERS:256,512,1024,2048,4096,8192,16384 --out $OUT/gemm-newfam-layers.json 2> $OUT/gemm-newfam.log; echo "gemm-newfam layers rc=$? at $(( $(date +%s) - T0 ))s"
timeout 120 python3 tools/probes/torch_gemm.py --linears $SMALL:24576,32768,49152,65536 --out $OUT/gemm-newfam-small.json 2>> $OUT/gemm-newfam.log; echo "gemm-newfam small rc=$? at $(( $(date +%s) - T0 ))s"
timeout 120 python3 tools/probes/torch_gemm.py --linears $HEADS:256,512,1024,2048,4096,8192,16384 --out $OUT/gemm-newfam-heads.json 2>> $OUT/gemm-newfam.log; echo "gemm-newfam heads rc=$? at $(( $(date +%s) - T0 ))s"
tail -3 $OUT/gemm-newfam.log
