#!/usr/bin/env bash
# A memory limit steers hap to a plan that fits whenever any baseline fits (issue 20,
# acceptance 4). For each case (model, cluster, limit): dp-ev, dp-cp and megatron-tp are each
# synthesised under the limit (-m, which steers their policy too); when one of them writes a plan
# whose every device fits, hap must write one too, and every device of hap's plan (any stage of a
# pipelined one) must fit. Cases: the three the issue names, and on a V100 + P100 pair every small
# zoo model under dp-ev's and dp-cp's own unlimited peaks (rounded up to a MiB) and 10 % below.
# MODE "quick" (the sanitizer build): the mlp cases only.
# Usage: test_memory_limit_fits.sh HAP_SYNTH [all|quick]
set -uo pipefail
synth=${1:?hap-synth} mode=${2:-all}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
# peak PLAN: the largest memory_bytes of any device anywhere in a plan file (both formats), bytes.
peak() {
  python3 - "$1" <<'PY'
import json, sys
def walk(v):
    if isinstance(v, dict):
        for k, x in v.items():
            if k == "memory_bytes" and isinstance(x, (int, float)):
                yield x
            else:
                yield from walk(x)
    elif isinstance(v, list):
        for x in v:
            yield from walk(x)
found = list(walk(json.load(open(sys.argv[1]))))
print(max(found) if found else "none")
PY
}
# fits PLAN LIMIT_BYTES: the plan exists and its fullest device is within the limit.
fits() {
  local p
  [ -s "$1" ] || return 1
  p=$(peak "$1") || return 1
  [ "$p" != none ] && awk -v p="$p" -v l="$2" 'BEGIN { exit !(p <= l) }'
}
bytes_of() { # 300M -> 314572800 (K/M/G powers of 1024, as hap-synth reads them)
  awk -v s="$1" 'BEGIN { n = s + 0; u = substr(s, length(s)); f = 1
    if (u == "K") f = 1024; else if (u == "M") f = 1024^2; else if (u == "G") f = 1024^3
    printf "%.0f\n", n * f }'
}

# the judge: a plan over the limit or without devices does not fit, one within does
printf '{"predicted": {"devices": [{"memory_bytes": 100}, {"memory_bytes": 300}]}}' >"$tmp/j.json"
printf '{"stages": [{"plan": {"predicted": {"devices": [{"memory_bytes": 500}]}}}]}' >"$tmp/j2.json"
printf '{"predicted": {}}' >"$tmp/j3.json"
if fits "$tmp/j.json" 299 || ! fits "$tmp/j.json" 300 || fits "$tmp/j2.json" 400 ||
  ! fits "$tmp/j2.json" 500 || fits "$tmp/j3.json" 1e18; then
  echo "FAIL: the judge misjudges a plan's memory"
  exit 1
fi

cases=("mlp:layers=2|paper-hetero:gpus_per_host=1,hosts=1|$(bytes_of 300M)")
models=("mlp:layers=4")
if [ "$mode" != quick ]; then
  cases+=("bert-base|paper-hetero:gpus_per_host=1,hosts=1|$(bytes_of 10G)"
    "gpt:preset=gpt3-6.7b|paper-hetero|$(bytes_of 3.7G)")
  models+=("bert-base:layers=2" "vit:layers=2" "bert-moe:layers=2" "vgg19:batch=64"
    "gpt:layers=2,batch=4,seq=256")
fi
pair="paper-hetero:gpus_per_host=1,hosts=1"
for model in "${models[@]}"; do
  for s in dp-ev dp-cp; do # (megatron-tp on one GPU per host is dp-ev)
    "$synth" "$model" -c "$pair" -s "$s" -o "$tmp/free.json" -q 2>/dev/null || continue
    p=$(peak "$tmp/free.json")
    [ "$p" = none ] && continue
    mib=$(awk -v p="$p" 'BEGIN { printf "%.0f", (int(p / 1048576) + 1) * 1048576 }')
    cases+=("$model|$pair|$mib" "$model|$pair|$(awk -v m="$mib" 'BEGIN { printf "%.0f", m * 0.9 }')")
  done
done

fail=0 bound=0
mapfile -t cases < <(printf '%s\n' "${cases[@]}" | awk '!seen[$0]++')
for c in "${cases[@]}"; do
  IFS='|' read -r model cluster limit <<<"$c"
  where="$model on $cluster, -m $limit"
  who=""
  for s in dp-ev dp-cp megatron-tp; do
    rm -f "$tmp/b.json"
    if "$synth" "$model" -c "$cluster" -s "$s" -m "$limit" -o "$tmp/b.json" -q 2>/dev/null &&
      fits "$tmp/b.json" "$limit"; then
      who="$who $s"
    fi
  done
  [ -n "$who" ] || { echo "skip $where: no baseline fits"; continue; }
  bound=$((bound + 1))
  rm -f "$tmp/h.json"
  if ! "$synth" "$model" -c "$cluster" -m "$limit" -o "$tmp/h.json" -q 2>"$tmp/err"; then
    echo "FAIL: $where: hap finds no plan while$who fit: $(head -n 1 "$tmp/err")"
    fail=1
  elif ! fits "$tmp/h.json" "$limit"; then
    echo "FAIL: $where: hap's plan needs $(peak "$tmp/h.json") bytes on a device"
    fail=1
  else
    echo "ok   $where: hap fits ($(peak "$tmp/h.json") bytes), as do$who"
  fi
done
[ "$bound" -ge 3 ] || { echo "FAIL: only $bound cases had a fitting baseline"; fail=1; }
[ "$fail" -eq 0 ] && echo "test_memory_limit_fits.sh: $bound cases with a fitting baseline, hap fits every one"
exit "$fail"
