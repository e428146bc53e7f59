"""Write OUT.h5: every dataset of BASE.h5 (with its root attributes), plus each root dataset of
EXTRA.h5 that BASE.h5 lacks. The ONNX path's numerics take the weights hap-model import
--weights wrote from the ONNX file and the batch (the inputs) hap-import --weights wrote.

usage: merge_h5.py BASE.h5 EXTRA.h5 OUT.h5"""

import sys

import h5py


def main(base, extra, out):
    with h5py.File(base, "r") as a, h5py.File(extra, "r") as b, h5py.File(out, "w") as o:
        for key, value in a.attrs.items():
            o.attrs[key] = value
        for name in a:
            a.copy(a[name], o, name)
        for name in b:
            if name not in o and isinstance(b[name], h5py.Dataset):
                b.copy(b[name], o, name)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        sys.exit(2)
    main(*sys.argv[1:])
