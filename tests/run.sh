#!/usr/bin/env bash
# The test command: install dependencies, build, and run every test.
#
#   bash tests/run.sh
#
# 1. a normal build and the whole suite (unit, real-mount integration, loader, Python);
# 2. the unit tests once more, built with -fsanitize=address,undefined.
# Mount tests need root and /dev/fuse; without them they skip with a message.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}

.ci/install-deps

echo "== build (RelWithDebInfo)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$JOBS"

echo "== all tests"
ctest --test-dir build --output-on-failure -j 1 --timeout 600

echo "== unit tests under AddressSanitizer + UndefinedBehaviorSanitizer"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DEPOCHFS_SANITIZE=ON >/dev/null
cmake --build build-asan -j "$JOBS" --target unit_tests
ctest --test-dir build-asan --output-on-failure -j "$JOBS" --timeout 600 -L unit
