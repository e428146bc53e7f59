#!/usr/bin/env bash
# Training policies (issue 14): synthesis time, predicted and simulated iteration time and memory
# per device by component, for the paper experiment models and GPT-3, under seven policies.
#
# Usage: reports/policy-bench.sh BUILD_DIR [RUNS]
#
# Models (the configurations reports/bench-synth.sh and reports/sim-paper.sh use at their largest
# point, 64 GPUs, HAP's global batch 32 x GPUs, and issue 14's acceptance 1):
#   mlp, bert-base, vit, bert-moe (experts = 2 x 64), vgg19, gpt (GPT-2, 32 and 8 sequences per
#   GPU) on paper-hetero (2 hosts of 8 V100-16GB + 6 of 8 P100-16GB); GPT-3 6.7B at the zoo's
#   default batch (8, the acceptance test's spec) and at 8 sequences per GPU (512) on paper-homo
#   (8 hosts of 8 V100-16GB);
#   GPT-3 175B at batch 1024 on paper-homo:hosts=128 (1,024 V100-16GB).
# Policies (hap-synth --policy; the fields a row does not name are pinned at their defaults, so no
# steering happens, except in the last row):
#   default              precision=fp32,optimizer=sgd,zero=0,recompute=none,micro_batches=1
#   bf16                 precision=bf16 (+ pinned)
#   adam                 optimizer=adam (+ pinned)
#   fp16+adam            precision=fp16,optimizer=adam (+ pinned)
#   fp16+adam+full       ... recompute=full
#   fp16+adam, mb=4      ... micro_batches=4
#   fp16+adam, steered   --policy precision=fp16,optimizer=adam --memory-limit 16G (the devices'
#                        memory): ZeRO stage, recomputation and micro-batches steered until it fits
# Per row: RUNS (default 3) runs of `hap-synth MODEL -c CLUSTER --policy P -f json -o plan.json`
# (median of hap-synth's own "seconds", the whole steered search, and of the process's CPU time,
# user + sys), then one `hap-sim MODEL -c CLUSTER --plan plan.json -f json` (deterministic) for the
# simulated iteration. Memory: the fullest device of the fullest device class (hap-synth's JSON
# "memory"), by component. A row where no program fits shows hap-synth's error's leanest program
# (parsed from the one-line error, the only place it is reported) and how far over the limit it is.
# Prints a markdown table on stdout; exit 1 if a run fails for another reason than "no program
# fits" or if the simulator's peak memory disagrees with the plan's.
#
# Environment: HAP_BENCH_TIMEOUT_S (default 600) and HAP_BENCH_VMEM_GIB (default 8) cap each run;
# HAP_POLICY_BENCH_ONLY=REGEX keeps the configurations whose model spec matches.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || {
  echo "usage: $0 BUILD_DIR [RUNS]" >&2
  exit 2
}
build=$1
runs=${2:-3}
for t in hap-synth hap-sim; do
  [ -x "$build/bin/$t" ] || {
    echo "policy-bench.sh: $build/bin/$t missing (build first)" >&2
    exit 1
  }
done
command -v python3 >/dev/null || {
  echo "policy-bench.sh: python3 is needed to parse the tools' JSON" >&2
  exit 1
}
dirty=$(git status --porcelain --untracked-files=no -- . ':!reports' ':!scripts' 2>/dev/null | head -c1)
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, $(uname -sr)"
echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)${dirty:+ (plus uncommitted source changes)}"
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)
status=0
python3 - "$build/bin" "$runs" "$tmp" "${HAP_BENCH_TIMEOUT_S:-600}" "${HAP_BENCH_VMEM_GIB:-8}" \
  "${HAP_POLICY_BENCH_ONLY:-}" <<'PY' || status=$?
import json, os, re, resource, statistics, subprocess, sys, time

bindir, runs, tmp, timeout_s, vmem_gib, only = sys.argv[1:7]
runs, timeout_s, vmem = int(runs), float(timeout_s), int(vmem_gib) << 30
synth, sim = os.path.join(bindir, "hap-synth"), os.path.join(bindir, "hap-sim")

