#!/usr/bin/env bash
# hap-run end to end: usage errors, plans for another graph/cluster or rank count, the trace
# (valid JSON, per-lane nesting, every measured task has a simulated twin of the same name), and
# a rank killed mid-run ending every rank with a clear error.
# Usage: test_run.sh HAP_SYNTH HAP_RUN
set -u
synth=$1 run=$2
judge="$(dirname "$0")/check_passed.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
pass=0 fail=0
expect() { # expect NAME STATUS COMMAND...
  local name=$1 want=$2
  shift 2
  timeout 120 "$@" >"$tmp/out" 2>"$tmp/err"
  local got=$?
  if [ "$got" -eq "$want" ]; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL $name: exit $got, expected $want"
    sed 's/^/  /' "$tmp/err" "$tmp/out" | head -8
  fi
}
check() { # check NAME COMMAND...
  local name=$1
  shift
  if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $name"; fi
}
m="bert-base:layers=1,batch=8,seq=8,width=16,heads=2,vocab=32"
mpi=(mpirun --oversubscribe -np 2)
"$synth" "$m" -c cpu-2 -o "$tmp/plan.json" -q || { echo "hap-synth failed"; exit 1; }

expect help 0 "$run" --help
check help-text grep -q '^Usage: mpirun -np N hap-run' "$tmp/out"
expect no-plan 2 "${mpi[@]}" "$run"
# --model and --cluster default to the specs hap-synth recorded in the plan
expect plan-alone 0 "${mpi[@]}" "$run" "$tmp/plan.json" -n 1 -w 0
check plan-alone-spec grep -q "\"spec\": \"$m\"" "$tmp/plan.json"
sed 's/, "spec": "[^"]*"//' "$tmp/plan.json" >"$tmp/nospec.json"
expect no-spec 1 "${mpi[@]}" "$run" "$tmp/nospec.json" -c cpu-2 -n 1 -w 0
check no-spec-msg grep -q "nospec.json: the plan does not record its model (made by an older hap-synth, or edited): give --model" "$tmp/err"
expect no-spec-given 0 "${mpi[@]}" "$run" "$tmp/nospec.json" -m "$m" -c cpu-2 -n 1 -w 0
# a plan made from a graph file runs from it alone, and is refused once the file changed
"$(dirname "$synth")/hap-model" export "$m" -o "$tmp/g.json" ||
  { echo "hap-model export failed"; exit 1; }
"$synth" "$tmp/g.json" -c cpu-2 -o "$tmp/gplan.json" -q || { echo "hap-synth g.json failed"; exit 1; }
expect graph-file 0 "${mpi[@]}" "$run" "$tmp/gplan.json" -n 1 -w 0
"$(dirname "$synth")/hap-model" export "${m/layers=1/layers=2}" -o "$tmp/g.json" ||
  { echo "hap-model export failed"; exit 1; }
expect graph-file-changed 1 "${mpi[@]}" "$run" "$tmp/gplan.json" -n 1 -w 0
check graph-file-changed-msg grep -q "gplan.json: graph: made for graph 'bert-base' digest [0-9a-f]*, this graph 'bert-base' has digest [0-9a-f]*; re-run hap-synth" "$tmp/err"
# an unwritable --trace is refused before the run, in one line naming it (no iteration ran)
expect trace-unwritable 1 "${mpi[@]}" "$run" "$tmp/plan.json" -m "$m" -c cpu-2 -n 1 -w 0 \
  -t "$tmp/no/such/dir/t.json"
check trace-unwritable-msg grep -q "rank 0: $tmp/no/such/dir/t.json: cannot create a temporary file next to it" "$tmp/err"
check trace-unwritable-before-run bash -c "! grep -q '^iteration' '$tmp/out'"
# --task-times: every rank's tasks in every iteration (warm-ups flagged), s from the rank's
# iteration start, each rank's last task ending within the iteration hap-run reports; refused
# before the run when it cannot be written
expect task-times 0 "${mpi[@]}" "$run" "$tmp/plan.json" -m "$m" -c cpu-2 -n 3 -w 1 -f json \
  --task-times "$tmp/tt.csv"
