#!/usr/bin/env bash
# Build hap in Release (build-bench/) and run the benchmark programs whose results are recorded in
# reports/BENCHMARKS.md. Usage:
#   reports/run-benchmarks.sh [graph-load|cost|synth-matrix|synth-overhead|plan-sim|sim-paper|
#                              fit-holdout|policy|all]
# (synth-matrix and synth-overhead are reports/bench-synth.sh matrix and overhead, sim-paper is
# reports/sim-paper.sh, fit-holdout is reports/bench-fit-holdout.sh: the fits' accuracy gates,
# policy is reports/policy-bench.sh: training policies' time and memory per device)
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
build="build-bench"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j"$(nproc)" >/dev/null
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, $(uname -sr)"
echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
if [ "$what" = graph-load ] || [ "$what" = all ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  "$build/bin/hap-model" export 'gpt:preset=gpt3-175b,granularity=fine,batch=1' -o "$tmp/gpt.json"
  "$build/bin/bench_graph_load" "$tmp/gpt.json" 21
fi
if [ "$what" = cost ] || [ "$what" = all ]; then
  "$build/bin/bench_cost" 1024 10000000
fi
if [ "$what" = synth-matrix ] || [ "$what" = all ]; then
  HAP_BENCH_NO_BUILD=1 reports/bench-synth.sh matrix
fi
if [ "$what" = synth-overhead ] || [ "$what" = all ]; then
  HAP_BENCH_NO_BUILD=1 reports/bench-synth.sh overhead
fi
if [ "$what" = plan-sim ] || [ "$what" = all ]; then
  for cluster in paper-homo:hosts=128,gpus_per_host=8 paper-hetero:hosts=64; do
    "$build/bin/bench_plan_sim" 'gpt:preset=gpt3-175b,batch=1024' "$cluster" dp-cp 5
  done
fi
if [ "$what" = sim-paper ] || [ "$what" = all ]; then
  reports/sim-paper.sh "$build"
fi
if [ "$what" = fit-holdout ] || [ "$what" = all ]; then
  reports/bench-fit-holdout.sh "$build"
fi
if [ "$what" = policy ] || [ "$what" = all ]; then
  reports/policy-bench.sh "$build"
fi
