#!/usr/bin/env bash
# Same outputs before and after a refactor: build the tools at BASE (a commit, in a temporary git
# worktree) and at the working tree, run the same commands with both, and compare what they write
# byte for byte: stdout, stderr and every output file. The one field masked is hap-synth's
# "search ... N.NNN s" (a wall-clock reading that differs between any two runs).
#
# Usage: reports/same-outputs.sh BASE [BUILD_DIR]
#   BASE       commit to compare with (e.g. the commit before a refactor)
#   BUILD_DIR  an existing build of the working tree (default: build-same/, configured here)
# Both builds are Release without CUDA (outputs do not depend on either). Exit 0 when every
# command's outputs are identical, 1 when any differ (diffs printed), 2 on usage errors.
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:?usage: reports/same-outputs.sh BASE [BUILD_DIR]}
git rev-parse --verify -q "$base^{commit}" >/dev/null || {
  echo "same-outputs.sh: BASE '$base' is not a commit" >&2
  exit 2
}
new_build=${2:-build-same}
tools=(hap-model hap-synth hap-sim hap-profile)

tmp=$(mktemp -d)
cleanup() {
  git worktree remove --force "$tmp/base" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT

build() { # build SRC DIR: configure (Release, no CUDA) and build the tools; the log on failure
  if ! { cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release -DHAP_WITH_CUDA=OFF -DBUILD_TESTING=OFF &&
    cmake --build "$2" -j"$(nproc)" --target "${tools[@]}"; } >"$tmp/build.log" 2>&1; then
    cat "$tmp/build.log" >&2
    echo "same-outputs.sh: building $1 failed" >&2
    exit 2
  fi
}
echo "same-outputs: building $base (worktree in $tmp/base)"
git worktree add -q --detach "$tmp/base" "$base"
build "$tmp/base" "$tmp/base-build"
echo "same-outputs: building the working tree ($new_build)"
build . "$new_build"

# The commands: the three named by issue 13 (hap-sim with no arguments, hap-synth writing a plan,
# hap-model stats), and sweeps, JSON output and an explained comparison that exercise the moved
# code. Output files go to the current directory (each side runs in its own).
commands=(
  "hap-sim"
  "hap-synth bert-base -c paper-hetero -o plan.json"
  "hap-model stats bert-base"
  "hap-model stats gpt:preset=gpt3-175b,batch=1 --format json"
  "hap-sim vit -c paper-hetero -w inter_gbps=10,25,100 -w device[P100]=V100-16GB,A100-80GB"
  "hap-sim bert-base -c paper-hetero:gpus_per_host=2 -w batch=64,128 -f json"
  "hap-sim mlp -c paper-homo -s all -t trace.json"
  "hap-sim bert-base:layers=2 -c paper-hetero:gpus_per_host=2 -s hap --tasks"
  "hap-sim vit -c paper-homo -w device[V100]=A100-80GB -w nope=1"
  "hap-synth vgg19 --cluster paper-hetero --compare --explain"
  "hap-synth bert-base:layers=4 -c paper-homo:hosts=2 -s megatron-tp -o mt.json"
  "hap-sim bert-base -c no-such-cluster"
  "hap-model export vit:layers=2 -o vit2.json"
  "hap-profile show paper-hetero:gpus_per_host=4"
)

run_side() { # run_side BIN_DIR OUT_DIR
  local i=0 cmd
  for cmd in "${commands[@]}"; do
    mkdir -p "$2/$i"
    # shellcheck disable=SC2086 # the commands are word lists
    (
      cd "$2/$i"
      rc=0
      "$1"/$cmd >stdout 2>stderr || rc=$?
      echo "exit $rc" >status
    )
    sed -i -E 's/^(search .*, )[0-9.]+ s$/\1N s/' "$2/$i/stdout"
    i=$((i + 1))
  done
}
run_side "$tmp/base-build/bin" "$tmp/before"
run_side "$(cd "$new_build/bin" && pwd)" "$tmp/after"

differ=0
i=0
for cmd in "${commands[@]}"; do
  if diff -r "$tmp/before/$i" "$tmp/after/$i" >"$tmp/diff" 2>&1; then
    printf 'same     %s (%s files)\n' "$cmd" "$(find "$tmp/after/$i" -type f | wc -l)"
  else
    printf 'DIFFERS  %s\n' "$cmd"
    head -n 20 "$tmp/diff" | sed 's/^/    /'
    differ=1
  fi
  i=$((i + 1))
done
echo "same-outputs: $base vs the working tree ($(git rev-parse --short HEAD)$(git diff --quiet || echo ', with changes')): $([ "$differ" -eq 0 ] && echo 'every output identical' || echo 'outputs differ')"
exit "$differ"
