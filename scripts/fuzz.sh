#!/usr/bin/env bash
# Fuzz every reader with libFuzzer under ASan + UBSan: graph, cluster and plan JSON, the model and
# cluster spec strings, the HDF5 profile reader, nccl-tests logs, Chakra traces, hap-report's
# inputs and ONNX models (tests/fuzz/).
# Builds build-fuzz/ with clang (-DHAP_FUZZ=ON -DHAP_SANITIZE=ON, no CUDA), then runs each target
# for SECONDS (default 30) from its checked-in seeds (tests/fuzz/corpus/<target>/; new inputs go
# to a temporary corpus). Prints the executions per target. Exit status: 0 when no target crashed,
# leaked or hung; otherwise 1, and the input that did it is copied to tests/fuzz/crashes/ (check
# it in with the fix, as a regression seed under corpus/<target>/).
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]   (CI: 30 s each; run longer by hand, e.g. 3600)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
secs=${1:-30}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(graph cluster plan specs profile nccl_tests chakra report onnx)
case "$secs" in '' | *[!0-9]*) echo "fuzz.sh: SECONDS must be a whole number, got '$secs'" >&2; exit 2 ;; esac
build=${HAP_FUZZ_BUILD:-build-fuzz}
mkdir -p "$build"
CC=${CC_FUZZ:-clang} cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHAP_SANITIZE=ON \
  -DHAP_FUZZ=ON -DHAP_WITH_CUDA=OFF -DCMAKE_C_COMPILER="${CC_FUZZ:-clang}" >"$build/fuzz-cmake.log" 2>&1 ||
  { cat "$build/fuzz-cmake.log"; echo "fuzz.sh: cmake failed" >&2; exit 1; }
cmake --build "$build" -j "$(nproc)" --target "${targets[@]/#/fuzz_}" >"$build/fuzz-build.log" 2>&1 ||
  { tail -30 "$build/fuzz-build.log"; echo "fuzz.sh: build failed" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:protect_shadow_gap=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
failed=0
for t in "${targets[@]}"; do
  mkdir -p "$work/$t"
  log="$work/$t.log"
  extra_asan="" lsan=""
  if [ "$t" = profile ]; then
    # HDF5 loses memory of its own on corrupt object headers: suppressed by frame name
    # (tests/fuzz/lsan-hdf5.supp), which needs whole stacks
    extra_asan=":fast_unwind_on_malloc=0"
    lsan="suppressions=$PWD/tests/fuzz/lsan-hdf5.supp:print_suppressions=0"
  fi
  ASAN_OPTIONS="$ASAN_OPTIONS$extra_asan" LSAN_OPTIONS="$lsan" \
    "$build/bin/fuzz_$t" -max_total_time="$secs" -timeout=20 -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix="$work/$t-" "$work/$t" "tests/fuzz/corpus/$t" >"$log" 2>&1
  rc=$?
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
  if [ "$rc" -eq 0 ]; then
    printf 'fuzz_%-10s ok      %10s executions in %s s\n' "$t" "$runs" "$secs"
  else
    failed=1
    printf 'fuzz_%-10s FAILED  exit %d after %s executions\n' "$t" "$rc" "$runs"
    grep -E 'ERROR|SUMMARY|runtime error|#[0-9]+ 0x' "$log" | head -20 | sed 's/^/   | /'
    mkdir -p tests/fuzz/crashes
    for a in "$work/$t"-*; do [ -e "$a" ] && cp "$a" tests/fuzz/crashes/ && echo "   input: tests/fuzz/crashes/$(basename "$a")"; done
  fi
done
exit "$failed"
