#!/usr/bin/env bash
# check_bad_files.sh BINARY COMMAND DIR
# For each malformed DIR/*.json run `BINARY COMMAND FILE` (e.g. `hap-model check`, `hap-profile
# show`) and require: exit status exactly 1, nothing on stdout, and exactly one non-empty line on
# stderr that names FILE. Prints one line per file and a summary; exits 1 if any file fails, 2 on
# usage errors.
set -u

if [ $# -ne 3 ]; then
  echo "usage: $0 BINARY COMMAND DIR" >&2
  exit 2
fi
bin=$1
cmd=$2
dir=$3
if [ ! -x "$bin" ]; then
  echo "$0: $bin: not an executable" >&2
  exit 2
fi
if [ ! -d "$dir" ]; then
  echo "$0: $dir: not a directory" >&2
  exit 2
fi

tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT
run_timeout=()
if command -v timeout >/dev/null 2>&1; then
  run_timeout=(timeout 60) # seconds; a hang counts as a failure
fi

passed=0
failed=0
shopt -s nullglob
files=("$dir"/*.json)
if [ ${#files[@]} -eq 0 ]; then
  echo "$0: no *.json files in $dir" >&2
  exit 2
fi

for f in "${files[@]}"; do
  "${run_timeout[@]}" "$bin" "$cmd" "$f" >"$tmp/out" 2>"$tmp/err" </dev/null
  rc=$?
  line=$(head -n 1 "$tmp/err")
  nlines=$(wc -l <"$tmp/err")
  last=$(tail -c 1 "$tmp/err" | od -An -c | tr -d ' ')
  why=""
  if [ "$rc" -ne 1 ]; then
    why="exit status $rc, expected 1"
  elif [ -s "$tmp/out" ]; then
    why="wrote $(wc -c <"$tmp/out") bytes to stdout, expected nothing"
  elif [ "$nlines" -ne 1 ] || [ "$last" != '\n' ]; then
    why="stderr has $nlines newline-terminated lines, expected exactly one line"
  elif [ -z "$line" ]; then
    why="the stderr line is empty"
  elif [[ "$line" != *"$f"* ]]; then
    why="the stderr line does not name the file"
  fi
  if [ -z "$why" ]; then
    echo "ok   $f: $line"
    passed=$((passed + 1))
  else
    echo "FAIL $f: $why; stderr: $(head -c 300 "$tmp/err" | tr '\n' '|')"
    failed=$((failed + 1))
  fi
done

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
