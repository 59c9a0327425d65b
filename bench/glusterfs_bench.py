#!/usr/bin/python3
"""epochfs over a network filesystem: GlusterFS read directly, side by side with epochfs.

Issue 16's GlusterFS rows. A one-brick volume on this machine (Debian's
glusterfs-server, started and stopped here through tests/glusterfs.sh) holds the data
set; the same reader processes (``--readers`` Python processes with buffered
``open()``, each an interleaved slice of a shuffled order, as DataLoader workers take
theirs) read it:
  * direct: on a GlusterFS client mount;
  * epochfs: through epochfs mounted over such a client mount, nothing published;
  * epochfs plan: the same, each epoch's order written to ``.epochfs/plan`` first.

Every configuration starts cold: a fresh client mount, a fresh cache dir, the page,
dentry and inode caches dropped. Epoch 1 is then read cold and ``--warm-epochs`` more
are read with whatever the configuration kept: the warm rows compare epochfs with
GlusterFS's own warm client (its kernel page cache). The configurations run in
``--rounds`` interleaved rounds (direct, epochfs, epochfs plan, direct, ...) so that
the drift of a shared machine falls on every row alike; the table gives each round.

Each file read is checked (its first line is its own name, its length the data set's
size): a wrong byte fails the run.

``--brick-delay-us N`` makes the volume latency-bound, as a brick across a network is:
Gluster's own delay-gen translator holds each LOOKUP, OPEN, READ, FLUSH, STAT, ... N
microseconds in the brick before serving it (a wait, not CPU). On this machine's
local bricks a read otherwise costs CPU, not time on a wire, and two cores run out
before more reads in flight can pay.

Prints a table with the issue's targets; writes docs/bench/glusterfs/glusterfs.json and
glusterfs.png (glusterfs_delay<N>us.* with a brick delay).

    /usr/bin/python3 bench/glusterfs_bench.py            # ~4 minutes here
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH)
sys.path.insert(0, BENCH)
from benchenv import Cleanup, drop_caches, log, machine_busy_s, named_processes_cpu, named_processes_cpu_since, proc_cpu_seconds, unmount  # noqa: E402
from multinode_bench import BenchError, Volume, make_dataset, sh  # noqa: E402

MiB = 1 << 20
CONFIGS = ("direct", "epochfs", "epochfs plan")
# With --baseline: the same two epochfs rows with another binary, in the same rounds.
BASE_CONFIGS = ("base epochfs", "base epochfs plan")
_CTX = mp.get_context("fork")


def _read_slice(root: str, paths: list[str], size: int, conn) -> None:
    """One reader process: open, read whole, close; checks every file."""
    bad = 0
    for p in paths:
        with open(os.path.join(root, p), "rb") as f:
            data = f.read()
        if len(data) != size or not data.startswith(os.path.basename(p).encode() + b"\n"):
            bad += 1
    conn.send(bad)
    conn.close()


def read_epoch(root: str, order: list[str], readers: int, size: int, timeout: float) -> float:
    """Reads `order` with `readers` processes; the epoch's seconds. BenchError on a bad byte."""
    procs, conns = [], []
    start = time.monotonic()
    for r in range(readers):
        parent, child = _CTX.Pipe(duplex=False)
        p = _CTX.Process(target=_read_slice, args=(root, order[r::readers], size, child))
        p.start()
        child.close()
        procs.append(p)
        conns.append(parent)
    bad = 0
    for p, c in zip(procs, conns):
        left = start + timeout - time.monotonic()
        if not c.poll(max(left, 0)):
            for q in procs:
                q.kill()
            raise BenchError(f"the readers did not finish in {timeout:.0f} s")
        try:
            bad += c.recv()
        except EOFError:
            raise BenchError(f"a reader died (exit code {p.join() or p.exitcode})")
        p.join()
    seconds = time.monotonic() - start
    if bad:
        raise BenchError(f"{bad} files read with wrong bytes")
    return seconds


