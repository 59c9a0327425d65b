#!/usr/bin/env bash
# The write race at length: tests/write_race_test.cc (writes through the mount while
# readahead pushes the same files into the page cache) for SECONDS per consistency mode,
# instead of CI's 20. What the race cost before the write fence: docs/benchmarks.md,
# "Figures behind design choices".
#
#   bash bench/write_race.sh [SECONDS] [BUILD]      # as root; default 120 s, build/
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-120}
build=${2:-build}
EPOCHFS_WRITE_RACE_SECONDS=$seconds "$build/tests/integrity_test" \
  --gtest_filter='*WriteRaceTest*' 2>&1 | grep -E 'acknowledged writes|OK|FAILED|Failure|version'
