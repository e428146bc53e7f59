#!/usr/bin/env bash
# hap-run against PyTorch on this machine (issue 19): the same small models (tests/import/models.py,
# imported into hap with hap-import torch, so both run exactly the same function), one thread per
# rank. One rank: PyTorch eager vs hap-run. Two ranks: PyTorch DistributedDataParallel (gloo,
# loopback) vs hap-run's dp-ev plan and hap's own plan, the global batch split over the ranks.
# Each run times ITERS training iterations (forward, cross-entropy, backward, SGD) after 3
# warm-ups and keeps their median; a model's runs go round ROUNDS times in the order PyTorch,
# hap, DDP, hap dp-ev, hap's plan, and each cell is the median of its ROUNDS runs, so that a
# machine whose speed drifts by 10-20 % within a minute (dev-2c) weighs on both sides alike.
# All in one run of this script; ratio = hap / PyTorch (below 1: hap faster). Prints a markdown
# table.
# Needs /usr/bin/python3 with torch (scripts/setup-debian.sh --test or --import); without it says
# so and exits 0.
# Usage: reports/vs-pytorch.sh [BUILD_DIR [ITERS [MODELS [ROUNDS]]]]  (MODELS: comma-separated
# names of the table below, default all; ROUNDS default 3)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
iters=${2:-10}
only=${3:-}
rounds=${4:-3}
bin="$build/bin"
[[ "$iters" =~ ^[1-9][0-9]{0,3}$ ]] ||
  { echo "vs-pytorch.sh: ITERS '$iters': expected a whole number in 1..9999" >&2; exit 2; }
[[ "$rounds" =~ ^[1-9]$ ]] ||
  { echo "vs-pytorch.sh: ROUNDS '$rounds': expected a whole number in 1..9" >&2; exit 2; }
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  echo "vs-pytorch.sh: /usr/bin/python3 has no torch (scripts/setup-debian.sh --import): nothing to compare"
  exit 0
fi
for t in hap-import hap-synth hap-run; do
  [ -x "$bin/$t" ] || { echo "vs-pytorch.sh: build first ($bin/$t missing)" >&2; exit 1; }
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
export OMP_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=reports/vs-pytorch-models.sh
. reports/vs-pytorch-models.sh
hap_time() { # PLAN RANKS: hap-run's median iteration, s
  local plan=$1 ranks=$2 launch=()
  [ "$ranks" -gt 1 ] && launch=(mpirun -np "$ranks")
  "${launch[@]}" "$bin/hap-run" "$plan" -n "$iters" -w 3 -q -f json >"$tmp/run.json"
  /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["measured_p50_s"])' \
    "$tmp/run.json"
}
torch_time() { # RANKS ARGS...: PyTorch's median iteration, s
  local ranks=$1
  shift
  /usr/bin/python3 reports/vs_pytorch.py "$vs_pytorch_models" "$@" --ranks "$ranks" --iters "$iters" |
    /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["median_s"])'
}
median() {
  /usr/bin/python3 -c 'import statistics,sys; print(statistics.median(map(float, sys.argv[1:])))' \
    "$@"
}
ms() { /usr/bin/python3 -c "import sys; print('%.2f' % (1e3 * float(sys.argv[1])))" "$1"; }
ratio() { /usr/bin/python3 -c "import sys; print('%.2f' % (float(sys.argv[1]) / float(sys.argv[2])))" "$1" "$2"; }

echo "| model | PyTorch eager, 1 rank ms | hap-run, 1 rank ms | ratio | DDP, 2 ranks ms | hap dp-ev, 2 ranks ms | ratio | hap's plan, 2 ranks ms | ratio |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
for c in "${vs_pytorch_cases[@]}"; do
  vs_pytorch_import "$c" "$only" "$bin/hap-import" "$tmp/g.json" || continue
  "$bin/hap-synth" "$tmp/g.json" -c cpu-2:gpus_per_host=1 -o "$tmp/p1.json" -q
  "$bin/hap-synth" "$tmp/g.json" -c cpu-2 -s dp-ev -o "$tmp/dp.json" -q
  "$bin/hap-synth" "$tmp/g.json" -c cpu-2 -o "$tmp/hap.json" -q
  t1s=() h1s=() t2s=() h2s=() hhs=()
  for ((r = 0; r < rounds; r++)); do
    t1s+=("$(torch_time 1 "$factory" "${args[@]}")")
    h1s+=("$(hap_time "$tmp/p1.json" 1)")
    t2s+=("$(torch_time 2 "$factory" "${args[@]}")")
    h2s+=("$(hap_time "$tmp/dp.json" 2)")
    hhs+=("$(hap_time "$tmp/hap.json" 2)")
  done
  t1=$(median "${t1s[@]}") h1=$(median "${h1s[@]}") t2=$(median "${t2s[@]}")
  h2=$(median "${h2s[@]}") hh=$(median "${hhs[@]}")
  echo "| $name | $(ms "$t1") | $(ms "$h1") | $(ratio "$h1" "$t1") | $(ms "$t2") | $(ms "$h2") | $(ratio "$h2" "$t2") | $(ms "$hh") | $(ratio "$hh" "$t2") |"
done
# hap-run's own word on OpenBLAS's kernel set (PyTorch loads the same library in the same
# environment, so it runs the same one)
if [ -s "$tmp/run.json" ]; then
  /usr/bin/python3 - "$tmp/run.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
print(f"\nOpenBLAS core: {d['blas_core']} (chosen by {d['blas_core_chosen_by']})")
EOF
fi
