#!/usr/bin/env bash
# Simulated vs measured on this machine (the execution issue's acceptance 2): for small mlp,
# bert-base, vit and vgg19 configurations on 2 CPU ranks, profile the ranks (hap-profile --quick),
# make a plan on that profile, profile again timing that plan's exact local shapes (hap-profile
# --plan), run the plan (hap-run, 10 timed iterations after 3 warm-ups) and compare the measured
# mean iteration with the one simulated on the second profile (--sim-cluster); then the same with
# --emulate-speed 1,0.5, where the hap plan should also be measured faster than dp-ev. Prints a
# markdown table with two errors per row: of the mean iteration and of the median (p50) one, the
# latter blind to the odd iteration a busy host stretches. The second profile and the run are
# repeated REPEATS times per row (default 5): the table gives the medians and the range of the
# errors (on a shared host two identical runs back to back differ by up to 5-10 %: one rank's core
# runs slower for a while, now one, now the other). The kernel timing: how the second profile times the plan's kernels, replay
# (the default: in a replay of the plan's task list) or loop (each shape alone in a hot loop).
# POLICY (optional): a training policy for every plan, as hap-synth --policy takes it (e.g.
# optimizer=adam,recompute=full,micro_batches=4 or precision=bf16); hap-profile --plan and hap-run
# run the plans under it. MODELS (optional): the models to run, comma-separated (default
# mlp,bert-base,vit,vgg19). HAP_RUN_ARGS (environment, optional): more hap-run arguments for every
# run, e.g. "--overlap 4" (issue 19: gradient buckets that overlap the backward pass).
# HAP_PROFILE_ARGS (environment, optional): more hap-profile measure arguments for both profiles,
# e.g. "--coll-caches cold" (collectives timed with the caches an iteration leaves them).
# Usage: reports/run-vs-sim.sh [BUILD_DIR] [replay|loop] [REPEATS] [POLICY] [MODELS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
timing=${2:-replay}
repeats=${3:-5}
policy=${4:-}
only=${5:-}
pol=()
[ -z "$policy" ] || pol=(--policy "$policy")
bin="$build/bin"
for t in hap-profile hap-synth hap-run; do
  [ -x "$bin/$t" ] || { echo "run-vs-sim.sh: build first ($bin/$t missing)" >&2; exit 1; }
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mpi=(mpirun -np 2)
models=(
  "mlp:layers=4,batch=64,seq=32,hidden=256"
  "bert-base:layers=2,batch=16,seq=32,width=128,heads=4,hidden=512,vocab=512"
  "vit:layers=2,batch=16,image=32,patch=4,width=128,heads=4,hidden=512,classes=10"
  "vgg19:batch=4"
)
echo "| speeds | model | strategy | measured mean ms | measured p50 ms | simulated ms |" \
  "error of the mean (median; range) | error of the p50 (median; range) | median task error |"
echo "|---|---|---|---|---|---|---|---|---|"
for speeds in 1,1 1,0.5; do
  emu=()
  [ "$speeds" = 1,1 ] || emu=(--emulate-speed "$speeds")
  # shellcheck disable=SC2086 # HAP_PROFILE_ARGS: words on purpose
  "${mpi[@]}" "$bin/hap-profile" measure --backend cpu --quick --quiet "${emu[@]}" \
    ${HAP_PROFILE_ARGS:-} -o "$tmp/p0.h5"
  for m in "${models[@]}"; do
    [ -z "$only" ] || [[ ",$only," == *",${m%%:*},"* ]] || continue
    for s in hap dp-ev; do
      "$bin/hap-synth" "$m" -c "$tmp/p0.h5" -s "$s" "${pol[@]}" -o "$tmp/plan0.json" -q
      for r in $(seq "$repeats"); do
        # shellcheck disable=SC2086 # HAP_PROFILE_ARGS: words on purpose
        "${mpi[@]}" "$bin/hap-profile" measure --backend cpu --quick --quiet "${emu[@]}" \
          ${HAP_PROFILE_ARGS:-} --plan "$tmp/plan0.json" --model "$m" --cluster "$tmp/p0.h5" --kernel-timing "$timing" \
          -o "$tmp/p.h5"
        # shellcheck disable=SC2086 # HAP_RUN_ARGS: words on purpose
        "${mpi[@]}" "$bin/hap-run" "$tmp/plan0.json" -m "$m" -c "$tmp/p0.h5" \
          --sim-cluster "$tmp/p.h5" -n 10 -w 3 "${emu[@]}" ${HAP_RUN_ARGS:-} -f json >"$tmp/r$r.json"
      done
      python3 - "$speeds" "$m" "$s" "$tmp"/r[0-9]*.json <<'PY'
import json, statistics, sys
runs = [json.load(open(f)) for f in sys.argv[4:]]
med = lambda k: statistics.median(d[k] for d in runs)
def errors(k):
    e = sorted(100 * (d[k] - d["simulated_s"]) / d[k] for d in runs)
    return "%+.1f%%; %+.1f..%+.1f%%" % (statistics.median(e), e[0], e[-1])
print("| %s | %s | %s | %.3f | %.3f | %.3f | %s | %s | %.1f%% |" % (
    sys.argv[1], sys.argv[2].split(":")[0], sys.argv[3], 1e3 * med("measured_mean_s"),
    1e3 * med("measured_p50_s"), 1e3 * med("simulated_s"), errors("measured_mean_s"),
    errors("measured_p50_s"), 100 * med("median_task_error")))
PY
      rm -f "$tmp"/r[0-9]*.json
    done
  done
done
