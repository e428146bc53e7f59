#!/usr/bin/env bash
# reports/price-bias.py: how far the median, the 5 % trimmed mean and the mean of a hand-made
# hap-run --task-times file's compute tasks fall from their mean (known sums), and one error line
# with exit 1 for files that are not such files.
# Usage: test_price_bias.sh REPORTS_DIR
set -uo pipefail
script=${1:?reports dir}/price-bias.py
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
check() {
  local name=$1
  shift
  if "$@"; then pass=$((pass + 1)); else echo "FAIL: $name"; fail=$((fail + 1)); fi
}

# One rank, a warm-up (ignored) and six timed iterations of a compute task taking 1, 1, 1, 2, 4
# and 9 ms, next to a collective and an update (not compute: ignored). Over one window of 6: mean
# 3 ms, median 1.5 ms (-50 %), 5 % trimmed (one sample from each end: 1, 1, 2, 4) 2 ms (-33.3 %).
# Over two windows of 3: 1, 1, 1 (every statistic 1 ms) and 2, 4, 9 (mean 5, median and trimmed
# mean 4: -20 %): -10 % on average, -20..0.
header=rank,iteration,timed,task,name,kind,phase,waits,start_s,end_s
{
  echo "$header"
  echo '0,0,0,0,fc.fwd,compute,fwd,0,0,0.5'
  it=1
  for ms in 1 1 1 2 4 9; do
    end=$(printf '0.%03d' "$ms")
    echo "0,$it,1,0,fc.fwd,compute,fwd,0,0,$end"
    echo "0,$it,1,1,\"fc.weight.grad,all_reduce\",collective,bwd,1,$end,0.020"
    echo "0,$it,1,2,fc.upd,update,upd,0,0.020,0.030"
    it=$((it + 1))
  done
} >"$tmp/t.csv"
out=$(python3 "$script" "$tmp/t.csv" --window 6)
check summary grep -qF '1 ranks, 6 timed iterations: 1 windows of 6, 1 compute tasks a rank' \
  <<<"$out"
check median grep -qF 'median (--price p50): sums -50.00 %' <<<"$out"
check trimmed grep -qF 'at least one sample: sums -33.33 %' <<<"$out"
check mean grep -qF 'priced at the mean: sums +0.00 %' <<<"$out"
json=$(python3 "$script" "$tmp/t.csv" --window 3 --json)
check windows python3 -c 'import json, sys
s = json.loads(sys.argv[1])
assert s["windows"] == 2, s
for name in ("median", "trimmed_5"):
    x = s["statistics"][name]
    assert abs(x["mean"] + 0.1) < 1e-12 and abs(x["min"] + 0.2) < 1e-12 and x["max"] == 0, x
assert s["statistics"]["mean"]["mean"] == 0' "$json"

# not task-times files, or too few iterations: one line naming the file, exit 1
printf 'a,b\n' >"$tmp/header.csv"
{ echo "$header"; echo '0,1,1,0,x,compute,fwd,0,0'; } >"$tmp/fields.csv"
{ echo "$header"; echo '0,1,1,0,x,compute,fwd,0,zero,1'; } >"$tmp/number.csv"
{ echo "$header"; echo '0,1,1,0,x,compute,fwd,0,2,1'; } >"$tmp/order.csv"
{ echo "$header"; echo '0,0,0,0,x,compute,fwd,0,0,1'; } >"$tmp/untimed.csv"
{ cat "$tmp/t.csv"; echo '1,1,1,0,fc.fwd,compute,fwd,0,0,0.001'; } >"$tmp/rank.csv"
sed 's/,compute,/,local,/' "$tmp/t.csv" >"$tmp/nocompute.csv"
cp "$tmp/t.csv" "$tmp/short.csv"
: >"$tmp/empty.csv"
for f in header fields number order untimed rank nocompute short empty nosuch; do
  python3 "$script" "$tmp/$f.csv" --window "$([ "$f" = short ] && echo 7 || echo 6)" \
    >"$tmp/out" 2>"$tmp/err"
  rc=$?
  check "$f-exit" [ "$rc" -eq 1 ]
  check "$f-one-line" [ "$(wc -l <"$tmp/err")" -eq 1 ]
  check "$f-names-file" grep -qF "$tmp/$f.csv" "$tmp/err"
done
check rank-message grep -qF 'rank 1 has no tasks in timed iteration 2' <(
  python3 "$script" "$tmp/rank.csv" --window 6 2>&1)
check short-message grep -qF '6 timed iterations, fewer than the window of 7' <(
  python3 "$script" "$tmp/short.csv" --window 7 2>&1)
python3 "$script" >/dev/null 2>&1
check usage-exit [ $? -eq 2 ]
python3 "$script" "$tmp/t.csv" --window x >/dev/null 2>"$tmp/err"
check window-exit [ $? -eq 2 ]
check window-message grep -qF -- '--window x: expected a whole number >= 1' "$tmp/err"

echo "test_price_bias: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
