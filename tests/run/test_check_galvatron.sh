#!/usr/bin/env bash
# hap-run --check on the galvatron strategy's plans (pipe/galvatron.h; issue 16) on 4 ranks:
#   zoo      every zoo model's small configuration (test_check.sh): flat plans and pipelines
#   sdp      Galvatron's per-layer choice under a memory limit: some layers' parameters stored
#            ZeRO-3 style (storage zero), the others replicated, in one flat program (pp=1, 30
#            MiB) and in a 2-stage pipeline (pp=2, 16 MiB); the plan must hold both storages and
#            pass --check
# Usage: test_check_galvatron.sh HAP_SYNTH HAP_RUN [MODELS]
set -u
synth=$1 run=$2 only=${3:-}
here=$(dirname "$0")
cluster=paper-hetero:gpus_per_host=1,hosts=2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
fail=0

bash "$here/test_check.sh" "$synth" "$run" 4 "$cluster" galvatron ${only:+"$only"} || fail=1

model="mlp:layers=4,batch=8,seq=8,hidden=1024"
for case in 1:30M 2:16M; do
  # PP stages under LIMIT per device: the 4 MiB weights of some layers must be sharded to fit
  pp=${case%:*} limit=${case#*:}
  if ! "$synth" "$model" -c "$cluster" -s "galvatron:pp=$pp" -m "$limit" -o "$tmp/plan.json" \
    >"$tmp/out" 2>"$tmp/err"; then
    echo "FAIL sdp pp=$pp: hap-synth: $(head -1 "$tmp/err")"
    fail=1
    continue
  fi
  zero=$(grep -c '"storage": "zero"' "$tmp/plan.json")
  replicated=$(grep -c '"storage": "replicated"' "$tmp/plan.json")
  layers=$(grep '^layers' "$tmp/out" | cut -c13- | sed 's/ (SDP:.*//')
  if [ "$zero" -eq 0 ] || [ "$replicated" -eq 0 ]; then
    echo "FAIL sdp pp=$pp: expected some layers sharded and some not under $limit, got $zero" \
      "zero and $replicated replicated parameters ($layers)"
    fail=1
    continue
  fi
  if timeout 600 mpirun --oversubscribe -np 4 "$run" "$tmp/plan.json" -m "$model" -c "$cluster" \
    --check -n 1 -w 1 -q >"$tmp/run" 2>&1 && bash "$here/check_passed.sh" "$tmp/run" \
    1e-04 1e-04 1e-04 >"$tmp/said"; then
    echo "ok   sdp pp=$pp: $zero zero, $replicated replicated ($layers): $(cat "$tmp/said")"
  else
    echo "FAIL sdp pp=$pp: --check"
    sed 's/^/  /' "$tmp/run" | head -8
    fail=1
  fi
done
exit "$fail"
