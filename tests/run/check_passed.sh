#!/usr/bin/env bash
# check_passed.sh OUT [LOSS_TOL GRAD_TOL PARAM_TOL]: hap-run --check's output OUT passed, judged
# by its numbers, not by the word: exactly one 'check: passed' line, no 'check: FAILED' line, and
# each printed largest error ("loss error E <= T", gradient, parameter) is a finite number at most
# its tolerance T, with T the one expected: by default the documented 1e-04 of fp32 SGD
# (run/check.h), else the given ones (a training policy's). Prints the errors; exits 1 with the
# reason otherwise.
set -u
out=$1
want="${2:-1e-04} ${3:-1e-04} ${4:-1e-04}"
[ "$(grep -c '^check: passed' "$out")" -eq 1 ] || { echo "check_passed: no single 'check: passed' line in $out"; exit 1; }
if grep -q '^check: FAILED' "$out"; then
  echo "check_passed: $out has a 'check: FAILED' line"
  exit 1
fi
grep '^check: passed' "$out" | awk -v want="$want" '
  { line = $0 }
  END {
    said = ""
    split("loss gradient parameter", kinds, " ")
    split(want, wants, " ")
    for (i = 1; i <= 3; i++) {
      k = kinds[i]
      if (!match(line, k " error [^ ]+ <= [^ ,;]+")) { print "check_passed: no \"" k " error E <= T\""; exit 1 }
      split(substr(line, RSTART, RLENGTH), f, " ")
      e = f[3]; t = f[5]
      if (e !~ /^[0-9.]+e[-+][0-9]+$/ || t != wants[i]) { print "check_passed: " k ": error \"" e "\", tolerance \"" t "\" (expected " wants[i] ")"; exit 1 }
      if (e + 0 > t + 0) { print "check_passed: " k " error " e " exceeds " t; exit 1 }
      said = said k " " e " "
    }
    print said
  }'
