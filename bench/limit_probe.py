#!/usr/bin/python3
"""Where the time goes in two of issue 16's missed rows, measured side by side.

    /usr/bin/python3 bench/limit_probe.py steady [--plan] [--perf]   # ~1 minute
    /usr/bin/python3 bench/limit_probe.py restart [--plan]           # ~2 minutes

``steady``: the data set 2.5x a memory cgroup's limit (bigdata_bench's setting, random
bytes instead of JPEGs, on the local disk): a plain copy, then epochfs (``--ram`` half
the limit), each for a few shuffled epochs with 4 raw readers in the group; ``--plan``
publishes each epochfs epoch's order first. ``--perf`` records one steady epoch with
``perf record -a`` and splits the machine's CPU by thread name (the daemon names its
threads: docs/operations.md, "Where the daemon's CPU goes"), with each thread's top
functions. ``EPOCHFS_PROBE_PERF_DATA=FILE`` keeps the recording, and
``EPOCHFS_PROBE_PERF_CALLGRAPH=1`` records call graphs too (``perf report -i FILE``; ``=dwarf`` unwinds the daemon's own
frames as well).

``restart``: the same data set on an ext4 image throttled to 300 read IOPS (bios, as the
cgroup-v1 throttle counts them), cached by epochfs, then the page cache dropped and
epochfs mounted anew: one epoch right at mount, with ``--plan`` published first (the
write timed, and its throttled reads counted); the copy read cold beside it. Rows also
run with ``EPOCHFS_PLAN_RESOLVE_BUDGET_MS`` very large, i.e. every plan entry checked
before the write returns, as before the checking budget.

Writes docs/bench/probe/limit_probe_<mode>.json. Run as root.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pickle
import re
import statistics
import subprocess
import sys
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH)
sys.path.insert(0, BENCH)
from benchenv import drop_caches, machine_busy_s, proc_cpu_seconds, read_file, run, stat_every_file, unmount, write_file  # noqa: E402
from dataset import imagefolder_plan, materialize  # noqa: E402
from readers import epoch_order, run_epoch  # noqa: E402

MEMORY_ROOT = "/sys/fs/cgroup/memory"
BLKIO_ROOT = "/sys/fs/cgroup/blkio"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def counter_deltas(before: dict, after: dict, prefix: str = "") -> dict:
    """Every counter of the mount's stats that moved during the epoch, by dotted name."""
    out: dict = {}
    for key, value in after.items():
        name = prefix + key
        if isinstance(value, dict) and isinstance(before.get(key), dict):
            out.update(counter_deltas(before[key], value, name + "."))
        elif isinstance(value, int) and not isinstance(value, bool) and isinstance(before.get(key), int):
            if value != before[key]:
                out[name] = value - before[key]
    return out


