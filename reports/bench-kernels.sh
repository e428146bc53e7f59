#!/usr/bin/env bash
# The CPU kernels before and after (issue 19, acceptance 4): every distinct application of the
# vs-pytorch.sh models (tests/import/models.py imported with hap-import torch: mlp, bert, vit,
# vgg19), forward and backward, timed by tests/bench/bench_kernels.c in two builds — BASE_BUILD
# (before) and BUILD (after) — one model at a time, the two builds alternating, so that both
# see the same machine. One thread (OPENBLAS_NUM_THREADS=1). Prints a markdown table per model:
# p50 of REPS calls per case, before, after and after / before, the per-iteration total (the sum
# of count x p50), and the rows that got more than 10 % slower.
# Without BASE_BUILD it prints the one build's times.
# Needs /usr/bin/python3 with torch to import the models (scripts/setup-debian.sh --test);
# without it says so and exits 0.
# ROUNDS (default 2) alternations of the two builds; each row is the fastest round's p50 (dev-2c
# switches for seconds at a time between a fast and a slow mode, 2x apart for small kernels).
# Usage: reports/bench-kernels.sh BUILD [BASE_BUILD [REPS [MODELS [ROUNDS]]]]  (MODELS:
# comma-separated)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: reports/bench-kernels.sh BUILD [BASE_BUILD [REPS [MODELS [ROUNDS]]]]}
base=${2:-}
reps=${3:-20}
only=${4:-}
rounds=${5:-2}
[[ "$rounds" =~ ^[1-9]$ ]] ||
  { echo "bench-kernels.sh: ROUNDS '$rounds': expected a whole number in 1..9" >&2; exit 2; }
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  echo "bench-kernels.sh: /usr/bin/python3 has no torch (scripts/setup-debian.sh --import): no models to time"
  exit 0
fi
for b in "$build" ${base:+"$base"}; do
  [ -x "$b/bin/bench_kernels" ] || { echo "bench-kernels.sh: $b/bin/bench_kernels missing (build first)" >&2; exit 1; }
done
[ -x "$build/bin/hap-import" ] || { echo "bench-kernels.sh: $build/bin/hap-import missing" >&2; exit 1; }
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=reports/vs-pytorch-models.sh
. reports/vs-pytorch-models.sh
for c in "${vs_pytorch_cases[@]}"; do
  vs_pytorch_import "$c" "$only" "$build/bin/hap-import" "$tmp/cur.json" || continue
  mv "$tmp/cur.json" "$tmp/$name.json"
  # before, after, before, after, ...: each build's rows are the fastest of its ROUNDS runs
  # (less noise from the machine's own swings), and both builds see the same minutes
  for ((round = 1; round <= rounds; round++)); do
    if [ -n "$base" ]; then
      "$base/bin/bench_kernels" "$tmp/$name.json" "$reps" >"$tmp/$name.before.$round" \
        2>"$tmp/core.before" || { cat "$tmp/core.before" >&2; exit 1; }
    fi
    "$build/bin/bench_kernels" "$tmp/$name.json" "$reps" >"$tmp/$name.after.$round" \
      2>"$tmp/core.after" || { cat "$tmp/core.after" >&2; exit 1; }
  done
  python3 - "$name" "$tmp" "${base:+yes}" "$rounds" <<'EOF'
import sys

name, tmp, have_base, rounds = sys.argv[1], sys.argv[2], sys.argv[3] == "yes", int(sys.argv[4])

def rows(which):
    best = {}
    order = []
    for rnd in range(1, rounds + 1):
        seen = {}  # one shape can be two cases (e.g. with and without an input gradient)
        for line in open(f"{tmp}/{name}.{which}.{rnd}"):
            op, d, count, p50, _p95, shape = line.rstrip("\n").split("\t")
            nth = seen[(op, d, shape)] = seen.get((op, d, shape), 0) + 1
            key = (op, d, shape, nth)
            if key not in best:
                order.append(key)
                best[key] = (int(count), float(p50))
            else:
                best[key] = (best[key][0], min(best[key][1], float(p50)))
    return order, best

order, after = rows("after")
before = rows("before")[1] if have_base else {}
print(f"\n#### {name}\n")
for which in ("before", "after") if have_base else ("after",):
    try:  # bench_kernels' own line naming OpenBLAS's kernel set (older builds print none)
        core = open(f"{tmp}/core.{which}").read().strip().replace("bench_kernels: ", "")
    except OSError:
        core = ""
    if core:
        print(f"{which + ': ' if have_base else ''}{core}\n")
if have_base:
    print("| op | dir | count | shapes | before us | after us | after / before |")
    print("|---|---|---:|---|---:|---:|---:|")
else:
    print("| op | dir | count | shapes | us |")
    print("|---|---|---:|---|---:|")
tot_b = tot_a = 0.0
slower = []
for key in order:
    op, d, shape, _nth = key
    count, ta = after[key]
    tot_a += count * ta
    if have_base:
        tb = before.get(key, (count, float("nan")))[1]
        tot_b += count * tb
        r = ta / tb if tb > 0 else float("nan")
        if r > 1.10 and ta - tb > 5:
            slower.append(f"{op} {d} {shape}")
        print(f"| {op} | {d} | {count} | {shape} | {tb:.1f} | {ta:.1f} | {r:.2f} |")
    else:
        print(f"| {op} | {d} | {count} | {shape} | {ta:.1f} |")
if have_base:
    print(f"| **total per iteration** | | | | {tot_b / 1e3:.2f} ms | {tot_a / 1e3:.2f} ms | "
          f"{tot_a / tot_b:.2f} |")
    print(f"\nSlower by more than 10 % (and 5 us): {', '.join(slower) if slower else 'none'}")
else:
    print(f"| **total per iteration** | | | | {tot_a / 1e3:.2f} ms |")
EOF
done
