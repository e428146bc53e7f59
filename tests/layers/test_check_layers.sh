#!/usr/bin/env bash
# check_layers.py must fail when it should: on a small tree with a layers block, a clean tree
# passes; an upward include, an include climbing out of its folder, an upward CMake link and a
# cycle, a picture that disagrees with the block each fail with a line naming the file or arrow.
# Usage: test_check_layers.sh CHECK_LAYERS_PY
set -u
check=$1
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
fail=0

tree() { # a clean three-library tree: low <- mid <- top
  rm -rf "$dir/t" && mkdir -p "$dir/t"/{low,mid,top}/include
  printf '# map\n```layers\nlow:\nmid: low\ntop: mid\n```\n' >"$dir/t/ARCHITECTURE.md"
  for l in low mid top; do
    mkdir -p "$dir/t/$l/include/$l" && echo "int ${l}_f(void);" >"$dir/t/$l/include/$l/$l.h"
  done
  printf 'hap_library(hap_low SOURCES low.c)\n' >"$dir/t/low/CMakeLists.txt"
  printf 'hap_library(hap_mid SOURCES mid.c DEPENDS hap_low)\n' >"$dir/t/mid/CMakeLists.txt"
  printf 'hap_library(hap_top SOURCES top.c DEPENDS hap_mid)\n' >"$dir/t/top/CMakeLists.txt"
  printf '#include "low/low.h"\n' >"$dir/t/low/low.c"
  printf '#include "low/low.h"\n#include "mid/mid.h"\n' >"$dir/t/mid/mid.c"
  printf '#include "low/low.h"\n#include "top/top.h"\n' >"$dir/t/top/top.c"
}

expect() { # expect RC PATTERN DESCRIPTION
  out=$(python3 "$check" "$dir/t" 2>&1)
  rc=$?
  if [ "$rc" -ne "$1" ] || ! printf '%s\n' "$out" | grep -q -- "$2"; then
    echo "FAIL: $3: exit $rc (want $1), output:"
    printf '%s\n' "$out"
    fail=1
  else
    echo "ok: $3"
  fi
}

tree
expect 0 'every arrow points down' 'clean tree passes'

tree
printf '#include "top/top.h"\n' >>"$dir/t/low/low.c"
expect 1 'low/low.c:2: #include "top/top.h": low may not use top' 'upward include fails'

tree
printf '#include "../mid/x.h"\n' >>"$dir/t/mid/mid.c"
expect 1 'mid/mid.c:3: .* climbs out of its folder' 'include with .. fails'

tree
printf 'hap_library(hap_low SOURCES low.c DEPENDS hap_top)\n' >"$dir/t/low/CMakeLists.txt"
expect 1 'low/CMakeLists.txt: links hap_top' 'upward CMake link fails'

tree
printf '```layers\nlow: top\nmid: low\ntop: mid\n```\n' >"$dir/t/ARCHITECTURE.md"
expect 1 'cycle' 'a cycle in the layers block fails'

tree
printf '# no block\n' >"$dir/t/ARCHITECTURE.md"
expect 2 'no ```layers block' 'missing layers block is an error'

tree
printf '```mermaid\ngraph BT\n  mid --> low\n  top --> low\n```\n' >>"$dir/t/ARCHITECTURE.md"
expect 1 'the picture draws top --> low, the layers block does not' 'a picture that disagrees fails'

tree
mkdir -p "$dir/t/extra" && printf 'hap_library(hap_extra SOURCES e.c)\n' >"$dir/t/extra/CMakeLists.txt"
expect 1 '"extra" is not in the layers block' 'an unlisted library folder fails'

exit $fail
