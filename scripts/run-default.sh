#!/usr/bin/env bash
# The README's main job: build hap (if needed) and run the bundled default what-if study: bert-base
# (HAP's configuration, global batch 32 x devices) on HAP's heterogeneous paper cluster
# (paper-hetero: 2 hosts of V100 + 6 hosts of P100, 10.4 Gb/s between hosts) with 1, 2, 4 and 8
# GPUs per host, HAP's synthesised plan against data parallelism with even (dp-ev) and
# compute-proportional (dp-cp) batch splits. The times are predictions of hap's cost model
# (hap-sim, the discrete-event simulator, and hap-run, the executor, will refine and check them).
# Usage: scripts/run-default.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
if [ ! -x "$build/bin/hap-synth" ]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$build" -j"$(nproc)" >/dev/null
fi
"$build/bin/hap-model" stats bert-base | head -5
echo
printf '%-7s %-8s %14s %14s %14s %9s %9s %10s\n' "GPUs" "per host" "hap s/iter" "dp-ev s/iter" \
  "dp-cp s/iter" "vs dp-ev" "vs dp-cp" "synth s"
for k in 1 2 4 8; do
  devices=$((8 * k))
  "$build/bin/hap-synth" "bert-base:batch=$((32 * devices))" --cluster "paper-hetero:gpus_per_host=$k" \
    --compare --format json |
    python3 -c '
import json, sys
d = json.load(sys.stdin)
b = {x["strategy"]: x for x in d["baselines"]}
print("%-7d %-8d %14.4f %14.4f %14.4f %8.2fx %8.2fx %10.3f" % (int(sys.argv[1]), int(sys.argv[2]),
      d["predicted_iteration_s"], b["dp-ev"]["predicted_iteration_s"],
      b["dp-cp"]["predicted_iteration_s"], b["dp-ev"]["speedup"], b["dp-cp"]["speedup"],
      d["seconds"]))' "$devices" "$k"
done
echo
echo "Plan details: $build/bin/hap-synth bert-base --cluster paper-hetero --explain"
