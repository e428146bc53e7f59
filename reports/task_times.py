"""Reader of hap-run --task-times files, shared by reports/rank-skew.py and price-bias.py.

A file is CSV with the header COLUMNS, one line per task a rank ran in an iteration (warm-ups
included, timed 0); start_s and end_s are seconds from the rank's iteration start.
"""
import csv
import sys

COLUMNS = ("rank", "iteration", "timed", "task", "name", "kind", "phase", "waits", "start_s",
           "end_s")


def fail(script, msg):
    """One error line on stderr, exit 1."""
    print("%s: %s" % (script, msg), file=sys.stderr)
    sys.exit(1)


def read_timed(script, path):
    """{(rank, iteration): {task: (name, kind, start_s, end_s, waits)}} of the timed iterations;
    a malformed file ends the script with one line naming the file and the line."""
    try:
        f = open(path, newline="")
    except OSError as e:
        fail(script, "%s: %s" % (path, e.strerror))
    runs = {}
    with f:
        rows = csv.reader(f)
        header = next(rows, None)
        if header is None or tuple(header) != COLUMNS:
            fail(script, "%s: line 1: expected the header %s (hap-run --task-times), got %s"
                 % (path, ",".join(COLUMNS), ",".join(header or ["nothing"])))
        for line, row in enumerate(rows, start=2):
            if len(row) != len(COLUMNS):
                fail(script, "%s: line %d: %d fields, expected %d"
                     % (path, line, len(row), len(COLUMNS)))
            try:
                rank, it, timed, task, waits = (int(row[i]) for i in (0, 1, 2, 3, 7))
                start, end = float(row[8]), float(row[9])
            except ValueError:
                fail(script, "%s: line %d: rank, iteration, timed, task, waits: integers; "
                     "start_s, end_s: numbers; got %s" % (path, line, ",".join(row)))
            if not start <= end:
                fail(script, "%s: line %d: end_s %s before start_s %s"
                     % (path, line, row[9], row[8]))
            if timed:
                runs.setdefault((rank, it), {})[task] = (row[4], row[5], start, end, waits == 1)
    if not runs:
        fail(script, "%s: no timed iteration (expected lines with timed 1)" % path)
    return runs


def every_rank_in_every_iteration(script, path, runs):
    """(ranks, iterations), sorted; ends the script if a rank misses a timed iteration."""
    ranks = sorted({r for r, _ in runs})
    iters = sorted({i for _, i in runs})
    missing = [(r, i) for r in ranks for i in iters if (r, i) not in runs]
    if missing:
        fail(script, "%s: rank %d has no tasks in timed iteration %d (expected every rank in "
             "every iteration)" % (path, missing[0][0], missing[0][1]))
    return ranks, iters
