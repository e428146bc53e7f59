#!/usr/bin/env bash
# check_passed.sh judges --check's output by its numbers: it accepts a real pass line and rejects
# an error above the tolerance, a non-number, another tolerance, a FAILED line, a missing line.
set -u
judge="$(dirname "$0")/check_passed.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
good='check: passed: the loss, 4 parameter gradients and 4 parameters (2 rank copies each) match a single-device run: loss error 4.80e-08 <= 1e-04, gradient error 5.90e-07 <= 1e-04, parameter error 4.37e-07 <= 1e-04 (of the update, beyond 2 ulp); 0 tensors with gradients below 1e-03 of the largest measured against that'
fail=0
verdict() { # verdict NAME WANT(0|1) CONTENT
  printf '%s\n' "$3" >"$tmp/out"
  bash "$judge" "$tmp/out" >"$tmp/said" 2>&1
  local got=$?
  [ "$got" -ne 0 ] && got=1
  if [ "$got" -ne "$2" ]; then
    echo "FAIL $1: check_passed.sh exited $got, expected $2: $(cat "$tmp/said")"
    fail=1
  fi
}
verdict good 0 "$good"
verdict grad-above 1 "${good/5.90e-07 <= 1e-04/2.00e-04 <= 1e-04}"
verdict loss-nan 1 "${good/4.80e-08/nan}"
verdict other-tolerance 1 "${good/4.37e-07 <= 1e-04/4.37e-07 <= 1e-02}"
verdict no-param 1 "${good/parameter error/param err}"
verdict failed-too 1 "$good"$'\n''check: FAILED: gradient of '"'w'"' on rank 1: element 0 is nan (not finite)'
verdict two-passes 1 "$good"$'\n'"$good"
verdict nothing 1 "iteration   measured mean 0.108 ms"
[ "$fail" -eq 0 ] && echo "test_check_passed: 8 verdicts as expected"
exit "$fail"
