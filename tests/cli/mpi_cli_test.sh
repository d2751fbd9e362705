#!/usr/bin/env bash
# End-to-end tests of `dsplan validate --executor host` started by mpirun, one process per rank:
# rank 0 alone prints the report, the numbers equal the run on threads (the Comm's reductions
# sum in rank order, so the bits are the same), a plan whose world size differs from the job's
# is refused with both numbers and exit 2, and a job of one process runs its ranks as threads.
# Usage: mpi_cli_test.sh PATH/TO/dsplan SOURCE_DIR HAVE_MPI(0|1) MPIEXEC
# Without MPI in the build it checks that such a dsplan refuses to run as one of several ranks
# (and says how to rebuild), then exits 77 (ctest: skipped) for the rest.
set -u
bin=$1
export DSPLAN_DATA_DIR=$2
have_mpi=$3
mpiexec=$4
ex=$2/examples/host
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"
host=(validate --executor host --model "$ex/gpt2-tiny.json" --seq-len 16)

if [ "$have_mpi" != 1 ]; then
  OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=0 "$bin" "${host[@]}" \
    --ds-config "$ex/zero2_gas2.json" --gpus 2 >"$tmp/out" 2>"$tmp/err"
  rc=$?
  check "no MPI: a rank of mpirun exits 2" test "$rc" -eq 2
  check "no MPI: says so and how to rebuild" \
    grep -q "built without MPI.*-DDSPLAN_WITH_MPI=ON" "$tmp/err"
  check "no MPI: names the launcher's variables" grep -q "OMPI_COMM_WORLD_SIZE=2" "$tmp/err"
  check "no MPI: trains nothing" test ! -s "$tmp/out"
  finish || exit 1
  echo "this dsplan has no MPI (DSPLAN_WITH_MPI): the mpirun runs are skipped"
  exit 77
fi

# As root, more processes than the 2 cores CI has, shared memory only, and idle ranks that yield
# the CPU (they wait while rank 0 trains the reference).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader \
  OMPI_MCA_pml=ob1 OMPI_MCA_mpi_yield_when_idle=1
mpirun() { "$mpiexec" --oversubscribe -np "$@"; }

# Stage 2, GAS 2, bf16 on 2 processes, JSON: one document (only rank 0 printed), the same
# numbers as on 2 threads.
mpirun 2 "$bin" "${host[@]}" --ds-config "$ex/zero2_gas2.json" --gpus 2 --steps 3 --json \
  >"$tmp/out" 2>"$tmp/err"
rc=$?
check "np 2 stage 2: passes" test "$rc" -eq 0
check "np 2: stdout is one JSON document (rank 0 alone printed)" json "j['pass']"
check "np 2: ranks are MPI processes" json "j['ranks_are'] == 'MPI processes' and j['ranks'] == 2"
cp "$tmp/out" "$tmp/mpi.json"
run "${host[@]}" --ds-config "$ex/zero2_gas2.json" --gpus 2 --steps 3 --json
cp "$tmp/out" "$tmp/threads.json"
check "threads: ranks are threads" json "j['ranks_are'] == 'threads'"
check "np 2 equals 2 threads: losses, max |difference|, bytes per category" python3 -c "
import json
a = json.load(open('$tmp/mpi.json')); b = json.load(open('$tmp/threads.json'))
for k in ('losses', 'reference_losses', 'max_abs_diff', 'fraction_beyond_bf16_ulp', 'memory',
          'params_match', 'memory_match', 'pass'):
    assert a[k] == b[k], (k, a[k], b[k])
assert a['memory'] and all(r['executor_bytes'] == r['graph_bytes'] for r in a['memory'])
"

# Stage 3 + CPU offload on 4 processes, text: one report, one verdict line.
mpirun 4 "$bin" "${host[@]}" --ds-config "$ex/zero3_offload.json" --gpus 4 --steps 2 \
  >"$tmp/out" 2>"$tmp/err"
rc=$?
check "np 4 stage 3 offload: passes" test "$rc" -eq 0
check "np 4: one report" test "$(grep -c '^# dsplan validate' "$tmp/out")" -eq 1
check "np 4: one PASS line" test "$(grep -c '^PASS' "$tmp/out")" -eq 1
check "np 4: the header says MPI processes" grep -q "on 4 rank(s) (MPI processes)" "$tmp/out"

# A plan for 4 ranks on a job of 2 processes: exit 2, both numbers, said once.
mpirun 2 "$bin" "${host[@]}" --ds-config "$ex/zero2_gas2.json" --gpus 4 --steps 1 \
  >"$tmp/out" 2>"$tmp/err"
rc=$?
check "world size mismatch: exit 2" test "$rc" -eq 2
check "world size mismatch: names the plan's 4 ranks and the job's 2 processes" \
  grep -q "the plan has 4 ranks .* but the MPI job has 2 processes" "$tmp/err"
check "world size mismatch: said once" test "$(grep -c 'dsplan: error' "$tmp/err")" -eq 1
check "world size mismatch: no report" test ! -s "$tmp/out"

# A bad flag under mpirun: every rank refuses, rank 0 alone says why.
mpirun 2 "$bin" "${host[@]}" --ds-config "$ex/zero2_gas2.json" --gpus 2 --steps 0 \
  >"$tmp/out" 2>"$tmp/err"
rc=$?
check "bad flag under mpirun: exit 2" test "$rc" -eq 2
check "bad flag under mpirun: said once" test "$(grep -c 'dsplan: error: --steps' "$tmp/err")" -eq 1

# One process: not distributed; its ranks are threads.
mpirun 1 "$bin" "${host[@]}" --ds-config "$ex/zero2_gas2.json" --gpus 2 --steps 1 --json \
  >"$tmp/out" 2>"$tmp/err"
rc=$?
check "np 1: runs the plan's 2 ranks as threads" json "j['pass'] and j['ranks_are'] == 'threads'"
finish
