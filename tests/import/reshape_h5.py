"""Copy a hap-weights or hap-grads file with every dataset reshaped to the shape its tensor has in
a hap-graph file (same element count, same row-major order): the fx graph stores attention's
packed in_proj_weight as hap's [3, E, E], the ONNX file keeps PyTorch's [3E, E].

usage: reshape_h5.py GRAPH.json IN.h5 OUT.h5"""

import json
import sys

import h5py
import numpy as np


def copy(src, dst, shapes):
    for key, value in src.attrs.items():
        dst.attrs[key] = value
    for name, item in src.items():
        if isinstance(item, h5py.Group):
            copy(item, dst.create_group(name), shapes)
            continue
        data = np.asarray(item)
        shape = shapes.get(name)
        if shape is not None and data.shape != tuple(shape) and data.size == np.prod(shape):
            data = data.reshape(shape)
        dst.create_dataset(name, data=data)


def main(graph, src, dst):
    shapes = {t["name"]: t["shape"] for t in json.load(open(graph, encoding="utf-8"))["tensors"]}
    with h5py.File(src, "r") as a, h5py.File(dst, "w") as b:
        copy(a, b, shapes)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        sys.exit(2)
    main(*sys.argv[1:])
