#!/usr/bin/env bash
# End-to-end checks of hap-model: usage errors, every command, and a file round trip per zoo model.
# Usage: test_hap_model.sh HAP_MODEL_BINARY
set -u
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0

# expect NAME WANTED_STATUS COMMAND...: run, compare the exit status.
expect() {
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

# check NAME CONDITION-COMMAND...: a plain assertion.
check() {
  local name=$1
  shift
  if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $name"; fi
}

# says NAME TEXT: stderr contains TEXT (a fixed string): the failure is for the expected reason.
says() {
  check "$1" grep -qF -- "$2" "$tmp/err"
}

expect help 0 "$bin" --help
check help-text grep -q '^Usage: hap-model' "$tmp/out"
expect cmd-help 0 "$bin" stats --help
check cmd-help-text grep -q 'Usage: hap-model stats' "$tmp/out"
expect version 0 "$bin" --version
check version-text grep -q '^hap-model [0-9]' "$tmp/out"
expect no-command 2 "$bin"
says no-command-says "missing command"
expect bad-command 2 "$bin" frobnicate
says bad-command-says "unknown command 'frobnicate'"
expect bad-option 2 "$bin" --bogus
says bad-option-says "unrecognized option '--bogus'"
expect bad-format 2 "$bin" --format xml list
says bad-format-says "unknown format 'xml'"
expect stats-missing-arg 2 "$bin" stats
says stats-missing-arg-says "wrong number of arguments for 'stats'"
expect export-missing-output 2 "$bin" export mlp
says export-missing-output-says "export needs -o FILE"
expect list 0 "$bin" list
for m in mlp bert-base vit bert-moe vgg19 gpt; do
  check "list-has-$m" grep -q "^$m " "$tmp/out"
done
expect ops 0 "$bin" ops
check ops-has-attention grep -q '^multi_head_attention' "$tmp/out"
expect ops-json 0 "$bin" ops --format json
check ops-json-valid python3 -c "import json,sys; d=json.load(open('$tmp/out')); sys.exit(0 if len(d) >= 35 else 1)"

expect unknown-model 1 "$bin" stats nosuchmodel
check unknown-model-one-line test "$(wc -l <"$tmp/err")" -eq 1
says unknown-model-says "unknown model 'nosuchmodel'"
expect bad-option-value 1 "$bin" stats 'bert-base:layers=abc'
says bad-option-names-it "option 'layers' is 'abc', expected a positive integer"
expect export-bad-dir 1 "$bin" export mlp -o "$tmp/no/such/dir/g.json"
says export-bad-dir-says "$tmp/no/such/dir/g.json: cannot create"
check export-bad-dir-no-file test ! -e "$tmp/no/such/dir/g.json"

small=(
  "mlp:layers=2,batch=8,seq=4,hidden=16"
  "bert-base:layers=2,batch=4,seq=8,width=32,hidden=64,heads=4,vocab=64"
  "vit:layers=2,batch=4,width=32,hidden=64,heads=4"
  "bert-moe:layers=2,batch=4,seq=8,width=32,hidden=64,heads=4,vocab=64,devices=2"
  "vgg19:batch=2"
  "gpt:layers=2,batch=2,seq=8,width=32,heads=4,vocab=64,granularity=fine"
)
for spec in "${small[@]}"; do
  name=${spec%%:*}
  expect "stats-$name" 0 "$bin" stats "$spec"
  expect "stats-json-$name" 0 "$bin" stats --format json "$spec"
  cp "$tmp/out" "$tmp/$name.stats.json"
  check "stats-json-valid-$name" python3 -c "import json; json.load(open('$tmp/$name.stats.json'))"
  expect "export-$name" 0 "$bin" export "$spec" -o "$tmp/$name.json"
  expect "check-$name" 0 "$bin" check "$tmp/$name.json"
  expect "reexport-$name" 0 "$bin" export "$tmp/$name.json" -o "$tmp/$name.2.json"
  check "roundtrip-bytes-$name" cmp -s "$tmp/$name.json" "$tmp/$name.2.json"
  expect "stats-file-$name" 0 "$bin" stats --format json "$tmp/$name.json"
  check "stats-file-equal-$name" python3 -c "
import json
a = json.load(open('$tmp/$name.stats.json')); b = json.load(open('$tmp/out'))
a.pop('source', None); b.pop('source', None)
raise SystemExit(0 if a == b else 1)"
done
check no-temp-files test -z "$(find "$tmp" -name '*.tmp.*')"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
