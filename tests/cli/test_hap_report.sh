#!/usr/bin/env bash
# End-to-end checks of hap-report (issue 18): a page of each kind from the tools' real outputs is
# well-formed XML (xmllint --noout, and Python's parser) and holds the SVG elements its data calls
# for; hap-sim --report and hap-run --report write the same pages; a malformed input is one line
# naming the file, the field and what was expected, exit 1, and leaves no output (an existing one
# untouched); usage errors exit 2.
# Usage: test_hap_report.sh HAP_REPORT HAP_SIM HAP_SYNTH HAP_RUN HAP_PROFILE WRITE_SAMPLE_PROFILE
#        MPIRUN
set -u
report=$1 sim=$2 synth=$3 run=$4 profile=$5 sample=$6 mpirun=$7
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
check_py="$here/report_check.py"
# shellcheck source=tests/cli/report_inputs.sh
. "$here/report_inputs.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0

expect() { # expect NAME STATUS COMMAND...
  local name=$1 want=$2
  shift 2
  "$@" >"$tmp/out" 2>"$tmp/err"
  local got=$?
  if [ "$got" -eq "$want" ]; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL $name: exit $got, expected $want"
    sed 's/^/  stderr: /' "$tmp/err" | head -5
  fi
}
check() { # check NAME COMMAND...
  local name=$1
  shift
  if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $name"; fi
}
equals() { # equals NAME GOT WANT
  if [ "$2" = "$3" ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1: got '$2', expected '$3'"; fi
}
count() { python3 "$check_py" count "$@"; }
json() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }
edit() { # edit IN OUT PYTHON: d is the parsed IN; OUT is the JSON after PYTHON ran on it
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); $3; json.dump(d, open(sys.argv[2], 'w'))" "$1" "$2"
}
wellformed() { # the page parses as XML: xmllint when installed (CI's test setup), and Python
  if command -v xmllint >/dev/null 2>&1; then xmllint --noout "$1" || return 1; fi
  python3 "$check_py" wellformed "$1"
}

report_inputs "$tmp" "$sim" "$synth" "$run" "$profile" "$sample" "$mpirun" || { echo "FAIL: making the inputs"; exit 1; }
command -v xmllint >/dev/null 2>&1 || echo "note: xmllint not installed; Python's XML parser only"

# ---- one page of each kind ----------------------------------------------------------------------
# sweep: one line per strategy in each of the two charts, a marker per row, the swept key's axis
expect sweep 0 "$report" "$tmp/sweep.json" -o "$tmp/sweep.html"
check sweep-wellformed wellformed "$tmp/sweep.html"
strategies=$(json "$tmp/sweep.json" 'len({r["strategy"] for r in d["rows"]})')
rows=$(json "$tmp/sweep.json" 'len([r for r in d["rows"] if r["ok"]])')
equals sweep-lines "$(count "$tmp/sweep.html" polyline series)" $((2 * strategies))
equals sweep-points "$(count "$tmp/sweep.html" circle point)" $((2 * rows))
equals sweep-charts "$(count "$tmp/sweep.html" svg chart)" 2
check sweep-axis python3 "$check_py" text "$tmp/sweep.html" gpus_per_host
# the default output name: INPUT with .html
expect sweep-default-out 0 "$report" sweep "$tmp/sweep.json"
check sweep-default-out-same cmp -s "$tmp/sweep.html" "$tmp/sweep.html"
# a category axis: one tick label per point
expect sweep-dev 0 "$report" sweep "$tmp/sweep-dev.json" -o "$tmp/sweep-dev.html"
check sweep-dev-wellformed wellformed "$tmp/sweep-dev.html"
check sweep-dev-ticks python3 "$check_py" text "$tmp/sweep-dev.html" "device[P100]=A100-80GB"

# plan: a ratio bar, a compute and a comm bar per device; memory bars stacked by component
expect plan 0 "$report" plan "$tmp/plan.json" -o "$tmp/plan.html"
check plan-wellformed wellformed "$tmp/plan.html"
devices=$(json "$tmp/plan.json" 'len(d["cluster"]["devices"])')
parts=$(json "$tmp/plan.json" 'sum(1 for x in d["predicted"]["devices"] for v in x["memory"].values() if v > 0)')
equals plan-ratio-bars "$(count "$tmp/plan.html" rect ratio)" "$devices"
equals plan-compute-bars "$(count "$tmp/plan.html" rect compute)" "$devices"
equals plan-comm-bars "$(count "$tmp/plan.html" rect comm)" "$devices"
equals plan-memory-bars "$(count "$tmp/plan.html" rect memory)" "$parts"
steps=$(json "$tmp/plan.json" 'len(d["steps"])')
equals plan-steps "$(count "$tmp/plan.html" tr)" $((steps + 1))
check plan-legend python3 "$check_py" text "$tmp/plan.html" optimizer
# a pipelined plan: the stages' table, then each stage's bars (every device in one stage)
expect pipe 0 "$report" plan "$tmp/pipe.json" -o "$tmp/pipe.html"
check pipe-wellformed wellformed "$tmp/pipe.html"
pipe_devices=$(json "$tmp/pipe.json" 'len(d["cluster"]["devices"])')
equals pipe-stages-table "$(count "$tmp/pipe.html" table stages)" 1
equals pipe-ratio-bars "$(count "$tmp/pipe.html" rect ratio)" "$pipe_devices"
equals pipe-programs "$(count "$tmp/pipe.html" table steps)" "$(json "$tmp/pipe.json" 'len(d["stages"])')"

