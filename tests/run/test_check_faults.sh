#!/usr/bin/env bash
# hap-run --check reports every deliberate fault (HAP_FAULT, run/fault.h) as 'check: FAILED' naming
# the tensor and rank that were corrupted, and exits 1: a NaN loss, a NaN gradient element, a 0.1 %
# gradient error, one rank's replica drifting, a skipped gradient all-reduce and a wrong update, on
# a data-parallel plan, a tensor-parallel plan (sharded parameters), a ZeRO plan (sharded
# parameter storage), a plan under policy ZeRO-1 (sharded optimizer state) and a 2-D plan (replica
# all-reduces); a skipped recomputation under full and selective recomputation. The same runs
# without the fault pass, and test_check.sh itself fails under each kind of fault.
# Usage: test_check_faults.sh HAP_SYNTH HAP_RUN [quick]
# quick (the sanitizer build): one case per kind of fault and plan, and test_check.sh under one
# fault only (each run is ~10x slower under ASan).
set -u
synth=$1 run=$2 quick=${3:-}
judge="$(dirname "$0")/check_passed.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL $*"; sed 's/^/  /' "$tmp/err" "$tmp/out" | grep -v '^  ---\|^  $' | head -12; }

# run_case NAME NP MODEL CLUSTER PLAN FAULT: the fault is reported with its tensor and rank
run_case() {
  local name=$1 np=$2 m=$3 c=$4 plan=$5 fault=$6
  HAP_FAULT=$fault timeout 300 mpirun --oversubscribe -np "$np" "$run" "$plan" -m "$m" -c "$c" \
    --check -n 1 -w 1 -q >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  [ "$rc" -eq 1 ] || { bad "$name: exit $rc, expected 1"; return; }
  local said kind tensor where rank
  said=$(grep -o "HAP_FAULT: injecting [a-z-]* of '[^']*' on \(rank [0-9]*\|every rank\)" "$tmp/err" | head -1)
  [ -n "$said" ] || { bad "$name: no 'HAP_FAULT: injecting' line on stderr"; return; }
  kind=$(sed "s/^HAP_FAULT: injecting \([a-z-]*\) .*/\1/" <<<"$said")
  tensor=$(sed "s/^[^']*'\([^']*\)'.*/\1/" <<<"$said")
  where=$(sed "s/.* on //" <<<"$said")
  rank='[0-9]+'
  [[ $where =~ ^rank\ ([0-9]+)$ ]] && rank=${BASH_REMATCH[1]}
  # a failure names one rank, or every rank holding the identical copy: "on ranks 0,2,3:"
  local on="on ranks? ([0-9]+,)*$rank(,[0-9]+)*:"
  local t=${tensor//./\\.}
  local want
  case "$kind" in
  nan-loss) want="^check: FAILED: loss on rank $rank: its share is nan" ;;
  nan-grad) want="^check: FAILED: gradient of '$t' $on element [0-9]+ is nan" ;;
  grad-error | skip-all-reduce) want="^check: FAILED: gradient of '$t' $on (element|relative L2 error)" ;;
  drift | bad-update) want="^check: FAILED: value of '$t' $on (element|relative L2 error)" ;;
  *) bad "$name: unknown kind '$kind'"; return ;;
  esac
  if grep -Eq "$want" "$tmp/out" && grep -q '^check: FAILED: [0-9]* differences' "$tmp/out"; then
    ok
    echo "ok   $name: $(grep -E "$want" "$tmp/out" | head -1 | cut -c1-150)"
  else
    bad "$name: no line matching \"$want\""
  fi
}

# clean NAME NP MODEL CLUSTER PLAN [TOLERANCES]: without a fault the same run passes
clean() {
  timeout 300 mpirun --oversubscribe -np "$2" "$run" "$5" -m "$3" -c "$4" --check -n 1 -w 1 -q \
    >"$tmp/out" 2>"$tmp/err" && bash "$judge" "$tmp/out" ${6:-} >/dev/null && { ok; return; }
  bad "$1: the run without a fault did not pass"
}

