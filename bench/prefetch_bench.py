#!/usr/bin/python3
"""Prefetcher benchmark: a data set larger than the cache, and a sequential epoch.

Part 1, cache fraction. The data set (``--files`` x ``--size`` bytes of random bytes, in
10 class folders) sits on an ext4 loop image throttled to ``--iops`` read IOPS (cgroup v1
blkio). The RAM cache is ``c`` of the data set, for each ``c`` in ``--fractions``, with no
SSD tier. ``--readers`` threads read a fresh permutation each epoch and "compute" for a
fixed time per sample, so that together they consume at most ``--rate`` samples/s (450
on a 300-IOPS source: 1.5x what the source can serve). Side by side:

  * page cache: the raw source through the kernel's page cache, the readers in a memory
    cgroup limited to ``c`` of the data set (plus the interpreter's own ~24 MiB): the LRU
    baseline;
  * epochfs: the mount with ``--ram c*dataset --disk 0`` and an unmodified reader;
    readahead paced by its own source latency (the default);
  * epochfs, unpaced: the same with ``--no-prefetch-pacing``: readahead reads the
    source as fast as the RAM policy lets it (see docs/benchmarks.md for why that is
    slower on a throttled source);
  * epochfs + plan: each epoch's order written to ``.epochfs/plan``.

Per epoch: the hit ratio (epochfs: reads served from RAM; page cache: 1 - source bytes /
data set), source bytes / data set (the loop device's sector count: ground truth) and
samples/s. The first epoch is cold; the steady state is the mean of the others. The
plot draws the steady state against ``c`` with the theory: ``c`` (a static set),
``c*c/2`` (LRU under reshuffling) and ``c + c*ln(1/c)`` (remaining-set prefetch).

Part 2, sequential readahead. The SSD tier holds the whole data set (filled once), RAM
is cold (a fresh mount) and the page cache dropped; one reader reads every file in name
order with no compute (a validation pass), with readahead (the default) and with
``--prefetch 0`` (no readahead, no read-around), alternating, ``--seq-repeats`` times.
After each readahead run, the same mount is read again with the page cache dropped but
the RAM tier warm: the ceiling readahead could reach (every file a RAM hit).

Prints a table with the issue's targets, writes docs/bench/prefetch_bench.json and
docs/bench/prefetch_bench.png.

    /usr/bin/python3 bench/prefetch_bench.py            # ~8 minutes here
    /usr/bin/python3 bench/prefetch_bench.py --quick    # ~3 minutes
"""
import argparse
import json
import math
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
from benchenv import (BlkioThrottle, Cleanup, LoopImage, Workspace, drop_caches,  # noqa: E402
                      log, run)
from paced_reader import read_epoch  # noqa: E402

MEMCG = "/sys/fs/cgroup/memory/epochfs-prefetch-bench"
INTERPRETER_BYTES = 24 << 20  # the baseline reader's own memory, on top of its cache share

# The page-cache baseline runs in a child process: only it may sit in the memory cgroup
# (its page cache is what the limit bounds; the benchmark's own memory must not count).
BASELINE_CHILD = r"""
import json, os, random, sys
memcg, root, loopname, epochs, readers, compute, total, seed, bench, fixed, batch = sys.argv[1:12]
sys.path.insert(0, bench)
from paced_reader import read_epoch
names = sorted(os.path.join(dp, f)[len(root) + 1:] for dp, _, fs in os.walk(root) for f in fs)
with open(os.path.join(memcg, "cgroup.procs"), "w") as f:
    f.write(str(os.getpid()))
def sectors():
    with open(f"/sys/block/{loopname}/stat") as f:
        return int(f.read().split()[2])
for epoch in range(int(epochs)):
    order = names[:]
    random.Random(int(seed) * 1000 + (0 if fixed == "1" else epoch)).shuffle(order)
    s0 = sectors()
    secs = read_epoch(root, order, int(readers), float(compute), int(batch))
    print(json.dumps(dict(epoch=epoch, seconds=secs, source_bytes=(sectors() - s0) * 512)),
          flush=True)
"""