check task-times-file python3 - "$tmp/tt.csv" "$tmp/out" <<'PY'
import csv, json, statistics, sys
rows = list(csv.reader(open(sys.argv[1], newline="")))
assert rows[0] == "rank,iteration,timed,task,name,kind,phase,waits,start_s,end_s".split(","), rows[0]
by = {}
for r in rows[1:]:
    rank, it, timed, task = map(int, r[:4])
    assert timed == (it >= 1), r
    assert r[5] in ("compute", "local", "collective", "update") and r[6] in ("fwd", "bwd", "upd"), r
    assert r[7] == ("1" if r[5] == "collective" else "0"), r  # no --overlap: collectives wait
    s, e = float(r[8]), float(r[9])
    assert 0 <= s <= e < 10, r
    by.setdefault((rank, it), {})[task] = (r[4], e)
assert sorted(by) == [(r, i) for r in (0, 1) for i in range(4)], sorted(by)
assert len({tuple(sorted(v)) for v in by.values()}) == 1, "every rank runs the same tasks"
last = statistics.mean(max(max(e for _, e in by[r, i].values()) for r in (0, 1)) for i in (1, 2, 3))
meas = json.load(open(sys.argv[2]))["measured_mean_s"]
assert 0.5 * meas <= last <= meas * (1 + 1e-6), (last, meas)
PY
check task-times-skew python3 "$(dirname "$0")/../../reports/rank-skew.py" "$tmp/tt.csv"
expect task-times-unwritable 1 "${mpi[@]}" "$run" "$tmp/plan.json" -m "$m" -c cpu-2 -n 1 -w 0 \
  --task-times "$tmp/no/such/dir/tt.csv"
check task-times-unwritable-msg grep -q "rank 0: $tmp/no/such/dir/tt.csv: cannot create a temporary file next to it" "$tmp/err"
expect bad-iters 2 "${mpi[@]}" "$run" "$tmp/plan.json" -m "$m" -c cpu-2 --iters x
expect bad-backend 2 "${mpi[@]}" "$run" "$tmp/plan.json" -m "$m" -c cpu-2 --backend nosuch
check bad-backend-msg grep -q "unknown backend 'nosuch' (expected cpu or cuda)" "$tmp/err"
expect cuda-emulate 2 "${mpi[@]}" "$run" "$tmp/plan.json" -m "$m" -c cpu-2 --backend cuda \
  --emulate-speed 1,1
expect cpu-backend 0 "${mpi[@]}" "$run" "$tmp/plan.json" -m "$m" -c cpu-2 --backend cpu \
  --threads 1 -n 1 -w 0
expect bad-speed 2 "${mpi[@]}" "$run" "$tmp/plan.json" -m "$m" -c cpu-2 --emulate-speed 1,2
expect speed-count 1 "${mpi[@]}" "$run" "$tmp/plan.json" -m "$m" -c cpu-2 --emulate-speed 1,1,1
expect other-graph 1 "${mpi[@]}" "$run" "$tmp/plan.json" -m "mlp" -c cpu-2
check other-graph-msg grep -q 'digest' "$tmp/err"
expect other-cluster 1 "${mpi[@]}" "$run" "$tmp/plan.json" -m "$m" -c cpu-2:intra_gbps=5
expect sim-cluster-other 1 "${mpi[@]}" "$run" "$tmp/plan.json" -m "$m" -c cpu-2 \
  --sim-cluster paper-hetero:gpus_per_host=1,hosts=1
check sim-cluster-other-msg grep -q 'devices differ' "$tmp/err"
expect sim-cluster-same 0 "${mpi[@]}" "$run" "$tmp/plan.json" -m "$m" -c cpu-2 \
  --sim-cluster cpu-2:intra_gbps=5 -n 1 -w 0
# a plan with a training policy hap-run cannot execute yet (ZeRO on a pipelined plan) is refused,
# naming the policy
"$synth" "$m" -c cpu-2 --pipeline stages=2,micro_batches=2 \
  --policy precision=bf16,optimizer=adam,zero=1 -o "$tmp/policy.json" -q ||
  { echo "hap-synth --policy failed"; exit 1; }