mlp="mlp:layers=2,batch=24,seq=8,hidden=32"
"$synth" "$mlp" -c cpu-2 -s dp-ev -o "$tmp/dp.json" -q || { echo "hap-synth dp-ev failed"; exit 1; }
clean dp 2 "$mlp" cpu-2 "$tmp/dp.json"
for f in nan-loss nan-grad,rank=1 grad-error,rank=1 drift,rank=1 skip-all-reduce bad-update \
  "grad-error,rank=0,tensor=layers.1.linear.bias"; do
  run_case "dp $f" 2 "$mlp" cpu-2 "$tmp/dp.json" "$f"
done

# tensor parallel: each rank holds a slice of the weights
bert="bert-base:layers=1,batch=8,seq=8,width=16,heads=2,vocab=32"
"$synth" "$bert" -c cpu-2 -s megatron-tp -o "$tmp/tp.json" -q || { echo "hap-synth megatron-tp failed"; exit 1; }
clean tp 2 "$bert" cpu-2 "$tmp/tp.json"
tp_kinds="grad-error,rank=1 drift,rank=1 nan-grad,rank=0 bad-update,rank=1"
[ "$quick" = quick ] && tp_kinds="drift,rank=1"
for f in $tp_kinds; do
  run_case "tp $f" 2 "$bert" cpu-2 "$tmp/tp.json" "$f"
done

# ZeRO: the replicated parameters stored as shards
"$synth" "$mlp" -c cpu-2 -s dp-ev -o "$tmp/dp.json" -q
/usr/bin/python3 - "$tmp/dp.json" "$tmp/zero.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
n = 0
for s in p["steps"]:
    if s.get("storage") == "replicated":
        s["storage"] = "zero"
        n += 1
assert n > 0, "no replicated storage to turn into zero"
json.dump(p, open(sys.argv[2], "w"))
PY
clean zero 2 "$mlp" cpu-2 "$tmp/zero.json"
zero_kinds="grad-error,rank=1 drift,rank=0 bad-update"
[ "$quick" = quick ] && zero_kinds="grad-error,rank=1"
for f in $zero_kinds; do
  run_case "zero $f" 2 "$mlp" cpu-2 "$tmp/zero.json" "$f"
done

# policy ZeRO-1: each rank updates its rows of a replicated parameter (gradient reduce-scattered,
# optimizer state for those rows only) and all-gathers them
"$synth" "$mlp" -c cpu-2 -s dp-ev --policy optimizer=momentum,zero=1 -o "$tmp/zero1.json" -q ||
  { echo "hap-synth zero=1 failed"; exit 1; }
clean zero1 2 "$mlp" cpu-2 "$tmp/zero1.json"
zero1_kinds="skip-all-reduce drift,rank=1 bad-update,rank=0"
[ "$quick" = quick ] && zero1_kinds="skip-all-reduce"
for f in $zero1_kinds; do
  run_case "zero1 $f" 2 "$mlp" cpu-2 "$tmp/zero1.json" "$f"
done

# 2-D: megatron-tp on 2 hosts x 2 ranks; the replicas all-reduce the gradients
two="paper-homo:gpus_per_host=2,hosts=2"
"$synth" "$mlp" -c "$two" -s megatron-tp -o "$tmp/2d.json" -q || { echo "hap-synth 2-D failed"; exit 1; }
clean 2d 4 "$mlp" "$two" "$tmp/2d.json"
for f in skip-all-reduce drift,rank=3; do
  run_case "2d $f" 4 "$mlp" "$two" "$tmp/2d.json" "$f"
done

# mixed precision compares relative L2 errors (run/check.h): a skipped all-reduce and a wrong update
# still fail under bf16, and a wrong update under fp16
"$synth" "$mlp" -c cpu-2 -s dp-ev --policy precision=bf16 -o "$tmp/bf16.json" -q ||
  { echo "hap-synth bf16 failed"; exit 1; }
