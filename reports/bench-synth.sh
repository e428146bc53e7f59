#!/usr/bin/env bash
# Synthesis benchmarks whose results are recorded in reports/BENCHMARKS.md.
#
# Usage: reports/bench-synth.sh [matrix|overhead|all]
#   matrix    every zoo model on paper-hetero:gpus_per_host=K and paper-homo:gpus_per_host=K for
#             K = 1, 2, 4, 8 (8 to 64 devices) at HAP's global batch 32 x devices: predicted s/iter of
#             hap, dp-ev and dp-cp (hap-synth --compare --format json). Exits 1, naming the rows, if
#             hap is predicted slower than either baseline in any row, or if hap-synth fails.
#   overhead  vit:layers=L for L = 4, 8, 16, 24, 48 on 8 and 64 devices (paper-hetero): median of
#             5 synthesis times (hap-synth's own "seconds"), states expanded, peak resident memory.
#
# Builds Release into build-bench/ (as reports/run-benchmarks.sh does); HAP_BENCH_NO_BUILD=1 reuses
# an existing build-bench/bin/hap-synth without rebuilding.
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
case $what in matrix | overhead | all) ;; *)
  echo "usage: $0 [matrix|overhead|all]" >&2
  exit 2
  ;;
esac
build=build-bench
synth=$build/bin/hap-synth
if [ "${HAP_BENCH_NO_BUILD:-0}" = 1 ] && [ -x "$synth" ]; then
  :
else
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$build" -j"$(nproc)" --target hap-synth >/dev/null
fi
command -v python3 >/dev/null || {
  echo "bench-synth.sh: python3 is needed to parse hap-synth's JSON" >&2
  exit 1
}
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, $(uname -sr)"
echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

models=(mlp bert-base vit bert-moe vgg19 gpt)
status=0

# model_spec MODEL DEVICES: the zoo spec at HAP's global batch (32 per device); bert-moe also sizes
# its experts for the device count (experts = 2 x devices), as HAP configures it.
model_spec() {
  local m=$1 n=$2
  if [ "$m" = bert-moe ]; then
    echo "$m:batch=$((32 * n)),devices=$n"
  else
    echo "$m:batch=$((32 * n))"
  fi
}