# run: a Gantt rect per task of both timelines, a lane per rank and timeline, the histogram
expect run 0 "$report" "$tmp/trace.json" -o "$tmp/run.html"
check run-wellformed wellformed "$tmp/run.html"
tasks=$(json "$tmp/trace.json" 'len([e for e in d["traceEvents"] if e["ph"] == "X"])')
equals run-gantt-rects "$(count "$tmp/run.html" rect task)" "$tasks"
equals run-gantt "$(count "$tmp/run.html" svg gantt)" 1
for lane in "rank 0 simulated" "rank 0 measured" "rank 1 simulated" "rank 1 measured"; do
  check "run-lane $lane" python3 "$check_py" text "$tmp/run.html" "$lane"
done
check run-histogram [ "$(count "$tmp/run.html" rect bin)" -ge 1 ]
equals run-diffs "$(count "$tmp/run.html" table diffs)" 1

# profile: a GEMM point per sample; per p2p and collective sweep a measured line (a point per
# size) and a fitted one per piece (the sample's fits have one piece each)
expect profile 0 "$report" profile "$tmp/profile.json" -o "$tmp/profile.html"
check profile-wellformed wellformed "$tmp/profile.html"
lines=$(json "$tmp/profile.json" 'sum(1 + len(s["pieces"]) for k in ("p2p", "collectives") for s in d["sweeps"][k])')
points=$(json "$tmp/profile.json" 'sum(len(g["samples"]) for g in d["sweeps"]["gemm"]) + sum(len(s["sizes_bytes"]) for k in ("p2p", "collectives") for s in d["sweeps"][k])')
equals profile-lines "$(count "$tmp/profile.html" polyline series)" "$lines"
equals profile-points "$(count "$tmp/profile.html" circle point)" "$points"
equals profile-charts "$(count "$tmp/profile.html" svg chart)" 3
equals profile-fit-tables "$(count "$tmp/profile.html" table fits)" 2

# text from the input is escaped: markup characters and non-characters stay text
edit "$tmp/sweep.json" "$tmp/markup.json" 'd["model"] = "<b>&\"x\"</b> \u00e9\uffff"'
expect markup 0 "$report" "$tmp/markup.json" -o "$tmp/markup.html"
check markup-wellformed wellformed "$tmp/markup.html"
check markup-text python3 "$check_py" text "$tmp/markup.html" \
  "hap-sim sweep: <b>&\"x\"</b> $(printf '\303\251\357\277\275') on paper-hetero"

# ---- --report on hap-sim and hap-run ------------------------------------------------------------
# hap-sim's page is hap-report's of the same JSON, but for the line naming the source
expect sim-report 0 "$sim" bert-base:layers=2 -c paper-hetero --sweep gpus_per_host=1,2,4 -q \
  -f json --report "$tmp/sim-report.html"
check sim-report-json cmp -s "$tmp/out" "$tmp/sweep.json"
check sim-report-same diff <(grep -v 'class="src"' "$tmp/sim-report.html") \
  <(grep -v 'class="src"' "$tmp/sweep.html")
expect sim-report-pipeline 2 "$sim" mlp --pipeline stages=2 --report "$tmp/p.html"
check sim-report-pipeline-none [ ! -e "$tmp/p.html" ]
expect sim-report-unwritable 1 "$sim" mlp -q --report "$tmp/no/such/dir/r.html"
equals sim-report-unwritable-one-line "$(grep -c . "$tmp/err")" 1
# hap-run's page: the run's own trace (a temporary one, removed, without --trace)
mkdir -p "$tmp/runrep"
expect run-report 0 "$mpirun" --oversubscribe -np 2 "$run" "$tmp/cpu2.json" -n 3 -w 1 -q \
  --report "$tmp/runrep/run.html"
check run-report-wellformed wellformed "$tmp/runrep/run.html"
equals run-report-rects "$(count "$tmp/runrep/run.html" rect task)" "$tasks"
equals run-report-no-temp "$(find "$tmp/runrep" -type f | wc -l)" 1
expect run-report-with-trace 0 "$mpirun" --oversubscribe -np 2 "$run" "$tmp/cpu2.json" -n 3 -w 1 \
  -q -t "$tmp/runrep/t.json" --report "$tmp/runrep/run2.html"
