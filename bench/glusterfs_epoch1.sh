#!/usr/bin/env bash
# Epoch 1 over GlusterFS, side by side: 4 Python readers on the GlusterFS mount itself,
# then through epochfs with the epoch's order published, at --prefetch 4 (the default:
# the depth then follows the source, up to 32) and --prefetch 32. Each configuration
# reads its own fresh folder of 1,000 x 110 KB files (a cold client), page cache
# dropped first; the order is shuffled.
#
#   bash bench/glusterfs_epoch1.sh            (as root; needs glusterfs-server)
#   CONFIGS="direct ep4" E=/path/to/epochfs bash bench/glusterfs_epoch1.sh
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
E=${E:-$here/build/cli/epochfs}
work=$(mktemp -d /tmp/epochfs-gluster-e1-XXXXXX)
mkdir -p "$work/mnt"
src=$(bash "$here/tests/glusterfs.sh" start "$work/gluster") || exit 1
cleanup() {
  umount "$work/mnt" 2>/dev/null || umount -l "$work/mnt" 2>/dev/null
  bash "$here/tests/glusterfs.sh" stop "$work/gluster" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
CONFIGS=${CONFIGS:-"direct ep4 ep32 direct ep4 ep32"}
n=$(echo $CONFIGS | wc -w)
/usr/bin/python3 - "$src" $((1000 * n)) <<'PY'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    d = f"{root}/s{i // 1000:02d}"
    os.makedirs(d, exist_ok=True)
    with open(f"{d}/f{i}.jpg", "wb") as f:
        f.write(os.urandom(110000))
PY
find "$src" -exec touch -h -d '1 hour ago' {} +
epoch() {  # ROOT SLICE PLAN_FILE|-
  /usr/bin/python3 - "$@" <<'PY'
import os, random, sys, time
from multiprocessing import Pool
root, sl, plan = sys.argv[1], sys.argv[2], sys.argv[3]
files = sorted(os.path.join(sl, f) for f in os.listdir(os.path.join(root, sl)))
random.Random(7).shuffle(files)
if plan != "-":
    with open(plan, "w") as f:
        f.write("epochfs-plan 1\n" + "".join(p + "\n" for p in files) + "\n")
def read(chunk):
    for p in chunk:
        with open(os.path.join(root, p), "rb") as f:
            f.read()
start = time.time()
with Pool(4) as pool:
    pool.map(read, [files[i::4] for i in range(4)])
print(f"{len(files) / (time.time() - start):.0f}")
PY
}
i=0
for c in $CONFIGS; do
  sl=$(printf "s%02d" $i); i=$((i + 1))
  sync; echo 3 > /proc/sys/vm/drop_caches
  case $c in
    direct) echo "$c $sl: $(epoch "$src" "$sl" -) files/s" ;;
    ep*)
      "$E" mount "$src" "$work/mnt" --cache-dir "$work/cache-$sl" --ram 1G --prefetch "${c#ep}" >/dev/null
      r=$(epoch "$work/mnt" "$sl" "$work/mnt/.epochfs/plan")
      s=$("$E" status "$work/mnt" --json | /usr/bin/python3 -c "import json, sys; d = json.load(sys.stdin); print('read ahead', d['prefetch_hits'], 'of 1000; READs', d['requests']['read'], '; depth', d['prefetch_source_depth'], '; pace', round(d['prefetch_pace_reads_per_s']))")
      echo "$c $sl: $r files/s ($s)"
      "$E" umount "$work/mnt" ;;
  esac
done
