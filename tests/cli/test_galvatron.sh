#!/usr/bin/env bash
# The galvatron strategy (Galvatron's search, pipe/galvatron.h; issue 16):
#   plans      a plan for every zoo model on paper-homo and paper-hetero at 8 to 64 GPUs, flat
#              or pipelined, that hap-sim simulates (acceptance 1)
#   gpt3       GPT-3 175B on 1,024 devices gets a pipeline (not in quick mode)
#   layers     the per-layer dynamic program follows the memory limit: no layer sharded without
#              one, some under 30 MiB, more under 16 MiB
#   memory     nothing fits: one line naming the leanest candidate and what it needed, exit 1, no
#              plan file (acceptance 5)
#   usage      a bad spec and a conflicting option: one line, exit 2; hap-sim -s galvatron says
#              how to simulate a galvatron plan
#   json       -f json: every candidate, exactly one chosen
#   compare    hap-synth --compare-seeds: alpa among the baselines, galvatron's plan and time
# Usage: test_galvatron.sh HAP_SYNTH HAP_SIM [quick]
# quick (the sanitizer build): 1 and 2 GPUs per host, no GPT-3.
set -u
synth=$1 sim=$2 quick=${3:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

simulated() { "$sim" --plan "$1" -f csv -q | sed -n 2p | cut -d, -f5; }
spec_of() { # MODEL K: HAP's configuration, 32 samples per GPU (gpt 4); bert-moe 2 experts per GPU
  case $1 in
  bert-moe) echo "bert-moe:batch=$((32 * 8 * $2)),experts=$((16 * $2))" ;;
  gpt) echo "gpt:batch=$((4 * 8 * $2))" ;;
  *) echo "$1:batch=$((32 * 8 * $2))" ;;
  esac
}

ks=(1 2 4 8)
[ "$quick" = quick ] && ks=(1 2)
n=0 pipelines=0
for cluster in paper-homo paper-hetero; do
  for k in "${ks[@]}"; do
    for m in mlp vgg19 vit bert-base bert-moe gpt; do
      spec=$(spec_of "$m" "$k")
      if "$synth" "$spec" -c "$cluster:gpus_per_host=$k" -s galvatron -o "$tmp/p.json" \
        >"$tmp/out" 2>"$tmp/err" && [ -n "$(simulated "$tmp/p.json")" ]; then
        n=$((n + 1))
        grep -q '^strategy    galvatron: pp=1,' "$tmp/out" || pipelines=$((pipelines + 1))
      else
        echo "FAIL plans $spec on $cluster:gpus_per_host=$k: $(head -1 "$tmp/err")"
        fail=1
      fi
    done
  done
done
echo "ok   plans: $n galvatron plans simulated ($pipelines pipelines)"

if [ "$quick" != quick ]; then
  if "$synth" 'gpt:preset=gpt3-175b,batch=1536' -c paper-homo:hosts=128 \
    --policy precision=fp16,optimizer=adam -s galvatron >"$tmp/out" 2>"$tmp/err" &&
    grep -qE '^strategy    galvatron: pp=[0-9]+,' "$tmp/out" &&
    ! grep -q '^strategy    galvatron: pp=1,' "$tmp/out" &&
    grep -q '^memory      every stage fits' "$tmp/out"; then
    echo "ok   gpt3: $(grep '^strategy' "$tmp/out" | cut -c13-), $(grep '^iteration' "$tmp/out" | cut -c13-30)"
  else
    echo "FAIL gpt3: expected a pipeline that fits; got:"
    sed 's/^/  /' "$tmp/out" "$tmp/err" | grep -v '^  pp=' | head -8
    fail=1
  fi
fi

model="mlp:layers=4,batch=8,seq=8,hidden=1024" small=paper-hetero:gpus_per_host=1,hosts=2
sharded() { # LIMIT...: layers the dynamic program shards, flat plan
  "$synth" "$model" -c "$small" -s galvatron:pp=1 "$@" | sed -n 's/^strategy .*,sdp=\([0-9]*\)\/.*/\1/p'
}
none=$(sharded) some=$(sharded -m 30M) more=$(sharded -m 16M)
if [ "$none" = 0 ] && [ "${some:-0}" -ge 1 ] && [ "${more:-0}" -gt "${some:-0}" ]; then
  echo "ok   layers: sharded layers $none without a limit, $some under 30 MiB, $more under 16 MiB"