def theory(c):
    return {"static": c, "lru": c * c / 2, "remaining_set": min(1.0, c + c * math.log(1 / c))}


class Bench:
    def __init__(self, args):
        self.args = args
        self.cleanup = Cleanup()
        self.epochfs = os.path.abspath(args.epochfs)
        self.rows = []      # part 1, one per (config, fraction, epoch)
        self.seq_rows = []  # part 2
        self.measured = {}  # commit, date, load of a run re-rendered with --replot

    # ------------------------------------------------------------------ setup
    def setup(self):
        a = self.args
        self.cleanup.install()
        self.ws = Workspace(a.workdir, self.cleanup)
        self.ws.open()
        self.cg = BlkioThrottle(self.cleanup)
        self.cg.create_and_join()
        self.loop = LoopImage(self.cleanup, self.ws.path("src.img"), self.ws.path("src"))
        self.loop.create(int(a.files * a.size * 1.3) + (256 << 20), a.files + 1024)
        self.root = os.path.join(self.loop.mountpoint, "data")
        rng = random.Random(a.seed)
        self.names = []
        log(f"writing {a.files} files of {a.size} bytes")
        for i in range(a.files):
            name = f"class_{i % 10}/{i:07}.jpg"
            os.makedirs(os.path.join(self.root, os.path.dirname(name)), exist_ok=True)
            with open(os.path.join(self.root, name), "wb") as f:
                f.write(rng.randbytes(a.size))
            self.names.append(name)
        self.names.sort()
        self.total = a.files * a.size
        self.loop.remount_readonly()
        self.cg.limit(self.loop.majmin, a.iops)
        self.mnt = self.ws.path("mnt")
        os.makedirs(self.mnt)
        self.compute = a.readers / a.rate  # seconds per sample per reader

    def sectors(self):
        with open(f"/sys/block/{self.loop.name}/stat") as f:
            return int(f.read().split()[2])

    def order(self, epoch):
        order = self.names[:]
        # --fixed-order: every epoch reads the first epoch's shuffle again (a replay).
        random.Random(self.args.seed * 1000 + (0 if self.args.fixed_order else epoch)).shuffle(order)
        return order

    # ------------------------------------------------------------ epochfs mounts
    def mount(self, cache_dir, *extra):
        log_file = self.ws.path("epochfs.log")
        run([self.epochfs, "mount", self.root, self.mnt, "--cache-dir", cache_dir,
             "--log-level", "warn", "--log-file", log_file, *extra])
        self.cleanup_mount = self.cleanup.push(
            f"umount {self.mnt}", lambda: run([self.epochfs, "umount", self.mnt]))

    def umount(self):
        self.cleanup_mount.release()

    def stats(self):
        with open(os.path.join(self.mnt, ".epochfs", "stats")) as f:
            return json.load(f)

    # ------------------------------------------------------------------ part 1
    def run_baseline(self, c):
        a = self.args
        os.makedirs(MEMCG, exist_ok=True)
        handle = self.cleanup.push("remove memory cgroup", lambda: os.rmdir(MEMCG))
        limit = int(c * self.total) + INTERPRETER_BYTES
        with open(os.path.join(MEMCG, "memory.limit_in_bytes"), "w") as f:
            f.write(str(limit))
        drop_caches()
        cp = subprocess.run([sys.executable, "-c", BASELINE_CHILD, MEMCG, self.root, self.loop.name,
                             str(a.epochs), str(a.readers), str(self.compute), str(self.total),
                             str(a.seed), BENCH, "1" if a.fixed_order else "0",
                             str(a.dataloader_batch)], check=True, capture_output=True, text=True)
        for line in cp.stdout.splitlines():
            r = json.loads(line)
            source = r["source_bytes"] / self.total
            self.add("page cache", c, r["epoch"], r["seconds"], 1 - min(1.0, source), source,
                     extra={"memcg_limit_bytes": limit})
        time.sleep(0.5)  # the child's pages are uncharged as it exits
        drop_caches()
        handle.release()

    def run_epochfs(self, c, publish, unpaced=False):
        a = self.args
        cache_dir = self.ws.path(f"cache-{c}-{int(publish)}-{int(unpaced)}")
        extra = ["--no-prefetch-pacing"] if unpaced else []
        self.mount(cache_dir, "--ram", str(int(c * self.total)), "--disk", "0", *extra,
                   *a.epochfs_arg)
        try:
            for epoch in range(a.epochs):
                order = self.order(epoch)
                drop_caches()  # the kernel's copy of FUSE pages must not act as a second cache
                if publish:
                    with open(os.path.join(self.mnt, ".epochfs", "plan"), "w") as f:
                        f.write("epochfs-plan 1\n" + "".join(n + "\n" for n in order) + "\n")
                before, s0 = self.stats(), self.sectors()
                secs = read_epoch(self.mnt, order, a.readers, self.compute, a.dataloader_batch)
                after, s1 = self.stats(), self.sectors()
                d = {k: after[k] - before[k] for k in ("ram_hits", "ssd_hits", "misses",
                                                       "source_bytes", "prefetched",
                                                       "prefetch_source_reads")}
                reads = d["ram_hits"] + d["ssd_hits"] + d["misses"]
                config = "epochfs + plan" if publish else "epochfs, unpaced" if unpaced else "epochfs"
                self.add(config, c, epoch, secs,
                         d["ram_hits"] / max(reads, 1), (s1 - s0) * 512 / self.total,
                         extra={"daemon_source_bytes_per_dataset": d["source_bytes"] / self.total,
                                "pattern": after.get("pattern"), "misses": d["misses"],
                                "prefetched": d["prefetched"],
                                "prefetch_source_reads": d["prefetch_source_reads"]})
        finally:
            self.umount()
            shutil.rmtree(cache_dir, ignore_errors=True)

    def add(self, config, c, epoch, secs, hit, source, extra=None):
        row = {"config": config, "fraction": c, "epoch": epoch, "seconds": round(secs, 3),
               "samples_per_s": round(len(self.names) / secs, 1), "hit_ratio": round(hit, 4),
               "source_bytes_per_dataset": round(source, 4), **(extra or {})}
        self.rows.append(row)
        log(f"  {config:15} c={c:.2f} epoch {epoch}: {row['samples_per_s']:7.1f} samples/s, "
            f"hit {hit:.3f}, source {source:.3f}x data set")

    # ------------------------------------------------------------------ part 2
    def run_sequential(self):
        a = self.args
        cache_dir = self.ws.path("cache-seq")
        names = self.names[: a.seq_files] if a.seq_files else self.names
        log(f"sequential: filling the SSD tier with {len(names)} files (through the throttle)")
        self.mount(cache_dir, "--ram", "4G")
        read_epoch(self.mnt, names, 4)
        self.umount()
        for rep in range(a.seq_repeats):
            for readahead in (True, False):
                drop_caches()
                self.mount(cache_dir, "--ram", "4G", *([] if readahead else ["--prefetch", "0"]))
                s0 = self.sectors()
                secs = read_epoch(self.mnt, names, 1)
                s, s1 = self.stats(), self.sectors()
                ceiling = None
                if readahead:  # every file is in RAM now: the best readahead could do
                    drop_caches()
                    ceiling = len(names) / read_epoch(self.mnt, names, 1)
                self.umount()
                row = {"readahead": readahead, "repeat": rep, "seconds": round(secs, 3),
                       "ram_warm_files_per_s": ceiling and round(ceiling, 1),
                       "files_per_s": round(len(names) / secs, 1), "ram_hits": s["ram_hits"],
                       "ssd_hits": s["ssd_hits"], "misses": s["misses"],
                       "pattern": s.get("pattern"), "prefetch_hits": s.get("prefetch_hits"),
                       "source_ios": s1 - s0}
                self.seq_rows.append(row)
                log(f"  sequential, readahead {'on ' if readahead else 'off'}: "
                    f"{row['files_per_s']:8.1f} files/s ({s['ram_hits']} RAM, {s['ssd_hits']} SSD)"
                    + (f"; RAM warm: {ceiling:.1f} files/s" if ceiling else ""))
        shutil.rmtree(cache_dir, ignore_errors=True)

    # ------------------------------------------------------------------ report
    def steady(self, config, c, key):
        vals = [r[key] for r in self.rows if r["config"] == config and r["fraction"] == c
                and r["epoch"] > 0]
        return statistics.mean(vals) if vals else None

    def summary(self):
        a = self.args
        out = []
        for c in a.fractions:
            for config in ("page cache", "epochfs", "epochfs, unpaced", "epochfs + plan"):
                out.append({"config": config, "fraction": c,
                            "hit_ratio": self.steady(config, c, "hit_ratio"),
                            "source_bytes_per_dataset": self.steady(config, c, "source_bytes_per_dataset"),
                            "samples_per_s": self.steady(config, c, "samples_per_s"),
                            "theory": theory(c)})
        for s in out:
            base = self.steady("page cache", s["fraction"], "samples_per_s")
            s["vs_page_cache"] = s["samples_per_s"] / base if base and s["samples_per_s"] else None
        seq_on = [r["files_per_s"] for r in self.seq_rows if r["readahead"]]
        seq_off = [r["files_per_s"] for r in self.seq_rows if not r["readahead"]]
        ratios = [on / off for on, off in zip(seq_on, seq_off)]
        ceil = [r["ram_warm_files_per_s"] for r in self.seq_rows if r["readahead"]]
        seq = {"files_per_s_on": statistics.median(seq_on) if seq_on else None,
               "files_per_s_ram_warm": statistics.median(ceil) if ceil else None,
               "files_per_s_off": statistics.median(seq_off) if seq_off else None,
               "speedup_median": statistics.median(ratios) if ratios else None,
               "speedups": ratios}
        return out, seq

    def targets(self, summary, seq):
        def get(config, key):
            return next((s[key] for s in summary if s["config"] == config and s["fraction"] == 0.5),
                        None)
        t = []

        def check(name, value, ok):
            t.append({"target": name, "value": value,
                      "result": "n/a" if value is None else ("PASS" if ok(value) else "MISS")})
        check("c=0.5: source bytes/epoch <= 0.55x data set, unmodified reader",
              get("epochfs", "source_bytes_per_dataset"), lambda v: v <= 0.55)
        check(f"c=0.5, {self.args.rate:g} samples/s on {self.args.iops} IOPS: hit ratio >= 0.75, unmodified",
              get("epochfs", "hit_ratio"), lambda v: v >= 0.75)
        check("  the same with --no-prefetch-pacing", get("epochfs, unpaced", "hit_ratio"),
              lambda v: v >= 0.75)
        check("c=0.5: hit ratio >= 0.95 with a published order", get("epochfs + plan", "hit_ratio"),
              lambda v: v >= 0.95)
        check("sequential epoch, SSD warm, RAM cold: readahead >= 3x without", seq["speedup_median"],
              lambda v: v >= 3.0)
        return t

    def report(self):
        a = self.args
        summary, seq = self.summary()
        targets = self.targets(summary, seq)
        print()
        print(f"Steady-state epochs (mean of epochs 1..{a.epochs - 1}); {a.files} files x {a.size} B, "
              f"{a.iops} IOPS source, {a.readers} readers paced to {a.rate:g} samples/s")
        print(f"{'c':>5} {'config':15} {'hit ratio':>9} {'theory':>22} {'source/data set':>15} "
              f"{'samples/s':>9} {'x page cache':>12}")
        for s in summary:
            th = s["theory"]
            fmt = lambda v, f: "-" if v is None else format(v, f)  # noqa: E731
            print(f"{s['fraction']:5.2f} {s['config']:15} {fmt(s['hit_ratio'], '9.3f')} "
                  f"{'c ' + format(th['static'], '.2f') + ' c²/2 ' + format(th['lru'], '.2f') + ' rs ' + format(th['remaining_set'], '.2f'):>22} "
                  f"{fmt(s['source_bytes_per_dataset'], '15.3f')} {fmt(s['samples_per_s'], '9.1f')} "
                  f"{fmt(s['vs_page_cache'], '12.2f')}")
        if seq["speedup_median"] is not None:
            print(f"\nSequential epoch, SSD warm, RAM and page cache cold, 1 reader: "
                  f"{seq['files_per_s_on']:.0f} files/s with readahead, {seq['files_per_s_off']:.0f} "
                  f"without: {seq['speedup_median']:.2f}x (runs: "
                  + ", ".join(f"{r:.2f}x" for r in seq["speedups"]) + "); ceiling (RAM tier "
                  f"warm): {seq['files_per_s_ram_warm']:.0f} files/s")
        print("\nTargets")
        for t in targets:
            v = "-" if t["value"] is None else f"{t['value']:.3f}"
            print(f"  {t['result']:4}  {v:>7}  {t['target']}")
        os.makedirs(a.out, exist_ok=True)
        commit = self.measured.get("commit") or subprocess.run(
            ["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
            text=True).stdout.strip()
        doc = {"parameters": {k: v for k, v in vars(a).items() if k != "replot"}, "commit": commit,
               "date": self.measured.get("date") or time.strftime("%Y-%m-%d %H:%M:%S %Z"),
               "cpus": os.cpu_count(),
               "loadavg_at_end": self.measured.get("loadavg_at_end") or os.getloadavg(),
               "summary": summary, "sequential": seq, "targets": targets,
               "epochs": self.rows, "sequential_runs": self.seq_rows}
        with open(os.path.join(a.out, "prefetch_bench.json"), "w") as f:
            json.dump(doc, f, indent=1)
        self.plot(summary, os.path.join(a.out, "prefetch_bench.png"))
        log(f"wrote {a.out}/prefetch_bench.json and prefetch_bench.png")

    def plot(self, summary, path):
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        xs = [i / 100 for i in range(5, 101)]
        fig, axes = plt.subplots(1, 3, figsize=(16, 4.4))
        styles = {"page cache": "s", "epochfs": "o", "epochfs, unpaced": "v", "epochfs + plan": "^"}
        for config, marker in styles.items():
            pts = [(s["fraction"], s["hit_ratio"], s["source_bytes_per_dataset"]) for s in summary
                   if s["config"] == config and s["hit_ratio"] is not None]
            axes[0].plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, label=config)
            axes[1].plot([p[0] for p in pts], [p[2] for p in pts], marker=marker, label=config)
            rate = [s["samples_per_s"] for s in summary if s["config"] == config and s["hit_ratio"] is not None]
            axes[2].plot([p[0] for p in pts], rate, marker=marker, label=config)
        th = [theory(x) for x in xs]
        for key, label, style in (("static", "c (static set)", ":"),
                                  ("lru", "c²/2 (LRU, reshuffled)", "--"),
                                  ("remaining_set", "c + c·ln(1/c) (remaining-set prefetch)", "-.")):
            axes[0].plot(xs, [t[key] for t in th], style, color="grey", linewidth=1, label=label)
        axes[1].plot(xs, [1 - x for x in xs], ":", color="grey", linewidth=1,
                     label="1 - c (all that is not cached)")
        axes[1].plot(xs, [1 - x * x / 2 for x in xs], "--", color="grey", linewidth=1,
                     label="1 - c²/2 (LRU)")
        axes[0].set_ylabel("hit ratio, steady-state epoch")
        axes[1].set_ylabel("source bytes / data set, per epoch")
        a = self.args
        axes[2].axhline(a.rate, color="grey", linestyle=":", linewidth=1,
                        label=f"the readers' pace ({a.rate:g}/s)")
        axes[2].set_ylabel("samples/s, steady-state epoch")
        axes[2].set_ylim(0, a.rate * 1.1)
        for i, ax in enumerate(axes):
            ax.set_xlabel("cache size / data set (c)")
            ax.set_xlim(0, 1)
            if i < 2:
                ax.set_ylim(0, 1.05)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        fig.suptitle(f"epochfs prefetcher: {a.files} files, {a.iops}-IOPS source, "
                     f"{a.readers} readers at {a.rate:g} samples/s")
        fig.tight_layout()
        fig.savefig(path, dpi=110)

    def replot(self, path):
        """Renders the table, the JSON and the plot again from a run's JSON (its rows are
        the measurements; the summary and the targets are recomputed)."""
        with open(path) as f:
            doc = json.load(f)
        self.rows, self.seq_rows = doc["epochs"], doc["sequential_runs"]
        self.measured = {k: doc.get(k) for k in ("commit", "date", "loadavg_at_end")}
        for k, v in doc["parameters"].items():
            if k not in ("replot", "out"):
                setattr(self.args, k, v)
        self.report()

    def main(self):
        if self.args.replot:
            return self.replot(self.args.replot)
        try:
            self.setup()
            for c in self.args.fractions:
                log(f"cache fraction {c}")
                if "baseline" in self.args.configs:
                    self.run_baseline(c)
                if "epochfs" in self.args.configs:
                    self.run_epochfs(c, publish=False)
                if "unpaced" in self.args.configs:
                    self.run_epochfs(c, publish=False, unpaced=True)
                if "plan" in self.args.configs:
                    self.run_epochfs(c, publish=True)
            if self.args.seq_repeats > 0:
                self.run_sequential()
            self.report()
        finally:
            self.cleanup.run_all()


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochfs", default=os.path.join(REPO, "build", "cli", "epochfs"))
    p.add_argument("--workdir", default="/var/tmp/epochfs-prefetch-bench")
    p.add_argument("--out", default=os.path.join(REPO, "docs", "bench"))
    p.add_argument("--files", type=int, default=3000)
    p.add_argument("--size", type=int, default=100_000)
    p.add_argument("--iops", type=int, default=300)
    p.add_argument("--rate", type=float, default=450.0, help="samples/s the readers consume at most")
    p.add_argument("--readers", type=int, default=4)
    p.add_argument("--fractions", type=float, nargs="+", default=[0.25, 0.5, 0.75])
    p.add_argument("--epochs", type=int, default=4, help="per configuration; the first is cold")
    p.add_argument("--configs", nargs="+", default=["baseline", "epochfs", "unpaced", "plan"],
                   choices=["baseline", "epochfs", "unpaced", "plan"])
    p.add_argument("--seq-files", type=int, default=0, help="files in the sequential part (0: all)")
    p.add_argument("--seq-repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--fixed-order", action="store_true",
                   help="every epoch reads the same shuffled order (a replay)")
    p.add_argument("--dataloader-batch", type=int, default=0, metavar="B",
                   help="read each epoch with a torch DataLoader of --readers workers and "
                        "batches of B files instead of threads (cache-fraction part)")
    p.add_argument("--epochfs-arg", action="append", default=[],
                   help="an extra argument for the cache-fraction mounts (repeatable)")
    p.add_argument("--quick", action="store_true", help="1500 files, 3 epochs, c = 0.5 only")
    p.add_argument("--replot", metavar="JSON",
                   help="measure nothing: render the table, JSON and plot of a saved run again")
    args = p.parse_args(argv)
    if args.quick:
        args.files, args.epochs, args.fractions, args.seq_repeats = 1500, 3, [0.5], 2
    if any(not 0 < c <= 1 for c in args.fractions):
        p.error("--fractions must be in (0, 1]")
    if args.epochs < 2:
        p.error("--epochs must be at least 2 (the first is cold)")
    return args


if __name__ == "__main__":
    if os.geteuid() != 0 and "--replot" not in sys.argv:
        sys.exit("prefetch_bench.py needs root (loop devices, cgroups, drop_caches)")
    Bench(parse_args()).main()
