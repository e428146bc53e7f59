#!/usr/bin/env bash
# hap-report's pages in a real browser (issue 18, acceptance 3): each report kind, made from the
# tools' real outputs, rendered by headless Chromium to a PNG that must not be blank (at least 1 %
# of the pixels not white, at least 8 colours, and the first series' blue #0072b2 drawn: the SVG
# was painted). Chromium is in CI's test setup (scripts/setup-debian.sh --test), not the main
# job's: without it this test exits 77 (ctest: skipped).
# Usage: test_report_browser.sh HAP_REPORT HAP_SIM HAP_SYNTH HAP_RUN HAP_PROFILE
#        WRITE_SAMPLE_PROFILE MPIRUN
# With HAP_REPORT_SHOTS=DIR the PNGs are also copied there (docs/img/report-<kind>.png).
set -u
report=$1 sim=$2 synth=$3 run=$4 profile=$5 sample=$6 mpirun=$7
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [ -z "$browser" ]; then
  echo "no chromium installed (scripts/setup-debian.sh --test installs it): skipped"
  exit 77
fi
# shellcheck source=tests/cli/report_inputs.sh
. "$here/report_inputs.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
report_inputs "$tmp" "$sim" "$synth" "$run" "$profile" "$sample" "$mpirun" || { echo "FAIL: making the inputs"; exit 1; }
fail=0
for kind in sweep plan run profile; do
  case $kind in
  sweep) in=sweep.json ;;
  plan) in=plan.json ;;
  run) in=trace.json ;;
  profile) in=profile.json ;;
  esac
  "$report" "$kind" "$tmp/$in" -o "$tmp/$kind.html" || { echo "FAIL $kind: hap-report"; fail=1; continue; }
  # a fresh profile directory each time; no sandbox (CI runs as root); /dev/shm may be small
  timeout 120 "$browser" --headless --disable-gpu --no-sandbox --disable-dev-shm-usage \
    --hide-scrollbars --user-data-dir="$tmp/chrome-$kind" --window-size=1200,1400 \
    --screenshot="$tmp/$kind.png" "file://$tmp/$kind.html" >"$tmp/chrome.log" 2>&1
  if [ ! -s "$tmp/$kind.png" ]; then
    echo "FAIL $kind: no screenshot"
    tail -5 "$tmp/chrome.log"
    fail=1
    continue
  fi
  python3 "$here/report_check.py" png "$tmp/$kind.png" 0,114,178 || { echo "FAIL $kind: blank"; fail=1; }
  if [ -n "${HAP_REPORT_SHOTS:-}" ]; then cp "$tmp/$kind.png" "$HAP_REPORT_SHOTS/report-$kind.png"; fi
done
[ "$fail" -eq 0 ] && echo "test_report_browser: 4 report kinds rendered"
[ "$fail" -eq 0 ]
