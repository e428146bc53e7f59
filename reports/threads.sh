#!/usr/bin/env bash
# How hap-run's iteration scales with threads on one rank (issue 19, hap-run --threads), next to
# PyTorch eager with as many intra-op threads: the vs-pytorch.sh models (vs-pytorch-models.sh),
# each time the median of ITERS iterations after 3 warm-ups, measured in one run of this script.
# hap-run's threads are OpenBLAS's (its GEMMs); its other kernels run on one thread. PyTorch
# threads its GEMMs (the same OpenBLAS) and its own elementwise and convolution kernels (OpenMP,
# oneDNN), with OMP_WAIT_POLICY=PASSIVE: OpenMP threads spinning beside OpenBLAS's made its mlp
# 1.6x slower on 2 threads than passive ones did. Prints a markdown table: times for 1 and THREADS threads, each one's speedup, and
# hap / PyTorch at THREADS. Without torch in /usr/bin/python3 the PyTorch columns say so.
# Usage: reports/threads.sh [BUILD_DIR [ITERS [THREADS [MODELS]]]]  (MODELS: comma-separated)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
iters=${2:-10}
threads=${3:-2}
only=${4:-}
bin="$build/bin"
for t in hap-import hap-synth hap-run; do
  [ -x "$bin/$t" ] || { echo "threads.sh: build first ($bin/$t missing)" >&2; exit 1; }
done
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  echo "threads.sh: /usr/bin/python3 has no torch (scripts/setup-debian.sh --import): nothing to import"
  exit 0
fi
unset OPENBLAS_NUM_THREADS OMP_NUM_THREADS # hap-run sets OpenBLAS's; PyTorch gets them per run
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=reports/vs-pytorch-models.sh
. reports/vs-pytorch-models.sh
hap_time() { # THREADS: hap-run's median iteration on one rank, s
  "$bin/hap-run" "$tmp/p1.json" --threads "$1" -n "$iters" -w 3 -q -f json >"$tmp/run.json"
  /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["measured_p50_s"])' \
    "$tmp/run.json"
}
torch_time() { # THREADS ARGS...: PyTorch's median iteration, s
  local n=$1
  shift
  OPENBLAS_NUM_THREADS=$n OMP_NUM_THREADS=$n OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 reports/vs_pytorch.py \
    "$vs_pytorch_models" "$@" --threads "$n" --iters "$iters" |
    /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["median_s"])'
}
fmt() { /usr/bin/python3 -c "import sys; print(sys.argv[1] % eval(sys.argv[2]))" "$@"; }
echo "| model | hap-run 1 thread ms | hap-run $threads ms | speedup | PyTorch 1 thread ms | PyTorch $threads ms | speedup | hap / PyTorch at $threads |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for c in "${vs_pytorch_cases[@]}"; do
  vs_pytorch_import "$c" "$only" "$bin/hap-import" "$tmp/g.json" || continue
  "$bin/hap-synth" "$tmp/g.json" -c cpu-2:gpus_per_host=1 -o "$tmp/p1.json" -q
  h1=$(hap_time 1)
  hn=$(hap_time "$threads")
  t1=$(torch_time 1 "$factory" "${args[@]}")
  tn=$(torch_time "$threads" "$factory" "${args[@]}")
  echo "| $name | $(fmt %.2f "1e3*$h1") | $(fmt %.2f "1e3*$hn") | $(fmt %.2f "$h1/$hn") | $(fmt %.2f "1e3*$t1") | $(fmt %.2f "1e3*$tn") | $(fmt %.2f "$t1/$tn") | $(fmt %.2f "$hn/$tn") |"
done
