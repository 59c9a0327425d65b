"""Reader processes that read one epoch the way a PyTorch DataLoader does.

A training epoch is a fresh random permutation of the data set (seeded per
epoch, like ``DistributedSampler.set_epoch``); ``readers`` worker processes
each take an interleaved slice ``order[rank::readers]`` of it, as DataLoader
workers do, and for every index do what ``Dataset.__getitem__`` does with a
file: open, read it whole, close.  Each file is then checked against the
manifest: a wrong size or checksum means the filesystem under test served
wrong bytes, which fails the whole run (a fast wrong answer is worthless).

Per-file latency covers open+read+close only (not the checksum), so it
describes the filesystem; files/s and MB/s cover the whole loop including the
checksum, like a real loader's throughput.

Workers are forked per epoch and start together behind a barrier, so the
epoch time is from the first worker's start to the last worker's finish.
"""

from __future__ import annotations

import ctypes
import hashlib
import multiprocessing as mp
import multiprocessing.connection as mp_connection
import os
import signal
import threading
import time
import zlib
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np

from dataset import Manifest

_CTX = mp.get_context("fork")


class ReadFailure(Exception):
    """A reader got wrong bytes or an error: the run must fail."""


class EpochTimeout(ReadFailure):
    """Readers did not finish in time (a hung filesystem)."""


@dataclass
class EpochResult:
    """Throughput and latency of one epoch over a data set."""

    files: int
    bytes: int
    seconds: float
    files_per_s: float
    mb_per_s: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    mean_ms: float

    def to_dict(self) -> dict:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def epoch_order(n: int, seed: int, epoch: int) -> np.ndarray:
    """The permutation of ``range(n)`` read in ``epoch`` (fresh for each epoch)."""
    return np.random.default_rng([seed, 0x5EED, epoch]).permutation(n)


def shard(order: np.ndarray, rank: int, world: int) -> np.ndarray:
    """Worker ``rank``'s interleaved slice of an epoch's order."""
    return order[rank::world]


def _check(data: bytes, i: int, manifest: Manifest, verify: str) -> str | None:
    """Returns why ``data`` is not file ``i`` of the manifest, or None if it is."""
    want = int(manifest.sizes[i])
    if len(data) != want:
        return f"size {len(data)} != {want}"
    if verify == "crc32":
        got = zlib.crc32(data)
        if got != int(manifest.crc32[i]):
            return f"crc32 {got:08x} != {int(manifest.crc32[i]):08x}"
    elif verify == "sha1":
        got_hex = hashlib.sha1(data).hexdigest()
        if got_hex != manifest.sha1[i]:
            return f"sha1 {got_hex} != {manifest.sha1[i]}"
    return None


