#!/usr/bin/env bash
# hap-run --backend cuda end to end.
#   check:  a 1-GPU mlp plan under mpirun -np 1 with --check (the loss and every gradient against
#           the CPU reference); exit 77 (ctest: skipped) when there is no usable GPU
#   no-gpu: on a machine without a usable GPU, --backend cuda fails with exit 1 and exactly one
#           error line from hap-run (no crash); exit 77 when there is a GPU
#   policies: --check under every training policy of test_check_policies.sh (bf16 and fp16
#           mixed precision on half GEMMs, Adam, AdamW, recomputation, micro-batches) for the mlp
#           and the fine-grained gpt, on 1 rank and on 2 ranks sharing the GPU; exit 77 without
#           a usable GPU
#   replay: hap-profile --backend cuda --plan times the plan's compute tasks on the GPU (kernel
#           rows in the profile, and an update bandwidth), and hap-run simulates on that profile;
#           exit 77 without a usable GPU
# Usage: test_gpu_run.sh MODE HAP_DEVICES HAP_SYNTH HAP_RUN [HAP_PROFILE (replay)]
set -u
mode=$1 devices=$2 synth=$3 run=$4 profile=${5:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
# the same detection as gpu_hap_devices_list: a listed GPU that passes its kernel self-test.
# Only "no GPU" (hap-devices: exit 1, stderr "no GPU: ...") is a reason to skip; any other
# failure (a CUDA error, a failing self-test) fails this test.
gpu=1
if ! "$devices" --format json --selftest >"$tmp/dev" 2>"$tmp/deverr"; then
  sed 's/^/hap-devices: /' "$tmp/deverr"
  if ! grep -q '^no GPU: ' "$tmp/deverr"; then
    echo "FAIL: hap-devices failed for another reason than having no GPU"
    exit 1
  fi
  gpu=0
fi
# 1 MiB activations: large enough that a host->GPU copy not ordered before its kernels gives
# wrong values (the 16-wide model this test first used passed with that bug)
m="mlp:layers=2,batch=64,seq=16,hidden=256"
c="paper-homo:gpus_per_host=1,hosts=1"
"$synth" "$m" -c "$c" -o "$tmp/plan.json" -q || { echo "hap-synth failed"; exit 1; }
case "$mode" in
check)
  [ "$gpu" -eq 1 ] || { echo "SKIP: no usable GPU"; exit 77; }
  timeout 300 mpirun -np 1 "$run" "$tmp/plan.json" -m "$m" -c "$c" --backend cuda --check -n 1 \
    >"$tmp/out" 2>"$tmp/err"
  rc=$?
  cat "$tmp/out" "$tmp/err"
  [ "$rc" -eq 0 ] || { echo "FAIL: hap-run --backend cuda exited $rc"; exit 1; }
  bash "$(dirname "$0")/check_passed.sh" "$tmp/out" || { echo "FAIL: --check did not pass"; exit 1; }
  grep -q '^staging ' "$tmp/out" || { echo "FAIL: no staging line"; exit 1; }
  echo "test_gpu_run check: passed"
  ;;
policies)
  [ "$gpu" -eq 1 ] || { echo "SKIP: no usable GPU"; exit 77; }
  here=$(dirname "$0") failed=0
  for ranks_cluster in "1 paper-homo:gpus_per_host=1,hosts=1" "2 paper-homo:gpus_per_host=2,hosts=1"; do
    read -r ranks cluster <<<"$ranks_cluster"
    HAP_RUN_ARGS="--backend cuda" bash "$here/test_check_policies.sh" "$synth" "$run" "$ranks" \
      "$cluster" hap "^(mlp|gpt:.*fine)" || failed=$((failed + 1))
  done
  [ "$failed" -eq 0 ] || { echo "FAIL: $failed of 2 rank counts"; exit 1; }
  echo "test_gpu_run policies: passed"
  ;;
replay)
  [ "$gpu" -eq 1 ] || { echo "SKIP: no usable GPU"; exit 77; }
  # --sim-cluster takes a profile of the plan's own devices: a plan made on this GPU's profile
  timeout 300 mpirun -np 1 "$profile" measure --backend cuda --quick -o "$tmp/p0.h5" \
    >"$tmp/out" 2>"$tmp/err" || { cat "$tmp/err"; echo "FAIL: hap-profile --backend cuda"; exit 1; }
  "$synth" "$m" -c "$tmp/p0.h5" -o "$tmp/plan.json" -q || { echo "hap-synth failed"; exit 1; }
  timeout 300 mpirun -np 1 "$profile" measure --backend cuda --quick --plan "$tmp/plan.json" \
    -o "$tmp/p.h5" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  cat "$tmp/out" "$tmp/err"
  [ "$rc" -eq 0 ] || { echo "FAIL: hap-profile --backend cuda --plan exited $rc"; exit 1; }
  "$profile" show "$tmp/p.h5" -f json >"$tmp/show.json" || { echo "FAIL: show"; exit 1; }
  # every compute task of the plan has a row (mlp: linear, sigmoid, loss; forward and backward)
  /usr/bin/env python3 - "$tmp/show.json" <<'PY' || { echo "FAIL: no GPU kernel rows"; exit 1; }
import json, sys
d = json.load(open(sys.argv[1]))["devices"][0]
print("kernel_samples", d["kernel_samples"], "update_bw_Bps", d["update_bw_Bps"])
sys.exit(0 if d["kernel_samples"] >= 6 and d["update_bw_Bps"] > 0 else 1)
PY
  timeout 300 mpirun -np 1 "$run" "$tmp/plan.json" --backend cuda --sim-cluster "$tmp/p.h5" -n 3 \
    >"$tmp/out" 2>"$tmp/err" || { cat "$tmp/err"; echo "FAIL: hap-run on the replayed profile"; exit 1; }
  cat "$tmp/out"
  echo "test_gpu_run replay: passed"
  ;;
no-gpu)
  [ "$gpu" -eq 0 ] || { echo "SKIP: this machine has a GPU (the check test covers it)"; exit 77; }
  timeout 120 mpirun -np 1 "$run" "$tmp/plan.json" -m "$m" -c "$c" --backend cuda -n 1 \
    >"$tmp/out" 2>"$tmp/err"
  rc=$?
  cat "$tmp/err"
  lines=$(grep -c '^hap-run' "$tmp/err")
  [ "$rc" -eq 1 ] || { echo "FAIL: exit $rc, expected 1"; exit 1; }
  [ "$lines" -eq 1 ] || { echo "FAIL: $lines hap-run lines on stderr, expected 1"; exit 1; }
  grep -q '^hap-run: --backend cuda: no CUDA device (' "$tmp/err" ||
    { echo "FAIL: not the no-device message"; exit 1; }
  ! grep -qiE 'segmentation|on signal|core dumped|SIGSEGV|SIGABRT' "$tmp/err" || { echo "FAIL: a crash"; exit 1; }
  [ ! -s "$tmp/out" ] || { echo "FAIL: output on stdout"; cat "$tmp/out"; exit 1; }
  echo "test_gpu_run no-gpu: passed"
  ;;
*) echo "usage: test_gpu_run.sh check|no-gpu HAP_DEVICES HAP_SYNTH HAP_RUN" >&2; exit 2 ;;
esac
