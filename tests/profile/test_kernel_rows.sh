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

# --plan also extends each collective's sweep to the plan's largest message of that kind: a
# dp-ev plan all-reduces a 2048 x 2048 float32 weight (16 MiB, past the quick sweep's 8 MiB)
big="mlp:layers=1,batch=4,seq=2,hidden=2048"
"$synth" "$big" -c cpu-2 -s dp-ev -o "$tmp/big.json" -q
"$mpiexec" -np 2 "$bin" measure --backend cpu --quick --quiet \
  --plan "$tmp/big.json" --model "$big" --cluster cpu-2 -o "$tmp/big.h5"
/usr/bin/python3 - "$tmp/big.h5" <<'PY'
import sys
try:
    import h5py
except ImportError:
    print("h5py missing: the extension check is skipped")
    sys.exit(0)
with h5py.File(sys.argv[1], "r") as f:
    ar = int(f["collectives"]["all_reduce"]["world"]["sizes_bytes"][-1])
    ag = int(f["collectives"]["all_gather"]["world"]["sizes_bytes"][-1])
assert ar >= 16 << 20, "all_reduce sweep ends at %d B, the plan sends 16 MiB" % ar
assert ag <= 8 << 20, "all_gather was extended to %d B though the plan has none" % ag
print("plan extension: all_reduce to %d B, all_gather to %d B" % (ar, ag))
PY
