"""Compare two hap-grads files (hap-run --dump-grads against hap-import --reference): the loss
and every parameter gradient, relative to the reference's largest magnitude per tensor.

usage: compare_grads.py HAP.h5 REF.h5 TOL LABEL
Prints one line (the largest errors) and exits 1 when any error exceeds TOL or a gradient is
missing on either side."""

import sys

import h5py
import numpy as np


def main(hap_path, ref_path, tol, label):
    tol = float(tol)
    with h5py.File(hap_path, "r") as hap, h5py.File(ref_path, "r") as ref:
        loss, ref_loss = float(hap["loss"][()]), float(ref["loss"][()])
        loss_err = abs(loss - ref_loss) / max(abs(ref_loss), 1e-30)
        names = sorted(set(hap["grad"]) | set(ref["grad"]))
        worst, worst_name, bad = 0.0, "", []
        for name in names:
            if name not in hap["grad"] or name not in ref["grad"]:
                bad.append(f"{name}: only in {'the reference' if name in ref['grad'] else 'hap'}")
                continue
            a = np.asarray(hap["grad"][name], dtype=np.float64)
            b = np.asarray(ref["grad"][name], dtype=np.float64)
            if a.shape != b.shape:
                bad.append(f"{name}: shape {a.shape}, reference {b.shape}")
                continue
            scale = max(np.abs(b).max(initial=0.0), 1e-30)
            err = np.abs(a - b).max(initial=0.0) / scale
            if not np.isfinite(err) or err > tol:
                bad.append(f"{name}: max |hap - torch| / max |torch| = {err:.2e}")
            if err > worst or not np.isfinite(err):
                worst, worst_name = err, name
    ok = not bad and loss_err <= tol
    print(f"{label}: {'ok' if ok else 'FAILED'}: loss {loss:.7g} vs torch {ref_loss:.7g} "
          f"(relative {loss_err:.2e}); {len(names)} parameter gradients, largest error "
          f"{worst:.2e} ({worst_name}) <= {tol:g} relative to each tensor's largest")
    for line in bad:
        print(f"{label}: FAILED: {line}")
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) != 5:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        sys.exit(2)
    sys.exit(main(*sys.argv[1:]))
