#!/usr/bin/env bash
# hap-profile measure --coll-caches: a cold collective sweep (caches flushed before each sample,
# one call per sample) on 2 ranks writes a profile with every collective's rows and records
# hap.coll_caches = cold; warm records warm; a bad value is refused (exit 2, the error on the
# first line, no file).
# (Whether cold samples price hap-run's collectives better is a benchmark: bench_coll_cold and
# reports/run-vs-sim.sh with HAP_PROFILE_ARGS, reports/BENCHMARKS.md.) Needs h5py.
# Usage: test_coll_caches.sh HAP_PROFILE MPIEXEC
set -u
bin=${1:?hap-profile} mpiexec=${2:?mpiexec}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

"$bin" measure --backend cpu --quick --coll-caches lukewarm -o "$tmp/x.h5" 2>"$tmp/err"
rc=$?
want="--coll-caches: 'lukewarm', expected warm or cold"
if [ "$rc" != 2 ] || ! head -n 1 "$tmp/err" | grep -q -- "$want" || [ -e "$tmp/x.h5" ]; then
  echo "FAIL: --coll-caches lukewarm: exit $rc, expected 2 and the choices: $(cat "$tmp/err")"
  fail=1
fi

for how in cold warm; do
  args=(--coll-caches "$how")
  if ! "$mpiexec" -np 2 "$bin" measure --backend cpu --quick --only comm --quiet "${args[@]}" \
    -o "$tmp/$how.h5" 2>"$tmp/err"; then
    echo "FAIL: --coll-caches $how: $(head -n 3 "$tmp/err")"
    fail=1
    continue
  fi
  if ! /usr/bin/python3 - "$tmp/$how.h5" "$how" <<'PY'; then
import sys, h5py
path, want = sys.argv[1], sys.argv[2]
with h5py.File(path, "r") as f:
    got = f["env"].attrs["hap.coll_caches"]
    got = got.decode() if isinstance(got, bytes) else got
    assert got == want, "hap.coll_caches is %r, expected %r" % (got, want)
    names = []
    f.visit(names.append)
    colls = [n for n in names if "all_reduce" in n]
    assert colls, "no all_reduce rows in %s: %s" % (path, names[:20])
print("%s: hap.coll_caches %s, %d all_reduce entries" % (path, got, len(colls)))
PY
    echo "FAIL: --coll-caches $how: the profile"
    fail=1
  fi
done
[ "$fail" -eq 0 ] && echo "test_coll_caches: passed"
exit "$fail"
