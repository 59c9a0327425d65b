#!/usr/bin/python3
"""bigdata_bench: a data set larger than memory -- epochfs against a plain local copy.

epoch_bench gives every contender all the RAM it wants, so its warm epochs come from the
page cache.  Real training machines often have less memory than their data set, and then
the usual answer -- copy the data set to the local SSD and read it from there -- reads
through a page cache that thrashes under random epochs.  This script builds that
situation on one machine and measures, side by side in one run:

* the data: an ImageFolder-like set of real, decodable JPEGs (default 8,000 samples,
  log-normal sizes around 110 KB, ``dataset.jpeg_bytes``) plus a .json label for a
  quarter of them, on an ext4 loop image throttled to ``--iops`` read IOPS by a cgroup v1
  blkio group (as epoch_bench does); a manifest with size + CRC-32 of every file;
* the memory: a cgroup v1 memory group limited to ``--mem-fraction`` (0.4) of the data
  set's bytes, holding the readers, the copy, the DataLoader workers *and* the epochfs
  daemon, whose ``--ram`` is ``--ram-fraction`` (0.5) of that limit.  The benchmark process
  itself stays outside (the group's OOM killer picks the biggest process by total RSS,
  and must not pick the harness); readers join from inside (``run_epoch(child_setup=)``),
  the copy through a shell that joins and then execs ``cp``, the daemon because the
  benchmark joins for the moment it runs ``epochfs mount`` (the daemon is checked to be
  in the group).  Per row: the group's peak usage (``memory.max_usage_in_bytes``, reset
  before each row), its peak anonymous + shared memory (sampled: what reclaim cannot free;
  the page cache always fills the limit), ``memory.failcnt`` and OOM kills
  (``oom_kill`` in ``memory.oom_control``);
* the rows, each read by the raw reader (``readers.py``: ``--readers`` processes, a
  shuffled epoch, every file checked; files/s, MB/s, source IOs from the loop device):
    1. ``source``: the throttled source directly, page cache dropped, under the limit;
    2. ``plain copy``: ``cp -a`` of the source to the cache disk (the workdir's disk, as
       the epochfs cache dir) inside the group -- its duration (cp + sync) is reported --,
       then caches dropped and one cold epoch, then steady-state epochs, under the limit;
    3. ``epochfs``: mounted over the source with an empty cache dir (page cache dropped):
       epoch 1 fills the cache; steady-state epochs (each and their mean); then unmount,
       drop caches, mount on the same cache dir: one epoch after a restart;
    4. ``tmpfs``: the copy written to a tmpfs during generation, *no* memory limit: the
       ceiling of this machine's reader;
* the real client (``realclient.py``, MLPerf Storage's method): torchvision
  ``DatasetFolder`` + ``DataLoader(shuffle=True, num_workers=4)`` whose training loop
  sleeps ``--compute-ms-per-sample`` per sample to stand in for N accelerators (N in
  ``--accelerators``, one epoch each; a row stops growing N once AU < 0.5).  AU = compute
  time / epoch wall time.  Rows: tmpfs (no limit), the plain copy and epochfs's steady
  state (same mount, after its raw epochs) under the limit, and with
  ``--real-client-source`` the source at N = 1.  The workers need memory of their own
  that does not depend on the data set (~18 MiB each measured, 24 MiB allowed), so
  during the real-client rows the group's limit is raised by ``--client-allowance``
  (default 24 MiB per worker); without it the quick data set's ~130 MB limit could not
  even hold the workers, and the page cache share of the full run would shrink by a
  fixed cost that a larger data set would not have.  Both limits are in the JSON.
* the targets, PASS/MISS (never asserted): after a restart with caches dropped epochfs
  >= 2x the plain copy read cold; epochfs's steady state >= 1.5x the plain copy's
  steady state and >= 10x the source; the real client at the largest N where tmpfs holds
  AU >= 0.9: epochfs's AU within 0.05 of tmpfs's; the daemon's peak RSS <= --ram +
  100 MiB; no OOM kill in any row.

Output: a live line per epoch, a table, an AU table, the targets, and in ``--out``
``bigdata_bench.json`` (every number, parameters, commands, machine, git commit, load
average) and ``bigdata_bench.png``.  Exit status: 0 when the run completed (targets may
MISS), 1 on wrong bytes, an I/O error or a hang (a row that fails after an OOM kill in
the group is recorded, the run goes on to the other rows, and exits 1 at the end), 2 on a
setup error, 130 on Ctrl-C.

Run as root with Debian's interpreter (numpy, torch, torchvision, PIL, matplotlib):

    /usr/bin/python3 bench/bigdata_bench.py --quick    # 3,000 samples, N in (1, 2): ~5 min
    /usr/bin/python3 bench/bigdata_bench.py            # 8,000 samples: ~15 min here

See bench/README.md ("bench/bigdata_bench.py") for what each row means.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import selectors
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time

import numpy as np

from benchenv import (BLKIO_ROOT, MEMORY_ROOT, BlkioThrottle, Cleanup, LoopImage, MemoryCgroup, Workspace,
                      drop_caches, log, mount_tmpfs, read_file, run, stat_every_file, warn, write_file)
from dataset import BLOCK, JPEG_BYTES_PER_PIXEL, JPEG_QUALITY, imagefolder_plan, jpeg_bytes, materialize
from epoch_bench import git_info, machine_info, resolve_epochfs
from fusemounts import EpochfsMount, MountError, status_delta
from readers import EpochTimeout, ReadFailure, epoch_order, run_epoch
from report import Row, write_json

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH)

#: Name of this benchmark's blkio and memory cgroups (its own, so it never touches
#: epoch_bench's group, and a sweep after a killed run knows what to remove).
CGROUP = "epochfs-bigdata"

#: Compute per sample of one emulated accelerator, in ms.  Calibrated once (not per run:
#: AU figures of two runs are comparable only with the same compute) on the 2-core dev VM:
#: realclient's 4-worker decode pipeline delivers ~330-430 samples/s from tmpfs (decode
#: ~4.5 ms per 110 KB JPEG per core; ~250/s with a compiler busy on the other core).
#: 8 ms makes N = 1 ask for 125 samples/s and N = 2 for 250/s (0.6-0.75 of that): tmpfs
#: holds AU >= 0.9 at 1-2 accelerators and not at 4 (the calibration runs' AU figures:
#: docs/benchmarks.md, "Figures behind design choices").  So epochfs is compared with
#: tmpfs where the pipeline is busy but not CPU-bound.
DEFAULT_COMPUTE_MS_PER_SAMPLE = 8.0

#: Memory the real client's DataLoader workers need for themselves, per worker: measured
#: ~18 MiB of anonymous memory each (forked torch interpreters touching their heap, the
#: decode buffers, the batches they build), rounded up.
CLIENT_ALLOWANCE_PER_WORKER = 24 << 20

AU_TARGET = 0.9      # "holds" an accelerator count
AU_STOP = 0.5        # a row stops growing N below this (saves minutes of hopeless epochs)
AU_TOLERANCE = 0.05  # epochfs's AU may trail tmpfs's by this much at N*
RSS_SLACK = 100 << 20  # daemon peak RSS may exceed --ram by this much

#: Raw-reader rows, in table order, with their labels.
ROWS = ("source", "copy-cold", "copy-steady", "epochfs-e1", "epochfs-steady", "epochfs-plan", "epochfs-restart",
        "epochfs-restart-ahead",
        "epochfs-ram-cold", "epochfs-ram-steady", "epochfs-ram-buffered", "tmpfs", "tmpfs-buffered")
LABELS = {
    "source": "source, under the limit",
    "copy-cold": "plain copy, cold",
    "copy-steady": "plain copy, steady state",
    "epochfs-e1": "epochfs epoch 1 (cold)",
    "epochfs-steady": "epochfs steady state",
    "epochfs-plan": "epochfs, order published",
    "epochfs-restart": "epochfs after a restart",
    "epochfs-restart-ahead": "  same, mounted ahead",
    "epochfs-ram-cold": "epochfs, all in RAM, restart",
    "epochfs-ram-steady": "epochfs, all in RAM, steady",
    "epochfs-ram-buffered": "  same, buffered open()",
    "tmpfs": "tmpfs, no limit (ceiling)",
    "tmpfs-buffered": "  same, buffered open()",
}
#: epochfs rows mounted with the whole data set's --ram and no memory limit.
UNLIMITED_EPOCHFS_ROWS = ("epochfs-ram-cold", "epochfs-ram-steady", "epochfs-ram-buffered")
#: "vs plain copy" compares like with like: cold rows with the copy read cold, the rest
#: with the copy's steady state.
COPY_BASELINE = {"source": "copy-cold", "copy-cold": "copy-cold", "copy-steady": "copy-steady",
                 "epochfs-e1": "copy-cold", "epochfs-steady": "copy-steady", "epochfs-restart": "copy-cold",
                 "epochfs-plan": "copy-steady", "epochfs-restart-ahead": "copy-cold",
                 "epochfs-ram-cold": "copy-cold", "epochfs-ram-steady": "copy-steady",
                 "epochfs-ram-buffered": "copy-steady", "tmpfs": "copy-steady", "tmpfs-buffered": "copy-steady"}
#: Real-client rows, in table order.
CLIENT_ROWS = ("tmpfs", "copy", "epochfs", "source")
CLIENT_LABELS = {"tmpfs": "tmpfs, no limit", "copy": "plain copy, under the limit",
                 "epochfs": "epochfs steady state, under the limit", "source": "source, under the limit"}

MiB = 1 << 20


class RowFailed(Exception):
    """A row failed after the memory group OOM-killed one of its processes: recorded as a
    finding (the target "no OOM kill" is MISS), the run goes on with the other rows."""


# --------------------------------------------------------------------------- pure helpers

def mean_or_none(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else None


def max_accelerators_at(au_by_n: dict[int, float], threshold: float = AU_TARGET) -> int:
    """The most accelerators a row holds at AU >= ``threshold``: the largest N of the
    unbroken run, in ascending N, of measured counts that all reach it (0 if the smallest
    does not).  A larger N that happens to reach it after a smaller one did not is noise."""
    best = 0
    for n in sorted(au_by_n):
        if au_by_n[n] < threshold:
            break
        best = n
    return best


def summarize(rows: list[Row]) -> dict[str, dict]:
    """Per raw-reader row kind: mean files/s and MB/s over its epochs, source IOs, memory
    group figures, daemon peak RSS, and the ratios to the plain copy and to the source."""
    out: dict[str, dict] = {}
    for key in ROWS:
        mine = [r for r in rows if r.scenario == key]
        if not mine:
            continue
        measured = [r for r in mine if not r.skipped]
        failed = [r for r in mine if r.extra.get("failed")]
        oom = [r.extra.get("oom_kills") for r in mine if r.extra.get("oom_kills") is not None]
        entry: dict = {"label": LABELS[key], "epochs": len(measured), "failed_epochs": len(failed),
                       "oom_kills": sum(oom) if oom else None,
                       "under_memory_limit": any(r.extra.get("memcg_limit_bytes") for r in mine)}
        if not measured:
            entry["note"] = next((r.note for r in mine if r.note), "not run")
            out[key] = entry
            continue
        ios = [r.source_ios for r in measured if r.source_ios is not None]
        files = sum(r.result.files for r in measured)
        peak = [r.extra.get("memcg_max_usage_bytes") for r in mine]
        anon = [r.extra.get("memcg_anon_peak_bytes") for r in mine]
        fails = [r.extra.get("memcg_failcnt") for r in mine if r.extra.get("memcg_failcnt") is not None]
        rss = [r.daemon_peak_rss for r in mine if r.daemon_peak_rss is not None]
        entry.update({
            "files_per_s": round(mean_or_none(r.result.files_per_s for r in measured), 2),
            "files_per_s_by_epoch": [round(r.result.files_per_s, 2) for r in measured],
            "mb_per_s": round(mean_or_none(r.result.mb_per_s for r in measured), 2),
            "source_ios": sum(ios) if ios else None,
            "source_ios_per_file": round(sum(ios) / files, 4) if ios and files else None,
            "memcg_max_usage_bytes": max((p for p in peak if p is not None), default=None),
            "memcg_anon_peak_bytes": max((p for p in anon if p is not None), default=None),
            "memcg_failcnt": sum(fails) if fails else None,
            "daemon_peak_rss_bytes": max(rss) if rss else None,
        })
        out[key] = entry
    for key, entry in out.items():
        fps = entry.get("files_per_s")
        base = out.get(COPY_BASELINE[key], {}).get("files_per_s")
        src = out.get("source", {}).get("files_per_s")
        entry["x_plain_copy"] = round(fps / base, 3) if fps and base else None
        entry["x_source"] = round(fps / src, 3) if fps and src else None
    return out


def _ratio_target(label: str, value: float | None, base: float | None, factor: float,
                  what: str, base_what: str) -> dict:
    entry = {"target": label, "value": value, "baseline": base, "factor": factor}
    if value is None or not base:
        missing = what if value is None else base_what
        entry.update(status="n/a", ratio=None, detail=f"{missing} not measured")
    else:
        ratio = value / base
        entry.update(status="PASS" if ratio >= factor else "MISS", ratio=round(ratio, 3),
                     detail=f"{what} {value:.0f} files/s = {ratio:.2f}x {base_what} {base:.0f} files/s")
    return entry


def evaluate_targets(summary: dict[str, dict], client_au: dict[str, dict[int, float]], *,
                     ram_bytes: int, daemon_peak_rss: int | None, oom_kills: int | None) -> list[dict]:
    """The benchmark's targets as PASS / MISS / n/a entries with the numbers behind them.

    ``client_au``: real-client row -> {N: AU}; ``daemon_peak_rss``: the largest peak RSS
    of an epochfs daemon in the run; ``oom_kills``: OOM kills in the memory group over
    every limited row (None: no limited row ran)."""
    fps = {k: v.get("files_per_s") for k, v in summary.items()}
    out = [
        _ratio_target("epochfs after a restart, page cache dropped >= 2x plain copy read cold",
                      fps.get("epochfs-restart"), fps.get("copy-cold"), 2.0,
                      "epochfs after a restart", "plain copy cold"),
        _ratio_target("epochfs steady state >= 1.5x plain copy steady state, under the limit",
                      fps.get("epochfs-steady"), fps.get("copy-steady"), 1.5,
                      "epochfs steady", "plain copy steady"),
        _ratio_target("epochfs steady state >= 10x the source, under the limit",
                      fps.get("epochfs-steady"), fps.get("source"), 10.0, "epochfs steady", "source"),
    ]
    label = (f"real client: at the largest N where tmpfs holds AU >= {AU_TARGET}, "
             f"epochfs AU within {AU_TOLERANCE} of tmpfs")
    tmpfs, efs = client_au.get("tmpfs", {}), client_au.get("epochfs")
    n_star = max_accelerators_at(tmpfs) if tmpfs else 0
    entry: dict = {"target": label, "accelerators": n_star or None}
    if not tmpfs or efs is None:
        entry.update(status="n/a", detail="real client not run on " + ("tmpfs" if not tmpfs else "epochfs"))
    elif n_star == 0:
        entry.update(status="n/a", detail=f"tmpfs never holds AU >= {AU_TARGET} "
                                          f"(N={min(tmpfs)}: {tmpfs[min(tmpfs)]:.3f}); lower the compute?")
    else:
        t_au = tmpfs[n_star]
        e_au = efs.get(n_star)
        if e_au is None:  # epochfs stopped below AU_STOP at a smaller N (or failed)
            below = [n for n in efs if n < n_star]
            e_au = efs[max(below)] if below else None
            entry.update(status="MISS", tmpfs_au=t_au, epochfs_au=None,
                         detail=f"N={n_star}: tmpfs AU {t_au:.3f}; epochfs not measured there"
                                + (f" (stopped after AU {e_au:.3f})" if e_au is not None else ""))
        else:
            entry.update(status="PASS" if e_au >= t_au - AU_TOLERANCE else "MISS", tmpfs_au=t_au,
                         epochfs_au=e_au, detail=f"N={n_star}: epochfs AU {e_au:.3f}, tmpfs AU {t_au:.3f} "
                                                 f"(difference {t_au - e_au:+.3f})")
    out.append(entry)
    limit = ram_bytes + RSS_SLACK
    entry = {"target": "epochfs daemon peak RSS <= --ram + 100 MiB", "value": daemon_peak_rss, "limit": limit}
    if daemon_peak_rss is None:
        entry.update(status="n/a", detail="no epochfs daemon measured")
    else:
        entry.update(status="PASS" if daemon_peak_rss <= limit else "MISS",
                     detail=f"{daemon_peak_rss / MiB:.0f} MiB vs {ram_bytes / MiB:.0f} + 100 MiB")
    out.append(entry)
    entry = {"target": "no OOM kill in any row", "value": oom_kills}
    if oom_kills is None:
        entry.update(status="n/a", detail="no row ran under the memory limit")
    else:
        entry.update(status="PASS" if oom_kills == 0 else "MISS", detail=f"{oom_kills} OOM kills in the memory group")
    out.append(entry)
    return out


def wait_until_mount_work_stops(fs: EpochfsMount, key: str, interval: float, polls: int,
                                timeout: float) -> int:
    """Polls the mount's stats every ``interval`` s until the counter ``key`` has stayed
    the same for ``polls`` polls in a row with the metadata warm-up over, or ``timeout``
    s pass; returns the counter's last value."""
    deadline, last, still = time.monotonic() + timeout, -1, 0
    while time.monotonic() < deadline and still < polls:
        time.sleep(interval)
        st = fs.status() or {}
        value = int(st.get(key) or 0)
        still = still + 1 if value == last and not st.get("metadata_warmup") else 0
        last = value
    return last


