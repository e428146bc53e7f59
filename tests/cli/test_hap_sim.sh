#!/usr/bin/env bash
# End-to-end checks of hap-sim: the bundled study, sweeps, plans from hap-synth (and plans made for
# another graph or cluster), traces, formats, and usage errors.
# Usage: test_hap_sim.sh HAP_SIM_BINARY HAP_SYNTH_BINARY WRITE_SAMPLE_PROFILE_BINARY
set -u
bin=$1
synth=$2
sample=$3
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
one_line_error() { # the error is one line containing $1 (a fixed string), then at most the hint
  [ "$(grep -c . "$tmp/err")" -ge 1 ] && head -n 1 "$tmp/err" | grep -qF -- "$1" &&
    { [ "$(grep -c . "$tmp/err")" -eq 1 ] ||
      { [ "$(grep -c . "$tmp/err")" -eq 2 ] && [ "$(sed -n 2p "$tmp/err")" = "Try 'hap-sim --help'." ]; }; }
}
says() { # says NAME TEXT: stderr contains TEXT (a fixed string)
  check "$1" grep -qF -- "$2" "$tmp/err"
}

small="mlp:layers=2,batch=24,seq=8,hidden=32"

expect help 0 "$bin" --help
check help-text grep -q '^Usage: hap-sim' "$tmp/out"
expect version 0 "$bin" --version
check version-text grep -q '^hap-sim [0-9]' "$tmp/out"

# the bundled study: bert-base on paper-hetero, 4 points x 4 strategies
expect default 0 "$bin"
check default-rows [ "$(grep -c '^gpus_per_host=' "$tmp/out")" -eq 16 ]
check default-hap-not-slower python3 - "$tmp/out" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1]) if l.startswith("gpus_per_host=")]
for r in rows:
    if r[1] == "hap":
        # "vs dp-ev" and "vs dp-cp" columns are speedups like 1.15x
        ev, cp = float(r[7].rstrip("x")), float(r[8].rstrip("x"))
        assert ev >= 1.0 and cp >= 1.0, r
PY

# formats
expect csv 0 "$bin" "$small" -c cpu-2 -f csv
check csv-header grep -q '^point,strategy,devices,ok,iteration_s' "$tmp/out"
check csv-rows [ "$(wc -l <"$tmp/out")" -eq 5 ]
expect json 0 "$bin" "$small" -c cpu-2 -f json -s dp-ev
check json-valid python3 -c "import json,sys; d=json.load(open('$tmp/out')); sys.exit(0 if d['rows'][0]['iteration_s'] > 0 else 1)"

