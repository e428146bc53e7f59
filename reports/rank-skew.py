#!/usr/bin/env python3
"""How much ranks that wait for each other lose to their spread, from hap-run --task-times.

A deterministic simulator adds up each rank's mean task times and lets collectives start when the
slowest rank arrives: max over ranks of the mean. A real run waits, iteration by iteration, for
the rank that is slowest *then*: the mean of the max, which is larger when the ranks' times vary
(on a shared host one core runs slower for a while, now one, now the other). This script splits
every timed iteration of every rank at the tasks where all ranks wait for each other (column
`waits`: blocking collectives, and with --overlap the first update), and prints per rank its busy
time (compute, local and update tasks that do not wait) and how often it was the busiest, then
summed over the segments between those tasks: the mean over iterations of the max over ranks, the
max over ranks of the mean, and the difference, the synchronisation penalty the simulator does
not see.

Usage: reports/rank-skew.py TASK_TIMES.csv [--json]
"""
import json
import statistics
import sys

from task_times import every_rank_in_every_iteration, read_timed

SCRIPT = "rank-skew.py"


def analyse(path, runs):
    ranks, iters = every_rank_in_every_iteration(SCRIPT, path, runs)
    # the tasks where every rank waits for the others, in every iteration, in task order
    meets = sorted(set.intersection(*(
        {t for t, v in runs[r, i].items() if v[4]} for r in ranks for i in iters)))
    per_rank, segs = {}, [[[0.0] * len(iters) for _ in ranks] for _ in range(len(meets) + 1)]
    iteration = [0.0] * len(iters)
    for ri, r in enumerate(ranks):
        busy = []
        for ii, i in enumerate(iters):
            tasks = runs[r, i]
            busy.append(sum(e - s for _, k, s, e, w in tasks.values()
                            if k != "collective" and not w))
            last = max(v[3] for v in tasks.values())
            iteration[ii] = max(iteration[ii], last)
            prev = 0.0  # the rank's iteration start
            for c, t in enumerate(meets):
                segs[c][ri][ii] = tasks[t][2] - prev
                prev = tasks[t][3]
            segs[-1][ri][ii] = last - prev
        per_rank[r] = busy
    busiest = [max(ranks, key=lambda r: per_rank[r][ii]) for ii in range(len(iters))]
    seg_rows = []
    for s in segs:
        mean_max = statistics.mean(max(s[ri][ii] for ri in range(len(ranks)))
                                   for ii in range(len(iters)))
        max_mean = max(statistics.mean(s[ri]) for ri in range(len(ranks)))
        seg_rows.append({"mean_of_max_s": mean_max, "max_of_mean_s": max_mean})
    return {
        "ranks": len(ranks),
        "timed_iterations": len(iters),
        "waits": len(meets),
        "mean_iteration_s": statistics.mean(iteration),
        "per_rank": [{"rank": r, "busy_mean_s": statistics.mean(per_rank[r]),
                      "busy_min_s": min(per_rank[r]), "busy_max_s": max(per_rank[r]),
                      "slowest_in": busiest.count(r)} for r in ranks],
        "segments_mean_of_max_s": sum(x["mean_of_max_s"] for x in seg_rows),
        "segments_max_of_mean_s": sum(x["max_of_mean_s"] for x in seg_rows),
        "penalty_s": sum(x["mean_of_max_s"] - x["max_of_mean_s"] for x in seg_rows),
    }


def main(argv):
    args = [a for a in argv[1:] if a != "--json"]
    if len(args) != 1:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    out = analyse(args[0], read_timed(SCRIPT, args[0]))
    if "--json" in argv:
        print(json.dumps(out, indent=1))
        return 0
    ms = 1e3
    print("%s: %d ranks, %d timed iterations, mean iteration %.3f ms, %d tasks where every rank "
          "waits" % (args[0], out["ranks"], out["timed_iterations"], ms * out["mean_iteration_s"],
                     out["waits"]))
    for p in out["per_rank"]:
        print("  rank %d: busy %.3f ms a mean iteration (%.3f..%.3f), the busiest in %d of %d"
              % (p["rank"], ms * p["busy_mean_s"], ms * p["busy_min_s"], ms * p["busy_max_s"],
                 p["slowest_in"], out["timed_iterations"]))
    print("  between them: mean of the slowest rank %.3f ms, slowest rank's mean %.3f ms: "
          "synchronisation penalty %.3f ms (%.1f %% of the iteration)"
          % (ms * out["segments_mean_of_max_s"], ms * out["segments_max_of_mean_s"],
             ms * out["penalty_s"], 100 * out["penalty_s"] / out["mean_iteration_s"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