def _fmt(x, spec: str, width: int) -> str:
    return ("-" if x is None else format(x, spec)).rjust(width)


def _mib(x) -> float | None:
    return None if x is None else x / MiB


HEADER = (f"{'row':<28} {'ep':>4} {'files/s':>8} {'MB/s':>7} {'x copy':>7} {'x src':>7} {'src IOs':>8} "
          f"{'cg peak':>8} {'cg anon':>8} {'failcnt':>8} {'OOM':>4} {'dRSS':>6}")
HEADER_NOTE = ("x copy: against the plain copy read cold (cold rows) or in its steady state (the others); "
               "cg peak / cg anon: the memory group's peak usage / peak anonymous+shared memory (MiB); "
               "failcnt: times it hit its limit; dRSS: epochfs daemon peak RSS (MiB)")


def format_row(row: Row, summary: dict[str, dict]) -> str:
    """One table line for an epoch; ratios use what has been measured so far."""
    label = LABELS.get(row.scenario, row.scenario)
    if row.skipped:
        return f"{label:<28} {_fmt(row.epoch, 'd', 4)}  {row.note}"
    r, x = row.result, row.extra
    base = summary.get(COPY_BASELINE.get(row.scenario, ""), {}).get("files_per_s")
    src = summary.get("source", {}).get("files_per_s")
    return (f"{label:<28} {_fmt(row.epoch, 'd', 4)} {r.files_per_s:8.0f} {r.mb_per_s:7.1f} "
            f"{_fmt(r.files_per_s / base if base else None, '.2f', 7)} "
            f"{_fmt(r.files_per_s / src if src else None, '.2f', 7)} {_fmt(row.source_ios, 'd', 8)} "
            f"{_fmt(_mib(x.get('memcg_max_usage_bytes')), '.0f', 8)} "
            f"{_fmt(_mib(x.get('memcg_anon_peak_bytes')), '.0f', 8)} {_fmt(x.get('memcg_failcnt'), 'd', 8)} "
            f"{_fmt(x.get('oom_kills'), 'd', 4)} {_fmt(_mib(row.daemon_peak_rss), '.0f', 6)}"
            + (f"  ({row.note})" if row.note else ""))


