#!/usr/bin/env bash
# Measures the parts of this device machine that differ from one machine to the next and that
# the single-GPU validation prices: GEMMs (the validated models' exact Linear layers in the
# forward and both backward layouts, at 1k-16k tokens), HBM and the streaming-kernel curve,
# kernel launch, the CUDA context, PCIe copies, CPU Adam and NVMe. What is not measured (host
# memcpy and allocation rates, NVLink, network) stays as in the base profile.
#   LD_LIBRARY_PATH=$PWD/dist DSPLAN_DATA_DIR=$PWD tools/device/session_profile.sh OUT.yaml
# Then: DSPLAN_HARDWARE=OUT.yaml tools/device/validation_matrix.sh
set -u
cd "$(dirname "$0")/../.."
bin=${DSPLAN_BIN:-dist/dsplan}
prof=${1:?usage: session_profile.sh OUT.yaml}
mkdir -p /tmp/dsplan-nvme
"$bin" profile --base "${DSPLAN_PROFILE_BASE:-h200-measured}" --name "$(basename "$prof" .yaml)" \
  --only context,gemm,hbm,launch,copy,cpu-adam,nvme --nvme-path /tmp/dsplan-nvme \
  --models gpt2,gpt2-xl,t5-large,t5-3b,llama-2-7b --out "$prof"
