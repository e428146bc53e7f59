#!/usr/bin/env bash
# The alpa strategy (issue 16) beside hap, dp-ev and megatron-tp: every zoo model of the paper
# experiment on paper-homo and paper-hetero at 1, 2, 4 and 8 GPUs per host (HAP's configuration:
# 32 samples per GPU, gpt 4, bert-moe 2 experts per GPU), each plan simulated by hap-sim --plan,
# and alpa's search time. Prints a markdown table.
# Usage: reports/bench-alpa.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
synth="$build/bin/hap-synth" sim="$build/bin/hap-sim"
[ -x "$synth" ] && [ -x "$sim" ] || { echo "bench-alpa.sh: build first ($synth missing)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
simulated() { "$sim" --plan "$1" -f csv -q | sed -n 2p | cut -d, -f5; }
ms() { /usr/bin/env python3 -c "print('%.1f' % (1e3 * float('$1')))"; }

echo "| cluster | model | GPUs/host | alpa ms | hap ms | dp-ev ms | megatron-tp ms | alpa / hap time | alpa search s |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|"
for cluster in paper-homo paper-hetero; do
  for model in vgg19 vit bert-base bert-moe gpt; do
    for k in 1 2 4 8; do
      case $model in
      bert-moe) spec="bert-moe:batch=$((32 * 8 * k)),experts=$((16 * k))" ;;
      gpt) spec="gpt:batch=$((4 * 8 * k))" ;;
      *) spec="$model:batch=$((32 * 8 * k))" ;;
      esac
      c="$cluster:gpus_per_host=$k"
      row="| $cluster | $model | $k"
      declare -A t=()
      for s in alpa hap dp-ev megatron-tp; do
        start=$(date +%s.%N)
        if "$synth" "$spec" -c "$c" -s "$s" -o "$tmp/$s.json" -q 2>/dev/null; then
          t[$s]=$(simulated "$tmp/$s.json")
        else
          t[$s]=""
        fi
        [ "$s" = alpa ] && search=$(/usr/bin/env python3 -c "import time; print('%.2f' % (time.time() - $start))")
      done
      for s in alpa hap dp-ev megatron-tp; do
        if [ -n "${t[$s]}" ]; then row="$row | $(ms "${t[$s]}")"; else row="$row | no plan"; fi
      done
      if [ -n "${t[alpa]}" ] && [ -n "${t[hap]}" ]; then
        row="$row | $(/usr/bin/env python3 -c "print('%.3f' % (${t[alpa]} / ${t[hap]}))")"
      else
        row="$row | -"
      fi
      echo "$row | $search |"
      unset t
    done
  done
done