expect policy-refused 1 "${mpi[@]}" "$run" "$tmp/policy.json" -m "$m" -c cpu-2 -n 1 -w 0
check policy-refused-msg grep -q "trains with --policy precision=bf16,optimizer=adam,zero=1,micro_batches=2; hap-run shards optimizer state (zero=1) on plans of one data-parallel group only so far, and this plan is pipelined" "$tmp/err"
expect check-one-iteration 2 "${mpi[@]}" "$run" "$tmp/plan.json" -m "$m" -c cpu-2 --check -n 1 -w 0
check check-one-iteration-msg grep -q -- '--warmup + --iters must be at least 2' "$tmp/err"
expect rank-count 1 mpirun --oversubscribe -np 3 "$run" "$tmp/plan.json" -m "$m" -c cpu-2
check rank-count-msg grep -q 'mpirun -np 2' "$tmp/err"
# a pipelined plan (hap-plan 2.0) runs (tests/run/test_check_pipeline.sh checks its values); on
# the wrong number of ranks it is refused in one line before any work
"$synth" "$m" -c cpu-2 --pipeline stages=2,micro_batches=2 -o "$tmp/pipe.json" -q ||
  { echo "hap-synth --pipeline failed"; exit 1; }
expect pipelined-run 0 "${mpi[@]}" "$run" "$tmp/pipe.json" -m "$m" -c cpu-2 -n 2 -w 1 \
  -t "$tmp/pipe-trace.json"
check pipelined-run-msg grep -q "^pipeline    2 stages on 2 device groups, 1f1b, 2 micro-batches" "$tmp/out"
check pipelined-busy grep -q "^busy        per rank in ops, ms" "$tmp/out"
# the trace: every device's simulated rows, and each rank's 4 measured ops (1F1B, 2 micro-batches)
# and its tails, in order and without overlaps
check pipelined-trace python3 - "$tmp/pipe-trace.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
ev = [e for e in d["traceEvents"] if e["ph"] == "X"]
ops = [e for e in ev if e["name"].startswith(("stage ", "tails ("))]
assert len(ops) < len(ev), "no simulated events"
pids = sorted({e["pid"] for e in ops})
assert len(pids) == 2, pids
for pid, stage in zip(pids, (0, 1)):
    meas = sorted((e for e in ops if e["pid"] == pid), key=lambda e: e["ts"])
    names = [e["name"] for e in meas]
    assert len(names) == 5 and names[-1].startswith("tails"), names
    assert all(n.startswith("stage %d " % stage) for n in names[:4]), names
    assert sorted(names[:4]) == sorted("stage %d %s micro-batch %d" % (stage, p, j)
                                       for p in ("fwd", "bwd") for j in (0, 1)), names
    for a, b in zip(meas, meas[1:]):
        assert a["ts"] + a["dur"] <= b["ts"] + 1e-3, (a, b)
PY
expect pipelined-task-times 1 "${mpi[@]}" "$run" "$tmp/pipe.json" -m "$m" -c cpu-2 -n 1 -w 0 \
  --task-times "$tmp/pipe-tt.csv"
check pipelined-task-times-msg grep -q "pipe.json is a pipelined plan; task times are written for one-stage plans only so far" "$tmp/err"
check pipelined-task-times-no-file [ ! -e "$tmp/pipe-tt.csv" ]
expect pipelined-ranks 1 mpirun --oversubscribe -np 3 "$run" "$tmp/pipe.json" -m "$m" -c cpu-2 -n 1 -w 1
check pipelined-ranks-msg grep -q "pipe.json: the pipelined plan is for 2 devices (2 stages on 2 groups) but 3 ranks are running (start it with mpirun -np 2)" "$tmp/err"
check pipelined-ranks-once [ "$(grep -c '^hap-run:' "$tmp/err")" -eq 1 ]
check pipelined-ranks-no-work [ ! -s "$tmp/out" ]
# a stage that does not fit its devices once the schedule's in-flight micro-batches are counted
# (GPipe holds all 4 on stage 0) is refused in one line before any work
cat >"$tmp/small.json" <<'JSON'
{"format": "hap-cluster", "version": "1.0", "name": "small",
 "hosts": [{"name": "h", "count": 1, "devices_per_host": 2,
   "device": {"kind": "cpu", "sustained_flops": {"float32": 1e10}, "memory_bytes": 100000,
              "memory_bw_Bps": 1e10},
   "intra_host": {"bandwidth_Bps": 1e10, "latency_s": 1e-6},
   "nic": {"bandwidth_Bps": 1e9, "latency_s": 1e-5}}]}
