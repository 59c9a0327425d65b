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

Each round also reads the data set without epochfs, for the ratios a user compares: the
local disk read cold (page cache dropped: what a plain copy on the local disk gives) for
the restart row, and a tmpfs copy for the warm row. The restart row gives a second CPU
figure, from the daemon's start to the epoch's end: a daemon that streams its SSD tier from
mount on does part of the epoch's work before the first open, which the epoch alone does
not count. Where the CPU goes, by thread name (``/proc/PID/task``), is printed for the
last round of each row and kept in the JSON.

    /usr/bin/python3 bench/cpu_per_file.py --epochfs build/cli/epochfs --baseline /tmp/old
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
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
               in_cgroup: bool, sampler: ThreadSampler | None = None) -> float:
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
    if sampler:
        sampler.start()
    failed = False
    for pid in children:
        _, status = os.waitpid(pid, 0)
        failed |= os.waitstatus_to_exitcode(status) != 0
    elapsed = time.monotonic() - start
    if sampler:
        sampler.stop()
    if failed:
        raise SystemExit(1)
    return elapsed


#: status counters printed for the last round of each row: where the files came from and
#: how the SSD tier was read (a key a binary lacks is left out). Gauges among them show
#: their value at the epoch's end, the rest what the epoch added.
STATUS_KEYS = ("requests.lookup", "requests.open", "requests.getattr", "requests.ioctl",
               "requests.read", "access_opens", "access_pauses", "access_paused", "ram_hits", "ssd_hits", "ssd_read_around",
               "ssd_streamed", "ssd_stream_ios", "ssd_stream_bytes", "ssd_hit_bytes",
               "prefetch_overtaken", "pushed_files", "pushed_from_stream", "pushed_at_open",
               "misses", "source_reads")


GAUGES = frozenset({"access_paused"})


def daemon_status(binary: str, mnt: str) -> dict:
    out = subprocess.run([binary, "status", mnt, "--json"], check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out)


def daemon_pid(binary: str, mnt: str) -> int:
    return int(daemon_status(binary, mnt)["pid"])


def status_counters(status: dict) -> dict[str, float]:
    """The status's numbers, nested groups flattened to "group.key"."""
    flat: dict[str, float] = {}
    for key, value in status.items():
        if isinstance(value, dict):
            flat.update({f"{key}.{k}": v for k, v in value.items() if isinstance(v, (int, float))})
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            flat[key] = value
    return flat


def read_stat(path: str) -> tuple[str, float]:
    """A /proc stat file's command name and its utime + stime in seconds."""
    with open(path) as f:
        head, tail = f.read().rsplit(")", 1)
    fields = tail.split()
    return head.split("(", 1)[1], (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    return read_stat(f"/proc/{pid}/stat")[1]


def minor_faults(pid: int) -> int:
    """The process's minor page faults so far: a first touch of memory it had not used
    (or had given back), which costs this VM a hypervisor exit per page."""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])


class ThreadSampler:
    """The daemon's CPU per thread name over an epoch, from /proc/PID/task. Threads come
    and go (libfuse retires idle workers), so each is looked at every 50 ms while the
    readers run and counted from its first look (0 if born after the start) to its last."""

    def __init__(self, pid: int):
        self.pid = pid
        self.first: dict[str, float] = {}
        self.last: dict[str, tuple[str, float]] = {}
        self.sample(at_start=True)
        self._stop = threading.Event()
        # A thread, so that the epoch's end is seen when the readers exit, not at the
        # next look.
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.sample()

    def sample(self, at_start: bool = False) -> None:
        task_dir = f"/proc/{self.pid}/task"
        try:
            tids = os.listdir(task_dir)
        except OSError:  # the daemon is gone: its threads were counted up to the last look
            return
        for tid in tids:
            try:
                comm, cpu = read_stat(f"{task_dir}/{tid}/stat")
                name = re.sub(r"-\d+$", "", comm)
            except (OSError, ValueError, IndexError):  # the thread exited while we looked
                continue
            if at_start:
                self.first[tid] = cpu
            self.last[tid] = (name, cpu)

    def shares(self) -> dict[str, float]:
        """Each thread name's share of the CPU the sampled threads used."""
        per_name: dict[str, float] = {}
        for tid, (name, cpu) in self.last.items():
            per_name[name] = per_name.get(name, 0.0) + cpu - self.first.get(tid, 0.0)
        total = sum(per_name.values())
        if total <= 0:
            return {}
        return {n: c / total for n, c in sorted(per_name.items(), key=lambda kv: -kv[1]) if c > 0}


