#!/usr/bin/env bash
# reports/trace-gaps.py: the time in and between tasks of a small hand-made trace (known sums),
# and one error line with exit 1 for files that are not hap-run traces.
# Usage: test_trace_gaps.sh REPORTS_DIR
set -uo pipefail
script=${1:?reports dir}/trace-gaps.py
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
check() {
  local name=$1
  shift
  if "$@"; then pass=$((pass + 1)); else echo "FAIL: $name"; fail=$((fail + 1)); fi
}

# rank 0 measured: compute 0-1000 us, a 250 us gap, collective 1250-1500, a 500 us gap, update
# 2000-2100: span 2.1 ms, 1.0 + 0.25 + 0.1 ms in tasks, 0.25 before the collective, 0.5 before
# the update
cat >"$tmp/t.json" <<'JSON'
{"traceEvents": [
 {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "meas | rank 0 | vm:0"}},
 {"ph": "X", "pid": 2, "tid": 1, "cat": "compute", "name": "a.fwd", "ts": 0, "dur": 1000},
 {"ph": "X", "pid": 2, "tid": 2, "cat": "collective", "name": "a.grad", "ts": 1250, "dur": 250},
 {"ph": "X", "pid": 2, "tid": 1, "cat": "update", "name": "a.upd", "ts": 2000, "dur": 100}
]}
JSON
out=$(python3 "$script" "$tmp/t.json")
row=$(grep -F 'meas, rank 0, vm:0' <<<"$out")
check row-found [ -n "$row" ]
check span grep -qF '| 3 | 2.100 |' <<<"$row"
check in-tasks grep -qF 'collective 0.250, compute 1.000, update 0.100' <<<"$row"
check between grep -qF 'collective 0.250, update 0.500 (total 0.750)' <<<"$row"

# not traces: one line naming the file, exit 1
printf '{"traceEvents": [' >"$tmp/cut.json"
printf '{"x": 1}' >"$tmp/other.json"
printf '[{"ph": "X", "pid": 1}]' >"$tmp/nots.json"
printf '[]' >"$tmp/empty.json"
for f in cut other nots empty; do
  python3 "$script" "$tmp/$f.json" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  check "$f-exit" [ "$rc" -eq 1 ]
  check "$f-one-line" [ "$(wc -l <"$tmp/err")" -eq 1 ]
  check "$f-names-file" grep -qF "$tmp/$f.json" "$tmp/err"
done
python3 "$script" >/dev/null 2>&1
check usage-exit [ $? -eq 2 ]

echo "test_trace_gaps: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
