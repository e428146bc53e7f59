# shellcheck shell=bash
# report_inputs.sh — sourced by the hap-report tests: report_inputs DIR SIM SYNTH RUN PROFILE
# SAMPLE MPIRUN makes one real input of each report kind with those binaries (hap-sim, hap-synth,
# hap-run, hap-profile, write_sample_profile, mpirun):
#   DIR/sweep.json      hap-sim -f json, gpus_per_host=1,2,4 (a numeric axis)
#   DIR/sweep-dev.json  hap-sim -f json, device[P100]=V100-16GB,A100-80GB (a category axis)
#   DIR/plan.json       hap-synth -o, 16 devices, a policy (memory by component recorded)
#   DIR/pipe.json       hap-synth --pipeline stages=2 -o: a pipelined plan (hap-plan 2.0)
#   DIR/cpu2.json       a plan for cpu-2, run by hap-run under mpirun -np 2 into DIR/trace.json
#   DIR/profile.json    hap-profile show -f json of write_sample_profile's profile
# Returns non-zero (saying which) when a tool fails.
report_inputs() {
  local d=$1 sim=$2 synth=$3 run=$4 profile=$5 sample=$6 mpirun=$7
  "$sim" bert-base:layers=2 -c paper-hetero --sweep gpus_per_host=1,2,4 -f json -q \
    >"$d/sweep.json" 2>"$d/gen.err" || { echo "hap-sim sweep failed"; cat "$d/gen.err"; return 1; }
  "$sim" bert-base:layers=2 -c paper-hetero:gpus_per_host=1 -f json -q \
    --sweep 'device[P100]=V100-16GB,A100-80GB' >"$d/sweep-dev.json" 2>"$d/gen.err" ||
    { echo "hap-sim device sweep failed"; cat "$d/gen.err"; return 1; }
  "$synth" 'mlp:layers=4' -c paper-hetero:gpus_per_host=2 --policy precision=bf16,optimizer=adam \
    -o "$d/plan.json" >/dev/null 2>"$d/gen.err" || { echo "hap-synth failed"; cat "$d/gen.err"; return 1; }
  "$synth" 'mlp:layers=4' -c paper-hetero:gpus_per_host=1 --pipeline stages=2 -o "$d/pipe.json" \
    >/dev/null 2>"$d/gen.err" || { echo "hap-synth --pipeline failed"; cat "$d/gen.err"; return 1; }
  "$synth" 'mlp:layers=2,batch=24,seq=8,hidden=32' -c cpu-2 -o "$d/cpu2.json" >/dev/null \
    2>"$d/gen.err" || { echo "hap-synth cpu-2 failed"; cat "$d/gen.err"; return 1; }
  "$mpirun" --oversubscribe -np 2 "$run" "$d/cpu2.json" -n 3 -w 1 -q -t "$d/trace.json" \
    >/dev/null 2>"$d/gen.err" || { echo "hap-run failed"; cat "$d/gen.err"; return 1; }
  "$sample" "$d/sample.h5" >/dev/null 2>"$d/gen.err" || { echo "write_sample_profile failed"; return 1; }
  "$profile" show -f json "$d/sample.h5" >"$d/profile.json" 2>"$d/gen.err" ||
    { echo "hap-profile show failed"; cat "$d/gen.err"; return 1; }
}
