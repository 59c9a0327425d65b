#!/usr/bin/env python3
"""drop_cost: what one page drop of the daemon costs, step by step.

The daemon drops a read file's pages from the kernel's page cache ("notify" mode) by
opening the file through the mount, taking a read lease (the write fence,
fs/write_fence.h), ``posix_fadvise(DONTNEED)`` and closing it. This times those steps
per file, for files of ~110 KB whose pages the kernel holds, through an epochfs mount
and on the source folder itself (an ext4 or whatever /var/tmp is), so that the kernel's
own cost of freeing pages is seen apart from the fence's.

    /usr/bin/python3 bench/drop_cost.py --epochfs build/cli/epochfs [--files 500]

Times come from ``time.perf_counter_ns`` around each call (Python's own overhead,
about a microsecond a call, is in them). Run as root.
"""
from __future__ import annotations

import argparse
import fcntl
import json
import os
import random
import shutil
import statistics
import subprocess
import tempfile
import time

STEPS = ("read whole", "open", "lease", "fadvise DONTNEED", "unlease + close")


def time_drops(folder: str, names: list[str], rounds: int) -> tuple[dict[str, float], int]:
    """Median over rounds of the mean per-file time of each step, in microseconds, and
    how many lease requests the kernel refused (their time is still in "lease")."""
    per_round: dict[str, list[float]] = {s: [] for s in STEPS}
    refused = 0
    for _ in range(rounds):
        total = dict.fromkeys(STEPS, 0)
        for name in names:
            path = os.path.join(folder, name)
            t0 = time.perf_counter_ns()
            with open(path, "rb", buffering=0) as f:
                while f.read(1 << 17):
                    pass
            t1 = time.perf_counter_ns()
            fd = os.open(path, os.O_RDONLY)
            try:
                t2 = time.perf_counter_ns()
                leased = True
                try:
                    fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)
                except OSError:
                    leased = False
                    refused += 1
                t3 = time.perf_counter_ns()
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                t4 = time.perf_counter_ns()
                if leased:
                    fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
            finally:
                os.close(fd)
            t5 = time.perf_counter_ns()
            for step, ns in zip(STEPS, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)):
                total[step] += ns
        for step in STEPS:
            per_round[step].append(total[step] / len(names) / 1000)
    return {s: statistics.median(v) for s, v in per_round.items()}, refused


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochfs", required=True)
    p.add_argument("--files", type=int, default=500)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--workdir", default="/var/tmp")
    p.add_argument("--out", default="docs/bench/drop_cost.json")
    a = p.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("drop_cost: needs root (mounts, leases on files it does not own)")
    out = os.path.abspath(a.out)
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    binary = os.path.abspath(a.epochfs)
    work = tempfile.mkdtemp(prefix="epochfs-drop-cost-", dir=a.workdir)
    src, mnt, cache = (os.path.join(work, d) for d in ("src", "mnt", "cache"))
    results, refused = {}, {}
    mounted = False
    try:
        for d in (src, mnt):
            os.makedirs(d)
        rng = random.Random(1)
        names = [f"f{i:05d}.bin" for i in range(a.files)]
        for name in names:
            with open(os.path.join(src, name), "wb") as f:
                f.write(rng.randbytes(int(rng.lognormvariate(11.6, 0.4))))
        os.sync()  # clean pages: a drop of dirty ones would start their writeback
        # The source first, with no daemon watching it.
        results["the source folder"], refused["the source folder"] = time_drops(src, names,
                                                                                a.rounds)
        subprocess.run([binary, "mount", src, mnt, "--cache-dir", cache, "--ram", "1G",
                        "--consistency", "notify"], check=True, timeout=60)
        mounted = True
        results["through epochfs"], refused["through epochfs"] = time_drops(mnt, names, a.rounds)
    finally:
        if mounted:
            done = subprocess.run([binary, "umount", mnt], check=False, timeout=60)
            if done.returncode != 0:
                subprocess.run([binary, "umount", "--abort", mnt], check=False, timeout=60)
        if not os.path.ismount(mnt):
            shutil.rmtree(work, ignore_errors=True)
    print(f"{a.files} files of ~110 KB, medians of {a.rounds} rounds, us per file")
    print(f"{'':20}" + "".join(f"{s:>18}" for s in STEPS) + f"{'leases refused':>16}")
    for where, steps in results.items():
        print(f"{where:20}" + "".join(f"{steps[s]:18.1f}" for s in STEPS)
              + f"{refused[where]:16d}")
    commit = subprocess.run(["git", "-C", repo, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True, check=False).stdout.strip()
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"tool": "bench/drop_cost.py", "commit": commit, "files": a.files,
                   "rounds": a.rounds, "us_per_file": results, "leases_refused": refused},
                  f, indent=1)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
