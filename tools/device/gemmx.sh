#!/bin/bash
# Every catalog Linear up to 2560 wide (the 49 nt series of the H100 table with max(out, in) <= 10240
# and min <= 2560) at 24576-131072 tokens, and the vocabulary heads of hidden <= 2560 at
# 24576-65536 tokens (<= 51200 rows) or 24576-32768 (larger vocabularies: logits memory), through
# tools/probes/torch_gemm.py, into $OUT/gemmx-{layers,heads,bigheads}.json (about 60 s on an H100).
# Then: tools/device/profile_gemm_rows.py --profile PROFILE --normalize (rows from another machine
# than the table's) or without it (the table's own machine).
# Usage (device side, repository root): bash tools/device/gemmx.sh   (next_call.sh runs it with GEMMX=1)
L49=8x4096,128x896,256x1536,256x2048,384x512,512x384,512x512,512x1024,512x2048,512x3584,768x768,768x2048,768x3072,896x896,896x4864,1024x512,1024x1024,1024x2816,1024x4096,1024x8192,1280x1280,1280x5120,1536x1536,1536x8960,1600x1600,1600x6400,2048x512,2048x768,2048x2048,2048x5120,2048x8192,2304x768,2560x2560,2560x10240,2816x1024,3072x768,3072x1024,3840x1280,4096x1024,4800x1600,4864x896,5120x1280,5120x2048,6144x2048,6400x1600,7680x2560,8192x2048,8960x1536,10240x2560
timeout 240 python3 tools/probes/torch_gemm.py --linears $L49:24576,32768,49152,65536,98304,131072 --out $OUT/gemmx-layers.json 2> $OUT/gemmx.log; echo "gemmx layers rc=$?"
timeout 120 python3 tools/probes/torch_gemm.py --linears 30522x768,30522x1024,32128x512,32128x768,32128x1024,32128x2048,50257x768,50257x1024,50257x1280,50257x1600,50272x512,50272x768,50272x1024,50272x2048,50272x2560,50304x2048,51200x2048,51200x2560:24576,32768,49152,65536 --out $OUT/gemmx-heads.json 2>> $OUT/gemmx.log; echo "gemmx heads rc=$?"
timeout 90 python3 tools/probes/torch_gemm.py --linears 128256x2048,151936x896,151936x1536,250880x1024,250880x2048,250880x2560,256000x2048:24576,32768 --out $OUT/gemmx-bigheads.json 2>> $OUT/gemmx.log; echo "gemmx bigheads rc=$?"
tail -3 $OUT/gemmx.log