def mount(binary: str, src: str, mnt: str, cache: str, ram: str, extra: list[str],
          in_cgroup: bool) -> int:
    cmd = [binary, "mount", src, mnt, "--cache-dir", cache, "--ram", ram, *extra]
    pre = (lambda: join_cgroup(os.getpid())) if in_cgroup else None
    subprocess.run(cmd, check=True, preexec_fn=pre)
    return daemon_pid(binary, mnt)


URING_PARAMETER = "/sys/module/fuse/parameters/enable_uring"


def set_kernel_fuse_uring(value: str | None) -> str | None:
    """Sets the fuse module's enable_uring ("Y"/"N"); returns what it was (None: absent)."""
    try:
        with open(URING_PARAMETER) as f:
            before = f.read().strip()
    except OSError:
        return None
    if value is not None:
        with open(URING_PARAMETER, "w") as f:
            f.write(value + "\n")
    return before


def umount(binary: str, mnt: str) -> None:
    subprocess.run([binary, "umount", mnt], check=True)


def start_perf(out_dir: str, pid: int, binary: str, event: str | None) -> subprocess.Popen:
    """`perf record -g` of the daemon over the measured epoch, into out_dir (one file per
    epoch, named after the binary and the time), for `perf report -i`."""
    os.makedirs(out_dir, exist_ok=True)
    name = f"{os.path.basename(binary)}-{time.strftime('%H%M%S')}.perf.data"
    events = ["-e", event] if event else []
    proc = subprocess.Popen(["perf", "record", *events, "-g", "-q", "-p", str(pid), "-o", os.path.join(out_dir, name)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.3)  # perf attaches to every thread before the readers start
    return proc


def stop_perf(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)


def measured_epoch(binary, mnt, paths, crcs, args, epoch_seed, in_cgroup, since_mount=False):
    """One epoch with the daemon's CPU, by thread, and its status counters; since_mount:
    also the CPU from the daemon's start (the first epoch of a mount)."""
    before = status_counters(daemon_status(binary, mnt))
    pid = int(before["pid"])
    cpu0 = cpu_seconds(pid)
    faults0 = minor_faults(pid)
    sampler = ThreadSampler(pid)
    profile = start_perf(args.perf, pid, binary, args.perf_event) if args.perf else None
    secs = read_epoch(mnt, paths, crcs, args.readers, epoch_seed, in_cgroup, sampler)
    cpu_total = cpu_seconds(pid)
    faults = minor_faults(pid) - faults0
    if profile is not None:
        stop_perf(profile)
    cpu = cpu_total - cpu0
    after = status_counters(daemon_status(binary, mnt))
    since_start = {"us_per_file_since_start": cpu_total * 1e6 / len(paths)} if since_mount else {}
    return {"us_per_file": cpu * 1e6 / len(paths), "files_per_s": len(paths) / secs,
            "faults_per_file": faults / len(paths), "daemon_cpu_s": cpu, "seconds": secs, **since_start,
            "threads": sampler.shares(),
            # What the epoch added to each number of the status (a gauge's change), and
            # the status at its end.
            "deltas": {k: after[k] - before.get(k, 0) for k in after if k != "pid"},
            "after": after}


def reference_epoch(root: str, paths, crcs, args, epoch_seed: int, cold: bool) -> float:
    """files/s of one epoch read straight from `root` (no epochfs)."""
    if cold:
        drop_caches()
    return len(paths) / read_epoch(root, paths, crcs, args.readers, epoch_seed, False)


def run_row(row: str, binary: str, extra: list[str], src: str, mnt: str, cache: str, paths,
            crcs, data_bytes, args, round_no: int) -> dict:
    shutil.rmtree(cache, ignore_errors=True)
    seed = 1000 * round_no
    if row == "warm":
        mount(binary, src, mnt, cache, f"{2 * data_bytes}", extra, False)
        for e in range(2):
            read_epoch(mnt, paths, crcs, args.readers, seed + e, False)
        result = measured_epoch(binary, mnt, paths, crcs, args, seed + 2, False)
        umount(binary, mnt)
        return result
    if row == "restart":
        mount(binary, src, mnt, cache, f"{2 * data_bytes}", extra, False)
        read_epoch(mnt, paths, crcs, args.readers, seed, False)
        umount(binary, mnt)
        drop_caches()
        mount(binary, src, mnt, cache, f"{2 * data_bytes}", extra, False)
        result = measured_epoch(binary, mnt, paths, crcs, args, seed + 1, False, since_mount=True)
        umount(binary, mnt)
        return result
    limit = int(data_bytes * args.mem_fraction)
    os.makedirs(CGROUP, exist_ok=True)
    with open(os.path.join(CGROUP, "memory.limit_in_bytes"), "w") as f:
        f.write(str(limit))
    drop_caches()
    mount(binary, src, mnt, cache, str(limit // 2), extra, True)
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
    p.add_argument("--baseline-arg", action="append", default=[], metavar="ARG",
                   help="the baseline's mount flags, instead of --epochfs-arg's (an older "
                        "binary may not know a new flag)")
    p.add_argument("--kernel-fuse-uring", choices=("on", "off"), default=None,
                   help="set the fuse module's enable_uring for the run (put back after): "
                        "FUSE over io_uring for the mounts that ask for it")
    p.add_argument("--perf", default=None, metavar="DIR",
                   help="record the daemon with `perf record -g` over each measured epoch, into DIR")
    p.add_argument("--perf-event", default=None, metavar="EVENT",
                   help="what --perf samples: e.g. page-faults, to see where fresh memory is touched")
    p.add_argument("--workdir", default="/var/tmp/epochfs-cpu-per-file")
    p.add_argument("--out", default=os.path.join(REPO, "docs", "bench", "cpu_per_file.json"))
    args = p.parse_args()

    if "cgroup" in args.rows and not os.path.isdir("/sys/fs/cgroup/memory"):
        print("no cgroup-v1 memory controller here: the cgroup row is left out", flush=True)
        args.rows = [r for r in args.rows if r != "cgroup"]
    uring_before = set_kernel_fuse_uring(
        {"on": "Y", "off": "N", None: None}[args.kernel_fuse_uring])
    if args.kernel_fuse_uring and uring_before is None:
        sys.exit("this kernel has no FUSE over io_uring (no " + URING_PARAMETER + ")")
    uring_now = set_kernel_fuse_uring(None)
    shutil.rmtree(args.workdir, ignore_errors=True)
    src, mnt, cache = (os.path.join(args.workdir, d) for d in ("src", "mnt", "cache"))
    os.makedirs(mnt)
    paths, crcs, data_bytes = make_dataset(src, args.files, 1234)
    print(f"{args.files} files, {data_bytes / 1e6:.0f} MB, {args.readers} buffered readers, "
          f"{os.cpu_count()} cores, fuse enable_uring {uring_now}", flush=True)
    binaries = [("new", os.path.abspath(args.epochfs))]
    if args.baseline:
        binaries.append(("base", os.path.abspath(args.baseline)))
    results = {row: {label: [] for label, _ in binaries} for row in args.rows}
    # What a user compares against: the local disk read cold (a plain copy there) for the
    # restart row, a tmpfs copy for the warm row.
    references = {"local disk, cold": [], "tmpfs": []}
    tmpfs = os.path.join("/dev/shm", "epochfs-cpu-per-file")
    with_tmpfs = shutil.disk_usage("/dev/shm").free > 2 * data_bytes
    if not with_tmpfs:
        print("/dev/shm cannot hold two copies of the data set: no tmpfs reference", flush=True)
    try:
        for r in range(args.rounds):
            references["local disk, cold"].append(
                reference_epoch(src, paths, crcs, args, 1000 * r + 1, cold=True))
            line = f"round {r + 1} local disk cold {references['local disk, cold'][-1]:8.0f} files/s"
            if with_tmpfs:
                # Copied for each round and removed before epochfs runs: its memory
                # would otherwise sit beside every row.
                shutil.copytree(src, tmpfs)
                reference_epoch(tmpfs, paths, crcs, args, 1000 * r + 1, cold=False)
                references["tmpfs"].append(
                    reference_epoch(tmpfs, paths, crcs, args, 1000 * r + 2, cold=False))
                shutil.rmtree(tmpfs)
                line += f", tmpfs {references['tmpfs'][-1]:8.0f} files/s"
            print(line, flush=True)
            for row in args.rows:
                # The binaries swap places every round: the one that runs second in a
                # row meets the first one's leftovers (its cache's writeback, a colder
                # page cache), so a fixed order would favour one of them.
                for label, binary in (binaries if r % 2 == 0 else binaries[::-1]):
                    extra = (args.baseline_arg if label == "base" and args.baseline_arg
                             else args.epochfs_arg)
                    res = run_row(row, binary, extra, src, mnt, cache, paths, crcs, data_bytes,
                                  args, r)
                    results[row][label].append(res)
                    print(f"round {r + 1} {row:<8} {label:<5} {res['us_per_file']:7.1f} us/file "
                          f"{res['files_per_s']:8.0f} files/s "
                          f"{res['faults_per_file']:6.1f} faults/file", flush=True)
    finally:
        if args.kernel_fuse_uring and uring_before is not None:
            set_kernel_fuse_uring(uring_before)
        shutil.rmtree(tmpfs, ignore_errors=True)
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
    ref = {name: statistics.median(v) for name, v in references.items() if v}
    print("\nwithout epochfs: " + ", ".join(f"{name} {v:.0f} files/s" for name, v in ref.items()))
    compare = {"restart": "local disk, cold", "warm": "tmpfs"}
    for row in args.rows:
        if compare.get(row) in ref:
            print(f"{row:<8} / {compare[row]:<17}" + "".join(
                f"  {label} {summary[row][label]['files_per_s'] / ref[compare[row]]:.2f}x"
                for label, _ in binaries))
    if "restart" in args.rows:
        print("restart, CPU from the daemon's start to the epoch's end (us/file):" + "".join(
            f"  {label} {statistics.median(x['us_per_file_since_start'] for x in results['restart'][label]):.1f}"
            for label, _ in binaries))
    print("\nwhere the daemon's CPU went in the last round (share by thread name):")
    for row in args.rows:
        for label, _ in binaries:
            shares = results[row][label][-1]["threads"]
            print(f"  {row:<8} {label:<5} " + ", ".join(
                f"{name} {share:.0%}" for name, share in list(shares.items())[:6]))
    print("\nstatus counters over the measured epoch, last round:")
    for row in args.rows:
        for label, _ in binaries:
            last = results[row][label][-1]
            shown = {k: last["after"][k] if k in GAUGES else last["deltas"][k]
                     for k in STATUS_KEYS if k in last["deltas"]}
            print(f"  {row:<8} {label:<5} " + ", ".join(f"{k} {v:.0f}" for k, v in shown.items()))
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"params": vars(args), "fuse_enable_uring": uring_now, "data_bytes": data_bytes, "rounds": results,
                   "median": summary, "references_files_per_s": references,
                   "cores": os.cpu_count(),
                   "commit": subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                                            capture_output=True, text=True).stdout.strip()},
                  f, indent=1)
    print(f"wrote {args.out}")
    shutil.rmtree(args.workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
