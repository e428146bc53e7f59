#!/usr/bin/python3
"""hap-import: bring a PyTorch model into hap (issue 17).

`hap-import torch FILE.py:FACTORY --input 'x:float32[32,3,224,224]' -o graph.json` calls FACTORY
(a function or nn.Module class, in a file or an importable module such as torchvision.models),
traces the module with torch.fx, propagates shapes from the --input specs, maps every node to
hap's ops (docs/import.md lists them) and writes a hap-graph file. The loss is the module's scalar
output, or one --loss appends. --weights writes the module's parameters, buffers and a sample
batch (HDF5, one dataset per graph tensor) for `hap-run --weights`; --reference writes PyTorch's
loss and parameter gradients at those weights, laid out as `hap-run --dump-grads` writes hap's.
Ops hap cannot map are all listed, one line each (op, fx target, source line); the exit status is
then 1 and nothing is written. Runs on Debian's /usr/bin/python3 (python3-torch, python3-h5py).
"""

import argparse
import ast
import copy
import dis
import importlib
import importlib.util
import inspect
import json
import operator
import os
import re
import sys
import traceback
import warnings

PROG = "hap-import"
DTYPES = {"float32", "float64", "int64", "int32"}


class Fail(Exception):
    """A one-line error: the caller prints it and exits 1."""


class Unmapped(Exception):
    """A node hap has no op for; the message says why."""


# ---- command line -------------------------------------------------------------------------------


def parse_input(text):
    """'x:float32[32,3,224,224]' -> (name, dtype, [dims])."""
    m = re.fullmatch(r"([A-Za-z_][\w.]*):(\w+)\[([0-9, ]*)\]", text.strip())
    if not m or m.group(2) not in DTYPES:
        raise Fail(f"--input '{text}': expected NAME:DTYPE[D0,D1,...] with DTYPE one of "
                   f"{', '.join(sorted(DTYPES))}, e.g. x:float32[32,3,224,224]")
    dims = [int(d) for d in m.group(3).split(",") if d.strip()]
    if any(d <= 0 for d in dims):
        raise Fail(f"--input '{text}': dims must be positive")
    return m.group(1), m.group(2), dims


def parse_kwarg(text):
    key, sep, value = text.partition("=")
    if not sep or not key.isidentifier():
        raise Fail(f"--arg '{text}': expected KEY=VALUE (a Python literal)")
    try:
        return key, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return key, value


def load_factory(spec):
    """'path/model.py:make' or 'torchvision.models:resnet18' -> the callable."""
    where, sep, attr = spec.rpartition(":")
    if not sep or not where or not attr:
        raise Fail(f"'{spec}': expected FILE.py:FACTORY or MODULE:FACTORY")
    if where.endswith(".py") or os.path.sep in where:
        if not os.path.isfile(where):
            raise Fail(f"{where}: cannot open: no such file")
        mod_spec = importlib.util.spec_from_file_location("hap_user_model", where)
        module = importlib.util.module_from_spec(mod_spec)
        sys.path.insert(0, os.path.dirname(os.path.abspath(where)))
        mod_spec.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as e:
            raise Fail(f"{where}: cannot import: {e}") from e
    if not hasattr(module, attr):
        raise Fail(f"{where}: has no '{attr}'")
    return getattr(module, attr)


# ---- tracing ------------------------------------------------------------------------------------


def make_tracer(torch):
    nn = torch.nn

    from torch.fx.experimental.meta_tracer import MetaProxy, MetaTracer

    class Proxy(MetaProxy):
        """MetaProxy with size(0) answered (MetaProxy's takes dim 0 for no dim)."""

        def size(self, dim=None):
            meta = self.__dict__.get("_tensor_meta")
            if meta is not None and not isinstance(meta, (tuple, list)):
                return meta.size() if dim is None else meta.size(dim)
            return super().size(dim)

        def __iter__(self):
            """a, b, c = proxy: as many items as the caller unpacks (fx's own __iter__ finds the
            caller's instruction by an index Python 3.11's inline caches shift, and fails with an
            IndexError); else Tracer.iter."""
            frame = inspect.currentframe().f_back
            for inst in dis.get_instructions(frame.f_code):
                if inst.offset == frame.f_lasti:
                    if inst.opname == "UNPACK_SEQUENCE":
                        return iter([self[i] for i in range(inst.argval)])
                    break
            return self.tracer.iter(self)

    class Tracer(MetaTracer):
        """Keeps attention whole (hap's multi_head_attention) and takes the encoder's slow path
        (the fused fast path branches on tensor properties fx cannot trace)."""

        def __init__(self):
            super().__init__()
            self.record_stack_traces = True

        def trace(self, root, meta_args=None, concrete_args=None):
            """MetaTracer's trace: every proxy carries a meta tensor, so sizes are concrete
            (b, t, c = x.size()) and tensor factories (torch.arange) given them are nodes."""
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # results it cannot describe (tuples)
                return super().trace(root, meta_args or {}, concrete_args)

        def proxy(self, node):
            return Proxy(node, self)

        def iter(self, obj):
            """Iterating a result that is not unpacked (Proxy.__iter__): the length of the meta
            result when it is a tuple or list."""
            meta = obj.__dict__.get("_tensor_meta")
            if isinstance(meta, (tuple, list)):
                return iter([obj[i] for i in range(len(meta))])
            return super().iter(obj)

        def is_leaf_module(self, m, name):
            return isinstance(m, nn.MultiheadAttention) or super().is_leaf_module(m, name)

        def call_module(self, m, forward, args, kwargs):
            if isinstance(m, nn.TransformerEncoderLayer):
                return encoder_layer(m, *args, **kwargs)
            if isinstance(m, nn.TransformerEncoder):
                return encoder(m, *args, **kwargs)
            return super().call_module(m, forward, args, kwargs)

    def encoder_layer(m, src, src_mask=None, src_key_padding_mask=None, is_causal=None):
        x = src
        if m.norm_first:
            x = x + m._sa_block(m.norm1(x), src_mask, src_key_padding_mask)
            return x + m._ff_block(m.norm2(x))
        x = m.norm1(x + m._sa_block(x, src_mask, src_key_padding_mask))
        return m.norm2(x + m._ff_block(x))

    def encoder(m, src, mask=None, src_key_padding_mask=None):
        x = src
        for layer in m.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask)
        return m.norm(x) if m.norm is not None else x

    return Tracer


