#!/usr/bin/env bash
# README command 2: install what is missing (including the Python reference's
# packages), build, and run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --python
bash scripts/build.sh
cd build
ctest -j2 --output-on-failure --timeout 900
