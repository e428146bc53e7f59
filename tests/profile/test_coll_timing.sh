#!/usr/bin/env bash
# hap-profile measure --coll-timing: with --plan (replayed) the default times the plan's
# collectives in the replay, and the profile's all_reduce group "plan" holds them at the plan's
# sizes; hap-run --sim-cluster on that profile then simulates every gradient all-reduce of the
# plan at exactly one of those sizes' prices (the cluster model's points: the mean of the size's
# samples, store/fit.h HAP_PRICE_TRIM), and every
# size the group holds prices some task. Under precision=bf16 too, whose sums hap-run rounds
# inside the task: the simulation adds no rounding pass to a time measured so. --coll-timing
# sweep records "sweep" and writes no such group. With --price p50 the kernel rows have no mean_s
# and the points are the p50s. A bad value, and either option without --plan, are refused (exit 2,
# the error on the first line, no file).
# (Whether the replayed times price hap-run better is a benchmark: reports/coll-timing.sh.)
# Needs h5py.
# Usage: test_coll_timing.sh HAP_PROFILE HAP_SYNTH HAP_RUN MPIEXEC
set -u
prof=${1:?hap-profile} synth=${2:?hap-synth} run=${3:?hap-run} mpiexec=${4:?mpiexec}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
model="mlp:layers=2,batch=16,seq=8,hidden=64"

refused() { # ARGS... : exit 2, WANT on the first stderr line, no file
  local want=$1
  shift
  "$prof" measure --backend cpu --quick "$@" -o "$tmp/x.h5" 2>"$tmp/err"
  local rc=$?
  if [ "$rc" != 2 ] || ! head -n 1 "$tmp/err" | grep -q -- "$want" || [ -e "$tmp/x.h5" ]; then
    echo "FAIL: $*: exit $rc, expected 2 and '$want': $(cat "$tmp/err")"
    fail=1
  fi
}
refused "--coll-timing: 'often', expected replay or sweep" --coll-timing often
refused "--coll-timing goes with --plan" --coll-timing replay
refused "--price: 'mode', expected mean or p50" --price mode
refused "--price goes with --plan" --price p50

if ! "$mpiexec" -np 2 "$prof" measure --backend cpu --quick --quiet -o "$tmp/p0.h5" 2>"$tmp/err" ||
  ! "$synth" "$model" -c "$tmp/p0.h5" -s dp-ev -o "$tmp/default.json" -q 2>"$tmp/err" ||
  ! "$synth" "$model" -c "$tmp/p0.h5" -s dp-ev --policy precision=bf16 -o "$tmp/bf16.json" -q \
    2>"$tmp/err"; then
  echo "FAIL: the first profile or the plans: $(head -n 3 "$tmp/err")"
  exit 1
fi
cp "$tmp/default.json" "$tmp/sweep.json"
cp "$tmp/default.json" "$tmp/p50.json"
for how in default bf16 sweep p50; do
  args=()
  [ "$how" != sweep ] || args=(--coll-timing "$how")
  [ "$how" != p50 ] || args=(--price p50)
  if ! "$mpiexec" -np 2 "$prof" measure --backend cpu --quick --quiet --plan "$tmp/$how.json" \
    --model "$model" --cluster "$tmp/p0.h5" "${args[@]}" -o "$tmp/$how.h5" 2>"$tmp/err" ||
    ! "$mpiexec" -np 2 "$run" "$tmp/$how.json" -m "$model" -c "$tmp/p0.h5" \
      --sim-cluster "$tmp/$how.h5" -n 2 -w 1 -t "$tmp/$how.trace.json" -f json \
      >/dev/null 2>"$tmp/err"; then
    echo "FAIL: --coll-timing $how: $(head -n 3 "$tmp/err")"
    fail=1
    continue
  fi
  if ! /usr/bin/python3 - "$tmp/$how.h5" "$tmp/$how.trace.json" "$how" <<'PY'; then
import json, sys, h5py
path, trace, how = sys.argv[1:4]
with h5py.File(path, "r") as f:
    got = f["env"].attrs["hap.coll_timing"]
    got = got.decode() if isinstance(got, bytes) else got
    want = "sweep" if how == "sweep" else "replay"
    assert got == want, "hap.coll_timing is %r, expected %r" % (got, want)
    price = f["env"].attrs["hap.price"]
    price = price.decode() if isinstance(price, bytes) else price
    assert price == ("p50" if how == "p50" else "mean"), "hap.price is %r" % price
    for d in f["devices"].values():  # a replayed row has its price unless --price p50
        means = [float(m) for m in d["kernels"]["mean_s"]]
        assert means and all((m == 0) == (how == "p50") for m in means), means
    plan = f.get("collectives/all_reduce/plan")
    if how == "sweep":
        assert plan is None, "--coll-timing sweep wrote a plan group"
        print("%s: hap.coll_timing sweep, no plan group" % path)
        sys.exit(0)
    assert plan is not None, "no collectives/all_reduce/plan in %s" % path
    sizes = [int(s) for s in plan["sizes_bytes"][()]]
    samples = plan["samples_s"][()]
    assert samples.shape[0] == len(sizes) and samples.shape[1] >= 5, \
        "samples %s for %d sizes" % (samples.shape, len(sizes))
    price_us = [1e6 * (float(p) if how == "p50" else sum(map(float, row)) / len(row))
                for p, row in zip(plan["p50_s"][()], samples)]
    assert sizes == sorted(set(sizes)) and all(s > 0 for s in sizes), sizes
events = json.load(open(trace))
events = events["traceEvents"] if isinstance(events, dict) else events
names = {e["pid"]: e["args"]["name"] for e in events
         if e.get("ph") == "M" and e.get("name") == "process_name"}
sim = [e for e in events if e.get("ph") == "X" and names.get(e["pid"], "").startswith("sim")
       and e["name"].endswith(".grad.all_reduce")]
assert sim, "no simulated gradient all-reduce in the trace"
used = set()
for e in sim:
    hit = [i for i, t in enumerate(price_us) if abs(e["dur"] - t) <= 1e-3 + 1e-6 * t]
    assert hit, "%s simulated at %.4f us, none of the plan group's prices %s" % (
        e["name"], e["dur"], price_us)
    used.update(hit)
assert used == set(range(len(sizes))), "sizes %s, only %s price a task" % (sizes, sorted(used))
print("%s: plan group of %d sizes, %d simulated all-reduces at its prices" % (
    path, len(sizes), len(sim)))
PY
    echo "FAIL: --coll-timing $how: the profile or the simulation"
    fail=1
  fi
done
[ "$fail" -eq 0 ] && echo "test_coll_timing: passed"
exit "$fail"