def propagate(torch, model, graph, inputs):
    """Run the traced graph once: tensor nodes get meta 'shape' and 'dtype', other nodes their
    value in meta 'value' (sizes and the like, which only shape arguments use). It runs on a copy
    of the module on the meta device, which computes shapes only (resnet50 at batch 256 in well
    under a second); where an op has no meta kernel, on the module itself."""

    class Prop(torch.fx.Interpreter):
        def run_node(self, n):
            result = super().run_node(n)
            if isinstance(result, torch.Tensor):
                n.meta["shape"] = list(result.shape)
                n.meta["dtype"] = str(result.dtype).replace("torch.", "")
            elif isinstance(result, (tuple, list)) and any(
                    isinstance(r, torch.Tensor) for r in result):
                n.meta["parts"] = [(list(r.shape), str(r.dtype).replace("torch.", ""))
                                   if isinstance(r, torch.Tensor) else None for r in result]
            else:
                n.meta["value"] = result
            return result

    with torch.no_grad():
        try:
            shadow = torch.fx.GraphModule(copy.deepcopy(model).to("meta"), graph)
            Prop(shadow).run(*[x.to("meta") for x in inputs])
        except (RuntimeError, NotImplementedError, TypeError, ValueError):
            Prop(torch.fx.GraphModule(model, graph)).run(*inputs)


# ---- the graph being built ----------------------------------------------------------------------


class Graph:
    """hap-graph tensors and nodes, plus the values --weights writes."""

    def __init__(self):
        self.tensors, self.nodes, self.names = [], [], set()
        self.values = {}  # tensor name -> torch tensor in hap's shape

    def unique(self, name):
        base, k = name, 1
        while name in self.names:
            k += 1
            name = f"{base}.{k}"
        self.names.add(name)
        return name

    def tensor(self, name, kind, dtype, shape):
        name = self.unique(name)
        self.tensors.append({"name": name, "kind": kind, "dtype": dtype, "shape": list(shape)})
        return name

    def node(self, name, op, inputs, attrs, shape, dtype):
        out = self.tensor(name, "activation", dtype, shape)
        self.nodes.append({"name": out, "op": op, "inputs": list(inputs), "outputs": [out],
                           "attrs": attrs})
        return out

    def shape_of(self, name):
        return next(t["shape"] for t in self.tensors if t["name"] == name)

    def dtype_of(self, name):
        return next(t["dtype"] for t in self.tensors if t["name"] == name)


class Const:
    """A tensor computed from buffers and constants alone (a causal mask, position ids), folded
    at export time; where an op reads it as a tensor it becomes a buffer of the graph, with its
    values in --weights."""

    def __init__(self, value, name):
        self.value, self.name, self.tensor = value, name, None


FACTORIES = ("arange", "ones", "zeros", "full", "tril", "triu", "eye", "tensor")


class Exporter:
    """Maps an fx graph onto hap ops; every node it cannot map is collected, not raised."""

    def __init__(self, torch, graph, root):
        self.torch, self.graph, self.root = torch, graph, root
        self.g = Graph()
        self.env = {}  # fx node -> hap tensor name, a tuple of them, or a Python value
        self.params = dict(root.named_parameters())
        self.buffers = dict(root.named_buffers())
        # tied weights: every other name of a parameter (lm_head.weight = wte.weight) -> the
        # name named_parameters() keeps, so that both uses read one hap tensor
        canonical = {id(p): name for name, p in self.params.items()}
        self.tied = {}
        for prefix, module in root.named_modules():
            for local, p in module._parameters.items():  # pylint: disable=protected-access
                name = f"{prefix}.{local}" if prefix else local
                if p is not None and name not in self.params and id(p) in canonical:
                    self.tied[name] = canonical[id(p)]
        self.held = {}  # torch parameter/buffer name -> hap tensor name
        self.unmapped = []
        self.module_ops, self.function_ops, self.method_ops = op_tables(torch, self)

    # -- tensors --

    def state(self, qualname, reshape=None):
        """The hap tensor of parameter or buffer `qualname` (created once; a tied weight's
        other names give the same tensor)."""
        qualname = self.tied.get(qualname, qualname)
        if qualname in self.held:
            return self.held[qualname]
        if qualname in self.params and self.params[qualname].requires_grad:
            value, kind = self.params[qualname], "parameter"
        elif qualname in self.params or qualname in self.buffers:
            value = self.params.get(qualname, self.buffers.get(qualname))
            kind = "buffer"
        else:
            raise Unmapped(f"'{qualname}' is not a parameter or buffer of the module")
        value = value.detach()
        if reshape is not None:
            value = value.reshape(reshape)
        dtype = str(value.dtype).replace("torch.", "")
        if dtype not in DTYPES:
            raise Unmapped(f"'{qualname}' has dtype {dtype}")
        name = self.g.tensor(qualname, kind, dtype, value.shape)
        self.g.values[name] = value
        self.held[qualname] = name
        return name

    def materialize(self, c):
        """Folded constant c as a buffer tensor (created once)."""
        if c.tensor is None:
            dtype = str(c.value.dtype).replace("torch.", "")
            if dtype not in DTYPES:
                raise Unmapped(f"a folded constant '{c.name}' of dtype {dtype} read as a tensor")
            c.tensor = self.g.tensor(c.name, "buffer", dtype, c.value.shape)
            self.g.values[c.tensor] = c.value
        return c.tensor

    def const_of(self, a):
        """The Const behind fx argument a, or None."""
        v = self.env.get(a) if isinstance(a, self.torch.fx.Node) else None
        return v if isinstance(v, Const) else None

    def fold(self, n):
        """Node n evaluated now when every input is a constant (buffers, folded tensors, Python
        values) and it makes a tensor; else None."""
        ins = [self.env.get(x) for x in n.all_input_nodes]
        if any(isinstance(v, (str, tuple)) or v is None for v in ins):
            return None
        name = getattr(n.target, "__name__", str(n.target))
        if not any(isinstance(v, Const) for v in ins) and name not in FACTORIES:
            return None
        torch = self.torch

        def real(v):
            if isinstance(v, self.torch.fx.Node):
                v = self.env[v]
            if isinstance(v, Const):
                return v.value
            if isinstance(v, torch.device):
                return torch.device("cpu")  # shapes ran on the meta device
            if isinstance(v, (list, tuple)):
                return type(v)(real(x) for x in v)
            return v

        args = [real(x) for x in n.args]
        kwargs = {k: real(v) for k, v in n.kwargs.items()}
        with torch.no_grad():
            if n.op == "call_method":
                out = getattr(args[0], n.target)(*args[1:], **kwargs)
            else:
                out = n.target(*args, **kwargs)
        return Const(out, n.name) if isinstance(out, torch.Tensor) else out

    def arg(self, a):
        """An fx argument: hap tensor names for tensor nodes (folded constants made buffers),
        Python values otherwise."""
        if isinstance(a, self.torch.fx.Node):
            v = self.env[a]
            return self.materialize(v) if isinstance(v, Const) else v
        if isinstance(a, (list, tuple)):
            return type(a)(self.arg(x) for x in a)
        return a

    def is_tensor(self, v):
        return isinstance(v, str) and v in self.g.names

    def emit(self, n, op, inputs, attrs=None, name=None, shape=None):
        shape = n.meta["shape"] if shape is None else shape
        dtype = n.meta.get("dtype", "float32")
        return self.g.node(name or n.name, op, inputs, attrs or {}, shape, dtype)

    # -- nodes --

    def run(self, inputs):
        for n in self.graph.nodes:
            try:
                self.env[n] = self.map_node(n, inputs)
            except Unmapped as e:
                self.unmapped.append((n, str(e)))
                self.env[n] = self.stand_in(n)
            except (KeyError, TypeError, ValueError) as e:
                self.unmapped.append((n, f"cannot map its arguments ({e})"))
                self.env[n] = self.stand_in(n)

    def stand_in(self, n):
        """An unmapped node's traced result, so that the nodes after it are still checked (the
        graph is not written)."""
        if "shape" in n.meta:
            return self.g.tensor(n.name, "activation", n.meta["dtype"], n.meta["shape"])
        if "parts" in n.meta:
            return tuple(self.g.tensor(f"{n.name}.{k}", "activation", p[1], p[0])
                         if p else None for k, p in enumerate(n.meta["parts"]))
        return n.meta.get("value")

    def map_node(self, n, inputs):
        if n.op == "placeholder":
            if n.target not in inputs:
                raise Unmapped(f"forward argument '{n.target}' has no --input")
            name, dtype, shape = inputs[n.target]
            return self.g.tensor(name, "input", dtype, shape)
        if n.op == "output":
            return self.arg(n.args[0])
        if "value" in n.meta and n.op != "get_attr":
            return n.meta["value"]  # sizes, shapes: consumed as arguments
        if n.op == "get_attr":
            p = self.params.get(self.tied.get(n.target, n.target))
            if p is not None and p.requires_grad:
                return self.state(n.target)
            value = self.buffers.get(n.target, p)
            if value is None:  # a tensor the trace computed from constants (_tensor_constant0)
                value = self.root
                for atom in n.target.split("."):
                    value = getattr(value, atom, None)
            if not isinstance(value, self.torch.Tensor):
                raise Unmapped(f"'{n.target}' is not a tensor of the module")
            return Const(value.detach(), n.target)
        if n.op in ("call_function", "call_method"):
            folded = self.fold(n)
            if folded is not None:
                return folded
        if n.op == "call_module":
            mod = self.root.get_submodule(n.target)
            fn = self.module_ops.get(type(mod))
            if fn is None:
                raise Unmapped("no hap op for this module")
            return fn(n, mod)
        table = self.function_ops if n.op == "call_function" else self.method_ops
        fn = table.get(n.target)
        if fn is None:
            raise Unmapped("no hap op for this " + n.op.replace("call_", ""))
        return fn(n)


