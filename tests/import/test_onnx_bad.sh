#!/usr/bin/env bash
# hap-model import (import/onnx.h) on files it must refuse: exit 1, nothing on stdout, no output
# file, and one stderr line naming the file and what was expected — or, for a model with ops hap
# lacks, one line per unsupported node and the summary. Files made without ONNX tooling: empty,
# text, a truncated model, none at all; with python3-onnx (else those cases are skipped): a
# symbolic batch dim, external initializer data, an initializer shorter than its dims, an output
# no node produces, a model with InstanceNormalization, CumSum and a Gather of constant indices
# out of order, one with Erf outside a GELU, a Split missing its dim, a Concat of two tensors
# and a Where on a condition that is not a constant, Gelu's tanh form (its erf form imports), and
# Reshape shapes beyond int64 once read as doubles;
# an initializer feeding three nodes imports with a note on stderr (none under -q).
# Usage: test_onnx_bad.sh HAP_MODEL SEED.onnx
set -u
model=$1 seed=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() {
  echo "FAILED: $*"
  fail=1
}

# refused NAME FILE LINES PATTERN...: exit 1, LINES stderr lines, each PATTERN among them.
refused() {
  local name=$1 file=$2 lines=$3 rc=0
  shift 3
  "$model" import "$file" --loss cross_entropy -o "$tmp/out.json" >"$tmp/stdout" 2>"$tmp/err" ||
    rc=$?
  [ "$rc" -eq 1 ] || bad "$name: exit $rc, expected 1"
  [ -s "$tmp/stdout" ] && bad "$name: wrote to stdout"
  [ -e "$tmp/out.json" ] && bad "$name: wrote the graph"
  [ "$(wc -l <"$tmp/err")" -eq "$lines" ] || bad "$name: expected $lines stderr lines"
  for p in "$@"; do
    grep -qE -- "$p" "$tmp/err" || bad "$name: stderr lacks /$p/: $(cat "$tmp/err")"
  done
  echo "$name: $(tail -n 1 "$tmp/err")"
}

if ! "$model" import "$seed" --loss cross_entropy -o "$tmp/good.json" -q ||
  ! "$model" check -q "$tmp/good.json"; then
  bad "the seed model does not import"
fi
: >"$tmp/empty.onnx"
echo '{"format": "hap-graph"}' >"$tmp/text.onnx"
head -c "$(($(stat -c %s "$seed") / 2))" "$seed" >"$tmp/truncated.onnx"
refused empty "$tmp/empty.onnx" 1 "empty.onnx: not an ONNX model"
refused text "$tmp/text.onnx" 1 "text.onnx: not an ONNX model"
refused truncated "$tmp/truncated.onnx" 1 "truncated.onnx: not an ONNX model"
refused missing "$tmp/none.onnx" 1 "none.onnx: cannot open"
"$model" import "$seed" -o "$tmp/out.json" 2>"$tmp/err" && bad "no --loss: accepted"
grep -q "not a scalar loss: give --loss" "$tmp/err" || bad "no --loss: $(cat "$tmp/err")"

if ! /usr/bin/python3 -c 'import onnx' 2>/dev/null; then
  echo "test_onnx_bad: python3-onnx missing: the crafted cases are skipped"
  exit "$fail"
fi
/usr/bin/python3 - "$seed" "$tmp" <<'EOF' || bad "crafting the models"
import sys
import onnx
from onnx import TensorProto, helper

seed, out = sys.argv[1:]
m = onnx.load(seed)
g = m.graph

def save(name, model):
    with open(f"{out}/{name}.onnx", "wb") as f:
        f.write(model.SerializeToString())

sym = onnx.load(seed)
sym.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
save("symbolic", sym)
ext = onnx.load(seed)
ext.graph.initializer[0].data_location = TensorProto.EXTERNAL
save("external", ext)
short = onnx.load(seed)
short.graph.initializer[0].raw_data = short.graph.initializer[0].raw_data[:-4]
save("short", short)
orphan = onnx.load(seed)
orphan.graph.output[0].name = "nobody"
save("orphan", orphan)
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4, 4])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
inits = [helper.make_tensor(n, TensorProto.FLOAT, [3], [1.0, 1.0, 1.0])
         for n in ("scale", "bias")]
