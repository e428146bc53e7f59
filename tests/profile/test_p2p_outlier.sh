#!/usr/bin/env bash
# The first point-to-point size of a pair's sweep keeps no warm-up outlier (issue 21: "the first
# p2p size (8 B) carries a warm-up outlier, p50 1.2 ms"). A shim (slow_first_sends.c, preloaded
# into the ranks) delays the first 60 pings of each pair by 1 ms: without the pair warm-up and
# the re-measuring of outliers (profile/measure.c, hap_p2p_outliers) the 8 B p50 reads about
# 0.5 ms; with them it must read under 100 us like the sizes after it. A second profile delays
# every ping, so the shim is shown to act (8 B p50 at least 300 us there).
# Usage: test_p2p_outlier.sh HAP_PROFILE MPIEXEC SHIM_SO
set -u
bin=$1
mpiexec=$2
shim=$3
[ -f "$shim" ] || { echo "test_p2p_outlier: no shim library $shim"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL $*"; sed 's/^/  /' "$tmp/err" | head -8; }
# a shim without the sanitizer runtime may be preloaded ahead of it
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"

# profile N: the first N pings (tag 1) to each peer sleep 1 ms; prints "PAIR P50_US" per pair
profile() {
  "$mpiexec" -np 2 -x LD_PRELOAD="$shim" -x HAP_TEST_SLOW_SENDS="$1" -x HAP_TEST_SLOW_TAG=1 \
    -x HAP_TEST_SLOW_SEND_US=1000 -x ASAN_OPTIONS "$bin" measure --backend cpu --quick \
    --only comm --quiet -o "$tmp/p$1.h5" >"$tmp/out" 2>"$tmp/err" || return 1
  /usr/bin/python3 - "$tmp/p$1.h5" <<'PY' 2>"$tmp/err"
import sys
import h5py
with h5py.File(sys.argv[1], "r") as f:
    for pair, s in f["p2p"].items():
        assert s["sizes_bytes"][0] == 8, "first size %d B" % s["sizes_bytes"][0]
        print(pair, "%.1f" % (1e6 * s["p50_s"][0]))
PY
}

# $1 what was profiled; $2 below or min, $3 us: every pair's 8 B p50 is below $3, or at least $3
judge() {
  if [ "$(wc -l <"$tmp/pairs")" -eq 2 ] &&
    awk -v want="$2" -v v="$3" '($2 < v) != (want == "below") { b = 1 } END { exit b }' \
      "$tmp/pairs"; then ok; else
    bad "$1: 8 B p50 per pair $(tr '\n' ' ' <"$tmp/pairs")(us), expected $2 $3 us"
  fi
}

if profile 60 >"$tmp/pairs"; then
  judge "60 slow pings" below 100
else bad "profile with 60 slow pings"; fi
if profile 1000000 >"$tmp/pairs"; then
  judge "every ping slow (1 ms each)" min 300
else bad "profile with every ping slow"; fi

echo "test_p2p_outlier: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