check run-report-trace-kept [ -s "$tmp/runrep/t.json" ]
equals run-report-with-trace-rects "$(count "$tmp/runrep/run2.html" rect task)" "$tasks"

# ---- malformed inputs: one line, exit 1, no output ----------------------------------------------
bad() { # bad NAME FILE TEXT [KIND]: refused naming FILE and TEXT; out.html keeps its old bytes
  local name=$1 file=$2 text=$3 kind=${4:-}
  printf 'old page\n' >"$tmp/bad/out.html"
  expect "$name" 1 "$report" ${kind:+"$kind"} "$file" -o "$tmp/bad/out.html"
  equals "$name-one-line" "$(grep -c . "$tmp/err")" 1
  check "$name-names-file" grep -qF -- "$file: " "$tmp/err"
  check "$name-says" grep -qF -- "$text" "$tmp/err"
  equals "$name-untouched" "$(cat "$tmp/bad/out.html")" "old page"
  equals "$name-no-temp" "$(find "$tmp/bad" -type f | wc -l)" 1
}
mkdir -p "$tmp/bad"
head -c 300 "$tmp/sweep.json" >"$tmp/truncated.json"
bad truncated "$tmp/truncated.json" "line "
: >"$tmp/empty.json"
bad empty "$tmp/empty.json" "the file is empty, expected"
echo '[1, 2]' >"$tmp/array.json"
bad array "$tmp/array.json" "root: expected"
edit "$tmp/plan.json" "$tmp/graph.json" 'd["format"] = "hap-graph"'
bad other-format "$tmp/graph.json" 'format: is "hap-graph", expected'
bad wrong-kind "$tmp/plan.json" 'format: is "hap-plan", expected a hap-sim sweep' sweep
bad wrong-kind-shape "$tmp/sweep.json" "looks like a hap-sim sweep" run
echo '{"name": "x"}' >"$tmp/unknown.json"
bad unknown-shape "$tmp/unknown.json" "root: has none of the keys"
edit "$tmp/sweep.json" "$tmp/no-iter.json" 'del d["rows"][1]["iteration_s"]'
bad missing-field "$tmp/no-iter.json" "rows[1].iteration_s: missing, expected"
edit "$tmp/plan.json" "$tmp/bad-type.json" 'd["predicted"]["devices"][2]["memory_bytes"] = "big"'
bad wrong-type "$tmp/bad-type.json" "predicted.devices[2].memory_bytes: expected"
edit "$tmp/plan.json" "$tmp/v3.json" 'd["version"] = "3.0"'
bad plan-3 "$tmp/v3.json" "version: is \"3.0\", expected 1.x (a plan) or 2.x (a pipelined plan)"
edit "$tmp/pipe.json" "$tmp/pipe-bad.json" 'd["stages"][1]["plan"]["steps"][2]["kind"] = "bogus"'
bad pipe-stage "$tmp/pipe-bad.json" "stages[1].plan: steps[2].kind: is \"bogus\", expected source"
edit "$tmp/plan.json" "$tmp/ratios.json" 'd["segments"][0]["ratios"].pop()'
bad plan-ratios "$tmp/ratios.json" "segments[0].ratios: has"
edit "$tmp/trace.json" "$tmp/neg.json" 'x = [e for e in d["traceEvents"] if e["ph"] == "X"][3]; x["dur"] = -1'
bad trace-negative "$tmp/neg.json" ".dur: is -1"
edit "$tmp/profile.json" "$tmp/no-sweeps.json" 'del d["sweeps"]'
bad profile-no-sweeps "$tmp/no-sweeps.json" "sweeps: missing, expected"
edit "$tmp/profile.json" "$tmp/p50.json" 'd["sweeps"]["p2p"][1]["p50_s"].pop()'
bad profile-lengths "$tmp/p50.json" "sweeps.p2p[1].p50_s: has 3 times, expected 4"
bad missing-file "$tmp/nope.json" "nope.json"

# ---- usage --------------------------------------------------------------------------------------
expect no-args 2 "$report"
expect unknown-kind 2 "$report" chart "$tmp/sweep.json"
expect too-many 2 "$report" sweep "$tmp/sweep.json" more
expect same-file 2 "$report" "$tmp/sweep.json" -o "$tmp/sweep.json"
expect help 0 "$report" --help
check help-kinds grep -q 'profile  hap-profile show' "$tmp/out"
expect unwritable 1 "$report" "$tmp/sweep.json" -o "$tmp/no/such/dir/r.html"
equals unwritable-one-line "$(grep -c . "$tmp/err")" 1

echo "test_hap_report: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
