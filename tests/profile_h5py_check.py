#!/usr/bin/env python3
"""Check with h5py what a Python user sees in a hap-profile: the sample that
tests/profile/write_sample_profile.c writes (its header has the formulas repeated here).

  - root, device, environment and sweep string attributes are Python str;
  - integer attributes are Python ints (numbers.Integral, not bool), floats are floats;
  - every dataset has a str "units" attribute with the expected unit;
  - every value equals the known sample value (computed here with the same double arithmetic).

Usage: profile_h5py_check.py FILE. Exit 0 when everything holds, 1 with one line per problem,
and 1 when h5py cannot be imported (scripts/setup-debian.sh installs python3-h5py: a missing one
is a broken set-up, not a skip)."""
import math
import numbers
import sys

try:
    import h5py
    import numpy as np
except ImportError as e:  # pragma: no cover - depends on the machine
    print(f"profile_h5py_check: FAIL: h5py is not importable ({e}); "
          "scripts/setup-debian.sh installs python3-h5py")
    sys.exit(1)

SIZES = [8, 1024, 1048576, 16777216]
REPS = 3
HOSTS = ["v100-0", "p100-0"]
DEVICES = ["v100-0:0", "v100-0:1", "p100-0:0", "p100-0:1"]
P2P = {"0-1": (0, 1, 8e-6, 40e9), "0-2": (0, 2, 25e-6, 10e9)}
COLLS = {
    "all_reduce/world": ([0, 1, 2, 3], 50e-6, 5e9, lambda n: 2.0 * (n - 1) / n),
    "all_gather/cross-host": ([0, 2], 30e-6, 9e9, lambda n: (n - 1) / n),
}

problems = []


def check(ok, what):
    if not ok:
        problems.append(what)
    return ok


def is_str(v):
    return isinstance(v, str)


def is_int(v):
    return isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_))


def is_float(v):
    return isinstance(v, (float, np.floating))


def attr(obj, name, kind, want=None):
    """obj.attrs[name] must exist, have Python type `kind` (str | int | float) and equal want."""
    where = f"{obj.name}: attribute {name}"
    if not check(name in obj.attrs, f"{where}: missing"):
        return None
    v = obj.attrs[name]
    test = {"str": is_str, "int": is_int, "float": is_float}[kind]
    expected = {"str": "a Python str", "int": "an integer", "float": "a float"}[kind]
    check(test(v), f"{where}: {type(v).__name__} {v!r}, expected {expected}")
    if want is not None:
        check(v == want, f"{where}: {v!r}, expected {want!r}")
    return v


def samples(alpha, beta):
    return [[(alpha + s / beta) * (1 + 0.01 * (r - 1)) for r in range(REPS)] for s in SIZES]


def quantile(sorted_x, q):
    """numpy's "linear" quantile, written the way fit.c computes it."""
    pos = q * (len(sorted_x) - 1)
    lo = math.floor(pos)
    if lo + 1 >= len(sorted_x):
        return sorted_x[-1]
    return sorted_x[lo] + (pos - lo) * (sorted_x[lo + 1] - sorted_x[lo])


def same(ds, want):
    got = ds[()].tolist()
    check(got == want, f"{ds.name}: {got}, expected {want}")


def check_units(f):
    def visit(name, obj):
        if not isinstance(obj, h5py.Dataset):
            return
        units = attr(obj, "units", "str")
        leaf = name.rsplit("/", 1)[-1]
        want = {"sizes_bytes": "bytes", "algbw_Bps": "B/s", "busbw_Bps": "B/s"}.get(
            leaf, "s" if leaf.endswith("_s") else None)
        if want is not None:
            check(units == want, f"/{name}: units {units!r}, expected {want!r}")
        elif leaf == "gemm":
            check(units is not None and "FLOP/s" in units, f"/{name}: units {units!r}")
        elif leaf == "kernels":
            check(units is not None and "p50_s" in units, f"/{name}: units {units!r}")

    f.visititems(visit)


def check_root(f):
    attr(f, "format", "str", "hap-profile")
    attr(f, "version", "str", "2.2")
    attr(f, "created", "str", "2025-01-31T12:00:00Z")
    attr(f, "tool", "str", "hap-profile 0.1.0")
    attr(f, "backend", "str", "cuda+nccl")
    hosts = f.attrs.get("hosts")
    check(hosts is not None and [type(h) for h in hosts] == [str, str] and list(hosts) == HOSTS,
          f"/: attribute hosts: {hosts!r}, expected the Python strs {HOSTS}")
    env = f["env"]
    attr(env, "NCCL_DEBUG", "str", "INFO")
    attr(env, "CUDA_VISIBLE_DEVICES", "str", "0,1")


