#!/usr/bin/env bash
# Style and static checks, as CI runs them. Fails (exit 1) on any finding.
#   1. clang-format --dry-run --Werror on every *.c *.h *.cu under the source directories
#   2. banned functions (curl-style grep): sprintf strcpy strtok gets
#      -> use snprintf, memcpy/snprintf, strtok_r or a hand-written scanner, fgets
#   3. clang-tidy with .clang-tidy on every library's and tool's .c files, using
#      build/compile_commands.json (configured here if missing)
# Usage: scripts/lint.sh [--fix] [--build-dir DIR] [-j N]
#   --fix   reformat files in place with clang-format -i first (clang-tidy findings stay manual)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

fix=0
build_dir=build
jobs="${HAP_JOBS:-$(nproc 2>/dev/null || echo 2)}"
while [ $# -gt 0 ]; do
  case "$1" in
  --fix) fix=1 ;;
  --build-dir) build_dir="${2:?--build-dir needs a directory}"; shift ;;
  --build-dir=*) build_dir="${1#*=}" ;;
  -j) jobs="${2:?-j needs a number}"; shift ;;
  -j*) jobs="${1#-j}" ;;
  -h | --help) sed -n '2,10p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "lint.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
  shift
done

for tool in clang-format clang-tidy; do
  command -v "$tool" >/dev/null || { echo "lint.sh: $tool not found (scripts/setup-debian.sh)" >&2; exit 1; }
done

# The library folders (each has a CMakeLists.txt calling hap_library), the tools and the tests.
lib_dirs=()
for d in */; do
  d=${d%/}
  grep -qs 'hap_library(' "$d/CMakeLists.txt" && lib_dirs+=("$d")
done
src_dirs=("${lib_dirs[@]}" tools tests)
mapfile -t files < <(find "${src_dirs[@]}" -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' \) | LC_ALL=C sort)
failed=0

# 1. Formatting -------------------------------------------------------------------------------
if [ "$fix" -eq 1 ]; then
  clang-format -i "${files[@]}"
fi
fmt_out=$(clang-format --dry-run --Werror "${files[@]}" 2>&1) || true
if [ -n "$fmt_out" ]; then
  mapfile -t bad < <(grep -oE '^[^:]+\.(c|h|cu):[0-9]+:[0-9]+: (warning|error)' <<<"$fmt_out" |
    cut -d: -f1 | LC_ALL=C sort -u)
  echo "lint: clang-format: ${#bad[@]} of ${#files[@]} files are not formatted (fix: scripts/lint.sh --fix, or clang-format -i FILE):"
  for f in "${bad[@]}"; do
    printf '  %s (%d places)\n' "$f" "$(grep -c "^$f:[0-9]*:[0-9]*: " <<<"$fmt_out")"
  done
  head -n 30 <<<"$fmt_out" | sed 's/^/    /'
  failed=1
else
  echo "lint: clang-format: ${#files[@]} files OK"
fi

# 2. Banned functions (word boundary, so snprintf, vsnprintf, fgets, strtok_r are fine) -------
if banned=$(grep -nE '\b(sprintf|strcpy|strtok|gets)[[:space:]]*\(' "${files[@]}"); then
  echo "lint: banned functions (sprintf strcpy strtok gets); use snprintf, memcpy, strtok_r, fgets:"
  sed 's/^/  /' <<<"$banned"
  failed=1
else
  echo "lint: banned functions: none"
fi

# 3. clang-tidy ---------------------------------------------------------------------------------
if [ ! -f "$build_dir/compile_commands.json" ]; then
  echo "lint: configuring $build_dir for compile_commands.json"
  if [ -z "${CUDACXX:-}" ] && ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
    export CUDACXX=/usr/local/cuda/bin/nvcc # as scripts/test.sh does
  fi
  cmake -S . -B "$build_dir" -DHAP_WERROR=ON >/dev/null
fi
mapfile -t tidy_files < <(find "${lib_dirs[@]}" tools -type f -name '*.c' 2>/dev/null | LC_ALL=C sort)
tidy_log=$(mktemp)
trap 'rm -f "$tidy_log"' EXIT
tidy_rc=0
# Files missing from the database (e.g. exec/devices_none.c in a CUDA build) borrow the flags of
# a neighbour; clang-tidy interpolates them. One file per process: clang-tidy 14 given several
# files reports false "uninitialized va_list" (clang-analyzer-valist) in every file after the first.
printf '%s\0' "${tidy_files[@]}" |
  xargs -0 -n 1 -P "$jobs" clang-tidy -p "$build_dir" --quiet >"$tidy_log" 2>&1 || tidy_rc=$?
findings=$(grep -cE '^[^ ].*: (warning|error): ' "$tidy_log" || true)
if [ "$tidy_rc" -ne 0 ] || [ "$findings" -ne 0 ]; then
  echo "lint: clang-tidy: $findings finding(s) in ${#tidy_files[@]} files:"
  grep -v -E '^[0-9]+ (warning|error)s? (generated|treated as errors)\.?$|^Error while processing' "$tidy_log" | sed 's/^/  /'
  failed=1
else
  echo "lint: clang-tidy: ${#tidy_files[@]} files OK"
fi

if [ "$failed" -ne 0 ]; then
  echo "lint: FAILED"
  exit 1
fi
echo "lint: OK"
