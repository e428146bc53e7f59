#!/usr/bin/env bash
# The accuracy gates of the piecewise alpha-beta fits (profile/fit_rel.h) on held-out message
# sizes, moved out of ctest (live timings: a loaded 2-core box can push one run to 40 %; ctest's
# profile_fit_holdout* keep the deterministic checks and a loose bound). Runs test_fit_holdout
# RUNS times (default 5) per spacing on 2 MPI ranks of this host and gates the median over the
# runs of each run's pooled median error: sparse fit sizes 8 B x 4^i (the quick plan's) <= 15 %,
# dense 8 B x 2^i (the default plan's) <= 10 %. Run it on an otherwise idle machine.
# Usage: reports/bench-fit-holdout.sh BUILD_DIR [RUNS]   (BUILD_DIR holds bin/test_fit_holdout)
# Exit 0 when both gates hold, 1 when one does not, 2 on usage errors.
set -euo pipefail
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 BUILD_DIR [RUNS]" >&2
  exit 2
fi
bin="$1/bin/test_fit_holdout"
runs=${2:-5}
[ -x "$bin" ] || { echo "$0: $bin: not an executable (build the test_fit_holdout target)" >&2; exit 2; }
case $runs in '' | *[!0-9]* | 0) echo "$0: RUNS '$runs', expected a positive integer" >&2; exit 2 ;; esac
mpiexec=$(command -v mpirun || command -v mpiexec) || { echo "$0: no mpirun" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, $(uname -sr)"
echo "commit: $(git -C "$(dirname "$0")" rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
status=0
for spec in "sparse 4 0.15" "dense 2 0.10"; do
  read -r name step gate <<<"$spec"
  medians=()
  for i in $(seq "$runs"); do
    # --max-median 100: each run only reports here; the gate is on the median over the runs
    line=$("$mpiexec" -np 2 "$bin" --reps 30 --iters 5 --step "$step" --max-median 100 |
      grep -E '^(PASS|FAIL): piecewise') || { echo "$name run $i: test_fit_holdout failed"; exit 1; }
    case $line in FAIL*) echo "$name run $i: $line"; exit 1 ;; esac
    m=$(sed -n 's/.*median error \([0-9.]*\)%.*/\1/p' <<<"$line")
    echo "$name (8 B x $step^i) run $i: median error $m %"
    medians+=("$m")
  done
  med=$(printf '%s\n' "${medians[@]}" | sort -g | awk '{v[NR] = $1} END {
    print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}')
  if awk -v m="$med" -v g="$gate" 'BEGIN { exit !(m <= 100 * g) }'; then
    verdict=PASS
  else
    verdict=FAIL
    status=1
  fi
  echo "$verdict: $name: median over $runs runs $med % (gate $(awk -v g="$gate" 'BEGIN { print 100 * g }') %)"
done
exit $status
