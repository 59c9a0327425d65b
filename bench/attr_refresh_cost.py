#!/usr/bin/python3
"""What a GETATTR costs the daemon against what a listed entry (READDIRPLUS) costs it.

One thread: every file of a data set is read through the mount by READs (no readahead),
then each is stat()ed (a GETATTR each: the READ marked its atime stale); then each is
read again and their folders are listed instead. Prints wall time and the daemon's CPU
(utime + stime, 10 ms ticks) per file and per entry, 3 trials.

    /usr/bin/python3 bench/attr_refresh_cost.py build/cli/epochfs [MOUNT FLAG ...]

Flags after the binary go to its mount, e.g. ``--consistency open``.

The data set is cpu_per_file.py's (3,000 files of ~110 KB in 100 folders), made once
under /var/tmp/epochfs-attr-cost.
"""
import json
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpu_per_file as c  # noqa: E402 - the data set, mount and status helpers

WORK = "/var/tmp/epochfs-attr-cost"


def daemon_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def read_all(mnt: str, paths: list[str]) -> None:
    for p in paths:
        with open(os.path.join(mnt, p), "rb", buffering=0) as f:
            f.readall()


def main() -> int:
    binary, extra = sys.argv[1], sys.argv[2:]
    src, mnt, cache = f"{WORK}/src", f"{WORK}/mnt", f"{WORK}/cache"
    os.makedirs(mnt, exist_ok=True)
    if not os.path.exists(f"{WORK}/meta.json"):
        paths, crcs, total = c.make_dataset(src, 3000, 3)
        with open(f"{WORK}/meta.json", "w") as f:
            json.dump([paths, crcs, total], f)
    with open(f"{WORK}/meta.json") as f:
        paths, _, total = json.load(f)
    folders = sorted({os.path.dirname(p) for p in paths})
    for _ in range(3):
        shutil.rmtree(cache, ignore_errors=True)
        pid = c.mount(binary, src, mnt, cache, f"{2 * total}", ["--prefetch", "0", *extra], False)
        try:
            read_all(mnt, paths)
            t0, c0 = time.monotonic(), daemon_cpu(pid)
            for p in paths:
                os.stat(os.path.join(mnt, p))
            t1, c1 = time.monotonic(), daemon_cpu(pid)
            read_all(mnt, paths)  # every atime stale again
            t2, c2 = time.monotonic(), daemon_cpu(pid)
            entries = 0
            for d in folders:
                with os.scandir(os.path.join(mnt, d)) as it:
                    entries += sum(1 for _ in it)
            t3, c3 = time.monotonic(), daemon_cpu(pid)
        finally:
            c.umount(binary, mnt)
        n = len(paths)
        print(f"stat after READs: {1e6 * (t1 - t0) / n:.1f} us/file wall, daemon "
              f"{1e6 * (c1 - c0) / n:.1f} us/file; listing: {1e6 * (t3 - t2) / entries:.1f} "
              f"us/entry wall, daemon {1e6 * (c3 - c2) / entries:.1f} us/entry ({entries} entries)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