# One markdown table for one cluster family; sets status=1 on an error or a hap-slower row.
matrix_table() {
  local family=$1 rows="$tmp/rows-$1.tsv" k n spec cluster rc
  : >"$rows"
  for m in "${models[@]}"; do
    for k in 1 2 4 8; do
      n=$((8 * k))
      spec=$(model_spec "$m" "$n")
      cluster="$family:gpus_per_host=$k"
      rc=0
      "$synth" "$spec" -c "$cluster" --compare --format json >"$tmp/out.json" 2>"$tmp/err.txt" || rc=$?
      if [ "$rc" -eq 0 ]; then
        printf '%s\t%s\t%s\tok\t%s\n' "$m" "$n" "$spec -c $cluster" "$(tr -d '\n' <"$tmp/out.json")" >>"$rows"
      else
        printf '%s\t%s\t%s\terror\texit %s: %s\n' "$m" "$n" "$spec -c $cluster" "$rc" \
          "$(tr '\n\t' '  ' <"$tmp/err.txt")" >>"$rows"
      fi
    done
  done
  echo
  echo "### $family:gpus_per_host=K (hap-synth MODEL:batch=32*GPUs -c $family:gpus_per_host=K --compare --format json)"
  echo
  python3 - "$rows" <<'EOF' || status=1
import json, sys
bad = []
print("| model | GPUs | hap s/iter | dp-ev s/iter | dp-cp s/iter | speedup vs dp-ev | speedup vs dp-cp | synthesis s | states expanded |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for line in open(sys.argv[1]):
    model, gpus, cmd, kind, payload = line.rstrip("\n").split("\t", 4)
    if kind != "ok":
        print(f"| {model} | {gpus} | error: {payload.strip()} | | | | | | |")
        bad.append(f"{cmd}: hap-synth failed: {payload.strip()}")
        continue
    try:
        d = json.loads(payload)
        hap = d["predicted_iteration_s"]
        base = {b["strategy"]: b for b in d["baselines"]}
        ev, cp = base["dp-ev"]["predicted_iteration_s"], base["dp-cp"]["predicted_iteration_s"]
    except (ValueError, KeyError, TypeError) as e:
        print(f"| {model} | {gpus} | error: unreadable JSON ({e!r}) | | | | | | |")
        bad.append(f"{cmd}: unreadable JSON: {e!r}")
        continue
    flag = ""
    for name, t in (("dp-ev", ev), ("dp-cp", cp)):
        # hap's search space contains both baselines' programs: it must never be predicted slower.
        # 1e-9 relative slack only absorbs floating-point noise when hap finds the baseline itself.
        if hap > t * (1 + 1e-9):
            bad.append(f"{cmd}: hap {hap:.6g} s/iter is slower than {name} {t:.6g} s/iter")
            flag = " **(slower than a baseline)**"
    print(f"| {model} | {gpus} | {hap:.4f}{flag} | {ev:.4f} | {cp:.4f} | {ev / hap:.2f}x | {cp / hap:.2f}x "
          f"| {d['seconds']:.3f} | {d['states_expanded']} |")
if bad:
    print()
    for b in bad:
        print("FAIL:", b, file=sys.stderr)
    sys.exit(1)
EOF
}

if [ "$what" = matrix ] || [ "$what" = all ]; then
  echo
  echo "## Synthesis matrix: predicted s/iter (hap's cost model), hap vs dp-ev/dp-cp"
  matrix_table paper-hetero
  matrix_table paper-homo
  if [ "$status" -ne 0 ]; then
    echo "bench-synth.sh matrix: FAILED (see FAIL lines: rows where hap-synth errs or hap is slower than a baseline)" >&2
  fi
fi

# peak resident KiB of a command (GNU time, else python's getrusage of the child); stdout -> $tmp/run.json
peak_kib() {
  local rc=0
  if [ -x /usr/bin/time ] && /usr/bin/time -f %M true >/dev/null 2>&1; then
    /usr/bin/time -f %M -o "$tmp/rss.txt" "$@" >"$tmp/run.json" || rc=$?
  else
    python3 -c '
import resource, subprocess, sys
with open(sys.argv[1], "w") as out:
    rc = subprocess.call(sys.argv[3:], stdout=out)
# ru_maxrss is in KiB on Linux
open(sys.argv[2], "w").write("%d\n" % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(rc)' "$tmp/run.json" "$tmp/rss.txt" "$@" || rc=$?
  fi
  [ "$rc" -eq 0 ] || return "$rc"
  cat "$tmp/rss.txt"
}

if [ "$what" = overhead ] || [ "$what" = all ]; then
  echo
  echo "## Synthesis overhead: vit:layers=L,batch=32*GPUs on paper-hetero (median of 5 runs)"
  if [ -x /usr/bin/time ]; then echo "peak memory: GNU time %M"; else echo "peak memory: getrusage(RUSAGE_CHILDREN)"; fi
  points="$tmp/points.tsv"
  : >"$points"
  for k in 1 8; do
    n=$((8 * k))
    for layers in 4 8 16 24 48; do
      spec="vit:layers=$layers,batch=$((32 * n))"
      cluster="paper-hetero:gpus_per_host=$k"
      for run in 1 2 3 4 5; do
        rc=0
        rss=$(peak_kib "$synth" "$spec" -c "$cluster" --format json 2>"$tmp/err.txt") || rc=$?
        if [ "$rc" -ne 0 ]; then
          printf '%s\t%s\t%s\terror\texit %s: %s\n' "$n" "$layers" "$run" "$rc" \
            "$(tr '\n\t' '  ' <"$tmp/err.txt")" >>"$points"
          status=1
          break
        fi
        printf '%s\t%s\t%s\t%s\t%s\n' "$n" "$layers" "$run" "$rss" "$(tr -d '\n' <"$tmp/run.json")" >>"$points"
      done
    done
  done
  python3 - "$points" <<'EOF' || status=1
import json, statistics, sys
pts = {}
errors = {}
for line in open(sys.argv[1]):
    n, layers, run, rss, payload = line.rstrip("\n").split("\t", 4)
    key = (int(n), int(layers))
    if rss == "error":
        errors[key] = payload.strip()
        continue
    d = json.loads(payload)
    pts.setdefault(key, []).append((d["seconds"], d["states_expanded"], int(rss), d["predicted_iteration_s"]))
print()
print("| GPUs | layers | synthesis s (median) | min | max | states expanded | peak RSS MiB | predicted s/iter |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|")
med = {}
for key in sorted(set(pts) | set(errors)):
    n, layers = key
    if key in errors:
        print(f"| {n} | {layers} | error: {errors[key]} | | | | | |")
        continue
    runs = pts[key]
    secs = [r[0] for r in runs]
    med[key] = statistics.median(secs)
    states = sorted({r[1] for r in runs})
    print(f"| {n} | {layers} | {med[key]:.4f} | {min(secs):.4f} | {max(secs):.4f} | "
          f"{'/'.join(map(str, states))} | {max(r[2] for r in runs) / 1024:.1f} | {runs[0][3]:.4f} |")
print()
ok = not errors
for n in sorted({k[0] for k in med}):
    if (n, 4) in med and (n, 48) in med:
        per4, per48 = med[(n, 4)] / 4, med[(n, 48)] / 48
        ratio = per48 / per4
        s4 = pts[(n, 4)][0][1] / 4
        s48 = pts[(n, 48)][0][1] / 48
        verdict = "no faster than linear" if ratio <= 1.0 else "FASTER than linear"
        print(f"{n} GPUs: time per layer at 48 layers / at 4 layers = {ratio:.2f} ({verdict}); "
              f"states expanded per layer: {s48 / s4:.2f}x")
if (64, 24) in med:
    t = med[(64, 24)]
    print(f"24 layers on 64 GPUs: {t:.4f} s median, target <= 2 s: {'met' if t <= 2.0 else 'MISSED'}")
    ok = ok and t <= 2.0
sys.exit(0 if ok else 1)
EOF
fi
exit "$status"