class Probe:
    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        self.work = a.workdir
        os.makedirs(self.work, exist_ok=True)
        self.memcg = os.path.join(MEMORY_ROOT, "epochfs-limit-probe")
        self.blkio = os.path.join(BLKIO_ROOT, "epochfs-limit-probe")
        self.loop_dev = ""
        self.src = os.path.join(self.work, "src")
        self.copy = os.path.join(self.work, "copy")
        self.mnt = os.path.join(self.work, "mnt")
        self.cache = os.path.join(self.work, "cache")
        self.daemon_pid = 0

    # -- setup --------------------------------------------------------------------------
    def setup(self, throttled: bool) -> None:
        plan = imagefolder_plan(self.a.files, 100, 1234)
        if throttled:
            image = os.path.join(self.work, "source.img")
            with open(image, "wb") as f:
                f.truncate(int(sum(pf.size for pf in plan) * 1.3) + (256 << 20))
            run(["mkfs.ext4", "-q", "-F", "-b", "4096", "-I", "256", "-m", "0", "-N",
                 str(len(plan) + 2048), "-E", "lazy_itable_init=0,lazy_journal_init=0", image],
                timeout=300)
            self.loop_dev = run(["losetup", "--find", "--show", "--direct-io=on", image]).stdout.strip()
            os.makedirs(self.src, exist_ok=True)
            run(["mount", "-o", "noatime", self.loop_dev, self.src])
        log(f"writing {len(plan)} files to {self.src} and {self.copy}")
        self.manifest = materialize("probe", plan, 1234, [self.src, self.copy])
        os.sync()
        if throttled:
            run(["mount", "-o", "remount,ro", self.src])
            os.makedirs(self.blkio, exist_ok=True)
            write_file(os.path.join(self.blkio, "cgroup.procs"), f"{os.getpid()}\n")
        os.makedirs(self.memcg, exist_ok=True)
        self.data = self.manifest.total_bytes
        self.limit = int(0.4 * self.data)
        write_file(os.path.join(self.memcg, "memory.limit_in_bytes"), f"{self.limit}\n")
        self.ram = int(self.a.ram_fraction * self.limit)

    def majmin(self) -> str:
        return read_file(f"/sys/block/{os.path.basename(self.loop_dev)}/dev").strip()

    def throttle(self, iops: int) -> None:
        write_file(os.path.join(self.blkio, "blkio.throttle.read_iops_device"), f"{self.majmin()} {iops}\n")

    def bios(self) -> int:
        if not self.loop_dev:
            return 0
        for line in read_file(os.path.join(self.blkio, "blkio.throttle.io_serviced")).splitlines():
            f = line.split()
            if len(f) == 3 and f[0] == self.majmin() and f[1] == "Read":
                return int(f[2])
        return 0

    def join(self) -> None:
        write_file(os.path.join(self.memcg, "cgroup.procs"), f"{os.getpid()}\n")

    def cleanup(self) -> None:
        if os.path.ismount(self.mnt):
            self.umount()
        if self.loop_dev:
            unmount(self.src)
            run(["losetup", "-d", self.loop_dev], check=False)
        for cg in (self.blkio, self.memcg):
            if os.path.isdir(cg):
                root = os.path.dirname(cg)
                for pid in read_file(os.path.join(cg, "cgroup.procs")).split():
                    try:
                        write_file(os.path.join(root, "cgroup.procs"), f"{pid}\n")
                    except OSError:
                        pass
                try:
                    os.rmdir(cg)
                except OSError:
                    pass
        run(["rm", "-rf", self.work], check=False)

    # -- epochfs --------------------------------------------------------------------------
    def mount(self, env: dict | None = None) -> None:
        os.makedirs(self.mnt, exist_ok=True)
        pid = os.fork()
        if pid == 0:  # born inside the memory group, as bigdata_bench's daemon
            self.join()
            os.execve(self.a.epochfs, [self.a.epochfs, "mount", self.src, self.mnt, "--cache-dir", self.cache,
                                       "--ram", str(self.ram), "--disk", "4G", "--log-level", "warn"]
                      + self.a.epochfs_arg,
                      {**os.environ, **(env or {})})
        _, status = os.waitpid(pid, 0)
        if status != 0:
            raise RuntimeError(f"epochfs mount failed ({status}); see {self.cache}/epochfs.log")
        self.daemon_pid = json.load(open(os.path.join(self.mnt, ".epochfs", "stats")))["pid"]

    def umount(self) -> None:
        run([self.a.epochfs, "umount", self.mnt], check=False, timeout=300)

    def publish(self, epoch: int) -> tuple[float, int]:
        order = epoch_order(len(self.manifest), 1234, epoch)
        text = ("epochfs-plan 1\n" + "".join(self.manifest.paths[i] + "\n" for i in order.tolist()) + "\n").encode()
        b0, t0 = self.bios(), time.monotonic()
        fd = os.open(os.path.join(self.mnt, ".epochfs", "plan"), os.O_WRONLY)
        try:
            for off in range(0, len(text), 65536):
                os.write(fd, text[off:off + 65536])
        finally:
            os.close(fd)
        return time.monotonic() - t0, self.bios() - b0

    def stats(self) -> dict:
        with open(os.path.join(self.mnt, ".epochfs", "stats")) as f:
            return json.load(f)

    def epoch(self, root: str, epoch: int) -> dict:
        b0 = self.bios()
        mounted = root == self.mnt
        s0 = self.stats() if mounted else {}
        busy0, d0 = machine_busy_s(), proc_cpu_seconds(self.daemon_pid) if mounted else 0.0
        r = run_epoch(root, self.manifest, readers=self.a.readers, seed=1234, epoch=epoch, child_setup=self.join)
        row = {"epoch": epoch, "files_per_s": round(r.files_per_s, 1), "seconds": round(r.seconds, 3),
               "p50_ms": round(r.p50_ms, 3), "mean_ms": round(r.mean_ms, 3),
               "throttled_bios": self.bios() - b0}
        # Where the machine's CPU went: all of it (/proc/stat), the daemon's share, and
        # what the rest (the readers, the kernel's threads) took. An epoch whose busy
        # time is about cores x seconds is CPU-bound.
        busy = machine_busy_s() - busy0
        row["cpu"] = {"machine_busy_s": round(busy, 3), "cores": os.cpu_count(),
                      "busy_fraction": round(busy / (r.seconds * (os.cpu_count() or 1)), 3)}
        if mounted:
            daemon = proc_cpu_seconds(self.daemon_pid) - d0
            row["cpu"].update(daemon_s=round(daemon, 3), rest_s=round(busy - daemon, 3))
        if mounted:  # what the daemon did for it, and its memory at the end (--ram's promise)
            s1 = self.stats()
            row.update({"pushed_files": s1["pushed_files"] - s0["pushed_files"],
                        "reads": s1["requests"]["read"] - s0["requests"]["read"],
                        "daemon_rss_bytes": s1["daemon_rss_bytes"],
                        "pushed_page_bytes": s1["kernel_page_bytes"],
                        "ram_tier_budget_bytes": s1.get("ram_tier_budget_bytes"),
                        "counters": counter_deltas(s0, s1)})
        return row

    def cpu_split(self, epoch: int) -> tuple[dict, dict]:
        """One epoch under `perf record -a`; the samples' shares by thread name."""
        data = os.environ.get("EPOCHFS_PROBE_PERF_DATA", os.path.join(self.work, "perf.data"))
        mode = os.environ.get("EPOCHFS_PROBE_PERF_CALLGRAPH", "")
        # "dwarf" unwinds the daemon's own frames too (it is built without frame pointers).
        callgraph = ["--call-graph", "dwarf,16384"] if mode == "dwarf" else ["-g"] if mode else []
        perf = subprocess.Popen(["perf", "record", "-a", "-F", "999", "-o", data] + callgraph,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        row = self.epoch(self.mnt, epoch)
        perf.send_signal(2)
        perf.wait()
        out = run(["perf", "report", "-i", data, "--no-children", "--sort", "comm", "--stdio", "-g", "none"],
                  timeout=300).stdout
        shares: dict[str, float] = {}
        for line in out.splitlines():
            m = re.match(r"\s+([\d.]+)%\s+(\S.*?)\s*$", line)
            if not m:
                continue
            name = re.sub(r"-\d+$", "-N", m.group(2))  # prefetch-N: the workers together
            name = {"swapper": "idle", "python3": "readers (python3)"}.get(name, name)
            shares[name] = round(shares.get(name, 0.0) + float(m.group(1)), 1)
        # What each thread spends it on: the top functions (kernel and user) per thread name.
        out = run(["perf", "report", "-i", data, "--no-children", "--sort", "comm,sym", "--stdio", "-g", "none"],
                  timeout=300).stdout
        symbols: dict[str, dict[str, float]] = {}
        for line in out.splitlines():
            m = re.match(r"\s+([\d.]+)%\s+(\S+)\s+\[[.k]\]\s+(.+?)\s*$", line)
            if not m:
                continue
            name = re.sub(r"-\d+$", "-N", m.group(2))
            name = {"swapper": "idle", "python3": "readers (python3)"}.get(name, name)
            per = symbols.setdefault(name, {})
            per[m.group(3)] = round(per.get(m.group(3), 0.0) + float(m.group(1)), 2)
        self.top_symbols = {name: dict(sorted(per.items(), key=lambda kv: -kv[1])[:15])
                            for name, per in symbols.items() if name != "idle"}
        return row, dict(sorted(shares.items(), key=lambda kv: -kv[1]))

    # -- modes ------------------------------------------------------------------------------
    def steady(self) -> dict:
        a = self.a
        doc: dict = {"copy": [], "epochfs": []}
        drop_caches()
        for e in range(1, a.epochs + 1):
            doc["copy"].append(self.epoch(self.copy, e))
            log(f"copy epoch {e}: {doc['copy'][-1]['files_per_s']:.0f} files/s")
        drop_caches()
        self.mount()
        try:
            for e in range(1, a.epochs + 1):
                if a.plan:
                    self.publish(e)
                if a.perf and e == a.epochs:
                    row, doc["cpu_split"] = self.cpu_split(e)
                    doc["top_functions_by_thread"] = self.top_symbols
                else:
                    row = self.epoch(self.mnt, e)
                doc["epochfs"].append(row)
                log(f"epochfs epoch {e}: {row['files_per_s']:.0f} files/s")
        finally:
            self.umount()
        steady = lambda rows: statistics.mean(r["files_per_s"] for r in rows[1:])  # noqa: E731
        if a.epochs > 1:
            doc["epochfs_x_copy"] = round(steady(doc["epochfs"]) / steady(doc["copy"]), 2)
        return doc

    def restart(self) -> dict:
        a = self.a
        doc: dict = {"rounds": []}
        self.throttle(0)  # filling the cache is not what is measured
        self.mount()
        try:
            self.epoch(self.mnt, 1)
        finally:
            self.umount()
        self.throttle(300)
        for rnd in range(a.rounds):
            # The least a restart that checks the source must read before serving each
            # file (benchenv.stat_every_file): the row's bound, measured beside it.
            drop_caches()
            b0 = self.bios()
            meta_s = stat_every_file([os.path.join(self.src, p) for p in self.manifest.paths])
            metadata = {"seconds": round(meta_s, 3), "files_per_s": round(len(self.manifest) / meta_s, 1),
                        "throttled_bios": self.bios() - b0}
            drop_caches()
            copy = self.epoch(self.copy, 2)
            metadata["bound_x_copy_cold"] = round(copy["seconds"] / meta_s, 2)
            log(f"round {rnd + 1}: the source's metadata cold takes {meta_s:.2f} s "
                f"({metadata['throttled_bios']} bios): a restart that checks it reaches at most "
                f"{metadata['bound_x_copy_cold']}x the copy read cold ({copy['seconds']:.2f} s)")
            for label, budget in (("checked before the write returns", "86400000"),
                                  ("checking budget (default)", "")):
                drop_caches()
                t0 = time.monotonic()
                self.mount({"EPOCHFS_PLAN_RESOLVE_BUDGET_MS": budget} if budget else None)
                try:
                    publish_s, publish_bios = self.publish(5) if a.plan else (0.0, 0)
                    row = self.epoch(self.mnt, 5)
                finally:
                    self.umount()
                total = publish_s + row["seconds"]
                entry = {"round": rnd + 1, "row": label if a.plan else "no plan", "publish_s": round(publish_s, 3),
                         "publish_bios": publish_bios, "epoch": row, "publish_and_epoch_s": round(total, 3),
                         "copy_cold": copy, "x_copy_cold": round(copy["seconds"] / total, 2),
                         "source_metadata_cold": metadata}
                doc["rounds"].append(entry)
                log(f"round {rnd + 1}, {entry['row']}: plan {publish_s:.2f} s ({publish_bios} bios), epoch "
                    f"{row['seconds']:.2f} s ({row['throttled_bios']} bios): {total:.2f} s = "
                    f"{entry['x_copy_cold']}x the copy read cold ({copy['seconds']:.2f} s)")
                if not a.plan:
                    break  # the budget changes nothing without a plan
        return doc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=("steady", "restart"))
    ap.add_argument("--plan", action="store_true", help="publish each epochfs epoch's order first")
    ap.add_argument("--perf", action="store_true", help="steady: split one epoch's CPU by thread (perf)")
    ap.add_argument("--epochfs-arg", action="append", default=[], help="one more epochfs mount argument")
    ap.add_argument("--ram-fraction", type=float, default=0.5,
                    help="epochfs --ram as a fraction of the group's limit (bigdata_bench's default: 0.5)")
    ap.add_argument("--readers", type=int, default=4, help="reader processes, as bigdata_bench's 4")
    ap.add_argument("--files", type=int, default=8000, help="samples (labels come on top)")
    ap.add_argument("--epochs", type=int, default=4, help="steady: epochs per side")
    ap.add_argument("--rounds", type=int, default=2, help="restart: rounds")
    ap.add_argument("--epochfs", default=os.path.join(REPO, "build", "cli", "epochfs"))
    ap.add_argument("--workdir", default="/var/tmp/epochfs-limit-probe")
    ap.add_argument("--out", default=os.path.join(REPO, "docs", "bench", "probe"))
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("run as root (cgroups, loop devices, drop_caches)", file=sys.stderr)
        return 2
    probe = Probe(a)
    started = datetime.datetime.now()
    try:
        probe.setup(throttled=a.mode == "restart")
        doc = probe.steady() if a.mode == "steady" else probe.restart()
    finally:
        probe.cleanup()
    commit = run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], check=False).stdout.strip()
    doc = {"tool": "bench/limit_probe.py", "mode": a.mode, "plan": a.plan, "started": started.isoformat(),
           "commit": commit, "epochfs_binary": a.epochfs, "epochfs_args": a.epochfs_arg, "files": len(probe.manifest), "data_bytes": probe.data,
           "memory_limit_bytes": probe.limit, "epochfs_ram_bytes": probe.ram, **doc}
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, f"limit_probe_{a.mode}{'_plan' if a.plan else ''}.json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
    if "cpu_split" in doc:
        log("CPU of one steady epoch, by thread: " +
            ", ".join(f"{k} {v}%" for k, v in doc["cpu_split"].items() if v >= 0.5))
    if "epochfs_x_copy" in doc:
        log(f"steady state: epochfs {doc['epochfs_x_copy']}x the plain copy under the same limit")
    log(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
