#!/usr/bin/env bash
# hap-run --check on every zoo model (small configurations) under hap, dp-ev, dp-cp and
# megatron-tp plans (or the STRATEGIES given): after two iterations the loss, every rank's copy of
# every parameter gradient and every updated parameter equal a single-device run's (run/check.h),
# judged by the printed errors (check_passed.sh). MODELS (optional): only the zoo specs matching
# this extended regex (default: all but the full-size vgg19, "vgg19:batch=4" with 140 M
# parameters, which only a regex naming it runs; its narrow twin has every one of its ops). POLICY (optional): the training policy of every plan (hap-synth --policy,
# e.g. optimizer=adam,micro_batches=4), judged against TOLERANCES "LOSS GRADIENT PARAMETER" (the
# tolerances --check must print for that policy; default 1e-04 each, fp32 SGD's). HAP_CHECK_ITERS:
# timed iterations after the one warm-up (default 1; fp16 needs more, its first steps overflow).
# HAP_CHECK_MODEL_SPECS: model specs (space-separated) to use instead of the list below.
# HAP_RUN_ARGS: more hap-run arguments (space-separated), e.g. "--backend cuda".
# Usage: test_check.sh HAP_SYNTH HAP_RUN RANKS CLUSTER [STRATEGIES [MODELS [POLICY [TOLERANCES]]]]
set -u
synth=$1 run=$2 ranks=$3 cluster=$4
strategies=${5:-hap dp-ev dp-cp megatron-tp}
only=${6:-^(mlp|bert|vit|gpt|vgg19:.*width)}
policy=${7:-}
tolerances=${8:-1e-04 1e-04 1e-04}
policy_args=()
[ -n "$policy" ] && policy_args=(--policy "$policy")
judge="$(dirname "$0")/check_passed.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
mpi=(mpirun --oversubscribe -np "$ranks")
models=(
  "mlp:layers=2,batch=24,seq=8,hidden=32"
  "bert-base:layers=1,batch=8,seq=8,width=16,heads=2,vocab=32"
  "vit:layers=1,batch=8,image=8,patch=4,width=16,heads=2,classes=10"
  "bert-moe:layers=2,batch=8,seq=8,width=16,heads=2,vocab=32,experts=4"
  "gpt:layers=1,batch=8,seq=8,width=16,heads=2,vocab=32"
  "gpt:layers=1,batch=8,seq=8,width=16,heads=2,vocab=32,granularity=fine"
  "vgg19:batch=4,width=16,hidden=256"
  "vgg19:batch=4"
)
if [ -n "${HAP_CHECK_MODEL_SPECS:-}" ]; then
  read -ra models <<<"$HAP_CHECK_MODEL_SPECS"
fi
pass=0 fail=0
for m in "${models[@]}"; do
  [[ $m =~ $only ]] || continue
  for s in $strategies; do
    if ! "$synth" "$m" -c "$cluster" -s "$s" "${policy_args[@]}" -o "$tmp/plan.json" -q 2>"$tmp/err"; then
      echo "FAIL $m $s: hap-synth: $(cat "$tmp/err")"
      fail=$((fail + 1))
      continue
    fi
    # shellcheck disable=SC2086 # HAP_RUN_ARGS: words on purpose
    if timeout 600 "${mpi[@]}" "$run" "$tmp/plan.json" -m "$m" -c "$cluster" --check \
      -n "${HAP_CHECK_ITERS:-1}" -w 1 -q ${HAP_RUN_ARGS:-} \
      >"$tmp/out" 2>&1 && bash "$judge" "$tmp/out" $tolerances >"$tmp/said"; then
      pass=$((pass + 1))
      echo "ok   $m $s: $(cat "$tmp/said")"
    else
      cat "$tmp/said" 2>/dev/null
      fail=$((fail + 1))
      echo "FAIL $m $s"
      sed 's/^/  /' "$tmp/out" | head -8
    fi
  done
done
echo "test_check ($ranks ranks, $cluster${policy:+, policy $policy}): $pass passed, $fail failed"
[ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]