def check_devices(f):
    for i, name in enumerate(DEVICES):
        d = f[f"devices/{i}"]
        v100 = i < 2
        attr(d, "name", "str", name)
        attr(d, "host", "str", HOSTS[0] if v100 else HOSTS[1])
        attr(d, "model", "str", "Tesla V100-SXM2-16GB" if v100 else "Tesla P100-PCIE-16GB")
        attr(d, "kind", "str", "gpu")
        attr(d, "memory_bytes", "int", 16 << 30)
        attr(d, "memory_bw_Bps", "float", 900e9 if v100 else 732e9)
        attr(d, "launch_s", "float", 5e-6)
        attr(d, "peak_flops_float32", "float", 15.7e12 if v100 else 9.3e12)
        rate = 14e12 if v100 else 9e12
        g = d["gemm"][()]
        check(len(g) == 3, f"{d.name}/gemm: {len(g)} rows, expected 3")
        for r, row in enumerate(g[:3]):
            n = 1024 * (r + 1)
            want = (n, n, n, b"float32", 2.0 * n * n * n / rate, rate)
            got = (int(row["m"]), int(row["n"]), int(row["k"]), bytes(row["dtype"]),
                   float(row["seconds"]), float(row["flops_per_s"]))
            check(got == want, f"{d.name}/gemm row {r}: {got}, expected {want}")
        k = d["kernels"][()]
        want = [(b"linear", b"fwd", 1234, b"[64, 1024] x [4096, 1024]", 1e-4, 1.2e-4, 20,
                 1.05e-4),
                (b"gelu", b"bwd", 5678, b"[64, 4096]", 2e-5, 3e-5, 50, 0.0)]
        got = [(bytes(x["op"]), bytes(x["direction"]), int(x["shape_key"]), bytes(x["shape"]),
                float(x["p50_s"]), float(x["p95_s"]), int(x["reps"]), float(x["mean_s"]))
               for x in k]
        check(got == want, f"{d.name}/kernels: {got}, expected {want}")


def check_sweep(g, alpha, beta):
    s = samples(alpha, beta)
    same(g["sizes_bytes"], SIZES)
    same(g["samples_s"], s)
    check(g["sizes_bytes"].dtype.kind == "i", f"{g.name}/sizes_bytes: not integers")
    same(g["p50_s"], [quantile(sorted(row), 0.5) for row in s])
    same(g["p95_s"], [quantile(sorted(row), 0.95) for row in s])
    attr(g, "warmup", "int", 0)
    attr(g, "iters", "int", 1)
    return s


def check_sweeps(f):
    check(sorted(f["p2p"].keys()) == sorted(P2P), f"/p2p: {list(f['p2p'].keys())}")
    for name, (src, dst, alpha, beta) in P2P.items():
        g = f[f"p2p/{name}"]
        attr(g, "src", "int", src)
        attr(g, "dst", "int", dst)
        check_sweep(g, alpha, beta)
        lat = attr(g, "latency_s", "float")
        bw = attr(g, "bandwidth_Bps", "float")
        check(lat is not None and abs(lat - alpha) <= 1e-6 * alpha, f"{g.name}: latency_s {lat}")
        check(bw is not None and abs(bw - beta) <= 1e-6 * beta, f"{g.name}: bandwidth_Bps {bw}")
        check_fit(g, 1048576, alpha + 1048576 / beta)
    for path, (ranks, alpha, beta, factor) in COLLS.items():
        g = f[f"collectives/{path}"]
        got = g.attrs.get("ranks")
        check(got is not None and all(is_int(r) for r in got) and list(got) == ranks,
              f"{g.name}: attribute ranks {got!r}, expected ints {ranks}")
        s = check_sweep(g, alpha, beta)
        p50 = [quantile(sorted(row), 0.5) for row in s]
        algbw = [size / t for size, t in zip(SIZES, p50)]
        same(g["algbw_Bps"], algbw)
        same(g["busbw_Bps"], [a * factor(len(ranks)) for a in algbw])
        check_fit(g, 1048576, p50[2])


def check_fit(g, size, want):
    """The piecewise fit (fit_upper_bytes, fit_alpha_s, fit_beta_Bps: float64 arrays of one
    length, bounds increasing, the last inf) predicts `want` seconds at `size` bytes."""
    arrays = [g.attrs.get(n) for n in ("fit_upper_bytes", "fit_alpha_s", "fit_beta_Bps")]
    ok = all(a is not None and np.asarray(a).dtype == np.float64 and np.ndim(a) == 1
             for a in arrays)
    check(ok, f"{g.name}: fit_upper_bytes, fit_alpha_s, fit_beta_Bps: expected float64 arrays")
    if not ok:
        return
    upper, alpha, beta = (list(map(float, a)) for a in arrays)
    check(len(upper) == len(alpha) == len(beta) >= 1, f"{g.name}: fit arrays differ in length")
    check(math.isinf(upper[-1]) and all(x < y for x, y in zip(upper, upper[1:])),
          f"{g.name}: fit_upper_bytes {upper}, expected increasing bounds ending in inf")
    k = next(i for i, u in enumerate(upper) if size < u or i == len(upper) - 1)
    pred = alpha[k] + size / beta[k]
    check(abs(pred - want) <= 1e-6 * want,
          f"{g.name}: fit predicts {pred} s at {size} B, expected {want} s")


def main():
    if len(sys.argv) != 2:
        print("Usage: profile_h5py_check.py FILE", file=sys.stderr)
        return 2
    with h5py.File(sys.argv[1], "r") as f:
        check_root(f)
        check_devices(f)
        check_sweeps(f)
        check_units(f)
    for p in problems:
        print(f"{sys.argv[1]}: {p}")
    if not problems:
        print(f"{sys.argv[1]}: h5py sees str attributes, int attributes, units on every dataset "
              "and the sample values")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