def format_mean(key: str, entry: dict) -> str:
    return (f"{LABELS[key]:<28} {'mean':>4} {entry['files_per_s']:8.0f} {entry['mb_per_s']:7.1f} "
            f"{_fmt(entry.get('x_plain_copy'), '.2f', 7)} {_fmt(entry.get('x_source'), '.2f', 7)} "
            f"{_fmt(entry.get('source_ios'), 'd', 8)}")


def requests_line(row: Row) -> str | None:
    """The epochfs counters and FUSE requests per file of an epoch, or None."""
    if not row.status or row.skipped:
        return None
    counters = ", ".join(f"{k} {row.status[k]}" for k in ("source_reads", "ram_hits", "ssd_hits", "misses")
                         if k in row.status)
    req = row.status.get("requests")
    per = ""
    if isinstance(req, dict) and row.result.files:
        per = ", ".join(f"{k} {v / row.result.files:.2f}" for k, v in sorted(req.items()) if v)
    return f"{'':<34}epochfs: {counters}; requests/file: {per or '-'}"


def format_table(rows: list[Row]) -> str:
    summary = summarize(rows)
    lines = [HEADER, "-" * len(HEADER)]
    for key in ROWS:
        mine = [r for r in rows if r.scenario == key]
        for r in mine:
            lines.append(format_row(r, summary))
            extra = requests_line(r)
            if extra:
                lines.append(extra)
        entry = summary.get(key, {})
        if entry.get("epochs", 0) > 1:
            lines.append(format_mean(key, entry))
    lines.append(HEADER_NOTE)
    return "\n".join(lines)


def format_au_table(client: dict[str, list[dict]], accelerators: list[int], compute_ms: float,
                    batch: int, workers: int) -> str:
    ns = sorted(set(accelerators) | {e["accelerators"] for evs in client.values() for e in evs if "au" in e})
    head = f"{'real client AU':<38}" + "".join(f"{'N=' + str(n):>8}" for n in ns) + f"{'max N at AU>=0.9':>18}"
    lines = [f"real client: DatasetFolder + DataLoader({workers} workers), {batch} samples per accelerator "
             f"per step, {compute_ms:g} ms compute per sample",
             head, "-" * len(head)]
    for key in CLIENT_ROWS:
        if key not in client:
            continue
        evs = client[key]
        au = {e["accelerators"]: e["au"] for e in evs if "au" in e}
        cells = "".join(_fmt(au.get(n), ".3f", 8) for n in ns)
        failed = [e for e in evs if e.get("failed")]
        tail = f"{max_accelerators_at(au) if au else 0:>18}"
        if failed:
            tail += f"  {failed[0]['note']}"
        lines.append(f"{CLIENT_LABELS[key]:<38}{cells}{tail}")
        for e in evs:
            if "au" in e:
                lines.append(f"{'':<6}N={e['accelerators']}: " + client_epoch_details(e))
    return "\n".join(lines)


def client_epoch_details(e: dict) -> str:
    """The figures of one real-client epoch after its AU, for the live line and the AU table."""
    text = (f"{e['samples_per_s']:.0f} samples/s, wall {e['wall_s']:.1f} s, first batch {e['first_batch_s']:.2f} s, "
            f"waiting for data {e['data_wait_s']:.1f} s, src IOs {_fmt(e.get('source_ios'), 'd', 1)}")
    if e.get("memcg_max_usage_bytes") is not None:
        text += (f", cg peak {_mib(e['memcg_max_usage_bytes']):.0f} MiB, anon "
                 f"{_fmt(_mib(e.get('memcg_anon_peak_bytes')), '.0f', 1)} MiB, failcnt "
                 f"{_fmt(e.get('memcg_failcnt'), 'd', 1)}, OOM {_fmt(e.get('oom_kills'), 'd', 1)}")
    if e.get("daemon_peak_rss_bytes"):
        text += f", dRSS {_mib(e['daemon_peak_rss_bytes']):.0f} MiB"
    over = e.get("slept_s", 0) - e.get("compute_s", 0)
    if over > 0.05 * e.get("compute_s", 0) and over > 0.5:
        # time.sleep() overshoots by ~0.1 ms; seconds of it mean the VM was not running us.
        text += f"; the sleeps overran by {over:.1f} s: a busy machine"
    return text


def format_targets(targets: list[dict]) -> str:
    return "\n".join(f"  [{t['status']:>4}] {t['target']}: {t.get('detail', '')}" for t in targets)


def _lines(fd: int, deadline: float):
    """Lines of a child's stdout as they come (unbuffered, so an event is handled when it is
    printed, not when the next one pushes it out of a buffer); None once ``deadline`` passes."""
    sel = selectors.DefaultSelector()
    sel.register(fd, selectors.EVENT_READ)
    buf = b""
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                yield None
                return
            if not sel.select(timeout=min(left, 30)):
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                if buf.strip():
                    yield buf.decode(errors="replace")
                return
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                yield line.decode(errors="replace")
    finally:
        sel.close()


# --------------------------------------------------------------------------- memory sampling

class MemcgSampler:
    """Samples the memory group's anonymous and shared memory (``memory.stat``) in a thread.

    ``memory.max_usage_in_bytes`` says how full the group got, but under a limit the page
    cache always fills it; anonymous memory and shmem (the DataLoader's batches) cannot be
    reclaimed without swap, so their peak says how close the group came to an OOM kill.
    """

    def __init__(self, memcg: MemoryCgroup, every: float = 0.2) -> None:
        self.memcg = memcg
        self.every = every
        self._lock = threading.Lock()
        self._anon = self._shmem = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        st = self.memcg.stat()
        anon, shmem = st.get("total_rss", st.get("rss", 0)), st.get("total_shmem", st.get("shmem", 0))
        with self._lock:
            self._anon = max(self._anon, anon + shmem)
            self._shmem = max(self._shmem, shmem)

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self._sample()

    def take(self) -> dict:
        """Peaks since the last take (and resets them)."""
        self._sample()
        with self._lock:
            out = {"memcg_anon_peak_bytes": self._anon, "memcg_shmem_peak_bytes": self._shmem}
            self._anon = self._shmem = 0
        return out

    def __enter__(self) -> "MemcgSampler":
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="memcg-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


# --------------------------------------------------------------------------- arguments

