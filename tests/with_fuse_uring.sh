#!/usr/bin/env bash
# Runs a command with the fuse module's enable_uring set, so that the epochfs mounts it
# makes take their requests through io_uring (fs/fuse_uring.h), and puts the parameter
# back after. Without the parameter (a kernel before 6.14) or the right to set it, says
# so and exits 0: there is nothing to run over io_uring.
#
#   tests/with_fuse_uring.sh build/tests/integrity_test
set -euo pipefail
param=/sys/module/fuse/parameters/enable_uring
if [[ ! -e $param ]]; then
  echo "SKIP: this kernel has no FUSE over io_uring ($param)"
  exit 0
fi
before=$(cat "$param")
if ! echo Y 2>/dev/null >"$param"; then
  echo "SKIP: cannot set $param (needs root)"
  exit 0
fi
trap 'echo "$before" >"$param"' EXIT
"$@"
