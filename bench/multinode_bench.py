#!/usr/bin/python3
"""Multi-node benchmark: N simulated nodes over one GlusterFS volume, one rank each.

Each simulated node has what a real one has: its own GlusterFS client mount of the one
volume (Debian's glusterfs-server, a volume on a local brick, started and stopped here)
and, in the epochfs rows, its own epochfs over that mount, with its own cache dir and
``--ram`` (default 0.5x the data set). One rank per node runs multinode_rank.py: an
unmodified torchvision ``DatasetFolder`` + ``DistributedSampler(num_replicas=N)`` +
``DataLoader``, so the N ranks together read the data set once per epoch.

For each N in ``--nodes``, side by side in one run:
  * direct: the ranks read their node's GlusterFS mount;
  * epochfs: the ranks read their node's epochfs mount (no plan published);
  * epochfs run: the same ranks under ``epochfs run --`` (each rank publishes its shard
    of each epoch, and, as DistributedSampler's next order is known, the next one's);
and, first, the reference of the issue's first target: the same N nodes, each with its
whole data set already cached (``--ram`` 2x the data set, filled by ``epochfs warm
--ram`` before the first epoch). A node's pace (its samples/s) in the other rows is
compared with a node's pace there: N nodes on this 2-core machine share its CPUs, so
the reference shares them the same way.

Every configuration starts cold: fresh GlusterFS client mounts, fresh cache dirs. The
page cache is dropped before every epoch, on every row (the page cache only: dentries
and inodes stay, as they do on a node whose data set is larger than its page cache): a
node's data set is meant not to fit its page cache (which on this 24 GiB machine it
would), so the node's own tiers are what it has. Between epochs all ranks wait, so that each epoch starts together and each
node's status is read at its edges.

Per epoch and row: the epoch time (the slowest rank's), the bytes each node read from
GlusterFS (epochfs's ``source_bytes``; a direct rank reads every byte from it) summed over
nodes, the brick's own disk reads (its glusterfsd's read_bytes: ground truth for all
rows), and each node's hit ratios: RAM (bytes neither its SSD tier nor GlusterFS served:
epochfs's RAM tier or the page cache it pushed into) and any tier.

With ``--compute-ms-per-sample``, each rank's accelerator is emulated (a sleep per
batch): the data must keep up with a rate, and the source has idle time in which a node
can fetch its next epoch's shard.

Prints a table with the issue's targets; writes docs/bench/multinode/multinode.json and
multinode.png (multinode-compute.* with compute).

    /usr/bin/python3 bench/multinode_bench.py            # ~10 minutes here
    /usr/bin/python3 bench/multinode_bench.py --quick    # ~3 minutes
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import selectors
import shutil
import statistics
import subprocess
import sys
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH)
sys.path.insert(0, BENCH)
from benchenv import Cleanup, log, unmount, wait_for_mount  # noqa: E402

MiB = 1 << 20
MODES = ("direct", "epochfs", "epochfs run")
STATUS_KEYS = ("source_bytes", "ram_hit_bytes", "ssd_hit_bytes", "miss_bytes", "pushed_bytes", "prefetch_filled")


class BenchError(Exception):
    pass


def drop_page_cache() -> None:
    """Drops the page cache, not the dentries and inodes: a node whose data set is larger
    than its page cache still keeps the names it has looked up (they are small)."""
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("1\n")


def sh(cmd: list[str], timeout: float = 120) -> str:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise BenchError(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip() or r.stdout.strip()}")
    return r.stdout


class Volume:
    """The GlusterFS volume (tests/glusterfs.sh) and each node's own client mount of it."""

    def __init__(self, cleanup: Cleanup, work: str, name: str = "multinode-gluster") -> None:
        self.cleanup = cleanup
        self.dir = os.path.join(work, name)  # names the volume: epochfs-<name>
        self.name = "epochfs-" + os.path.basename(self.dir)
        self.client_mounts: list[str] = []

    def start(self) -> str:
        r = subprocess.run(["bash", os.path.join(REPO, "tests", "glusterfs.sh"), "start", self.dir],
                           capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise BenchError(f"GlusterFS did not start: {r.stderr.strip()}")
        self.cleanup.push(f"stop GlusterFS volume {self.name}", self.stop)
        return r.stdout.strip()

    def stop(self) -> None:
        self.unmount_clients()
        subprocess.run(["bash", os.path.join(REPO, "tests", "glusterfs.sh"), "stop", self.dir],
                       capture_output=True, timeout=300)

    def mount_clients(self, paths: list[str]) -> None:
        """Fresh client mounts (a cold client: nothing in Gluster's own caches)."""
        self.unmount_clients()
        for path in paths:
            os.makedirs(path, exist_ok=True)
            sh(["glusterfs", "--volfile-server=localhost", f"--volfile-id={self.name}", path])
            wait_for_mount(path, 30)
            self.client_mounts.append(path)

    def unmount_clients(self) -> None:
        while self.client_mounts:
            unmount(self.client_mounts.pop())

    def brick_read_bytes(self) -> int | None:
        """Bytes the brick process read from its disk so far (None if not found)."""
        r = subprocess.run(["pgrep", "-f", f"glusterfsd.*{self.name}"], capture_output=True, text=True)
        total, found = 0, False
        for pid in r.stdout.split():
            try:
                with open(f"/proc/{pid}/io") as f:
                    for line in f:
                        if line.startswith("read_bytes:"):
                            total += int(line.split()[1])
                            found = True
            except OSError:
                pass
        return total if found else None


def make_dataset(root: str, files: int, size: int, classes: int, seed: int) -> None:
    """`files` samples of `size` bytes in `classes` folders; each begins with its own name."""
    rng = random.Random(seed)
    last = time.monotonic()
    for i in range(files):
        folder = os.path.join(root, "data", f"c{i % classes:03d}")
        if i < classes:
            os.makedirs(folder, exist_ok=True)
        name = f"s{i:06d}.jpg"
        head = name.encode() + b"\n"
        with open(os.path.join(folder, name), "wb") as f:
            f.write(head + rng.randbytes(size - len(head)))
        if time.monotonic() - last > 10:
            log(f"  data set: {i + 1}/{files} files written")
            last = time.monotonic()


class Rank:
    """One multinode_rank.py process, driven line by line."""

    def __init__(self, cmd: list[str], log_path: str) -> None:
        self.log_path = log_path
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                     text=True, bufsize=1, start_new_session=True)
        self.fd = self.proc.stdout.fileno()
        self.pending: list[str] = []  # complete lines read, not yet handled
        self.partial = b""

    def read_lines(self) -> bool:
        """Reads what the pipe has (one read: select said it is readable) into `pending`;
        False at end of file. Raw reads: a buffered readline() would keep lines select
        cannot see."""
        chunk = os.read(self.fd, 65536)
        if not chunk:
            return False
        lines = (self.partial + chunk).split(b"\n")
        self.partial = lines.pop()
        self.pending += [line.decode(errors="replace") for line in lines]
        return True

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, 9)
            except ProcessLookupError:
                pass
        self.proc.wait()
        self.log.close()

    def tail(self) -> str:
        try:
            with open(self.log_path) as f:
                return f.read()[-600:]
        except OSError:
            return ""


