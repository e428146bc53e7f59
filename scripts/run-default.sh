#!/usr/bin/env bash
# The README's main job: build hap (if needed) and run the bundled default study.
# Until hap-sim exists this is `hap-model stats` on the bundled default model, bert-base as HAP's
# experiments configure it for 8 devices. Usage: scripts/run-default.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
if [ ! -x "$build/bin/hap-model" ]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$build" -j"$(nproc)" >/dev/null
fi
"$build/bin/hap-model" stats bert-base
