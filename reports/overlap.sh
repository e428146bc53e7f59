#!/usr/bin/env bash
# hap-run --overlap on 2 ranks (issue 19): the vs-pytorch.sh models' dp-ev plans (the global batch
# split over the ranks), each run with every bucket size in SIZES (MiB; 0: each gradient's
# all-reduce blocks), each run the median of ITERS iterations after 3 warm-ups. Prints a markdown
# table: the time (the median over HAP_REPEATS runs, default 3, taken round robin over the sizes),
# the sums started per iteration (buckets and gradients summed in place) and the ratio to the
# first size (blocking, with the default SIZES).
# Usage: reports/overlap.sh [BUILD_DIR [ITERS [SIZES [MODELS]]]]  (SIZES: comma-separated, default
# 0,1,4,25; MODELS: comma-separated names of vs-pytorch-models.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
iters=${2:-20}
sizes=${3:-0,1,4,25}
only=${4:-}
repeats=${HAP_REPEATS:-3}
bin="$build/bin"
for t in hap-import hap-synth hap-run; do
  [ -x "$bin/$t" ] || { echo "overlap.sh: build first ($bin/$t missing)" >&2; exit 1; }
done
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  echo "overlap.sh: /usr/bin/python3 has no torch (scripts/setup-debian.sh --import): nothing to import"
  exit 0
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=reports/vs-pytorch-models.sh
. reports/vs-pytorch-models.sh
echo "| model | --overlap MiB | sums started per iteration | measured ms (median of $repeats runs) | vs the first size |"
echo "|---|---:|---:|---:|---:|"
for c in "${vs_pytorch_cases[@]}"; do
  vs_pytorch_import "$c" "$only" "$bin/hap-import" "$tmp/g.json" || continue
  "$bin/hap-synth" "$tmp/g.json" -c cpu-2 -s dp-ev -o "$tmp/dp.json" -q
  for r in $(seq "$repeats"); do # round robin over the sizes, so drifts hit them alike
    for mb in ${sizes//,/ }; do
      mpirun -np 2 "$bin/hap-run" "$tmp/dp.json" -n "$iters" -w 3 --overlap "$mb" -q -f json \
        >"$tmp/run-$mb-$r.json"
    done
  done
  # shellcheck disable=SC2086 # the sizes: words on purpose
  /usr/bin/python3 - "$name" "$tmp" "$repeats" ${sizes//,/ } <<'PY'
import json, statistics, sys
name, tmp, repeats, sizes = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
first = None
for mb in sizes:
    runs = [json.load(open("%s/run-%s-%d.json" % (tmp, mb, r + 1))) for r in range(repeats)]
    t = statistics.median(d["measured_p50_s"] for d in runs)
    b = runs[0]["overlap_buckets_per_iteration"]
    first = t if first is None else first
    print("| %s | %s | %s | %.2f | %.2f |" % (name, mb, "off" if b < 0 else "%.0f" % b, 1e3 * t,
                                           t / first))
PY
done
