#!/usr/bin/env bash
# hap-profile measure over two hosts, emulated on this machine: 4 ranks under mpirun, ranks 0-1
# with the host name hosta and ranks 2-3 with hostb (each in a UTS namespace of its own,
# as_host.sh), which is all hap-profile knows of hosts. The profile must hold 2 hosts of 2
# devices, a p2p sweep for each of the 8 cross-host pairs (both directions), and each collective
# kind over the groups host:hosta, host:hostb and cross-host; `show` must mark both hosts' NICs
# as measured (not assumed).
# Usage: test_two_hosts.sh HAP_PROFILE MPIEXEC. Exit 77 (skipped) where UTS namespaces are not
# allowed (unshare --uts needs CAP_SYS_ADMIN).
set -u
bin=$1 mpiexec=$2
here=$(cd "$(dirname "$0")" && pwd)
if ! unshare --uts true 2>/dev/null; then
  echo "SKIP: unshare --uts is not allowed here: two hosts cannot be emulated"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
check() { # check NAME COMMAND...
  local name=$1
  shift
  if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $name"; fi
}

if ! timeout 300 "$mpiexec" --oversubscribe -np 4 sh "$here/as_host.sh" 2 \
  "$bin" measure --backend cpu --quick --quiet -o "$tmp/two.h5" >"$tmp/log" 2>&1; then
  echo "FAIL measure over two hosts:"
  sed 's/^/  /' "$tmp/log" | head -20
  exit 1
fi
"$bin" show "$tmp/two.h5" >"$tmp/show" 2>&1 || { echo "FAIL show"; cat "$tmp/show"; exit 1; }
"$bin" --format json show "$tmp/two.h5" >"$tmp/show.json" 2>&1 || { echo "FAIL show -f json"; exit 1; }

check two-hosts grep -q '^cluster .*: 4 devices on 2 hosts$' "$tmp/show"
for h in hosta hostb; do
  check "$h-measured" grep -q "^$h  *2  .*measured, measured$" "$tmp/show"
done
check no-assumed-note bash -c "! grep -q '^assumed:' '$tmp/show'"
check json-nic-measured python3 -c "import json,sys; h=json.load(open('$tmp/show.json'))['hosts']
sys.exit(0 if [x['nic_origin'] for x in h] == ['measured', 'measured'] else 1)"
crossed=0
for a in hosta:0 hosta:1; do
  for b in hostb:0 hostb:1; do
    for pair in "$a -> $b" "$b -> $a"; do
      grep -q "^$pair " "$tmp/show" && crossed=$((crossed + 1))
    done
  done
done
check cross-host-pairs test "$crossed" -eq 8
for kind in all_reduce all_gather reduce_scatter all_to_all broadcast; do
  for group in host:hosta host:hostb cross-host; do
    check "$kind-$group" grep -Eq "^$kind +$group +2 " "$tmp/show"
  done
done
echo "test_two_hosts: $pass passed, $fail failed"
if [ "$fail" -ne 0 ]; then
  sed 's/^/  /' "$tmp/show" | head -30
  exit 1
fi
