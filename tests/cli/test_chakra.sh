#!/usr/bin/env bash
# End-to-end checks of hap-sim's Chakra execution traces (docs/chakra.md): --chakra writes one
# .et per device that protoc decodes against hap's et.proto with the nodes and fields the docs
# list; --chakra-in replays them on the same cluster to the same iteration (within 0.1 %) and on
# another cluster with compute scaled; truncated, foreign and missing traces are one line on
# stderr naming the file, and exit 1.
# Usage: test_chakra.sh HAP_SIM_BINARY ET_PROTO HAP_SYNTH_BINARY
set -u
bin=$1
proto=$2
synth=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0

expect() { # expect NAME STATUS COMMAND...
  local name=$1 want=$2
  shift 2
  "$@" >"$tmp/out" 2>"$tmp/err"
  local got=$?
  if [ "$got" -eq "$want" ]; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL $name: exit $got, expected $want"
    sed 's/^/  stderr: /' "$tmp/err" | head -5
  fi
}
check() { # check NAME COMMAND...
  local name=$1
  shift
  if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $name"; fi
}
one_line_naming() { # one_line_naming NAME FILE TEXT: stderr is one line naming FILE, with TEXT
  local name=$1 file=$2 text=$3
  if [ "$(grep -c . "$tmp/err")" -eq 1 ] && grep -qF -- "$file" "$tmp/err" &&
    grep -qF -- "$text" "$tmp/err"; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL $name: expected one line naming $file with '$text', got:"
    sed 's/^/  stderr: /' "$tmp/err" | head -5
  fi
}
json_get() { # json_get FILE EXPR: a Python expression over the JSON document `d`
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
}
within() { # within A B REL: |A - B| <= REL * |A|
  python3 -c 'import sys; a,b,r=map(float,sys.argv[1:]); sys.exit(0 if abs(a-b) <= r*abs(a) else 1)' "$@"
}

small="mlp:layers=2,batch=24,seq=8,hidden=32"
hetero="paper-hetero:gpus_per_host=2" # 16 devices: 4 V100, 12 P100
homo="paper-homo:gpus_per_host=2,hosts=8"

# ---- export: one trace per device, decoded by protoc against hap's .proto --------------------
expect export 0 "$bin" "$small" -c "$hetero" -s hap --chakra "$tmp/et" -f json
cp "$tmp/out" "$tmp/orig.json"
check export-files [ "$(find "$tmp/et" -name 'hap.[0-9]*.et' | wc -l)" -eq 16 ]
check export-note grep -qF "wrote 16 Chakra traces" "$tmp/err"

# Split each file into its length-prefixed messages and decode every one with protoc: the first
# as ChakraProtoMsg.GlobalMetadata, the others as ChakraProtoMsg.Node.
check protoc-decode python3 - "$tmp/et" "$proto" "$tmp/decoded" <<'PY'
import os, re, subprocess, sys
et, proto, out = sys.argv[1:]
os.makedirs(out)
def messages(data):
    pos = 0
    while pos < len(data):
        n = shift = 0
        while True:
            b = data[pos]; pos += 1
            n |= (b & 0x7f) << shift; shift += 7
            if not b & 0x80:
                break
        assert pos + n <= len(data), "a message runs past the end"
        yield data[pos:pos + n]
        pos += n
def decode(kind, msg):
    r = subprocess.run(["protoc", "--decode=ChakraProtoMsg." + kind, "-I", os.path.dirname(proto),
                        os.path.basename(proto)], input=msg, capture_output=True, check=True)
    return r.stdout.decode()
seen_types, seen_attrs = set(), set()
for rank in (0, 15):  # every node of a V100 rank and a P100 rank
    msgs = list(messages(open(f"{et}/hap.{rank}.et", "rb").read()))
    meta = decode("GlobalMetadata", msgs[0])
    assert 'version: "0.0.4"' in meta, meta
    for key in ("hap_rank", "hap_world_size", "hap_device_flops_per_s", "hap_cluster", "hap_node_count"):
        assert f'name: "{key}"' in meta, (key, meta)
    assert re.search(r'name: "hap_rank"\s+int64_val: %d' % rank, meta) or rank == 0, meta
    ids = []
    for m in msgs[1:]:
        node = decode("Node", m)
        open(f"{out}/{rank}.txt", "a").write(node + "---\n")
        ident = int(re.search(r"^id: (\d+)", node, re.M).group(1)) if re.search(r"^id:", node, re.M) else 0
        for dep in re.findall(r"^(?:data|ctrl)_deps: (\d+)", node, re.M):
            assert int(dep) in ids, ("a dependency on a later node", node)
        ids.append(ident)
        seen_types.add(re.search(r"^type: (\w+)", node, re.M).group(1))
        seen_attrs.update(re.findall(r'name: "(\w+)"', node))
        if "COMM_COLL_NODE" in node:
            for key in ("comm_type", "comm_size", "pg_name", "hap_pg_ranks"):
                assert f'name: "{key}"' in node, (key, node)
        if "COMP_NODE" in node:
            assert 'name: "num_ops"' in node and "duration_micros" in node or "hap_duration_us" in node, node
    assert ids == list(range(len(ids))), ids
