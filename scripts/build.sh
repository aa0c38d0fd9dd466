#!/usr/bin/env bash
# Configure and build lct (Release, -O3 -march=native) into build/, or with --sanitize
# an AddressSanitizer + UndefinedBehaviorSanitizer build (-O1, line tables: -g1) into
# build-sanitize/.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build
flags=(-DCMAKE_BUILD_TYPE=Release)
if [[ ${1:-} == --sanitize ]]; then
  dir=build-sanitize
  flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DLCT_SANITIZE=ON)
elif [[ $# -gt 0 ]]; then
  echo "build.sh: unknown option '$1' (expected --sanitize)" >&2
  exit 1
fi
# Ninja for a new build folder: it compiles a library's files while the libraries below
# it still compile and link, where Make starts a target only once every target it links
# is built, a core idle meanwhile. A folder configured before keeps its generator (CMake
# refuses to switch one).
[[ -f $dir/CMakeCache.txt ]] || ! command -v ninja > /dev/null || flags+=(-G Ninja)
cmake -S . -B "$dir" "${flags[@]}" > "$dir.log" 2>&1 || { cat "$dir.log"; exit 1; }
cmake --build "$dir" -j"${LCT_BUILD_JOBS:-2}" >> "$dir.log" 2>&1 || { tail -50 "$dir.log"; exit 1; }
echo "build: ok ($dir/lct)"
