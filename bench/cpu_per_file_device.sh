#!/usr/bin/env bash
# The daemon's CPU per file on the GPU machine (16 cores), with epochfs binaries built
# on a Debian bookworm machine: bench/cpu_per_file.py's warm and restart rows, NEW
# against BASE, with 4 readers (3 rounds) and 14 readers (2 rounds).
#
#   On the Debian machine: strip -o .gpu/bin/epochfs-new build/cli/epochfs (and a base
#   binary to .gpu/bin/epochfs-base); .gpu/debs from ../shared/device/fetch-debs.sh
#   (with libbpf1 and libelf1); then, on the GPU machine with .gpu/ carried along:
#   bash bench/cpu_per_file_device.sh OUT
#
# The binaries need only Debian's runtime libraries, unpacked into /tmp/deps: no build
# there, so the whole run takes about two minutes of device time.
set -uo pipefail
out=${1:-/tmp/cpu-per-file}; mkdir -p "$out"
bin=${BIN:-.gpu/bin}
deps=/tmp/deps; mkdir -p $deps
for f in .gpu/debs/*.deb; do dpkg -x "$f" $deps; done
export LD_LIBRARY_PATH=$deps/usr/lib/x86_64-linux-gnu:$deps/lib/x86_64-linux-gnu
"$bin/epochfs-new" --version || exit 1
{ nvidia-smi --query-gpu=name --format=csv,noheader; nproc; uname -r; } > "$out/machine.txt" 2>&1
for spec in "4 3" "14 2"; do
  set -- $spec
  t=$SECONDS
  timeout -s INT -k 20 200 python3 bench/cpu_per_file.py --epochfs "$bin/epochfs-new" --baseline "$bin/epochfs-base" \
    --files "${FILES:-6000}" --readers "$1" --rounds "$2" --rows warm restart --out "$out/cpu_per_file_r$1.json" \
    > "$out/cpu_per_file_r$1.log" 2>&1
  echo "== $1 readers, $2 rounds: exit $? after $((SECONDS - t)) s"
  sed -n '/^row/,$p' "$out/cpu_per_file_r$1.log"
done
