#!/usr/bin/python3
"""epoch_bench: training-epoch read throughput of epochfs against the alternatives.

What users of a deep-learning data set on a slow disk have today is the
source itself (one IO per small file, ~300 files/s on a 300-IOPS disk), a
tmpfs copy (the ceiling, if it fits in RAM), or a FUSE cache such as rclone's
VFS cache or a pass-through such as mergerfs.  This script builds that
situation reproducibly on one machine and reads whole epochs through each of
them, side by side, in one run:

* a seeded ImageFolder-like data set (class folders of ~110 KB random-byte
  "JPEGs" plus tiny label files) on an ext4 image attached to a loop device
  whose reads are throttled by a cgroup v1 blkio group (``--iops``), and a
  data set of 4 KB files on a second, unthrottled loop device;
* ``--readers`` processes reading each epoch in a fresh shuffled order, every
  file verified against the manifest (wrong bytes fail the run);
* per epoch: files/s, MB/s, p50/p99 per-file latency, the loop device's read
  IOs (ground-truth "source IOs") and the FUSE daemon's peak RSS;
* a table with the targets of epochfs marked PASS/MISS, and
  ``epoch_bench.json`` + ``epoch_bench.png`` in ``--out``.

Run as root with Debian's interpreter:  /usr/bin/python3 bench/epoch_bench.py --quick
See bench/README.md for the scenarios and what they mean.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from benchenv import (BlkioThrottle, Cleanup, LoopImage, Workspace, drop_caches, log, mount_tmpfs,
                      read_file, run, warn)
from dataset import BLOCK, Manifest, imagefolder_plan, materialize, small_plan
from fusemounts import EPOCHFS_STATUS_KEYS, EpochfsMount, FuseMount, MergerfsMount, MountError, RcloneMount, status_delta
from readers import ReadFailure, run_epoch
from report import Results, Row, format_row, format_table, format_targets, plot, write_json

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MAIN_SCENARIOS = ("source-cold", "source-warm", "tmpfs", "epochfs-e1", "epochfs-warm", "epochfs-restart",
                  "rclone-e1", "rclone-warm", "rclone-restart", "mergerfs-e1", "mergerfs-warm")
SMALL_SCENARIOS = ("small-source-cold", "small-source-warm", "small-tmpfs", "small-epochfs-e1",
                   "small-epochfs-restart")
ALL_SCENARIOS = MAIN_SCENARIOS + SMALL_SCENARIOS
GROUPS = {
    "all": ALL_SCENARIOS, "main": MAIN_SCENARIOS, "small": SMALL_SCENARIOS,
    "source": ("source-cold", "source-warm"),
    "epochfs": ("epochfs-e1", "epochfs-warm", "epochfs-restart", "small-epochfs-e1", "small-epochfs-restart"),
    "rclone": ("rclone-e1", "rclone-warm", "rclone-restart"),
    "mergerfs": ("mergerfs-e1", "mergerfs-warm"),
    "baselines": ("source-cold", "source-warm", "tmpfs", "small-source-cold", "small-source-warm", "small-tmpfs"),
}

# --baseline-epochfs runs each selected epochfs scenario again with a second binary
# (an older build), right after the first, under the same name with "baseline".
BASELINE_OF = {s: s.replace("epochfs-", "baseline-") for s in GROUPS["epochfs"]}

DEFAULT_MERGERFS_OPTIONS = "cache.files=partial,cache.attr=60,cache.entry=60,cache.negative_entry=60"


# --------------------------------------------------------------------------- arguments

def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Epoch read benchmark: epochfs vs source, tmpfs, rclone, mergerfs. Run as root.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--files", type=int, default=None,
                   help="samples in the main data set (default 10000, --quick 2000); label files come on top")
    p.add_argument("--small-files", type=int, default=None,
                   help="files in the 4 KB data set (default 20000, --quick 5000)")
    p.add_argument("--epochs", type=int, default=None, help="epochs per mount (default 3, --quick 2)")
    p.add_argument("--iops", type=int, default=300, help="read IOPS limit of the slow source (0: no throttle)")
    p.add_argument("--bps", type=int, default=0, help="read bytes/s limit of the slow source (0: none)")
    p.add_argument("--readers", type=int, default=4, help="reader processes (DataLoader workers)")
    p.add_argument("--classes", type=int, default=100, help="class folders per data set")
    p.add_argument("--mean-size", type=int, default=110_000, help="mean sample size in bytes (log-normal)")
    p.add_argument("--label-fraction", type=float, default=0.25,
                   help="fraction of samples with a 100-300 byte label file")
    p.add_argument("--seed", type=int, default=1234, help="seed of data set and epoch orders")
    p.add_argument("--verify", choices=("crc32", "sha1"), default="crc32", help="checksum readers verify")
    p.add_argument("--scenarios", nargs="+", default=["all"],
                   help=f"scenarios or groups (comma or space separated); groups: {', '.join(GROUPS)}; "
                        f"scenarios: {', '.join(ALL_SCENARIOS)}")
    p.add_argument("--quick", action="store_true", help="small run: 2000 samples, 5000 small files, 2 epochs")
    p.add_argument("--out", default=os.path.join(REPO, "docs", "bench"), help="where JSON and PNG go")
    p.add_argument("--workdir", default="/var/tmp/epochfs-bench",
                   help="scratch space on a real disk (images, cache dirs, mountpoints); emptied on exit")
    p.add_argument("--epochfs", default=None,
                   help="epochfs binary (default: build/cli/epochfs in the repo, else epochfs on PATH)")
    p.add_argument("--baseline-epochfs", default=None, metavar="BINARY",
                   help="a second epochfs binary (e.g. a build of an older commit), measured side by "
                        "side: each selected epochfs scenario runs again with it as baseline-*")
    p.add_argument("--epochfs-ram", default="4G", help="epochfs --ram")
    p.add_argument("--epochfs-disk", default="16G", help="epochfs --disk")
    p.add_argument("--epochfs-log-level", default="warn", help="epochfs --log-level")
    p.add_argument("--epochfs-arg", action="append", default=[], metavar="ARG",
                   help="extra argument for `epochfs mount` (repeatable, e.g. --epochfs-arg=--foo)")
    p.add_argument("--rclone-arg", action="append", default=[], metavar="ARG",
                   help="extra argument for `rclone mount` (repeatable)")
    p.add_argument("--mergerfs-options", default=DEFAULT_MERGERFS_OPTIONS, help="mergerfs -o options")
    p.add_argument("--epoch-timeout", type=float, default=None,
                   help="seconds before a hung epoch fails the run (default: generous, from --files/--iops)")
    args = p.parse_args(argv)
    args.files = args.files or (2000 if args.quick else 10000)
    args.small_files = args.small_files or (5000 if args.quick else 20000)
    args.epochs = args.epochs or (2 if args.quick else 3)
    args.out = os.path.abspath(args.out)
    try:
        args.selected = select_scenarios(args.scenarios)
    except ValueError as e:
        p.error(str(e))
    if args.baseline_epochfs:
        if not os.access(args.baseline_epochfs, os.X_OK):
            p.error(f"--baseline-epochfs {args.baseline_epochfs}: not an executable file")
        args.baseline_epochfs = os.path.abspath(args.baseline_epochfs)
        args.selected += [BASELINE_OF[s] for s in args.selected if s in BASELINE_OF]
    if args.readers < 1 or args.epochs < 1 or args.files < 1 or args.small_files < 1:
        p.error("--readers, --epochs, --files and --small-files must be >= 1")
    return args


def select_scenarios(tokens: list[str]) -> list[str]:
    """Expands scenario names and group names (comma/space separated) in canonical order."""
    chosen: set[str] = set()
    for token in (t for arg in tokens for t in arg.split(",") if t):
        if token in GROUPS:
            chosen.update(GROUPS[token])
        elif token in ALL_SCENARIOS:
            chosen.add(token)
        else:
            raise ValueError(f"unknown scenario {token!r}; groups: {', '.join(GROUPS)}; "
                             f"scenarios: {', '.join(ALL_SCENARIOS)}")
    return [s for s in ALL_SCENARIOS if s in chosen]


def resolve_epochfs(arg: str | None) -> tuple[str | None, str]:
    """The epochfs binary to use, or None and where we looked."""
    if arg:
        path = os.path.abspath(arg)
        return (path, path) if os.access(path, os.X_OK) else (None, path)
    default = os.path.join(REPO, "build", "cli", "epochfs")
    if os.access(default, os.X_OK):
        return default, default
    on_path = shutil.which("epochfs")
    return (on_path, default) if on_path else (None, f"{default} or epochfs on PATH")


# --------------------------------------------------------------------------- data sources

@dataclass
class Source:
    """One data set: its manifest, the loop-device ext4 it lives on, its tmpfs copy."""

    name: str  # "main" or "small"
    manifest: Manifest
    loop: LoopImage
    root: str  # the data set directory on the loop-device filesystem
    tmpfs_root: str | None
    throttled: bool


class Bench:
    """Builds the sources, runs the selected scenarios, collects the rows."""

    def __init__(self, args: argparse.Namespace, cleanup: Cleanup, ws: Workspace) -> None:
        self.args = args
        self.cleanup = cleanup
        self.ws = ws
        self.results = Results()
        self.cgroup = BlkioThrottle(cleanup)
        self.sources: dict[str, Source] = {}
        self.throttle_check: dict = {}
        self.phases: dict[str, float] = {}
        self.commands: dict[str, list[str]] = {}
        self.epochfs_bin, self.epochfs_where = resolve_epochfs(args.epochfs)
        self.loadavg_at_start = os.getloadavg()

    def want(self, *names: str) -> bool:
        return any(n in self.args.selected for n in names)

    # -- setup -------------------------------------------------------------------------
    def setup(self) -> None:
        """Joins the cgroup, builds the data sets, throttles and checks the slow source."""
        self.cgroup.create_and_join()
        t = time.monotonic()
        if self.want(*MAIN_SCENARIOS):
            plan = imagefolder_plan(self.args.files, self.args.classes, self.args.seed,
                                    self.args.mean_size, label_fraction=self.args.label_fraction)
            self.sources["main"] = self._build("main", plan, throttled=True, tmpfs=self.want("tmpfs"))
        if self.want(*SMALL_SCENARIOS):
            plan = small_plan(self.args.small_files, self.args.classes)
            self.sources["small"] = self._build("small", plan, throttled=False, tmpfs=self.want("small-tmpfs"))
        self.phases["generate_s"] = round(time.monotonic() - t, 1)
        if "main" in self.sources and self.args.iops:
            self._check_throttle(self.sources["main"])

    def _build(self, name: str, plan, *, throttled: bool, tmpfs: bool) -> Source:
        """Creates an ext4 image sized to fit, writes the data set into it (and into a
        tmpfs copy at the same time), remounts it read-only and throttles it."""
        allocated = sum((pf.size + BLOCK - 1) // BLOCK * BLOCK for pf in plan)
        dirs = len({os.path.dirname(pf.relpath) for pf in plan}) + 2
        inodes = len(plan) + dirs + 1024
        image_bytes = int(allocated * 1.08) + inodes * 256 + dirs * BLOCK + (256 << 20)
        loop = LoopImage(self.cleanup, self.ws.path(f"{name}.img"), self.ws.path(f"src-{name}"))
        log(f"{name}: ext4 image of {image_bytes / 2**20:.0f} MiB for {len(plan)} files "
            f"({allocated / 1e6:.0f} MB) on a loop device")
        loop.create(image_bytes, inodes)
        root = os.path.join(loop.mountpoint, "data")  # not the fs root: keeps lost+found out of the data set
        roots = [root]
        tmpfs_root = None
        if tmpfs:
            tmpfs_dir = self.ws.path(f"tmpfs-{name}")
            mount_tmpfs(self.cleanup, tmpfs_dir, allocated + dirs * BLOCK + (64 << 20))
            tmpfs_root = os.path.join(tmpfs_dir, "data")
            roots.append(tmpfs_root)
        log(f"{name}: generating into {' and '.join(roots)}")
        manifest = materialize(name, plan, self.args.seed, roots, progress=lambda m: log("  " + m))
        manifest.write_json(self.ws.path(f"manifest-{name}.json"))
        loop.remount_readonly()
        if throttled and (self.args.iops or self.args.bps):
            self.cgroup.limit(loop.majmin, self.args.iops, self.args.bps)
            log(f"{name}: {loop.device} ({loop.majmin}) throttled to {self.args.iops or '-'} read IOPS"
                + (f", {self.args.bps} B/s" if self.args.bps else "") + f" for cgroup {self.cgroup.path}")
        else:
            log(f"{name}: {loop.device} ({loop.majmin}) unthrottled")
        return Source(name, manifest, loop, root, tmpfs_root, throttled)

    def _check_throttle(self, src: Source) -> None:
        """Reads a random sample cold: IO/s must be about --iops, or nothing here means anything."""
        n = min(len(src.manifest), max(100, self.args.iops))
        sample = np.random.default_rng([self.args.seed, 77]).choice(len(src.manifest), n, replace=False)
        drop_caches()
        ios0, bios0 = src.loop.read_ios(), self.cgroup.read_bios(src.loop.majmin)
        res = run_epoch(src.root, src.manifest.subset(sample), readers=self.args.readers,
                        seed=self.args.seed, epoch=0, verify=self.args.verify, timeout=self._timeout())
        ios = src.loop.read_ios() - ios0
        bios = self.cgroup.read_bios(src.loop.majmin) - bios0
        io_rate = ios / res.seconds
        # The throttle charges bios (before the block layer merges them into the
        # requests the loop device's stat counts), so judge it by bios.
        charged_rate = (bios or ios) / res.seconds
        self.throttle_check = {"files": n, "seconds": round(res.seconds, 3), "files_per_s": round(res.files_per_s, 1),
                               "ios": ios, "io_per_s": round(io_rate, 1), "ios_per_file": round(ios / n, 3),
                               "throttled_bios": bios, "bios_per_s": round(bios / res.seconds, 1),
                               "limit_iops": self.args.iops}
        log(f"throttle check: {n} files cold in {res.seconds:.2f} s = {res.files_per_s:.0f} files/s, "
            f"{ios} IOs = {io_rate:.0f} IO/s (limit {self.args.iops}), {ios / n:.2f} IOs/file, "
            f"{bios} throttled bios = {bios / res.seconds:.0f}/s")
        if charged_rate > 1.5 * self.args.iops:
            raise RuntimeError(f"the blkio throttle is not effective ({charged_rate:.0f} IO/s > 1.5 x {self.args.iops}); "
                               "every number would be meaningless")
        if charged_rate < 0.5 * self.args.iops:
            warn("the source is slower than its throttle (is the machine busy?); results understate the source")

    def _timeout(self) -> float:
        if self.args.epoch_timeout:
            return self.args.epoch_timeout
        n = len(self.sources["main"].manifest) if "main" in self.sources else self.args.files
        return max(300.0, 6.0 * n / max(self.args.iops or 1000, 1))

    # -- measuring ---------------------------------------------------------------------
    def measure(self, scenario: str, src: Source, root: str, epoch: int, fs: FuseMount | None = None,
                cold: bool = False, extra: dict | None = None) -> Row:
        """Reads one epoch under ``root`` and records a row: throughput and latency, the
        source device's read IOs, and for a FUSE daemon its peak RSS, CPU time and
        (epochfs) status counters over the epoch.  ``cold`` drops the page cache first."""
        if cold:
            drop_caches()
        st0 = fs.status() if fs else None
        cpu0 = fs.cpu_seconds() if fs else None
        ios0, bios0 = src.loop.read_ios(), self.cgroup.read_bios(src.loop.majmin)
        n = len(src.manifest)

        def heartbeat(done: int, seconds: float) -> None:
            log(f"  {scenario} epoch {epoch}: {done}/{n} files in {seconds:.0f} s ({done / seconds:.0f} files/s)")
        res = run_epoch(root, src.manifest, readers=self.args.readers, seed=self.args.seed, epoch=epoch,
                        verify=self.args.verify, timeout=self._timeout(), progress=heartbeat)
        ios = src.loop.read_ios() - ios0
        row = Row(scenario, src.name, epoch, res, source_ios=ios, extra=dict(extra or {}))
        if src.throttled:
            row.extra["throttled_bios"] = self.cgroup.read_bios(src.loop.majmin) - bios0
        if "mount_s" in row.extra:
            row.note = f"mount {row.extra['mount_s']:.2f} s, {row.extra['mount_source_ios']} IOs"
        if fs is not None:
            cpu1 = fs.cpu_seconds()
            row.daemon_cpu_s = (cpu1 - cpu0) if cpu0 is not None and cpu1 is not None else None
            row.daemon_peak_rss = fs.peak_rss_bytes()
            row.status = status_delta(st0, fs.status())
            if row.status and row.status.get("corrupt_entries"):
                row.note = (row.note + "; " if row.note else "") + f"{row.status['corrupt_entries']} corrupt entries"
        self.results.add(row)
        print("  " + format_row(row, self.results), flush=True)
        return row

    def skip(self, scenarios, src_name: str, why: str) -> None:
        for s in scenarios:
            if self.want(s):
                self.results.add(Row(s, src_name, note=why))
                print("  " + format_row(self.results.rows[-1], self.results), flush=True)

    # -- scenario groups ---------------------------------------------------------------
    def run_all(self) -> None:
        for name, prefix in (("main", ""), ("small", "small-")):
            src = self.sources.get(name)
            if src is None:
                continue
            self.run_source(src, prefix)
            if self.want(prefix + "tmpfs"):
                self.run_tmpfs(src, prefix)
            self.run_epochfs(src, prefix)
            if self.args.baseline_epochfs:
                self.run_epochfs(src, prefix, family="baseline", binary=self.args.baseline_epochfs)
            if name == "main":
                self.run_rclone(src)
                self.run_mergerfs(src)

    def run_source(self, src: Source, prefix: str) -> None:
        """The source read directly: epoch 1 with the page cache dropped, then warm epochs."""
        if not self.want(prefix + "source-cold", prefix + "source-warm"):
            return
        t = time.monotonic()
        log(f"--- {prefix}source: {src.root} on {src.loop.device}")
        self.measure(prefix + "source-cold", src, src.root, 1, cold=True)
        if self.want(prefix + "source-warm"):
            self._warm_epochs(prefix + "source-warm", src, src.root)
        self.phases[f"{prefix}source_s"] = round(time.monotonic() - t, 1)

    def run_tmpfs(self, src: Source, prefix: str) -> None:
        """A tmpfs copy, always warm: the ceiling for a reader on this machine."""
        t = time.monotonic()
        log(f"--- {prefix}tmpfs: {src.tmpfs_root}")
        for e in range(1, self.args.epochs + 1):
            self.measure(prefix + "tmpfs", src, src.tmpfs_root, e)
        self.phases[f"{prefix}tmpfs_s"] = round(time.monotonic() - t, 1)

    def run_fuse(self, src: Source, family: str, make: Callable[[str], FuseMount], *,
                 prefix: str = "", restart: bool = True) -> None:
        """The shape all FUSE scenarios share.  ``<family>-e1``: drop caches, mount with an
        empty cache dir, one cold epoch.  ``<family>-warm``: epochs 2..N on that mount.
        ``<family>-restart``: unmount, drop caches, mount again on the same cache dir and
        read one cold epoch -- what a cache that persists to disk is for.
        ``make(tag)`` builds an unmounted filesystem object."""
        e1, warm, again = (f"{prefix}{family}-{s}" for s in ("e1", "warm", "restart"))
        names = [e1, warm] + ([again] if restart else [])
        if not self.want(*names):
            return
        t = time.monotonic()
        drop_caches()
        fs = make("first")
        log(f"--- {prefix}{family}: {' '.join(fs.command)}")
        mount_info = self._try_mount(fs, src, names)
        if mount_info is None:
            return
        self.measure(e1, src, fs.mountpoint, 1, fs=fs, cold=True, extra=mount_info)
        if self.want(warm):
            self._warm_epochs(warm, src, fs.mountpoint, fs)
        fs.stop()
        if restart and self.want(again):
            drop_caches()
            fs = make("restart")
            mount_info = self._try_mount(fs, src, [again])
            if mount_info is None:
                return
            self.measure(again, src, fs.mountpoint, self.args.epochs + 1, fs=fs, cold=True, extra=mount_info)
            fs.stop()
        self.phases[f"{prefix}{family}_s"] = round(time.monotonic() - t, 1)

    def _warm_epochs(self, scenario: str, src: Source, root: str, fs: FuseMount | None = None) -> None:
        if self.args.epochs < 2:
            self.skip([scenario], src.name, "needs --epochs >= 2")
        for e in range(2, self.args.epochs + 1):
            self.measure(scenario, src, root, e, fs=fs)

    def _try_mount(self, fs: FuseMount, src: Source, names: list[str]) -> dict | None:
        """Mounts; on failure skips ``names`` with the reason (the run goes on) and returns
        None.  On success returns the mount time and the source IOs mounting cost."""
        ios0, t0 = src.loop.read_ios(), time.monotonic()
        try:
            fs.start()
        except MountError as e:
            warn(str(e))
            self.skip(names, src.name, f"{fs.kind} mount failed: {str(e).splitlines()[0][:160]}")
            return None
        return {"mount_s": round(time.monotonic() - t0, 3), "mount_source_ios": src.loop.read_ios() - ios0}

    def run_epochfs(self, src: Source, prefix: str, family: str = "epochfs", binary: str | None = None) -> None:
        """epochfs over the slow source (the binary's own cache dir, fresh per data set).
        ``family`` "baseline" runs the --baseline-epochfs binary the same way."""
        names = [f"{prefix}{family}-{s}" for s in ("e1", "warm", "restart")]
        if not self.want(*names):
            return
        binary = binary or self.epochfs_bin
        if binary is None:
            self.skip(names, src.name, f"epochfs binary not found ({self.epochfs_where}); build it or pass --epochfs")
            return
        cache_dir = self.ws.path(f"cache-{family}-{src.name}")

        def make(tag: str) -> FuseMount:
            fs = EpochfsMount(self.cleanup, self.cgroup, self.ws.path(f"mnt-{family}-{src.name}"),
                              self.ws.path(f"{family}-{src.name}-{tag}.log"), binary=binary,
                              source=src.root, cache_dir=cache_dir, ram=self.args.epochfs_ram,
                              disk=self.args.epochfs_disk, log_level=self.args.epochfs_log_level,
                              extra=self.args.epochfs_arg)
            self.commands[f"{family}_mount"] = fs.command
            return fs
        os.makedirs(cache_dir, exist_ok=True)
        self.run_fuse(src, family, make, prefix=prefix)

    def run_rclone(self, src: Source) -> None:
        """rclone's full VFS cache: epoch 1 fills its disk cache; after a restart it
        re-validates every cached file against the source."""
        if not self.want(*GROUPS["rclone"]):
            return
        if shutil.which("rclone") is None:
            self.skip(GROUPS["rclone"], src.name, "rclone not installed")
            return
        cache_dir = self.ws.path("cache-rclone")

        def make(tag: str) -> FuseMount:
            fs = RcloneMount(self.cleanup, self.cgroup, self.ws.path("mnt-rclone"),
                             self.ws.path(f"rclone-{tag}.log"), source=src.root, cache_dir=cache_dir,
                             config_path=self.ws.path("rclone.conf"), extra=self.args.rclone_arg)
            self.commands["rclone_mount"] = fs.command
            return fs
        self.run_fuse(src, "rclone", make)

    def run_mergerfs(self, src: Source) -> None:
        """mergerfs over the source: a FUSE pass-through with no cache of its own."""
        if not self.want(*GROUPS["mergerfs"]):
            return
        if shutil.which("mergerfs") is None:
            self.skip(GROUPS["mergerfs"], src.name, "mergerfs not installed")
            return

        def make(tag: str) -> FuseMount:
            fs = MergerfsMount(self.cleanup, self.cgroup, self.ws.path("mnt-mergerfs"),
                               self.ws.path(f"mergerfs-{tag}.log"), source=src.root,
                               options=self.args.mergerfs_options)
            self.commands["mergerfs_mount"] = fs.command
            return fs
        self.run_fuse(src, "mergerfs", make, restart=False)

    # -- reporting ---------------------------------------------------------------------
    def document(self, started: datetime.datetime, duration: float) -> dict:
        """Everything the run measured and how, for docs/bench/epoch_bench.json."""
        a = self.args
        return {
            "tool": "bench/epoch_bench.py",
            "started": started.isoformat(timespec="seconds"),
            "duration_s": round(duration, 1),
            "git": git_info(),
            "machine": machine_info(self.epochfs_bin, self.loadavg_at_start),
            "parameters": {
                "files": a.files, "small_files": a.small_files, "epochs": a.epochs, "iops": a.iops, "bps": a.bps,
                "readers": a.readers, "classes": a.classes, "mean_size": a.mean_size,
                "label_fraction": a.label_fraction, "seed": a.seed, "verify": a.verify, "quick": a.quick,
                "scenarios": a.selected, "epochfs_binary": self.epochfs_bin,
                "baseline_epochfs_binary": a.baseline_epochfs, "epochfs_ram": a.epochfs_ram,
                "epochfs_disk": a.epochfs_disk, "mergerfs_options": a.mergerfs_options,
            },
            "commands": self.commands,
            "epochfs_status_keys_read": list(EPOCHFS_STATUS_KEYS),
            "datasets": {n: {**s.manifest.describe(), "loop": s.loop.queue_info(), "throttled": s.throttled}
                         for n, s in self.sources.items()},
            "throttle_check": self.throttle_check,
            "phases_s": self.phases,
            "rows": [r.to_dict() for r in self.results.rows],
            "scenarios": self.results.summary(),
            "targets": self.results.targets(),
        }


# --------------------------------------------------------------------------- environment info

def git_info() -> dict:
    def git(*cmd: str) -> str:
        try:
            cp = subprocess.run(["git", "-C", REPO, *cmd], capture_output=True, text=True, timeout=20)
            return cp.stdout.strip() if cp.returncode == 0 else ""
        except (OSError, subprocess.TimeoutExpired):
            return ""
    return {"commit": git("rev-parse", "HEAD") or None, "branch": git("rev-parse", "--abbrev-ref", "HEAD") or None,
            "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}


def machine_info(epochfs_bin: str | None, loadavg_at_start: tuple) -> dict:
    """Where the numbers come from.  The load average matters: warm epochs are
    CPU-bound on 2 cores, so other work on the machine lowers them."""
    def version(cmd: list[str]) -> str | None:
        try:
            cp = run(cmd, check=False, timeout=20)
            text = (cp.stdout or cp.stderr).strip()
            return text.splitlines()[0] if text else None
        except (OSError, RuntimeError):
            return None
    cpu = next((line.split(":", 1)[1].strip() for line in read_file("/proc/cpuinfo").splitlines()
                if line.startswith("model name")), platform.processor())
    mem = next((int(line.split()[1]) * 1024 for line in read_file("/proc/meminfo").splitlines()
                if line.startswith("MemTotal:")), None)
    return {
        "hostname": platform.node(), "kernel": platform.release(), "os": read_file("/etc/debian_version").strip(),
        "cpu": cpu, "cpus": os.cpu_count(), "mem_bytes": mem, "loadavg_at_end": os.getloadavg(),
        "loadavg_at_start": loadavg_at_start,
        "python": sys.version.split()[0], "numpy": np.__version__,
        "rclone": version(["rclone", "version"]), "mergerfs": version(["mergerfs", "--version"]),
        "epochfs": version([epochfs_bin, "--version"]) if epochfs_bin else None,
    }


# --------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if os.geteuid() != 0:
        sys.exit("epoch_bench needs root (loop devices, mounts, cgroups, drop_caches)")
    started, t0 = datetime.datetime.now(), time.monotonic()
    cleanup = Cleanup()
    cleanup.install()
    ws = Workspace(args.workdir, cleanup)
    bench = Bench(args, cleanup, ws)
    try:
        ws.open()
        log(f"epoch_bench: {args.files} samples, {args.small_files} small files, {args.epochs} epochs, "
            f"{args.readers} readers, {args.iops} IOPS; scenarios: {' '.join(args.selected)}")
        if bench.want(*GROUPS["epochfs"]) and bench.epochfs_bin is None:
            warn(f"epochfs binary not found ({bench.epochfs_where}): its scenarios will be skipped")
        bench.setup()
        bench.run_all()
    except ReadFailure as e:
        print(f"\nFAILED: {e}", file=sys.stderr, flush=True)
        if bench.results.rows:
            print("\n" + format_table(bench.results), flush=True)
        return 1
    except (RuntimeError, OSError) as e:
        print(f"\nERROR: {e}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr, flush=True)
        return 130
    finally:
        cleanup.run_all()

    duration = time.monotonic() - t0
    print("\n" + format_table(bench.results))
    targets = bench.results.targets()
    print("\ntargets:\n" + format_targets(targets))
    os.makedirs(args.out, exist_ok=True)
    doc = bench.document(started, duration)
    json_path, png_path = os.path.join(args.out, "epoch_bench.json"), os.path.join(args.out, "epoch_bench.png")
    write_json(json_path, doc)
    title = (f"epoch_bench: {args.files} samples (+labels), {args.readers} readers, source {args.iops} read IOPS, "
             f"{platform.node()} ({os.cpu_count()} CPUs), {started:%Y-%m-%d}")
    plot(png_path, bench.results, title)
    log(f"wrote {json_path} and {png_path} ({duration:.0f} s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