JSON
mlp="mlp:layers=2,batch=24,seq=8,hidden=32"
"$synth" "$mlp" -c "$tmp/small.json" --pipeline stages=2,schedule=gpipe,micro_batches=4 \
  -o "$tmp/small-plan.json" -q || { echo "hap-synth small failed"; exit 1; }
expect stage-too-big 1 "${mpi[@]}" "$run" "$tmp/small-plan.json" -m "$mlp" -c "$tmp/small.json" -n 1 -w 1
check stage-too-big-msg grep -q "small-plan.json: stages\[0\] needs 0.125 MiB on device 0 ('h:0'), which has 0.095 MiB (4 micro-batches in flight under gpipe)" "$tmp/err"
check stage-too-big-once [ "$(grep -c '^hap-run:' "$tmp/err")" -eq 1 ]
# a 2-D plan (megatron-tp: one replica per host) runs, with its replica all-reduces in the trace
two_hosts=paper-homo:gpus_per_host=1,hosts=2
"$synth" "$m" -c "$two_hosts" -s megatron-tp -o "$tmp/mtp.json" -q || { echo "hap-synth megatron-tp failed"; exit 1; }
expect megatron-run 0 "${mpi[@]}" "$run" "$tmp/mtp.json" -m "$m" -c "$two_hosts" -n 2 -w 1 -t "$tmp/mtp-trace.json"
check megatron-trace grep -q 'grad.replica_all_reduce' "$tmp/mtp-trace.json"
# convergence smoke test: 50 Adam iterations of a small gpt on 2 ranks at least halve the loss (it
# goes 447.4 -> 161.2 with seed 1), every loss finite, and none rises by more than 10 % at once
gpt="gpt:layers=1,batch=8,seq=8,width=16,heads=2,vocab=32"
"$synth" "$gpt" -c cpu-2 --policy optimizer=adam -o "$tmp/adam.json" -q || { echo "hap-synth adam failed"; exit 1; }
expect adam-run 0 "${mpi[@]}" "$run" "$tmp/adam.json" -m "$gpt" -c cpu-2 -n 48 -w 2 -f json
check adam-converges python3 - "$tmp/out" <<'PY'
import json, math, sys
losses = json.load(open(sys.argv[1]))["losses"]
assert len(losses) == 50, len(losses)
assert all(math.isfinite(x) for x in losses), losses
assert losses[-1] < 0.5 * losses[0], (losses[0], losses[-1])
assert all(b < 1.1 * a for a, b in zip(losses, losses[1:])), losses
PY

