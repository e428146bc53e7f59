#!/usr/bin/env bash
# The plan's collectives priced by the sweeps against timed in the replay (hap-profile measure
# --coll-timing sweep|replay), interleaved (reports/profile-ab.sh).
# Usage: reports/coll-timing.sh [BUILD_DIR] [REPEATS]   (default build, 3)
exec "$(dirname "$0")/profile-ab.sh" "${1:-build}" "${2:-3}" \
  sweep "--coll-timing sweep" replay "--coll-timing replay"
