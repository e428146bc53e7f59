#!/usr/bin/env bash
# The study of every strategy (issue 16): hap, dp-ev, dp-cp, megatron (the best tp x pp x dp
# layout found by enumerating them), galvatron and alpa, each on one cost model and one simulator.
# For every model and cluster: each strategy's plan simulated by hap-sim --plan (iteration, the
# fullest device's memory), the wall time of its hap-synth run (the search), and the winner.
#   models    HAP's zoo at HAP's configuration (32 samples per GPU, gpt 4, bert-moe 2 experts per
#             GPU; fp32 SGD), GPT 1.3B and GPT-3 6.7B (fp16 with Adam, 4 samples per GPU)
#   clusters  paper-homo and paper-hetero (64 GPUs), a100-h100 (16 A100 + 16 H100)
#   GPT-3 175B (fp16, Adam, batch 1536) on paper-homo:hosts=128 (1,024 V100s) closes the table
# A plan that is not found (no program fits, or the search ran past TIMEOUT s) is "-" with why.
# Prints a markdown table; the raw rows go to strategies.csv in OUT (default: a temporary folder).
# Usage: reports/strategies.sh [BUILD_DIR] [--quick] [--timeout S] [--out DIR]
#   --quick: bert-base and gpt 1.3B on paper-homo and paper-hetero only (a smoke run)
set -uo pipefail
cd "$(dirname "$0")/.."
build=build quick=0 timeout_s=900 out=""
while [ $# -gt 0 ]; do
  case $1 in
  --quick) quick=1 ;;
  --timeout) timeout_s=$2; shift ;;
  --out) out=$2; shift ;;
  -*) echo "strategies.sh: unknown option $1" >&2; exit 2 ;;
  *) build=$1 ;;
  esac
  shift
