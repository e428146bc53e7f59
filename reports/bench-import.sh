#!/usr/bin/env bash
# Bring your own model (issue 17, acceptance 2 and 4): torchvision's resnet50 into hap.
#   1. hap-import torch torchvision.models:resnet50 at 256 x 3 x 224 x 224 (32 samples per GPU on
#      8 devices): wall time, median of 3 runs (Python start and `import torch` included)
#   2. hap-model import of the same model as ONNX (exported once by hap-import --onnx at batch 1:
#      torch.onnx.export runs the model, which at batch 256 takes minutes; the file's size and
#      node count do not depend on the batch): wall time, median of 3
#   3. parameters and forward FLOPs per image from hap-model stats next to torchvision's published
#      figures (25,557,032 parameters; 4.09 GFLOPS, counted as multiply-adds, i.e. 8.18 GFLOP)
#   4. hap-synth (strategy hap) and hap-sim on paper-hetero:gpus_per_host=1 (2 V100 + 6 P100)
# Prints a markdown summary. Needs /usr/bin/python3 with torch and torchvision
# (scripts/setup-debian.sh --import). Usage: reports/bench-import.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
bin="$build/bin"
for t in hap-import hap-model hap-synth hap-sim; do
  [ -x "$bin/$t" ] || { echo "bench-import.sh: build first ($bin/$t missing)" >&2; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cluster=paper-hetero:gpus_per_host=1

# median_time CMD...: the median wall time of 3 runs, s
median_time() {
  local times=()
  for _ in 1 2 3; do
    local t0 t1
    t0=$(date +%s.%N)
    "$@" >/dev/null 2>&1
    t1=$(date +%s.%N)
    times+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')")
  done
  printf '%s\n' "${times[@]}" | sort -n | sed -n 2p
}

fx_s=$(median_time "$bin/hap-import" torch torchvision.models:resnet50 \
  -i 'x:float32[256,3,224,224]' --loss cross_entropy -o "$tmp/r50.json" -q)
"$bin/hap-import" torch torchvision.models:resnet50 -i 'x:float32[1,3,224,224]' \
  --loss cross_entropy -o "$tmp/r50-1.json" --onnx "$tmp/r50.onnx" -q 2>/dev/null
onnx_s=$(median_time "$bin/hap-model" import "$tmp/r50.onnx" --loss cross_entropy \
  -o "$tmp/r50-onnx.json" -q)
"$bin/hap-model" stats "$tmp/r50.json" -f json >"$tmp/stats.json"
"$bin/hap-model" stats "$tmp/r50-onnx.json" -f json >"$tmp/stats-onnx.json"
"$bin/hap-synth" "$tmp/r50.json" -c "$cluster" -o "$tmp/plan.json" -f json >"$tmp/synth.json"
"$bin/hap-sim" "$tmp/r50.json" -c "$cluster" --plan "$tmp/plan.json" -f csv -q >"$tmp/sim.csv"

/usr/bin/python3 - "$tmp" "$fx_s" "$onnx_s" "$cluster" <<'EOF'
import csv
import json
import sys

tmp, fx_s, onnx_s, cluster = sys.argv[1:]
st = json.load(open(f"{tmp}/stats.json"))
so = json.load(open(f"{tmp}/stats-onnx.json"))
synth = json.load(open(f"{tmp}/synth.json"))
sim = next(csv.DictReader(open(f"{tmp}/sim.csv")))


params = st["parameters"]
fwd, fwd1 = st["forward_flop"], so["forward_flop"]
print("| | hap (imported) | torchvision |")
print("|---|---:|---:|")
print(f"| parameters | {params:,.0f} | 25,557,032 |")
print(f"| forward GFLOP per 224x224 image | {fwd / 256 / 1e9:.2f} (fx), {fwd1 / 1e9:.2f} (ONNX) "
      "| 8.18 (4.09 GMAC) |")
print()
print(f"import: hap-import torch (batch 256) {fx_s} s; hap-model import of the ONNX file "
      f"{onnx_s} s (median of 3)")
pred = synth["predicted_iteration_s"]
print(f"{cluster}, batch 256: hap-synth predicts {1e3 * float(pred):.1f} ms per iteration, "
      f"hap-sim simulates {1e3 * float(sim['iteration_s']):.1f} ms")
EOF