# ---- the op tables ------------------------------------------------------------------------------


def op_tables(torch, ex):
    nn, F = torch.nn, torch.nn.functional

    def a(n, i, key=None, default=None):
        """Argument i (or keyword `key`) of node n, mapped."""
        if i < len(n.args):
            return ex.arg(n.args[i])
        return ex.arg(n.kwargs.get(key, default)) if key else default

    def pair(v, what):
        if isinstance(v, (tuple, list)):
            if len(v) != 2 or v[0] != v[1]:
                raise Unmapped(f"{what} {tuple(v)}: hap takes one value for both spatial dims")
            return int(v[0])
        return int(v)

    def unary(op):
        return lambda n: ex.emit(n, op, [a(n, 0, "input")])

    def unary_mod(op):
        return lambda n, m: ex.emit(n, op, [a(n, 0)], name=n.target)

    def softmax(op, dim_default=-1):
        return lambda n: ex.emit(n, op, [a(n, 0, "input")], {"dim": int(a(n, 1, "dim",
                                                                         dim_default))})

    def binary(op):
        def fn(n):
            x, y = a(n, 0, "input"), a(n, 1, "other")
            if n.kwargs.get("alpha", 1) != 1:
                raise Unmapped("alpha other than 1")
            if ex.is_tensor(x) and ex.is_tensor(y):
                return ex.emit(n, op, [x, y])
            if ex.is_tensor(x):
                return ex.emit(n, op, [x], {"scalar": float(y)})
            if not ex.is_tensor(y):
                raise Unmapped("no tensor operand")
            if op in ("add", "mul"):
                return ex.emit(n, op, [y], {"scalar": float(x)})
            if op == "sub":  # s - y = (-1 * y) + s
                neg = ex.emit(n, "mul", [y], {"scalar": -1.0}, name=n.name + ".neg")
                return ex.emit(n, "add", [neg], {"scalar": float(x)})
            raise Unmapped("a scalar divided by a tensor")
        return fn

    def dropout_p(p, training):
        return float(p) if training and p > 0 else 0.0

    def dropout_fn(n):
        p = dropout_p(a(n, 1, "p", 0.5), a(n, 2, "training", True))
        x = a(n, 0, "input")
        return ex.emit(n, "dropout", [x], {"p": p}) if p > 0 else x

    def dropout_mod(n, m):
        p = dropout_p(m.p, m.training)
        return ex.emit(n, "dropout", [a(n, 0)], {"p": p}, name=n.target) if p > 0 else a(n, 0)

    def linear_mod(n, m):
        ins = [a(n, 0), ex.state(n.target + ".weight")]
        if m.bias is not None:
            ins.append(ex.state(n.target + ".bias"))
        return ex.emit(n, "linear", ins, name=n.target)

    def linear_fn(n):
        ins = [a(n, 0, "input"), a(n, 1, "weight")]
        if a(n, 2, "bias") is not None:
            ins.append(a(n, 2, "bias"))
        return ex.emit(n, "linear", ins)

    def conv_mod(n, m):
        if m.groups != 1 or pair(m.dilation, "dilation") != 1:
            raise Unmapped("groups or dilation other than 1")
        if isinstance(m.padding, str) or m.padding_mode != "zeros":
            raise Unmapped(f"padding '{m.padding}' mode '{m.padding_mode}'")
        ins = [a(n, 0), ex.state(n.target + ".weight")]
        if m.bias is not None:
            ins.append(ex.state(n.target + ".bias"))
        return ex.emit(n, "conv2d", ins, {"stride": pair(m.stride, "stride"),
                                          "padding": pair(m.padding, "padding")}, name=n.target)

    def maxpool_mod(n, m):
        if m.ceil_mode or m.return_indices or pair(m.dilation, "dilation") != 1:
            raise Unmapped("ceil_mode, return_indices or dilation")
        k = pair(m.kernel_size, "kernel_size")
        s = pair(m.stride if m.stride is not None else k, "stride")
        return ex.emit(n, "max_pool2d", [a(n, 0)], {"kernel": k, "stride": s,
                                                    "padding": pair(m.padding, "padding")},
                       name=n.target)

    def adaptive_mod(n, m):
        return ex.emit(n, "adaptive_avg_pool2d", [a(n, 0)],
                       {"output_size": n.meta["shape"][-2:]}, name=n.target)

    def layer_norm_mod(n, m):
        ins = [a(n, 0)]
        if m.elementwise_affine:
            ins += [ex.state(n.target + ".weight"), ex.state(n.target + ".bias")]
        return ex.emit(n, "layer_norm", ins, {"normalized_dims": len(m.normalized_shape),
                                              "eps": float(m.eps)}, name=n.target)

    def embedding_mod(n, m):
        if m.max_norm is not None:
            raise Unmapped("max_norm")
        ids = ex.const_of(n.args[0])
        if ids is None:
            return ex.emit(n, "embedding", [a(n, 0), ex.state(n.target + ".weight")],
                           name=n.target)
        # constant ids (positions: torch.arange) that are a range: rows of the table
        flat = ids.value.reshape(-1)
        start, k = int(flat[0]), flat.numel()
        if not torch.equal(flat, torch.arange(start, start + k, dtype=flat.dtype)):
            raise Unmapped("constant indices that are not a range")
        rows = ex.emit(n, "narrow", [ex.state(n.target + ".weight")],
                       {"dim": 0, "start": start, "length": k}, name=n.target + ".rows",
                       shape=[k, m.embedding_dim])
        if n.meta["shape"] == [k, m.embedding_dim]:
            return rows
        return ex.emit(n, "reshape", [rows], {"shape": n.meta["shape"]}, name=n.target)

    def gelu_tanh(n, x, base):
        """GELU's tanh form, 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), as hap ops."""
        def op(suffix, name, ins, attrs):
            return ex.emit(n, name, ins, attrs, name=f"{base}.{suffix}")
        cube = op("cube", "pow", [x], {"exponent": 3.0})
        inner = op("inner", "add", [x, op("cube_s", "mul", [cube], {"scalar": 0.044715})], {})
        t = op("tanh", "tanh", [op("inner_s", "mul", [inner], {"scalar": 0.7978845608028654})],
               {})
        half = op("half", "mul", [op("one_plus", "add", [t], {"scalar": 1.0})], {"scalar": 0.5})
        return ex.emit(n, "mul", [x, half], name=base)

    def gelu_mod(n, m):
        if m.approximate == "tanh":
            return gelu_tanh(n, a(n, 0), n.target)
        return ex.emit(n, "gelu", [a(n, 0)], name=n.target)

    def gelu_fn(n):
        if n.kwargs.get("approximate", "none") == "tanh":
            return gelu_tanh(n, a(n, 0, "input"), n.name)
        return ex.emit(n, "gelu", [a(n, 0, "input")])

    def masked_fill(n):
        """x.masked_fill(mask, v) with a constant mask: x + where(mask, -inf, 0) for v = -inf
        (a buffer named *.mask: hap-run's rule for masks makes the causal one), else
        x * ~mask + where(mask, v, 0)."""
        x, mask, v = a(n, 0, "input"), ex.const_of(n.args[1]), float(a(n, 2, "value"))
        if mask is None:
            raise Unmapped("a mask computed from the inputs (hap folds only constant masks)")
        m = mask.value.bool()
        dt = getattr(torch, n.meta.get("dtype", "float32"))
        zero = torch.zeros((), dtype=dt)
        fill = ex.materialize(Const(torch.where(m, torch.tensor(v, dtype=dt), zero),
                                    f"{n.name}.mask"))
        if v == float("-inf"):
            return ex.emit(n, "add", [x, fill])
        keep = ex.materialize(Const((~m).to(dt), f"{n.name}.keep"))
        kept = ex.emit(n, "mul", [x, keep], name=f"{n.name}.kept")
        return ex.emit(n, "add", [kept, fill])

    def flatten(n, start, end):
        return ex.emit(n, "flatten", [a(n, 0, "input")], {"start_dim": int(start),
                                                          "end_dim": int(end)})

    def loss(op):
        def fn(n, m=None):
            if m is not None:
                red, extra = m.reduction, [m.weight is not None, m.ignore_index != -100,
                                           getattr(m, "label_smoothing", 0.0) != 0.0]
                x, y = a(n, 0), a(n, 1)
            else:
                red = a(n, 6 if op == "cross_entropy" else 5, "reduction", "mean")
                extra = [a(n, 2, "weight") is not None, n.kwargs.get("label_smoothing", 0.0)]
                x, y = a(n, 0, "input"), a(n, 1, "target")
            if red not in ("mean", "sum") or any(extra):
                raise Unmapped(f"reduction '{red}', class weights, ignore_index or smoothing")
            return ex.emit(n, op, [x, y], {"reduction": red},
                           name=n.target if m is not None else None)
        return fn

    def reduce(op):
        def fn(n):
            dims = a(n, 1, "dim", None)
            dims = [] if dims is None else [dims] if isinstance(dims, int) else list(dims)
            keep = bool(a(n, 2, "keepdim", False))
            if n.kwargs.get("dtype") is not None:
                raise Unmapped("dtype argument")
            return ex.emit(n, op, [a(n, 0, "input")], {"dims": dims, "keepdim": keep})
        return fn

    def reshape(n):  # any view: the target shape is the traced one
        return ex.emit(n, "reshape", [a(n, 0, "input")], {"shape": n.meta["shape"]})

    def transpose(n):
        return ex.emit(n, "transpose", [a(n, 0, "input")], {"dim0": int(a(n, 1, "dim0")),
                                                            "dim1": int(a(n, 2, "dim1"))})

    def permute(n):
        dims = a(n, 1, "dims") if len(n.args) == 2 else list(ex.arg(n.args[1:]))
        if isinstance(dims, int):
            dims = [dims]
        rank = len(n.meta["shape"])
        return ex.emit(n, "permute", [a(n, 0, "input")], {"dims": [d % rank for d in dims]})

    def matmul(n):
        x, y = a(n, 0, "input"), a(n, 1, "other")
        if len(ex.g.shape_of(x)) < 2 or len(ex.g.shape_of(y)) < 2:
            raise Unmapped("a 1-D operand (hap's matmul takes rank >= 2)")
        return ex.emit(n, "matmul", [x, y])

    def power(n):
        x, e = a(n, 0, "input"), a(n, 1, "exponent")
        if not ex.is_tensor(x) or ex.is_tensor(e):
            raise Unmapped("a tensor exponent")
        return ex.emit(n, "pow", [x], {"exponent": float(e)})

    def getitem(n):
        src, idx = a(n, 0), a(n, 1)
        if isinstance(src, tuple):
            if src[idx] is None:
                raise Unmapped(f"element {idx} of a result hap does not compute")
            return src[idx]
        if not ex.is_tensor(src):
            raise Unmapped("indexing a value")
        return slice_tensor(n, src, idx if isinstance(idx, tuple) else (idx,))

    def slice_tensor(n, src, idx):
        """x[a:b, :, c] as narrows (step 1) and a reshape dropping integer-indexed dims."""
        shape, cur, k = ex.g.shape_of(src), src, 0
        for d, i in enumerate(idx):
            if i is Ellipsis or i is None:
                raise Unmapped("indexing with ... or None")
            size = shape[d]
            if isinstance(i, int):
                start, length = i % size, 1
            elif isinstance(i, slice) and i.step in (None, 1):
                start, stop, _ = i.indices(size)
                length = stop - start
            else:
                raise Unmapped("indexing other than integers and step-1 slices")
            if (start, length) == (0, size):
                continue
            if length < 1:
                raise Unmapped("an empty slice")
            shape = shape[:d] + [length] + shape[d + 1:]
            k += 1
            cur = ex.emit(n, "narrow", [cur], {"dim": d, "start": start, "length": length},
                          name=f"{n.name}.narrow{k}", shape=shape)
        if shape != n.meta["shape"]:
            cur = ex.emit(n, "reshape", [cur], {"shape": n.meta["shape"]})
        return cur

    def split(n):
        x, dim = a(n, 0, "input"), a(n, 2, "dim", 0)
        shape = ex.g.shape_of(x)
        dim %= len(shape)
        parts, start = [], 0
        for k, (pshape, _) in enumerate(n.meta["parts"]):
            length = pshape[dim]
            parts.append(ex.emit(n, "narrow", [x], {"dim": dim, "start": start,
                                                    "length": length},
                                 name=f"{n.name}.{k}", shape=pshape))
            start += length
        return tuple(parts)

    def mha_mod(n, m):
        if not m._qkv_same_embed_dim or m.in_proj_bias is None or m.bias_k is not None:
            raise Unmapped("separate k/v widths, no bias, or add_bias_kv")
        q, k, v = a(n, 0, "query"), a(n, 1, "key"), a(n, 2, "value")
        if a(n, 4, "key_padding_mask") is not None:
            raise Unmapped("key_padding_mask")
        mask = a(n, 6, "attn_mask")
        if mask is not None and ex.g.dtype_of(mask) == "bool":
            raise Unmapped("a boolean attn_mask (hap's mask is additive)")
        if not m.batch_first:  # [L, N, E] in, hap's op takes [N, L, E]
            seen = {}
            for name in (q, k, v):
                if name not in seen:
                    s = ex.g.shape_of(name)
                    seen[name] = ex.emit(n, "transpose", [name], {"dim0": 0, "dim1": 1},
                                         name=f"{n.target}.in_t", shape=[s[1], s[0]] + s[2:])
            q, k, v = seen[q], seen[k], seen[v]
        e = m.embed_dim
        ins = [q, k, v, ex.state(n.target + ".in_proj_weight", [3, e, e]),
               ex.state(n.target + ".in_proj_bias", [3, e]),
               ex.state(n.target + ".out_proj.weight"), ex.state(n.target + ".out_proj.bias")]
        if mask is not None:
            ins.append(mask)
        shape, _ = n.meta["parts"][0]
        attrs = {"heads": m.num_heads, "dropout": dropout_p(m.dropout, m.training)}
        if m.batch_first:
            return (ex.emit(n, "multi_head_attention", ins, attrs, name=n.target, shape=shape),
                    None)
        hs = [shape[1], shape[0]] + shape[2:]
        out = ex.emit(n, "multi_head_attention", ins, attrs, name=n.target, shape=hs)
        return (ex.emit(n, "transpose", [out], {"dim0": 0, "dim1": 1}, name=n.target + ".out_t",
                        shape=shape), None)

    def batch_norm_mod(n, m):
        """Batch norm as hap ops over the batch and spatial dims: training (or no running
        statistics) normalises by the batch's mean and biased variance, eval by the running
        buffers; then the affine weight and bias, reshaped [C, 1, ...] to broadcast."""
        x, shape = a(n, 0), n.meta["shape"]
        rank, c = len(shape), shape[1]
        if rank < 2:
            raise Unmapped("an input without a channel dim")
        dims = [0] + list(range(2, rank))
        stat = [1, c] + [1] * (rank - 2)
        col = [c] + [1] * (rank - 2)
        t = n.target

        def op(suffix, name, ins, attrs=None, shp=shape):
            return ex.emit(n, name, ins, attrs, name=f"{t}.{suffix}", shape=shp)

        if m.training or m.running_mean is None:
            red = {"dims": dims, "keepdim": True}
            d = op("centered", "sub", [x, op("mean", "mean", [x], red, stat)])
            var = op("var", "mean", [op("square", "pow", [d], {"exponent": 2.0})], red, stat)
        else:
            rm = ex.emit(n, "reshape", [ex.state(t + ".running_mean")], {"shape": col},
                         name=f"{t}.running_mean.col", shape=col)
            d = op("centered", "sub", [x, rm])
            var = ex.emit(n, "reshape", [ex.state(t + ".running_var")], {"shape": col},
                          name=f"{t}.running_var.col", shape=col)
        inv = op("rstd", "rsqrt", [op("var_eps", "add", [var], {"scalar": float(m.eps)},
                                      ex.g.shape_of(var))], shp=ex.g.shape_of(var))
        y = op("normed" if m.affine else "out", "mul", [d, inv])
        if not m.affine:
            return y
        w = ex.emit(n, "reshape", [ex.state(t + ".weight")], {"shape": col},
                    name=f"{t}.weight.col", shape=col)
        b = ex.emit(n, "reshape", [ex.state(t + ".bias")], {"shape": col}, name=f"{t}.bias.col",
                    shape=col)
        return ex.emit(n, "add", [op("scaled", "mul", [y, w]), b], name=t)

    def expand(n):
        """A class token [1, 1, H] expanded over the batch: only torch.cat takes it."""
        x = a(n, 0)
        if not ex.is_tensor(x) or len(ex.g.shape_of(x)) != 3 or ex.g.shape_of(x)[:2] != [1, 1]:
            raise Unmapped("expand other than a [1, 1, H] class token's (hap broadcasts in its "
                           "elementwise ops)")
        return ("expanded", x)

    def cat(n):
        """torch.cat([x, token.expand(N, -1, -1)], dim=1), or the token first (torchvision's
        ViT): hap's cls_append (first = 1 for the latter)."""
        parts, dim = a(n, 0, "tensors"), a(n, 1, "dim", 0)
        token = [isinstance(p, tuple) and p[0] == "expanded" for p in parts]
        if (len(parts) == 2 and token in ([False, True], [True, False])
                and ex.is_tensor(parts[token.index(False)]) and dim % len(n.meta["shape"]) == 1):
            first = token[0]
            return ex.emit(n, "cls_append", [parts[1 if first else 0], parts[0 if first else 1][1]],
                           {"first": True} if first else {})
        raise Unmapped("hap has no concatenation; a class token appended or prepended "
                       "(torch.cat([x, cls.expand(N, -1, -1)], dim=1), or the token first) is "
                       "cls_append")

    def alias(n, m=None):
        return a(n, 0, "input")

    modules = {
        nn.Linear: linear_mod, nn.Conv2d: conv_mod, nn.MaxPool2d: maxpool_mod,
        nn.AdaptiveAvgPool2d: adaptive_mod, nn.LayerNorm: layer_norm_mod,
        nn.Embedding: embedding_mod, nn.MultiheadAttention: mha_mod,
        nn.BatchNorm1d: batch_norm_mod, nn.BatchNorm2d: batch_norm_mod,
        nn.ReLU: unary_mod("relu"), nn.GELU: gelu_mod, nn.Sigmoid: unary_mod("sigmoid"),
        nn.Tanh: unary_mod("tanh"), nn.Dropout: dropout_mod, nn.Identity: alias,
        nn.Flatten: lambda n, m: flatten(n, m.start_dim, m.end_dim),
        nn.Softmax: lambda n, m: ex.emit(n, "softmax", [a(n, 0)], {"dim": m.dim}, name=n.target),
        nn.LogSoftmax: lambda n, m: ex.emit(n, "log_softmax", [a(n, 0)], {"dim": m.dim},
                                            name=n.target),
        nn.CrossEntropyLoss: loss("cross_entropy"), nn.NLLLoss: loss("nll_loss"),
    }
    functions = {
        operator.add: binary("add"), operator.iadd: binary("add"), torch.add: binary("add"),
        operator.sub: binary("sub"), operator.isub: binary("sub"), torch.sub: binary("sub"),
        operator.mul: binary("mul"), operator.imul: binary("mul"), torch.mul: binary("mul"),
        operator.truediv: binary("div"), torch.div: binary("div"),
        torch.relu: unary("relu"), F.relu: unary("relu"), torch.sigmoid: unary("sigmoid"),
        torch.tanh: unary("tanh"), torch.rsqrt: unary("rsqrt"), F.gelu: gelu_fn,
        F.dropout: dropout_fn, F.linear: linear_fn,
        F.softmax: softmax("softmax"), torch.softmax: softmax("softmax"),
        F.log_softmax: softmax("log_softmax"), torch.log_softmax: softmax("log_softmax"),
        torch.flatten: lambda n: flatten(n, a(n, 1, "start_dim", 0), a(n, 2, "end_dim", -1)),
        torch.reshape: reshape, torch.squeeze: reshape, torch.unsqueeze: reshape,
        torch.transpose: transpose, torch.permute: permute,
        torch.matmul: matmul, operator.matmul: matmul,
        torch.bmm: lambda n: ex.emit(n, "bmm", [a(n, 0, "input"), a(n, 1, "mat2")]),
        torch.sum: reduce("sum"), torch.mean: reduce("mean"),
        torch.pow: power, operator.pow: power,
        F.cross_entropy: loss("cross_entropy"), F.nll_loss: loss("nll_loss"),
        operator.getitem: getitem,
        torch.split: lambda n: split(n), torch.chunk: lambda n: split(n),
        torch.masked_fill: masked_fill, torch.cat: cat,
    }
    methods = {
        "view": reshape, "reshape": reshape, "squeeze": reshape, "unsqueeze": reshape,
        "contiguous": alias, "flatten": lambda n: flatten(n, a(n, 1, "start_dim", 0),
                                                          a(n, 2, "end_dim", -1)),
        "transpose": transpose, "permute": permute,
        "relu": unary("relu"), "sigmoid": unary("sigmoid"), "tanh": unary("tanh"),
        "softmax": softmax("softmax"), "log_softmax": softmax("log_softmax"),
        "sum": reduce("sum"), "mean": reduce("mean"), "pow": power,
        "add": binary("add"), "sub": binary("sub"), "mul": binary("mul"), "div": binary("div"),
        "matmul": matmul, "split": lambda n: split(n), "chunk": lambda n: split(n),
        "t": lambda n: ex.emit(n, "transpose", [a(n, 0)], {"dim0": 0, "dim1": 1}),
        "masked_fill": masked_fill, "expand": expand,
    }
    return modules, functions, methods


