#!/usr/bin/env bash
# The replay's times priced at their median against their mean (hap-profile measure
# --price p50|mean), interleaved (reports/profile-ab.sh).
# Usage: reports/price.sh [BUILD_DIR] [REPEATS]   (default build, 3)
exec "$(dirname "$0")/profile-ab.sh" "${1:-build}" "${2:-3}" \
  p50 "--price p50" mean "--price mean"
