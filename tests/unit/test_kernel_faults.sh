#!/usr/bin/env bash
# test_kernel_faults.sh TEST_KERNELS_REF64 KREF_LIST_OPS — ctest unit_kernel_faults: a 0.1 % error
# injected into any single op's backward kernel is caught by a kernel test, for every op.
#
# The ops are the op table's (KREF_LIST_OPS prints HAP_OP_LIST: "<name> <float inputs>"), never a
# hand-typed list. For each op, the Criterion binary filtered to that op's test
# (--filter 'kernels_ref64/<op>', test_kernels_ref64.c) must
#   - pass without the fault, having run exactly one test, and
#   - fail with HAP_FAULT_KERNEL=<op> (kernels.h: that op's backward adds (1 + 1e-3) x its
#     gradient), on a backward check ("backward: d input .. finite differences" in the failure).
# An op with no float input takes no gradient, so no fault can reach it: such ops must be listed
# in EXEMPT below with the reason (an op that has no float input and is not listed fails the run).
# A misspelt HAP_FAULT_KERNEL must fail too, not pass silently.
set -u
bin=${1:?usage: test_kernel_faults.sh TEST_KERNELS_REF64 KREF_LIST_OPS}
list_ops=${2:?usage: test_kernel_faults.sh TEST_KERNELS_REF64 KREF_LIST_OPS}

# "<op>: <reason>" for each op that has no differentiable float input (none today: every op of the
# table has at least one float input, e.g. embedding's weight and the losses' input).
EXEMPT=()

exempt_reason() {
  local e
  for e in "${EXEMPT[@]+"${EXEMPT[@]}"}"; do
    [ "${e%%:*}" = "$1" ] && { printf '%s\n' "${e#*: }"; return 0; }
  done
  return 1
}

ops_out=$("$list_ops") || { echo "FAIL: $list_ops failed"; exit 1; }
mapfile -t lines <<<"$ops_out"
if [ "${#lines[@]}" -eq 0 ] || [ -z "${lines[0]}" ]; then
  echo "FAIL: $list_ops listed no op"
  exit 1
fi

# Run the test of one op alone; sets out (its output) and rc.
run_one() {
  out=$("$bin" --jobs 1 --filter "kernels_ref64/$1" 2>&1)
  rc=$?
}

failed=0 checked=0
for line in "${lines[@]}"; do
  op=${line%% *} n_float=${line##* }
  if reason=$(exempt_reason "$op"); then
    echo "skip $op: $reason"
    continue
  fi
  if [ "$n_float" -eq 0 ]; then
    echo "FAIL $op: no float input, so no fault can reach it: add it to EXEMPT with the reason"
    failed=1
    continue
  fi
  unset HAP_FAULT_KERNEL
  run_one "$op"
  if [ "$rc" -ne 0 ] || ! grep -q 'Tested: 1 | Passing: 1 ' <<<"$out"; then
    echo "FAIL $op: without a fault, kernels_ref64/$op must run one test and pass (rc $rc):"
    printf '%s\n' "$out" | tail -n 20 | sed 's/^/    /'
    failed=1
    continue
  fi
  HAP_FAULT_KERNEL=$op run_one "$op"
  if [ "$rc" -eq 0 ] || ! grep -q 'Tested: 1 | Passing: 0 ' <<<"$out"; then
    echo "FAIL $op: a 0.1 % error in its backward (HAP_FAULT_KERNEL=$op) was not caught (rc $rc):"
    printf '%s\n' "$out" | tail -n 20 | sed 's/^/    /'
    failed=1
    continue
  fi
  if ! grep -q 'backward: d input .* finite differences' <<<"$out"; then
    echo "FAIL $op: with HAP_FAULT_KERNEL=$op the test failed, but not on a backward check:"
    printf '%s\n' "$out" | tail -n 20 | sed 's/^/    /'
    failed=1
    continue
  fi
  first=$(grep -m1 'backward: d input' <<<"$out" | sed 's/^.*backward: //')
  echo "ok   $op: passes clean; with the fault: $first"
  checked=$((checked + 1))
done

# A typo in the variable must not pass silently.
first_op=${lines[0]%% *}
HAP_FAULT_KERNEL=no_such_op run_one "$first_op"
if [ "$rc" -eq 0 ] || ! grep -q "HAP_FAULT_KERNEL: unknown op 'no_such_op'" <<<"$out"; then
  echo "FAIL: HAP_FAULT_KERNEL=no_such_op did not fail with \"unknown op 'no_such_op'\" (rc $rc)"
  printf '%s\n' "$out" | tail -n 20 | sed 's/^/    /'
  failed=1
else
  echo "ok   HAP_FAULT_KERNEL=no_such_op fails: unknown op"
fi

echo "test_kernel_faults: ${checked} of ${#lines[@]} ops: clean pass, 0.1 % backward fault caught"
exit "$failed"