# The GlusterFS processes on this machine: the clients (the FUSE mount), the bricks, glusterd.
GLUSTER_PROCESSES = {"glusterfs", "glusterfsd", "glusterd"}


class Bench:
    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        self.cleanup = Cleanup()
        self.volume = Volume(self.cleanup, a.workdir, "glusterfs-bench")
        self.epochfs_mount: str | None = None
        self.paths: list[str] = []
        self.runs: list[dict] = []
        self.configs = CONFIGS + (BASE_CONFIGS if a.baseline else ())
        self.binary = a.epochfs  # the binary of the configuration running now

    def order(self, epoch: int) -> list[str]:
        order = list(self.paths)
        random.Random(self.a.seed * 1000 + epoch).shuffle(order)
        return order

    def status(self) -> dict:
        return json.loads(sh([self.binary, "status", self.epochfs_mount, "--json"]))

    def stop_config(self) -> None:
        if self.epochfs_mount:
            subprocess.run([self.binary, "umount", self.epochfs_mount], capture_output=True, timeout=120)
            unmount(self.epochfs_mount)
            self.epochfs_mount = None
        self.volume.unmount_clients()

    def run_config(self, config: str, round_no: int) -> dict:
        a = self.a
        log(f"round {round_no}: {config}")
        run = {"config": config, "round": round_no, "epochs": []}
        client = os.path.join(a.workdir, "client")
        self.binary = a.baseline if config.startswith("base ") else a.epochfs
        try:
            self.volume.mount_clients([client])
            root = client
            if config != "direct":
                mnt, cache = os.path.join(a.workdir, "mnt"), os.path.join(a.workdir, "cache")
                shutil.rmtree(cache, ignore_errors=True)
                os.makedirs(mnt, exist_ok=True)
                sh([self.binary, "mount", client, mnt, "--cache-dir", cache, "--ram", a.ram,
                    "--log-level", "warn", *a.epochfs_arg])
                self.epochfs_mount = root = mnt
            drop_caches()
            if a.list_first:
                # As torchvision's DatasetFolder does when it is made: before the first epoch, not
                # timed. The kernel then knows every inode (READDIRPLUS) before the first open.
                listed = sum(len(fs) for _, _, fs in os.walk(os.path.join(root, "data")))
                if listed != len(self.paths):
                    raise BenchError(f"listed {listed} files, not {len(self.paths)}")
            for epoch in range(1 + a.warm_epochs):
                order = self.order(epoch)
                before = self.status() if self.epochfs_mount else None
                if a.brick_profile:
                    self.brick_fops()  # starts the epoch's interval
                busy0, gluster0 = machine_busy_s(), named_processes_cpu(GLUSTER_PROCESSES)
                daemon0 = (proc_cpu_seconds(before["pid"]) or 0.0) if before else 0.0
                t0 = time.monotonic()
                if config.endswith("epochfs plan"):
                    # Part of the epoch: a loader publishes its order before the first read.
                    with open(os.path.join(root, ".epochfs", "plan"), "w") as f:
                        f.write("epochfs-plan 1\n" + "".join(p + "\n" for p in order) + "\n")
                publish_s = time.monotonic() - t0
                seconds = publish_s + read_epoch(root, order, a.readers, a.size, a.epoch_timeout)
                e = {"epoch": epoch + 1, "seconds": round(seconds, 3),
                     "files_per_s": round(len(order) / seconds, 1), "publish_seconds": round(publish_s, 3)}
                # Where the machine's CPU went: GlusterFS's own processes (client and bricks),
                # the epochfs daemon, and all the rest (the readers, the kernel's threads). An epoch whose busy time
                # is about cores x seconds is CPU-bound.
                busy = machine_busy_s() - busy0
                gluster_by_name = named_processes_cpu_since(gluster0, GLUSTER_PROCESSES)
                gluster = sum(gluster_by_name.values())
                daemon = (proc_cpu_seconds(before["pid"]) or 0.0) - daemon0 if before else 0.0
                e["cpu"] = {"busy_fraction": round(busy / (seconds * (os.cpu_count() or 1)), 3),
                            "glusterfs_ms_per_file": round(1000 * gluster / len(order), 3),
                            "glusterfs_ms_per_file_by_process": {
                                name: round(1000 * cpu / len(order), 3) for name, cpu in gluster_by_name.items()},
                            "epochfs_ms_per_file": round(1000 * daemon / len(order), 3),
                            "rest_ms_per_file": round(1000 * (busy - gluster - daemon) / len(order), 3)}
                if a.brick_profile:
                    # What the epoch cost the bricks, per file read (all bricks together).
                    fops = self.brick_fops()
                    e["brick_fops_per_file"] = {k: round(v / len(order), 2) for k, v in fops.items()}
                if before is not None:
                    after = self.status()
                    reqs = {k: after["requests"].get(k, 0) - before["requests"].get(k, 0)
                            for k in ("lookup", "open", "read", "getattr", "ioctl")}
                    e.update(source_mib=round((after["source_bytes"] - before["source_bytes"]) / MiB, 1),
                             prefetch_hits=after["prefetch_hits"] - before["prefetch_hits"],
                             pushed_mib=round((after["pushed_bytes"] - before["pushed_bytes"]) / MiB, 1),
                             requests=reqs, source_depth=after.get("prefetch_source_depth"),
                             pace_reads_per_s=round(after.get("prefetch_pace_reads_per_s", 0)),
                             pace_slowdowns=after.get("prefetch_pace_slowdowns", 0) - before.get(
                                 "prefetch_pace_slowdowns", 0),
                             base_latency_us=after.get("source_base_latency_us"),
                             # Absent from binaries without the readahead gate.
                             gate=after.get("readahead_gate"),
                             gate_offs=after.get("readahead_gate_offs", 0) - before.get("readahead_gate_offs", 0),
                             overtaken=after.get("prefetch_overtaken", 0) - before.get("prefetch_overtaken", 0))
                run["epochs"].append(e)
                extra = ""
                if "requests" in e:
                    extra = (f"; read ahead {e['prefetch_hits']}, pushed {e['pushed_mib']:.0f} MiB, "
                             f"requests {e['requests']}, depth {e['source_depth']}, pace {e['pace_reads_per_s']}/s "
                             f"({e['pace_slowdowns']} cuts), base {e['base_latency_us']} us")
                    if e["gate"] is not None:
                        extra += f", overtaken {e['overtaken']}, gate {e['gate']} ({e['gate_offs']} offs)"
                extra += (f"; CPU {100 * e['cpu']['busy_fraction']:.0f}% busy, per file GlusterFS "
                          f"{e['cpu']['glusterfs_ms_per_file']:.2f} ms + epochfs {e['cpu']['epochfs_ms_per_file']:.2f} "
                          f"ms + rest {e['cpu']['rest_ms_per_file']:.2f} ms")
                if "brick_fops_per_file" in e:
                    extra += "; brick ops per file: " + ", ".join(
                        f"{k} {v}" for k, v in e["brick_fops_per_file"].items() if v >= 0.05)
                log(f"  epoch {epoch + 1}: {e['files_per_s']:.0f} files/s ({seconds:.2f} s){extra}")
        except (BenchError, RuntimeError, OSError, subprocess.TimeoutExpired) as err:
            run["error"] = str(err)
            log(f"  FAILED: {err}")
        finally:
            self.stop_config()
        return run

    def brick_fops(self) -> dict[str, int]:
        """Each operation's calls since the last call, summed over the bricks (the replicas
        each count theirs)."""
        out = sh(["gluster", "--mode=script", "volume", "profile", self.volume.name, "info", "incremental"])
        fops: dict[str, int] = {}
        for line in out.splitlines():
            m = re.match(r"\s*[\d.]+\s+[\d.]+ ns\s+[\d.]+ ns\s+[\d.]+ ns\s+(\d+)\s+([A-Z]+)\s*$", line)
            if m:
                fops[m.group(2)] = fops.get(m.group(2), 0) + int(m.group(1))
        return dict(sorted(fops.items(), key=lambda kv: -kv[1]))

    def summarize(self) -> dict:
        """Per config: epoch 1's files/s and the warm epochs', per round and their median."""
        out = {}
        for c in self.configs:
            mine = [r for r in self.runs if r["config"] == c and not r.get("error")]
            e1 = [r["epochs"][0]["files_per_s"] for r in mine]
            warm = [statistics.mean(e["files_per_s"] for e in r["epochs"][1:]) for r in mine if r["epochs"][1:]]
            out[c] = {"epoch1_files_per_s": e1, "warm_files_per_s": [round(w, 1) for w in warm],
                      "epoch1_median": statistics.median(e1) if e1 else None,
                      "warm_median": statistics.median(warm) if warm else None}
            cpus = [r["epochs"][0]["cpu"] for r in mine if "cpu" in r["epochs"][0]]
            if cpus:
                # Epoch 1's CPU per file, by who spent it (medians of the rounds). The bricks
                # are GlusterFS's servers: a cluster runs them on other machines, here they
                # share this one's cores with the client, the daemon and the readers.
                split = {"brick": [u["glusterfs_ms_per_file_by_process"].get("glusterfsd", 0.0) for u in cpus],
                         "glusterfs_client": [u["glusterfs_ms_per_file_by_process"].get("glusterfs", 0.0)
                                              for u in cpus],
                         "epochfs": [u["epochfs_ms_per_file"] for u in cpus],
                         "rest": [u["rest_ms_per_file"] for u in cpus]}
                ms = {k: round(statistics.median(v), 3) for k, v in split.items()}
                total = sum(ms.values())
                cores = os.cpu_count() or 1
                out[c]["epoch1_cpu_ms_per_file"] = ms
                out[c]["epoch1_busy_fraction"] = round(statistics.median(u["busy_fraction"] for u in cpus), 3)
                # What the cores allow: all of it on this machine, and without the bricks.
                out[c]["epoch1_cpu_bound_files_per_s"] = round(1000 * cores / total) if total else None
                out[c]["epoch1_cpu_bound_without_bricks_files_per_s"] = (
                    round(1000 * cores / (total - ms["brick"])) if total > ms["brick"] else None)
        return out

    def targets(self, s: dict) -> list[dict]:
        """Each ratio from the medians of the rounds, each round's own ratio beside it."""
        def ratio(c: str, key: str) -> dict:
            base = s["direct"][key + "_files_per_s"]
            mine = s[c][key + "_files_per_s"]
            per_round = [round(m / b, 2) for m, b in zip(mine, base)] if base and mine else []
            med = (round(s[c][key + "_median"] / s["direct"][key + "_median"], 2)
                   if s[c][key + "_median"] and s["direct"][key + "_median"] else None)
            return {"value": med, "per_round": per_round}
        t = []
        rows = [("epoch 1 >= 1.0x the readers on GlusterFS directly", "epochfs", "epoch1", 1.0),
                ("epoch 1 with a published plan >= 2x the readers on GlusterFS directly", "epochfs plan",
                 "epoch1", 2.0),
                ("warm epochs >= 1.0x GlusterFS's own warm client", "epochfs", "warm", 1.0),
                ("warm epochs, plan published, >= 1.0x GlusterFS's own warm client", "epochfs plan", "warm", 1.0)]
        if self.a.baseline:
            rows += [("(baseline) " + name, "base " + c, key, goal) for name, c, key, goal in rows]
        for name, c, key, goal in rows:
            r = ratio(c, key)
            r.update(target=name, status="n/a" if r["value"] is None else ("PASS" if r["value"] >= goal else "MISS"))
            t.append(r)
        return t

    def report(self, s: dict, targets: list[dict]) -> str:
        lines = [f"{'row':<17} {'epoch 1 files/s (rounds)':<30} {'median':>7} {'warm files/s (rounds)':<30} "
                 f"{'median':>7}"]
        for c in self.configs:
            d = s[c]
            lines.append(f"{c:<17} {' / '.join(f'{v:.0f}' for v in d['epoch1_files_per_s']):<30} "
                         f"{d['epoch1_median'] or 0:>7.0f} {' / '.join(f'{v:.0f}' for v in d['warm_files_per_s']):<30} "
                         f"{d['warm_median'] or 0:>7.0f}")
        if any("epoch1_cpu_ms_per_file" in s[c] for c in self.configs):
            lines.append("")
            lines.append(f"{'epoch 1 CPU':<17} {'ms per file: bricks + client + epochfs + rest':<46} {'busy':>5} "
                         f"{'cores allow':>12} {'without bricks':>15}")
            for c in self.configs:
                d = s[c]
                if "epoch1_cpu_ms_per_file" not in d:
                    continue
                ms = d["epoch1_cpu_ms_per_file"]
                parts = " + ".join(f"{ms[k]:.2f}" for k in ("brick", "glusterfs_client", "epochfs", "rest"))
                lines.append(f"{c:<17} {parts:<46} {100 * d['epoch1_busy_fraction']:>4.0f}% "
                             f"{d['epoch1_cpu_bound_files_per_s'] or 0:>12} "
                             f"{d['epoch1_cpu_bound_without_bricks_files_per_s'] or 0:>15}")
        for r in self.runs:
            if r.get("error"):
                lines.append(f"round {r['round']} {r['config']}: FAILED: {r['error']}")
        lines.append("")
        lines += [f"  [{t['status']:>4}] {t['target']}: {t['value']} (per round {t['per_round']})" for t in targets]
        return "\n".join(lines)

    def plot(self, s: dict, path: str) -> None:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            log("matplotlib missing: no plot")
            return
        fig, ax = plt.subplots(figsize=(7, 4))
        width = 0.8 / len(self.configs)
        for j, c in enumerate(self.configs):
            vals = [s[c]["epoch1_median"] or 0, s[c]["warm_median"] or 0]
            xs = [i + (j - (len(self.configs) - 1) / 2) * width for i in range(2)]
            ax.bar(xs, vals, width, label=c, color=f"C{j}")
            for x, key in zip(xs, ("epoch1_files_per_s", "warm_files_per_s")):
                ax.plot([x] * len(s[c][key]), s[c][key], "k.", ms=4)
        ax.set_xticks(range(2))
        ax.set_xticklabels(["epoch 1 (cold client)", "warm epochs"])
        ax.set_ylabel("files/s (median of rounds; dots: each round)")
        ax.legend(fontsize=8)
        delay = f", brick delay {self.a.brick_delay_us} us" if self.a.brick_delay_us else ""
        ax.set_title(f"{self.a.files} files x {self.a.size // 1000} KB on GlusterFS{delay}, {self.a.readers} "
                     f"readers with buffered open()", fontsize=10)
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)

    def delay_brick(self, us: int) -> None:
        """Every metadata and read operation waits `us` in the brick (debug/delay-gen)."""
        log(f"brick delay: {us} us per operation")
        vol = self.volume.name
        for key, value in (("delay-gen", "posix"), ("delay-gen.delay-duration", str(us)),
                           ("delay-gen.delay-percentage", "100"),
                           ("delay-gen.enable", "lookup,stat,fstat,open,read,flush,opendir,readdirp,"
                                                "readdir,getxattr,fgetxattr,statfs,access"),
                           # The delay is slept in the brick's io-threads: with the default 16
                           # they, not the wait, would cap the operations in flight.
                           ("performance.io-thread-count", "64")):
            sh(["gluster", "--mode=script", "volume", "set", vol, key, value])
        # A new translator in the brick's graph takes a restart of the brick.
        sh(["gluster", "--mode=script", "volume", "stop", vol, "force"])
        sh(["gluster", "--mode=script", "volume", "start", vol])

    def main(self) -> int:
        a = self.a
        self.cleanup.install()
        try:
            shutil.rmtree(a.workdir, ignore_errors=True)
            os.makedirs(a.workdir)
            log(f"GlusterFS volume under {a.workdir}")
            source = self.volume.start()
            log(f"data set: {a.files} files x {a.size} bytes ({a.files * a.size / MiB:.0f} MiB)")
            make_dataset(source, a.files, a.size, a.classes, a.seed)
            self.paths = sorted(os.path.relpath(os.path.join(d, f), source)
                                for d, _, fs in os.walk(os.path.join(source, "data")) for f in fs)
            self.volume.unmount_clients()  # the first round's client starts cold like the rest
            if a.brick_delay_us:
                self.delay_brick(a.brick_delay_us)
            if a.brick_profile:
                sh(["gluster", "--mode=script", "volume", "profile", self.volume.name, "start"])
            for round_no in range(1, a.rounds + 1):
                for c in self.configs:
                    self.runs.append(self.run_config(c, round_no))
        finally:
            self.stop_config()
            self.cleanup.run_all()
        s = self.summarize()
        targets = self.targets(s)
        text = self.report(s, targets)
        print(text)
        os.makedirs(a.out, exist_ok=True)
        commit = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip()
        name = "glusterfs" + (f"_delay{a.brick_delay_us}us" if a.brick_delay_us else "") + (
            "_listed" if a.list_first else "")
        with open(os.path.join(a.out, name + ".json"), "w") as f:
            json.dump({"params": vars(a), "commit": commit,
                       "machine": {"cpus": os.cpu_count(), "kernel": platform.release()},
                       "loadavg": os.getloadavg(), "summary": s, "targets": targets, "runs": self.runs,
                       "table": text}, f, indent=1)
        self.plot(s, os.path.join(a.out, name + ".png"))
        log(f"wrote {a.out}/{name}.json and {name}.png")
        return 1 if any(r.get("error") for r in self.runs) else 0


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochfs", default=os.path.join(REPO, "build", "cli", "epochfs"))
    p.add_argument("--baseline", default="",
                   help="another epochfs binary: its rows (\"base epochfs\", \"base epochfs plan\") run in the "
                        "same rounds, side by side")
    p.add_argument("--workdir", default="/var/tmp/epochfs-glusterfs-bench")
    p.add_argument("--out", default=os.path.join(REPO, "docs", "bench", "glusterfs"))
    p.add_argument("--files", type=int, default=3000)
    p.add_argument("--size", type=int, default=110_000)
    p.add_argument("--classes", type=int, default=30)
    p.add_argument("--readers", type=int, default=4)
    p.add_argument("--warm-epochs", type=int, default=2)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--ram", default="1G", help="epochfs --ram (ample: these rows are not about memory)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--list-first", action="store_true",
                   help="the readers list the data set before epoch 1 (as DatasetFolder does), untimed")
    p.add_argument("--brick-delay-us", type=int, default=0,
                   help="hold each operation this long in the brick: a latency-bound source")
    p.add_argument("--brick-profile", action="store_true",
                   help="count the bricks' operations per epoch (gluster volume profile)")
    p.add_argument("--epoch-timeout", type=float, default=600)
    p.add_argument("--epochfs-arg", action="append", default=[], help="more epochfs mount options")
    a = p.parse_args(argv)
    a.epochfs = os.path.abspath(a.epochfs)
    a.baseline = os.path.abspath(a.baseline) if a.baseline else ""
    return a


if __name__ == "__main__":
    if os.geteuid() != 0:
        sys.exit("glusterfs_bench.py: run as root (it mounts GlusterFS and epochfs)")
    sys.exit(Bench(parse_args()).main())
