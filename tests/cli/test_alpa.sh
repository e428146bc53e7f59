#!/usr/bin/env bash
# The alpa strategy (Alpa's intra-operator pass, synth/alpa.c; issue 16):
#   contains   on a homogeneous cluster with no memory pressure (paper-homo, 1, 2 and 4 GPUs per
#              host), alpa's plan simulates no slower than dp-ev's and megatron-tp's for every zoo
#              model: its search space holds their programs (acceptance 2)
#   hetero     a plan for every zoo model on paper-hetero at 8 to 64 GPUs, valid for hap-sim
#   memory     a program over the memory limit, with the policy forced, is refused in one line
#              naming the device, its need and its limit (acceptance 5)
#   inter      a model whose training state does not fit one device (a small gpt under -m 20M on
#              4 devices): the inter-operator pass slices it into a pipeline that beats one stage,
#              writes a pipelined plan (hap-plan 2.0) and hap-sim simulates it
# Usage: test_alpa.sh HAP_SYNTH HAP_SIM [quick]
# quick (the sanitizer build): 1 and 2 GPUs per host, no 64-GPU points.
set -u
synth=$1 sim=$2 quick=${3:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

# simulated PLAN: hap-sim's iteration of a plan file, s
simulated() { "$sim" --plan "$1" -f csv -q | sed -n 2p | cut -d, -f5; }

models=(mlp vgg19 vit bert-base bert-moe gpt)
spec_of() { # MODEL K: HAP's configuration, 32 samples per GPU (gpt 4); bert-moe 2 experts per GPU
  case $1 in
  bert-moe) echo "bert-moe:batch=$((32 * 8 * $2)),experts=$((16 * $2))" ;;
  gpt) echo "gpt:batch=$((4 * 8 * $2))" ;;
  *) echo "$1:batch=$((32 * 8 * $2))" ;;
  esac
}
ks=(1 2 4)
[ "$quick" = quick ] && ks=(1 2)
n=0
for k in "${ks[@]}"; do
  for m in "${models[@]}"; do
    spec=$(spec_of "$m" "$k") cluster="paper-homo:gpus_per_host=$k"
    for s in alpa dp-ev megatron-tp; do
      if ! "$synth" "$spec" -c "$cluster" -s "$s" -o "$tmp/$s.json" -q 2>"$tmp/err"; then
        echo "FAIL contains $spec k=$k: hap-synth -s $s: $(head -1 "$tmp/err")"
        fail=1
        continue 2
      fi
    done
    a=$(simulated "$tmp/alpa.json") d=$(simulated "$tmp/dp-ev.json") t=$(simulated "$tmp/megatron-tp.json")
    if python3 -c "import sys; a,d,t=map(float,sys.argv[1:]); sys.exit(0 if a <= min(d,t)*(1+1e-9) else 1)" "$a" "$d" "$t"; then
      n=$((n + 1))
    else
      echo "FAIL contains $spec on $cluster: alpa $a s, dp-ev $d s, megatron-tp $t s"
      fail=1
    fi
  done
done
echo "ok   contains: alpa no slower than dp-ev and megatron-tp at $n points"

hk=(1 2 4 8)
[ "$quick" = quick ] && hk=(1 2)
n=0
for k in "${hk[@]}"; do
  for m in "${models[@]}"; do
    spec=$(spec_of "$m" "$k") cluster="paper-hetero:gpus_per_host=$k"
    if "$synth" "$spec" -c "$cluster" -s alpa -o "$tmp/h.json" -q 2>"$tmp/err" &&
      [ -n "$(simulated "$tmp/h.json")" ]; then
      n=$((n + 1))
    else
      echo "FAIL hetero $spec on $cluster: $(head -1 "$tmp/err")"
      fail=1
    fi
  done
done
echo "ok   hetero: $n alpa plans on paper-hetero simulated"

"$synth" 'mlp:layers=2' -c paper-hetero:gpus_per_host=1,hosts=1 -s alpa -m 1M \
  --policy zero=0,recompute=none,micro_batches=1 -o "$tmp/no.json" >"$tmp/out" 2>"$tmp/err"
rc=$?
want="alpa: the intra-operator program needs .* on v100:0 (V100-16GB), over its 1.00 MiB"
if [ "$rc" -ne 0 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "$want" "$tmp/err" &&
  [ ! -e "$tmp/no.json" ]; then
  echo "ok   memory: $(cut -c1-120 "$tmp/err")"
else
  echo "FAIL memory: exit $rc, expected one line matching '$want'; got:"
  sed 's/^/  /' "$tmp/err" | head -3
  fail=1
fi
spec='gpt:layers=4,batch=16,seq=64,width=256,heads=4,vocab=512'
if "$synth" "$spec" -c paper-homo:gpus_per_host=2,hosts=2 -s alpa -m 20M -o "$tmp/pipe.json" \
  >"$tmp/out" 2>"$tmp/err" &&
  grep -qE '^strategy    alpa: inter-operator pass: [0-9]+ stages x [0-9]+ devices' "$tmp/out" &&
  grep -q 'chosen: the fastest that fits' "$tmp/out" &&
  grep -q '"version": "2.0"' "$tmp/pipe.json" && [ -n "$(simulated "$tmp/pipe.json")" ]; then
  echo "ok   inter: $(grep '^strategy' "$tmp/out" | cut -c13-), simulated $(simulated "$tmp/pipe.json") s"
else
  echo "FAIL inter: expected an alpa pipeline; got:"
  sed 's/^/  /' "$tmp/out" "$tmp/err" | head -8
  fail=1
fi
exit "$fail"
