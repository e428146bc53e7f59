#!/usr/bin/env bash
# Configure, build and run the whole test suite, as CI does (the README's test command).
#
#   scripts/test.sh                normal build in build/, warnings are errors (-DHAP_WERROR=ON)
#   scripts/test.sh --sanitize     AddressSanitizer + UBSan build in build-asan/ (-DHAP_SANITIZE=ON)
#
# Options: --build-dir DIR (override the build directory), -j N (parallel jobs, default $HAP_JOBS
# or the number of cores); arguments after `--` go to ctest (e.g. `-- -L gpu`, `-- -R unit_graph`).
# ctest runs verbosely so every Criterion "[====] Synthesis:" line is in the log; they are
# repeated in a summary at the end. Exits non-zero when configuring, building or any test fails.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

sanitize=0
build_dir=""
jobs="${HAP_JOBS:-$(nproc 2>/dev/null || echo 2)}"
ctest_extra=()
while [ $# -gt 0 ]; do
  case "$1" in
  --sanitize) sanitize=1 ;;
  --build-dir) build_dir="${2:?--build-dir needs a directory}"; shift ;;
  --build-dir=*) build_dir="${1#*=}" ;;
  -j) jobs="${2:?-j needs a number}"; shift ;;
  -j*) jobs="${1#-j}" ;;
  -h | --help) sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
  --) shift; ctest_extra=("$@"); break ;;
  *) echo "test.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
  shift
done

# CMake looks for nvcc on PATH only: point it at the default toolkit when PATH lacks it, so the
# CUDA code is compiled wherever the toolkit is installed (it only matters on the first configure).
if [ -z "${CUDACXX:-}" ] && ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
  echo "test.sh: nvcc is not on PATH; using CUDACXX=$CUDACXX"
fi

cmake_args=(-DHAP_WERROR=ON)
if [ "$sanitize" -eq 1 ]; then
  build_dir="${build_dir:-build-asan}"
  cmake_args+=(-DHAP_SANITIZE=ON)
  # Without a GPU the sanitized CUDA code cannot run: skip compiling it again (the plain build
  # compiles it, warnings as errors), which saves minutes of nvcc here.
  if [ ! -e /dev/nvidia0 ] && ! nvidia-smi -L >/dev/null 2>&1; then
    cmake_args+=(-DHAP_WITH_CUDA=OFF)
    echo "test.sh: no GPU here: the sanitize build leaves the CUDA code out (-DHAP_WITH_CUDA=OFF)"
  fi
  # protect_shadow_gap=0: the CUDA driver maps memory in ASan's shadow gap (only matters with a GPU).
  export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:protect_shadow_gap=0"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
  echo "test.sh: sanitize mode, ASAN_OPTIONS=$ASAN_OPTIONS UBSAN_OPTIONS=$UBSAN_OPTIONS"
else
  build_dir="${build_dir:-build}"
fi

echo "test.sh: configure $build_dir (${cmake_args[*]})"
cmake -S . -B "$build_dir" "${cmake_args[@]}"
echo "test.sh: build $build_dir (-j$jobs)"
cmake --build "$build_dir" -j "$jobs"

log="$build_dir/ctest.log"
echo "test.sh: ctest in $build_dir (-j$jobs), log in $log"
rc=0
ctest --test-dir "$build_dir" --output-on-failure -V -j "$jobs" "${ctest_extra[@]}" 2>&1 |
  tee "$log" || rc=$?

echo
echo "test.sh: Criterion summaries ($build_dir):"
grep -E '\[====\] Synthesis' "$log" || echo "  (none)"
sed -n '/^[0-9]*% tests passed/,$p' "$log" | grep -v '^Errors while running CTest' || true
exit "$rc"
