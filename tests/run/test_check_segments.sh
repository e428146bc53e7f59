#!/usr/bin/env bash
# Segment boundaries in hap-run (issue 20), on 2 ranks, with hap-run --check against one device:
#   shared   hap-synth's plan of a 2-layer mlp with a segment per layer: every segment has the same
#            ratios, so a Gather made in one segment is read in the next with no step
#   moved    segments 1 and 2 re-split to 3:1 and an all-to-all of the Gather across the boundary
#            (only the difference of the two splits moves)
#   copied   segments 1 and 2 given ratios that differ from segment 0's in the last bit only: the
#            same lengths, so the all-to-all is lowered to a local copy
#   refused  the 3:1 ratios without the all-to-all: hap-run refuses the plan in one line
# Usage: test_check_segments.sh HAP_SYNTH HAP_RUN
set -u
synth=$1 run=$2
judge="$(dirname "$0")/check_passed.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
model="mlp:layers=2,batch=24,seq=8,hidden=32,segments=1"
"$synth" "$model" -c cpu-2 -o "$tmp/shared.json" -q || { echo "FAIL: hap-synth"; exit 1; }

# edit PLAN OUT RATIO0 RATIO1 WITH_STEP: segments 1.. get the ratios; with WITH_STEP=1 an
# all-to-all of layers.0.sigmoid (G0, segment 0 -> 1) goes before layers.1.linear.
edit() {
  python3 - "$@" <<'EOF' || exit 1
import json, sys
src, dst, r0, r1, with_step = sys.argv[1:6]
p = json.load(open(src))
for seg in p["segments"][1:]:
    seg["ratios"] = [float(r0), float(r1)]
    seg.pop("lengths", None)
steps = p["steps"]
at = next(i for i, s in enumerate(steps) if s.get("node") == "layers.1.linear")
assert steps[at]["inputs"][0] == "G0" and steps[at]["segment"] == 1, "unexpected plan shape"
if with_step == "1":
    steps.insert(at, {"kind": "comm", "tensor": "layers.0.sigmoid", "op": "all_to_all",
                      "from": "G0", "to": "G0", "impl": "pairwise", "from_segment": 0,
                      "segment": 1, "predicted_s": 0.0})
json.dump(p, open(dst, "w"), indent=1)
EOF
}
edit "$tmp/shared.json" "$tmp/moved.json" 0.75 0.25 1
edit "$tmp/shared.json" "$tmp/copied.json" 0.5000000000000001 0.4999999999999999 1
edit "$tmp/shared.json" "$tmp/refused.json" 0.75 0.25 0

if grep -q '"all_to_all"' "$tmp/shared.json"; then
  echo "FAIL: shared: the plan re-shards between segments that split alike"
  exit 1
fi
fail=0
for case in shared moved copied; do
  if timeout 300 mpirun --oversubscribe -np 2 "$run" "$tmp/$case.json" -m "$model" -c cpu-2 \
    --check -n 1 -w 1 -q >"$tmp/out" 2>&1 && bash "$judge" "$tmp/out" >"$tmp/said"; then
    echo "ok   $case: $(cat "$tmp/said")"
  else
    cat "$tmp/said" 2>/dev/null
    rm -f "$tmp/said"
    sed 's/^/  /' "$tmp/out" | head -8
    echo "FAIL: $case"
    fail=1
  fi
done

if timeout 300 mpirun --oversubscribe -np 2 "$run" "$tmp/refused.json" -m "$model" -c cpu-2 -n 1 \
  -w 1 -q >"$tmp/out" 2>&1; then
  echo "FAIL: refused: hap-run ran a plan that reads a Gather under ratios it was not made with"
  fail=1
elif ! grep -q "'layers.0.sigmoid' as G0 (segment 1), but no earlier step makes it" "$tmp/out"; then
  echo "FAIL: refused: expected the missing G0 (segment 1) of layers.0.sigmoid named; got:"
  sed 's/^/  /' "$tmp/out" | head -4
  fail=1
else
  echo "ok   refused: $(grep -m1 'no earlier step makes it' "$tmp/out")"
fi
exit "$fail"
