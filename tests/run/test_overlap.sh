#!/usr/bin/env bash
# hap-run --overlap (gradient sums in buckets that overlap the backward pass, run/grad_buckets.h)
# on 2 ranks: --check passes for hap and dp-ev plans of the zoo models with buckets far smaller than
# the gradients (many per iteration) and with buckets larger than all of them; the bucket count is
# reported, and --task-times marks where ranks wait; a gradient left out of the sum
# (HAP_FAULT=skip-all-reduce) still fails the check; a plan it does not apply to (2 micro-batches)
# says so and runs blocking; a malformed size is a usage error with one line.
# Usage: test_overlap.sh HAP_SYNTH HAP_RUN [MODELS]
set -u
synth=$1 run=$2
only=${3:-^(mlp|bert|vit|gpt|vgg19:.*width)}
here=$(dirname "$0")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
mpi=(mpirun --oversubscribe -np 2)
mlp="mlp:layers=2,batch=24,seq=8,hidden=32"
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL $*"; sed 's/^/  /' "$tmp/out" | head -12; }

for mb in 0.001 64; do
  if HAP_RUN_ARGS="--overlap $mb" bash "$here/test_check.sh" "$synth" "$run" 2 cpu-2 "hap dp-ev" \
    "$only" >"$tmp/out" 2>&1; then ok; else bad "--check with --overlap $mb"; fi
  tail -n 1 "$tmp/out"
done

"$synth" "$mlp" -c cpu-2 -s dp-ev -o "$tmp/dp.json" -q || { echo "FAIL hap-synth"; exit 1; }
"${mpi[@]}" "$run" "$tmp/dp.json" -m "$mlp" -c cpu-2 -n 2 -w 1 --overlap 0.001 >"$tmp/out" 2>&1
n=$(sed -n 's/^overlap     \([0-9]*\) gradient buckets per iteration of up to 0.001 MiB.*/\1/p' "$tmp/out")
if [ -n "$n" ] && [ "$n" -gt 1 ]; then ok; else bad "no bucket count above 1 reported"; fi

# --task-times under --overlap: a gradient handed to a bucket does not wait, the first update
# (which completes the sums) does, and the other updates do not
"${mpi[@]}" "$run" "$tmp/dp.json" -m "$mlp" -c cpu-2 -n 2 -w 1 --overlap 0.001 \
  --task-times "$tmp/tt.csv" >"$tmp/out" 2>&1
if python3 - "$tmp/tt.csv" <<'PY'; then ok; else bad "--task-times waits under --overlap"; fi
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1], newline="")))
for rank in ("0", "1"):
    one = [r for r in rows if r["rank"] == rank and r["iteration"] == "1"]
    grads = [r["waits"] for r in one if r["kind"] == "collective"]
    upds = [r["waits"] for r in one if r["kind"] == "update"]
    assert len(grads) > 1 and set(grads) == {"0"}, grads
    assert len(upds) > 1 and upds == ["1"] + ["0"] * (len(upds) - 1), upds
PY

HAP_FAULT=skip-all-reduce "${mpi[@]}" "$run" "$tmp/dp.json" -m "$mlp" -c cpu-2 --check -n 1 -w 1 \
  -q --overlap 0.001 >"$tmp/out" 2>&1
rc=$?
if [ "$rc" -eq 1 ] && grep -q "^check: FAILED: gradient of '" "$tmp/out"; then ok; else
  bad "skip-all-reduce under --overlap: exit $rc, expected 1 and a failed gradient"
fi

"$synth" "$mlp" -c cpu-2 -s dp-ev --policy micro_batches=2 -o "$tmp/mb.json" -q
"${mpi[@]}" "$run" "$tmp/mb.json" -m "$mlp" -c cpu-2 --check -n 1 -w 1 --overlap 1 >"$tmp/out" 2>&1
rc=$?
if [ "$rc" -eq 0 ] && grep -q "^overlap     off for this plan" "$tmp/out" &&
  grep -q "^check: passed" "$tmp/out"; then ok; else bad "2 micro-batches: exit $rc"; fi

"${mpi[@]}" "$run" "$tmp/dp.json" --overlap -1 >"$tmp/out" 2>&1
rc=$?
if [ "$rc" -eq 2 ] && [ "$(grep -c "overlap wants a bucket size in MiB" "$tmp/out")" -ge 1 ]; then ok; else
  bad "--overlap -1: exit $rc, expected 2 and the usage line"
fi

echo "test_overlap: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
