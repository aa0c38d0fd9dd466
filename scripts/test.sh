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
  # Leaks that libraries keep until exit are matched by module (tests/sanitizer.supp),
  # with nothing symbolized: symbolizing a single frame made each process load every
  # module's debug information, about a third of a sanitized MPI launch.
  # tests/lsan_preload.c keeps MPI's components mapped and gives OpenMPI's asprintf
  # strings a stack that reaches OpenMPI, so every suppression finds its module.
  cc -shared -fPIC -O2 -fno-omit-frame-pointer -o build-sanitize/liblsan_preload.so tests/lsan_preload.c
  export LD_PRELOAD=$PWD/build-sanitize/liblsan_preload.so
  export ASAN_OPTIONS=detect_leaks=1:verify_asan_link_order=0:symbolize=0
  export LSAN_OPTIONS=suppressions=$supp:print_suppressions=0
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  export LCT_SANITIZED=1  # tests skip what a sanitizer changes (peak RSS, ulimit -v)
  cd build-sanitize
  if ! ctest -j2 --output-on-failure --timeout 1800; then
    # a failed test again, its reports with function names, files and lines
    echo "test.sh: the failed tests again, with symbolized sanitizer reports:"
    ASAN_OPTIONS=detect_leaks=1:verify_asan_link_order=0:symbolize=1 \
      ctest --rerun-failed --output-on-failure --timeout 1800 || true
    exit 1
  fi
elif [[ $# -gt 0 ]]; then
  echo "test.sh: unknown option '$1' (expected --sanitize)" >&2
  exit 1
else
  bash scripts/setup.sh --python
  bash scripts/build.sh
  cd build
  ctest -j2 --output-on-failure --timeout 900
fi