# ---- reporting ----------------------------------------------------------------------------------


def source_line(n):
    """'file.py:LINE' of the user code behind fx node n (its recorded stack trace)."""
    trace = n.meta.get("stack_trace") or ""
    found = re.findall(r'File "([^"]+)", line (\d+)', trace)
    here = os.path.abspath(__file__)
    user = [f for f in found if "/torch/" not in f[0] and os.path.abspath(f[0]) != here]
    if not user:
        return "(no source line)"
    path, line = user[0]  # fx lists the innermost frame first
    rel = os.path.relpath(path)
    return f"{path if rel.startswith('..') else rel}:{line}"


def op_label(n, root):
    """(op, fx target) as an unmapped node's line names them: ('SiLU', 'act'), ('cumsum',
    'torch.cumsum'), ('masked_fill', 'masked_fill')."""
    if n.op == "call_module":
        return type(root.get_submodule(n.target)).__name__, n.target
    name = getattr(n.target, "__name__", str(n.target))
    module = getattr(n.target, "__module__", None)
    return name, f"{module}.{name}" if n.op == "call_function" and module else name


# ---- the export ---------------------------------------------------------------------------------


def append_loss(ex, out, how):
    """The module's output made a scalar loss: --loss mean | sum | cross_entropy."""
    shape = ex.g.shape_of(out)
    if how == "output":
        if shape:
            raise Fail(f"the module's output has shape {shape}, not a scalar loss: return the "
                       "loss from forward, or give --loss mean|sum|cross_entropy")
        return out, None
    if how in ("mean", "sum"):
        return ex.g.node("loss", how, [out], {"dims": [], "keepdim": False}, [],
                         ex.g.dtype_of(out)), None
    if len(shape) < 2:
        raise Fail(f"--loss cross_entropy: the output has shape {shape}, expected [N, C, ...]")
    target = ex.g.tensor("target", "input", "int64", [shape[0]] + shape[2:])
    return ex.g.node("loss", "cross_entropy", [out, target], {"reduction": "mean"}, [],
                     ex.g.dtype_of(out)), target