else
  echo "FAIL layers: sharded layers '$none' without a limit, '$some' under 30 MiB, '$more' under 16 MiB"
  fail=1
fi

"$synth" "$model" -c "$small" -s galvatron -m 2M -o "$tmp/no.json" >"$tmp/out" 2>"$tmp/err"
rc=$?
want='galvatron: no candidate fits the memory limit: the leanest \(pp=[0-9]+,tp=.*\): stage [0-9]+ needs .* per device at the leanest .*, the limit is 2.00 MiB'
if [ "$rc" -eq 1 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -qE "$want" "$tmp/err" &&
  [ ! -e "$tmp/no.json" ]; then
  echo "ok   memory: $(cut -c1-140 "$tmp/err")"
else
  echo "FAIL memory: exit $rc, expected one line matching '$want'; got:"
  sed 's/^/  /' "$tmp/err" | head -3
  fail=1
fi

usage() { # NAME WANT ARGS...: exit 2, the first line matching WANT
  local name=$1 want=$2
  shift 2
  "$synth" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ "$rc" -eq 2 ] && head -1 "$tmp/err" | grep -q "$want"; then
    echo "ok   usage $name: $(head -1 "$tmp/err")"
  else
    echo "FAIL usage $name: exit $rc, expected 2 and '$want'; got: $(head -1 "$tmp/err")"
    fail=1
  fi
}
usage pp "galvatron: pp='3', expected a power of two" mlp -c paper-homo -s galvatron:pp=3
usage key "galvatron: unknown key 'dp' (keys pp, tp)" mlp -c paper-homo -s galvatron:dp=2
usage pipeline "not with --pipeline" mlp -c paper-homo -s galvatron --pipeline stages=2
"$sim" mlp -c paper-homo -s galvatron >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ "$rc" -eq 2 ] && head -1 "$tmp/err" | grep -q "hap-synth MODEL -c CLUSTER -s galvatron -o plan.json, then simulate it with hap-sim --plan"; then
  echo "ok   usage hap-sim: $(head -1 "$tmp/err" | cut -c1-100)"
else
  echo "FAIL usage hap-sim: exit $rc, expected 2 and the way to simulate a galvatron plan; got: $(head -1 "$tmp/err")"
  fail=1
fi

if "$synth" bert-base -c paper-homo:gpus_per_host=2 -s galvatron -f json >"$tmp/j.json" 2>"$tmp/err" &&
  python3 - "$tmp/j.json" <<'PY'; then
import json, sys
r = json.load(open(sys.argv[1]))
chosen = [c for c in r["candidates"] if c["chosen"]]
assert r["strategy"] == "galvatron" and len(chosen) == 1, r.get("strategy")
assert chosen[0]["fits"] and chosen[0]["iteration_s"] > 0 and chosen[0]["model_s"] > 0
PY
  echo "ok   json: $(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(len(r["candidates"]), "candidates")' "$tmp/j.json")"
else
  echo "FAIL json: $(head -1 "$tmp/err")"
  fail=1
fi
if "$synth" bert-base -c paper-hetero:gpus_per_host=2 --compare-seeds -f json >"$tmp/c.json" \
  2>"$tmp/err" && python3 - "$tmp/c.json" <<'PY'; then
import json, sys
d = json.load(open(sys.argv[1]))
names = [b["strategy"] for b in d["baselines"]]
assert names == ["dp-ev", "dp-cp", "megatron-tp", "alpa"], names
g = d["galvatron"]
assert g["plan"].startswith("pp=") and g["simulated_iteration_s"] > 0, g
assert abs(g["speedup"] - g["simulated_iteration_s"] / d["simulated_iteration_s"]) < 1e-9, g
PY
  echo "ok   compare: $(python3 -c 'import json,sys; g=json.load(open(sys.argv[1]))["galvatron"]; print(g["plan"], "%.3f s" % g["simulated_iteration_s"])' "$tmp/c.json")"
else
  echo "FAIL compare: $(head -1 "$tmp/err")"
  fail=1
fi
exit "$fail"
