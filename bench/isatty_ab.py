#!/usr/bin/python3
"""What Python's buffered open() costs on a FUSE mount, and what epochfs run saves of it.

``open(path, "rb")`` asks the new file isatty(): on FUSE an ioctl the kernel sends to
the daemon on every open. Side by side, in interleaved rounds, 4 reader processes read
every file of a warm data set (everything in the page cache) with:
  * tmpfs, buffered open (the practical limit);
  * epochfs, unbuffered open (``buffering=0``: no isatty);
  * epochfs, buffered open (an unmodified script);
  * epochfs, buffered open with epochfs.hook's open (what ``epochfs run`` installs).
Prints files/s per round and the median, with the daemon's ioctl count per epoch, and
who answers isatty() on the mount (the kernel, where the isatty guard loads, or the
daemon). The last row needs the loader's Python package built (build/loader/python).

    /usr/bin/python3 bench/isatty_ab.py        # ~1 minute here
    # the isatty guard's effect, one binary: run once as above, once with
    /usr/bin/python3 bench/isatty_ab.py --epochfs-arg=--isatty-guard=off
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import shutil
import statistics
import subprocess
import sys
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH)
sys.path.insert(0, BENCH)
sys.path.insert(0, os.path.join(REPO, "build", "loader", "python"))  # epochfs.hook, as built
from benchenv import unmount  # noqa: E402
try:
    import epochfs.hook  # noqa: E402  (imported once here, installed in the readers after the fork)
except ImportError:  # a build without the loader (-DEPOCHFS_BUILD_LOADER=OFF): no hook row
    epochfs = None

PASSES = 5  # epochs per measurement: the readers' fork is not what is measured
ROWS = ("tmpfs buffered", "epochfs unbuffered", "epochfs buffered", "epochfs buffered, epochfs run")
if epochfs is None:
    ROWS = ROWS[:-1]


def reader(orders: list[list[str]], mode: str, conn) -> None:
    if mode == "hook":
        epochfs.hook._install_open()  # what install() does first (it then hooks torch)
    n = 0
    for paths in orders:
        for p in paths:
            if mode == "unbuffered":
                with open(p, "rb", buffering=0) as f:
                    n += len(f.read())
            else:
                with open(p, "rb") as f:
                    n += len(f.read())
    conn.send(n)


def epoch(paths: list[str], mode: str, readers: int) -> float:
    """PASSES epochs, each in a new shuffled order shared out among the readers (as a
    DataLoader's workers share an epoch's order); returns files/s."""
    ctx = mp.get_context("fork")
    procs, conns = [], []
    orders = []
    for _ in range(PASSES):
        order = paths[:]
        random.shuffle(order)
        orders.append(order)
    t0 = time.monotonic()
    for r in range(readers):
        a, b = ctx.Pipe(duplex=False)
        p = ctx.Process(target=reader, args=([o[r::readers] for o in orders], mode, b))
        p.start()
        procs.append(p)
        conns.append(a)
    for c in conns:
        c.recv()
    for p in procs:
        p.join()
    return PASSES * len(paths) / (time.monotonic() - t0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochfs", default=os.path.join(REPO, "build", "cli", "epochfs"))
    ap.add_argument("--workdir", default="/var/tmp/epochfs-isatty-ab")
    ap.add_argument("--files", type=int, default=3000)
    ap.add_argument("--size", type=int, default=110_000)
    ap.add_argument("--readers", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epochfs-arg", action="append", default=[], help="more epochfs mount options")
    a = ap.parse_args()
    w = a.workdir
    src, mnt, tmp, cache = (os.path.join(w, d) for d in ("src", "mnt", "tmpfs", "cache"))
    shutil.rmtree(w, ignore_errors=True)
    for d in (src, mnt, tmp):
        os.makedirs(d)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={a.files * a.size * 2}", "tmpfs", tmp], check=True)
    mounted = False
    try:
        rel = []
        for i in range(a.files):
            r = f"c{i % 20:02d}/f{i:05d}.jpg"
            for root in (src, tmp):
                os.makedirs(os.path.join(root, os.path.dirname(r)), exist_ok=True)
                with open(os.path.join(root, r), "wb") as f:
                    f.write(os.urandom(a.size))
            rel.append(r)
        subprocess.run([a.epochfs, "mount", src, mnt, "--cache-dir", cache, "--ram", "1G", "--read-only",
                        *a.epochfs_arg],
                       check=True)
        mounted = True
        on = {"tmpfs buffered": (tmp, "buffered"), "epochfs unbuffered": (mnt, "unbuffered"),
              "epochfs buffered": (mnt, "buffered"), "epochfs buffered, epochfs run": (mnt, "hook")}
        for _ in range(2):  # warm: every file in the page cache, attributes valid
            epoch([os.path.join(mnt, r) for r in rel], "unbuffered", a.readers)
            epoch([os.path.join(tmp, r) for r in rel], "unbuffered", a.readers)
        results = {row: [] for row in ROWS}
        ioctls = {row: [] for row in ROWS}
        cpu = {row: [] for row in ROWS}
        status = json.loads(subprocess.run([a.epochfs, "status", mnt, "--json"], capture_output=True,
                                           text=True).stdout)
        pid = status["pid"]
        # Who answers isatty() on the mount: the kernel (the isatty guard) or the daemon.
        print(f"isatty: {status.get('isatty', '(not reported)')}", flush=True)

        def daemon_cpu_s() -> float:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

        def requests() -> dict:
            out = subprocess.run([a.epochfs, "status", mnt, "--json"], capture_output=True, text=True).stdout
            d = json.loads(out)
            extra = {k: d[k] for k in ("pushed_bytes", "pushed_files", "access_opens", "push_dropped_after") if k in d}
            return d["requests"] | extra
        all_requests = {row: {} for row in ROWS}
        for rnd in range(a.rounds):
            for row in ROWS:
                root, mode = on[row]
                before = requests()
                cpu_before = daemon_cpu_s()
                results[row].append(epoch([os.path.join(root, r) for r in rel], mode, a.readers))
                cpu[row].append((daemon_cpu_s() - cpu_before) / PASSES)
                after = requests()
                ioctls[row].append((after.get("ioctl", 0) - before.get("ioctl", 0)) / PASSES)
                for k, v in after.items():
                    if v != before.get(k, 0):
                        all_requests[row][k] = all_requests[row].get(k, 0) + v - before.get(k, 0)
            print(f"round {rnd + 1}: " + ", ".join(f"{row} {results[row][-1]:.0f}" for row in ROWS), flush=True)
        tmpfs = statistics.median(results["tmpfs buffered"])
        print(f"\n{'row':<32} {'files/s (rounds)':<28} {'median':>7} {'x tmpfs':>7} {'ioctls/epoch':>12} "
              f"{'daemon CPU ms/epoch':>19}")
        for row in ROWS:
            med = statistics.median(results[row])
            ioc = "-" if row.startswith("tmpfs") else f"{statistics.median(ioctls[row]):.0f}"
            daemon = "-" if row.startswith("tmpfs") else f"{1000 * statistics.median(cpu[row]):.0f}"
            print(f"{row:<32} {' / '.join(f'{v:.0f}' for v in results[row]):<28} {med:>7.0f} "
                  f"{med / tmpfs:>7.2f} {ioc:>12} {daemon:>19}")
        print("\nrequests to the daemon per epoch: " + "; ".join(
            f"{row}: {({k: round(v / PASSES / a.rounds) for k, v in all_requests[row].items()})}"
            for row in ROWS if not row.startswith("tmpfs")))
    finally:
        if mounted:
            subprocess.run([a.epochfs, "umount", mnt], capture_output=True)
            unmount(mnt)
        subprocess.run(["umount", tmp])
        shutil.rmtree(w, ignore_errors=True)
    return 0


if __name__ == "__main__":
    if os.geteuid() != 0:
        sys.exit("isatty_ab.py: run as root")
    sys.exit(main())