assert {"COMP_NODE", "COMM_COLL_NODE"} <= seen_types, seen_types
assert {"num_ops", "tensor_size", "comm_type", "comm_size", "pg_name", "hap_duration_us"} <= seen_attrs, seen_attrs
PY
check decode-has-deps grep -q '^data_deps: ' "$tmp/decoded/0.txt"
check decode-has-ctrl-deps grep -q '^ctrl_deps: ' "$tmp/decoded/0.txt"
check decode-duration grep -q '^duration_micros: [1-9]' "$tmp/decoded/0.txt"

# ---- round trip: the same cluster, the same iteration within 0.1 % ---------------------------
orig=$(json_get "$tmp/orig.json" 'd["rows"][0]["iteration_s"]')
expect replay 0 "$bin" --chakra-in "$tmp/et" -c "$hetero" -f json
back=$(json_get "$tmp/out" 'd["iteration_s"]')
check round-trip-0.1% within "$orig" "$back" 0.001
check replay-counts [ "$(json_get "$tmp/out" 'd["ranks"] == 16 and d["nodes"] > 16 and d["collectives"] > 0')" = True ]
echo "round trip: $orig s exported, $back s replayed"
# without --cluster: the one the traces record
expect replay-recorded-cluster 0 "$bin" --chakra-in "$tmp/et" -f json
check replay-recorded-cluster-time within "$orig" "$(json_get "$tmp/out" 'd["iteration_s"]')" 0.001
expect replay-table 0 "$bin" --chakra-in "$tmp/et"
check replay-table-iteration grep -q '^iteration .* ms (recorded .* ms, [+-]0.0000 %)' "$tmp/out"

# every strategy (several rows: <prefix>.<strategy>.<rank>.et), and a policy with micro-batches
# and recomputation (collectives repeated and recomputed)
expect export-all 0 "$bin" "bert-base:layers=2" -c "$hetero" --chakra "$tmp/all" -q -f json
cp "$tmp/out" "$tmp/all.json"
for s in hap dp-ev dp-cp megatron-tp; do
  want=$(json_get "$tmp/all.json" "[r for r in d['rows'] if r['strategy'] == '$s'][0]['iteration_s']")
  expect "replay-$s" 0 "$bin" --chakra-in "$tmp/all" --chakra-prefix "hap.$s" -f json
  check "round-trip-$s" within "$want" "$(json_get "$tmp/out" 'd["iteration_s"]')" 0.001
done
expect export-policy 0 "$bin" "bert-base:layers=2" -c "$hetero" -s hap \
  --policy micro_batches=2,recompute=full,zero=1 --chakra "$tmp/pol" --chakra-prefix p -q -f json
want=$(json_get "$tmp/out" 'd["rows"][0]["iteration_s"]')
expect replay-policy 0 "$bin" --chakra-in "$tmp/pol" --chakra-prefix p -f json
check round-trip-policy within "$want" "$(json_get "$tmp/out" 'd["iteration_s"]')" 0.001

# from a plan file (hap-synth -o): its traces replay to hap-sim --plan's iteration
expect synth-plan 0 "$synth" "$small" -c "$hetero" -s dp-ev -o "$tmp/plan.json"
expect export-plan 0 "$bin" --plan "$tmp/plan.json" --chakra "$tmp/fromplan" -q -f json
want=$(json_get "$tmp/out" 'd["rows"][0]["iteration_s"]')
check export-plan-files [ -f "$tmp/fromplan/hap.15.et" ]
expect replay-plan 0 "$bin" --chakra-in "$tmp/fromplan" -f json
check round-trip-plan within "$want" "$(json_get "$tmp/out" 'd["iteration_s"]')" 0.001

# a smaller export into the same directory removes the larger one's extra ranks
expect export-smaller 0 "$bin" "$small" -c "paper-homo:gpus_per_host=2,hosts=2" -s hap \
  --chakra "$tmp/fromplan" -q
check smaller-stale-removed [ ! -e "$tmp/fromplan/hap.4.et" ] && [ -f "$tmp/fromplan/hap.3.et" ]
expect replay-smaller 0 "$bin" --chakra-in "$tmp/fromplan" -f json