def index_range(g, name):
    """The values an integer input may take: its consumer's table rows or class count."""
    for node in g.nodes:
        if node["op"] == "embedding" and node["inputs"][0] == name:
            return g.shape_of(node["inputs"][1])[0]
        if node["op"] in ("cross_entropy", "nll_loss") and node["inputs"][1] == name:
            return g.shape_of(node["inputs"][0])[1]
    raise Fail(f"input '{name}': integer input with no embedding or loss consuming it, so "
               "hap-import cannot choose its values")


def export(args):
    try:
        import torch
    except ImportError as e:
        raise Fail(f"cannot import torch ({e}): run with Debian's /usr/bin/python3 and "
                   "python3-torch (bash scripts/setup-debian.sh --import)") from e
    inputs = {}
    for spec in args.input:
        name, dtype, shape = parse_input(spec)
        inputs[name] = (name, dtype, shape)
    factory = load_factory(args.model)
    torch.manual_seed(args.seed)
    model = factory(**dict(parse_kwarg(k) for k in args.arg))
    if not isinstance(model, torch.nn.Module):
        raise Fail(f"{args.model}: returned {type(model).__name__}, expected an nn.Module")
    model.train(not args.eval)
    tracer = make_tracer(torch)()
    meta = {name: torch.empty(shape, dtype=getattr(torch, dtype), device="meta")
            for name, dtype, shape in inputs.values()}
    try:
        graph = tracer.trace(model, meta)
    except Fail:
        raise
    except Exception as e:  # pylint: disable=broad-except
        raise Fail(f"{args.model}: torch.fx cannot trace the module{traced_at(e)}: "
                   f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
                   ) from e
    placeholders = [n.target for n in graph.nodes if n.op == "placeholder"]
    missing = [p for p in placeholders if p not in inputs]
    extra = [i for i in inputs if i not in placeholders]
    if missing or extra:
        raise Fail(f"{args.model}: forward takes ({', '.join(placeholders)}); --input "
                   f"{'lacks ' + ', '.join(missing) if missing else 'names ' + ', '.join(extra)}")
    example = [torch.zeros(inputs[p][2], dtype=getattr(torch, inputs[p][1]))
               for p in placeholders]
    propagate(torch, model, graph, example)
    ex = Exporter(torch, graph, model)
    ex.run(inputs)
    if ex.unmapped:
        for n, why in ex.unmapped:
            op, target = op_label(n, model)
            print(f"{PROG}: {source_line(n)}: unsupported op '{op}' ({n.op} {target}): {why}",
                  file=sys.stderr)
        raise Fail(f"{args.model}: {len(ex.unmapped)} unsupported op"
                   f"{'s' if len(ex.unmapped) > 1 else ''}, nothing written: "
                   + ", ".join(sorted({op_label(n, model)[0] for n, _ in ex.unmapped})))
    out = ex.env[next(n for n in graph.nodes if n.op == "output")]
    if not ex.is_tensor(out):
        raise Fail(f"{args.model}: forward returns {type(out).__name__}, expected one tensor")
    loss, target = append_loss(ex, out, args.loss)
    doc = {"format": "hap-graph", "version": "1.0", "name": args.name or model_name(args.model),
           "source": "hap-import torch " + args.model, "tensors": ex.g.tensors,
           "nodes": ex.g.nodes, "loss": loss}
    batch = sample_batch(torch, ex.g, inputs, placeholders, target, args.seed)
    if args.weights or args.reference:
        check_h5py()
    jobs = [(args.output, lambda path: write_graph(doc, path))]
    if args.weights:
        jobs.append((args.weights, lambda path: write_weights(ex.g, batch, path)))
    if args.reference:
        ref = reference(torch, model, ex, placeholders, batch, args.loss, target)
        jobs.append((args.reference, lambda path: write_reference(ref, path)))
    if args.onnx:
        jobs.append((args.onnx, lambda path: write_onnx(torch, model, placeholders, example,
                                                        path)))
    write_all(jobs)
    if not args.quiet:
        n_params = sum(int(torch.tensor(t["shape"]).prod()) for t in ex.g.tensors
                       if t["kind"] == "parameter")
        print(f"{PROG}: wrote {args.output} ({len(ex.g.nodes)} nodes, {len(ex.g.tensors)} "
              f"tensors, {n_params} parameters)")


