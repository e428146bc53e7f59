#!/usr/bin/env python3
"""Where a hap-run iteration's time goes, from its Chrome trace (hap-run -t TRACE).

For every process of the trace (a rank's simulated row and its measured row) prints the span of
the iteration drawn there, the time inside tasks by category (compute, collective, update, ...)
and the time between tasks: the gap from one task's end to the next one's start, summed by the
category of the task that follows. In a simulated row a gap is waiting (a collective waits for
its slowest member); in a measured row it is also the runner's own time between tasks, which no
task's timing holds and so no simulation prices. Times in ms.

Usage: reports/trace-gaps.py TRACE.json
"""
import collections
import json
import sys


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: trace-gaps.py TRACE.json\n")
        return 2
    try:
        with open(argv[1]) as f:
            trace = json.load(f)
    except (OSError, ValueError) as e:
        sys.stderr.write(f"trace-gaps.py: {argv[1]}: {e}\n")
        return 1
    try:
        events = trace["traceEvents"] if isinstance(trace, dict) else trace
        names = {e["pid"]: e["args"]["name"] for e in events
                 if e.get("ph") == "M" and e.get("name") == "process_name"}
        by_pid = collections.defaultdict(list)
        for e in events:
            if e.get("ph") == "X":
                by_pid[e["pid"]].append(e)
                float(e["ts"]) + float(e["dur"])
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        sys.stderr.write(f"trace-gaps.py: {argv[1]}: not a Chrome trace of hap-run "
                         f"(traceEvents with pid, ts and dur): {e!r}\n")
        return 1
    if not by_pid:
        sys.stderr.write(f"trace-gaps.py: {argv[1]}: no task events (ph X)\n")
        return 1
    print("| row | tasks | span ms | in tasks ms (by category) | between tasks ms (by next task) |")
    print("|---|---:|---:|---|---|")
    for pid in sorted(by_pid):
        tasks = sorted(by_pid[pid], key=lambda e: e["ts"])
        busy = collections.Counter()
        gaps = collections.Counter()
        for e in tasks:
            busy[e.get("cat", "?")] += e["dur"]
        for a, b in zip(tasks, tasks[1:]):
            gaps[b.get("cat", "?")] += max(0.0, b["ts"] - (a["ts"] + a["dur"]))
        span = tasks[-1]["ts"] + tasks[-1]["dur"] - tasks[0]["ts"]
        fmt = lambda c: ", ".join(f"{k} {v / 1e3:.3f}" for k, v in sorted(c.items()))
        row = str(names.get(pid, pid)).replace(" | ", ", ")
        print(f"| {row} | {len(tasks)} | {span / 1e3:.3f} | {fmt(busy)} | "
              f"{fmt(gaps)} (total {sum(gaps.values()) / 1e3:.3f}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
