#!/usr/bin/env bash
# Every suite a unit-test binary lists has a ctest entry of its own (tests/CMakeLists.txt
# reads the suites from the sources' TEST lines): a suite the pattern missed would
# otherwise never run.
#   unit_suites.sh BINARY "SUITE;SUITE;..." [BINARY "SUITES" ...]
set -euo pipefail
while [ $# -gt 0 ]; do
  binary=$1 configured=$2
  shift 2
  listed=$("$binary" --gtest_list_tests | grep -E '^[A-Za-z0-9_/]+\.$' | sed 's/\.$//' | sort -u)
  missing=$(comm -23 <(echo "$listed") <(tr '; ' '\n\n' <<< "$configured" | grep . | sort -u))
  if [ -n "$missing" ]; then
    echo "FAIL: $(basename "$binary") lists suites without a ctest entry: $(echo $missing)"
    echo "      (tests/CMakeLists.txt reads suites from lines starting TEST(Suite, or TEST_F(Suite,)"
    exit 1
  fi
  echo "ok   $(basename "$binary"): $(echo "$listed" | wc -l) suites, each a ctest entry"
done