def model_name(spec):
    return re.sub(r"\W", "_", spec.rpartition(":")[2]) or "model"


def sample_batch(torch, g, inputs, placeholders, target, seed):
    """A batch for --weights and --reference: floats N(0, 1), integers in their consumer's
    range; the same for the same --seed."""
    gen = torch.Generator().manual_seed(seed + 1)
    names = list(placeholders) + ([target] if target else [])
    batch = {}
    for name in names:
        t = next(t for t in g.tensors if t["name"] == name)
        if t["dtype"].startswith("float"):
            batch[name] = torch.randn(t["shape"], generator=gen, dtype=getattr(torch, t["dtype"]))
        else:
            batch[name] = torch.randint(0, index_range(g, name), t["shape"], generator=gen,
                                        dtype=getattr(torch, t["dtype"]))
    return batch


def reference(torch, model, ex, placeholders, batch, how, target):
    """PyTorch's loss and parameter gradients at the exported weights and batch."""
    model.zero_grad()
    torch.manual_seed(0)
    y = model(*[batch[p] for p in placeholders])
    if how == "mean":
        y = y.mean()
    elif how == "sum":
        y = y.sum()
    elif how == "cross_entropy":
        y = torch.nn.functional.cross_entropy(y, batch[target])
    y.backward()
    grads = {}
    params = dict(model.named_parameters())
    for qual, name in ex.held.items():
        t = next(t for t in ex.g.tensors if t["name"] == name)
        if t["kind"] == "parameter":
            p = params[qual]
            g = p.grad if p.grad is not None else torch.zeros_like(p)
            grads[name] = g.detach().reshape(t["shape"])
    return float(y.detach()), grads


