#!/usr/bin/env bash
# End-to-end checks of hap-profile show/merge on cluster specs and profiles.
# Every failure is checked for its exit status and for the reason on stderr.
# Usage: test_hap_profile.sh HAP_PROFILE_BINARY WRITE_SAMPLE_PROFILE_BINARY (both required)
set -u
if [ $# -ne 2 ]; then
  echo "FAIL: usage: $0 HAP_PROFILE_BINARY WRITE_SAMPLE_PROFILE_BINARY (got $# arguments)" >&2
  exit 2
fi
bin=$1
sample=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0

expect() { # expect NAME STATUS COMMAND...
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
check() { # check NAME COMMAND...
  local name=$1
  shift
  if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $name"; fi
}
says() { # says NAME TEXT: stderr contains TEXT (fixed string)
  check "$1" grep -qF -- "$2" "$tmp/err"
}
json_devices() { # json_devices FILE N: the JSON lists N devices
  python3 -c "import json,sys; d=json.load(open('$1')); sys.exit(0 if len(d['devices']) == $2 else 1)"
}

expect help 0 "$bin" --help
check help-text grep -q '^Usage: hap-profile' "$tmp/out"
expect version 0 "$bin" --version
check version-text grep -q '^hap-profile [0-9]' "$tmp/out"
expect no-command 2 "$bin"
says no-command-says "Try 'hap-profile --help'."
expect bad-command 2 "$bin" measure-everything
says bad-command-says "unknown command 'measure-everything'"
expect bad-format 2 "$bin" --format csv show cpu-2
says bad-format-says "unknown format 'csv'"
expect show-no-arg 2 "$bin" show
says show-no-arg-says "show takes one profile or cluster spec"
expect merge-no-output 2 "$bin" merge a.h5
says merge-no-output-says "merge needs -o OUT"

# measure: malformed options fail before MPI starts (exit 2, one line naming the flag)
expect measure-no-backend 2 "$bin" measure -o "$tmp/m.h5"
check measure-no-backend-says grep -q -- 'measure needs --backend' "$tmp/err"
expect measure-bad-backend 2 "$bin" measure --backend tpu -o "$tmp/m.h5"
check measure-bad-backend-says grep -q -- "--backend: unknown backend 'tpu' (expected cpu or cuda)" "$tmp/err"
# --backend cuda with no visible GPU (none here, a hidden one, or a build without CUDA): one line, 1
CUDA_VISIBLE_DEVICES= expect measure-cuda-no-gpu 1 "$bin" measure --backend cuda -o "$tmp/m.h5"
check measure-cuda-no-gpu-says grep -q -- '^hap-profile: --backend cuda: no CUDA device (' "$tmp/err"
check measure-cuda-no-gpu-one-line test "$(wc -l < "$tmp/err")" -eq 1
check measure-cuda-no-gpu-no-file test ! -e "$tmp/m.h5"
expect measure-cuda-emulate 2 "$bin" measure --backend cuda --emulate-speed 1 -o "$tmp/m.h5"
says measure-cuda-emulate-says "--emulate-speed is for --backend cpu"
# --plan's --model and --cluster default to the specs the plan records
expect measure-plan-missing 2 "$bin" measure --backend cpu --plan "$tmp/nope.json" -o "$tmp/m.h5"
check measure-plan-missing-says grep -q -- "--plan $tmp/nope.json: cannot open" "$tmp/err"
printf '{"format": "hap-plan", "version": "1.0", "graph": {"name": "mlp", "digest": "%s"}, "cluster": {"name": "cpu-2", "digest": "%s"}}\n' \
  0000000000000000 0000000000000000 >"$tmp/nospec.json"
expect measure-plan-no-model 2 "$bin" measure --backend cpu --plan "$tmp/nospec.json" -o "$tmp/m.h5"
check measure-plan-no-model-says grep -q -- "--plan $tmp/nospec.json: the plan does not record its model (made by an older hap-synth, or edited): give --model" "$tmp/err"
check measure-plan-no-model-no-file test ! -e "$tmp/m.h5"
expect measure-model-no-plan 2 "$bin" measure --backend cpu --model mlp -o "$tmp/m.h5"
says measure-model-no-plan-says "--model and --cluster go with --plan"
expect measure-no-output 2 "$bin" measure --backend cpu
check measure-no-output-says grep -q -- 'needs -o OUT' "$tmp/err"
expect measure-extra-arg 2 "$bin" measure --backend cpu -o "$tmp/m.h5" extra
says measure-extra-arg-says "measure takes no arguments, got 'extra'"
expect measure-bad-only 2 "$bin" measure --backend cpu --only gpu -o "$tmp/m.h5"
check measure-bad-only-says grep -q -- "--only: unknown part 'gpu'" "$tmp/err"
for speed in '' '1,,0.5' '1,0.5,' ',1' 'fast' '1,x' '0' '-1' '1.5' '1,0' 'nan' 'inf' '1e999' \
  '0.5 ' ' 0.5' '0x1p-1,1'; do
  expect "measure-bad-speed-[$speed]" 2 "$bin" measure --backend cpu --emulate-speed "$speed" -o "$tmp/m.h5"
  check "measure-bad-speed-[$speed]-says" grep -q -- '--emulate-speed: ' "$tmp/err"
  check "measure-bad-speed-[$speed]-no-file" test ! -e "$tmp/m.h5"
done
for n in 0 -1 1.5 x 2000 ''; do
  expect "measure-bad-threads-[$n]" 2 "$bin" measure --backend cpu --threads "$n" -o "$tmp/m.h5"
  check "measure-bad-threads-[$n]-says" grep -q -- '--threads: ' "$tmp/err"
done
for n in 0 -5 1e9 soon ''; do
  expect "measure-bad-timeout-[$n]" 2 "$bin" measure --backend cpu --timeout "$n" -o "$tmp/m.h5"
  check "measure-bad-timeout-[$n]-says" grep -q -- '--timeout: ' "$tmp/err"
done
# outside an MPI launcher: refused (exit 2, one line naming mpirun and --single), no file; with
# --single it profiles the one device
alone() { env -u OMPI_COMM_WORLD_SIZE -u PMI_SIZE -u PMIX_RANK "$@"; }
expect measure-alone 2 alone "$bin" measure --backend cpu --quick -o "$tmp/alone.h5"
says measure-alone-says "measure runs one rank per device: start it with mpirun -np N"
says measure-alone-names-single "which --single asks for"
check measure-alone-one-line test "$(wc -l <"$tmp/err")" -eq 2 # the line + "Try ..."
check measure-alone-no-file test ! -e "$tmp/alone.h5"
expect measure-single 0 alone "$bin" measure --backend cpu --quick --only compute --single \
  --quiet -o "$tmp/single.h5"
# progress: on a terminal (script(1) gives the command a pty) a line with the step, the phase
# and the time left, redrawn in place; in a pipe none
script -qec "env -u OMPI_COMM_WORLD_SIZE -u PMI_SIZE -u PMIX_RANK TERM=xterm '$bin' measure \
  --backend cpu --quick --only compute --single -o '$tmp/tty.h5'" /dev/null >"$tmp/tty.out" 2>&1
check progress-on-tty grep -q 'hap-profile: \[  3/ *[0-9]*\] launch overhead (' "$tmp/tty.out"
check progress-time-left grep -Eq '\[ *[0-9]+/ *[0-9]+\] [^(]*\(~[0-9.]+ (s|min|h) left\)' \
  "$tmp/tty.out"
check progress-redrawn grep -q "$(printf '\r')" "$tmp/tty.out"
expect measure-in-pipe 0 alone "$bin" measure --backend cpu --quick --only compute --single \
  -o "$tmp/pipe.h5"
check progress-not-in-pipe test "$(grep -c 'left)' "$tmp/err")" -eq 0
check progress-no-cr-in-pipe test "$(tr -cd '\r' <"$tmp/err" | wc -c)" -eq 0
expect measure-single-show 0 "$bin" show -f json "$tmp/single.h5"
check measure-single-one-device json_devices "$tmp/out" 1
# srun's tasks under an MPI that did not join them (each task a world of one, as a task started
# with Slurm's variables and no PMI is): refused before any work, said once, by task 0; no file
slurm_task() { # slurm_task PROCID CMD...: Slurm's variables of task PROCID of a 2-task step
  local id=$1
  shift
  alone env SLURM_PROCID="$id" SLURM_LOCALID="$id" SLURM_STEP_NUM_TASKS=2 SLURM_NTASKS=2 "$@"
}
expect srun-unjoined 1 slurm_task 0 "$bin" measure --backend cpu --quick -o "$tmp/srun.h5"
says srun-unjoined-says "the launcher started 2 ranks (SLURM_STEP_NUM_TASKS) but MPI's world has 1"
says srun-unjoined-names-pmix "srun --mpi=pmix"
check srun-unjoined-one-line test "$(wc -l <"$tmp/err")" -eq 1
check srun-unjoined-no-file test ! -e "$tmp/srun.h5"
expect srun-unjoined-task1 1 slurm_task 1 "$bin" measure --backend cpu --quick -o "$tmp/srun.h5"
check srun-unjoined-task1-silent test ! -s "$tmp/err"
# a batch script's own environment (SLURM_PROCID=0, no step) is no launch: the usual refusal
expect slurm-batch-alone 2 alone env SLURM_PROCID=0 SLURM_NTASKS=2 "$bin" measure --backend cpu \
  --quick -o "$tmp/srun.h5"
says slurm-batch-alone-says "measure runs one rank per device"
expect measure-single-on-show 2 "$bin" show --single cpu-2
says measure-single-on-show-says "--single belong to measure"
expect measure-flag-on-show 2 "$bin" show --quick cpu-2
check measure-flag-on-show-says grep -q 'belong to measure' "$tmp/err"

for spec in paper-hetero:64 paper-hetero:gpus_per_host=4:32 paper-hetero:gpus_per_host=1:8 \
  paper-homo:64 a100-h100:32 cpu-2:2; do
  n=${spec##*:}
  s=${spec%:*}
  expect "show-$s" 0 "$bin" show "$s"
  check "show-$s-table" grep -q "devices on" "$tmp/out"
  expect "show-json-$s" 0 "$bin" --format json show "$s"
  cp "$tmp/out" "$tmp/show.json"
  check "show-json-$s-count" json_devices "$tmp/show.json" "$n"
done

expect unknown-cluster 1 "$bin" show paper-hetro
check unknown-cluster-one-line test "$(wc -l <"$tmp/err")" -eq 1
says unknown-cluster-says "unknown cluster 'paper-hetro'"
expect bad-param 1 "$bin" show paper-hetero:gpus_per_hots=4
says bad-param-names-it "unknown parameter 'gpus_per_hots'"
expect missing-profile 1 "$bin" show "$tmp/none.h5"
says missing-profile-names-it "$tmp/none.h5: cannot open: No such file"
printf 'not an hdf5 file' >"$tmp/fake.h5"
expect fake-profile 1 "$bin" show "$tmp/fake.h5"
check fake-profile-one-line test "$(wc -l <"$tmp/err")" -eq 1
says fake-profile-says "$tmp/fake.h5: not an HDF5 file"

expect write-sample 0 "$sample" "$tmp/p.h5"
expect show-profile 0 "$bin" show "$tmp/p.h5"
check show-profile-sweeps grep -q '^profile: ' "$tmp/out"
expect show-profile-json 0 "$bin" --format json show "$tmp/p.h5"
cp "$tmp/out" "$tmp/p.json"
check show-profile-json-valid python3 -c "import json; json.load(open('$tmp/p.json'))"
# merging a profile with itself repeats its hosts: one clear error, no output file
# two hosts profiled apart: merged, with a warning that no link between them was measured
"$sample" "$tmp/host-a.h5" host-a && "$sample" "$tmp/host-b.h5" host-b
expect merge-two-hosts 0 "$bin" merge -o "$tmp/ab.h5" "$tmp/host-a.h5" "$tmp/host-b.h5"
says merge-two-hosts-warns "warning: $tmp/ab.h5: no link between its 2 hosts was measured"
says merge-two-hosts-assumed "hap assumes 12.5 GB/s and 5 us per NIC between them"
check merge-two-hosts-file test -s "$tmp/ab.h5"
# show marks where each host's links come from: the merged NICs are assumed, the parts' own
# intra-host links measured
json_origins() { # json_origins FILE INTRA NIC: every host's intra_host_origin and nic_origin
  python3 -c "import json,sys; h=json.load(open('$1'))['hosts']
sys.exit(0 if all(x['intra_host_origin'] in '$2'.split(',') and x['nic_origin'] == '$3'
                  for x in h) else 1)"
}
expect show-merged 0 "$bin" show "$tmp/ab.h5"
check show-merged-assumed grep -q '^host-a .*measured, assumed$' "$tmp/out"
check show-merged-legend grep -q '^assumed: no such link was measured on any host' "$tmp/out"
expect show-merged-json 0 "$bin" --format json show "$tmp/ab.h5"
cp "$tmp/out" "$tmp/ab.json"
check show-merged-json-origins json_origins "$tmp/ab.json" measured assumed
expect show-measured-across-json 0 "$bin" --format json show "$tmp/p.h5"
cp "$tmp/out" "$tmp/p.json"
check show-measured-across-origins json_origins "$tmp/p.json" measured,borrowed measured
expect show-measured-across 0 "$bin" show "$tmp/p.h5"
check show-measured-across-borrowed grep -q '^p100-0 .*borrowed, measured$' "$tmp/out"
check show-measured-across-legend grep -q "^borrowed: this host measured no such link" "$tmp/out"
expect show-spec-json 0 "$bin" --format json show cpu-2
cp "$tmp/out" "$tmp/spec.json"
check show-spec-origins json_origins "$tmp/spec.json" stated stated
# a part that measured across its hosts: no warning
expect merge-measured-across 0 "$bin" merge -o "$tmp/one.h5" "$tmp/p.h5"
check merge-measured-across-quiet bash -c "! grep -q warning '$tmp/err'"
expect merge-duplicate 1 "$bin" merge -o "$tmp/m.h5" "$tmp/p.h5" "$tmp/p.h5"
says merge-duplicate-says "host 'v100-0' of part 1 is already in an earlier part"
check merge-duplicate-no-file test ! -e "$tmp/m.h5"

# nccl-tests logs (tests/data/nccl-tests, 8 A100s): imported into a profile, shown in nccl-tests'
# layout with the same numbers, usable as a cluster; other tools' logs refused in one line
nt=$(cd "$(dirname "$0")/../data/nccl-tests" && pwd)
expect nt-import 0 "$bin" import-nccl-tests -o "$tmp/nt.h5" "$nt"/*_perf.log
says nt-import-says "wrote $tmp/nt.h5 (8 GPUs on 1 hosts, 10 collective sweeps, 8 pairs; devices: preset A100-80GB"
expect nt-show 0 "$bin" show -f nccl-tests "$tmp/nt.h5"
cp "$tmp/out" "$tmp/nt.txt"
# every row of every log is printed back: same size and count, the times to the log's printed
# precision, algbw and busbw within 1 % (or 0.01 GB/s); sendrecv's in-place columns are N/A (a
# p2p sweep keeps the out-of-place times)
check nt-round-trip python3 - "$tmp/nt.txt" "$nt" <<'PY'
import glob, os, re, sys
shown, logs = open(sys.argv[1]).read(), sys.argv[2]
tables = {}
parts = re.split(r"(?m)^# (\w+_perf): ", shown)
for name, body in zip(parts[1::2], parts[2::2]):
    lines = body.splitlines()[1:]  # past the rest of the table's '# name: ...' line
    tables[name] = [l.split() for l in lines if l.strip() and not l.startswith("#")]
bad = 0
for path in sorted(glob.glob(os.path.join(logs, "*_perf.log"))):
    name = os.path.basename(path)[:-4]
    rows = [l.split() for l in open(path) if l.strip() and not l.startswith("#")]
    rows = [r for r in rows if int(r[0]) > 0]
    got = tables.get(name, [])
    if len(got) != len(rows):
        print("%s: %d rows shown, %d in the log" % (name, len(got), len(rows))); bad += 1; continue
    for g, w in zip(got, rows):
        if g[0] != w[0] or g[1] != w[1]:
            print("%s: size/count %s %s vs %s %s" % (name, g[0], g[1], w[0], w[1])); bad += 1
        for t, a, b in ((5, 6, 7), (9, 10, 11)):
            if name == "sendrecv_perf" and t == 9:  # p2p sweeps keep out-of-place times only
                if g[t:t + 4] != ["N/A"] * 4:
                    print("%s %s B: in-place %s, expected N/A" % (name, w[0], g[t:t + 4])); bad += 1
                continue
            if abs(float(g[t]) - float(w[t])) > 0.5 * 10 ** -len((w[t] + ".").split(".")[1]) + 1e-9:
                print("%s %s B: time %s vs %s" % (name, w[0], g[t], w[t])); bad += 1
            for c in (a, b):
                x, y = float(g[c]), float(w[c])
                if abs(x - y) > max(0.01 * y, 0.011):
                    print("%s %s B: column %d %s vs %s" % (name, w[0], c, g[c], w[c])); bad += 1
sys.exit(1 if bad else 0)
PY
expect nt-show-table 0 "$bin" show "$tmp/nt.h5"
check nt-show-table-model grep -q 'NVIDIA A100-SXM4-80GB' "$tmp/out"
expect nt-show-spec 2 "$bin" show -f nccl-tests cpu-2
says nt-show-spec-says "--format nccl-tests prints a profile's sweeps: 'cpu-2' is not a profile"
printf '# OSU MPI Allreduce Latency Test v7.2\n# Size       Avg Latency(us)\n4   1.52\n' \
  >"$tmp/all_reduce_perf.log"
expect nt-other-tool 1 "$bin" import-nccl-tests -o "$tmp/nt2.h5" "$tmp/all_reduce_perf.log"
says nt-other-tool-says "not an nccl-tests log"
says nt-other-tool-names-line "$tmp/all_reduce_perf.log:3: "
check nt-other-tool-one-line test "$(wc -l <"$tmp/err")" -eq 1
check nt-other-tool-no-file test ! -e "$tmp/nt2.h5"
cp "$nt/all_reduce_perf.log" "$tmp/run1.log"
expect nt-unnamed 1 "$bin" import-nccl-tests -o "$tmp/nt2.h5" "$tmp/run1.log"
says nt-unnamed-says "cannot tell which nccl-tests test wrote it"
expect nt-named 0 "$bin" import-nccl-tests --test all_reduce_perf -o "$tmp/nt2.h5" "$tmp/run1.log"
expect nt-bad-test 2 "$bin" import-nccl-tests --test allreduce -o "$tmp/nt2.h5" "$tmp/run1.log"
says nt-bad-test-says "--test: unknown test 'allreduce'"
expect nt-no-output 2 "$bin" import-nccl-tests "$tmp/run1.log"
says nt-no-output-says "import-nccl-tests needs -o OUT"
expect nt-test-on-show 2 "$bin" show --test all_reduce_perf cpu-2
says nt-test-on-show-says "--test and --device belong to import-nccl-tests, not show"
expect nt-bad-device 1 "$bin" import-nccl-tests --device A100-90GB -o "$tmp/nt3.h5" \
  "$nt/all_reduce_perf.log"
says nt-bad-device-says "--device: 'A100-90GB' is not a GPU preset"
check no-temp-files test -z "$(find "$tmp" -name '*.tmp.*')"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
