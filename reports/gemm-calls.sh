#!/usr/bin/env bash
# How fast OpenBLAS runs each GEMM of a hap-run iteration: hap-run (one rank, OPENBLAS_NUM_THREADS
# 1) runs PLAN for ITERS iterations (no warm-up) with libsgemm_calls.so (tests/bench/sgemm_calls.c)
# preloaded, which times every cblas_sgemm call; prints a markdown table of the call forms
# (transposes, m x n x k, whether beta was 0), their calls and milliseconds per iteration and
# their GFLOP/s, the costliest first, then the GEMMs' total against hap-run's mean iteration.
# Usage: reports/gemm-calls.sh BUILD PLAN [ITERS]   (ITERS default 20)
set -euo pipefail
build=${1:?usage: reports/gemm-calls.sh BUILD PLAN [ITERS]}
plan=${2:?usage: reports/gemm-calls.sh BUILD PLAN [ITERS]}
iters=${3:-20}
[[ "$iters" =~ ^[1-9][0-9]{0,3}$ ]] ||
  { echo "gemm-calls.sh: ITERS '$iters': expected a whole number in 1..9999" >&2; exit 2; }
lib="$build/bin/libsgemm_calls.so"
for f in "$build/bin/hap-run" "$lib"; do
  [ -e "$f" ] || { echo "gemm-calls.sh: $f missing (build first)" >&2; exit 1; }
done
[ -r "$plan" ] || { echo "gemm-calls.sh: $plan: no such plan file" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
OPENBLAS_NUM_THREADS=1 HAP_SGEMM_CALLS_OUT="$tmp/calls.txt" LD_PRELOAD="$(realpath "$lib")" \
  "$build/bin/hap-run" "$plan" -n "$iters" -w 0 -q -f json >"$tmp/run.json"
[ -s "$tmp/calls.txt" ] || { echo "gemm-calls.sh: hap-run made no cblas_sgemm call" >&2; exit 1; }
python3 - "$tmp/calls.txt" "$tmp/run.json" "$iters" <<'PY'
import json
import sys

calls_path, run_path, iters = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = []
for line in open(calls_path):
    ta, tb, m, n, k, beta0, calls, secs, gflops = line.split()
    rows.append((float(secs), ("T" if ta == "1" else "N") + ("T" if tb == "1" else "N"),
                 f"{m} x {n} x {k}", "0" if beta0 == "1" else "other", int(calls), float(gflops)))
rows.sort(reverse=True)
print("| form | m x n x k | beta | calls / iteration | ms / iteration | GFLOP/s |")
print("|---|---|---|---:|---:|---:|")
for secs, form, mnk, beta, calls, gflops in rows:
    print(f"| {form} | {mnk} | {beta} | {calls / iters:.1f} | {1e3 * secs / iters:.3f} | "
          f"{gflops:.1f} |")
total = sum(r[0] for r in rows) / iters
mean = json.load(open(run_path))["measured_mean_s"]
print(f"\nGEMMs {1e3 * total:.2f} ms of a {1e3 * mean:.2f} ms mean iteration "
      f"({iters} iterations, the first included)")
PY
