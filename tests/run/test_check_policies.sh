#!/usr/bin/env bash
# hap-run --check under every training policy issue 14 asks for (bf16 mixed precision, fp16 with
# loss scaling, Adam, AdamW, full and selective recomputation, 4 micro-batches) on every zoo model
# of test_check.sh (small configurations; MODELS narrows them), each compared against a
# single-device run under the same policy. The tolerances --check must print for each policy are
# stated here (run/check.h derives them from the precision and the optimizer) and the printed
# errors are judged against them (check_passed.sh).
# Usage: test_check_policies.sh HAP_SYNTH HAP_RUN RANKS CLUSTER [STRATEGY [MODELS]]
set -u
synth=$1 run=$2 ranks=$3 cluster=$4
strategy=${5:-hap}
only=${6:-.}
here=$(dirname "$0")
# policy | loss, gradient, parameter tolerances (relative)
policies=(
  "precision=bf16|@BF16@"
  "precision=fp16|@FP16@"
  "optimizer=adam|@ADAM@"
  "optimizer=adamw|@ADAM@"
  "recompute=full|1e-04 1e-04 1e-04"
  "recompute=selective|1e-04 1e-04 1e-04"
  "micro_batches=4|1e-04 1e-04 1e-04"
)
failed=0
for entry in "${policies[@]}"; do
  policy=${entry%%|*} tolerances=${entry#*|}
  bash "$here/test_check.sh" "$synth" "$run" "$ranks" "$cluster" "$strategy" "$only" "$policy" \
    "$tolerances" || failed=$((failed + 1))
done
echo "test_check_policies ($ranks ranks, $cluster, $strategy): $((${#policies[@]} - failed)) of ${#policies[@]} policies passed"
[ "$failed" -eq 0 ]
