#!/usr/bin/env bash
# hap-run --check under every training policy issue 14 asks for (bf16 mixed precision, fp16 with
# loss scaling, Adam, AdamW, full and selective recomputation, 4 micro-batches, and all of bf16,
# Adam, full recomputation and 4 micro-batches at once) on every zoo model
# of test_check.sh (small configurations; MODELS narrows them), each compared against a
# single-device run under the same policy. The tolerances --check must print for each policy are
# stated here (run/check.h derives them from the precision and the optimizer) and the printed
# errors are judged against them (check_passed.sh). fp16 runs 16 iterations: its loss scale starts
# at 2^16 and the first steps overflow and are skipped, and --check compares on until two steps
# were taken.
# ZeRO stages 1, 2 and 3 (optimizer state, then gradients, then weights sharded) run only when
# named.
# Usage: test_check_policies.sh HAP_SYNTH HAP_RUN RANKS CLUSTER [STRATEGY [MODELS [POLICY...]]]
# (POLICY: only the policies named, e.g. precision=bf16; default all but ZeRO's; STRATEGY may list
# several, e.g. "hap dp-cp")
set -u
synth=$1 run=$2 ranks=$3 cluster=$4
strategy=${5:-hap}
only=${6:-} # empty: test_check.sh's default models
shift 6 2>/dev/null || shift $#
wanted=("$@")
here=$(dirname "$0")
# policy | loss, gradient, parameter tolerances (relative)
policies=(
  "precision=bf16|2e-02 1e-01 1e-01"
  "precision=fp16|1e-03 5e-02 5e-02"
  "optimizer=adam|1e-04 1e-04 1e-04"
  "optimizer=adamw|1e-04 1e-04 1e-04"
  "recompute=full|1e-04 1e-04 1e-04"
  "recompute=selective|1e-04 1e-04 1e-04"
  "micro_batches=4|1e-04 1e-04 1e-04"
  "precision=bf16,optimizer=adam,recompute=full,micro_batches=4|2e-02 1e-01 1e-01"
  "optimizer=adam,recompute=full,micro_batches=4|1e-04 1e-04 1e-04"
  "optimizer=momentum,zero=1|1e-04 1e-04 1e-04"
  "precision=bf16,optimizer=adam,zero=2,micro_batches=4|2e-02 1e-01 1e-01"
  "optimizer=adamw,zero=3,recompute=full|1e-04 1e-04 1e-04"
)
failed=0
ran=0
for entry in "${policies[@]}"; do
  policy=${entry%%|*} tolerances=${entry#*|}
  if [ ${#wanted[@]} -gt 0 ] && [[ " ${wanted[*]} " != *" $policy "* ]]; then continue; fi
  # ZeRO's policies run only when named (ctest run_check_zero, on plans that replicate parameters)
  if [ ${#wanted[@]} -eq 0 ] && [[ $policy == *zero=* ]]; then continue; fi
  iters=1
  [[ $policy == *fp16* ]] && iters=15
  ran=$((ran + 1))
  HAP_CHECK_ITERS=$iters bash "$here/test_check.sh" "$synth" "$run" "$ranks" "$cluster" "$strategy" \
    "$only" "$policy" "$tolerances" || failed=$((failed + 1))
done
echo "test_check_policies ($ranks ranks, $cluster, $strategy): $((ran - failed)) of $ran policies passed"
[ "$ran" -gt 0 ] || { echo "test_check_policies: no policy matched ${wanted[*]}"; exit 1; }
[ "$failed" -eq 0 ]