done
synth="$build/bin/hap-synth" sim="$build/bin/hap-sim"
[ -x "$synth" ] && [ -x "$sim" ] || { echo "strategies.sh: build first ($synth missing)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=${out:-$tmp}
mkdir -p "$out"
csv="$out/strategies.csv"
echo "cluster,model,strategy,iteration_s,peak_bytes,search_s,detail" >"$csv"

py() { /usr/bin/env python3 -c "$@"; }
now() { date +%s.%N; }

# run_one CLUSTER SPEC POLICY NAME HAP_SYNTH_STRATEGY: one plan, simulated; appends a CSV row and
# sets r_iter, r_mem, r_search, r_detail
run_one() {
  local cluster=$1 spec=$2 policy=$3 name=$4 strategy=$5 start rc
  local args=("$spec" -c "$cluster" -s "$strategy" -o "$tmp/plan.json" -q)
  [ -n "$policy" ] && args+=(--policy "$policy")
  rm -f "$tmp/plan.json"
  start=$(now)
  timeout "$timeout_s" "$synth" "${args[@]}" 2>"$tmp/err"
  rc=$?
  r_search=$(py "print('%.2f' % ($(now) - $start))")
  r_iter="" r_mem="" r_detail=""
  if [ "$rc" -eq 0 ] && [ -s "$tmp/plan.json" ]; then
    local row
    row=$("$sim" --plan "$tmp/plan.json" -f csv -q 2>/dev/null | sed -n 2p)
    r_iter=$(echo "$row" | cut -d, -f5) r_mem=$(echo "$row" | cut -d, -f12)
  elif [ "$rc" -eq 124 ]; then
    r_detail="search past ${timeout_s} s"
  else
    r_detail=$(head -1 "$tmp/err" | sed 's/^hap-synth: //; s/,/;/g' | cut -c1-90)
  fi
  echo "$cluster,$spec,$name,$r_iter,$r_mem,$r_search,\"$r_detail\"" >>"$csv"
}

# megatron_best CLUSTER SPEC POLICY DEVICES HOST_DEVICES LAYERS: every tp (powers of two within a
# host) x pp (powers of two up to the layers) with mbs=1; the fastest simulated plan (its layout in
# r_detail) and the summed search time
megatron_best() {
  local cluster=$1 spec=$2 policy=$3 n=$4 host=$5 layers=$6 tp pp best_iter="" best_mem="" best=""
  local searched=0 tried=0
  for ((tp = 1; tp <= host; tp *= 2)); do
    for ((pp = 1; pp <= layers && pp <= 64; pp *= 2)); do
      ((n % (tp * pp) == 0)) || continue
      tried=$((tried + 1))
      run_one "$cluster" "$spec" "$policy" "megatron:tp=$tp,pp=$pp" "megatron:tp=$tp,pp=$pp,mbs=1" \
        >/dev/null
      searched=$(py "print($searched + $r_search)")
      if [ -n "$r_iter" ] && { [ -z "$best_iter" ] || py "import sys; sys.exit(0 if $r_iter < $best_iter else 1)"; }; then
        best_iter=$r_iter best_mem=$r_mem best="tp=$tp,pp=$pp"
      fi
    done
  done
  r_iter=$best_iter r_mem=$best_mem r_search=$(py "print('%.2f' % $searched)")
  r_detail=${best:-"none of $tried layouts fits"}
}

cell() { # ITER MEM: "123.4 ms (5.6 GiB)" or "-"
  if [ -n "$1" ]; then py "print('%.1f ms (%.1f GiB)' % (1e3 * $1, $2 / 2**30))"; else echo "-"; fi
}

strategies=(hap dp-ev dp-cp megatron galvatron alpa)
echo "| cluster | model | hap | dp-ev | dp-cp | megatron (best layout) | galvatron | alpa | winner | search s (hap / galvatron / alpa) |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---|---|"

study() { # CLUSTER SPEC LABEL POLICY DEVICES HOST_DEVICES LAYERS
  local cluster=$1 spec=$2 label=$3 policy=$4 n=$5 host=$6 layers=$7
  declare -A it=() mem=() srch=() why=()
  for s in "${strategies[@]}"; do
    if [ "$s" = megatron ]; then
      megatron_best "$cluster" "$spec" "$policy" "$n" "$host" "$layers"
    else
      run_one "$cluster" "$spec" "$policy" "$s" "$s"
    fi
    it[$s]=$r_iter mem[$s]=$r_mem srch[$s]=$r_search why[$s]=$r_detail
  done
  local row="| $cluster | $label" win="" best=""
  for s in "${strategies[@]}"; do
    local c
    c=$(cell "${it[$s]}" "${mem[$s]}")
    [ "$s" = megatron ] && [ -n "${it[$s]}" ] && c="$c ${why[$s]}"
    [ -z "${it[$s]}" ] && c="- (${why[$s]})"
    row="$row | $c"
    if [ -n "${it[$s]}" ] && { [ -z "$best" ] || py "import sys; sys.exit(0 if ${it[$s]} < $best else 1)"; }; then
      best=${it[$s]} win=$s
    fi
  done
  local margin=""
  if [ -n "$best" ] && [ -n "${it[hap]}" ] && [ "$win" != hap ]; then
    margin=" (hap $(py "print('%.2f' % (${it[hap]} / $best))")x its time)"
  fi
  echo "$row | ${win:-none}$margin | ${srch[hap]} / ${srch[galvatron]} / ${srch[alpa]} |"
}

zoo_spec() { # MODEL K
  case $1 in
  bert-moe) echo "bert-moe:batch=$((32 * 8 * $2)),experts=$((16 * $2))" ;;
  gpt) echo "gpt:batch=$((4 * 8 * $2))" ;;
  *) echo "$1:batch=$((32 * 8 * $2))" ;;
  esac
}
layers_of() { # MODEL: its layer count for the pipeline enumeration
  case $1 in mlp) echo 8 ;; vgg19) echo 16 ;; bert-moe) echo 12 ;; *) echo 12 ;; esac
}
half=precision=fp16,optimizer=adam
gpt13='gpt:preset=none,layers=24,width=2048,heads=16'
gpt67='gpt:preset=gpt3-6.7b'

clusters=(paper-homo paper-hetero a100-h100)
models=(mlp vgg19 vit bert-base bert-moe gpt)
if [ "$quick" -eq 1 ]; then
  clusters=(paper-homo paper-hetero)
  models=(bert-base)
fi
for cluster in "${clusters[@]}"; do
  case $cluster in a100-h100) k=4 n=32 host=8 ;; *) k=8 n=64 host=8 ;; esac
  for m in "${models[@]}"; do
    study "$cluster" "$(zoo_spec "$m" "$k")" "$m" "" "$n" "$host" "$(layers_of "$m")"
  done
  study "$cluster" "$gpt13,batch=$((4 * n))" "gpt 1.3B" "$half" "$n" "$host" 24
  [ "$quick" -eq 1 ] || study "$cluster" "$gpt67,batch=$((4 * n))" "gpt-3 6.7B" "$half" "$n" "$host" 32
done
if [ "$quick" -eq 0 ]; then
  study paper-homo:hosts=128 'gpt:preset=gpt3-175b,batch=1536' "gpt-3 175B (1,024 GPUs)" "$half" \
    1024 8 96
fi
echo
echo "raw rows: $csv"
