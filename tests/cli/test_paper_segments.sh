#!/usr/bin/env bash
# Segments in the paper study (issue 20, acceptance 2): vgg19, vit, bert-base and bert-moe with
# 1, 2, 4 and 8 GPUs on each host of paper-hetero and paper-homo, 32 samples per GPU, each with a
# segment per layer (segments=1) and without: under every strategy the simulated iteration with
# segments is never slower (a boundary costs only what moves, and the search may keep one split),
# and bert-moe gains somewhere. Prints every point where segments gain; exits 1 naming each point
# that breaks either.
# Usage: test_paper_segments.sh HAP_SIM
set -uo pipefail
sim=${1:?hap-sim}
[ -x "$sim" ] || { echo "FAIL: $sim is missing"; exit 1; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
# judge WITHOUT WITH WHERE: hap-sim's csv rows (point,strategy,devices,ok,iteration_s,...) of one
# point without and with segments. Prints "gain STRATEGY A B" lines; exits 1 when a strategy is
# slower with segments or lost its plan.
judge() {
  awk -F, -v where="$3" '
    FNR == 1 { file++; next }
    file == 1 { ok0[$2] = $4; t0[$2] = $5; names[++n] = $2 }
    file == 2 { ok1[$2] = $4; t1[$2] = $5 }
    END {
      bad = 0
      for (i = 1; i <= n; i++) {
        s = names[i]
        if (ok0[s] != "1") continue
        if (ok1[s] != "1") { printf "FAIL: %s: %s has no plan with segments\n", where, s; bad = 1; continue }
        if (t1[s] + 0 > (t0[s] + 0) * (1 + 1e-9)) {
          printf "FAIL: %s: %s takes %s s with segments, %s s without\n", where, s, t1[s], t0[s]
          bad = 1
        } else if (t1[s] + 0 < (t0[s] + 0) * (1 - 1e-9)) {
          printf "gain %s: %s %s s -> %s s\n", where, s, t0[s], t1[s]
        }
      }
      exit bad
    }' "$1" "$2"
}

# the judge fails a slower or lost plan and passes an equal or faster one
head='point,strategy,devices,ok,iteration_s'
printf '%s\n"b",hap,8,1,2.0\n"b",dp-ev,8,1,3.0\n' "$head" >"$tmp/base.csv"
printf '%s\n"b",hap,8,1,2.1\n"b",dp-ev,8,1,3.0\n' "$head" >"$tmp/slower.csv"
printf '%s\n"b",hap,8,1,2.0\n"b",dp-ev,8,0,\n' "$head" >"$tmp/lost.csv"
printf '%s\n"b",hap,8,1,1.9\n"b",dp-ev,8,1,3.0\n' "$head" >"$tmp/faster.csv"
if judge "$tmp/base.csv" "$tmp/slower.csv" self-test >/dev/null ||
  judge "$tmp/base.csv" "$tmp/lost.csv" self-test >/dev/null ||
  ! judge "$tmp/base.csv" "$tmp/faster.csv" self-test | grep -q '^gain self-test: hap'; then
  echo "FAIL: the judge passes a slower or lost plan, or misses a gain"
  exit 1
fi

fail=0
points=0
moe_gains=0
for cluster in paper-hetero paper-homo; do
  for model in vgg19 vit bert-base bert-moe; do
    for k in 1 2 4 8; do
      spec=$model sep=:
      [ "$model" = bert-moe ] && spec="bert-moe:experts=$((2 * 8 * k))" sep=,
      where="$spec on $cluster:gpus_per_host=$k"
      for seg in 0 1; do
        if ! "$sim" "$spec${sep}segments=$seg" -c "$cluster:gpus_per_host=$k" -b 32 -f csv -q \
          >"$tmp/seg$seg.csv" 2>"$tmp/err"; then
          echo "FAIL: $where, segments=$seg: hap-sim exited non-zero: $(head -n 2 "$tmp/err")"
          fail=1
          continue 2
        fi
      done
      points=$((points + 1))
      judge "$tmp/seg0.csv" "$tmp/seg1.csv" "$where" >"$tmp/said" || fail=1
      cat "$tmp/said"
      [ "$model" = bert-moe ] && grep -q '^gain' "$tmp/said" && moe_gains=$((moe_gains + 1))
    done
  done
done
[ "$points" -eq 32 ] || { echo "FAIL: $points of 32 points simulated"; fail=1; }
[ "$moe_gains" -ge 1 ] || { echo "FAIL: segments gain nowhere on bert-moe"; fail=1; }
[ "$fail" -eq 0 ] && echo "test_paper_segments.sh: 32 points, segments never slower, bert-moe gains at $moe_gains"
exit "$fail"
