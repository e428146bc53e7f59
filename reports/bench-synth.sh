#!/usr/bin/env bash
# Synthesis benchmarks whose results are recorded in reports/BENCHMARKS.md.
#
# Usage: reports/bench-synth.sh [matrix|overhead|all]
#   matrix    every zoo model (mlp bert-base vit bert-moe vgg19 gpt) on paper-hetero:gpus_per_host=K
#             and on paper-homo:gpus_per_host=K for K = 1, 2, 4, 8 (8 to 64 devices) at HAP's global
#             batch 32 x devices (bert-moe also devices=N, so experts = 2N; gpt once more at 8 x
#             devices, since 32 x devices does not fit in 16 GiB): predicted s/iter of hap,
#             dp-ev and dp-cp from `hap-synth SPEC -c CLUSTER --compare --format json`.
#             Exit 1, naming the rows, if hap is predicted slower than a baseline in any row (both
#             baselines' programs are in hap's search space) or if hap-synth fails for any reason
#             other than "no program fits in memory". Rows where no program fits are marked
#             "error: ..." with hap-synth's message; a baseline that does not fit is shown as such.
#   overhead  vit:layers=L,batch=32*N for L = 4, 8, 16, 24, 48 on N = 8 (paper-hetero:gpus_per_host=1)
#             and N = 64 (paper-hetero): median of 5 synthesis times (hap-synth's own "seconds"),
#             states expanded (hap-synth's count: the program searches' and their window-bound
#             searches'), peak resident memory of the process, and the growth in layers (time and
#             states per layer at 48 layers over those at 4; at most 1 is linear). Exit 1 if 24
#             layers on 64 devices takes over 2 s or a run fails.
#
# Builds Release into build-bench/ (as reports/run-benchmarks.sh does); HAP_BENCH_NO_BUILD=1 reuses
# an existing build-bench/bin/hap-synth. Every hap-synth run is capped at HAP_BENCH_VMEM_GIB GiB of
# address space (default 8) and HAP_BENCH_TIMEOUT_S seconds (default 600), so a runaway search fails
# its row instead of exhausting a shared machine.
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
case $what in matrix | overhead | all) ;; *)
  echo "usage: $0 [matrix|overhead|all]" >&2
  exit 2
  ;;
esac
build="build-bench"
synth="$build/bin/hap-synth"
vmem_kib=$((${HAP_BENCH_VMEM_GIB:-8} * 1024 * 1024))
timeout_s=${HAP_BENCH_TIMEOUT_S:-600}
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
# uncommitted changes outside reports/ and scripts/ (the benchmark scripts themselves) are flagged
dirty=$(git status --porcelain --untracked-files=no -- . ':!reports' ':!scripts' 2>/dev/null | head -c1)
echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)${dirty:+ (plus uncommitted source changes)}"
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "limits per hap-synth run: ${HAP_BENCH_VMEM_GIB:-8} GiB address space, ${timeout_s} s"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# "gpt (8/GPU)": gpt again at 8 sequences per device, since 32 sequences of 1,024 tokens per device
# need more than the 16 GiB of a V100/P100 under any program (an extra row pair, not HAP's setting).
models=(mlp bert-base vit bert-moe vgg19 gpt "gpt (8/GPU)")
status=0

# capped CMD...: run CMD under the address-space and time caps
capped() {
  (
    ulimit -v "$vmem_kib"
    exec timeout "$timeout_s" "$@"
  )
}

# model_spec MODEL DEVICES: the zoo spec at HAP's global batch (32 per device); bert-moe also sizes
# its experts for the device count (experts = 2 x devices), as HAP configures it.
model_spec() {
  local m=$1 n=$2
  case $m in
    bert-moe) echo "$m:batch=$((32 * n)),devices=$n" ;;
    "gpt (8/GPU)") echo "gpt:batch=$((8 * n))" ;;
    *) echo "$m:batch=$((32 * n))" ;;
  esac
}

