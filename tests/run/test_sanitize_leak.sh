#!/usr/bin/env bash
# Sanitizer build only: LeakSanitizer in an MPI rank (tests/run/test_sanitize_leak.c). A clean run
# passes under the Open MPI suppressions; a run that loses 100 bytes of its own fails and names
# the line; and without suppressions every frame of Open MPI's own leaks names its module (the
# plugins stay loaded: exec/mpi/keep_loaded_sanitize.c; an unloaded one made each exit ~3 s).
# Usage: test_sanitize_leak.sh TEST_SANITIZE_LEAK MPIRUN SUPPRESSIONS
set -uo pipefail
bin=${1:?test binary} mpirun=${2:?mpirun} supp=${3:?suppressions file}
[ -x "$bin" ] || { echo "FAIL: $bin is missing"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:protect_shadow_gap=0"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*"; sed 's/^/  /' "$tmp/out" | head -n 20; fail=1; }
ranks() { # LSAN_OPTIONS ARGS...: run 2 ranks, output in $tmp/out; returns mpirun's status
  local lsan=$1
  shift
  LSAN_OPTIONS=$lsan timeout 120 "$mpirun" --oversubscribe -np 2 "$bin" "$@" >"$tmp/out" 2>&1
}
with_supp="suppressions=$supp:fast_unwind_on_malloc=0:print_suppressions=0"

if ! ranks "$with_supp"; then
  bad "a clean run failed under the suppressions"
elif ! grep -q "nothing lost" "$tmp/out" || grep -q LeakSanitizer "$tmp/out"; then
  bad "a clean run: expected 'nothing lost' and no LeakSanitizer report"
fi

if ranks "$with_supp" leak; then
  bad "a run that loses 100 bytes passed"
elif ! grep -q "Direct leak of 100 byte" "$tmp/out" ||
  ! grep -q "test_sanitize_leak.c" "$tmp/out"; then
  bad "a run that loses 100 bytes: expected LeakSanitizer's report naming test_sanitize_leak.c"
fi

# No suppressions: Open MPI's own leaks are reported (the run fails), every frame in a module.
if ranks "fast_unwind_on_malloc=0"; then
  bad "without suppressions Open MPI's own leaks were expected (has Open MPI changed?)"
elif ! grep -q "leak of" "$tmp/out"; then
  bad "without suppressions: expected LeakSanitizer's report"
elif grep -q "unknown module" "$tmp/out"; then
  bad "frames in unloaded modules ($(grep -c 'unknown module' "$tmp/out") of them)"
fi

[ "$fail" -eq 0 ] && echo "test_sanitize_leak: 3 cases passed"
exit "$fail"
