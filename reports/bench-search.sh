#!/usr/bin/env bash
# Search time of the planners (issue 16, acceptance 3): hap, galvatron and alpa for a GPT-39B-class
# model (48 layers, width 8192, 64 heads, 1,024 tokens, batch 64: 39.1 G parameters) on 64 V100s
# (paper-homo:gpus_per_host=8), each hap-synth run's wall time (CLOCK_MONOTONIC through date),
# the median of RUNS runs, and the chosen plan's simulated iteration (hap-sim --plan).
# Targets: alpa under 60 s, galvatron under 10 s, hap under 10 s. Prints a markdown table.
# Usage: reports/bench-search.sh [BUILD_DIR] [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build} runs=${2:-3}
synth="$build/bin/hap-synth" sim="$build/bin/hap-sim"
[ -x "$synth" ] && [ -x "$sim" ] || { echo "bench-search.sh: build first ($synth missing)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
model='gpt:preset=none,layers=48,width=8192,heads=64,seq=1024,batch=64'
cluster=paper-homo:gpus_per_host=8

echo "| strategy | search s (median of $runs) | runs s | plan | simulated iteration s | target |"
echo "|---|---:|---|---|---:|---|"
for s in hap galvatron alpa; do
  times=()
  for ((i = 0; i < runs; i++)); do
    start=$(date +%s.%N)
    "$synth" "$model" -c "$cluster" -s "$s" -o "$tmp/$s.json" >"$tmp/$s.out" 2>&1
    times+=("$(python3 -c "print('%.2f' % ($(date +%s.%N) - $start))")")
  done
  median=$(printf '%s\n' "${times[@]}" | sort -n | sed -n "$(((runs + 1) / 2))p")
  plan=$(grep -m1 '^strategy' "$tmp/$s.out" | cut -c13- | cut -c1-70)
  iter=$("$sim" --plan "$tmp/$s.json" -f csv -q | sed -n 2p | cut -d, -f5)
  target=10
  [ "$s" = alpa ] && target=60
  echo "| $s | $median | ${times[*]} | $plan | $(python3 -c "print('%.1f' % $iter)") | under $target s |"
done
