#!/usr/bin/python3
"""The "real client" of bigdata_bench: torchvision + a DataLoader feeding emulated accelerators.

This is MLPerf Storage's method, shrunk to one machine: a real data pipeline (files
opened and JPEG-decoded by torchvision in DataLoader worker processes, collated into
batches) feeds a training loop whose "accelerators" are emulated by sleeping a fixed
compute time per batch.  What storage must deliver is then a rate, not "as fast as
possible", and the figure of merit is the accelerator utilization

    AU = total compute (sleep) time / epoch wall time

-- 1.0 when the data was always there when the accelerators asked for it.

The pipeline: ``datasets.DatasetFolder(root, loader=default_loader, extensions=(".jpg",))``
(``default_loader`` opens the file and decodes it to RGB with PIL), a 64x64 center crop
and ``PILToTensor`` (uint8) so that batches collate, and ``DataLoader(shuffle=True,
num_workers=W, batch_size=B*N)``.  No resize or augmentation: their CPU cost belongs to
the model, not to the storage, and on a 2-core machine it would only lower the ceiling
every row shares.  uint8 rather than float tensors: batches travel through shared memory,
which the memory cgroup charges, and 4x bigger batches would eat the page cache the
storage is being measured with.

N accelerators are emulated by one training loop that consumes N accelerators' batches
per compute period: ``batch_size = B*N`` and a sleep of ``B * compute_per_sample`` per
batch (a short last batch sleeps in proportion).  That demands N times the samples per
second of one accelerator, with the same per-step deadline N data-parallel accelerators
in lock step (an all-reduce per step) would have -- the slowest loader gates all of them
anyway.  N separate processes would have been the other way; on 2 cores, N x W workers
and N torch interpreters (~270 MB each) would measure CPU and memory contention between
copies of the client, not the storage under them.

The epoch wall time runs from creating the DataLoader iterator (workers fork, the first
batch is decoded) to the end of the last batch's compute: every epoch of a job with
``persistent_workers=False`` (the default) pays that start.

With ``--memcg DIR`` every DataLoader worker joins that cgroup v1 memory group as it
starts (``worker_init_fn``), so what the workers allocate, the batches they put in shared
memory and every page of the files they read are charged to the group, with the epochfs
daemon's memory.  The training process itself (torch, ~270 MB) stays outside, as the
benchmark's own process does: the group stands for the memory a machine has for data,
and the memory cgroup's OOM killer, which picks the biggest process in the group by its
whole RSS, should choose among the processes that move the data.

Output: one JSON object per line on stdout ("start", "progress" every few seconds,
"epoch" per N, "error"); exit 0, or 1 on any error (a decode error, an I/O error, a
worker killed).  Run by bigdata_bench.py; standalone:

    /usr/bin/python3 bench/realclient.py --root DIR --accelerators 1 2 --compute-ms-per-sample 6
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def accelerator_utilization(samples: int, compute_s_per_sample: float, accelerators: int,
                            wall_s: float) -> float:
    """AU of an epoch: the compute time the emulated accelerators spent over the wall time.

    ``samples`` spread over ``accelerators`` at ``compute_s_per_sample`` each take
    ``samples / accelerators * compute_s_per_sample`` of (parallel) compute.
    """
    if wall_s <= 0 or accelerators < 1:
        raise ValueError("wall_s must be > 0 and accelerators >= 1")
    return samples / accelerators * compute_s_per_sample / wall_s


def emit(**event) -> None:
    print(json.dumps(event), flush=True)


def rss_bytes() -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", required=True, help="the ImageFolder-like data set (class folders of .jpg)")
    p.add_argument("--accelerators", type=int, nargs="+", default=[1, 2, 4, 8],
                   help="emulated accelerator counts, one epoch each, in this order")
    p.add_argument("--batch-size", type=int, default=32, help="samples per accelerator per step (B)")
    p.add_argument("--workers", type=int, default=4, help="DataLoader num_workers")
    p.add_argument("--compute-ms-per-sample", type=float, required=True,
                   help="emulated accelerator compute per sample (ms)")
    p.add_argument("--seed", type=int, default=1234, help="seed of the shuffles (per N)")
    p.add_argument("--memcg", default=None, help="cgroup v1 memory group directory to join after imports")
    p.add_argument("--stop-below", type=float, default=0.0,
                   help="stop before the next (larger) N once an epoch's AU is below this")
    p.add_argument("--crop", type=int, default=64, help="center crop (pixels) before PILToTensor")
    p.add_argument("--progress-every", type=float, default=10.0, help="seconds between progress lines")
    p.add_argument("--parent-pid", type=int, default=0, help="exit when this process dies (PR_SET_PDEATHSIG)")
    return p.parse_args(argv)


def die_with_parent(parent: int) -> None:
    """SIGKILL when the benchmark dies, so a killed run leaves no client reading a mount.
    (The DataLoader workers notice their own parent is gone and exit.)"""
    import ctypes
    import signal
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:
        os._exit(1)


class JoinMemcg:
    """``worker_init_fn`` that moves a DataLoader worker into a memory cgroup (picklable)."""

    def __init__(self, memcg: str) -> None:
        self.procs = os.path.join(memcg, "cgroup.procs")

    def __call__(self, _worker_id: int) -> None:
        with open(self.procs, "w") as f:
            f.write(f"{os.getpid()}\n")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.parent_pid:
        die_with_parent(args.parent_pid)
    t0 = time.monotonic()
    import warnings

    import torch
    import torchvision
    from torch.utils.data import DataLoader
    from torchvision import datasets, transforms
    # "4 workers on a 2-CPU machine may be slow": known, and the same for every row.
    warnings.filterwarnings("ignore", message=".*worker processes in total.*")
    import_s = time.monotonic() - t0
    rss_after_import = rss_bytes()
    join = JoinMemcg(args.memcg) if args.memcg else None

    transform = transforms.Compose([transforms.CenterCrop(args.crop), transforms.PILToTensor()])
    ds = datasets.DatasetFolder(args.root, loader=datasets.folder.default_loader, extensions=(".jpg",),
                                transform=transform)
    emit(event="start", samples=len(ds), classes=len(ds.classes), import_s=round(import_s, 3),
         rss_bytes_after_import=rss_after_import, memcg=args.memcg, pid=os.getpid(),
         torch=torch.__version__, torchvision=torchvision.__version__)
    c = args.compute_ms_per_sample / 1e3
    for n in args.accelerators:
        gen = torch.Generator()
        gen.manual_seed(args.seed * 1000 + n)
        dl = DataLoader(ds, batch_size=args.batch_size * n, shuffle=True, num_workers=args.workers,
                        generator=gen, worker_init_fn=join)
        samples = batches = 0
        compute_s = slept_s = wait_s = 0.0
        first_batch_s = None
        start = time.monotonic()
        last_progress = start
        it = iter(dl)
        while True:
            w0 = time.monotonic()
            try:
                images, _labels = next(it)
            except StopIteration:
                break
            now = time.monotonic()
            wait_s += now - w0
            if first_batch_s is None:
                first_batch_s = now - start
            m = int(images.shape[0])
            step = m / n * c  # the N accelerators' step on this batch
            time.sleep(step)
            slept_s += time.monotonic() - now
            compute_s += step
            samples += m
            batches += 1
            if time.monotonic() - last_progress >= args.progress_every:
                last_progress = time.monotonic()
                emit(event="progress", accelerators=n, samples=samples, of=len(ds),
                     seconds=round(last_progress - start, 2))
        wall = time.monotonic() - start
        del it, dl
        au = accelerator_utilization(samples, c, n, wall)
        emit(event="epoch", accelerators=n, batch_size=args.batch_size * n, samples=samples, batches=batches,
             wall_s=round(wall, 4), compute_s=round(compute_s, 4), slept_s=round(slept_s, 4),
             data_wait_s=round(wait_s, 4), first_batch_s=round(first_batch_s or 0.0, 4),
             samples_per_s=round(samples / wall, 2), au=round(au, 4))
        if au < args.stop_below:
            break
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as e:  # noqa: BLE001 -- the parent reads this line and fails the run
        emit(event="error", message=f"{type(e).__name__}: {e}")
        sys.exit(1)
