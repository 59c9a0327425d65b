#!/usr/bin/env bash
# The test command: install dependencies, build, and run every test.
#
#   bash tests/run.sh
#
# 1. a normal build and the whole suite (unit, real-mount integration, loader, Python);
# 2. the unit tests once more, built with -fsanitize=address,undefined;
# 3. the Debian package built with CPack and checked (tests/package_test.sh);
# 4. the libraries compiled with clang's -Wthread-safety (base/thread_annotations.h), so
#    a lock annotation that the code breaks fails the run.
# Mount tests need root and /dev/fuse; without them they skip with a message.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}

.ci/install-deps

# Runs ctest with its arguments, keeping the whole log in $1. The console gets what
# matters: on success the totals, on failure every line but the passing tests' (so the
# failing tests' output and the list of failures come last, not lost in a long log).
run_ctest() {
  local log=$1
  shift
  local start=$SECONDS
  if ctest "$@" --output-on-failure >"$log" 2>&1; then
    sed -n '/tests passed/,$p' "$log"
    echo "(full log: $log, $((SECONDS - start)) s)"
  else
    grep -v -E '^ +Start +[0-9]+: |Test +#[0-9]+: .* +Passed +[0-9.]+ sec$' "$log"
    echo "(full log: $log, $((SECONDS - start)) s)"
    # Once more, to tell a flaky test from a broken one in the report; the run fails
    # either way.
    echo "== the failed tests once more"
    ctest "$@" --rerun-failed --output-on-failure 2>&1 | tail -n 60 || true
    return 1
  fi
}

echo "== build (RelWithDebInfo)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$JOBS"

echo "== all tests"
run_ctest build/ctest.log --test-dir build -j 1 --timeout 600

echo "== unit tests under AddressSanitizer + UndefinedBehaviorSanitizer"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DEPOCHFS_SANITIZE=ON >/dev/null
cmake --build build-asan -j "$JOBS" --target unit_tests
run_ctest build-asan/ctest.log --test-dir build-asan -j "$JOBS" --timeout 600 -L unit

echo "== Debian package (cpack)"
bash tests/package_test.sh build-deb

echo "== thread-safety analysis (clang -Wthread-safety, libraries only)"
# Compile only: nothing is linked or run, so -O0 without debug info, and only the
# library targets (tests stay configured so that cache/testing's library is checked
# too).
CC=clang CXX=clang++ cmake -S . -B build-clang -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_CXX_FLAGS_DEBUG=-O0 -DCMAKE_C_FLAGS_DEBUG=-O0 \
  "-DCMAKE_CXX_FLAGS=-Wthread-safety -Werror=thread-safety" \
  -DEPOCHFS_LOADER_CUDA=OFF >/dev/null
cmake --build build-clang -j 2 --target epochfs_base epochfs_cache epochfs_cache_testing \
  epochfs_prefetcher epochfs_fs epochfs_kernel_cache epochfs_daemon epochfs_cli epochfs_loader