def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Data set larger than memory: epochfs vs a plain local copy, source and tmpfs, raw "
                    "reader and a real torchvision client. Run as root.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--files", type=int, default=None, help="JPEG samples (default 8000, --quick 3000); "
                                                           "label files come on top")
    p.add_argument("--classes", type=int, default=100, help="class folders")
    p.add_argument("--mean-size", type=int, default=110_000, help="mean sample size in bytes (log-normal)")
    p.add_argument("--label-fraction", type=float, default=0.25,
                   help="fraction of samples with a 100-300 byte .json label")
    p.add_argument("--iops", type=int, default=300, help="read IOPS limit of the slow source (0: no throttle)")
    p.add_argument("--readers", type=int, default=4, help="raw reader processes")
    p.add_argument("--seed", type=int, default=1234, help="seed of the data set, epoch orders and shuffles")
    p.add_argument("--verify", choices=("crc32", "sha1"), default="crc32", help="checksum the raw readers verify")
    p.add_argument("--mem-fraction", type=float, default=0.4,
                   help="memory group limit as a fraction of the data set's bytes")
    p.add_argument("--ram-fraction", type=float, default=0.5, help="epochfs --ram as a fraction of the limit")
    p.add_argument("--steady-epochs", type=int, default=None,
                   help="epochfs steady-state epochs after epoch 1 (default 3, --quick 1)")
    p.add_argument("--copy-steady-epochs", type=int, default=None,
                   help="plain-copy steady-state epochs after the cold one, and tmpfs epochs "
                        "(default 2, --quick 1)")
    p.add_argument("--accelerators", type=int, nargs="+", default=None,
                   help="emulated accelerator counts for the real client (default 1 2 4 8, --quick 1 2)")
    p.add_argument("--compute-ms-per-sample", type=float, default=DEFAULT_COMPUTE_MS_PER_SAMPLE,
                   help="emulated accelerator compute per sample, ms (see the comment in the source)")
    p.add_argument("--batch-size", type=int, default=32, help="real client: samples per accelerator per step")
    p.add_argument("--client-workers", type=int, default=4, help="real client: DataLoader num_workers")
    p.add_argument("--client-allowance", type=int, default=None, metavar="MIB",
                   help="MiB added to the group's limit during the real-client rows for the workers' own "
                        "memory (default 24 per worker)")
    p.add_argument("--real-client-source", action="store_true",
                   help="also run the real client on the source (N=1 only; slow)")
    p.add_argument("--no-real-client", action="store_true", help="raw-reader rows only")
    p.add_argument("--quick", action="store_true",
                   help="smoke test: 3000 samples, 1 steady epoch, N in (1, 2): ~5 minutes")
    p.add_argument("--out", default=os.path.join(REPO, "docs", "bench"), help="where JSON and PNG go")
    p.add_argument("--workdir", default="/var/tmp/epochfs-bigdata",
                   help="scratch space on the cache disk (image, copy, epochfs cache dir); emptied on exit")
    p.add_argument("--epochfs", default=None,
                   help="epochfs binary (default: build/cli/epochfs in the repo, else epochfs on PATH)")
    p.add_argument("--epochfs-log-level", default="warn", help="epochfs --log-level")
    p.add_argument("--epochfs-arg", action="append", default=[], metavar="ARG",
                   help="extra argument for `epochfs mount` (repeatable, e.g. --epochfs-arg=--foo)")
    p.add_argument("--epoch-timeout", type=float, default=None,
                   help="seconds before a hung raw epoch fails the run (default: generous, from --files/--iops)")
    args = p.parse_args(argv)
    args.files = args.files or (3000 if args.quick else 8000)
    args.steady_epochs = args.steady_epochs if args.steady_epochs is not None else (1 if args.quick else 3)
    args.copy_steady_epochs = (args.copy_steady_epochs if args.copy_steady_epochs is not None
                               else (1 if args.quick else 2))
    args.accelerators = sorted(set(args.accelerators or ([1, 2] if args.quick else [1, 2, 4, 8])))
    if args.client_allowance is None:
        args.client_allowance = CLIENT_ALLOWANCE_PER_WORKER * args.client_workers // MiB
    args.out = os.path.abspath(args.out)
    if args.files < 1 or args.readers < 1 or args.client_workers < 1 or args.batch_size < 1:
        p.error("--files, --readers, --client-workers and --batch-size must be >= 1")
    if args.steady_epochs < 1 or args.copy_steady_epochs < 1:
        p.error("--steady-epochs and --copy-steady-epochs must be >= 1")
    if not 0 < args.mem_fraction < 1:
        p.error("--mem-fraction must be in (0, 1): the point is a data set larger than memory")
    if not 0 < args.ram_fraction < 1:
        p.error("--ram-fraction must be in (0, 1)")
    if min(args.accelerators) < 1 or args.compute_ms_per_sample <= 0:
        p.error("--accelerators must be >= 1 and --compute-ms-per-sample > 0")
    return args


# --------------------------------------------------------------------------- the benchmark

