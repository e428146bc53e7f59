#!/usr/bin/env bash
# The checks that need an NVIDIA GPU, in one run: the gpu-labelled tests, a CUDA profile of the
# machine, the measured loop (profile -> synth -> replay the plan's kernels -> hap-run with
# --check and a trace) on the GPU, and compute-sanitizer's memcheck. Every step has a time limit; a failing step is reported and the
# next one still runs. Exit status: the number of failed steps (0: all passed).
#
# Usage: scripts/gpu-checks.sh BIN_DIR WORK_DIR
#   BIN_DIR   a CUDA build's bin/ (hap-run, hap-profile, hap-synth, hap-sim, hap-devices,
#             test_gpu_smoke, test_gpu_backend)
#   WORK_DIR  where the logs (STEP.log), profiles (*.h5), plans and traces go
# Needs mpirun (Open MPI) on PATH. Prints one line per step: PASS/FAIL, exit status, seconds.
set -u
bin=$(cd "$1" && pwd) work=$2
here=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$work" && cd "$work" || exit 100
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
failed=0

# step NAME LIMIT_S CMD...: run CMD with a time limit, its output in NAME.log
step() {
  local name=$1 limit=$2
  shift 2
  local t0 t1 rc
  t0=$(date +%s.%N)
  timeout "$limit" "$@" >"$name.log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  local verdict=PASS
  if [ "$rc" -ne 0 ]; then
    # a skip (77: no usable GPU) defeats the purpose here, so it counts as a failed step too
    verdict=FAIL
    [ "$rc" -eq 77 ] && verdict=SKIP
    failed=$((failed + 1))
  fi
  printf '%s  %-20s rc=%-3d %7.1f s\n' "$verdict" "$name" "$rc" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')"
  [ "$verdict" = PASS ] || tail -n 15 "$name.log" | sed 's/^/      | /'
}

# 1. the suite's gpu tests (the same commands ctest -L gpu runs on one GPU)
step devices 30 "$bin/hap-devices" --format json --selftest
step gpu_smoke 30 "$bin/test_gpu_smoke"
step gpu_backend 60 "$bin/test_gpu_backend"
step gpu_run_check 90 bash "$here/tests/run/test_gpu_run.sh" check \
  "$bin/hap-devices" "$bin/hap-synth" "$bin/hap-run"
step gpu_run_replay 120 bash "$here/tests/run/test_gpu_run.sh" replay \
  "$bin/hap-devices" "$bin/hap-synth" "$bin/hap-run" "$bin/hap-profile"
step gpu_run_policies 300 bash "$here/tests/run/test_gpu_run.sh" policies \
  "$bin/hap-devices" "$bin/hap-synth" "$bin/hap-run"

# 2. a profile of this machine's GPU: the quick plan, then the default one
step profile_quick 60 mpirun -np 1 "$bin/hap-profile" measure --backend cuda --quick -o gpu-quick.h5
step profile_quick_show 30 "$bin/hap-profile" show gpu-quick.h5
step profile 120 mpirun -np 1 "$bin/hap-profile" measure --backend cuda -o gpu.h5
prof=gpu.h5
[ -f gpu.h5 ] || prof=gpu-quick.h5
step profile_show 30 "$bin/hap-profile" show "$prof"

# 3. the measured loop on the GPU: a plan for it, its compute tasks timed on the GPU in a replay
#    of its task list (the kernels hap-run --backend cuda runs), then hap-run against the
#    simulator: small ones with --check, then a larger one timed. Only mlp and the fine-grained
#    gpt run on --backend cuda today (the other zoo models use ops without a CUDA kernel). The
#    default profile, not --quick: the quick GEMM grid ends at 1024 and prices larger GEMMs far off.
small='mlp:layers=2,batch=64,seq=16,hidden=256'
step synth_small 60 "$bin/hap-synth" "$small" -c "$prof" -o small.json
step run_small_check 60 mpirun -np 1 "$bin/hap-run" small.json --backend cuda --check -n 3 \
  --sim-cluster "$prof" --trace small-trace.json
gpt='gpt:layers=2,batch=8,seq=64,width=256,heads=4,vocab=512,granularity=fine,dropout=0.1'
step synth_gpt 60 "$bin/hap-synth" "$gpt" -c "$prof" -o gpt.json
step profile_plan_gpt 90 mpirun -np 1 "$bin/hap-profile" measure --backend cuda --plan gpt.json \
  -o gpt.h5
step run_gpt_check 120 mpirun -np 1 "$bin/hap-run" gpt.json --backend cuda --check -n 3 \
  --sim-cluster gpt.h5
step synth_gpt_bf16 60 "$bin/hap-synth" "$gpt" -c "$prof" --policy precision=bf16 -o gpt-bf16.json
step profile_plan_gpt_bf16 90 mpirun -np 1 "$bin/hap-profile" measure --backend cuda \
  --plan gpt-bf16.json -o gpt-bf16.h5
step run_gpt_bf16_check 120 mpirun -np 1 "$bin/hap-run" gpt-bf16.json --backend cuda --check \
  -n 3 --sim-cluster gpt-bf16.h5
big='mlp:layers=4,batch=64,seq=128,hidden=1024'
step synth_big 60 "$bin/hap-synth" "$big" -c "$prof" -o big.json
step profile_plan 90 mpirun -np 1 "$bin/hap-profile" measure --backend cuda --plan big.json \
  -o big.h5
step run_big 90 mpirun -np 1 "$bin/hap-run" big.json --backend cuda -n 20 \
  --sim-cluster big.h5 --trace big-trace.json
# the same model in bf16 mixed precision: half GEMMs (float32 accumulation) on the tensor cores
step synth_big_bf16 60 "$bin/hap-synth" "$big" -c "$prof" --policy precision=bf16 -o big-bf16.json
step profile_plan_bf16 90 mpirun -np 1 "$bin/hap-profile" measure --backend cuda \
  --plan big-bf16.json -o big-bf16.h5
step run_big_bf16 90 mpirun -np 1 "$bin/hap-run" big-bf16.json --backend cuda -n 20 \
  --sim-cluster big-bf16.h5

# 4. the CUDA code under compute-sanitizer's memcheck (out-of-bounds and misaligned accesses,
#    leaks, API errors), where the toolkit has it
if command -v compute-sanitizer >/dev/null; then
  cs="compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9"
  # NCCL's init probes which kernel images it has (cudaFuncGetAttributes -> error 209 on purpose);
  # API errors are left out there, memory errors and leaks still count
  step memcheck_backend 120 $cs --report-api-errors no "$bin/test_gpu_backend"
  step memcheck_run 120 mpirun -np 1 $cs "$bin/hap-run" small.json --backend cuda --check -n 2
fi

echo "failed steps: $failed"
exit "$failed"
