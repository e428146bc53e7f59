#!/usr/bin/env bash
# The mpi backend's collectives, whole and in pieces (tests/run/test_comm_mpi.c), also under
# glibc's own allocator settings (HAP_MALLOC=default), and a malformed HAP_MPI_PIECE_BYTES or
# HAP_MALLOC refused with one line naming the variable.
# Usage: test_comm_mpi.sh TEST_COMM_MPI MPIRUN
set -uo pipefail
bin=${1:?test binary}
mpirun=${2:?mpirun}
[ -x "$bin" ] || { echo "FAIL: $bin is missing"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fail=0
run() { # NAME PIECE_BYTES NP [ARGS]: run the checks, expect exit 0
  local name=$1 pieces=$2 np=$3 out
  shift 3
  if [ -n "$pieces" ]; then
    out=$(HAP_MPI_PIECE_BYTES=$pieces timeout 120 "$mpirun" --oversubscribe -np "$np" "$bin" "$@" 2>&1)
  else
    out=$(timeout 120 "$mpirun" --oversubscribe -np "$np" "$bin" "$@" 2>&1)
  fi
  local rc=$?
  echo "$out" | tail -n 20
  if [ "$rc" -ne 0 ] || ! grep -q "^test_comm_mpi: $np ranks, .*: ok" <<<"$out"; then
    echo "FAIL: $name (exit $rc)"
    fail=1
  fi
}
run "default pieces, 2 ranks" "" 2
run "40-byte pieces, 2 ranks" 40 2 --max-elems 1000
run "44-byte pieces, 3 ranks" 44 3 --max-elems 1000
run "4 KiB pieces, 3 ranks" 4100 3
run "no pieces, 3 ranks" 0 3

out=$(HAP_MPI_PIECE_BYTES=12abc timeout 60 "$mpirun" -np 1 "$bin" 2>&1)
rc=$?
echo "$out" | head -n 3
if [ "$rc" -eq 0 ] || ! grep -q "HAP_MPI_PIECE_BYTES='12abc': expected a byte count >= 0" <<<"$out"; then
  echo "FAIL: a malformed HAP_MPI_PIECE_BYTES was not refused with its message (exit $rc)"
  fail=1
fi
# glibc's own allocator settings (HAP_MALLOC=default) run the same checks; any other value is one
# line naming the variable
HAP_MALLOC=default run "glibc's allocator settings, 2 ranks" "" 2 --max-elems 100000
out=$(HAP_MALLOC=defualt timeout 60 "$mpirun" -np 1 "$bin" 2>&1)
rc=$?
echo "$out" | head -n 3
if [ "$rc" -eq 0 ] || ! grep -q "HAP_MALLOC='defualt': expected 'default'" <<<"$out"; then
  echo "FAIL: a malformed HAP_MALLOC was not refused with its message (exit $rc)"
  fail=1
fi
[ "$fail" -eq 0 ] && echo "test_comm_mpi.sh: all passed"
exit "$fail"
