#!/usr/bin/env bash
# retry_timing.sh: exit 3 (a timing bound missed) measures again up to N times; any other failure
# ends at once; a pass after a miss passes; N misses fail.
# Usage: test_retry_timing.sh RETRY_TIMING_SH
set -u
retry=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0
check() { # check NAME WANT_RC WANT_RUNS SCRIPT: SCRIPT sees its run number in $n
  local name=$1 want_rc=$2 want_runs=$3 script=$4
  echo 0 >"$tmp/runs"
  bash "$retry" 3 bash -c "n=\$((\$(cat '$tmp/runs') + 1)); echo \$n > '$tmp/runs'; $script" \
    >"$tmp/out" 2>&1
  local rc=$? runs
  runs=$(cat "$tmp/runs")
  if [ "$rc" -eq "$want_rc" ] && [ "$runs" -eq "$want_runs" ]; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL $name: exit $rc after $runs runs, expected exit $want_rc after $want_runs"
  fi
}
check pass-first 0 1 'exit 0'
check broken-fails-at-once 1 1 'exit 1'
check other-status-kept 2 1 'exit 2'
check miss-then-pass 0 2 '[ $n -ge 2 ] || exit 3'
check three-misses-fail 1 3 'exit 3'
echo "test_retry_timing: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