# sweeps: cluster parameters, model options, device substitution, a grid
expect sweep-inter 0 "$bin" "$small" -c paper-hetero:gpus_per_host=1 -s dp-ev -w inter_gbps=10,100 -f csv
check sweep-inter-faster python3 - "$tmp/out" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
t = {r["point"]: float(r["iteration_s"]) for r in rows}
assert t["inter_gbps=100"] < t["inter_gbps=10"], t
PY
expect sweep-batch 0 "$bin" "$small" -c cpu-2 -s hap -w batch=8,16
check sweep-batch-rows [ "$(grep -c '^batch=' "$tmp/out")" -eq 2 ]
expect sweep-device 0 "$bin" "$small" -c paper-hetero:gpus_per_host=1 -s dp-cp -w 'device[P100]=V100-16GB,A100-80GB' -f csv
check sweep-device-rows [ "$(grep -c '^"device\[P100\]=' "$tmp/out")" -eq 2 ]
expect sweep-grid 0 "$bin" "$small" -c paper-hetero -s dp-ev -w gpus_per_host=1,2 -w inter_gbps=10,25
check sweep-grid-rows [ "$(grep -c '^gpus_per_host=' "$tmp/out")" -eq 4 ]
expect sweep-unknown-key 2 "$bin" "$small" -c cpu-2 -w gpus=1,2
check sweep-unknown-key-lists one_line_error "valid keys: gpus_per_host, hosts, inter_gbps"
says sweep-unknown-key-model "batch, seq, hidden, layers, segments, device[MODEL]"
expect sweep-bad-form 2 "$bin" "$small" -c cpu-2 -w gpus_per_host
check sweep-bad-form-msg one_line_error "'gpus_per_host' is not of the form KEY=V1,V2,..."
expect sweep-empty-value 2 "$bin" "$small" -c cpu-2 -w gpus_per_host=1,,2
check sweep-empty-value-msg one_line_error "empty or too long value list in 'gpus_per_host=1,,2'"
expect sweep-bad-value 1 "$bin" "$small" -c paper-hetero -w gpus_per_host=0
check sweep-bad-value-msg one_line_error "parameter 'gpus_per_host' is '0', expected an integer"
expect sweep-twice 2 "$bin" "$small" -c cpu-2 -w batch=8 -w batch=16
check sweep-twice-msg one_line_error "key 'batch' is given twice"
expect sweep-unknown-preset 2 "$bin" "$small" -c cpu-2 -w 'device[cpu]=V100-16'
check sweep-unknown-preset-suggests grep -q "did you mean" "$tmp/err"
printf '\x89HDF\r\n\x1a\n' >"$tmp/fake.h5"
expect sweep-profile-param 2 "$bin" "$small" -c "$tmp/fake.h5" -w inter_gbps=10,20
check sweep-profile-param-msg one_line_error "not to the measured profile"
expect sweep-no-such-device 1 "$bin" "$small" -c cpu-2 -w 'device[H100]=V100-16GB'
check sweep-no-such-device-msg one_line_error "no device of cpu-2 has a model containing 'H100'"

# plans from hap-synth, and plans made for something else
expect synth-plan 0 "$synth" "$small" -c cpu-2 -o "$tmp/plan.json" -q
expect plan 0 "$bin" "$small" -c cpu-2 --plan "$tmp/plan.json"
check plan-row grep -q ' hap ' "$tmp/out"
expect plan-other-graph 1 "$bin" "mlp:layers=3,batch=24,seq=8,hidden=32" -c cpu-2 --plan "$tmp/plan.json"
check plan-other-graph-msg one_line_error "graph: made for graph 'mlp' digest"
expect plan-other-cluster 1 "$bin" "$small" -c cpu-2:intra_gbps=5 --plan "$tmp/plan.json"
check plan-other-cluster-msg one_line_error "cluster: made for cluster 'cpu-2' digest"
expect plan-other-size 1 "$bin" "$small" -c paper-hetero:gpus_per_host=1 --plan "$tmp/plan.json"
check plan-other-size-msg one_line_error "this cluster 'paper-hetero' has digest"
# a plan made with a profile accepts that profile under another path and a byte-identical copy
# (the digest is of the content, not of the path it was read from)
"$sample" "$tmp/prof.h5" >/dev/null
expect synth-plan-profile 0 "$synth" "$small" -c "$tmp/prof.h5" -o "$tmp/plan-prof.json" -q
mkdir -p "$tmp/elsewhere" && cp "$tmp/prof.h5" "$tmp/elsewhere/copy.h5"
expect plan-profile-copy 0 "$bin" "$small" -c "$tmp/elsewhere/copy.h5" --plan "$tmp/plan-prof.json"
expect plan-profile-dot-path 0 "$bin" "$small" -c "$tmp/./prof.h5" --plan "$tmp/plan-prof.json"
# MODEL and --cluster default to the specs the plan records
expect plan-alone 0 "$bin" --plan "$tmp/plan.json"
check plan-alone-row grep -q ' hap ' "$tmp/out"
expect plan-alone-cluster-given 0 "$bin" -c cpu-2 --plan "$tmp/plan.json"
sed 's/, "spec": "[^"]*"//' "$tmp/plan.json" >"$tmp/nospec.json"
expect plan-no-spec 2 "$bin" --plan "$tmp/nospec.json"
check plan-no-spec-msg one_line_error "nospec.json: the plan does not record its model (made by an older hap-synth, or edited): give MODEL"
expect plan-no-spec-given 0 "$bin" "$small" -c cpu-2 --plan "$tmp/nospec.json"
head -c 100 "$tmp/plan.json" >"$tmp/truncated.json"
expect plan-truncated 1 "$bin" "$small" -c cpu-2 --plan "$tmp/truncated.json"
check plan-truncated-msg one_line_error "$tmp/truncated.json: line "
says plan-truncated-why "premature end of input"
expect plan-missing 1 "$bin" "$small" -c cpu-2 --plan "$tmp/nope.json"
check plan-missing-msg one_line_error "$tmp/nope.json: cannot open: No such file"
expect plan-and-strategy 2 "$bin" "$small" -c cpu-2 --plan "$tmp/plan.json" -s hap
check plan-and-strategy-msg one_line_error "--plan and --strategy exclude each other"
expect plan-and-sweep 2 "$bin" "$small" -c cpu-2 --plan "$tmp/plan.json" -w batch=8
check plan-and-sweep-msg one_line_error "--plan cannot be swept"

# traces: valid JSON, events nest per lane (python), one file per run when there are several
expect trace 0 "$bin" "$small" -c paper-hetero:gpus_per_host=1 -s hap -t "$tmp/t.json"
nest_check() {
  python3 - "$1" <<'PY'
import json, sys
from collections import defaultdict
d = json.load(open(sys.argv[1]))
lanes = defaultdict(list)
for e in d["traceEvents"]:
    if e["ph"] == "X":
        lanes[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"], e["name"]))
assert lanes, "no events"
for evs in lanes.values():
    evs.sort()
    stack = []
    for s, e, n in evs:
        while stack and stack[-1] <= s + 1e-3:
            stack.pop()
        assert not stack or e <= stack[-1] + 1e-3, (n, s, e)
        stack.append(e)
PY
}
check trace-nests nest_check "$tmp/t.json"
expect trace-several 0 "$bin" "$small" -c cpu-2 -t "$tmp/s.json"
for s in hap dp-ev dp-cp; do
  check "trace-several-files-$s" test -f "$tmp/s.$s.json"
done
check trace-twins python3 - "$tmp/s.hap.json" "$tmp/s.dp-ev.json" <<'PY'
import json, sys
names = [{e["name"] for e in json.load(open(p))["traceEvents"] if e["ph"] == "X" and e["name"].endswith(".fwd")} for p in sys.argv[1:]]
assert names[0] and names[0] == names[1], names[0] ^ names[1]
PY
expect trace-unwritable 1 "$bin" "$small" -c cpu-2 -s hap -t /nonexistent-dir/t.json
check trace-unwritable-msg one_line_error "/nonexistent-dir/t.json: cannot create"

# megatron-tp: a 2-D plan (one replica per host) through hap-synth, hap-sim --plan and a trace
mtp_cluster=paper-hetero:gpus_per_host=2
expect megatron-synth 0 "$synth" "$small" -c "$mtp_cluster" -s megatron-tp -o "$tmp/mtp.json"
check megatron-groups grep -q '^groups .*8 replicas of 2 devices' "$tmp/out"
check megatron-replicas grep -q '"replicas": 8' "$tmp/mtp.json"
expect megatron-plan 0 "$bin" "$small" -c "$mtp_cluster" --plan "$tmp/mtp.json" -f csv
check megatron-plan-row grep -q ',megatron-tp,16,1,' "$tmp/out"
expect megatron-strategy 0 "$bin" "$small" -c "$mtp_cluster" -s megatron-tp --tasks -t "$tmp/mtp-trace.json"
check megatron-replica-tasks grep -q 'grad.replica_all_reduce' "$tmp/out"
check megatron-trace-nests nest_check "$tmp/mtp-trace.json"
expect megatron-odd-batch 1 "$bin" "mlp:layers=2,batch=12,seq=8,hidden=32" -c "$mtp_cluster" -s megatron-tp
check megatron-odd-batch-row grep -q 'not a multiple of 8 replicas' "$tmp/out"

# usage errors
expect bad-strategy 2 "$bin" "$small" -s megatrons
check bad-strategy-msg one_line_error "unknown strategy 'megatrons'"
expect bad-format 2 "$bin" "$small" -f yaml
check bad-format-msg one_line_error "unknown format 'yaml'"
expect two-models 2 "$bin" mlp vit
check two-models-msg one_line_error "more than one MODEL given"
expect bad-trace-devices 2 "$bin" "$small" --trace-devices -1
check bad-trace-devices-msg one_line_error "--trace-devices wants an integer 0..65536, got '-1'"
expect bad-model 1 "$bin" nosuchmodel -c cpu-2
check bad-model-msg one_line_error "unknown model 'nosuchmodel'"
expect bad-cluster 1 "$bin" "$small" -c nosuchcluster
check bad-cluster-msg one_line_error "unknown cluster 'nosuchcluster'"

# --pipeline: stage by stage (pipe/estimate.h)
pmlp="mlp:layers=8,batch=64,seq=64,hidden=2048"
hosts4="paper-homo:gpus_per_host=2,hosts=4"
expect pipeline 0 "$bin" "$pmlp" -c "$hosts4" --pipeline stages=4,micro_batches=8 -s dp-ev
check pipeline-stages [ "$(grep -cE '^[0-3] +[0-3] +[0-9]+\.\.[0-9]+ ' "$tmp/out")" -eq 4 ]
check pipeline-header grep -q '4 stages x 1 chunk, 1f1b, 8 micro-batches, 2 devices per group' "$tmp/out"
check pipeline-bubble grep -q '^bubble      per group' "$tmp/out"
check pipeline-memory grep -q '^memory      every stage fits (fullest: stage 0, .* of 16.000 GiB, 4 micro-batches in flight)' "$tmp/out"
expect pipeline-json 0 "$bin" "$pmlp" -c "$hosts4" --pipeline stages=4,schedule=gpipe,micro_batches=8 -f json
check pipeline-json-valid python3 - "$tmp/out" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["schedule"] == "gpipe" and d["stages"] == 4 and d["micro_batches"] == 8, d
st = d["virtual_stages"]
assert len(st) == 4 and all(s["in_flight"] == 8 for s in st), st
assert all(s["fits"] == (s["memory_bytes"] <= s["memory_limit_bytes"]) for s in st), st
slowest = max(s["fwd_s"] + s["bwd_s"] for s in st)
assert d["iteration_s"] >= 8 * slowest, (d["iteration_s"], slowest)
assert 0 < d["mean_bubble"] < 1 and len(d["bubble"]) == 4
PY
# more micro-batches, less bubble (same stages, free of the hosts' NIC: one host of 8)
one_host="paper-homo:gpus_per_host=8,hosts=1"
"$bin" "$pmlp" -c "$one_host" --pipeline stages=4,micro_batches=4 -s dp-ev -f json >"$tmp/m4" 2>"$tmp/err"
"$bin" "$pmlp" -c "$one_host" --pipeline stages=4,micro_batches=16 -s dp-ev -f json >"$tmp/m16" 2>>"$tmp/err"
check pipeline-more-micro-batches python3 -c "
import json; a=json.load(open('$tmp/m4')); b=json.load(open('$tmp/m16'))
assert b['mean_bubble'] < a['mean_bubble'], (a['mean_bubble'], b['mean_bubble'])"
expect pipeline-bad-spec 2 "$bin" "$small" -c cpu-2 --pipeline stages=2,schedule=zigzag
check pipeline-bad-spec-msg one_line_error "--pipeline: schedule 'zigzag', expected gpipe, 1f1b, interleaved"
expect pipeline-no-stages 2 "$bin" "$small" -c cpu-2 --pipeline schedule=gpipe
check pipeline-no-stages-msg one_line_error "missing stages=P"
# unequal groups (groups=): one stage per device model of paper-hetero (4 V100s, then 12 P100s),
# and --pipeline auto adds that split to its candidates
expect pipeline-groups 0 "$bin" "$pmlp" -c paper-hetero:gpus_per_host=2 --pipeline groups=4+12,micro_batches=8
check pipeline-groups-header grep -q '2 stages x 1 chunk, 1f1b, 8 micro-batches, groups of 4+12 devices, hap programs' "$tmp/out"
expect pipeline-groups-auto 0 "$bin" "$pmlp" -c paper-hetero:gpus_per_host=2 --pipeline auto
check pipeline-groups-auto-row grep -qE '^stages=2,schedule=1f1b,micro_batches=8,groups=4\+12 +2 +1 +1f1b' "$tmp/out"
expect pipeline-groups-bad 1 "$bin" "$pmlp" -c paper-hetero:gpus_per_host=2 --pipeline groups=4+4
check pipeline-groups-bad-msg one_line_error "pipeline: groups add up to 8 devices, 'paper-hetero' has 16"
# --strategy megatron[:...]: Megatron-LM's 3-D layout (pipe/megatron.h), a pipeline of
# megatron-tp stage programs; its own errors, and --pipeline refused beside it
gsmall="gpt:layers=4,batch=8,seq=64,width=128,heads=4,vocab=512"
expect megatron3d 0 "$synth" "$gsmall" -c "$hosts4" -s megatron:pp=2,mbs=1 -o "$tmp/m3d.json"
check megatron3d-layout grep -q '^megatron    tp=2,pp=2,dp=2,mbs=1,v=1,sp=on: ' "$tmp/out"
check megatron3d-pipeline grep -q '2 stages x 1 chunk, 1f1b, 4 micro-batches, 4 devices per group, megatron-tp programs' "$tmp/out"
check megatron3d-file python3 -c "
import json; d=json.load(open('$tmp/m3d.json')); s=d['stages']
assert len(s) == 2 and all(x['plan']['replicas'] == 2 for x in s), d"
expect megatron3d-sim 0 "$bin" "$gsmall" -c "$hosts4" -s megatron:tp=4,pp=2,v=2,sp=off
check megatron3d-sim-layout grep -q '^megatron    tp=4,pp=2,dp=1,mbs=1,v=2,sp=off: ' "$tmp/out"
check megatron3d-sim-interleaved grep -q '2 stages x 2 chunks, interleaved, 8 micro-batches' "$tmp/out"
expect megatron3d-bad-key 2 "$bin" "$gsmall" -c "$hosts4" -s megatron:tq=2
check megatron3d-bad-key-msg one_line_error "--strategy megatron: unknown key 'tq' (keys tp, pp, dp, mbs, v, sp, recompute)"
expect megatron3d-bad-devices 1 "$synth" "$gsmall" -c "$hosts4" -s megatron:tp=2,pp=3 -o "$tmp/bad3d.json"
check megatron3d-bad-devices-msg one_line_error "megatron: tp 2 x pp 3 does not divide the 8 devices"
check megatron3d-bad-devices-no-file [ ! -e "$tmp/bad3d.json" ]
expect megatron3d-bad-batch 1 "$bin" "$gsmall" -c "$hosts4" -s megatron:pp=2,mbs=3
check megatron3d-bad-batch-msg one_line_error "megatron: mbs 3 x dp 2 does not divide the batch of 8 samples"
expect megatron3d-with-pipeline 2 "$bin" "$gsmall" -c "$hosts4" -s megatron --pipeline stages=2
check megatron3d-with-pipeline-msg one_line_error "--strategy megatron sets the pipeline itself"
# --pipeline auto: 1F1B pipelines of every stage count that divides the devices (and one stage);
# the fastest that fits is chosen: one stage when it fits, 2 stages under a 400 MiB limit (the
# one-stage program needs 800 MiB), none under 1 MiB (exit 1, one line)
amlp="mlp:layers=8,hidden=2048"
expect pipeline-auto 0 "$bin" "$amlp" -c "$hosts4" --pipeline auto
check pipeline-auto-rows [ "$(grep -cE '^stages=(1|2|4|8),schedule=1f1b,micro_batches=' "$tmp/out")" -eq 4 ]
check pipeline-auto-chosen grep -q '^chosen      stages=1,schedule=1f1b,micro_batches=1: the fastest whose stages all fit' "$tmp/out"
expect pipeline-auto-limit 0 "$synth" "$amlp" -c "$hosts4" --pipeline auto --memory-limit 400M -o "$tmp/auto.json"
check pipeline-auto-limit-chosen grep -q '^chosen      stages=2,schedule=1f1b,micro_batches=8: .*(written to -o)' "$tmp/out"
check pipeline-auto-limit-file python3 -c "
import json; d=json.load(open('$tmp/auto.json')); assert len(d['stages']) == 2, d['pipeline']"
expect pipeline-auto-none 1 "$synth" "$amlp" -c "$hosts4" --pipeline auto --memory-limit 1M -o "$tmp/none.json"
check pipeline-auto-none-msg one_line_error "--pipeline auto: no pipeline of 1 to 8 stages fits every stage's devices"
check pipeline-auto-none-no-file [ ! -e "$tmp/none.json" ]
expect pipeline-sweep 2 "$bin" "$small" -c cpu-2 --pipeline stages=2 --sweep batch=8,16
check pipeline-sweep-msg one_line_error "--pipeline takes a model, a cluster"
expect pipeline-csv 2 "$bin" "$small" -c cpu-2 --pipeline stages=2 -f csv
check pipeline-csv-msg one_line_error "--pipeline prints a table or json, not csv"
expect pipeline-all 2 "$bin" "$small" -c cpu-2 --pipeline stages=2 -s all
check pipeline-all-msg one_line_error "--pipeline: strategy 'all', expected hap"
expect pipeline-uneven 1 "$bin" "$small" -c cpu-2 --pipeline stages=3
check pipeline-uneven-msg one_line_error "3 stages do not divide the 2 devices of 'cpu-2'"
expect pipeline-micro 1 "$bin" "$small" -c cpu-2 --pipeline stages=2,micro_batches=5
check pipeline-micro-msg one_line_error "pipeline stage 0 (nodes 0..1, 'layers.0.linear' to 'layers.0.sigmoid')"

# several --pipeline options: one row each; a failed one says why and the exit status is 1
expect pipeline-rows 1 "$bin" "$pmlp" -c "$hosts4" -s dp-ev --pipeline stages=1 \
  --pipeline stages=4,micro_batches=8 --pipeline stages=4,micro_batches=16,schedule=gpipe \
  --pipeline stages=3
check pipeline-rows-count [ "$(grep -cE '^stages=[14][, ].* (1f1b|gpipe) ' "$tmp/out")" -eq 3 ]
check pipeline-rows-failed grep -q '^stages=3 .*failed: .*3 stages do not divide the 8 devices' "$tmp/out"
check pipeline-rows-stderr one_line_error "--pipeline stages=3: pipeline: 3 stages do not divide"
expect pipeline-rows-json 0 "$bin" "$pmlp" -c "$hosts4" -s dp-ev --pipeline stages=2,micro_batches=8 \
  --pipeline stages=2,micro_batches=8,schedule=gpipe -f json
check pipeline-rows-json-valid python3 - "$tmp/out" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
assert [r["schedule"] for r in rows] == ["1f1b", "gpipe"], rows
assert all(r["ok"] and r["iteration_s"] > 0 for r in rows)
# same stages and micro-batches: 1F1B holds fewer micro-batches in flight than GPipe
assert rows[0]["virtual_stages"][0]["in_flight"] < rows[1]["virtual_stages"][0]["in_flight"]
PY
expect pipeline-rows-bad-spec 2 "$bin" "$small" -c cpu-2 --pipeline stages=2 --pipeline stages=x
check pipeline-rows-bad-spec-msg one_line_error "--pipeline: stages wants an integer"

# hap-synth --pipeline writes the pipelined plan (hap-plan 2.0); a plan reader that takes one-stage
# plans names what it got; usage and write errors leave no file
expect synth-pipeline 0 "$synth" "$pmlp" -c "$hosts4" --pipeline stages=2,micro_batches=4 -o "$tmp/pp.json"
check synth-pipeline-table grep -q '2 stages x 1 chunk, 1f1b, 4 micro-batches' "$tmp/out"
check synth-pipeline-file python3 - "$tmp/pp.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
assert p["version"] == "2.0" and p["pipeline"]["groups"] == [[0, 1, 2, 3], [4, 5, 6, 7]], p["pipeline"]
assert [s["group"] for s in p["stages"]] == [0, 1]
assert p["stages"][0]["nodes"][0] == 0 and p["stages"][0]["nodes"][1] == p["stages"][1]["nodes"][0]
assert all(s["plan"]["policy"]["micro_batches"] == 4 for s in p["stages"])
assert p["predicted"]["iteration_s"] > 0
PY
expect synth-pipeline-stdout 0 "$synth" "$pmlp" -c "$hosts4" --pipeline stages=2 -o -
check synth-pipeline-stdout-plan grep -q '"version": "2.0"' "$tmp/out"
expect sim-pipelined-plan 0 "$bin" --plan "$tmp/pp.json" "$pmlp" -c "$hosts4"
check sim-pipelined-plan-stages grep -q '^pipeline    2 stages on 2 groups, 1f1b, 4 micro-batches; every device simulated' "$tmp/out"
check sim-pipelined-plan-bubble grep -q '^bubble      per group 0\.[0-9]* 0\.[0-9]* (mean' "$tmp/out"
check sim-pipelined-plan-memory grep -q '^memory      all 2 of 2 stages fit (fullest: stage [01], ' "$tmp/out"
expect sim-pipelined-plan-limit 0 "$bin" --plan "$tmp/pp.json" "$pmlp" -c "$hosts4" --memory-limit 1M
check sim-pipelined-plan-limit-msg grep -q '^memory      [01] of 2 stages fit (fullest: .* of 0.001 GiB' "$tmp/out"
expect sim-pipelined-plan-trace 0 "$bin" --plan "$tmp/pp.json" "$pmlp" -c "$hosts4" --trace "$tmp/t.json"
check sim-pipelined-plan-trace-file python3 - "$tmp/t.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
x = [e for e in t["traceEvents"] if e.get("ph") == "X"]
ranks = {e["pid"] for e in x}
assert len(ranks) == 8, ranks  # every device of both groups
cats = {e.get("cat") for e in x}
assert {"compute", "p2p", "tail"} <= cats, cats
sends = [e for e in x if e["name"].endswith(".send")]
assert sends and all(e["dur"] > 0 for e in sends), sends[:2]
PY
expect sim-pipelined-plan-tasks 1 "$bin" --plan "$tmp/pp.json" "$pmlp" -c "$hosts4" --tasks
check sim-pipelined-plan-tasks-msg one_line_error "a pipelined plan: --tasks and --no-fold are not available"
expect synth-pipeline-compare 2 "$synth" "$pmlp" -c "$hosts4" --pipeline stages=2 --compare
says synth-pipeline-compare-msg "--pipeline takes --strategy, --policy"
expect synth-pipeline-bad 2 "$synth" "$pmlp" -c "$hosts4" --pipeline stages=2,chunks=x -o "$tmp/bad.json"
check synth-pipeline-bad-nofile [ ! -e "$tmp/bad.json" ]
expect synth-pipeline-fails 1 "$synth" "$pmlp" -c "$hosts4" --pipeline stages=3 -o "$tmp/bad.json"
check synth-pipeline-fails-nofile [ ! -e "$tmp/bad.json" ]

echo "test_hap_sim: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
