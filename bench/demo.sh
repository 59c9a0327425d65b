#!/usr/bin/env bash
# The main job, from a fresh Debian bookworm machine (as root):
#
#   bash bench/demo.sh
#
# installs every dependency, builds epochfs, generates a sample ImageFolder-like data
# set on a loop-mounted ext4 disk throttled to 300 read IOPS, mounts epochfs over it,
# reads three shuffled epochs (plus a daemon restart) next to the raw source, a tmpfs
# copy, rclone and mergerfs, prints the speed-up table and unmounts everything.
# Extra arguments go to bench/epoch_bench.py (e.g. --files 10000 for the full size).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
  echo "demo: needs root (loop devices, a blkio cgroup, drop_caches, mounts)" >&2
  exit 2
fi

.ci/install-deps
echo "== build"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)" --target epochfs
echo "== benchmark"
exec /usr/bin/python3 bench/epoch_bench.py --quick --epochs 3 --epochfs build/cli/epochfs \
  --out bench/out "$@"