# ---- files --------------------------------------------------------------------------------------


def check_h5py():
    if importlib.util.find_spec("h5py") is None:
        raise Fail("--weights/--reference need h5py: apt-get install python3-h5py")


def write_all(jobs):
    """Every (path, write) job into its temporary, then all renamed into place: a failure in any
    (a full disk, an ONNX export torch refuses) leaves no file written."""
    tmps = []
    try:
        for path, write in jobs:
            tmps.append(f"{path}.tmp.{os.getpid()}")
            try:
                write(tmps[-1])
            except OSError as e:
                raise Fail(f"{path}: cannot write: {e.strerror or e}") from e
        for (path, _), tmp in zip(jobs, tmps):
            os.replace(tmp, path)
    finally:
        for tmp in tmps:
            if os.path.exists(tmp):
                os.unlink(tmp)


def traced_at(e):
    """ ' at FILE:LINE' of the innermost frame of a traceback outside torch and this tool, or ''."""
    where = ""
    for frame in traceback.extract_tb(e.__traceback__):
        if "/torch/" not in frame.filename and not frame.filename.endswith("hap-import") and \
                not frame.filename.endswith("hap_import.py"):
            where = f" (at {os.path.basename(frame.filename)}:{frame.lineno})"
    return where


def write_onnx(torch, model, placeholders, example, path):
    """The module as ONNX (torch.onnx.export, fixed shapes, opset 13, the forward arguments'
    names as the graph inputs, parameters as initializers under their names), for hap-model
    import. Training mode is kept (dropout and its ratio stay in the file). In eval mode two of
    the exporter's passes are skipped so that the file keeps the module's own parameters, one
    initializer each under its name: the eval peephole (each batch norm folded into the
    convolution before it, new weights under new names) and the merging of initializers equal in
    value (every batch norm's weight of ones would become one shared tensor)."""
    mode = torch.onnx.TrainingMode.TRAINING if model.training else torch.onnx.TrainingMode.EVAL
    jit = torch._C  # pylint: disable=protected-access
    peephole = jit._jit_pass_onnx_eval_peephole
    dedup = jit._jit_pass_onnx_deduplicate_initializers
    with open(path, "wb") as f, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporter's notes on in-place ops and training mode
        try:
            jit._jit_pass_onnx_eval_peephole = lambda graph, params: params
            jit._jit_pass_onnx_deduplicate_initializers = lambda graph, params, training: params
            torch.onnx.export(model, tuple(example), f, input_names=list(placeholders),
                              output_names=["output"], opset_version=13, training=mode,
                              do_constant_folding=False)
        except (RuntimeError, torch.onnx.errors.OnnxExporterError) as e:
            why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise Fail(f"--onnx {path.rsplit('.tmp.', 1)[0]}: torch.onnx.export refused the "
                       f"module: {why}") from e
        finally:
            jit._jit_pass_onnx_eval_peephole = peephole
            jit._jit_pass_onnx_deduplicate_initializers = dedup


