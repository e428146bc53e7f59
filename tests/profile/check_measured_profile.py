#!/usr/bin/env python3
"""Check with h5py a profile that `hap-profile measure` wrote on N CPU ranks of one host.

Usage: check_measured_profile.py FILE N [--speed-ratio R]
  - root attributes (format hap-profile, backend cpu+mpi), one host, N devices with a GEMM sweep,
    memory bandwidth and launch overhead;
  - every ordered pair measured (N (N-1) sweeps), every collective over the world, with
    p50 <= p95, algbw = size / p50 and busbw = algbw * the nccl-tests factor;
  - every sweep's piecewise fit (fit_upper_bytes, fit_alpha_s, fit_beta_Bps: 1 to 8 pieces,
    bounds increasing and the last inf, alpha >= 0, beta > 0) predicts its own p50s within a
    factor of 2 at the median (a gross check: accuracy is test_fit_holdout's);
  - with --speed-ratio R: the best GEMM FLOP/s of device 1 over that of device 0 is within 10 %
    of R (emulated speeds); prints the ratio.
Exit 0 when everything holds, 1 with one line per problem, 1 when h5py cannot be imported
(scripts/setup-debian.sh installs python3-h5py)."""
import sys

try:
    import h5py
    import numpy as np
except ImportError as e:  # pragma: no cover - depends on the machine
    print(f"check_measured_profile: FAIL: h5py is not importable ({e}); "
          "scripts/setup-debian.sh installs python3-h5py")
    sys.exit(1)

path, n = sys.argv[1], int(sys.argv[2])
ratio = float(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[3] == "--speed-ratio" else None
problems = []


def check(ok, what):
    if not ok:
        problems.append(what)


f = h5py.File(path, "r")
check(f.attrs.get("format") == "hap-profile", "root: format is not hap-profile")
check(f.attrs.get("backend") == "cpu+mpi", "root: backend is not cpu+mpi")
check(len(f.attrs["hosts"]) == 1, "root: expected one host")
check("mpi.library" in f["env"].attrs, "env: mpi.library missing")
devs = f["devices"]
check(len(devs) == n, f"devices: {len(devs)}, expected {n}")
best = []
for i in range(len(devs)):
    d = devs[str(i)]
    check(d.attrs["kind"] == "cpu", f"device {i}: kind {d.attrs['kind']}")
    check(d.attrs["memory_bw_Bps"] > 1e8, f"device {i}: memory bandwidth {d.attrs['memory_bw_Bps']}")
    check(0 < d.attrs["launch_s"] < 1e-3, f"device {i}: launch {d.attrs['launch_s']}")
    check(d.attrs["update_bw_Bps"] > 1e8, f"device {i}: update bandwidth {d.attrs['update_bw_Bps']}")
    if "gemm" in d:
        g = d["gemm"][:]
        check(len(g) > 0, f"device {i}: empty GEMM sweep")
        flops = 2.0 * g["m"] * g["n"] * g["k"] / g["seconds"]
        check(np.allclose(flops, g["flops_per_s"]), f"device {i}: flops_per_s != 2mnk/seconds")
        best.append(float(g["flops_per_s"].max()))


def check_fit(name, s):
    arrs = [s.attrs.get(k) for k in ("fit_upper_bytes", "fit_alpha_s", "fit_beta_Bps")]
    if any(a is None for a in arrs):
        check(False, f"{name}: fit_upper_bytes, fit_alpha_s, fit_beta_Bps missing")
        return
    up, al, be = (np.asarray(a, dtype=float) for a in arrs)
    check(1 <= len(up) <= 8 and len(up) == len(al) == len(be), f"{name}: fit array lengths")
    check(np.isinf(up[-1]) and np.all(np.diff(up) > 0), f"{name}: fit_upper_bytes {up}")
    check(np.all(al >= 0) and np.all(be > 0), f"{name}: fit alpha {al}, beta {be}")
    size, p50 = s["sizes_bytes"][:].astype(float), s["p50_s"][:]
    k = np.minimum(np.searchsorted(up, size, side="right"), len(up) - 1)
    pred = al[k] + size / be[k]
    err = float(np.median(np.abs(pred - p50) / p50))
    check(np.all(pred > 0) and err < 1.0, f"{name}: fit median error {err:.2f} on its own sizes")


if ratio is not None:
    check(len(best) == n, "GEMM sweeps missing for the speed check")
    if len(best) >= 2:
        got = best[1] / best[0]
        print(f"GEMM sustained FLOP/s: rank 0 {best[0]/1e9:.2f} G, rank 1 {best[1]/1e9:.2f} G, "
              f"ratio {got:.3f} (expected {ratio} within 10 %)")
        check(abs(got / ratio - 1) <= 0.10, f"speed ratio {got:.3f}, expected {ratio} +- 10 %")
if "p2p" in f and len(f["p2p"]) > 0:
    check(len(f["p2p"]) == n * (n - 1), f"p2p: {len(f['p2p'])} sweeps, expected {n * (n - 1)}")
    for k, s in f["p2p"].items():
        check(s["samples_s"].shape == (len(s["sizes_bytes"]), s["samples_s"].shape[1]), f"p2p {k}")
        check(s.attrs["bandwidth_Bps"] > 0 and s.attrs["latency_s"] > 0, f"p2p {k}: fit")
        check_fit(f"p2p {k}", s)
    factors = {"all_reduce": 2 * (n - 1) / n, "all_gather": (n - 1) / n,
               "reduce_scatter": (n - 1) / n, "all_to_all": (n - 1) / n, "broadcast": 1.0}
    for kind, fac in factors.items():
        s = f["collectives"][kind]["world"]
        size, p50, p95 = s["sizes_bytes"][:], s["p50_s"][:], s["p95_s"][:]
        check(np.all(p50 <= p95), f"{kind}: p50 > p95")
        check(np.allclose(s["algbw_Bps"][:], size / p50), f"{kind}: algbw != size / p50")
        check(np.allclose(s["busbw_Bps"][:], size / p50 * fac), f"{kind}: busbw factor")
        check_fit(kind, s)
        for unit_ds in ("sizes_bytes", "samples_s", "busbw_Bps"):
            check("units" in s[unit_ds].attrs, f"{kind}/{unit_ds}: no units")
for p in problems:
    print("check_measured_profile:", p)
sys.exit(1 if problems else 0)
