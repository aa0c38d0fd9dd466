#!/usr/bin/env bash
# Configure and build lct (Release, -O3 -march=native) into build/.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release > build.log 2>&1 || { cat build.log; exit 1; }
cmake --build build -j"${LCT_BUILD_JOBS:-2}" >> build.log 2>&1 || { tail -50 build.log; exit 1; }
echo "build: ok (build/lct)"