def write_graph(doc, path):
    lines = ["{"]
    for key in ("format", "version", "name", "source"):
        lines.append(f"  {json.dumps(key)}: {json.dumps(doc[key])},")
    for key in ("tensors", "nodes"):
        rows = [json.dumps(row) for row in doc[key]]
        lines.append(f'  "{key}": [\n    ' + ",\n    ".join(rows) + "\n  ],")
    lines.append(f'  "loss": {json.dumps(doc["loss"])}')
    lines.append("}")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def write_weights(g, batch, path):
    """hap-weights 1.0: a root attribute format='hap-weights', version='1.0', and one dataset per
    parameter, buffer and input, named as the graph's tensor, in its shape and dtype."""
    import h5py
    import numpy as np
    with h5py.File(path, "w") as f:
        f.attrs["format"] = np.bytes_("hap-weights")
        f.attrs["version"] = np.bytes_("1.0")
        for name, value in list(g.values.items()) + list(batch.items()):
            f.create_dataset(name, data=value.detach().cpu().numpy())


def write_reference(ref, path):
    """hap-grads 1.0: 'loss' (float64 scalar) and group 'grad' with one dataset per parameter."""
    import h5py
    import numpy as np
    loss, grads = ref
    with h5py.File(path, "w") as f:
        f.attrs["format"] = np.bytes_("hap-grads")
        f.attrs["version"] = np.bytes_("1.0")
        f.create_dataset("loss", data=np.float64(loss))
        grp = f.create_group("grad")
        for name, g in grads.items():
            grp.create_dataset(name, data=g.cpu().numpy().astype(np.float32))


# ---- main ---------------------------------------------------------------------------------------


def main(argv):
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="source", required=True)
    t = sub.add_parser("torch", help="trace a PyTorch nn.Module with torch.fx")
    t.add_argument("model", help="FILE.py:FACTORY or MODULE:FACTORY (e.g. torchvision.models:"
                                 "resnet18): a callable returning the nn.Module")
    t.add_argument("--input", "-i", action="append", default=[], metavar="NAME:DTYPE[DIMS]",
                   help="one per forward() argument, e.g. x:float32[32,3,224,224]")
    t.add_argument("--arg", "-a", action="append", default=[], metavar="KEY=VALUE",
                   help="keyword argument of FACTORY (a Python literal), e.g. num_classes=10")
    t.add_argument("--loss", choices=["output", "mean", "sum", "cross_entropy"],
                   default="output", help="the loss: the module's scalar output (default), or "
                   "appended: the mean or sum of the output, or cross-entropy of the output "
                   "([N, C, ...] logits) against a new int64 input 'target'")
    t.add_argument("--eval", action="store_true", help="trace in eval mode (dropout off)")
    t.add_argument("--seed", type=int, default=0, help="torch.manual_seed before FACTORY, and "
                   "the sample batch's seed (default 0)")
    t.add_argument("--name", help="the graph's name (default: FACTORY)")
    t.add_argument("-o", "--output", required=True, help="the hap-graph file to write")
    t.add_argument("--weights", help="also write the weights and a sample batch (HDF5) for "
                   "hap-run --weights")
    t.add_argument("--reference", help="also write PyTorch's loss and parameter gradients at "
                   "those weights (HDF5, as hap-run --dump-grads writes them)")
    t.add_argument("--onnx", help="also export the module as ONNX (torch.onnx.export) for "
                   "hap-model import")
    t.add_argument("-q", "--quiet", action="store_true")
    args = p.parse_args(argv)
    try:
        export(args)
    except Fail as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
