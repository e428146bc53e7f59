#!/usr/bin/env bash
# check_bad_files.sh BINARY COMMAND DIR
# For each malformed DIR/*.json run `BINARY COMMAND FILE` (e.g. `hap-model check`, `hap-profile
# show`) and require: exit status exactly 1, nothing on stdout, exactly one non-empty line on
# stderr that names FILE and, after FILE, contains the file's expected reason. The reasons are in
# DIR/expected-errors.txt, one line per file: `FILE: TEXT` (TEXT a fixed string; lines starting
# with # are comments). A file without a reason, a reason without a file and a repeated file fail.
# Prints one line per file and a summary; exits 1 if any file fails, 2 on usage errors.
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
table="$dir/expected-errors.txt"
if [ ! -f "$table" ]; then
  echo "$0: $table: missing, expected one 'FILE: TEXT' line per malformed file" >&2
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
fail() { # fail WHAT: one FAIL line, counted
  echo "FAIL $1"
  failed=$((failed + 1))
}

declare -A want=()
n=0
while IFS= read -r entry || [ -n "$entry" ]; do
  n=$((n + 1))
  case $entry in '' | '#'*) continue ;; esac
  name=${entry%%: *}
  text=${entry#*: }
  if [ "$name" = "$entry" ] || [ -z "$text" ] || [ -z "$name" ]; then
    fail "$table:$n: '$entry' is not 'FILE: TEXT'"
  elif [ -n "${want[$name]+x}" ]; then
    fail "$table:$n: $name has a second expected reason"
  else
    want[$name]=$text
  fi
done <"$table"

shopt -s nullglob
files=("$dir"/*.json)
if [ ${#files[@]} -eq 0 ]; then
  echo "$0: no *.json files in $dir" >&2
  exit 2
fi
declare -A seen=()
for f in "${files[@]}"; do
  seen[${f##*/}]=1
done
for name in "${!want[@]}"; do
  [ -n "${seen[$name]+x}" ] || fail "$table: $name: no such file in $dir"
done

for f in "${files[@]}"; do
  name=${f##*/}
  "${run_timeout[@]}" "$bin" "$cmd" "$f" >"$tmp/out" 2>"$tmp/err" </dev/null
  rc=$?
  line=$(head -n 1 "$tmp/err")
  nlines=$(wc -l <"$tmp/err")
  last=$(tail -c 1 "$tmp/err" | od -An -c | tr -d ' ')
  why=""
  if [ -z "${want[$name]+x}" ]; then
    why="no expected reason in $table"
  elif [ "$rc" -ne 1 ]; then
    why="exit status $rc, expected 1"
  elif [ -s "$tmp/out" ]; then
    why="wrote $(wc -c <"$tmp/out") bytes to stdout, expected nothing"
  elif [ "$nlines" -ne 1 ] || [ "$last" != '\n' ]; then
    why="stderr has $nlines newline-terminated lines, expected exactly one line"
  elif [ -z "$line" ]; then
    why="the stderr line is empty"
  elif [[ "$line" != *"$f"* ]]; then
    why="the stderr line does not name the file"
  elif [[ "${line#*"$f"}" != *"${want[$name]}"* ]]; then
    why="wrong reason: expected '${want[$name]}'"
  fi
  if [ -z "$why" ]; then
    echo "ok   $f: $line"
    passed=$((passed + 1))
  else
    fail "$f: $why; stderr: $(head -c 300 "$tmp/err" | tr '\n' '|')"
  fi
done

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
