#!/usr/bin/env python3
"""Write the nccl-tests logs hap's tests import (tests/data/nccl-tests/*.log).

They follow nccl-tests' documented output: '#' header lines, one '#  Rank' line per GPU, the
three-line column header, one row per size (size, count, type, redop, root, then time, algbw,
busbw and #wrong out-of-place and in-place), the out-of-bounds and average bus bandwidth
footer. The times come from a model of 8 A100 SXM4 80 GB on one NVLink host, not from a run:
t(S) = latency + S / (busbw_peak / factor), a protocol step between 64 KiB and 1 MiB, and
in-place a fraction of a per cent off out-of-place. Rerun to regenerate (deterministic):
    python3 tests/data/nccl-tests/make_logs.py tests/data/nccl-tests
"""
import os
import sys

N = 8
HOST = "dgx-a100-0"
MODEL = "NVIDIA A100-SXM4-80GB"
BUSIDS = ["0x07", "0x0f", "0x47", "0x4e", "0x87", "0x90", "0xb7", "0xbd"]

# test: (redop, root, size counts every rank's share, busbw factor, latency us, peak busbw GB/s)
TESTS = {
    "all_reduce_perf": ("sum", -1, False, 2 * (N - 1) / N, 24.0, 232.0),
    "all_gather_perf": ("none", -1, True, (N - 1) / N, 14.0, 221.0),
    "reduce_scatter_perf": ("sum", -1, True, (N - 1) / N, 15.0, 224.0),
    "alltoall_perf": ("none", -1, True, (N - 1) / N, 19.0, 176.0),
    "broadcast_perf": ("none", 0, False, 1.0, 12.0, 118.0),
    "sendrecv_perf": ("sum", -1, False, 1.0, 9.0, 146.0),
}


def time_us(test, size, in_place):
    _, _, _, factor, lat, peak = TESTS[test]
    algbw = peak / factor  # GB/s at large sizes
    t = lat + size / (algbw * 1e3)
    if 65536 <= size <= 1048576:
        t *= 1.12  # the protocol step
    wobble = ((size * 2654435761) % 1000) / 1000.0 - 0.5  # deterministic, in [-0.5, 0.5)
    return t * (1 + (0.004 if in_place else 0.001) * wobble)


def fmt_time(t):
    # nccl-tests prints fewer decimals as the time grows
    if t >= 10000:
        return "%7.0f" % t
    if t >= 100:
        return "%7.1f" % t
    return "%7.2f" % t


def log(test):
    redop, root, total, factor, _, _ = TESTS[test]
    lines = [
        "# nThread 1 nGpus 1 minBytes 8 maxBytes 1073741824 step: 2(factor) warmup iters: 5 "
        "iters: 20 agg iters: 1 validation: 1 graph: 0",
        "#",
        "# Using devices",
    ]
    for r in range(N):
        lines.append("#  Rank %2d Group  0 Pid %6d on %10s device %2d [%s] %s"
                     % (r, 41230 + r, HOST, r, BUSIDS[r], MODEL))
    lines += [
        "#",
        "#                                                              out-of-place"
        "                       in-place          ",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong"
        "     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)       "
        "     (us)  (GB/s)  (GB/s)       ",
    ]
    sum_busbw, rows = 0.0, 0
    size = 8
    while size <= 1 << 30:
        if total and size < 4 * N:
            size *= 2
            continue
        count = size // 4 // (N if total else 1)
        row = "%12d  %12d  %8s  %6s  %6d" % (count * 4 * (N if total else 1), count, "float",
                                               redop, root)
        for in_place in (False, True):
            t = float(fmt_time(time_us(test, size, in_place)))
            algbw = size / (t * 1e3)
            row += "  %s  %6.2f  %6.2f  %5d" % (fmt_time(t), algbw, algbw * factor, 0)
            if not in_place:
                sum_busbw += algbw * factor
                rows += 1
        lines.append(row)
        size *= 2
    lines += ["# Out of bounds values : 0 OK",
              "# Avg bus bandwidth    : %g " % (sum_busbw / rows), "#", ""]
    return "\n".join(lines)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    for test in TESTS:
        with open(os.path.join(out, test + ".log"), "w") as f:
            f.write(log(test))


if __name__ == "__main__":
    main()