clean bf16 2 "$mlp" cpu-2 "$tmp/bf16.json" "2e-02 1e-01 1e-01"
for f in skip-all-reduce bad-update; do
  run_case "bf16 $f" 2 "$mlp" cpu-2 "$tmp/bf16.json" "$f"
done

# recomputation: the dropped activations are NaN until recomputed, so skipping the recomputation
# fails (fine-grained gpt: full drops the layer's inside, selective the attention scores)
gpt="gpt:layers=1,batch=8,seq=8,width=16,heads=2,vocab=32,granularity=fine"
recompute_kinds="full selective"
[ "$quick" = quick ] && recompute_kinds="selective"
for rc_kind in $recompute_kinds; do
  "$synth" "$gpt" -c cpu-2 -s dp-ev --policy "recompute=$rc_kind" -o "$tmp/rc.json" -q ||
    { echo "hap-synth recompute=$rc_kind failed"; exit 1; }
  clean "recompute=$rc_kind" 2 "$gpt" cpu-2 "$tmp/rc.json"
  HAP_FAULT=skip-recompute timeout 300 mpirun --oversubscribe -np 2 "$run" "$tmp/rc.json" -m "$gpt" \
    -c cpu-2 --check -n 1 -w 1 -q >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [ "$rc" -eq 1 ] && grep -q "HAP_FAULT: injecting skip-recompute on every rank" "$tmp/err" &&
    grep -Eq "^check: FAILED: gradient of '[^']+' on ranks? [0-9,]+: element [0-9]+ is nan" "$tmp/out"; then
    ok
    echo "ok   recompute=$rc_kind skip-recompute: $(grep -m1 '^check: FAILED: gradient' "$tmp/out" | cut -c1-150)"
  else
    bad "recompute=$rc_kind skip-recompute: exit $rc, expected a NaN gradient reported"
  fi
done
# ... and a plan that recomputes nothing cannot skip it
HAP_FAULT=skip-recompute mpirun --oversubscribe -np 2 "$run" "$tmp/dp.json" -m "$mlp" -c cpu-2 \
  --check -n 1 -w 1 -q >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ "$rc" -eq 1 ] && grep -q "skip-recompute: the plan recomputes nothing" "$tmp/err"; then ok; else bad "skip-recompute without recomputation: exit $rc"; fi

# a bad HAP_FAULT is one clear line, not a silent pass
HAP_FAULT=nosuch mpirun --oversubscribe -np 2 "$run" "$tmp/dp.json" -m "$mlp" -c cpu-2 --check \
  -n 1 -w 1 -q >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ "$rc" -eq 1 ] && grep -q "HAP_FAULT='nosuch': unknown kind" "$tmp/err"; then ok; else bad "bad HAP_FAULT: exit $rc"; fi
HAP_FAULT=drift,tensor=nosuch mpirun --oversubscribe -np 2 "$run" "$tmp/dp.json" -m "$mlp" -c cpu-2 \
  --check -n 1 -w 1 -q >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ "$rc" -eq 1 ] && grep -q "'nosuch' is not a trainable parameter" "$tmp/err"; then ok; else bad "bad HAP_FAULT tensor: exit $rc"; fi

# the suite's own --check test (test_check.sh, as ctest runs it) fails under every fault
kinds="nan-loss nan-grad,rank=1 grad-error,rank=1 drift,rank=1 skip-all-reduce bad-update"
[ "$quick" = quick ] && kinds="grad-error,rank=1"
for f in $kinds; do
  if HAP_FAULT=$f bash "$(dirname "$0")/test_check.sh" "$synth" "$run" 2 cpu-2 dp-ev "^mlp" \
    >"$tmp/out" 2>"$tmp/err"; then
    bad "test_check.sh passed under HAP_FAULT=$f"
  else
    ok
  fi
done

echo "test_check_faults: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
