#!/usr/bin/env bash
# Kernel timings end to end: a quick 2-rank CPU profile (--only compute) has kernel rows that the
# cluster model serves back (test_kernel_rows); then, when hap-synth is built, a profile measured
# with --plan has the rows of exactly the local shapes that plan gives each rank.
# Usage: test_kernel_rows.sh HAP_PROFILE MPIEXEC TEST_KERNEL_ROWS [HAP_SYNTH]
set -eu
bin=$1 mpiexec=$2 check=$3 synth=${4:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$mpiexec" -np 2 "$bin" measure --backend cpu --quick --only compute --quiet -o "$tmp/grid.h5"
"$check" "$tmp/grid.h5"

if [ -z "$synth" ]; then
  echo "hap-synth not built: --plan part skipped"
  exit 0
fi
model="mlp:layers=2,batch=24,seq=8,hidden=32"
"$synth" "$model" -c cpu-2 -o "$tmp/plan.json" -q
"$mpiexec" -np 2 "$bin" measure --backend cpu --quick --only compute --quiet \
  --plan "$tmp/plan.json" --model "$model" --cluster cpu-2 -o "$tmp/plan.h5"
"$check" "$tmp/plan.h5" --plan "$tmp/plan.json" --model "$model" --cluster cpu-2
