#!/usr/bin/env bash
# Sufficient-factor broadcasting (issue 20, acceptance 1): what it gains in simulation. For each
# zoo model of the paper experiment (plus mlp) on paper-hetero with 1, 2, 4 and 8 GPUs per host
# (HAP's configuration: 32 samples per GPU), every plan simulated by hap-sim --plan:
#   hap     hap-synth's plan (sfb where its search finds it cheaper: --sfb auto) against the same
#           search without sfb (--sfb off)
#   dp-ev   the data-parallel program with sfb allowed (--sfb all) against the plain one, whose
#           every gradient is all-reduced: what sfb gains where a program is data parallel
# Prints a markdown table: the linear weights each plan stores sfb, the times and the gains.
# Usage: reports/bench-sfb.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
synth="$build/bin/hap-synth" sim="$build/bin/hap-sim"
[ -x "$synth" ] && [ -x "$sim" ] || { echo "bench-sfb.sh: build first ($synth missing)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# iteration PLAN: hap-sim's simulated iteration of the plan, ms
iteration() {
  "$sim" --plan "$1" -f csv -q | /usr/bin/env python3 -c '
import csv, sys
rows = list(csv.DictReader(sys.stdin))
print("%.1f" % (float(rows[0]["iteration_s"]) * 1e3))'
}
sfb_weights() { grep -c '"storage": "sfb"' "$1" || true; }
gain() { /usr/bin/env python3 -c "print('%+.1f %%' % (100 * (1 - $1 / $2)))"; }

echo "| model | GPUs/host | hap: sfb weights | hap, ms | hap --sfb off, ms | dp-ev --sfb all: sfb weights | dp-ev --sfb all, ms | dp-ev, ms | dp-ev gain |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
for model in mlp vgg19 vit bert-base bert-moe; do
  for k in 1 2 4 8; do
    spec="$model:batch=$((32 * 8 * k))"
    [ "$model" = bert-moe ] && spec="$spec,experts=$((2 * 8 * k))"
    cluster="paper-hetero:gpus_per_host=$k"
    "$synth" "$spec" -c "$cluster" -o "$tmp/hap.json" -q
    "$synth" "$spec" -c "$cluster" --sfb off -o "$tmp/hap-off.json" -q
    "$synth" "$spec" -c "$cluster" -s dp-ev --sfb all -o "$tmp/dp.json" -q
    "$synth" "$spec" -c "$cluster" -s dp-ev -o "$tmp/dp-off.json" -q
    hap=$(iteration "$tmp/hap.json") hap_off=$(iteration "$tmp/hap-off.json")
    dp=$(iteration "$tmp/dp.json") dp_off=$(iteration "$tmp/dp-off.json")
    echo "| $model | $k | $(sfb_weights "$tmp/hap.json") | $hap | $hap_off |" \
      "$(sfb_weights "$tmp/dp.json") | $dp | $dp_off | $(gain "$dp" "$dp_off") |"
  done
done
