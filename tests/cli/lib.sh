# Shared harness of the CLI end-to-end scripts. Source it after setting bin and tmp:
#   check NAME COMMAND...   counts COMMAND's success as a pass, else prints the last output
#   run ARGS...             runs dsplan, sets $rc, output in $tmp/out and $tmp/err
#   json PYTHON-EXPR        true when EXPR (j = parsed $tmp/out) is truthy
#   bad NAME PATTERN ARGS   dsplan ARGS must exit 2 with one stderr line matching PATTERN
#   finish                  prints the tally; exit status says whether all passed
pass=0
fail=0

check() {
  local name=$1
  shift
  if "$@"; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL: $name"
    echo "  stdout: $(head -c 1500 "$tmp/out")"
    echo "  stderr: $(head -c 600 "$tmp/err")"
  fi
}

run() {
  "$bin" "$@" >"$tmp/out" 2>"$tmp/err"
  rc=$?
}

json() {
  python3 -c "import json,sys; j=json.load(open('$tmp/out')); sys.exit(0 if ($1) else 1)"
}

bad() {
  local name=$1 pattern=$2
  shift 2
  run "$@"
  check "$name exits 2" test "$rc" -eq 2
  check "$name names the problem" grep -qiE -- "$pattern" "$tmp/err"
  check "$name is one line" test "$(wc -l <"$tmp/err")" -eq 1
  check "$name prints nothing on stdout" test ! -s "$tmp/out"
}

finish() {
  echo "$pass passed, $fail failed"
  test "$fail" -eq 0
}
