#!/usr/bin/env bash
# reports/rank-skew.py: the synchronisation penalty of a small hand-made hap-run --task-times file
# (known sums), and one error line with exit 1 for files that are not such files.
# Usage: test_rank_skew.sh REPORTS_DIR
set -uo pipefail
script=${1:?reports dir}/rank-skew.py
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
check() {
  local name=$1
  shift
  if "$@"; then pass=$((pass + 1)); else echo "FAIL: $name"; fail=$((fail + 1)); fi
}

# Two ranks, a warm-up (ignored) and two timed iterations: compute, one all-reduce, update. Each
# timed iteration one rank computes 1 ms and the other 3 ms, in turn; both leave the all-reduce
# at 4 ms and update for 0.5 ms. Between the collectives the slowest rank takes 3 ms every time,
# the slowest mean is 2 ms: a 1 ms penalty of a 4.5 ms iteration (22.2 %).
header=rank,iteration,timed,task,name,kind,phase,waits,start_s,end_s
cat >"$tmp/t.csv" <<CSV
$header
0,0,0,0,fc.fwd,compute,fwd,0,0,9
0,0,0,1,"fc.weight.grad,all_reduce",collective,bwd,1,9,10
1,0,0,0,fc.fwd,compute,fwd,0,0,9
1,0,0,1,"fc.weight.grad,all_reduce",collective,bwd,1,9,10
0,1,1,0,fc.fwd,compute,fwd,0,0,0.001
0,1,1,1,"fc.weight.grad,all_reduce",collective,bwd,1,0.001,0.004
0,1,1,2,fc.upd,update,upd,0,0.004,0.0045
1,1,1,0,fc.fwd,compute,fwd,0,0,0.003
1,1,1,1,"fc.weight.grad,all_reduce",collective,bwd,1,0.003,0.004
1,1,1,2,fc.upd,update,upd,0,0.004,0.0045
0,2,1,0,fc.fwd,compute,fwd,0,0,0.003
0,2,1,1,"fc.weight.grad,all_reduce",collective,bwd,1,0.003,0.004
0,2,1,2,fc.upd,update,upd,0,0.004,0.0045
1,2,1,0,fc.fwd,compute,fwd,0,0,0.001
1,2,1,1,"fc.weight.grad,all_reduce",collective,bwd,1,0.001,0.004
1,2,1,2,fc.upd,update,upd,0,0.004,0.0045
CSV
out=$(python3 "$script" "$tmp/t.csv")
check summary grep -qF '2 ranks, 2 timed iterations, mean iteration 4.500 ms, 1 tasks' <<<"$out"
check rank0 grep -qF 'rank 0: busy 2.500 ms a mean iteration (1.500..3.500), the busiest in 1' \
  <<<"$out"
check penalty grep -qF "slowest rank 3.500 ms, slowest rank's mean 2.500 ms: synchronisation \
penalty 1.000 ms (22.2 %" <<<"$out"
json=$(python3 "$script" "$tmp/t.csv" --json)
check json python3 -c 'import json, sys
assert abs(json.loads(sys.argv[1])["penalty_s"] - 1e-3) < 1e-12' "$json"
# the same ranks in step: no penalty
sed -e '/^1,2,1,0/s/0.001$/0.003/' -e '/^0,1,1,0/s/0.001$/0.003/' \
  -e 's/,0.001,0.004$/,0.003,0.004/' "$tmp/t.csv" >"$tmp/even.csv"
even=$(python3 "$script" "$tmp/even.csv")
check no-penalty grep -qF 'synchronisation penalty 0.000 ms' <<<"$even"

# not task-times files: one line naming the file, exit 1
printf 'a,b\n' >"$tmp/header.csv"
{ echo "$header"; echo '0,1,1,0,x,compute,fwd,0,0'; } >"$tmp/fields.csv"
{ echo "$header"; echo '0,1,1,0,x,compute,fwd,0,zero,1'; } >"$tmp/number.csv"
{ echo "$header"; echo '0,1,1,0,x,compute,fwd,0,2,1'; } >"$tmp/order.csv"
{ echo "$header"; echo '0,0,0,0,x,compute,fwd,0,0,1'; } >"$tmp/untimed.csv"
grep -v '^1,2,' "$tmp/t.csv" >"$tmp/rank.csv"
: >"$tmp/empty.csv"
for f in header fields number order untimed rank empty nosuch; do
  python3 "$script" "$tmp/$f.csv" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  check "$f-exit" [ "$rc" -eq 1 ]
  check "$f-one-line" [ "$(wc -l <"$tmp/err")" -eq 1 ]
  check "$f-names-file" grep -qF "$tmp/$f.csv" "$tmp/err"
done
python3 "$script" "$tmp/rank.csv" >/dev/null 2>"$tmp/err"
check rank-message grep -qF 'rank.csv: rank 1 has no tasks in timed iteration 2' "$tmp/err"
python3 "$script" >/dev/null 2>&1
check usage-exit [ $? -eq 2 ]

echo "test_rank_skew: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
