#!/usr/bin/env bash
# The paper study's plans (reports/sim-paper.sh: vgg19, vit, bert-base and bert-moe with 1, 2, 4
# and 8 GPUs on each host of paper-hetero and paper-homo, 32 samples per GPU): every strategy has
# a plan at every point (bert-moe at 32 and 64 GPUs included), and hap's simulated iteration is
# never slower than dp-ev's or dp-cp's, whose programs are in hap's search space (issue 15,
# acceptance 4). Exits 1 naming each point that breaks either.
# Usage: test_paper_study_order.sh HAP_SIM
set -uo pipefail
sim=${1:?hap-sim}
[ -x "$sim" ] || { echo "FAIL: $sim is missing"; exit 1; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
# judge CSV WHERE: hap-sim's csv rows (point,strategy,devices,ok,iteration_s,...) of one point.
judge() {
  awk -F, -v where="$2" '
    NR > 1 { ok[$2] = $4; t[$2] = $5 }
    END {
      bad = 0
      n = split("hap dp-ev dp-cp megatron-tp", names, " ")
      for (i = 1; i <= n; i++)
        if (ok[names[i]] != "1") { printf "FAIL: %s: %s has no plan\n", where, names[i]; bad = 1 }
      if (bad) exit 1
      for (i = 2; i <= 3; i++)
        if (t["hap"] + 0 > t[names[i]] + 0) {
          printf "FAIL: %s: hap %s s is slower than %s %s s\n", where, t["hap"], names[i], t[names[i]]
          bad = 1
        }
      exit bad
    }' "$1"
}

# the judge itself fails a point where hap is slower than a baseline, or a baseline has no plan
head='point,strategy,devices,ok,iteration_s'
printf '%s\n"b",hap,8,1,2.5\n"b",dp-ev,8,1,2.0\n"b",dp-cp,8,1,3\n"b",megatron-tp,8,1,3\n' "$head" >"$tmp/slow.csv"
printf '%s\n"b",hap,8,1,1.5\n"b",dp-ev,8,1,2.0\n"b",dp-cp,8,1,3\n"b",megatron-tp,8,0,\n' "$head" >"$tmp/none.csv"
printf '%s\n"b",hap,8,1,1.5\n"b",dp-ev,8,1,2.0\n"b",dp-cp,8,1,3\n"b",megatron-tp,8,1,1\n' "$head" >"$tmp/good.csv"
if judge "$tmp/slow.csv" self-test >/dev/null || judge "$tmp/none.csv" self-test >/dev/null ||
  ! judge "$tmp/good.csv" self-test; then
  echo "FAIL: the judge passes a slower hap or a missing baseline, or fails a good point"
  exit 1
fi

fail=0
points=0
for cluster in paper-hetero paper-homo; do
  for model in vgg19 vit bert-base bert-moe; do
    for k in 1 2 4 8; do
      spec=$model
      [ "$model" = bert-moe ] && spec="bert-moe:experts=$((2 * 8 * k))"
      where="$spec on $cluster:gpus_per_host=$k"
      if ! "$sim" "$spec" -c "$cluster:gpus_per_host=$k" -b 32 -f csv -q >"$tmp/rows.csv" 2>"$tmp/err"; then
        echo "FAIL: $where: hap-sim exited non-zero: $(head -n 2 "$tmp/err")"
        fail=1
        continue
      fi
      points=$((points + 1))
      judge "$tmp/rows.csv" "$where" || fail=1
    done
  done
done
[ "$points" -eq 32 ] || { echo "FAIL: $points of 32 points simulated"; fail=1; }
[ "$fail" -eq 0 ] && echo "test_paper_study_order.sh: 32 points, every strategy planned, hap never slower than dp-ev or dp-cp"
exit "$fail"
