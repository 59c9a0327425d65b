#!/usr/bin/env bash
# Pushing into the page cache, side by side (as root): 2,000 x 110 KB files in 10
# folders on the local disk, one Python reader with buffered open() listing the data set
# first (glob), shuffled epochs. Per round: after a restart (page cache dropped, --ram
# 1G) with pushing and with --no-page-cache-push, a plain copy read cold; then 4 epochs
# with --ram 160M (the data is 220 MB) and no memory limit, both ways.
#
#   bash bench/push_ab.sh [ROUNDS]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
E=${E:-$here/build/cli/epochfs}
rounds=${1:-2}
work=$(mktemp -d /tmp/epochfs-push-ab-XXXXXX)
trap 'umount "$work/src" 2>/dev/null || true; rm -rf "$work"' EXIT
/usr/bin/python3 - "$work/src" <<'PY'
import os, sys
root = sys.argv[1]
for i in range(2000):
    os.makedirs(f"{root}/c{i % 10}", exist_ok=True)
    with open(f"{root}/c{i % 10}/f{i:06d}.bin", "wb") as f:
        f.write(os.urandom(110_000))
PY
cp -r "$work/src" "$work/copy"
cat > "$work/rd.py" <<'PY'
import glob, random, sys, time
root, epochs, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
files = sorted(glob.glob(f"{root}/c*/*.bin"))
for e in range(epochs):
    random.Random(seed + e).shuffle(files)
    t = time.time()
    for p in files:
        with open(p, "rb") as f:
            f.read()
    print(f"epoch {e}: {len(files) / (time.time() - t):.0f} files/s", flush=True)
PY
"$E" mount "$work/src" "$work/src" --cache-dir "$work/cache" --ram 1G >/dev/null
/usr/bin/python3 "$work/rd.py" "$work/src" 1 0 >/dev/null   # fills the SSD tier
"$E" umount "$work/src"
for round in $(seq "$rounds"); do
  for mode in push nopush copy; do
    sync; echo 3 > /proc/sys/vm/drop_caches
    if [ $mode = copy ]; then echo "copy cold: $(/usr/bin/python3 "$work/rd.py" "$work/copy" 1 "$round")"; continue; fi
    extra=(); [ $mode = nopush ] && extra=(--no-page-cache-push)
    "$E" mount "$work/src" "$work/src" --cache-dir "$work/cache" --ram 1G "${extra[@]}" >/dev/null
    sleep 1
    echo "$mode restart, --ram 1G: $(/usr/bin/python3 "$work/rd.py" "$work/src" 1 "$round")"
    "$E" umount "$work/src"
  done
  for mode in push nopush; do
    sync; echo 3 > /proc/sys/vm/drop_caches
    extra=(); [ $mode = nopush ] && extra=(--no-page-cache-push)
    "$E" mount "$work/src" "$work/src" --cache-dir "$work/cache" --ram 160M "${extra[@]}" >/dev/null
    sleep 1
    echo "$mode --ram 160M: $(/usr/bin/python3 "$work/rd.py" "$work/src" 4 $((round * 10)) | tr '\n' ' ')"
    "$E" umount "$work/src"
  done
done
