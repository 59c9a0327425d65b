#!/usr/bin/env bash
# A real network filesystem for the "open" consistency mode's tests: a one-brick
# GlusterFS volume on this machine, reached through Gluster's own FUSE client.
#
#   tests/glusterfs.sh start DIR   # bricks under DIR, the volume mounted at DIR/mnt
#   tests/glusterfs.sh stop DIR    # unmount, stop and delete the volume
#
# Exit 77 (with a message) where GlusterFS is not installed or cannot start: callers
# skip. Needs root. glusterd is started if it is not running and left running.
set -uo pipefail

cmd=${1:-}
dir=${2:-}
if [ -z "$cmd" ] || [ -z "$dir" ]; then
  echo "usage: $0 start|stop DIR" >&2
  exit 2
fi
vol="epochfs-$(basename "$dir" | tr -c 'a-zA-Z0-9\n' '-')"
gluster_cli() { timeout 60 gluster --mode=script "$@"; }
skip() {
  echo "glusterfs: $*" >&2
  exit 77
}

case "$cmd" in
  start)
    command -v glusterd >/dev/null || skip "glusterd not installed (apt-get install glusterfs-server)"
    command -v glusterfs >/dev/null || skip "glusterfs client not installed"
    if ! pgrep -x glusterd >/dev/null; then
      glusterd || skip "glusterd did not start"
    fi
    for _ in $(seq 1 50); do
      gluster_cli volume list >/dev/null 2>&1 && break
      sleep 0.2
    done
    gluster_cli volume list >/dev/null 2>&1 || skip "glusterd does not answer"
    mkdir -p "$dir/brick" "$dir/mnt"
    host=$(hostname)
    out=$(gluster_cli volume create "$vol" "$host:$dir/brick" force 2>&1) ||
      out=$(gluster_cli volume create "$vol" "127.0.0.1:$dir/brick" force 2>&1) ||
      skip "cannot create volume $vol: $out"
    gluster_cli volume start "$vol" >/dev/null 2>&1 || skip "cannot start volume $vol"
    # Gluster's client caches (md-cache, io-cache) would hide a server-side change from
    # a client; the tests change files only through this one client.
    glusterfs --volfile-server=localhost --volfile-id="$vol" "$dir/mnt" ||
      skip "cannot mount volume $vol"
    for _ in $(seq 1 50); do
      mountpoint -q "$dir/mnt" && break
      sleep 0.2
    done
    mountpoint -q "$dir/mnt" || skip "volume $vol did not mount"
    echo "$dir/mnt"
    ;;
  stop)
    umount "$dir/mnt" 2>/dev/null || umount -l "$dir/mnt" 2>/dev/null
    # The name comes from the folder's last component only: a volume of that name whose
    # brick is elsewhere is somebody else's (its start then failed), and stays.
    if info=$(gluster_cli volume info "$vol" 2>/dev/null) &&
      ! sed -n 's/^Brick[0-9]*: [^:]*://p' <<<"$info" | grep -qxF "$dir/brick"; then
      echo "glusterfs: volume $vol has no brick in $dir: not this folder's, left as it is" >&2
      exit 0
    fi
    gluster_cli volume stop "$vol" force >/dev/null 2>&1
    gluster_cli volume delete "$vol" >/dev/null 2>&1
    exit 0
    ;;
  *)
    echo "usage: $0 start|stop DIR" >&2
    exit 2
    ;;
esac