CONFIGS = [  # (model spec, cluster)
    ("mlp:batch=2048", "paper-hetero"),
    ("bert-base:batch=2048", "paper-hetero"),
    ("vit:batch=2048", "paper-hetero"),
    ("bert-moe:batch=2048,devices=64", "paper-hetero"),
    ("vgg19:batch=2048", "paper-hetero"),
    ("gpt:batch=2048", "paper-hetero"),
    ("gpt:batch=512", "paper-hetero"),
    ("gpt:preset=gpt3-6.7b", "paper-homo"),
    ("gpt:preset=gpt3-6.7b,batch=512", "paper-homo"),
    ("gpt:preset=gpt3-175b,batch=1024", "paper-homo:hosts=128"),
]
PIN = "zero=0,recompute=none,micro_batches=1"
POLICIES = [  # (label, --policy, extra arguments)
    ("default", "precision=fp32,optimizer=sgd," + PIN, []),
    ("bf16", "precision=bf16," + PIN, []),
    ("adam", "optimizer=adam," + PIN, []),
    ("fp16+adam", "precision=fp16,optimizer=adam," + PIN, []),
    ("fp16+adam, recompute=full", "precision=fp16,optimizer=adam,zero=0,recompute=full,micro_batches=1", []),
    ("fp16+adam, micro_batches=4", "precision=fp16,optimizer=adam,zero=0,recompute=none,micro_batches=4", []),
    ("fp16+adam, --memory-limit 16G (steered)", "precision=fp16,optimizer=adam", ["--memory-limit", "16G"]),
]
DEFAULTS = {"precision": "fp32", "optimizer": "sgd", "zero": 0, "recompute": "none",
            "micro_batches": 1, "grad_accum": "half"}
UNIT = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
SIZE = r"([0-9.]+ (?:B|KiB|MiB|GiB|TiB))"
# hap-synth's own no-fit error (a pinned policy) and steering's (synth.c, steer.c)
NOFIT_PINNED = re.compile(
    r"needs " + SIZE + r" per device, on (\S+) " + SIZE + r" over its " + SIZE + r": parameters "
    + SIZE + r", gradients " + SIZE + r", optimizer state " + SIZE + r", activations " + SIZE)
NOFIT_STEERED = re.compile(
    r"no program fits in " + SIZE + r" per (\S+) with any policy tried: the leanest \(policy (.*?)\) "
    r"needs " + SIZE + r", " + SIZE + r" over: parameters " + SIZE + r", gradients " + SIZE
    + r", optimizer " + SIZE + r", activations " + SIZE)


def nbytes(s):
    v, u = s.split()
    return float(v) * UNIT[u]


def gib(b):
    return f"{b / 2**30:.2f}"


def limits():
    resource.setrlimit(resource.RLIMIT_AS, (vmem, vmem))


