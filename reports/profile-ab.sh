#!/usr/bin/env bash
# Two ways of making the replay profile against each other, interleaved: for each model and
# strategy below (2 CPU ranks, even speeds), one plan on a first profile, then REPEATS times: a
# replay profile (hap-profile measure --plan) with the arguments of way A, a hap-run against it,
# one with those of way B, a hap-run against that. Prints one line per run (measured mean and
# median iteration, simulated, ms; the errors of the mean and of the median), then each way's
# mean |error| and mean signed error of both. reports/coll-caches.sh and reports/coll-timing.sh
# are its two uses.
# Usage: reports/profile-ab.sh BUILD_DIR REPEATS NAME_A "ARGS_A" NAME_B "ARGS_B"
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -ne 6 ]; then
  echo "usage: profile-ab.sh BUILD_DIR REPEATS NAME_A ARGS_A NAME_B ARGS_B" >&2
  exit 2
fi
build=$1
repeats=$2
names=("$3" "$5")
declare -A args=(["$3"]=$4 ["$5"]=$6)
bin="$build/bin"
for t in hap-profile hap-synth hap-run; do
  [ -x "$bin/$t" ] || { echo "profile-ab.sh: build first ($bin/$t missing)" >&2; exit 1; }
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mpi=(mpirun -np 2)
vit="vit:layers=2,batch=16,image=32,patch=4,width=128,heads=4,hidden=512,classes=10"
bert="bert-base:layers=2,batch=16,seq=32,width=128,heads=4,hidden=512,vocab=512"
mlp="mlp:layers=4,batch=64,seq=32,hidden=256"
cases=("$vit|hap" "$vit|dp-ev" "$bert|hap" "$bert|dp-ev" "$mlp|hap" "$mlp|dp-ev")
"${mpi[@]}" "$bin/hap-profile" measure --backend cpu --quick --quiet -o "$tmp/p0.h5"
for c in "${cases[@]}"; do
  m=${c%|*} s=${c#*|}
  "$bin/hap-synth" "$m" -c "$tmp/p0.h5" -s "$s" -o "$tmp/plan.json" -q
  for _ in $(seq "$repeats"); do
    for how in "${names[@]}"; do
      # shellcheck disable=SC2086 # the way's arguments: words on purpose
      "${mpi[@]}" "$bin/hap-profile" measure --backend cpu --quick --quiet ${args[$how]} \
        --plan "$tmp/plan.json" --model "$m" --cluster "$tmp/p0.h5" -o "$tmp/p.h5"
      "${mpi[@]}" "$bin/hap-run" "$tmp/plan.json" -m "$m" -c "$tmp/p0.h5" \
        --sim-cluster "$tmp/p.h5" -n 10 -w 3 -f json >"$tmp/r.json"
      python3 - "$tmp/r.json" "${m%%:*}" "$s" "$how" <<'PY' | tee -a "$tmp/lines"
import json, sys
d = json.load(open(sys.argv[1]))
p50 = d["measured_p50_s"]
print("%s %s %s mean %.3f p50 %.3f simulated %.3f error %+.1f%% p50-error %+.1f%%" % (
    sys.argv[2], sys.argv[3], sys.argv[4], 1e3 * d["measured_mean_s"], 1e3 * p50,
    1e3 * d["simulated_s"], 100 * d["error"], 100 * (p50 - d["simulated_s"]) / p50))
PY
    done
  done
done
python3 - "$tmp/lines" "${names[@]}" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1])]
for how in sys.argv[2:]:
    for what, col in (("mean", -3), ("p50", -1)):
        e = [float(r[col].rstrip("%")) for r in rows if r[2] == how]
        print("%s, error of the %s: %d runs, mean |error| %.1f%%, mean error %+.1f%%" % (
            how, what, len(e), sum(abs(x) for x in e) / len(e), sum(e) / len(e)))
PY
