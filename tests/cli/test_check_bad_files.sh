#!/usr/bin/env bash
# check_bad_files.sh must fail when it should: on a scratch directory holding one malformed graph
# (negative_dim.json, refused for "tensors[0].shape[1]: is -8, expected a positive integer"), the
# right reason passes; a wrong reason, a missing reason, a reason for a file that is not there, a
# file given twice, text that only the path contains, an accepted file and a missing table fail.
# Usage: test_check_bad_files.sh CHECK_BAD_FILES_SH HAP_MODEL GRAPH_DATA_DIR
set -u
if [ $# -ne 3 ]; then
  echo "FAIL: usage: $0 CHECK_BAD_FILES_SH HAP_MODEL GRAPH_DATA_DIR (got $# arguments)" >&2
  exit 2
fi
script=$1 bin=$2 data=$3
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
fail=0
reason='tensors[0].shape[1]: is -8, expected a positive integer'

setup() { # setup TABLE-LINES...: the scratch directory with negative_dim.json and this table
  rm -rf "$dir/bad" && mkdir "$dir/bad" && cp "$data/bad/negative_dim.json" "$dir/bad/"
  printf '# scratch\n' >"$dir/bad/expected-errors.txt"
  local l
  for l in "$@"; do printf '%s\n' "$l" >>"$dir/bad/expected-errors.txt"; done
}

expect() { # expect RC PATTERN DESCRIPTION: the script exits RC and its output contains PATTERN
  local out rc
  out=$(bash "$script" "$bin" check "$dir/bad" 2>&1)
  rc=$?
  if [ "$rc" -ne "$1" ] || ! printf '%s\n' "$out" | grep -qF -- "$2"; then
    echo "FAIL: $3: exit $rc (want $1, output with '$2'):"
    printf '%s\n' "$out" | sed 's/^/  /'
    fail=1
  else
    echo "ok: $3"
  fi
}

setup "negative_dim.json: $reason"
expect 0 '1 passed, 0 failed' 'the right reason passes'

setup "negative_dim.json: nodes[0].op: unknown op"
expect 1 "wrong reason: expected 'nodes[0].op: unknown op'" 'a wrong reason fails'

setup "negative_dim.json: tensors[0].shape[1]: is -8, expected a negative integer"
expect 1 'wrong reason' 'a reason that differs in one word fails'

setup
expect 1 'no expected reason' 'a file without a reason fails'

setup "negative_dim.json: $reason" "zero_dim.json: tensors[0].shape[0]: is 0"
expect 1 'zero_dim.json: no such file' 'a reason for a file that is not there fails'

setup "negative_dim.json: $reason" "negative_dim.json: $reason"
expect 1 'negative_dim.json has a second expected reason' 'a file given twice fails'

setup "negative_dim.json: bad/negative_dim"
expect 1 'wrong reason' 'text found only in the path does not count'

setup "negative_dim.json: $reason" "mlp2.json: anything"
cp "$data/good/mlp2.json" "$dir/bad/"
expect 1 'mlp2.json: exit status 0, expected 1' 'a file the tool accepts fails'

setup "negative_dim.json: $reason"
rm "$dir/bad/expected-errors.txt"
expect 2 'expected-errors.txt: missing' 'a directory without a table is a usage error'

exit $fail