# one_line FILE: the file's text on one line (tabs and newlines as spaces)
one_line() { tr '\n\t' '  ' <"$1" | sed 's/ *$//'; }

# One markdown table for one cluster family; sets status=1 when a row fails the criterion.
matrix_table() {
  local family=$1 rows="$tmp/rows-$1.tsv" k n spec cluster rc
  : >"$rows"
  for m in "${models[@]}"; do
    for k in 1 2 4 8; do
      n=$((8 * k))
      spec=$(model_spec "$m" "$n")
      cluster="$family:gpus_per_host=$k"
      rc=0
      capped "$synth" "$spec" -c "$cluster" --compare --format json >"$tmp/out.json" 2>"$tmp/err.txt" || rc=$?
      printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$m" "$n" "hap-synth '$spec' -c $cluster" "$rc" \
        "$(one_line "$tmp/out.json")" "$(one_line "$tmp/err.txt")" >>"$rows"
    done
  done
  echo
  echo "### $family:gpus_per_host=K"
  echo
  python3 - "$rows" <<'EOF' || status=1
import json, re, sys
FIT = "no program fits"
bad, nofit = [], []
print("| model | GPUs | hap s/iter | dp-ev s/iter | dp-cp s/iter | speedup vs dp-ev | speedup vs dp-cp | synthesis s | states expanded |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for line in open(sys.argv[1]):
    model, gpus, cmd, rc, out, err = line.rstrip("\n").split("\t", 5)
    rc = int(rc)
    if rc != 0:
        why = err or f"exit status {rc}"
        if rc == 124:
            why = "timed out: " + why
        elif rc in (137, 139, 134) or rc > 128:
            why = f"killed by signal {rc - 128}: " + why
        print(f"| {model} | {gpus} | error: {why} | | | | | | |")
        (nofit if rc == 1 and FIT in err else bad).append(f"{cmd}: exit {rc}: {why}")
        continue
    try:
        d = json.loads(out)
        hap = d["predicted_iteration_s"]
        base = {b["strategy"]: b["predicted_iteration_s"] for b in d["baselines"]}
    except (ValueError, KeyError, TypeError) as e:
        print(f"| {model} | {gpus} | error: unreadable JSON ({e!r}) | | | | | | |")
        bad.append(f"{cmd}: unreadable JSON: {e!r}")
        continue
    cells, speed, flag = [], [], ""
    for name in ("dp-ev", "dp-cp"):
        if name in base:
            t = base[name]
            cells.append(f"{t:.4f}")
            speed.append(f"{t / hap:.2f}x")
            # 1e-9 relative slack only absorbs rounding when hap finds the baseline's own program.
            if hap > t * (1 + 1e-9):
                bad.append(f"{cmd}: hap {hap:.6g} s/iter is slower than {name} {t:.6g} s/iter")
                flag = " **slower than a baseline**"
            continue
        m = re.search(rf"no {name} baseline: (.*?)(?= hap-synth: |$)", err)
        if m and FIT in m.group(1):
            need = re.search(r"needs ([0-9.]+ [KMGT]iB)", m.group(1))
            cells.append(f"does not fit ({need.group(1) if need else '?'}/device)")
            speed.append("n/a")
        else:
            cells.append("missing: " + (m.group(1) if m else err or "no baseline in JSON"))
            speed.append("")
            bad.append(f"{cmd}: {name} baseline missing: {m.group(1) if m else err}")
    print(f"| {model} | {gpus} | {hap:.4f}{flag} | {cells[0]} | {cells[1]} | {speed[0]} | {speed[1]} "
          f"| {d['seconds']:.3f} | {d['states_expanded']} |")
for b in nofit:
    print("NO FIT (reported, not a failure):", b, file=sys.stderr)
for b in bad:
    print("FAIL:", b, file=sys.stderr)
sys.exit(1 if bad else 0)
EOF
}

if [ "$what" = matrix ] || [ "$what" = all ]; then
  echo
  echo "## Synthesis matrix: predicted s/iter (hap's cost model), hap vs dp-ev and dp-cp"
  echo "(each row: hap-synth MODEL:batch=32*GPUs[,devices=GPUs] -c CLUSTER:gpus_per_host=GPUs/8 --compare --format json)"
  matrix_table paper-hetero
  matrix_table paper-homo
  if [ "$status" -ne 0 ]; then
    echo "bench-synth.sh matrix: FAILED (see the FAIL lines above)" >&2
  fi
fi

# peak_kib CMD...: run CMD (capped), stdout to $tmp/run.json; print its peak resident KiB (GNU time,
# else python's getrusage of the child)
peak_kib() {
  local rc=0
  if [ -x /usr/bin/time ] && /usr/bin/time -f %M true >/dev/null 2>&1; then
    capped /usr/bin/time -f %M -o "$tmp/rss.txt" "$@" >"$tmp/run.json" || rc=$?
  else
    capped python3 -c '
import resource, subprocess, sys
with open(sys.argv[1], "w") as out:
    rc = subprocess.call(sys.argv[3:], stdout=out)
# ru_maxrss is in KiB on Linux
open(sys.argv[2], "w").write("%d\n" % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(rc)' "$tmp/run.json" "$tmp/rss.txt" "$@" || rc=$?
  fi
  [ "$rc" -eq 0 ] || return "$rc"
  tail -n1 "$tmp/rss.txt"
}

if [ "$what" = overhead ] || [ "$what" = all ]; then
  echo
  echo "## Synthesis overhead: vit:layers=L,batch=32*GPUs on paper-hetero, median of 5 runs"
  echo "(each run: hap-synth vit:layers=L,batch=32*GPUs -c paper-hetero:gpus_per_host=GPUs/8 --format json)"
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
          printf '%s\t%s\t%s\terror\texit %s: %s\n' "$n" "$layers" "$run" "$rc" "$(one_line "$tmp/err.txt")" >>"$points"
          break
        fi
        printf '%s\t%s\t%s\t%s\t%s\n' "$n" "$layers" "$run" "$rss" "$(one_line "$tmp/run.json")" >>"$points"
      done
    done
  done
  python3 - "$points" <<'EOF' || status=1
import json, statistics, sys
pts, errors = {}, {}
for line in open(sys.argv[1]):
    n, layers, run, rss, payload = line.rstrip("\n").split("\t", 4)
    key = (int(n), int(layers))
    if rss == "error":
        errors[key] = payload
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
        print(f"FAIL: vit:layers={layers} on {n} GPUs: {errors[key]}", file=sys.stderr)
        continue
    runs = pts[key]
    secs = [r[0] for r in runs]
    med[key] = statistics.median(secs)
    states = "/".join(str(s) for s in sorted({r[1] for r in runs}))
    print(f"| {n} | {layers} | {med[key]:.4f} | {min(secs):.4f} | {max(secs):.4f} | {states} "
          f"| {max(r[2] for r in runs) / 1024:.1f} | {runs[0][3]:.4f} |")
print()
ok = not errors
for n in sorted({k[0] for k in med}):
    if (n, 4) in med and (n, 48) in med:
        ratio = (med[(n, 48)] / 48) / (med[(n, 4)] / 4)
        states = (pts[(n, 48)][0][1] / 48) / (pts[(n, 4)][0][1] / 4)
        verdict = "no faster than linear" if ratio <= 1.0 else "faster than linear"
        print(f"- {n} GPUs: time per layer at 48 layers / at 4 layers = {ratio:.2f} ({verdict}); "
              f"states expanded per layer, same ratio: {states:.2f}")
if (64, 24) in med:
    t = med[(64, 24)]
    print(f"- 24 layers on 64 GPUs: {t:.4f} s (median); target <= 2 s: {'met' if t <= 2.0 else 'MISSED'}")
    ok = ok and t <= 2.0
else:
    ok = False
sys.exit(0 if ok else 1)
EOF
fi
exit "$status"
