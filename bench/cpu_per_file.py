#!/usr/bin/python3
"""cpu_per_file: the epochfs daemon's CPU per file read, for one or two binaries side by side.

The daemon's CPU (utime + stime of its process, from /proc) over one measured epoch,
divided by the files read, with ``--readers`` buffered Python readers (``open(p, "rb")``
and ``read()``, every file checked against its CRC-32), on ``--files`` files of ~110 KB
(log-normal) on the local disk. Three rows:

* ``warm``: everything in RAM (``--ram`` holds the data set); the third epoch of a mount;
* ``restart``: one epoch fills the SSD tier, the daemon unmounts, caches are dropped,
  the same cache dir is mounted again: its first epoch;
* ``cgroup``: daemon and readers inside a cgroup-v1 memory group limited to
  ``--mem-fraction`` (0.4) of the data set, ``--ram`` half of that limit: the third epoch.

With ``--baseline BINARY`` each round runs the baseline right after the binary under test
on every row, so that drift on a shared machine hits both alike; the table gives the
median over ``--rounds`` of CPU per file and files/s, and the ratio new/base.

    /usr/bin/python3 bench/cpu_per_file.py --epochfs build/cli/epochfs --baseline /tmp/old
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
import zlib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CGROUP = "/sys/fs/cgroup/memory/epochfs-cpu-per-file"
ROWS = ("warm", "restart", "cgroup")


def drop_caches() -> None:
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def make_dataset(root: str, files: int, seed: int) -> tuple[list[str], dict[str, int], int]:
    rng = random.Random(seed)
    paths, crcs, total = [], {}, 0
    for i in range(files):
        rel = f"c{i % 100:03d}/s{i:06d}.jpg"
        p = os.path.join(root, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        data = rng.randbytes(max(1024, int(rng.lognormvariate(11.55, 0.5))))
        with open(p, "wb") as f:
            f.write(data)
        paths.append(rel)
        crcs[rel] = zlib.crc32(data)
        total += len(data)
    return paths, crcs, total


def join_cgroup(pid: int) -> None:
    with open(os.path.join(CGROUP, "cgroup.procs"), "w") as f:
        f.write(str(pid))


def read_epoch(mnt: str, paths: list[str], crcs: dict[str, int], readers: int, epoch_seed: int,
               in_cgroup: bool) -> float:
    """One shuffled epoch by `readers` forked processes; returns its seconds."""
    order = list(paths)
    random.Random(epoch_seed).shuffle(order)
    start = time.monotonic()
    children = []
    for rank in range(readers):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                if in_cgroup:
                    join_cgroup(os.getpid())
                for rel in order[rank::readers]:
                    with open(os.path.join(mnt, rel), "rb") as f:
                        data = f.read()
                    if zlib.crc32(data) != crcs[rel]:
                        print(f"FAILED: wrong bytes in {rel}", file=sys.stderr)
                        code = 1
                        break
            except BaseException as e:  # noqa: BLE001 - a child reports and exits
                print(f"FAILED: {e}", file=sys.stderr)
                code = 1
            os._exit(code)
        children.append(pid)
    failed = False
    for pid in children:
        _, status = os.waitpid(pid, 0)
        failed |= os.waitstatus_to_exitcode(status) != 0
    if failed:
        raise SystemExit(1)
    return time.monotonic() - start


def daemon_pid(binary: str, mnt: str) -> int:
    out = subprocess.run([binary, "status", mnt, "--json"], check=True, capture_output=True,
                         text=True).stdout
    return int(json.loads(out)["pid"])


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def mount(binary: str, src: str, mnt: str, cache: str, ram: str, extra: list[str],
          in_cgroup: bool) -> int:
    cmd = [binary, "mount", src, mnt, "--cache-dir", cache, "--ram", ram, *extra]
    pre = (lambda: join_cgroup(os.getpid())) if in_cgroup else None
    subprocess.run(cmd, check=True, preexec_fn=pre)
    return daemon_pid(binary, mnt)


def umount(binary: str, mnt: str) -> None:
    subprocess.run([binary, "umount", mnt], check=True)


def measured_epoch(binary, mnt, paths, crcs, args, epoch_seed, in_cgroup):
    pid = daemon_pid(binary, mnt)
    cpu0 = cpu_seconds(pid)
    secs = read_epoch(mnt, paths, crcs, args.readers, epoch_seed, in_cgroup)
    cpu = cpu_seconds(pid) - cpu0
    return {"us_per_file": cpu * 1e6 / len(paths), "files_per_s": len(paths) / secs,
            "daemon_cpu_s": cpu, "seconds": secs}


def run_row(row: str, binary: str, src: str, mnt: str, cache: str, paths, crcs, data_bytes,
            args, round_no: int) -> dict:
    shutil.rmtree(cache, ignore_errors=True)
    seed = 1000 * round_no
    if row == "warm":
        mount(binary, src, mnt, cache, f"{2 * data_bytes}", args.epochfs_arg, False)
        for e in range(2):
            read_epoch(mnt, paths, crcs, args.readers, seed + e, False)
        result = measured_epoch(binary, mnt, paths, crcs, args, seed + 2, False)
        umount(binary, mnt)
        return result
    if row == "restart":
        mount(binary, src, mnt, cache, f"{2 * data_bytes}", args.epochfs_arg, False)
        read_epoch(mnt, paths, crcs, args.readers, seed, False)
        umount(binary, mnt)
        drop_caches()
        mount(binary, src, mnt, cache, f"{2 * data_bytes}", args.epochfs_arg, False)
        result = measured_epoch(binary, mnt, paths, crcs, args, seed + 1, False)
        umount(binary, mnt)
        return result
    limit = int(data_bytes * args.mem_fraction)
    os.makedirs(CGROUP, exist_ok=True)
    with open(os.path.join(CGROUP, "memory.limit_in_bytes"), "w") as f:
        f.write(str(limit))
    drop_caches()
    mount(binary, src, mnt, cache, str(limit // 2), args.epochfs_arg, True)
    for e in range(2):
        read_epoch(mnt, paths, crcs, args.readers, seed + e, True)
    result = measured_epoch(binary, mnt, paths, crcs, args, seed + 2, True)
    umount(binary, mnt)
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--epochfs", default=os.path.join(REPO, "build", "cli", "epochfs"))
    p.add_argument("--baseline", default=None, help="a second binary, run side by side")
    p.add_argument("--files", type=int, default=6000)
    p.add_argument("--readers", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--rows", nargs="+", choices=ROWS, default=list(ROWS))
    p.add_argument("--mem-fraction", type=float, default=0.4)
    p.add_argument("--epochfs-arg", action="append", default=[], metavar="ARG")
    p.add_argument("--workdir", default="/var/tmp/epochfs-cpu-per-file")
    p.add_argument("--out", default=os.path.join(REPO, "docs", "bench", "cpu_per_file.json"))
    args = p.parse_args()

    if "cgroup" in args.rows and not os.path.isdir("/sys/fs/cgroup/memory"):
        print("no cgroup-v1 memory controller here: the cgroup row is left out", flush=True)
        args.rows = [r for r in args.rows if r != "cgroup"]
    shutil.rmtree(args.workdir, ignore_errors=True)
    src, mnt, cache = (os.path.join(args.workdir, d) for d in ("src", "mnt", "cache"))
    os.makedirs(mnt)
    paths, crcs, data_bytes = make_dataset(src, args.files, 1234)
    print(f"{args.files} files, {data_bytes / 1e6:.0f} MB, {args.readers} buffered readers, "
          f"{os.cpu_count()} cores", flush=True)
    binaries = [("new", os.path.abspath(args.epochfs))]
    if args.baseline:
        binaries.append(("base", os.path.abspath(args.baseline)))
    results = {row: {label: [] for label, _ in binaries} for row in args.rows}
    try:
        for r in range(args.rounds):
            for row in args.rows:
                for label, binary in binaries:
                    res = run_row(row, binary, src, mnt, cache, paths, crcs, data_bytes, args, r)
                    results[row][label].append(res)
                    print(f"round {r + 1} {row:<8} {label:<5} {res['us_per_file']:7.1f} us/file "
                          f"{res['files_per_s']:8.0f} files/s", flush=True)
    finally:
        for _, binary in binaries:
            subprocess.run([binary, "umount", "--lazy", mnt], capture_output=True)
        if os.path.isdir(CGROUP):
            try:
                os.rmdir(CGROUP)
            except OSError:
                pass
    print(f"\n{'row':<8} " + " ".join(f"{label + ' us/file':>14} {label + ' files/s':>14}"
                                      for label, _ in binaries)
          + ("   new/base CPU  new/base files/s" if args.baseline else ""))
    summary = {}
    for row in args.rows:
        med = {label: {k: statistics.median(x[k] for x in results[row][label])
                       for k in ("us_per_file", "files_per_s")} for label, _ in binaries}
        summary[row] = med
        line = f"{row:<8} " + " ".join(f"{med[label]['us_per_file']:14.1f} {med[label]['files_per_s']:14.0f}"
                                       for label, _ in binaries)
        if args.baseline:
            line += (f"   {med['new']['us_per_file'] / med['base']['us_per_file']:12.2f}"
                     f"  {med['new']['files_per_s'] / med['base']['files_per_s']:15.2f}")
        print(line)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"params": vars(args), "data_bytes": data_bytes, "rounds": results,
                   "median": summary,
                   "commit": subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                                            capture_output=True, text=True).stdout.strip()},
                  f, indent=1)
    print(f"wrote {args.out}")
    shutil.rmtree(args.workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