def run(cmd):
    """(rc, stdout, stderr, wall s, cpu s) of one capped run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, preexec_fn=limits)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        rc, out, err = 124, "", f"timed out after {timeout_s:.0f} s"
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return rc, out, err.strip(), wall, cpu


def brief(pol):
    """The policy's fields that differ from the default, as hap-synth's brief form."""
    parts = [f"{k}={v}" for k, v in pol.items() if k in DEFAULTS and DEFAULTS[k] != v]
    return ",".join(parts) or "default"


def fullest(memory):
    """The device class whose fullest device holds the most."""
    return max(memory, key=lambda m: m["total"])


fail = []
rows = []
for spec, cluster in CONFIGS:
    if only and not re.search(only, spec):
        continue
    base_total = None
    for label, policy, extra in POLICIES:
        plan = os.path.join(tmp, "plan.json")
        cmd = [synth, spec, "-c", cluster, "--policy", policy, *extra, "-f", "json", "-o", plan]
        shown = f"hap-synth '{spec}' -c {cluster} --policy {policy} {' '.join(extra)}".strip()
        outs = [run(cmd) for _ in range(runs)]
        rcs = {o[0] for o in outs}
        cpu = statistics.median(o[4] for o in outs)
        wall = statistics.median(o[3] for o in outs)
        r = {"model": spec, "cluster": cluster, "label": label, "cpu": cpu, "wall": wall}
        rc, out, err = outs[-1][:3]
        if rcs != {0}:
            m = NOFIT_PINNED.search(err) or NOFIT_STEERED.search(err)
            if rcs != {1} or "no program fits" not in err or m is None:
                fail.append(f"{shown}: exit {sorted(rcs)}: {err}")
                r["error"] = err.splitlines()[-1] if err else f"exit {rc}"
                rows.append(r)
                continue
            g = m.groups()
            if m.re is NOFIT_PINNED:
                need, dev, over, limit, par, grad, opt, act = g
                r["policy"] = "no program fits"
            else:
                limit, dev, leanest, need, over, par, grad, opt, act = g
                r["policy"] = f"no program fits (leanest tried: {leanest})"
            r.update(nofit=True, device=dev, total=nbytes(need), over=nbytes(over),
                     parts=[nbytes(x) for x in (par, grad, opt, act)])
        else:
            docs = [json.loads(o[1]) for o in outs]
            preds = {d["predicted_iteration_s"] for d in docs}
            if len(preds) != 1:
                fail.append(f"{shown}: predicted s/iter differs between runs: {sorted(preds)}")
            d = docs[-1]
            pol = d.get("policy", DEFAULTS)
            r["policy"] = brief(pol) + (f" (steered, {d['policy_candidates']} candidates)"
                                        if d.get("steered") else "")
            r["search"] = statistics.median(x["seconds"] for x in docs)
            r["predicted"] = d["predicted_iteration_s"]
            mem = fullest(d["memory"])
            r.update(nofit=False, device=mem["model"], total=mem["total"],
                     parts=[mem[k] for k in ("parameters", "gradients", "optimizer", "activations")],
                     others=", ".join(f"{m['model']} {gib(m['total'])}" for m in d["memory"]
                                      if m is not mem))
            other = mem["comm_buffers"] + mem["workspace"]
            if other:
                r["parts"].append(other)
            src, sout, serr, _, _ = run([sim, spec, "-c", cluster, "--plan", plan, "-f", "json", "-q"])
            if src != 0:
                fail.append(f"hap-sim '{spec}' -c {cluster} --plan (of {shown}): exit {src}: {serr}")
            else:
                srow = json.loads(sout)["rows"][0]
                r["simulated"] = srow["iteration_s"]
                peak = srow["peak_memory_bytes"]
                plan_peak = max(m["total"] for m in d["memory"])
                if abs(peak - plan_peak) > 1e-6 * plan_peak:
                    fail.append(f"{shown}: simulated peak memory {peak:.0f} B != the plan's {plan_peak:.0f} B")
        if label == "default":
            base_total = r["total"]
        r["vs"] = r["total"] / base_total if base_total else None
        rows.append(r)
        print(f"  {label:40s} {spec} -c {cluster}: {r['policy']}, cpu {cpu:.2f} s",
              file=sys.stderr, flush=True)

print()
print(f"Each row: {runs} runs of hap-synth (median), one hap-sim of the written plan. Memory in GiB,"
      " the fullest device of the fullest device class; \"no program fits\" rows show the leanest"
      " program hap-synth found and how far over the limit it is.")
print()
print("| model | cluster | policy asked | policy (hap-synth) | search s | CPU s | predicted s/iter "
      "| simulated s/iter | device | total GiB | parameters | gradients | optimizer | activations "
      "| total vs default | other device classes |")
print("|---|---|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---|")
for r in rows:
    head = f"| {r['model']} | {r['cluster']} | {r['label']} |"
    if "error" in r:
        print(f"{head} error: {r['error']} | | {r['cpu']:.2f} | | | | | | | | | | |")
        continue
    vs = f"{r['vs']:.2f}x" if r["vs"] else ""
    parts = " | ".join(gib(x) for x in r["parts"][:4])
    if r["nofit"]:
        print(f"{head} {r['policy']} | — | {r['cpu']:.2f} | — | — | {r['device']} "
              f"| {gib(r['total'])} (+{gib(r['over'])} over) | {parts} | {vs} | |")
    else:
        simulated = f"{r['simulated']:.4f}" if "simulated" in r else "hap-sim failed"
        print(f"{head} {r['policy']} | {r['search']:.3f} | {r['cpu']:.2f} | {r['predicted']:.4f} "
              f"| {simulated} | {r['device']} | {gib(r['total'])} | {parts} | {vs} | {r['others']} |")
for f in fail:
    print("FAIL:", f, file=sys.stderr)
sys.exit(1 if fail else 0)
PY
echo
echo "total wall time: $(($(date +%s) - start)) s; load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
exit "$status"
