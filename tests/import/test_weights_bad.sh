#!/usr/bin/env bash
# hap-run --weights (store/tensor_file.h) on a zoo mlp: a well-formed hap-weights file runs and
# --dump-grads writes a hap-grads file; every malformed or mismatched file (not HDF5, truncated,
# no or another format, a tensor missing, a wrong shape, integers for a float parameter, no such
# file) and an unwritable --dump-grads are refused before running: exit 1, one stderr line naming
# the file, the dataset and what was expected. On a zoo vit (inputs x and y): a file without any
# input runs (hap-run's own batch), one with x but not y is refused naming /y. Needs h5py only
# (exit 77 without it).
# Usage: test_weights_bad.sh HAP_IMPORT HAP_MODEL HAP_SYNTH HAP_RUN MPIRUN
set -u
model=$2 synth=$3 run=$4
if ! /usr/bin/python3 -c 'import h5py' 2>/dev/null; then
  echo "test_weights_bad: SKIPPED: /usr/bin/python3 has no h5py"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
fail=0
bad() {
  echo "FAILED: $*"
  fail=1
}
g="$tmp/mlp.json"
"$model" export mlp:layers=1,batch=4,seq=2,hidden=8 -o "$g" >/dev/null || exit 1
"$synth" "$g" -c cpu-2:gpus_per_host=1 -o "$tmp/plan.json" -q || exit 1

# weights.py GRAPH OUT VARIANT: a hap-weights file for GRAPH, spoilt as VARIANT says.
cat >"$tmp/weights.py" <<'EOF'
import json, sys
import h5py, numpy as np
graph, out, variant = sys.argv[1:]
tensors = [t for t in json.load(open(graph))["tensors"] if t["kind"] != "activation"]
with h5py.File(out, "w") as f:
    if variant != "no-format":
        f.attrs["format"] = np.bytes_("hap-grads" if variant == "other-format" else "hap-weights")
    f.attrs["version"] = np.bytes_("1.0")
    for i, t in enumerate(tensors):
        shape = t["shape"]
        if t["kind"] == "input" and (variant == "no-inputs" or (variant == "one-input" and i > 0)):
            continue
        if variant == "missing" and t["kind"] == "parameter":
            variant = "done"
            continue
        if variant == "shape" and t["kind"] == "parameter":
            shape, variant = shape + [1], "done"
        if t["dtype"].startswith("int") or (variant == "int" and t["kind"] == "parameter"):
            variant = "done" if variant == "int" else variant
            f.create_dataset(t["name"], data=np.zeros(shape, dtype=np.int64))
        else:
            f.create_dataset(t["name"], data=np.full(shape, 0.01 * (i + 1), dtype=np.float32))
EOF
/usr/bin/python3 "$tmp/weights.py" "$g" "$tmp/good.h5" good || exit 1
if "$run" "$tmp/plan.json" --weights "$tmp/good.h5" --dump-grads "$tmp/grads.h5" -n 1 -w 0 -q \
  >"$tmp/out" 2>&1 && h5ls "$tmp/grads.h5/grad" >/dev/null 2>&1; then
  echo "good: ran, $(grep -c Dataset <(h5ls "$tmp/grads.h5/grad")) gradients dumped"
else
  cat "$tmp/out"
  bad "a well-formed weights file"
fi

# refused NAME FILE PATTERN [ARGS...]: hap-run --weights FILE exits 1 with one line matching.
refused() {
  local name=$1 file=$2 pattern=$3 rc=0
  shift 3
  "$run" "$tmp/plan.json" --weights "$file" -n 1 -w 0 -q "$@" >"$tmp/out" 2>"$tmp/err" || rc=$?
  [ "$rc" -eq 1 ] || bad "$name: exit $rc, expected 1"
  [ "$(wc -l <"$tmp/err")" -eq 1 ] || bad "$name: expected one stderr line: $(cat "$tmp/err")"
  grep -qE -- "$pattern" "$tmp/err" || bad "$name: stderr lacks /$pattern/: $(cat "$tmp/err")"
  echo "$name: $(cat "$tmp/err")"
}
for v in no-format other-format missing shape int; do
  /usr/bin/python3 "$tmp/weights.py" "$g" "$tmp/$v.h5" "$v" || exit 1
done
echo 'not hdf5' >"$tmp/text.h5"
head -c 3000 "$tmp/good.h5" >"$tmp/truncated.h5"
refused not-hdf5 "$tmp/text.h5" "text.h5: not an HDF5 file, expected a hap-weights file"
refused truncated "$tmp/truncated.h5" "truncated.h5: (cannot open as HDF5|.*cannot read)"
refused no-format "$tmp/no-format.h5" "no-format.h5: /: attribute 'format' missing"
refused other-format "$tmp/other-format.h5" \
  "other-format.h5: /: attribute 'format' is \"hap-grads\", expected \"hap-weights\""
refused missing "$tmp/missing.h5" \
  "missing.h5: /layers.0.linear.weight: missing, expected the graph's parameter float32\[8, 8\]"
w=/layers.0.linear.weight
refused shape "$tmp/shape.h5" \
  "shape.h5: $w: shape \[8, 8, 1\], expected the graph's parameter shape \[8, 8\]$"
refused int "$tmp/int.h5" \
  "int.h5: /layers.0.linear.weight: non-float values, expected floating-point"
refused no-file "$tmp/none.h5" "none.h5: cannot open: No such file"
refused dump-unwritable "$tmp/good.h5" "/nonexistent/dir/g.h5" --dump-grads /nonexistent/dir/g.h5

# the inputs: all in the file, or none (hap-run's own batch), never some
vit="$tmp/vit.json"
"$model" export vit:layers=1,batch=2,width=16,heads=2,image=16,patch=8 -o "$vit" -q &&
  "$synth" "$vit" -c cpu-2:gpus_per_host=1 -o "$tmp/plan.json" -q || exit 1
/usr/bin/python3 "$tmp/weights.py" "$vit" "$tmp/no-inputs.h5" no-inputs || exit 1
/usr/bin/python3 "$tmp/weights.py" "$vit" "$tmp/one-input.h5" one-input || exit 1
if "$run" "$tmp/plan.json" --weights "$tmp/no-inputs.h5" -n 1 -w 0 -q >"$tmp/out" 2>&1; then
  echo "no-inputs: ran on hap-run's own batch"
else
  cat "$tmp/out"
  bad "no-inputs: a weights file without inputs"
fi
refused one-input "$tmp/one-input.h5" \
  "one-input.h5: /y: missing, expected the graph's input int64\[2\]"
[ "$fail" -eq 0 ] && echo "test_weights_bad: passed"
exit "$fail"
