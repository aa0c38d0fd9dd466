#!/usr/bin/env bash
# Install exactly the Debian packages lct needs that are missing. Idempotent; run as root
# (or with sudo available) on Debian bookworm. Extra packages for the Python reference
# checks and the experiment plots are installed with `scripts/setup.sh --python`, and what
# the sanitizer suite needs with `--sanitize`.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  ninja-build                   # the build (scripts/build.sh)
  libopenblas-openmp-dev        # every GEMM; the OpenMP build so BLAS and our own threads share one pool
  libopenmpi-dev openmpi-bin    # MPI process grid (data/pipeline/context parallelism, CAD)
  libhdf5-dev hdf5-tools        # checkpoints (serial HDF5 C library) and h5ls/h5dump
  libcli11-dev                  # command line
  libtomlplusplus-dev           # TOML config files
  nlohmann-json3-dev            # every JSON lct writes (src/util/json.h)
  libfmt-dev                    # every formatted message and log line (fmt::format)
  libgtest-dev                  # unit tests
  libdnnl-dev                   # oneDNN: bf16 matmul (train.precision = bf16) on CPUs with bf16 instructions
)
for option in "$@"; do
  case $option in
    --python) packages+=(python3 python3-numpy python3-h5py python3-torch python3-matplotlib) ;;
    # libc's debug symbols: libc's frames get names when scripts/test.sh --sanitize
    # reruns a failed test with symbolized reports
    --sanitize) packages+=(libc6-dbg) ;;
    *) echo "setup: unknown option '$option' (expected --python, --sanitize)" >&2; exit 1 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if (( ${#missing[@]} == 0 )); then
  echo "setup: all ${#packages[@]} packages already installed"
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null; then SUDO="sudo"; else
    echo "setup: missing packages (${missing[*]}) and not root; rerun as root" >&2; exit 1
  fi
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
