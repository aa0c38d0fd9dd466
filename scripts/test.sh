#!/usr/bin/env bash
# README command 2: install what is missing (including the Python reference's
# packages), build, and run every test.
#   bash scripts/test.sh              Release build (build/), every test
#   bash scripts/test.sh --sanitize   AddressSanitizer + UndefinedBehaviorSanitizer build
#                                     (build-sanitize/), every test: any leak in lct's code,
#                                     out-of-bounds access or undefined behaviour fails it
#                                     (MPI's and the libraries' own leaks: tests/sanitizer.supp)
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ${1:-} == --sanitize ]]; then
  bash scripts/setup.sh --python --sanitize
  bash scripts/build.sh --sanitize
  supp=$PWD/tests/sanitizer.supp
  # MPI's components stay mapped (tests/no_dlclose.c), so their frames have names that
  # tests/sanitizer.supp can match
  cc -shared -fPIC -o build-sanitize/libno_dlclose.so tests/no_dlclose.c
  export LD_PRELOAD=$PWD/build-sanitize/libno_dlclose.so
  export ASAN_OPTIONS=detect_leaks=1:verify_asan_link_order=0
  export LSAN_OPTIONS=suppressions=$supp:print_suppressions=0
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  export LCT_SANITIZED=1  # tests skip what a sanitizer changes (peak RSS, ulimit -v)
  cd build-sanitize
  ctest -j2 --output-on-failure --timeout 1800
elif [[ $# -gt 0 ]]; then
  echo "test.sh: unknown option '$1' (expected --sanitize)" >&2
  exit 1
else
  bash scripts/setup.sh --python
  bash scripts/build.sh
  cd build
  ctest -j2 --output-on-failure --timeout 900
fi
