#!/usr/bin/env bash
# Sufficient-factor broadcasting in hap-run (issue 20), on 2 ranks, with hap-run --check against
# one device. The plans are hap-synth's data-parallel plan of a 2-layer mlp with both linear
# weights' storage set to sfb (their gradients made from the all-gathered input and output
# gradient instead of all-reduced):
#   even      the batch split 12/12
#   uneven    the batch split 18/6 (the all-gathers' shards differ)
#   fault     HAP_FAULT skip-all-reduce of layers.1.linear.weight (its output gradient's gather
#             skipped): --check fails naming that gradient
#   bias      sfb on a bias: refused in one line
#   policy    sfb under micro_batches=2: refused in one line
# Usage: test_check_sfb.sh HAP_SYNTH HAP_RUN HAP_SIM
set -u
synth=$1 run=$2 sim=$3
judge="$(dirname "$0")/check_passed.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
model="mlp:layers=2,batch=24,seq=8,hidden=32"
"$synth" "$model" -c cpu-2 -s dp-ev -o "$tmp/dp.json" -q || { echo "FAIL: hap-synth"; exit 1; }

# edit DST WHAT: the dp plan with the linear weights sfb, then WHAT (none, uneven, bias, policy)
edit() {
  python3 - "$tmp/dp.json" "$@" <<'PY' || exit 1
import json, sys
src, dst, what = sys.argv[1:4]
p = json.load(open(src))
sfb = 0
for s in p["steps"]:
    if s["kind"] == "source" and s["tensor"].endswith("linear.weight"):
        assert s["storage"] == "replicated", "unexpected plan shape"
        s["storage"] = "sfb"
        sfb += 1
    if what == "bias" and s["kind"] == "source" and s["tensor"] == "layers.0.linear.bias":
        s["storage"] = "sfb"
assert sfb == 2, "expected two linear weights"
if what == "uneven":
    p["segments"][0] = {"ratios": [0.75, 0.25]}
if what == "policy":
    p["policy"] = {"precision": "fp32", "optimizer": "sgd", "zero": 0, "recompute": "none",
                   "micro_batches": 2, "grad_accum": "half"}
json.dump(p, open(dst, "w"), indent=1)
PY
}
for what in even uneven bias policy; do edit "$tmp/$what.json" "$what"; done

fail=0
for case in even uneven; do
  if timeout 300 mpirun --oversubscribe -np 2 "$run" "$tmp/$case.json" --check -n 2 -w 1 \
    -t "$tmp/$case.trace.json" -q >"$tmp/out" 2>&1 && bash "$judge" "$tmp/out" >"$tmp/said"; then
    echo "ok   $case: $(cat "$tmp/said")"
  else
    cat "$tmp/said" 2>/dev/null
    sed 's/^/  /' "$tmp/out" | head -8
    echo "FAIL: $case"
    fail=1
    continue
  fi
  # the run did what the plan says: the gathers and the whole-batch gradient, no all-reduce
  for task in layers.0.linear.weight.grad.sfb_gather_x layers.1.linear.weight.grad.sfb_gather_dy \
    layers.1.linear.weight.grad.sfb; do
    grep -q "\"$task\"" "$tmp/$case.trace.json" || { echo "FAIL: $case: no task $task in the trace"; fail=1; }
  done
  if grep -q '"layers.[01].linear.weight.grad.all_reduce"' "$tmp/$case.trace.json"; then
    echo "FAIL: $case: a linear weight's gradient is still all-reduced"
    fail=1
  fi
done

# the simulator prices the same tasks
if "$sim" --plan "$tmp/even.json" -f json >"$tmp/sim.json" 2>"$tmp/err"; then
  echo "ok   hap-sim simulates the sfb plan"
else
  echo "FAIL: hap-sim --plan: $(head -1 "$tmp/err")"
  fail=1
fi

HAP_FAULT=skip-all-reduce,tensor=layers.1.linear.weight timeout 300 mpirun --oversubscribe -np 2 \
  "$run" "$tmp/even.json" --check -n 1 -w 1 -q >"$tmp/out" 2>&1
rc=$?
if [ "$rc" -eq 1 ] && grep -q "^check: FAILED: gradient of 'layers.1.linear.weight'" "$tmp/out"; then
  echo "ok   fault: $(grep -m1 '^check: FAILED: gradient' "$tmp/out" | cut -c1-100)"
else
  echo "FAIL: fault: exit $rc, expected 1 and a failed gradient of layers.1.linear.weight"
  sed 's/^/  /' "$tmp/out" | head -6
  fail=1
fi

# refused CASE TEXT: hap-run exits non-zero before running, with TEXT on one line
refused() {
  timeout 300 mpirun --oversubscribe -np 2 "$run" "$tmp/$1.json" -n 1 -w 1 -q >"$tmp/out" 2>&1
  local rc=$?
  if [ "$rc" -ne 0 ] && grep -q "$2" "$tmp/out"; then
    echo "ok   $1: $(grep -m1 "$2" "$tmp/out" | cut -c1-140)"
  else
    echo "FAIL: $1: exit $rc, expected a refusal naming: $2"
    sed 's/^/  /' "$tmp/out" | head -4
    fail=1
  fi
}
refused bias "source 'layers.0.linear.bias': storage sfb for a parameter of rank 1, expected a trainable 2-D parameter"
refused policy "storage sfb under this policy, expected fp32 with one micro-batch"
exit "$fail"