inits.append(helper.make_tensor("table", TensorProto.FLOAT, [2, 3, 4, 4], [0.0] * 96))
inits.append(helper.make_tensor("idx", TensorProto.INT64, [2], [1, 0]))
inits.append(helper.make_tensor("axis", TensorProto.INT64, [], [1]))
nodes = [helper.make_node("InstanceNormalization", ["x", "scale", "bias"], ["bn"], name="in"),
         helper.make_node("Relu", ["bn"], ["r"], name="relu"),
         helper.make_node("CumSum", ["r", "axis"], ["cs"], name="cumsum"),
         helper.make_node("Gather", ["table", "idx"], ["gt"], name="gather", axis=1),
         helper.make_node("Add", ["cs", "gt"], ["s"], name="add"),
         helper.make_node("ReduceMean", ["s"], ["y"], name="mean", axes=[2, 3], keepdims=0)]
save("unsupported", helper.make_model(helper.make_graph(nodes, "g", [x], [y], inits)))

# the mappings with conditions: Erf outside a GELU, Split sizes that miss the dim, a Concat of
# two tensors (no class token), Where on a condition that is not a constant
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])
m = helper.make_tensor_value_info("m", TensorProto.BOOL, [2, 3, 4])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
inits = [helper.make_tensor("sizes", TensorProto.INT64, [2], [1, 1]),
         helper.make_tensor("tok", TensorProto.FLOAT, [1, 1, 4], [0.5] * 4),
         helper.make_tensor("to", TensorProto.INT64, [3], [2, 1, 4]),
         helper.make_tensor("fill", TensorProto.FLOAT, [], [0.0])]
nodes = [helper.make_node("Erf", ["x"], ["e"], name="erf"),
         helper.make_node("Split", ["x", "sizes"], ["s1", "s2"], name="split", axis=1),
         helper.make_node("Expand", ["tok", "to"], ["t"], name="expand"),
         helper.make_node("Concat", ["x", "x"], ["c"], name="cat", axis=1),
         helper.make_node("Where", ["m", "fill", "x"], ["w"], name="where"),
         helper.make_node("ReduceMean", ["x"], ["y"], name="mean", axes=[2], keepdims=0)]
save("conditions", helper.make_model(helper.make_graph(nodes, "g", [x, m], [y], inits)))

# Gelu (opset 20): the erf form maps to gelu, the tanh approximation is refused
for name, approx in (("gelu", "none"), ("gelu-tanh", "tanh")):
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 4], [0.25] * 16)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["xw"], name="matmul"),
             helper.make_node("Gelu", ["xw"], ["g"], name="gelu", approximate=approx),
             helper.make_node("ReduceMean", ["g"], ["y"], name="mean", axes=[2], keepdims=0)]
    save(name, helper.make_model(helper.make_graph(nodes, "g", [x], [y], [w])))

# one initializer feeding three nodes (as an exporter that merges equal initializers writes)
w = helper.make_tensor("w", TensorProto.FLOAT, [4, 4], [0.25] * 16)
nodes = [helper.make_node("MatMul", [a, "w"], [b], name=b)
         for a, b in (("x", "h1"), ("h1", "h2"), ("h2", "h3"))]
nodes.append(helper.make_node("ReduceMean", ["h3"], ["y"], name="mean", axes=[2], keepdims=0))
save("shared", helper.make_model(helper.make_graph(nodes, "g", [x], [y], [w])))

# shapes that no int64 dim holds once read (int64's largest, 2^63 - 1, is 2^63 as a double): a
# Reshape of a tensor and one of a constant (folded); a plain cast was undefined (fuzz_onnx)
big = 2**63 - 1
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [])
inits = [helper.make_tensor("shape", TensorProto.INT64, [2], [big, -1]),
         helper.make_tensor("c", TensorProto.INT64, [6], [1, 2, 3, 4, 5, 6]),
         helper.make_tensor("cshape", TensorProto.INT64, [1], [big])]
nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"], name="reshape"),
         helper.make_node("Reshape", ["c", "cshape"], ["rc"], name="reshape_const"),
         helper.make_node("ReduceMean", ["r"], ["y"], name="mean", keepdims=0)]
save("huge-shape", helper.make_model(helper.make_graph(nodes, "g", [x], [y], inits)))
EOF
refused symbolic "$tmp/symbolic.onnx" 1 \
  "symbolic.onnx: graph.input\[0\] 'x': dim 0 is symbolic, expected a fixed size"
refused external "$tmp/external.onnx" 1 \
  "external.onnx: graph.initializer\[0\] '[^']+': data in an external file"
refused short "$tmp/short.onnx" 1 \
  "short.onnx: graph.initializer\[0\] '[^']+': holds [0-9]+ bytes of data, its dims say"
refused orphan "$tmp/orphan.onnx" 1 "orphan.onnx: graph.output\[0\] 'nobody': no node produces it"
refused unsupported "$tmp/unsupported.onnx" 4 \
  "unsupported.onnx: node 'in' \(op 'InstanceNormalization'\): no hap mapping for this op" \
  "unsupported.onnx: node 'cumsum' \(op 'CumSum'\): no hap mapping for this op" \
  "unsupported.onnx: node 'gather' \(op 'Gather'\): hap maps Gather with constant indices as one" \
  "unsupported.onnx: 3 unsupported nodes, nothing written: InstanceNormalization, CumSum, Gather"
refused conditions "$tmp/conditions.onnx" 5 \
  "node 'erf' \(op 'Erf'\): hap maps Erf only inside GELU written out" \
  "node 'split' \(op 'Split'\): split sizes that do not cover dim 1 \(3\) in 2 positive parts" \
  "node 'cat' \(op 'Concat'\): hap maps Concat of tensors only as a class token joined" \
  "node 'where' \(op 'Where'\): hap maps Where with a constant condition" \
  "conditions.onnx: 4 unsupported nodes, nothing written: Erf, Split, Concat, Where"
refused gelu-tanh "$tmp/gelu-tanh.onnx" 2 \
  "node 'gelu' \(op 'Gelu'\): approximate other than none \(hap's gelu is the erf form\)"
refused huge-shape "$tmp/huge-shape.onnx" 3 \
  "node 'reshape' \(op 'Reshape'\): .*cannot reshape 6 elements" \
  "node 'reshape_const' \(op 'Reshape'\): shape arithmetic over constants that does not fit" \
  "huge-shape.onnx: 2 unsupported nodes, nothing written: Reshape"
if "$model" import "$tmp/gelu.onnx" --loss mean -o "$tmp/gelu.json" -q &&
  grep -q '"op": "gelu"' "$tmp/gelu.json"; then
  echo "gelu: imported as hap's gelu"
else
  bad "gelu: Gelu (approximate none) not imported as gelu"
fi
# a note, not an error, for a parameter shared by more than two nodes; -q keeps it quiet
"$model" import "$tmp/shared.onnx" --loss mean -o "$tmp/shared.json" 2>"$tmp/err" ||
  bad "shared: not imported: $(cat "$tmp/err")"
grep -q "note: .*shared.onnx: 1 parameter or buffer feeds more than 2 nodes each (up to 3: 'w')" \
  "$tmp/err" || bad "shared: no note on the shared parameter: $(cat "$tmp/err")"
"$model" import "$tmp/shared.onnx" --loss mean -o "$tmp/shared.json" -q 2>"$tmp/err"
[ -s "$tmp/err" ] && bad "shared: -q printed: $(cat "$tmp/err")"
echo "shared: $(grep note "$tmp/err" || echo 'noted, quiet under -q')"
[ "$fail" -eq 0 ] && echo "test_onnx_bad: passed"
exit "$fail"