# a run with a trace: measured and simulated rows, twins by name, nesting per lane
expect trace 0 "${mpi[@]}" "$run" "$tmp/plan.json" -m "$m" -c cpu-2 -n 3 -w 1 -t "$tmp/t.json"
check trace-summary grep -q '^simulated' "$tmp/out"
check trace-valid python3 - "$tmp/t.json" <<'PY'
import json, sys
from collections import defaultdict
d = json.load(open(sys.argv[1]))
ev = [e for e in d["traceEvents"] if e["ph"] == "X"]
sim = defaultdict(set)
meas = defaultdict(set)
lanes = defaultdict(list)
for e in ev:
    rank, measured = (e["pid"] - 1) // 2, e["pid"] % 2 == 0
    (meas if measured else sim)[rank].add(e["args"]["task"])
    assert e["name"] == e["args"]["task"]
    lanes[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
assert set(meas) == {0, 1} and set(sim) == {0, 1}, (set(meas), set(sim))
for r in meas:
    assert meas[r] <= sim[r], meas[r] - sim[r]
for evs in lanes.values():
    evs.sort()
    stack = []
    for s, e in evs:
        while stack and stack[-1] <= s + 1e-3:
            stack.pop()
        assert not stack or e <= stack[-1] + 1e-3
        stack.append(e)
PY
expect json 0 "${mpi[@]}" "$run" "$tmp/plan.json" -m "$m" -c cpu-2 -n 2 -w 0 -f json
check json-valid python3 -c "import json; d=json.load(open('$tmp/out')); assert d['simulated_s'] > 0 and d['measured_mean_s'] > 0"
# the OpenBLAS kernel set the timings came from, and who chose it (exec/blas_core.h)
check json-blas-core python3 -c "import json; d=json.load(open('$tmp/out'))
assert d['blas_core'] not in ('', 'unknown')
assert d['blas_core_chosen_by'] in ('library', 'OPENBLAS_CORETYPE')"

# ZeRO storage (parameters stored sharded, gathered for use, gradients reduce-scattered): the
# synthesizer rarely picks it, so turn a dp-cp plan's replicated parameters into ZeRO ones
zm="mlp:layers=2,batch=24,seq=8,hidden=32"
zc="paper-hetero:gpus_per_host=1,hosts=1"
"$synth" "$zm" -c "$zc" -s dp-cp -o "$tmp/dp.json" -q
python3 - "$tmp/dp.json" "$tmp/zero.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
n = 0
for s in p["steps"]:
    if s.get("storage") == "replicated":
        s["storage"] = "zero"
        n += 1
assert n > 0
json.dump(p, open(sys.argv[2], "w"))
PY
expect zero-check 0 "${mpi[@]}" "$run" "$tmp/zero.json" -m "$zm" -c "$zc" --check -n 1 -w 1
check zero-check-passed bash "$judge" "$tmp/out"

# hand-made gpt plans (tests/data/plans): a parameter made a partial sum by keep_once (its
# gradient reaches rank 0 only, yet every rank must synchronise it), a weight all-gathered
# twice (two gradient reduce-scatters feed one update), and an Identity addend to a partial sum
# (add's partial-sum passthrough, BIAS_ONCE without any Gather: rank 0 alone adds wpe.weight and
# gets its gradient; every rank adding it gave the wrong loss)
gm="gpt:layers=1,batch=8,seq=8,width=16,heads=2,vocab=32"
data=$(cd "$(dirname "$0")/../data/plans" && pwd)
for f in run-gpt-keep-once run-gpt-gathered-twice run-gpt-bias-once; do
  expect "$f" 0 "${mpi[@]}" "$run" "$data/$f.json" -m "$gm" -c cpu-2 --check -n 1 -w 1
  check "$f-passed" bash "$judge" "$tmp/out"
done

# kill rank 1 in the middle of a long run: every rank ends with an error naming a task, quickly
"$synth" "mlp:layers=8,batch=64,seq=32,hidden=256" -c cpu-2 -o "$tmp/long.json" -q
"${mpi[@]}" "$run" "$tmp/long.json" -m "mlp:layers=8,batch=64,seq=32,hidden=256" -c cpu-2 \
  -n 100000 -w 0 --timeout 10 >"$tmp/out" 2>"$tmp/err" &
job=$!
# kill only once both ranks are iterating (each has used 1.5 s of CPU; at most 60 s of waiting):
# a fixed sleep killed a rank still starting up on a loaded machine, before any handler was set
cpu_s() { awk '{ printf "%d", ($14 + $15) / 100 * 10 }' "/proc/$1/stat" 2>/dev/null || echo 0; }
for _ in $(seq 120); do
  sleep 0.5
  pids=$(pgrep -f "hap-run $tmp/long.json")
  ready=0
  for p in $pids; do [ "$(cpu_s "$p")" -ge 15 ] && ready=$((ready + 1)); done
  [ "$ready" -ge 2 ] && break
done
pid=$(pgrep -f "hap-run $tmp/long.json" | tail -n 1)
start=$(date +%s)
[ -n "$pid" ] && kill -9 "$pid"
wait "$job"
rc=$?
took=$(($(date +%s) - start))
check kill-nonzero [ "$rc" -ne 0 ]
check kill-bounded [ "$took" -le 30 ]
check kill-message grep -q "hap-run: rank [01]: .*task '" "$tmp/err"
[ "$fail" -eq 0 ] || sed 's/^/  kill stderr: /' "$tmp/err" | head -5

echo "test_run: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
