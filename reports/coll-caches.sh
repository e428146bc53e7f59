#!/usr/bin/env bash
# Warm against cold collective samples (hap-profile measure --coll-caches) in the sweeps that
# price the plan's collectives (--coll-timing sweep), interleaved (reports/profile-ab.sh).
# Usage: reports/coll-caches.sh [BUILD_DIR] [REPEATS]   (default build, 3)
exec "$(dirname "$0")/profile-ab.sh" "${1:-build}" "${2:-3}" \
  warm "--coll-timing sweep --coll-caches warm" cold "--coll-timing sweep --coll-caches cold"
