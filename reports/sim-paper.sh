#!/usr/bin/env bash
# The paper's experiment (HAP, EuroSys'24, Fig. 12 and the homogeneous comparison) in simulation:
# VGG19, ViT, BERT-Base and BERT-MoE with 1, 2, 4 and 8 GPUs on each of the 8 machines of
# paper-hetero (2 x V100 + 6 x P100 hosts) and paper-homo (8 x V100 hosts), HAP's configuration
# (global batch 32 x GPUs, BERT-MoE with 2 x GPUs experts), HAP vs DP-EV vs DP-CP, and the
# megatron-tp baseline (tensor parallel inside each host, data parallel across the 8 hosts).
# Every time is hap-sim's simulated iteration; prints a markdown table.
# Usage: reports/sim-paper.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
sim="$build/bin/hap-sim"
[ -x "$sim" ] || { echo "sim-paper.sh: build first ($sim missing)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for cluster in paper-hetero paper-homo; do
  for model in vgg19 vit bert-base bert-moe; do
    for k in 1 2 4 8; do
      spec=$model
      [ "$model" = bert-moe ] && spec="bert-moe:experts=$((2 * 8 * k))"
      # exit status 1 when a strategy has no plan (e.g. nothing fits in memory): a row says so
      { "$sim" "$spec" -c "$cluster:gpus_per_host=$k" -b 32 -f csv -q || true; } |
        sed "1d; s/^/$cluster,$model,$k,/" >>"$tmp/rows.csv"
    done
  done
done

/usr/bin/env python3 - "$tmp/rows.csv" <<'PY'
import csv, sys
rows = {}
for r in csv.reader(open(sys.argv[1])):
    cluster, model, k, point, strategy = r[0], r[1], int(r[2]), r[3], r[4]
    ok = r[6] == "1"
    rows[(cluster, model, k, strategy)] = float(r[7]) if ok else None
print("| model | GPUs/host | devices | cluster | HAP ms | DP-EV ms | DP-CP ms | MGT-TP ms | HAP vs DP-EV | HAP vs DP-CP | HAP vs MGT-TP |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
best, worst = {}, {}
for model in ["vgg19", "vit", "bert-base", "bert-moe"]:
    for k in [1, 2, 4, 8]:
        for cluster in ["paper-hetero", "paper-homo"]:
            t = [rows.get((cluster, model, k, s)) for s in ("hap", "dp-ev", "dp-cp", "megatron-tp")]
            cell = lambda v: "%.1f" % (1e3 * v) if v else "no plan"
            sp = lambda b: "%.2fx" % (b / t[0]) if b and t[0] else "-"
            print("| %s | %d | %d | %s | %s | %s | %s | %s | %s | %s | %s |" % (model, k, 8 * k, cluster,
                  cell(t[0]), cell(t[1]), cell(t[2]), cell(t[3]), sp(t[1]), sp(t[2]), sp(t[3])))
            if t[0] and t[1] and t[2]:
                s = min(t[1], t[2]) / t[0]
                if s > best.get(cluster, (0,))[0]:
                    best[cluster] = (s, model, k)
            if t[0] and any(t[1:]):
                s = min(v for v in t[1:] if v) / t[0]
                key = cluster + " (best of dp-ev, dp-cp, megatron-tp)"
                if s < worst.get(key, (1e30,))[0]:
                    worst[key] = (s, model, k)
for cluster, (s, model, k) in sorted(best.items()):
    print("\nLargest speedup over the better dp baseline on %s: %.2fx (%s, %d GPUs/host)" % (cluster, s, model, k))
for cluster, (s, model, k) in sorted(worst.items()):
    print("\nSmallest speedup over the best baseline on %s: %.2fx (%s, %d GPUs/host)" % (cluster, s, model, k))
PY