# ---- another cluster: compute scaled to each device (P100 traces replayed on V100s) ---------
expect replay-hetero 0 "$bin" --chakra-in "$tmp/all" --chakra-prefix hap.dp-ev -c "$hetero" -f json
cp "$tmp/out" "$tmp/on-hetero.json"
expect replay-homo 0 "$bin" --chakra-in "$tmp/all" --chakra-prefix hap.dp-ev -c "$homo" -f json
check p100-rank-faster-on-v100 python3 - "$tmp/on-hetero.json" "$tmp/out" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
p100, v100 = a["per_rank"][15], b["per_rank"][15]
assert p100["device"].startswith("p100") and v100["device"].startswith("v100"), (p100, v100)
assert v100["compute_s"] < 0.8 * p100["compute_s"], (p100, v100)
# a V100 rank's compute is the same on both (same device, same speed)
assert abs(a["per_rank"][0]["compute_s"] - b["per_rank"][0]["compute_s"]) <= 1e-9 * a["per_rank"][0]["compute_s"]
PY

# ---- malformed traces: one line naming the file, exit 1 --------------------------------------
cp -r "$tmp/et" "$tmp/trunc"
head -c -7 "$tmp/et/hap.1.et" >"$tmp/trunc/hap.1.et"
expect truncated 1 "$bin" --chakra-in "$tmp/trunc" -c "$hetero"
one_line_naming truncated-says "$tmp/trunc/hap.1.et" "truncated"

# truncated at a message boundary: the GlobalMetadata's node count tells
cp -r "$tmp/et" "$tmp/trunc2"
python3 - "$tmp/et/hap.2.et" "$tmp/trunc2/hap.2.et" <<'PY'
import sys
data = open(sys.argv[1], "rb").read()
pos, ends = 0, []
while pos < len(data):
    n = shift = 0
    while True:
        b = data[pos]; pos += 1
        n |= (b & 0x7f) << shift; shift += 7
        if not b & 0x80:
            break
    pos += n
    ends.append(pos)
open(sys.argv[2], "wb").write(data[:ends[len(ends) // 2]])
PY
expect truncated-boundary 1 "$bin" --chakra-in "$tmp/trunc2" -c "$hetero"
one_line_naming truncated-boundary-says "$tmp/trunc2/hap.2.et" "truncated"

cp -r "$tmp/et" "$tmp/foreign"
cp "$tmp/orig.json" "$tmp/foreign/hap.3.et"
expect foreign-json 1 "$bin" --chakra-in "$tmp/foreign" -c "$hetero"
one_line_naming foreign-json-says "$tmp/foreign/hap.3.et" "not a Chakra execution trace"

python3 -c 'import random, sys; r = random.Random(18); sys.stdout.buffer.write(bytes(r.randrange(256) for _ in range(4096)))' >"$tmp/foreign/hap.3.et"
expect foreign-random 1 "$bin" --chakra-in "$tmp/foreign" -c "$hetero"
one_line_naming foreign-random-says "$tmp/foreign/hap.3.et" "hap.3.et: "

: >"$tmp/foreign/hap.3.et"
expect empty-file 1 "$bin" --chakra-in "$tmp/foreign" -c "$hetero"
one_line_naming empty-file-says "$tmp/foreign/hap.3.et" "empty"

cp -r "$tmp/et" "$tmp/missing"
rm "$tmp/missing/hap.5.et"
expect missing-rank 1 "$bin" --chakra-in "$tmp/missing" -c "$hetero"
one_line_naming missing-rank-says "$tmp/missing/hap.5.et" "missing"
cp "$tmp/et/hap.5.et" "$tmp/missing/hap.5.et"
rm "$tmp/missing/hap.15.et" # the last rank: the recorded world size tells
expect missing-last-rank 1 "$bin" --chakra-in "$tmp/missing" -c "$hetero"
one_line_naming missing-last-rank-says "$tmp/missing/hap.0.et" "16 ranks"

mkdir "$tmp/empty"
expect empty-dir 1 "$bin" --chakra-in "$tmp/empty" -c "$hetero"
one_line_naming empty-dir-says "$tmp/empty" "no Chakra traces"
expect no-dir 1 "$bin" --chakra-in "$tmp/nowhere" -c "$hetero"
one_line_naming no-dir-says "$tmp/nowhere" "cannot read"

expect wrong-cluster 1 "$bin" --chakra-in "$tmp/et" -c "paper-homo:gpus_per_host=2,hosts=2"
one_line_naming wrong-cluster-says "$tmp/et" "16 ranks"

# a failed replay wrote nothing on stdout
check no-half-output [ ! -s "$tmp/out" ]

# ---- usage ----------------------------------------------------------------------------------
expect usage-model 2 "$bin" "$small" --chakra-in "$tmp/et"
expect usage-prefix 2 "$bin" "$small" --chakra "$tmp/x" --chakra-prefix a/b
expect usage-csv 2 "$bin" --chakra-in "$tmp/et" -f csv
expect usage-pipeline 2 "$bin" "$small" --pipeline stages=2 --chakra "$tmp/x"
check help-mentions grep -q -- '--chakra-in' <("$bin" --help)

echo "test_chakra: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
