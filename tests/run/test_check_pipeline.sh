#!/usr/bin/env bash
# hap-run --check on pipelined plans (issue 15, acceptance 2): on 4 ranks, 2 stages x 2-way SPMD
# and 4 stages x 1, GPipe and 1F1B, 4 micro-batches, for the small mlp, bert-base, vit and gpt
# (GPT's tied embedding: its gradients summed over the first and last stage); then interleaving,
# megatron-tp stage programs (boundaries reduce-scattered and all-gathered), the training policies
# (bf16 + Adam, full recomputation, fp16's loss scaling) — each judged by its printed errors
# (check_passed.sh). Then the check must fail: a skipped tied-gradient sum, a gradient error on a
# later stage's rank, a NaN loss on the last stage.
# Usage: test_check_pipeline.sh HAP_SYNTH HAP_RUN [MODELS]
set -u
synth=$1 run=$2
only=${3:-^(mlp|bert|vit|gpt)}
judge="$(dirname "$0")/check_passed.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
mpi=(mpirun --oversubscribe -np 4)
cluster="paper-homo:gpus_per_host=2,hosts=2"
pass=0 fail=0
# run NAME MODEL "SYNTH ARGS" PIPELINE [ITERATIONS [TOLERANCES]]: synthesise, run, judge
run() {
  local name=$1 m=$2 args=$3 spec=$4 iters=${5:-1} tol=${6:-1e-04 1e-04 1e-04}
  # shellcheck disable=SC2086 # args is a list of options
  if ! "$synth" "$m" -c "$cluster" $args --pipeline "$spec" -o "$tmp/plan.json" -q 2>"$tmp/err"; then
    echo "FAIL $name: hap-synth: $(cat "$tmp/err")"
    fail=$((fail + 1))
    return
  fi
  # shellcheck disable=SC2086 # tol is three numbers
  if timeout 600 "${mpi[@]}" "$run" "$tmp/plan.json" -m "$m" -c "$cluster" --check -n "$iters" \
    -w 1 -q >"$tmp/out" 2>&1 && bash "$judge" "$tmp/out" $tol >"$tmp/said"; then
    pass=$((pass + 1))
    echo "ok   $name: $(cat "$tmp/said")"
  else
    cat "$tmp/said" 2>/dev/null
    fail=$((fail + 1))
    echo "FAIL $name"
    sed 's/^/  /' "$tmp/out" | head -8
  fi
}
# must_fail NAME FAULT PATTERN: the last plan under HAP_FAULT fails the check, naming PATTERN
must_fail() {
  local name=$1 fault=$2 pattern=$3
  HAP_FAULT=$fault timeout 600 "${mpi[@]}" "$run" "$tmp/plan.json" -m "$gpt" -c "$cluster" \
    --check -n 1 -w 1 -q >"$tmp/out" 2>&1
  local rc=$?
  if [ "$rc" -eq 1 ] && grep -q "^check: FAILED: .*$pattern" "$tmp/out"; then
    pass=$((pass + 1))
    echo "ok   $name: $(grep -m1 '^check: FAILED' "$tmp/out" | cut -c1-110)"
  else
    fail=$((fail + 1))
    echo "FAIL $name: exit $rc, expected 1 and a 'check: FAILED' line naming $pattern"
    sed 's/^/  /' "$tmp/out" | head -8
  fi
}
models=(
  "mlp:layers=2,batch=24,seq=8,hidden=32"
  "bert-base:layers=1,batch=8,seq=8,width=16,heads=2,vocab=32"
  "vit:layers=1,batch=8,image=8,patch=4,width=16,heads=2,classes=10"
  "gpt:layers=1,batch=8,seq=8,width=16,heads=2,vocab=32"
)
for m in "${models[@]}"; do
  [[ $m =~ $only ]] || continue
  for schedule in gpipe 1f1b; do
    run "$m 2x2 $schedule" "$m" "" "stages=2,schedule=$schedule,micro_batches=4"
    run "$m 4x1 $schedule" "$m" "" "stages=4,schedule=$schedule,micro_batches=4"
  done
done
gpt="gpt:layers=2,batch=8,seq=8,width=16,heads=2,vocab=32"
if [[ $gpt =~ $only ]]; then
  run "gpt interleaved" "$gpt" "" "stages=2,schedule=interleaved,chunks=2,micro_batches=4"
  run "gpt megatron-tp stages" "$gpt" "-s megatron-tp" "stages=2,micro_batches=4"
  run "gpt bf16 adam" "$gpt" "--policy precision=bf16,optimizer=adam" "stages=2,micro_batches=4" \
    1 "2e-02 1e-01 1e-01"
  run "gpt recompute=full" "$gpt" "-s megatron-tp --policy recompute=full" "stages=2,micro_batches=4"
  # fp16: the first steps overflow at the initial loss scale and are skipped on every stage
  run "gpt fp16" "$gpt" "--policy precision=fp16" "stages=4,micro_batches=4" 7 "1e-03 5e-02 5e-02"
  "$synth" "$gpt" -c "$cluster" --pipeline stages=2,micro_batches=4 -o "$tmp/plan.json" -q
  must_fail "skip-tied-sum" skip-tied-sum "wte.weight"
  must_fail "grad-error on stage 1" "grad-error,tensor=ln_f.weight,rank=3" "ln_f.weight' on rank 3"
  must_fail "nan-loss on the last stage" "nan-loss,rank=2" "loss on rank 2"
fi
echo "test_check_pipeline (4 ranks, $cluster): $pass passed, $fail failed"
[ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]
