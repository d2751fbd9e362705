# Shared harness of the CLI end-to-end scripts. Source it after setting bin and tmp:
#   check NAME COMMAND...   counts COMMAND's success as a pass, else prints the last output
#   run ARGS...             runs dsplan, sets $rc, output in $tmp/out and $tmp/err
#   json PYTHON-EXPR        true when EXPR (j = parsed $tmp/out) is truthy
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

finish() {
  echo "$pass passed, $fail failed"
  test "$fail" -eq 0
}
