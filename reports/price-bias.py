#!/usr/bin/env python3
"""How far a replay's statistic of task times falls from the mean iteration, from hap-run
--task-times.

hap-profile measure --plan replays a plan for at least 10 iterations and prices each kernel row
at a statistic of its samples; the simulator adds the prices up, and hap-run compares the sum
with a mean iteration, which counts every slow run of every task. This script cuts a run's timed
iterations into consecutive windows of W (default 10, the replay's fewest), prices every compute
task of every rank from its W samples with each statistic, and prints how far the sum of the
prices is from the sum of the samples' means, per window and rank: the median (--price p50), the
mean without the lowest and highest 5 % of the samples, at least one of each (the price before
December 2026), and the mean (the price now, 0 by definition). Tasks are priced one by one; the
replay pools the samples of tasks with equal shapes, which a task-times file does not show.

Usage: reports/price-bias.py TASK_TIMES.csv [--window W] [--json]
"""
import json
import math
import statistics
import sys

from task_times import every_rank_in_every_iteration, fail, read_timed

SCRIPT = "price-bias.py"


def trimmed_mean_5(x):
    """The mean without ceil(5 % of n) values from each end, at most (n - 1) // 2."""
    s = sorted(x)
    cut = min(math.ceil(0.05 * len(s)), (len(s) - 1) // 2)
    kept = s[cut:len(s) - cut]
    return sum(kept) / len(kept)


STATISTICS = (("median", statistics.median), ("trimmed_5", trimmed_mean_5),
              ("mean", statistics.mean))


def analyse(path, runs, window):
    ranks, iters = every_rank_in_every_iteration(SCRIPT, path, runs)
    if len(iters) < window:
        fail(SCRIPT, "%s: %d timed iterations, fewer than the window of %d (hap-run --iters)"
             % (path, len(iters), window))
    windows = [iters[k:k + window] for k in range(0, len(iters) - window + 1, window)]
    gaps = {name: [] for name, _ in STATISTICS}
    n_tasks = {}
    for r in ranks:
        compute = sorted({t for i in iters for t, v in runs[r, i].items() if v[1] == "compute"})
        n_tasks[r] = len(compute)
        for w in windows:
            samples = [[runs[r, i][t][3] - runs[r, i][t][2] for i in w if t in runs[r, i]]
                       for t in compute]
            samples = [x for x in samples if x]
            mean_sum = sum(statistics.mean(x) for x in samples)
            if mean_sum <= 0:
                continue
            for name, stat in STATISTICS:
                gaps[name].append((sum(stat(x) for x in samples) - mean_sum) / mean_sum)
    if not gaps["mean"]:
        fail(SCRIPT, "%s: no compute task took any time (expected kind compute with end_s > "
             "start_s)" % path)
    return {
        "ranks": len(ranks),
        "timed_iterations": len(iters),
        "window": window,
        "windows": len(windows),
        "compute_tasks": [n_tasks[r] for r in ranks],
        "statistics": {name: {"mean": statistics.mean(g), "min": min(g), "max": max(g)}
                       for name, g in gaps.items()},
    }


def main(argv):
    args, window, as_json = [], 10, False
    it = iter(argv[1:])
    for a in it:
        if a == "--json":
            as_json = True
        elif a == "--window":
            w = next(it, "")
            if not w.isdigit() or int(w) < 1:
                print("price-bias.py: --window %s: expected a whole number >= 1" % w,
                      file=sys.stderr)
                return 2
            window = int(w)
        else:
            args.append(a)
    if len(args) != 1:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    out = analyse(args[0], read_timed(SCRIPT, args[0]), window)
    if as_json:
        print(json.dumps(out, indent=1))
        return 0
    print("%s: %d ranks, %d timed iterations: %d windows of %d, %s compute tasks a rank"
          % (args[0], out["ranks"], out["timed_iterations"], out["windows"], window,
             "/".join(str(n) for n in out["compute_tasks"])))
    label = {"median": "the median (--price p50)",
             "trimmed_5": "the mean without 5 % of each end, at least one sample",
             "mean": "the mean"}
    for name, _ in STATISTICS:
        s = out["statistics"][name]
        print("  priced at %s: sums %+.2f %% from the samples' mean (%+.2f..%+.2f %%)"
              % (label[name], 100 * s["mean"], 100 * s["min"], 100 * s["max"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
