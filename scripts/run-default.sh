#!/usr/bin/env bash
# The README's main job: build hap (if needed) and run the bundled default what-if study with
# hap-sim: bert-base (HAP's configuration: 32 samples per GPU) on HAP's heterogeneous paper
# cluster (paper-hetero: 2 hosts of V100 + 6 hosts of P100, 10.4 Gb/s between hosts) with 1, 2, 4
# and 8 GPUs per host; HAP's synthesised plan against data parallelism with even (dp-ev) and
# compute-proportional (dp-cp) batch splits. Each plan is lowered to per-device tasks and simulated
# event by event (compute and communication overlap, collectives wait for their slowest member);
# "synth est" is the synthesizer's own additive estimate.
# Usage: scripts/run-default.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
if [ ! -x "$build/bin/hap-sim" ]; then
  if [ -z "${CUDACXX:-}" ] && ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
    export CUDACXX=/usr/local/cuda/bin/nvcc
  fi
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$build" -j"$(nproc)" >/dev/null
fi
"$build/bin/hap-model" stats bert-base | head -5
echo
"$build/bin/hap-sim"
echo
echo "Next: $build/bin/hap-sim bert-base -c paper-hetero:gpus_per_host=2 -s hap --trace trace.json"
echo "      (open trace.json in https://ui.perfetto.dev), or --sweep inter_gbps=10,25,100,"
echo "      --sweep 'device[P100]=V100-16GB,A100-80GB', --sweep batch=..., see hap-sim --help"
