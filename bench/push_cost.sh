#!/usr/bin/env bash
# What a push into the page cache costs the daemon, for two epochfs binaries side by side
# (each run alternates them): FILES files of ~110 KB, mounted in MODE, listed (the kernel
# learns their inodes) and named in a published plan, so that readahead reads every file
# (at most 256 ahead of a reader, so FILES <= 256: nobody reads here)
# from the source and pushes it. Prints, per run and binary, the seconds until every file
# was pushed and the daemon's CPU (utime + stime) per pushed file.
#
#   bash bench/push_cost.sh OLD_BINARY NEW_BINARY [MODE] [FILES] [ROUNDS]   # as root
set -euo pipefail
old=$1 new=$2 mode=${3:-notify} files=${4:-250} rounds=${5:-5}
work=$(mktemp -d /tmp/epochfs-push-cost-XXXXXX)
trap 'for b in "$old" "$new"; do "$b" umount --lazy "$work/mnt" >/dev/null 2>&1 || true; done; rm -rf "$work"' EXIT
mkdir -p "$work/src" "$work/mnt"
/usr/bin/python3 - "$work/src" "$files" <<'PY'
import os, random, sys
root, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(1)
for i in range(n):
    d = os.path.join(root, f"d{i % 20:02d}")
    os.makedirs(d, exist_ok=True)
    p = os.path.join(d, f"f{i:05d}.bin")
    with open(p, "wb") as f:
        f.write(rng.randbytes(int(rng.lognormvariate(11.6, 0.4))))
    os.utime(p, (1e9, 1e9))
PY
plan="$work/plan"
{ echo "epochfs-plan 1"; (cd "$work/src" && find . -type f | sed 's|^\./||' | sort); echo; } > "$plan"

cpu_of() { awk '{print $14 + $15}' "/proc/$1/stat"; }
pushed() { "$1" status "$work/mnt" --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["pushed_files"])'; }

run_one() {  # run_one LABEL BINARY
  local label=$1 bin=$2
  rm -rf "$work/cache"
  sync; echo 3 > /proc/sys/vm/drop_caches
  "$bin" mount "$work/src" "$work/mnt" --cache-dir "$work/cache" --consistency "$mode" --ram 1G
  local pid
  pid=$("$bin" status "$work/mnt" --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["pid"])')
  ls -R "$work/mnt" > /dev/null  # READDIRPLUS: the kernel knows every inode
  local cpu0 t0
  cpu0=$(cpu_of "$pid")
  t0=$(date +%s.%N)
  /usr/bin/python3 -c "import os,sys; fd=os.open(sys.argv[2], os.O_WRONLY); os.write(fd, open(sys.argv[1],'rb').read()); os.close(fd)" "$plan" "$work/mnt/.epochfs/plan"  # one write, no O_TRUNC
  local n=0
  for _ in $(seq 600); do
    n=$(pushed "$bin")
    [ "$n" -ge "$files" ] && break
    sleep 0.1
  done
  local t1 cpu1
  t1=$(date +%s.%N)
  cpu1=$(cpu_of "$pid")
  "$bin" umount "$work/mnt"
  /usr/bin/python3 -c "
n, secs, ticks = $n, $t1 - $t0, $cpu1 - $cpu0
hz = __import__('os').sysconf('SC_CLK_TCK')
print(f'$label: {n} files pushed in {secs:.2f} s, daemon CPU {ticks / hz * 1e6 / max(n, 1):.0f} us per pushed file')"
}

for r in $(seq "$rounds"); do
  echo "round $r ($mode, $files files)"
  run_one "  old" "$old"
  run_one "  new" "$new"
done
