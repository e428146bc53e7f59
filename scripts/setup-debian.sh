#!/usr/bin/env bash
# Install everything hap needs to build, test and lint on Debian 12 (bookworm).
#   scripts/setup-debian.sh            the main job's packages (build, run, lint)
#   scripts/setup-debian.sh --import   those and hap-import's Python stack (PyTorch models into
#                                      hap, docs/import.md): python3-torch, python3-torchvision,
#                                      python3-onnx for Debian's /usr/bin/python3 (about 600 MB,
#                                      so not part of the main job's setup)
#   scripts/setup-debian.sh --test     everything the whole test suite runs (the README's test
#                                      command): the --import stack, and chromium (hap-report's
#                                      pages rendered headless) and libxml2-utils (xmllint)
# Non-interactive; uses sudo only when not run as root. The CUDA toolkit is optional and not
# installed here: when /usr/local/cuda (or nvcc on PATH) exists, the build uses it.
set -euo pipefail

test_setup=0 import_setup=0
for arg in "$@"; do
  case "$arg" in
  --test) test_setup=1 import_setup=1 ;;
  --import) import_setup=1 ;;
  -h | --help) sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "setup-debian.sh: unknown argument '$arg' (expected --import, --test or nothing)" >&2; exit 2 ;;
  esac
done

packages=(
  build-essential cmake pkg-config
  libjansson-dev libcriterion-dev
  libhdf5-dev hdf5-tools
  libglpk-dev
  libopenmpi-dev openmpi-bin
  libopenblas-dev
  # Chakra traces (chakra/): protoc-c generates the .et codec at build time, libprotobuf-c runs
  # it, protoc --decode checks the files in tests/cli/test_chakra.sh
  protobuf-c-compiler libprotobuf-c-dev protobuf-compiler
  libonnx-dev # onnx.proto, from which import/ generates its ONNX reader (hap-model import)
  python3 python3-h5py
  time # GNU time: peak memory in reports/bench-synth.sh
  procps # pgrep: tests/profile/test_kill.sh finds an MPI rank to kill
  clang-format clang-tidy
  clang libclang-rt-14-dev # libFuzzer and the sanitizer runtimes: scripts/fuzz.sh
)
# The test setup's extras (--test): what only the tests use.
test_packages=(
  chromium      # hap-report's pages rendered to PNG headless (cli_report_browser)
  libxml2-utils # xmllint --noout: the pages are well-formed (cli_report)
)
if [ "$test_setup" -eq 1 ]; then
  packages+=("${test_packages[@]}")
fi

# hap-import's stack (python3-h5py is above: the profile tests use it too)
import_packages=(python3-torch python3-torchvision python3-onnx)
if [ "$import_setup" -eq 1 ]; then
  packages+=("${import_packages[@]}")
fi
mapfile -t packages < <(printf '%s\n' "${packages[@]}" | awk '!seen[$0]++')

if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo -n) # -n: fail instead of prompting; CI has no stdin
else
  echo "setup-debian.sh: not root and no sudo; run as root or install: ${packages[*]}" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
  "${packages[@]}" </dev/null

echo "setup-debian.sh: installed ${#packages[@]} packages"
tools=(cmake gcc clang clang-format clang-tidy mpiexec h5dump)
[ "$test_setup" -eq 0 ] || tools+=(chromium xmllint)
for tool in "${tools[@]}"; do
  printf '  %-13s %s\n' "$tool" "$(command -v "$tool" || echo MISSING)"
done
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "  CUDA toolkit  found (GPU code will be compiled)"
else
  echo "  CUDA toolkit  not found (GPU code is skipped; GPU tests report Skipped)"
fi
