#!/usr/bin/env bash
# Kernel timings end to end: a quick 2-rank CPU profile (--only compute) has kernel rows that the
# cluster model serves back (test_kernel_rows); then a profile measured with --plan (hap-synth's)
# has the rows of exactly the local shapes that plan gives each rank, both timed in a replay of the
# plan (the default, also for a 2-D megatron-tp plan and a pipelined plan's stages) and in hot
# loops. hap-synth and h5py
# (python3-h5py, scripts/setup-debian.sh) are prerequisites: without either the test fails.
# Usage: test_kernel_rows.sh HAP_PROFILE MPIEXEC TEST_KERNEL_ROWS HAP_SYNTH
set -eu
if [ $# -ne 4 ]; then
  echo "FAIL: usage: $0 HAP_PROFILE MPIEXEC TEST_KERNEL_ROWS HAP_SYNTH (got $# arguments)" >&2
  exit 2
fi
bin=$1 mpiexec=$2 check=$3 synth=$4
for tool in "$bin" "$check" "$synth"; do
  [ -x "$tool" ] || { echo "FAIL: $tool: not an executable" >&2; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$mpiexec" -np 2 "$bin" measure --backend cpu --quick --only compute --quiet -o "$tmp/grid.h5"
"$check" "$tmp/grid.h5"

model="mlp:layers=2,batch=24,seq=8,hidden=32"
"$synth" "$model" -c cpu-2 -o "$tmp/plan.json" -q
# (--model and --cluster: the ones the plan records)
"$mpiexec" -np 2 "$bin" measure --backend cpu --quick --only compute --quiet \
  --plan "$tmp/plan.json" -o "$tmp/plan.h5"
"$check" "$tmp/plan.h5" --plan "$tmp/plan.json" --model "$model" --cluster cpu-2
"$mpiexec" -np 2 "$bin" measure --backend cpu --quick --only compute --quiet --kernel-timing loop \
  --plan "$tmp/plan.json" --model "$model" --cluster cpu-2 -o "$tmp/loop.h5"
"$check" "$tmp/loop.h5" --plan "$tmp/plan.json" --model "$model" --cluster cpu-2
# a 2-D plan (2 replicas of 1 device): the replay's silent communicator splits as hap-run's does
two=paper-homo:gpus_per_host=1,hosts=2
"$synth" "$model" -c "$two" -s megatron-tp -o "$tmp/mtp.json" -q
"$mpiexec" -np 2 "$bin" measure --backend cpu --quick --only compute --quiet \
  --plan "$tmp/mtp.json" -o "$tmp/mtp.h5"
"$check" "$tmp/mtp.h5" --plan "$tmp/mtp.json" --model "$model" --cluster "$two"
# a pipelined plan (2 stages of 1 device): each rank's stage replayed on its group, and in loops
"$synth" "$model" -c cpu-2 --pipeline stages=2,micro_batches=2 -o "$tmp/pipe.json" -q
for how in replay loop; do
  "$mpiexec" -np 2 "$bin" measure --backend cpu --quick --only compute --quiet \
    --kernel-timing "$how" --plan "$tmp/pipe.json" --model "$model" --cluster cpu-2 \
    -o "$tmp/pipe-$how.h5"
  "$check" "$tmp/pipe-$how.h5" --plan "$tmp/pipe.json" --model "$model" --cluster cpu-2
done
/usr/bin/python3 - "$tmp/plan.h5" "$tmp/loop.h5" <<'PY'
import sys
try:
    import h5py
except ImportError as e:
    sys.exit("FAIL: h5py is not importable (%s); scripts/setup-debian.sh installs python3-h5py" % e)
for path, how in zip(sys.argv[1:], ["replay", "loop"]):
    with h5py.File(path, "r") as f:
        got = f["env"].attrs["hap.kernel_timing"]
        got = got.decode() if isinstance(got, bytes) else got
        assert got == how, "%s: hap.kernel_timing is %r, expected %r" % (path, got, how)
        upd = f["devices"]["0"].attrs["update_bw_Bps"]
        assert upd > 1e8, "%s: update bandwidth %g" % (path, upd)
        print("%s: kernel timing %s, update bandwidth %.1f GB/s" % (path, got, upd / 1e9))
PY
# usage errors: one line, exit 2, before any MPI start-up
set +e
"$bin" measure --backend cpu --kernel-timing loop -o "$tmp/x.h5" 2>"$tmp/err"
rc=$?
set -e
[ "$rc" = 2 ] && grep -q -- "--kernel-timing goes with --plan" "$tmp/err" ||
  { echo "FAIL: --kernel-timing without --plan: exit $rc: $(cat "$tmp/err")"; exit 1; }
set +e
"$bin" measure --backend cpu --kernel-timing fast --plan "$tmp/plan.json" --model "$model" \
  --cluster cpu-2 -o "$tmp/x.h5" 2>"$tmp/err"
rc=$?
set -e
[ "$rc" = 2 ] && grep -q "expected replay or loop" "$tmp/err" ||
  { echo "FAIL: --kernel-timing fast: exit $rc: $(cat "$tmp/err")"; exit 1; }
[ ! -e "$tmp/x.h5" ] || { echo "FAIL: a usage error left $tmp/x.h5"; exit 1; }

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
except ImportError as e:
    sys.exit("FAIL: h5py is not importable (%s); scripts/setup-debian.sh installs python3-h5py" % e)
with h5py.File(sys.argv[1], "r") as f:
    ar = int(f["collectives"]["all_reduce"]["world"]["sizes_bytes"][-1])
    ag = int(f["collectives"]["all_gather"]["world"]["sizes_bytes"][-1])
assert ar >= 16 << 20, "all_reduce sweep ends at %d B, the plan sends 16 MiB" % ar
assert ag <= 8 << 20, "all_gather was extended to %d B though the plan has none" % ag
print("plan extension: all_reduce to %d B, all_gather to %d B" % (ar, ag))
PY
