#!/usr/bin/env bash
# tools/device/malloc_trace.c (an LD_PRELOAD shim for the device: which of a real step's large
# host temporaries glibc serves from fresh memory) on this machine's glibc, with a stand-in for
# ZeRO-3's offloaded gradient copies: on a second thread, as autograd's, ten rounds of
# posix_memalign(64, B), a write of every byte, free, for an 8 MiB and a 40 MiB block. Under
# glibc's rules (docs/deepspeed-facts.md, "glibc's malloc") the 40 MiB block is an mmap of its
# own, faulted in every round. Where the 8 MiB one comes from depends on the arena's state (on
# Debian 12's glibc 2.36 it walks up the thread's first heap, fresh pages each round, for eight
# rounds, then settles: docs/validation/deepspeed/malloctrace-1215), so only what any glibc must
# show is asserted of it: it is logged, and the first one, on a new heap, faulted every page.
# Usage: malloc_trace_test.sh SOURCE_DIR
set -u
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"
cc=${CC:-cc}
if ! command -v "$cc" >/dev/null; then
  echo "malloc_trace_test: no C compiler ($cc); skipped"
  exit 77
fi
"$cc" -O2 -Wall -Werror -shared -fPIC "$src/tools/device/malloc_trace.c" -o "$tmp/trace.so" 2>"$tmp/err"
check "the shim builds without warnings" test $? -eq 0
cat >"$tmp/copies.c" <<'C'
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
static void* run(void* arg) {
  (void)arg;
  for (int round = 0; round < 10; ++round) {
    for (int k = 0; k < 2; ++k) {
      size_t b = k == 0 ? (size_t)8 << 20 : (size_t)40 << 20;
      void* p;
      if (posix_memalign(&p, 64, b)) return (void*)1;
      memset(p, round + 1, b);
      __asm__ volatile("" : : "r"(p) : "memory");
      free(p);
    }
  }
  void* small = malloc(100);  /* below the threshold: not logged */
  free(small);
  return 0;
}
int main(void) {
  pthread_t t;
  void* r;
  pthread_create(&t, 0, run, 0);
  pthread_join(t, &r);
  return r != 0;
}
C
"$cc" -O2 -pthread "$tmp/copies.c" -o "$tmp/copies"
OUT="$tmp/out-dir" LD_PRELOAD="$tmp/trace.so" "$tmp/copies"
check "the stand-in runs under the shim" test $? -eq 0
log=$(ls "$tmp"/out-dir/malloc-trace/*.tsv 2>/dev/null | head -1)
check "one log under \$OUT/malloc-trace" test -n "$log"
check "twenty blocks logged, the small one not" test "$(grep -vc '^#' "$log")" -eq 20
check "the first 8 MiB block faulted in its 2048 pages" \
    bash -c "grep -v '^#' '$log' | head -1 | awk -F'\t' '\$2 == 8388608 && \$7 >= 2048 && \$7 <= 2060 {ok=1} END {exit !ok}'"
python3 "$src/tools/device/malloc_trace_table.py" --skip 1 "$log" >"$tmp/table" 2>"$tmp/err"
check "the table tool exits 0" test $? -eq 0
check "40 MiB: an mmap each round, every page faulted in" \
    grep -q '^| 41,943,040 | mmap | 9 | 0 | 1.00 |$' "$tmp/table"
check "8 MiB: rows for where glibc put them" grep -q '^| 8,388,608 | ' "$tmp/table"
echo "malloc_trace_test: $pass passed, $fail failed"
test "$fail" -eq 0