class Bench:
    """Builds the data set and the memory group, runs the rows, collects the results."""

    def __init__(self, args: argparse.Namespace, cleanup: Cleanup, ws: Workspace) -> None:
        self.args = args
        self.cleanup = cleanup
        self.ws = ws
        self.blkio = BlkioThrottle(cleanup, CGROUP)
        self.memcg = MemoryCgroup(cleanup, CGROUP)
        self.rows: list[Row] = []
        self.client: dict[str, list[dict]] = {}
        self.client_start: dict = {}
        self.failures: list[str] = []
        self.phases: dict[str, float] = {}
        self.commands: dict[str, list[str] | str] = {"benchmark": [sys.executable, *sys.argv]}
        self.copy_info: dict = {}
        self.throttle_check: dict = {}
        self.source_metadata: dict = {}
        self.mounts: list[dict] = []
        self.epochfs_bin, self.epochfs_where = resolve_epochfs(args.epochfs)
        self.epochfs_original = self.epochfs_bin
        self.epochfs_version = self.epochfs_sha1 = None
        self.loadavg_at_start = os.getloadavg()
        self.manifest = None
        self.loop: LoopImage | None = None
        self.root = self.tmpfs_root = self.copy_root = ""
        self.limit = self.ram = self.disk = self.client_limit = 0
        self._printed_header = False

    # -- setup -------------------------------------------------------------------------
    def setup(self) -> None:
        """Joins the blkio group, writes the JPEG data set to the source image and a tmpfs,
        throttles and checks the source, creates the memory group."""
        a = self.args
        self._snapshot_epochfs()
        self.blkio.create_and_join()
        t = time.monotonic()
        plan = imagefolder_plan(a.files, a.classes, a.seed, a.mean_size, label_fraction=a.label_fraction)
        allocated = sum((pf.size + BLOCK - 1) // BLOCK * BLOCK for pf in plan)
        dirs = len({os.path.dirname(pf.relpath) for pf in plan}) + 2
        inodes = len(plan) + dirs + 1024
        # JPEG sizes land within a few percent of the plan: 15 % headroom on top of epoch_bench's.
        image_bytes = int(allocated * 1.25) + inodes * 256 + dirs * BLOCK + (256 << 20)
        self.loop = LoopImage(self.cleanup, self.ws.path("source.img"), self.ws.path("src"))
        log(f"ext4 image of {image_bytes / MiB:.0f} MiB for {len(plan)} files (~{allocated / 1e6:.0f} MB) "
            f"on a loop device")
        self.loop.create(image_bytes, inodes)
        self.root = os.path.join(self.loop.mountpoint, "data")
        tmpfs_dir = self.ws.path("tmpfs")
        mount_tmpfs(self.cleanup, tmpfs_dir, int(allocated * 1.15) + dirs * BLOCK + (64 << 20))
        self.tmpfs_root = os.path.join(tmpfs_dir, "data")
        workers = os.cpu_count() or 1
        log(f"generating JPEGs (quality {JPEG_QUALITY}, {workers} processes) into {self.root} and {self.tmpfs_root}")
        self.manifest = materialize("bigdata", plan, a.seed, [self.root, self.tmpfs_root],
                                    progress=lambda m: log("  " + m), make_bytes=jpeg_bytes, workers=workers)
        self.manifest.write_json(self.ws.path("manifest.json"))
        self.loop.remount_readonly()
        self.phases["generate_s"] = round(time.monotonic() - t, 1)
        d = self.manifest.describe()
        log(f"data set: {d['files']} files ({d['files_by_kind']}), {d['total_bytes'] / 1e6:.0f} MB, "
            f"mean JPEG {d['size_mean_by_kind'].get('image', 0) / 1e3:.0f} KB")
        if a.iops:
            self.blkio.limit(self.loop.majmin, a.iops)
            log(f"{self.loop.device} ({self.loop.majmin}) throttled to {a.iops} read IOPS for {self.blkio.path}")
        data = self.manifest.total_bytes
        self.limit = int(a.mem_fraction * data)
        self.ram = int(a.ram_fraction * self.limit)
        self.client_limit = self.limit + a.client_allowance * MiB
        self.disk = int(self.manifest.allocated_bytes * 1.5) + (256 << 20)
        if a.ram_fraction > 0.5:
            warn(f"--ram-fraction {a.ram_fraction} > 0.5: the daemon may hold more than half the limit")
        self.memcg.create(self.limit)
        log(f"memory group {self.memcg.path}: limit {self.limit / MiB:.0f} MiB ({a.mem_fraction:g} x "
            f"{data / MiB:.0f} MiB of data; {self.client_limit / MiB:.0f} MiB during the real client), "
            f"epochfs --ram {self.ram / MiB:.0f} MiB, --disk {self.disk / MiB:.0f} MiB")
        if a.iops:
            self._check_throttle()

    def _snapshot_epochfs(self) -> None:
        """Runs a copy of the epochfs binary taken now: a rebuild of build/cli/epochfs during
        the run (minutes long) must neither break `epochfs umount` halfway nor make the
        restart row run another binary than epoch 1."""
        if self.epochfs_bin is None:
            return
        dst = self.ws.path("epochfs")
        why = ""
        for _ in range(10):  # a link in progress: wait for it to finish
            try:
                shutil.copy2(self.epochfs_bin, dst)
                cp = run([dst, "--version"], check=False, timeout=30)
                if cp.returncode == 0:
                    self.epochfs_version = (cp.stdout or cp.stderr).strip()
                    break
                why = (cp.stderr or cp.stdout).strip()
            except (OSError, RuntimeError) as e:
                why = str(e)
            time.sleep(3)
        else:
            raise RuntimeError(f"cannot run a copy of {self.epochfs_bin}: {why}")
        with open(dst, "rb") as f:
            self.epochfs_sha1 = hashlib.sha1(f.read()).hexdigest()
        log(f"epochfs: {self.epochfs_version} ({self.epochfs_bin}, sha1 {self.epochfs_sha1[:12]}), run from a copy")
        self.epochfs_original, self.epochfs_bin = self.epochfs_bin, dst

    def _check_throttle(self) -> None:
        """Reads a random sample cold: IO/s must be about --iops, or nothing here means anything."""
        m = self.manifest
        n = min(len(m), max(100, self.args.iops))
        sample = np.random.default_rng([self.args.seed, 77]).choice(len(m), n, replace=False)
        drop_caches()
        ios0, bios0 = self.loop.read_ios(), self.blkio.read_bios(self.loop.majmin)
        res = run_epoch(self.root, m.subset(sample), readers=self.args.readers, seed=self.args.seed, epoch=0,
                        verify=self.args.verify, timeout=self._timeout())
        ios = self.loop.read_ios() - ios0
        bios = self.blkio.read_bios(self.loop.majmin) - bios0
        rate = (bios or ios) / res.seconds
        self.throttle_check = {"files": n, "seconds": round(res.seconds, 3), "files_per_s": round(res.files_per_s, 1),
                               "ios": ios, "throttled_bios": bios, "bios_per_s": round(rate, 1),
                               "limit_iops": self.args.iops}
        log(f"throttle check: {n} files cold in {res.seconds:.2f} s = {res.files_per_s:.0f} files/s, "
            f"{ios} IOs, {bios} throttled bios = {rate:.0f}/s (limit {self.args.iops})")
        if rate > 1.5 * self.args.iops:
            raise RuntimeError(f"the blkio throttle is not effective ({rate:.0f} IO/s > 1.5 x {self.args.iops})")
        if rate < 0.5 * self.args.iops:
            warn("the source is slower than its throttle (is the machine busy?); results understate the source")

    def _timeout(self) -> float:
        if self.args.epoch_timeout:
            return self.args.epoch_timeout
        n = len(self.manifest) if self.manifest else self.args.files
        return max(300.0, 6.0 * n / max(self.args.iops or 1000, 1))

    # -- the memory group around a row ----------------------------------------------------
    def _mem_begin(self) -> dict:
        self.memcg.reset_max_usage()
        return {"failcnt": self.memcg.failcnt(), "oom": self.memcg.oom_kills()}

    def _mem_end(self, begin: dict, sampler: MemcgSampler | None) -> dict:
        out = {"memcg_limit_bytes": self.memcg.limit(), "memcg_max_usage_bytes": self.memcg.max_usage(),
               "memcg_failcnt": self.memcg.failcnt() - begin["failcnt"],
               "oom_kills": self.memcg.oom_kills() - begin["oom"]}
        if sampler is not None:
            out.update(sampler.take())
        self.memcg.reset_max_usage()
        begin.update(failcnt=self.memcg.failcnt(), oom=self.memcg.oom_kills())
        return out

    def _print(self, row: Row) -> None:
        if not self._printed_header:
            print("  " + HEADER, flush=True)
            self._printed_header = True
        print("  " + format_row(row, summarize(self.rows)), flush=True)
        extra = requests_line(row)
        if extra:
            print("  " + extra, flush=True)

    # -- measuring ---------------------------------------------------------------------
    def measure(self, key: str, root: str, epoch: int, *, fs: EpochfsMount | None = None,
                limited: bool = True, cold: bool = False, extra: dict | None = None,
                buffered: bool = False) -> Row:
        """Reads one epoch under ``root`` with the raw reader and records a row: throughput,
        the source's read IOs, the memory group's figures (``limited``: the readers join the
        group) and, for epochfs, the daemon's peak RSS and status counters over the epoch.
        ``cold`` drops the page cache first.  An OOM kill that breaks the epoch raises
        RowFailed after recording the row; any other read failure propagates."""
        if cold:
            drop_caches()
        st0 = fs.status() if fs else None
        cpu0 = fs.cpu_seconds() if fs else None
        ios0, bios0 = self.loop.read_ios(), self.blkio.read_bios(self.loop.majmin)
        n = len(self.manifest)
        label = LABELS[key]

        def heartbeat(done: int, seconds: float) -> None:
            log(f"  {label} epoch {epoch}: {done}/{n} files in {seconds:.0f} s ({done / seconds:.0f} files/s)")
        mem0 = self._mem_begin() if limited else None
        row = Row(key, "main", epoch, extra=dict(extra or {}))
        if row.extra.get("daemon_in_memcg") is False:
            row.note = "daemon NOT in the memory group"
        sampler = MemcgSampler(self.memcg) if limited else None
        try:
            if sampler:
                sampler.__enter__()
            try:
                res = run_epoch(root, self.manifest, readers=self.args.readers, seed=self.args.seed, epoch=epoch,
                                verify=self.args.verify, timeout=self._timeout(), progress=heartbeat,
                                child_setup=self.memcg.join if limited else None, buffered=buffered)
            except ReadFailure as e:
                if limited:
                    row.extra.update(self._mem_end(mem0, sampler))
                if limited and row.extra["oom_kills"] and "CHECKSUM MISMATCH" not in str(e):
                    row.note = f"FAILED after {row.extra['oom_kills']} OOM kill(s): {e}"
                    row.extra["failed"] = True
                    self._finish_daemon(row, fs, st0, cpu0)
                    self.rows.append(row)
                    self._print(row)
                    raise RowFailed(f"{label} epoch {epoch}: {row.note}") from e
                raise
            if limited:
                row.extra.update(self._mem_end(mem0, sampler))
        finally:
            if sampler:
                sampler.__exit__(None, None, None)
        row.result = res
        row.source_ios = self.loop.read_ios() - ios0
        if self.args.iops:
            row.extra["throttled_bios"] = self.blkio.read_bios(self.loop.majmin) - bios0
        self._finish_daemon(row, fs, st0, cpu0)
        self.rows.append(row)
        self._print(row)
        return row

    def _finish_daemon(self, row: Row, fs: EpochfsMount | None, st0: dict | None, cpu0: float | None) -> None:
        if fs is None:
            return
        cpu1 = fs.cpu_seconds()
        row.daemon_cpu_s = (cpu1 - cpu0) if cpu0 is not None and cpu1 is not None else None
        st1 = fs.status()
        row.status = status_delta(st0, st1)
        row.daemon_peak_rss = self._daemon_peak(fs, st1)
        row.extra["daemon_vmhwm_bytes"] = fs.peak_rss_bytes()
        row.extra["daemon_status_peak_rss_bytes"] = (st1 or {}).get("daemon_peak_rss_bytes")
        if row.status and row.status.get("corrupt_entries"):
            row.note = (row.note + "; " if row.note else "") + f"{row.status['corrupt_entries']} corrupt entries"

    @staticmethod
    def _daemon_peak(fs: EpochfsMount, status: dict | None) -> int | None:
        """The daemon's peak RSS: its status's ``daemon_peak_rss_bytes`` or VmHWM, the larger."""
        vals = [fs.peak_rss_bytes(), (status or {}).get("daemon_peak_rss_bytes")]
        vals = [int(v) for v in vals if v is not None]
        return max(vals) if vals else None

    def skip(self, keys, why: str) -> None:
        for key in keys:
            row = Row(key, "main", note=why)
            self.rows.append(row)
            self._print(row)

    # -- the real client -----------------------------------------------------------------
    def real_client(self, key: str, root: str, *, limited: bool = True, accelerators: list[int] | None = None,
                    fs: EpochfsMount | None = None, cold: bool = False) -> None:
        """Runs realclient.py over ``root`` for each N (one epoch each, stopping below AU 0.5)
        and records, per N, its epoch figures with the memory group's and the source's.
        ``limited``: the DataLoader workers join the memory group, whose limit is raised by
        --client-allowance for the duration."""
        a = self.args
        if a.no_real_client:
            return
        ns = accelerators or a.accelerators
        cmd = [sys.executable, os.path.join(BENCH, "realclient.py"), "--root", root,
               "--accelerators", *map(str, ns), "--batch-size", str(a.batch_size),
               "--workers", str(a.client_workers), "--compute-ms-per-sample", f"{a.compute_ms_per_sample:g}",
               "--seed", str(a.seed), "--stop-below", str(AU_STOP), "--parent-pid", str(os.getpid()),
               "--progress-every", "15"] + (["--memcg", self.memcg.path] if limited else [])
        self.commands[f"real_client_{key}"] = cmd
        label = CLIENT_LABELS[key]
        log(f"  real client on {label}: N = {' '.join(map(str, ns))}")
        events: list[dict] = []
        self.client[key] = events
        if cold:
            drop_caches()
        if limited:
            self.memcg.set_limit(self.client_limit)
        mem0 = self._mem_begin() if limited else None
        ios0 = self.loop.read_ios()
        samples = len(self.manifest.paths) - self.manifest.kinds.count("label")
        c = a.compute_ms_per_sample / 1e3
        # Generous: each N's epoch at the demanded rate three times over, plus a slow source.
        timeout = 300 + sum(3 * samples * c / n + samples / max(min(a.iops or 1000, 1000) / 4, 1) for n in ns)
        log_path = self.ws.path(f"realclient-{key}.log")
        error = ""
        sampler = MemcgSampler(self.memcg) if limited else None
        with open(log_path, "w") as logf:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=logf,
                                    start_new_session=True)

            def kill_group() -> None:
                if proc.poll() is None:
                    try:
                        os.killpg(proc.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    proc.wait()
            handle = self.cleanup.push(f"stop the real client {proc.pid}", kill_group)
            deadline = time.monotonic() + timeout
            try:
                if sampler:
                    sampler.__enter__()
                for line in _lines(proc.stdout.fileno(), deadline):
                    if line is None:
                        kill_group()
                        raise EpochTimeout(f"real client on {label}: still running after {timeout:.0f} s")
                    try:
                        ev = json.loads(line)
                    except json.JSONDecodeError:
                        continue
                    kind = ev.get("event")
                    if kind == "start":
                        self.client_start = ev
                        if limited:
                            mem0 = self._mem_begin()
                            if sampler:
                                sampler.take()
                        ios0 = self.loop.read_ios()
                    elif kind == "progress":
                        log(f"    N={ev['accelerators']}: {ev['samples']}/{ev['of']} samples in {ev['seconds']:.0f} s")
                    elif kind == "epoch":
                        ios1 = self.loop.read_ios()
                        ev["source_ios"] = ios1 - ios0
                        ios0 = ios1
                        if limited:
                            ev.update(self._mem_end(mem0, sampler))
                        if fs is not None:
                            ev["daemon_peak_rss_bytes"] = self._daemon_peak(fs, fs.status())
                        events.append(ev)
                        log(f"    N={ev['accelerators']}: AU {ev['au']:.3f}, " + client_epoch_details(ev))
                    elif kind == "error":
                        error = ev.get("message", "")
                rc = proc.wait()
            finally:
                if sampler:
                    sampler.__exit__(None, None, None)
                handle.release()
                if limited:
                    self.memcg.set_limit(self.limit)
        if rc == 0:
            return
        tail = read_file(log_path).strip().splitlines()[-3:]
        why = error or (" | ".join(tail) if tail else f"exit {rc}")
        oom = (self.memcg.oom_kills() - mem0["oom"]) if limited else 0
        if limited and oom:
            note = f"FAILED after {oom} OOM kill(s): {why}"
            events.append({"failed": True, "note": note, "oom_kills": oom})
            raise RowFailed(f"real client on {label}: {note}")
        raise ReadFailure(f"READ ERROR real client on {label}: exit {rc}: {why}")

    # -- rows ----------------------------------------------------------------------------
    def section(self, name: str, fn) -> None:
        t = time.monotonic()
        try:
            fn()
        except RowFailed as e:
            self.failures.append(str(e))
            warn(f"{e}; going on with the other rows")
        finally:
            self.phases[f"{name}_s"] = round(time.monotonic() - t, 1)

    def run_all(self) -> None:
        # tmpfs first: it is quick and exercises the real client before minutes go into the rest.
        self.section("tmpfs", self.run_tmpfs)
        self.section("source", self.run_source)
        self.section("copy", self.run_copy)
        self.section("epochfs", self.run_epochfs)

    def run_tmpfs(self) -> None:
        """The tmpfs copy, no memory limit: the ceiling of a reader (and a client) here."""
        log(f"--- tmpfs copy, no memory limit: {self.tmpfs_root}")
        for e in range(1, self.args.copy_steady_epochs + 1):
            self.measure("tmpfs", self.tmpfs_root, e, limited=False)
        # Python's default (buffered) open asks isatty() of each file: a syscall here, a
        # FUSE round trip on a mount (the epochfs row of the same name).
        self.measure("tmpfs-buffered", self.tmpfs_root, self.args.copy_steady_epochs + 1, limited=False,
                     buffered=True)
        self.real_client("tmpfs", self.tmpfs_root, limited=False)

    def run_source(self) -> None:
        """The throttled source read directly under the limit: page cache dropped, one epoch
        (the group's page cache holds 0.4 of the data set, and a shuffled epoch finds little of it)."""
        log(f"--- source under the limit: {self.root} on {self.loop.device}")
        self.measure("source", self.root, 1, cold=True)
        if self.args.real_client_source:
            self.real_client("source", self.root, accelerators=[1], cold=True)

    def run_copy(self) -> None:
        """``cp -a`` of the source to the cache disk inside the memory group (timed, with the
        sync that makes it durable), then caches dropped and a cold epoch, then steady ones."""
        a = self.args
        self.copy_root = self.ws.path("copy")
        cmd = ["cp", "-a", self.root, self.copy_root]
        # A shell that joins the group and then becomes cp: all of cp's reads and writes are
        # charged to the group, and nothing is forked from a threaded process.
        wrapped = ["sh", "-c", 'echo $$ > "$0" && exec "$@"', os.path.join(self.memcg.path, "cgroup.procs"), *cmd]
        self.commands["copy"] = cmd
        log(f"--- plain copy: {' '.join(cmd)} (inside the memory group, page cache dropped)")
        drop_caches()
        ios0 = self.loop.read_ios()
        mem0 = self._mem_begin()
        with MemcgSampler(self.memcg) as sampler:
            t0 = time.monotonic()
            cp = subprocess.run(wrapped, capture_output=True, text=True,
                                timeout=max(600.0, 20.0 * len(self.manifest) / max(a.iops or 1000, 1)))
            cp_s = time.monotonic() - t0
            os.sync()
            sync_s = time.monotonic() - t0 - cp_s
            mem = self._mem_end(mem0, sampler)
        self.copy_info = {"command": cmd, "cp_s": round(cp_s, 2), "sync_s": round(sync_s, 2),
                          "seconds": round(cp_s + sync_s, 2), "source_ios": self.loop.read_ios() - ios0,
                          "exit": cp.returncode, **mem}
        if cp.returncode != 0:
            why = (cp.stderr or cp.stdout).strip().splitlines()[-1:] or [f"exit {cp.returncode}"]
            self.copy_info["failed"] = True
            if mem["oom_kills"]:
                self.skip(("copy-cold", "copy-steady"), f"FAILED: cp was OOM-killed ({why[0]})")
                raise RowFailed(f"plain copy: cp failed after {mem['oom_kills']} OOM kill(s): {why[0]}")
            raise ReadFailure(f"READ ERROR plain copy: {' '.join(cmd)}: {why[0]}")
        log(f"plain copy took {cp_s + sync_s:.1f} s (cp {cp_s:.1f} s + sync {sync_s:.1f} s), "
            f"{self.copy_info['source_ios']} source IOs, group peak {_mib(mem['memcg_max_usage_bytes']):.0f} MiB, "
            f"OOM kills {mem['oom_kills']}")
        self.measure("copy-cold", self.copy_root, 1, cold=True)
        for e in range(2, a.copy_steady_epochs + 2):
            self.measure("copy-steady", self.copy_root, e)
        self.real_client("copy", self.copy_root)

    def _mount(self, fs: EpochfsMount) -> dict:
        """Mounts with the benchmark inside the memory group for the moment `epochfs mount`
        runs (the daemon it forks is born there); checks the daemon is in both groups."""
        ios0, t0 = self.loop.read_ios(), time.monotonic()
        with self.memcg.joined():
            fs.start()
        info = {"mount_s": round(time.monotonic() - t0, 3), "mount_source_ios": self.loop.read_ios() - ios0,
                "daemon_pid": fs.pid}
        if fs.pid is not None:
            info["daemon_in_memcg"] = self.memcg.contains(fs.pid)
            if not info["daemon_in_memcg"]:
                warn(f"epochfs daemon {fs.pid} is NOT in the memory group {self.memcg.path}: "
                     "its memory is not limited, the comparison is unfair to the plain copy")
        self.mounts.append(info)
        return info

    def _mount_or_skip(self, fs: EpochfsMount, keys, *, limited: bool = True) -> dict | None:
        """Mounts ``fs`` (inside the memory group when ``limited``); if that fails, records
        the rows ``keys`` as skipped with the reason and returns None."""
        try:
            if limited:
                return self._mount(fs)
            fs.start()
            return {}
        except MountError as e:
            warn(str(e))
            self.skip(keys, f"epochfs mount failed: {str(e).splitlines()[0][:160]}")
            return None

    def run_epochfs(self) -> None:
        """epochfs with --ram = ram_fraction x the limit: epoch 1 cold, steady epochs, the
        real client on the same mount, then a restart with the page cache dropped."""
        a = self.args
        keys = ("epochfs-e1", "epochfs-steady", "epochfs-plan", "epochfs-restart", "epochfs-restart-ahead",
                "epochfs-ram-cold", "epochfs-ram-steady", "epochfs-ram-buffered")
        if self.epochfs_bin is None:
            self.skip(keys, f"epochfs binary not found ({self.epochfs_where}); build it or pass --epochfs")
            return
        cache_dir = self.ws.path("cache-epochfs")
        os.makedirs(cache_dir, exist_ok=True)

        def make(tag: str) -> EpochfsMount:
            fs = EpochfsMount(self.cleanup, self.blkio, self.ws.path("mnt-epochfs"), self.ws.path(f"epochfs-{tag}.log"),
                              binary=self.epochfs_bin, source=self.root, cache_dir=cache_dir, ram=str(self.ram),
                              disk=str(self.disk), log_level=a.epochfs_log_level, extra=a.epochfs_arg)
            self.commands["epochfs_mount"] = fs.command
            return fs

        drop_caches()
        fs = make("first")
        log(f"--- epochfs: {' '.join(fs.command)}")
        info = self._mount_or_skip(fs, keys)
        if info is None:
            return
        try:
            self.measure("epochfs-e1", fs.mountpoint, 1, fs=fs, cold=True, extra=info)
            for e in range(2, a.steady_epochs + 2):
                self.measure("epochfs-steady", fs.mountpoint, e, fs=fs)
            # What the epochfs loader adds: the epoch's order told to the prefetcher
            # before the epoch (.epochfs/plan), same limit, same unmodified reads.
            e = a.steady_epochs + 2
            self.publish_plan(fs.mountpoint, e)
            self.measure("epochfs-plan", fs.mountpoint, e, fs=fs)
            self.real_client("epochfs", fs.mountpoint, fs=fs)
        except RowFailed as e:
            self.failures.append(str(e))
            warn(f"{e}; unmounting, then the restart row")
        finally:
            fs.stop()
        self.measure_source_metadata()
        drop_caches()
        fs = make("restart")
        info = self._mount_or_skip(fs, keys[3:])
        if info is None:
            return
        try:
            self.measure("epochfs-restart", fs.mountpoint, a.steady_epochs + 3, fs=fs, cold=True, extra=info)
        finally:
            fs.stop()
        # The same restart, as a machine that mounts at boot meets its first epoch: the
        # epoch starts once the mount has done what it does at mount (the metadata
        # warm-up, the stream of the SSD tier into RAM), not in the same instant.
        drop_caches()
        fs = make("restart-ahead")
        info = self._mount_or_skip(fs, ("epochfs-restart-ahead",))
        if info is not None:
            try:
                info["ahead_s"] = self._wait_mount_work(fs)
                self.measure("epochfs-restart-ahead", fs.mountpoint, a.steady_epochs + 3, fs=fs, extra=info)
            finally:
                fs.stop()
        self.run_epochfs_ceiling(make)

    def measure_source_metadata(self) -> None:
        """What a restart right at mount cannot avoid on this source: every file's metadata
        read cold (its directory and inode blocks), which must be checked before the file's
        bytes may come from the cache. The plain copy read cold needs none of it, so this
        bounds the restart row of any design that checks the source: at most as many
        files/s as these stats take."""
        drop_caches()
        bios0 = self.blkio.read_bios(self.loop.majmin)
        paths = [os.path.join(self.root, p) for p in self.manifest.paths]
        seconds = stat_every_file(paths)
        bios = self.blkio.read_bios(self.loop.majmin) - bios0
        fps = len(paths) / seconds
        copy_cold = [r.result.files_per_s for r in self.rows if r.scenario == "copy-cold" and r.result]
        bound = round(fps / copy_cold[-1], 3) if copy_cold else None
        self.source_metadata = {"files": len(paths), "threads": 16, "seconds": round(seconds, 3),
                                "files_per_s": round(fps, 1), "throttled_bios": bios,
                                "bound_x_copy_cold": bound}
        log(f"source metadata cold: {len(paths)} files stat'ed in {seconds:.2f} s ({bios} throttled bios): "
            f"no restart that checks the source can read more than {fps:.0f} files/s here"
            + (f" = {bound:.2f}x the copy read cold" if bound else ""))

    def _wait_mount_work(self, fs: EpochfsMount, timeout: float = 300.0) -> float:
        """Waits until the metadata warm-up has finished and the stream into RAM stopped
        growing; returns how long that took."""
        t0 = time.monotonic()
        wait_until_mount_work_stops(fs, "ssd_streamed", 0.25, 4, timeout)
        took = time.monotonic() - t0 - 1.0  # the last second only confirmed it had stopped
        st = fs.status() or {}
        log(f"  mount work done in {max(took, 0):.1f} s: {st.get('metadata_warmed')} files' metadata held, "
            f"{st.get('ssd_streamed')} files streamed into RAM")
        return round(max(took, 0.0), 2)

    def publish_plan(self, mountpoint: str, epoch: int) -> None:
        """Writes epoch ``epoch``'s order (the raw readers' permutation) to .epochfs/plan."""
        order = epoch_order(len(self.manifest), self.args.seed, epoch)
        with open(os.path.join(mountpoint, ".epochfs", "plan"), "w") as f:
            f.write("epochfs-plan 1\n" + "".join(self.manifest.paths[i] + "\n" for i in order.tolist()) + "\n")

    def run_epochfs_ceiling(self, make) -> None:
        """What any epoch served through FUSE can reach on this machine: the whole data set
        in the daemon's RAM tier (no memory limit), the kernel's page cache dropped, so
        every file is a round trip to the daemon and nothing else. The mount is a restart
        (the SSD tier is streamed into RAM, the recorded files' metadata warmed, before the
        epoch). "restart" drops the dentries too (a LOOKUP per file, as after a restart),
        "steady" only the page cache (a GETATTR per file, as in the steady state)."""
        a = self.args
        keys = ("epochfs-ram-cold", "epochfs-ram-steady", "epochfs-ram-buffered")
        data = self.manifest.total_bytes
        saved_ram, self.ram = self.ram, int(data * 1.3) + (256 << 20)
        try:
            fs = make("ceiling")
        finally:
            self.ram = saved_ram
        log(f"--- epochfs, all in RAM, no memory limit: {' '.join(fs.command)}")
        if self._mount_or_skip(fs, keys, limited=False) is None:  # this row has no limit
            return
        try:
            self._wait_all_in_ram(fs)
            epoch = a.steady_epochs + 4
            self.measure("epochfs-ram-cold", fs.mountpoint, epoch, fs=fs, limited=False, cold=True)
            os.sync()
            write_file("/proc/sys/vm/drop_caches", "1\n")  # the page cache only, not the dentries
            self.measure("epochfs-ram-steady", fs.mountpoint, epoch + 1, fs=fs, limited=False)
            os.sync()
            write_file("/proc/sys/vm/drop_caches", "1\n")
            self.measure("epochfs-ram-buffered", fs.mountpoint, epoch + 2, fs=fs, limited=False, buffered=True)
        finally:
            fs.stop()

    def _wait_all_in_ram(self, fs: EpochfsMount, timeout: float = 120.0) -> None:
        """Waits for the stream at mount to bring the SSD tier into RAM (until the RAM tier
        stops growing) and for the metadata warm-up; a row read before that would measure
        the SSD tier instead."""
        last = wait_until_mount_work_stops(fs, "ram_bytes", 0.5, 5, timeout)
        log(f"  RAM tier holds {last / MiB:.0f} MiB of the {self.manifest.total_bytes / MiB:.0f} MiB data set")

    # -- results -------------------------------------------------------------------------
    def client_au(self) -> dict[str, dict[int, float]]:
        return {k: {e["accelerators"]: e["au"] for e in evs if "au" in e} for k, evs in self.client.items()}

    def oom_total(self) -> int | None:
        vals = [r.extra.get("oom_kills") for r in self.rows if r.extra.get("oom_kills") is not None]
        vals += [e.get("oom_kills") for evs in self.client.values() for e in evs if e.get("oom_kills") is not None]
        if self.copy_info.get("oom_kills") is not None:
            vals.append(self.copy_info["oom_kills"])
        return sum(vals) if vals else None

    def daemon_peak(self) -> int | None:
        # The all-in-RAM rows mount with a --ram of their own, outside the limit.
        vals = [r.daemon_peak_rss for r in self.rows
                if r.daemon_peak_rss is not None and r.scenario not in UNLIMITED_EPOCHFS_ROWS]
        vals += [e["daemon_peak_rss_bytes"] for e in self.client.get("epochfs", []) if e.get("daemon_peak_rss_bytes")]
        return max(vals) if vals else None

    def targets(self) -> list[dict]:
        return evaluate_targets(summarize(self.rows), self.client_au(), ram_bytes=self.ram,
                                daemon_peak_rss=self.daemon_peak(), oom_kills=self.oom_total())

    def report(self) -> str:
        a = self.args
        parts = []
        if self.copy_info:
            ci = self.copy_info
            parts.append(f"plain copy: {' '.join(ci['command'])} took {ci['seconds']:.1f} s (cp {ci['cp_s']:.1f} s "
                         f"+ sync {ci['sync_s']:.1f} s), {ci['source_ios']} source IOs, OOM kills {ci['oom_kills']}")
        parts.append(format_table(self.rows))
        if self.client:
            parts.append(format_au_table(self.client, a.accelerators, a.compute_ms_per_sample, a.batch_size,
                                         a.client_workers))
        parts.append(f"memory group limit {self.limit / MiB:.0f} MiB ({a.mem_fraction:g} x data), "
                     f"{self.client_limit / MiB:.0f} MiB during the real client; epochfs --ram {self.ram / MiB:.0f} MiB")
        parts.append("targets:\n" + format_targets(self.targets()))
        if self.failures:
            parts.append("failed rows:\n" + "\n".join(f"  {f}" for f in self.failures))
        return "\n\n".join(parts)

    def document(self, started: datetime.datetime, duration: float) -> dict:
        a = self.args
        client_au = self.client_au()
        machine = machine_info(None, self.loadavg_at_start)
        machine.update({k: self.client_start.get(k) for k in ("torch", "torchvision")})
        machine.update(epochfs=self.epochfs_version, epochfs_sha1=self.epochfs_sha1)
        try:
            import PIL
            machine["pillow"] = PIL.__version__
        except ImportError:
            pass
        dataset = self.manifest.describe() if self.manifest else {}
        if self.loop is not None and self.loop.device:
            dataset["loop"] = self.loop.queue_info()
        dataset["jpeg"] = {"quality": JPEG_QUALITY, "bytes_per_pixel_assumed": JPEG_BYTES_PER_PIXEL}
        return {
            "tool": "bench/bigdata_bench.py",
            "started": started.isoformat(timespec="seconds"),
            "duration_s": round(duration, 1),
            "git": git_info(),
            "machine": machine,
            "parameters": {
                "files": a.files, "classes": a.classes, "mean_size": a.mean_size, "label_fraction": a.label_fraction,
                "iops": a.iops, "readers": a.readers, "seed": a.seed, "verify": a.verify, "quick": a.quick,
                "mem_fraction": a.mem_fraction, "ram_fraction": a.ram_fraction, "steady_epochs": a.steady_epochs,
                "copy_steady_epochs": a.copy_steady_epochs, "accelerators": a.accelerators,
                "compute_ms_per_sample": a.compute_ms_per_sample, "batch_size_per_accelerator": a.batch_size,
                "client_workers": a.client_workers, "client_allowance_mib": a.client_allowance,
                "real_client_source": a.real_client_source, "real_client": not a.no_real_client,
                "epochfs_binary": self.epochfs_original, "epochfs_args": a.epochfs_arg,
                "au_target": AU_TARGET, "au_stop": AU_STOP, "au_tolerance": AU_TOLERANCE,
            },
            "memory": {"cgroup": self.memcg.path, "data_bytes": self.manifest.total_bytes if self.manifest else None,
                       "limit_bytes": self.limit, "client_limit_bytes": self.client_limit,
                       "epochfs_ram_bytes": self.ram, "epochfs_disk_bytes": self.disk,
                       "benchmark_home_cgroup": self.memcg.home},
            "commands": self.commands,
            "dataset": dataset,
            "throttle_check": self.throttle_check,
            "source_metadata_cold": self.source_metadata,
            "copy": self.copy_info,
            "mounts": self.mounts,
            "phases_s": self.phases,
            "rows": [{**r.to_dict(), "label": LABELS.get(r.scenario, r.scenario)} for r in self.rows],
            "summary": summarize(self.rows),
            "real_client": {
                "method": "torchvision DatasetFolder(default_loader, .jpg) + CenterCrop + PILToTensor; "
                          "DataLoader(shuffle=True, num_workers=W, batch_size=B*N); one training loop sleeps "
                          "B x compute per full batch (N accelerators in lock step); AU = compute / epoch wall",
                "start": self.client_start,
                "rows": self.client,
                "au": {k: {str(n): v for n, v in au.items()} for k, au in client_au.items()},
                "max_accelerators_at_au_0.9": {k: max_accelerators_at(au) for k, au in client_au.items()},
            },
            "targets": self.targets(),
            "failures": self.failures,
        }


# --------------------------------------------------------------------------- plot

_COLORS = {"source": "#8c8c8c", "copy": "#ff7f0e", "epochfs": "#1f77b4", "tmpfs": "#2ca02c"}


def plot(path: str, summary: dict[str, dict], client_au: dict[str, dict[int, float]], title: str) -> None:
    """Left: mean files/s per row (log scale).  Right: AU against N per real-client row."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 5.5), gridspec_kw={"width_ratios": [1.5, 1]})
    keys = [k for k in ROWS if k in summary]
    vals = [summary[k].get("files_per_s") for k in keys]
    xs = range(len(keys))
    ax1.bar(xs, [v or 0 for v in vals], color=[_COLORS[k.split("-")[0]] for k in keys])
    measured = [v for v in vals if v]
    if measured:
        ax1.set_yscale("log")
        ax1.set_ylim(min(measured) / 2, max(measured) * 3)
    for x, v, k in zip(xs, vals, keys):
        ax1.text(x, v or (min(measured) if measured else 1), f"{v:.0f}" if v else "failed/skipped",
                 ha="center", va="bottom", fontsize=8, rotation=0 if v else 90)
    ax1.set_xticks(list(xs))
    ax1.set_xticklabels([LABELS[k] for k in keys], rotation=30, ha="right", fontsize=8)
    ax1.set_ylabel("files/s (mean over epochs, log)")
    ax1.set_title("raw reader, 4 processes, shuffled epochs", fontsize=10)
    ax1.grid(axis="y", which="both", alpha=0.3)
    for key in CLIENT_ROWS:
        au = client_au.get(key)
        if not au:
            continue
        ns = sorted(au)
        ax2.plot(ns, [au[n] for n in ns], marker="o", color=_COLORS[key], label=CLIENT_LABELS[key])
    ax2.axhline(AU_TARGET, color="k", linestyle="--", linewidth=1, label=f"AU {AU_TARGET}")
    ax2.set_xscale("log", base=2)
    all_ns = sorted({n for au in client_au.values() for n in au}) or [1]
    ax2.set_xticks(all_ns)
    ax2.set_xticklabels([str(n) for n in all_ns])
    ax2.set_ylim(0, 1.05)
    ax2.set_xlabel("emulated accelerators (N)")
    ax2.set_ylabel("accelerator utilization (compute / wall)")
    ax2.set_title("real client: torchvision DatasetFolder + DataLoader", fontsize=10)
    ax2.grid(alpha=0.3)
    ax2.legend(fontsize=8, loc="lower left")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if os.geteuid() != 0:
        sys.exit("bigdata_bench needs root (loop devices, mounts, cgroups, drop_caches)")
    started, t0 = datetime.datetime.now(), time.monotonic()
    cleanup = Cleanup()
    cleanup.install()
    ws = Workspace(args.workdir, cleanup, cgroups=[os.path.join(BLKIO_ROOT, CGROUP), os.path.join(MEMORY_ROOT, CGROUP)])
    bench = Bench(args, cleanup, ws)
    try:
        ws.open()
        log(f"bigdata_bench: {args.files} samples, {args.readers} readers, {args.iops} IOPS, memory "
            f"{args.mem_fraction:g} x data, epochfs --ram {args.ram_fraction:g} x that; real client: "
            + ("off" if args.no_real_client else f"N = {' '.join(map(str, args.accelerators))}, "
                                                 f"{args.compute_ms_per_sample:g} ms/sample"))
        if bench.epochfs_bin is None:
            warn(f"epochfs binary not found ({bench.epochfs_where}): its rows will be skipped")
        bench.setup()
        bench.run_all()
    except ReadFailure as e:
        print(f"\nFAILED: {e}", file=sys.stderr, flush=True)
        if bench.rows:
            print("\n" + format_table(bench.rows), flush=True)
        return 1
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        print(f"\nERROR: {e}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr, flush=True)
        return 130
    finally:
        cleanup.run_all()

    duration = time.monotonic() - t0
    print("\n" + bench.report(), flush=True)
    os.makedirs(args.out, exist_ok=True)
    json_path = os.path.join(args.out, "bigdata_bench.json")
    png_path = os.path.join(args.out, "bigdata_bench.png")
    write_json(json_path, bench.document(started, duration))
    title = (f"bigdata_bench: {args.files} JPEG samples ({bench.manifest.total_bytes / 1e6:.0f} MB), memory limit "
             f"{bench.limit / MiB:.0f} MiB ({args.mem_fraction:g}x), epochfs --ram {bench.ram / MiB:.0f} MiB, source "
             f"{args.iops} IOPS, {platform.node()} ({os.cpu_count()} CPUs), {started:%Y-%m-%d}")
    plot(png_path, summarize(bench.rows), bench.client_au(), title)
    log(f"wrote {json_path} and {png_path} ({duration:.0f} s in all)")
    return 1 if bench.failures else 0


if __name__ == "__main__":
    sys.exit(main())
