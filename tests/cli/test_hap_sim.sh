#!/usr/bin/env bash
# End-to-end checks of hap-sim: the bundled study, sweeps, plans from hap-synth (and plans made for
# another graph or cluster), traces, formats, and usage errors.
# Usage: test_hap_sim.sh HAP_SIM_BINARY HAP_SYNTH_BINARY
set -u
bin=$1
synth=$2
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
one_line_error() { # the error is exactly one line naming $1
  [ "$(grep -c . "$tmp/err")" -le 2 ] && grep -q "$1" "$tmp/err"
}

small="mlp:layers=2,batch=24,seq=8,hidden=32"

expect help 0 "$bin" --help
check help-text grep -q '^Usage: hap-sim' "$tmp/out"
expect version 0 "$bin" --version

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
check sweep-unknown-key-model grep -q "batch" "$tmp/err"
expect sweep-bad-form 2 "$bin" "$small" -c cpu-2 -w gpus_per_host
expect sweep-empty-value 2 "$bin" "$small" -c cpu-2 -w gpus_per_host=1,,2
expect sweep-bad-value 1 "$bin" "$small" -c paper-hetero -w gpus_per_host=0
check sweep-bad-value-msg one_line_error "gpus_per_host"
expect sweep-twice 2 "$bin" "$small" -c cpu-2 -w batch=8 -w batch=16
expect sweep-unknown-preset 2 "$bin" "$small" -c cpu-2 -w 'device[cpu]=V100-16'
check sweep-unknown-preset-suggests grep -q "did you mean" "$tmp/err"
printf '\x89HDF\r\n\x1a\n' >"$tmp/fake.h5"
expect sweep-profile-param 2 "$bin" "$small" -c "$tmp/fake.h5" -w inter_gbps=10,20
check sweep-profile-param-msg one_line_error "not to the measured profile"
expect sweep-no-such-device 1 "$bin" "$small" -c cpu-2 -w 'device[H100]=V100-16GB'

# plans from hap-synth, and plans made for something else
expect synth-plan 0 "$synth" "$small" -c cpu-2 -o "$tmp/plan.json" -q
expect plan 0 "$bin" "$small" -c cpu-2 --plan "$tmp/plan.json"
check plan-row grep -q ' hap ' "$tmp/out"
expect plan-other-graph 1 "$bin" "mlp:layers=3,batch=24,seq=8,hidden=32" -c cpu-2 --plan "$tmp/plan.json"
check plan-other-graph-msg one_line_error "digest"
expect plan-other-cluster 1 "$bin" "$small" -c cpu-2:intra_gbps=5 --plan "$tmp/plan.json"
check plan-other-cluster-msg one_line_error "digest"
expect plan-other-size 1 "$bin" "$small" -c paper-hetero:gpus_per_host=1 --plan "$tmp/plan.json"
head -c 100 "$tmp/plan.json" >"$tmp/truncated.json"
expect plan-truncated 1 "$bin" "$small" -c cpu-2 --plan "$tmp/truncated.json"
check plan-truncated-msg one_line_error "truncated.json"
expect plan-missing 1 "$bin" "$small" -c cpu-2 --plan "$tmp/nope.json"
expect plan-and-strategy 2 "$bin" "$small" -c cpu-2 --plan "$tmp/plan.json" -s hap
expect plan-and-sweep 2 "$bin" "$small" -c cpu-2 --plan "$tmp/plan.json" -w batch=8

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
check trace-several-files [ -f "$tmp/s.hap.json" ] && [ -f "$tmp/s.dp-ev.json" ] && [ -f "$tmp/s.dp-cp.json" ]
check trace-twins python3 - "$tmp/s.hap.json" "$tmp/s.dp-ev.json" <<'PY'
import json, sys
names = [{e["name"] for e in json.load(open(p))["traceEvents"] if e["ph"] == "X" and e["name"].endswith(".fwd")} for p in sys.argv[1:]]
assert names[0] and names[0] == names[1], names[0] ^ names[1]
PY
expect trace-unwritable 1 "$bin" "$small" -c cpu-2 -s hap -t /nonexistent-dir/t.json
check trace-unwritable-msg grep -q "nonexistent-dir" "$tmp/err"

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
expect bad-strategy 2 "$bin" "$small" -s megatron
expect bad-format 2 "$bin" "$small" -f yaml
expect two-models 2 "$bin" mlp vit
expect bad-trace-devices 2 "$bin" "$small" --trace-devices -1
expect bad-model 1 "$bin" nosuchmodel -c cpu-2
expect bad-cluster 1 "$bin" "$small" -c nosuchcluster

echo "test_hap_sim: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
