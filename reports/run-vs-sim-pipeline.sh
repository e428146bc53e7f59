#!/usr/bin/env bash
# Simulated vs measured for pipelined plans on this machine (issue 15, acceptance 2): small mlp,
# bert-base and vit configurations cut into 2 stages of 1 CPU rank each (1F1B, 4 micro-batches),
# as reports/run-vs-sim.sh does for one-stage plans: profile the ranks (hap-profile --quick), make
# the pipelined plan on that profile (hap-synth --pipeline: the cuts weigh each group's FLOP/s),
# profile again timing the plan's stage programs (hap-profile --plan), run it (hap-run, 10 timed
# iterations after 3 warm-ups) and compare the measured mean iteration with the simulation of
# every device on the second profile (--sim-cluster); with --emulate-speed 1,1 and 1,0.5 (the slow
# rank should get the smaller stage). REPEATS (default 3) second profiles and runs per row: the
# table gives medians and the range of the errors, and each rank's busy time in ops (measured /
# simulated, last iteration of the median run). RANKS=4 (the environment) runs the acceptance's
# 4-rank form instead: 2 stages of 2-way SPMD, speeds 1,1,1,1 and 1,1,0.5,0.5; it needs a machine
# with at least 4 cores (on 2, 4 busy ranks measure the time-slicing).
# Usage: [RANKS=2|4] reports/run-vs-sim-pipeline.sh [BUILD_DIR] [REPEATS] [SCHEDULE]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
repeats=${2:-3}
schedule=${3:-1f1b}
bin="$build/bin"
for t in hap-profile hap-synth hap-run; do
  [ -x "$bin/$t" ] || { echo "run-vs-sim-pipeline.sh: build first ($bin/$t missing)" >&2; exit 1; }
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ranks=${RANKS:-2}
case "$ranks" in
2) all_speeds=(1,1 1,0.5) ;;
4) all_speeds=(1,1,1,1 1,1,0.5,0.5) ;;
*) echo "run-vs-sim-pipeline.sh: RANKS is 2 or 4, got '$ranks'" >&2; exit 2 ;;
esac
mpi=(mpirun -np "$ranks")
models=(
  "mlp:layers=8,batch=64,seq=32,hidden=256"
  "bert-base:layers=2,batch=16,seq=32,width=128,heads=4,hidden=512,vocab=512"
  "vit:layers=2,batch=16,image=32,patch=4,width=128,heads=4,hidden=512,classes=10"
)
echo "| speeds | model | stage nodes | measured mean ms | simulated ms | error (median; range) | busy ms per rank (measured / simulated) |"
echo "|---|---|---|---|---|---|---|"
for speeds in "${all_speeds[@]}"; do
  emu=()
  [ "$speeds" = "${all_speeds[0]}" ] || emu=(--emulate-speed "$speeds")
  "${mpi[@]}" "$bin/hap-profile" measure --backend cpu --quick --quiet "${emu[@]}" -o "$tmp/p0.h5"
  for m in "${models[@]}"; do
    "$bin/hap-synth" "$m" -c "$tmp/p0.h5" --pipeline "stages=2,schedule=$schedule,micro_batches=4" \
      -o "$tmp/plan0.json" -q
    for r in $(seq "$repeats"); do
      "${mpi[@]}" "$bin/hap-profile" measure --backend cpu --quick --quiet "${emu[@]}" \
        --plan "$tmp/plan0.json" --model "$m" --cluster "$tmp/p0.h5" -o "$tmp/p.h5"
      "${mpi[@]}" "$bin/hap-run" "$tmp/plan0.json" -m "$m" -c "$tmp/p0.h5" \
        --sim-cluster "$tmp/p.h5" -n 10 -w 3 "${emu[@]}" -f json >"$tmp/r$r.json"
    done
    /usr/bin/python3 - "$speeds" "$m" "$tmp/plan0.json" "$tmp"/r[0-9]*.json <<'PY'
import json, statistics, sys
plan = json.load(open(sys.argv[3]))
cuts = "/".join("%d..%d" % tuple(s["nodes"]) for s in plan["stages"])
runs = sorted((json.load(open(f)) for f in sys.argv[4:]), key=lambda d: d["error"])
mid = runs[len(runs) // 2]
med = lambda k: statistics.median(d[k] for d in runs)
errs = [100 * d["error"] for d in runs]
busy = ", ".join("%.1f / %.1f" % (1e3 * m, 1e3 * s)
                 for m, s in zip(mid["measured_busy_s"], mid["simulated_busy_s"]))
print("| %s | %s | %s | %.3f | %.3f | %+.1f%%; %+.1f..%+.1f%% | %s |" % (
    sys.argv[1], sys.argv[2].split(":")[0], cuts, 1e3 * med("measured_mean_s"),
    1e3 * med("simulated_s"), statistics.median(errs), errs[0], errs[-1], busy))
PY
    rm -f "$tmp"/r[0-9]*.json
  done
done