def wait_events(ranks: list[Rank], kind: str, timeout: float) -> list[dict]:
    """The next `kind` event of every rank (others are skipped); BenchError on timeout or exit."""
    got: dict[int, dict] = {}

    def take(i: int) -> None:
        while i not in got and ranks[i].pending:
            try:
                ev = json.loads(ranks[i].pending.pop(0))
            except json.JSONDecodeError:
                continue
            if ev.get("event") == kind:
                got[i] = ev
    sel = selectors.DefaultSelector()
    for i, r in enumerate(ranks):
        take(i)
        if i not in got:
            sel.register(r.fd, selectors.EVENT_READ, i)
    deadline = time.monotonic() + timeout
    try:
        while len(got) < len(ranks):
            left = deadline - time.monotonic()
            if left <= 0:
                raise BenchError(f"ranks {sorted(set(range(len(ranks))) - set(got))} sent no '{kind}' "
                                 f"in {timeout:.0f} s")
            for key, _ in sel.select(min(left, 1.0)):
                i = key.data
                if not ranks[i].read_lines():
                    raise BenchError(f"rank {i} exited ({ranks[i].proc.wait()}): {ranks[i].tail()}")
                take(i)
                if i in got:
                    sel.unregister(ranks[i].fd)
    finally:
        sel.close()
    return [got[i] for i in range(len(ranks))]


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.a = args
        self.cleanup = Cleanup()
        self.work = args.workdir
        self.data_bytes = args.files * args.size
        self.ram = int(args.ram_fraction * self.data_bytes)
        self.rows: list[dict] = []
        self.volume = Volume(self.cleanup, self.work)
        self.epochfs_mounts: list[str] = []

    # -- nodes ---------------------------------------------------------------------------
    def node_dir(self, i: int) -> str:
        return os.path.join(self.work, f"node{i}")

    def start_nodes(self, n: int, mode: str, ram: int) -> list[str]:
        """Fresh client mounts for n nodes (and fresh epochfs mounts); the roots the ranks read."""
        self.stop_nodes()
        clients = [os.path.join(self.node_dir(i), "gluster") for i in range(n)]
        self.volume.mount_clients(clients)
        if mode == "direct":
            return [os.path.join(c, "data") for c in clients]
        roots = []
        for i, client in enumerate(clients):
            mnt, cache = os.path.join(self.node_dir(i), "mnt"), os.path.join(self.node_dir(i), "cache")
            shutil.rmtree(cache, ignore_errors=True)
            os.makedirs(mnt, exist_ok=True)
            sh([self.a.epochfs, "mount", client, mnt, "--cache-dir", cache, "--ram", str(ram),
                "--log-level", "warn", *self.a.epochfs_arg])
            self.epochfs_mounts.append(mnt)
            roots.append(os.path.join(mnt, "data"))
        return roots

    def stop_nodes(self) -> None:
        while self.epochfs_mounts:
            mnt = self.epochfs_mounts.pop()
            subprocess.run([self.a.epochfs, "umount", mnt], capture_output=True, timeout=120)
            unmount(mnt)
        self.volume.unmount_clients()

    def status(self) -> list[dict]:
        out = []
        for mnt in self.epochfs_mounts:
            d = json.loads(sh([self.a.epochfs, "status", mnt, "--json"]))
            out.append({k: d.get(k, 0) for k in STATUS_KEYS} | {"plans": d.get("plans", 0)})
        return out

    # -- one configuration ---------------------------------------------------------------
    def run_config(self, n: int, mode: str, *, ram: int, warm: bool = False, label: str | None = None) -> dict:
        a = self.a
        label = label or mode
        log(f"N={n} {label}")
        epochs = a.epochs
        ranks: list[Rank] = []
        row = {"nodes": n, "mode": label, "ram_bytes": ram if mode != "direct" else None, "epochs": []}
        try:
            roots = self.start_nodes(n, mode, ram)
            if warm:
                t0 = time.monotonic()
                for mnt in self.epochfs_mounts:
                    sh([a.epochfs, "warm", mnt, "--ram"], timeout=1800)
                log(f"  warmed {n} node(s) in {time.monotonic() - t0:.0f} s")
        except (BenchError, RuntimeError, subprocess.TimeoutExpired) as e:
            row["error"] = str(e)
            log(f"  FAILED: {e}")
            self.stop_nodes()
            return row
        for r, root in enumerate(roots):
            cmd = [sys.executable, os.path.join(BENCH, "multinode_rank.py"), "--root", root, "--rank", str(r),
                   "--world", str(n), "--epochs", str(epochs), "--size", str(a.size),
                   "--workers", str(a.workers), "--batch-size", str(a.batch_size), "--seed", str(a.seed),
                   "--compute-ms-per-sample", f"{a.compute_ms_per_sample:g}"]
            if mode == "epochfs run":
                cmd = [a.epochfs, "run", "--"] + cmd
            ranks.append(Rank(cmd, os.path.join(self.node_dir(r), f"rank-{n}-{mode.replace(' ', '-')}.log")))
        try:
            starts = wait_events(ranks, "start", 300)
            row["list_seconds"] = max(s["list_seconds"] for s in starts)
            for epoch in range(epochs):
                wait_events(ranks, "ready", 120)
                drop_page_cache()
                before, brick0 = self.status(), self.volume.brick_read_bytes()
                for r in ranks:
                    r.proc.stdin.write("go\n")
                    r.proc.stdin.flush()
                done = wait_events(ranks, "epoch", a.epoch_timeout)
                after, brick1 = self.status(), self.volume.brick_read_bytes()
                per_node = []
                for i, ev in enumerate(done):
                    node = {"seconds": ev["seconds"], "samples": ev["samples"], "bytes": ev["bytes"],
                            "bad": ev["bad"], "expected": ev["expected"]}
                    if ev["bad"] or ev["samples"] != ev["expected"]:
                        raise BenchError(f"rank {i}: {ev['bad']} wrong samples, {ev['samples']} of "
                                         f"{ev['expected']} read")
                    if after:
                        delta = {k: after[i][k] - before[i][k] for k in STATUS_KEYS}
                        read = max(ev["bytes"], 1)
                        node.update(source_bytes=delta["source_bytes"], pushed_bytes=delta["pushed_bytes"],
                                    filled_files=delta["prefetch_filled"],
                                    ram_hit=round(1 - (delta["ssd_hit_bytes"] + delta["miss_bytes"]) / read, 4),
                                    hit=round(1 - delta["miss_bytes"] / read, 4), plans=after[i]["plans"])
                    else:
                        node.update(source_bytes=ev["bytes"])
                    per_node.append(node)
                e = {"epoch": epoch + 1,
                     "seconds": max(x["seconds"] for x in per_node),
                     "samples_per_s": round(sum(x["samples"] for x in per_node) / max(x["seconds"] for x in per_node), 1),
                     "source_bytes": sum(x["source_bytes"] for x in per_node),
                     "brick_read_bytes": None if brick0 is None or brick1 is None else brick1 - brick0,
                     "nodes": per_node}
                row["epochs"].append(e)
                hits = ", ".join(f"{x['ram_hit']:.2f}" for x in per_node if "ram_hit" in x)
                log(f"  epoch {e['epoch']}: {e['seconds']:.1f} s, "
                    f"{e['samples_per_s']:.0f} samples/s, from GlusterFS {e['source_bytes'] / MiB:.0f} MiB"
                    + (f", brick disk {e['brick_read_bytes'] / MiB:.0f} MiB" if e["brick_read_bytes"] is not None else "")
                    + (f", RAM hits per node {hits}" if hits else ""))
            for r in ranks:
                r.proc.stdin.close()
                r.proc.wait(timeout=60)
        except (BenchError, RuntimeError, subprocess.TimeoutExpired, OSError) as e:
            row["error"] = str(e)
            log(f"  FAILED: {e}")
        finally:
            for r in ranks:
                r.kill()
            self.stop_nodes()
        return row

    # -- summary -------------------------------------------------------------------------
    @staticmethod
    def steady(row: dict, key: str) -> float | None:
        vals = [e[key] for e in row["epochs"][1:] if e.get(key) is not None]
        return statistics.mean(vals) if vals else None

    def summarize(self) -> list[dict]:
        out = []
        for r in self.rows:
            # The reference: a node's pace (samples/s) with N nodes whose whole data set is
            # cached, every epoch of it.
            ref = next((c for c in self.rows if c["nodes"] == r["nodes"] and c["mode"] == "cached"
                        and not c.get("error") and c["epochs"]), None)
            ref_rate = statistics.mean(x["samples"] / x["seconds"] for e in ref["epochs"]
                                       for x in e["nodes"]) if ref else None
            if r.get("error") or not r["epochs"]:
                out.append({"nodes": r["nodes"], "mode": r["mode"], "error": r.get("error", "no epochs")})
                continue
            direct = next((d for d in self.rows if d["nodes"] == r["nodes"] and d["mode"] == "direct"
                           and not d.get("error") and d["epochs"]), None)
            e1 = r["epochs"][0]
            steady_nodes = [x for e in r["epochs"][1:] for x in e["nodes"]]
            node_rates = [x["samples"] / x["seconds"] for x in steady_nodes]
            s = {"nodes": r["nodes"], "mode": r["mode"],
                 "epoch1_s": e1["seconds"], "steady_s": self.steady(r, "seconds"),
                 "epoch1_source_mib": round(e1["source_bytes"] / MiB, 1),
                 "steady_source_mib": None if self.steady(r, "source_bytes") is None
                 else round(self.steady(r, "source_bytes") / MiB, 1),
                 "steady_brick_mib": None if self.steady(r, "brick_read_bytes") is None
                 else round(self.steady(r, "brick_read_bytes") / MiB, 1),
                 "steady_ram_hit_per_node": [round(statistics.mean(
                     e["nodes"][i]["ram_hit"] for e in r["epochs"][1:]), 3)
                     for i in range(r["nodes"])] if steady_nodes and "ram_hit" in steady_nodes[0] else None,
                 "steady_hit_per_node": [round(statistics.mean(
                     e["nodes"][i]["hit"] for e in r["epochs"][1:]), 3)
                     for i in range(r["nodes"])] if steady_nodes and "hit" in steady_nodes[0] else None,
                 "epoch1_x_direct": round(direct["epochs"][0]["seconds"] / e1["seconds"], 2) if direct else None,
                 "steady_x_direct": round(self.steady(direct, "seconds") / self.steady(r, "seconds"), 2)
                 if direct and self.steady(r, "seconds") and self.steady(direct, "seconds") else None,
                 "node_rate_x_cached": round(min(node_rates) / ref_rate, 2) if node_rates and ref_rate else None}
            out.append(s)
        return out

    def targets(self, summary: list[dict]) -> list[dict]:
        t = []

        def add(name, value, ok):
            t.append({"target": name, "value": value,
                      "status": "n/a" if value is None else ("PASS" if ok(value) else "MISS")})
        for s in summary:
            if s.get("error") or s["mode"] != "epochfs run":
                continue
            n = s["nodes"]
            add(f"N={n}, plans published: each node's steady pace >= 0.8x a node with all cached",
                s["node_rate_x_cached"], lambda v: v >= 0.8)
            add(f"N={n}, plans published: epoch 1 >= 2x the ranks reading GlusterFS directly",
                s["epoch1_x_direct"], lambda v: v >= 2.0)
        one = next((s for s in summary if s["nodes"] == 1 and s["mode"] == "epochfs run" and not s.get("error")), None)
        add(f"unmodified torchvision script under epochfs run, --ram {self.a.ram_fraction:g}x data: "
            "steady RAM hits >= 0.9", one["steady_ram_hit_per_node"][0] if one and one["steady_ram_hit_per_node"]
            else None, lambda v: v >= 0.9)
        return t

    def report(self, summary: list[dict], targets: list[dict]) -> str:
        lines = [f"{'N':>2} {'row':<12} {'epoch 1 s':>9} {'steady s':>9} {'e1 x dir':>8} {'st x dir':>8} "
                 f"{'GlusterFS MiB e1/steady':>24} {'brick MiB':>9} {'node x cached':>13}  RAM hits (any tier) per node"]
        for s in summary:
            if s.get("error"):
                lines.append(f"{s['nodes']:>2} {s['mode']:<12} FAILED: {s['error']}")
                continue

            def f(v, spec):
                return "-" if v is None else format(v, spec)
            hits = "-"
            if s["steady_ram_hit_per_node"]:
                hits = " ".join(f"{r:.2f} ({h:.2f})" for r, h in zip(s["steady_ram_hit_per_node"],
                                                                   s["steady_hit_per_node"]))
            lines.append(f"{s['nodes']:>2} {s['mode']:<12} {s['epoch1_s']:>9.1f} {f(s['steady_s'], '9.1f')} "
                         f"{f(s['epoch1_x_direct'], '8.2f')} {f(s['steady_x_direct'], '8.2f')} "
                         f"{s['epoch1_source_mib']:>11.0f} / {f(s['steady_source_mib'], '10.0f')} "
                         f"{f(s['steady_brick_mib'], '9.0f')} {f(s['node_rate_x_cached'], '13.2f')}  {hits}")
        lines.append("")
        lines += [f"  [{t['status']:>4}] {t['target']}: {t['value']}" for t in targets]
        return "\n".join(lines)

    def plot(self, summary: list[dict], path: str) -> None:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            log("matplotlib missing: no plot")
            return
        ok = [s for s in summary if not s.get("error") and s["mode"] in MODES]
        ns = sorted({s["nodes"] for s in ok})
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
        width = 0.25
        for j, mode in enumerate(MODES):
            e1 = [next((s["epoch1_s"] for s in ok if s["nodes"] == n and s["mode"] == mode), 0) for n in ns]
            st = [next((s["steady_s"] or 0 for s in ok if s["nodes"] == n and s["mode"] == mode), 0) for n in ns]
            xs = [i + (j - 1) * width for i in range(len(ns))]
            ax1.bar(xs, e1, width, label=f"{mode}: epoch 1", alpha=0.45, color=f"C{j}")
            ax1.bar(xs, st, width * 0.5, label=f"{mode}: steady", color=f"C{j}")
            if mode != "direct":
                hits = [next((statistics.mean(s["steady_ram_hit_per_node"]) for s in ok
                              if s["nodes"] == n and s["mode"] == mode and s["steady_ram_hit_per_node"]), 0)
                        for n in ns]
                ax2.bar(xs, hits, width, label=mode, color=f"C{j}")
        ref = [next((s["steady_s"] for s in summary if s["nodes"] == n and s["mode"] == "cached"
                     and not s.get("error")), None) for n in ns]
        if any(ref):
            ax1.plot(range(len(ns)), [r or 0 for r in ref], "k:", marker="_", ms=20, label="all cached (steady)")
        for ax in (ax1, ax2):
            ax.set_xticks(range(len(ns)))
            ax.set_xticklabels([f"N={n}" for n in ns])
        ax1.set_ylabel("epoch time (s), slowest rank")
        ax1.set_title("epoch time", fontsize=10)
        ax1.legend(fontsize=7)
        ax2.set_ylabel("steady-state RAM hit ratio (mean of nodes)")
        ax2.set_ylim(0, 1.05)
        ax2.axhline(0.9, color="k", ls=":")
        ax2.set_title("RAM hits per node", fontsize=10)
        ax2.legend(fontsize=7)
        compute = (f"; {self.a.compute_ms_per_sample:g} ms of compute per sample"
                   if self.a.compute_ms_per_sample else "; no compute")
        fig.suptitle(f"{self.a.files} files x {self.a.size // 1000} KB on GlusterFS; one DistributedSampler rank "
                     f"per node; --ram {self.a.ram_fraction:g}x data per node{compute}", fontsize=10)
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)

    # -- main ------------------------------------------------------------------------------
    def main(self) -> int:
        a = self.a
        self.cleanup.install()
        try:
            shutil.rmtree(self.work, ignore_errors=True)
            os.makedirs(self.work)
            log(f"GlusterFS volume under {self.work}")
            source = self.volume.start()
            log(f"data set: {a.files} files x {a.size} bytes ({self.data_bytes / MiB:.0f} MiB)")
            make_dataset(source, a.files, a.size, a.classes, a.seed)
            for n in a.nodes:
                self.rows.append(self.run_config(n, "epochfs", ram=2 * self.data_bytes, warm=True, label="cached"))
                for mode in MODES:
                    self.rows.append(self.run_config(n, mode, ram=self.ram))
        finally:
            self.stop_nodes()
            self.cleanup.run_all()
        summary = self.summarize()
        targets = self.targets(summary)
        text = self.report(summary, targets)
        print(text)
        os.makedirs(a.out, exist_ok=True)
        commit = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip()
        stem = "multinode" if a.compute_ms_per_sample == 0 else "multinode-compute"
        with open(os.path.join(a.out, stem + ".json"), "w") as f:
            json.dump({"params": {k: v for k, v in vars(a).items()}, "commit": commit,
                       "machine": {"cpus": os.cpu_count(), "kernel": platform.release()},
                       "loadavg": os.getloadavg(), "summary": summary, "targets": targets, "rows": self.rows,
                       "table": text}, f, indent=1)
        self.plot(summary, os.path.join(a.out, stem + ".png"))
        log(f"wrote {a.out}/{stem}.json and {stem}.png")
        return 1 if any(r.get("error") for r in self.rows) else 0


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochfs", default=os.path.join(REPO, "build", "cli", "epochfs"))
    p.add_argument("--workdir", default="/var/tmp/epochfs-multinode")
    p.add_argument("--out", default=os.path.join(REPO, "docs", "bench", "multinode"))
    p.add_argument("--files", type=int, default=6000)
    p.add_argument("--size", type=int, default=110_000)
    p.add_argument("--classes", type=int, default=60)
    p.add_argument("--nodes", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--epochs", type=int, default=3, help="per configuration: epoch 1 is cold, the rest steady")
    p.add_argument("--ram-fraction", type=float, default=0.5, help="each node's --ram, as a fraction of the data")
    p.add_argument("--workers", type=int, default=2, help="DataLoader num_workers per rank")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epoch-timeout", type=float, default=600)
    p.add_argument("--compute-ms-per-sample", type=float, default=0.0,
                   help="each rank's emulated accelerator time per sample (0: the ranks only read); "
                        "the outputs are then named multinode-compute.*")
    p.add_argument("--epochfs-arg", action="append", default=[], help="more epochfs mount options")
    p.add_argument("--quick", action="store_true", help="1200 files, N = 1 2, 2 epochs")
    a = p.parse_args(argv)
    if a.quick:
        a.files, a.nodes, a.epochs = 1200, [1, 2], 2
    if a.epochs < 2:
        p.error("--epochs must be >= 2 (epoch 1 is cold)")
    a.epochfs = os.path.abspath(a.epochfs)
    return a


if __name__ == "__main__":
    if os.geteuid() != 0:
        sys.exit("multinode_bench.py: run as root (it mounts GlusterFS and epochfs)")
    sys.exit(Bench(parse_args()).main())
