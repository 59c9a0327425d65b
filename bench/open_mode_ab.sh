#!/usr/bin/env bash
# Warm epochs over GlusterFS, side by side: the readers on the GlusterFS mount itself,
# then through two epochfs binaries (say, the commits before and after a change), in
# "open" mode as `auto` picks it on a FUSE source. Alternating, ROUNDS rounds.
#
#   bash bench/open_mode_ab.sh OLD_EPOCHFS NEW_EPOCHFS [ROUNDS]   (as root)
#
# 2,000 files of 110 KB in 4 folders, 4 Python reader processes with buffered open(),
# a shuffled order; each figure is the third epoch (files/s). Needs glusterfs-server.
set -euo pipefail
old=$1 new=$2 rounds=${3:-3}
here=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/epochfs-open-ab-XXXXXX)
gluster_dir=$work/gluster mnt=$work/epochfs
mkdir -p "$mnt"
cleanup() {
  umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true
  bash "$here/tests/glusterfs.sh" stop "$gluster_dir" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
src=$(bash "$here/tests/glusterfs.sh" start "$gluster_dir")
/usr/bin/python3 - "$src" <<'PY'
import os, sys
root = sys.argv[1]
for c in range(4):
    os.makedirs(f"{root}/c{c}", exist_ok=True)
for i in range(2000):
    with open(f"{root}/c{i % 4}/f{i}.jpg", "wb") as f:
        f.write(os.urandom(110000))
PY
find "$src" -exec touch -h -d '1 hour ago' {} +

epoch() {
  /usr/bin/python3 - "$1" <<'PY'
import os, random, sys, time
from multiprocessing import Pool
root = sys.argv[1]
files = [os.path.join(root, c, f) for c in sorted(os.listdir(root)) if c.startswith("c")
         for f in os.listdir(os.path.join(root, c))]
random.shuffle(files)
def read(chunk):
    for p in chunk:
        with open(p, "rb") as f:
            f.read()
start = time.time()
with Pool(4) as pool:
    pool.map(read, [files[i::4] for i in range(4)])
print(f"{len(files) / (time.time() - start):.0f}")
PY
}

for round in $(seq "$rounds"); do
  for who in glusterfs old new; do
    target=$src
    case $who in
      old) "$old" mount "$src" "$mnt" --cache-dir "$work/cache-old" --ram 1G >/dev/null; target=$mnt ;;
      new) "$new" mount "$src" "$mnt" --cache-dir "$work/cache-new" --ram 1G >/dev/null; target=$mnt ;;
    esac
    epoch "$target" >/dev/null
    epoch "$target" >/dev/null
    echo "round $round $who: $(epoch "$target") files/s"
    if [ "$who" != glusterfs ]; then "$new" umount "$mnt"; fi
  done
done
