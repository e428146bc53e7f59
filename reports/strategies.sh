#!/usr/bin/env bash
# The study of every strategy (issue 16): hap, dp-ev, dp-cp, megatron (the best tp x pp x dp x
# recomputation layout found by enumerating them), galvatron and alpa, each on one cost model and one simulator.
# For every model and cluster: each strategy's plan simulated by hap-sim --plan (iteration, the
# fullest device's memory), the wall time of its hap-synth run (the search), and the winner.
#   models    HAP's zoo at HAP's configuration (32 samples per GPU, gpt 4, bert-moe 2 experts per
#             GPU; fp32 SGD), GPT 1.3B and GPT-3 6.7B (fp16 with Adam, 4 samples per GPU)
#   clusters  paper-homo and paper-hetero (64 GPUs), a100-h100 (16 A100 + 16 H100)
#   GPT-3 175B (fp16, Adam, batch 1536) on paper-homo:hosts=128 (1,024 V100s) closes the table
# A plan that is not found (no program fits, the search ran past TIMEOUT s, or hap-sim finds a
# device over its memory: megatron's layouts are not made to fit) is "-" with why. The rows go to
# strategies.csv in OUT (default: a temporary folder); reports/strategies_table.py prints the
# markdown table from them.
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
echo "cluster,model,label,strategy,iteration_s,peak_bytes,search_s,detail" >"$csv"

py() { /usr/bin/env python3 -c "$@"; }
now() { date +%s.%N; }

# run_one CLUSTER SPEC LABEL POLICY LIMIT NAME HAP_SYNTH_STRATEGY: one plan, simulated; a plan
# whose fullest device (hap-sim's peak) is over LIMIT bytes does not count; appends a CSV row
run_one() {
  local cluster=$1 spec=$2 label=$3 policy=$4 limit=$5 name=$6 strategy=$7 start rc
  local args=("$spec" -c "$cluster" -s "$strategy" -o "$tmp/plan.json" -q)
  [ -n "$policy" ] && args+=(--policy "$policy")
  rm -f "$tmp/plan.json"
  start=$(now)
  timeout "$timeout_s" "$synth" "${args[@]}" 2>"$tmp/err"
  rc=$?
  local search iter="" mem="" detail=""
  search=$(py "print('%.2f' % ($(now) - $start))")
  if [ "$rc" -eq 0 ] && [ -s "$tmp/plan.json" ]; then
    local row
    row=$("$sim" --plan "$tmp/plan.json" -f csv -q 2>/dev/null | sed -n 2p)
    iter=$(echo "$row" | cut -d, -f5) mem=$(echo "$row" | cut -d, -f12)
    if [ -n "$mem" ] && py "import sys; sys.exit(0 if $mem > $limit else 1)"; then
      detail="over memory: $(py "print('%.1f GiB' % ($mem / 2**30))")" iter=""
    fi
  elif [ "$rc" -eq 124 ]; then
    detail="search past ${timeout_s} s"
  else
    detail=$(head -1 "$tmp/err" | sed "s/^hap-synth: //; s/\"/'/g" | cut -c1-90)
  fi
  echo "$cluster,\"$spec\",$label,\"$name\",$iter,$mem,$search,\"$detail\"" >>"$csv"
}

# study CLUSTER SPEC LABEL POLICY LIMIT LAYERS: every strategy; megatron as every tp (powers of two
# within a host of 8) x pp (powers of two up to the layers) x recomputation (none, full) with one
# sample per micro-batch and, with a stateful optimizer, ZeRO-1 (Megatron's distributed optimizer)
study() {
  local cluster=$1 spec=$2 label=$3 policy=$4 limit=$5 layers=$6 tp pp r mpolicy=$4
  [ -n "$policy" ] && mpolicy="$policy,zero=1"
  for s in hap dp-ev dp-cp galvatron alpa; do
    run_one "$cluster" "$spec" "$label" "$policy" "$limit" "$s" "$s"
  done
  for ((tp = 1; tp <= 8; tp *= 2)); do
    for ((pp = 1; pp <= layers && pp <= 64; pp *= 2)); do
      for r in none full; do
        run_one "$cluster" "$spec" "$label" "$mpolicy" "$limit" "megatron:tp=$tp,pp=$pp,recompute=$r" \
          "megatron:tp=$tp,pp=$pp,mbs=1,recompute=$r"
      done
    done
  done
  echo "strategies.sh: $cluster $label done" >&2
}

zoo_spec() { # MODEL K
  case $1 in
  bert-moe) echo "bert-moe:batch=$((32 * 8 * $2)),experts=$((16 * $2))" ;;
  gpt) echo "gpt:batch=$((4 * 8 * $2))" ;;
  *) echo "$1:batch=$((32 * 8 * $2))" ;;
  esac
}
layers_of() { # MODEL: the most pipeline stages megatron is given
  case $1 in mlp) echo 8 ;; vgg19) echo 16 ;; *) echo 12 ;; esac
}
half=precision=fp16,optimizer=adam
gpt13='gpt:preset=none,layers=24,width=2048,heads=16'
gpt67='gpt:preset=gpt3-6.7b'
gib16=$((16 << 30)) gib80=$((80 << 30))

clusters=(paper-homo paper-hetero a100-h100)
models=(mlp vgg19 vit bert-base bert-moe gpt)
if [ "$quick" -eq 1 ]; then
  clusters=(paper-homo paper-hetero)
  models=(bert-base)
fi
for cluster in "${clusters[@]}"; do
  case $cluster in a100-h100) k=4 n=32 limit=$gib80 ;; *) k=8 n=64 limit=$gib16 ;; esac
  for m in "${models[@]}"; do
    study "$cluster" "$(zoo_spec "$m" "$k")" "$m" "" "$limit" "$(layers_of "$m")"
  done
  study "$cluster" "$gpt13,batch=$((4 * n))" "gpt 1.3B" "$half" "$limit" 24
  [ "$quick" -eq 1 ] || study "$cluster" "$gpt67,batch=$((4 * n))" "gpt-3 6.7B" "$half" "$limit" 32
done
if [ "$quick" -eq 0 ]; then
  study paper-homo:hosts=128 'gpt:preset=gpt3-175b,batch=1536' "gpt-3 175B (1024 GPUs)" "$half" \
    "$gib16" 96
fi
/usr/bin/env python3 reports/strategies_table.py "$csv"
echo
echo "raw rows: $csv"
