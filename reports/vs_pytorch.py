"""PyTorch's side of reports/vs-pytorch.sh: the training iteration of a model of
tests/import/models.py (forward, cross-entropy, backward, SGD step) timed in PyTorch eager on one
process, or under DistributedDataParallel (gloo, loopback) on several, each with --threads
intra-op threads (default 1).

Usage: vs_pytorch.py MODELS.py FACTORY --input NAME:DTYPE[DIMS]... [--arg KEY=VALUE]...
       [--ranks N] [--iters N] [--warmup N] [--threads N]
Prints one JSON line: {"ranks": N, "median_s": ..., "iters": N} (rank 0's wall time per
iteration, median). The inputs are the global batch; with N ranks each takes 1/N of dim 0.
"""

import argparse
import ast
import importlib.util
import json
import os
import re
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def parse_input(spec):
    m = re.fullmatch(r"(\w+):(float32|int64)\[([0-9, ]+)\]", spec)
    if not m:
        sys.exit(f"vs_pytorch.py: --input {spec!r}: expected NAME:float32[D,...] or int64[...]")
    return m.group(1), m.group(2), [int(d) for d in m.group(3).split(",")]


def load_factory(path, name):
    spec = importlib.util.spec_from_file_location("models", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def make_batch(inputs, ranks, rank, gen):
    batch = []
    for _, dtype, dims in inputs:
        dims = [dims[0] // ranks] + dims[1:]
        if dtype == "int64":  # token ids: every vocabulary here has at least 8 entries
            batch.append(torch.randint(0, 8, dims, generator=gen))
        else:
            batch.append(torch.randn(*dims, generator=gen))
    return batch


def timed(model, batch, iters, warmup, sync):
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    out = model(*batch)
    gen = torch.Generator().manual_seed(1)
    target = torch.randint(0, out.shape[1], (out.shape[0],) + tuple(out.shape[2:]), generator=gen)
    times = []
    for i in range(warmup + iters):
        if sync:
            sync()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(*batch), target)
        loss.backward()
        opt.step()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return times


def worker(rank, args, inputs, kwargs, result_path):
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = load_factory(args.models, args.factory)(**kwargs)
    gen = torch.Generator().manual_seed(0)
    if args.ranks > 1:
        dist.init_process_group("gloo", init_method=f"file://{result_path}.rdv", rank=rank,
                                world_size=args.ranks)
        model = torch.nn.parallel.DistributedDataParallel(model)
    batch = make_batch(inputs, args.ranks, rank, gen)
    times = timed(model, batch, args.iters, args.warmup, dist.barrier if args.ranks > 1 else None)
    if args.ranks > 1:
        dist.destroy_process_group()
    if rank == 0:
        with open(result_path, "w") as f:
            json.dump({"ranks": args.ranks, "median_s": statistics.median(times),
                       "iters": len(times)}, f)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("models")
    p.add_argument("factory")
    p.add_argument("--input", "-i", action="append", default=[])
    p.add_argument("--arg", "-a", action="append", default=[])
    p.add_argument("--ranks", type=int, default=1)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    inputs = [parse_input(s) for s in args.input]
    kwargs = {}
    for a in args.arg:
        key, _, value = a.partition("=")
        kwargs[key] = ast.literal_eval(value)
    with tempfile.TemporaryDirectory() as tmp:
        result = os.path.join(tmp, "result.json")
        if args.ranks == 1:
            worker(0, args, inputs, kwargs, result)
        else:
            mp.spawn(worker, args=(args, inputs, kwargs, result), nprocs=args.ranks)
        with open(result) as f:
            print(f.read())


if __name__ == "__main__":
    main()