def _die_with_parent(parent: int) -> None:
    """Asks the kernel to SIGKILL this reader when the benchmark dies, so a killed run
    leaves no orphans reading the source (and holding mounts busy)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def _reader_main(root: str, manifest: Manifest, indices: np.ndarray, verify: str,
                 barrier, conn, parent: int, done, rank: int,
                 child_setup: Callable[[], None] | None = None, buffered: bool = False) -> None:
    """Body of one reader process; sends ("ok", t0, t1, bytes, latencies) or ("error", msg)."""
    path = "?"
    _die_with_parent(parent)
    try:
        if child_setup is not None:
            try:
                child_setup()
            except Exception as e:  # noqa: BLE001
                conn.send(("error", f"READER SETUP FAILED: {type(e).__name__}: {e}"))
                barrier.abort()  # the parent stops waiting for the readers to start
                return
        lat = np.empty(len(indices), dtype=np.float64)
        nbytes = 0
        barrier.wait()
        t0 = time.monotonic()
        for k, i in enumerate(indices.tolist()):
            path = os.path.join(root, manifest.paths[i])
            t = time.perf_counter()
            if buffered:  # what PIL, numpy.load and most data sets do: isatty() on every open
                with open(path, "rb") as f:
                    data = f.read()
            else:
                with open(path, "rb", buffering=0) as f:
                    data = f.readall()
            lat[k] = time.perf_counter() - t
            problem = _check(data, i, manifest, verify)
            if problem:
                conn.send(("error", f"CHECKSUM MISMATCH {path}: {problem}"))
                return
            nbytes += len(data)
            done[rank] = k + 1  # progress, for the parent's heartbeat (a lock-free store)
        t1 = time.monotonic()
        conn.send(("ok", t0, t1, nbytes, lat.tobytes()))
    except Exception as e:  # noqa: BLE001 -- any failure is reported to the parent
        try:
            conn.send(("error", f"READ ERROR {path}: {type(e).__name__}: {e}"))
        except Exception:  # noqa: BLE001 -- parent gone; nothing left to tell
            pass
    finally:
        conn.close()


def _first_error(conns) -> str:
    """The first error message a reader has sent, if any (why the readers did not start)."""
    for c in conns:
        try:
            if c.poll():
                reply = c.recv()
                if reply[0] == "error":
                    return reply[1]
        except (EOFError, OSError):
            pass
    return ""


def run_epoch(root: str, manifest: Manifest, *, readers: int, seed: int, epoch: int,
              verify: str = "crc32", timeout: float = 600.0,
              progress: Callable[[int, float], None] | None = None,
              progress_every: float = 15.0,
              child_setup: Callable[[], None] | None = None, buffered: bool = False) -> EpochResult:
    """Reads every file of ``manifest`` under ``root`` once, in epoch ``epoch``'s order.

    ``buffered`` opens each file with Python's default buffering, as PIL and most data
    set classes do (an isatty() ioctl per open); the default is an unbuffered open.

    ``progress(files_done, seconds)`` is called every ``progress_every`` seconds
    while the epoch runs (cold epochs on a throttled source take minutes).
    ``child_setup()`` runs in each reader process before it starts reading (e.g. to
    join a memory cgroup that the caller itself must stay out of).
    Raises ReadFailure (wrong bytes, an I/O error) or EpochTimeout.
    """
    order = epoch_order(len(manifest), seed, epoch)
    barrier = _CTX.Barrier(readers + 1)
    done = _CTX.RawArray("q", readers)
    procs, conns = [], []
    for rank in range(readers):
        parent_end, child_end = _CTX.Pipe(duplex=False)
        p = _CTX.Process(
            target=_reader_main,
            args=(root, manifest, shard(order, rank, readers), verify, barrier, child_end, os.getpid(),
                  done, rank, child_setup, buffered),
            name=f"epoch-reader-{rank}", daemon=True)
        p.start()
        child_end.close()
        procs.append(p)
        conns.append(parent_end)
    try:
        try:
            barrier.wait(timeout=60)
        except threading.BrokenBarrierError:
            why = _first_error(conns)
            raise ReadFailure(f"epoch {epoch} on {root}: readers failed to start"
                              + (f": {why}" if why else "")) from None
        started = time.monotonic()
        deadline = started + timeout
        replies, pending = [], list(conns)
        while pending:  # whichever reader finishes (or fails) first is heard first
            left = deadline - time.monotonic()
            if left <= 0:
                raise EpochTimeout(f"epoch {epoch} on {root}: readers still running after {timeout:.0f} s")
            ready = mp_connection.wait(pending, timeout=min(left, progress_every))
            if not ready and progress is not None:
                progress(sum(done), time.monotonic() - started)
            for conn in ready:
                pending.remove(conn)
                try:
                    reply = conn.recv()
                except EOFError:
                    raise ReadFailure(f"epoch {epoch} on {root}: a reader died without reporting") from None
                if reply[0] == "error":
                    raise ReadFailure(reply[1])
                replies.append(reply)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
        for p in procs:
            p.join(timeout=5)
        for c in conns:
            c.close()
    t_start = min(r[1] for r in replies)
    t_end = max(r[2] for r in replies)
    nbytes = sum(r[3] for r in replies)
    lat = np.concatenate([np.frombuffer(r[4], dtype=np.float64) for r in replies]) * 1e3
    seconds = max(t_end - t_start, 1e-9)
    p50, p90, p99 = np.percentile(lat, [50, 90, 99]) if len(lat) else (0.0, 0.0, 0.0)
    return EpochResult(
        files=len(manifest), bytes=nbytes, seconds=seconds,
        files_per_s=len(manifest) / seconds, mb_per_s=nbytes / 1e6 / seconds,
        p50_ms=float(p50), p90_ms=float(p90), p99_ms=float(p99),
        max_ms=float(lat.max()) if len(lat) else 0.0,
        mean_ms=float(lat.mean()) if len(lat) else 0.0)
