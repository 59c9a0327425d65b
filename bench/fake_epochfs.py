#!/usr/bin/python3
"""A stand-in for the epochfs CLI, to test the benchmark harness without epochfs.

    /usr/bin/python3 bench/epoch_bench.py --quick --epochfs bench/fake_epochfs.py --scenarios epochfs

It honours the contract epoch_bench.py relies on -- ``mount`` daemonizes and
returns 0 once the mount is live, ``umount`` waits for the daemon, ``status
--json`` prints the keys the harness reads -- with mergerfs as the FUSE
daemon.  It caches nothing and counts nothing (counters are zero; only
daemon_rss_bytes and daemon_pid are real), so its numbers say nothing about
epochfs.  Unknown options make ``mount`` fail, which exercises the harness's
"mount failed" path (e.g. ``--epochfs-arg=--bogus``).
"""

import argparse
import json
import os
import subprocess
import sys
import time


def daemon_pid(mountpoint: str) -> int | None:
    """The mergerfs process serving ``mountpoint``."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if argv and os.path.basename(argv[0]) == "mergerfs" and mountpoint in argv:
            return int(entry)
    return None


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def cmd_mount(a: argparse.Namespace) -> int:
    os.makedirs(a.cache_dir, exist_ok=True)
    # Without -f mergerfs daemonizes once the mount is set up, like `epochfs mount`.
    cp = subprocess.run(["mergerfs", "-o", "cache.files=partial,fsname=fake-epochfs",
                         a.source, a.mountpoint], capture_output=True, text=True)
    if cp.returncode != 0:
        print(f"fake-epochfs: mergerfs failed: {cp.stderr.strip()}", file=sys.stderr)
        return 1
    return 0


def cmd_umount(a: argparse.Namespace) -> int:
    pid = daemon_pid(a.mountpoint)
    cp = subprocess.run(["fusermount3", "-u", a.mountpoint], capture_output=True, text=True)
    if cp.returncode != 0:
        print(f"fake-epochfs: {cp.stderr.strip()}", file=sys.stderr)
        return 1
    while pid is not None and os.path.exists(f"/proc/{pid}"):
        time.sleep(0.05)
    return 0


def cmd_status(a: argparse.Namespace) -> int:
    pid = daemon_pid(a.mountpoint)
    if pid is None:
        print(f"fake-epochfs: nothing mounted at {a.mountpoint}", file=sys.stderr)
        return 1
    doc = {"source_reads": 0, "source_bytes": 0, "ram_hits": 0, "ssd_hits": 0, "misses": 0,
           "daemon_rss_bytes": rss_bytes(pid), "daemon_pid": pid, "corrupt_entries": 0,
           "requests": {"lookup": 0, "open": 0, "read": 0, "release": 0}}
    print(json.dumps(doc) if a.json else doc)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(prog="fake-epochfs")
    p.add_argument("--version", action="version", version="fake-epochfs (mergerfs stand-in)")
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("mount")
    m.add_argument("source")
    m.add_argument("mountpoint")
    m.add_argument("--cache-dir", required=True)
    m.add_argument("--ram", required=True)
    m.add_argument("--disk", required=True)
    m.add_argument("--log-level", default="warn")
    u = sub.add_parser("umount")
    u.add_argument("mountpoint")
    s = sub.add_parser("status")
    s.add_argument("mountpoint")
    s.add_argument("--json", action="store_true")
    a = p.parse_args()
    return {"mount": cmd_mount, "umount": cmd_umount, "status": cmd_status}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
