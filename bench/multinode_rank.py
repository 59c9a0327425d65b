#!/usr/bin/python3
"""One rank of multinode_bench.py: an unmodified torchvision data pipeline on one node.

``DatasetFolder(root)`` + ``DistributedSampler(num_replicas=world, rank=rank,
shuffle=True)`` + ``DataLoader(num_workers=W)``: what a rank of a data-parallel job
reads, without the job's model. There is no ``torch.distributed`` process group: the
sampler takes its rank and world size as arguments, which is all it needs to shard.
Nothing here knows about epochfs; run under ``epochfs run --`` it publishes its plans.

With ``--compute-ms-per-sample``, the rank's accelerator is emulated: a sleep per batch
(MLPerf Storage's method), so the data has to keep up with a rate, and the storage has
idle time that readahead can use.

Each sample is checked: a file's first line is its own name and its length is the
benchmark's size, so a byte from the wrong file or a short read is caught (and counted,
never hidden).

The epochs are driven by the benchmark over stdin/stdout, so that all ranks start an
epoch together and the benchmark can drop the page cache and read each node's status
between epochs:
    -> {"event": "ready", "epoch": e}        (stdout)
    <- "go"                                  (stdin)
    -> {"event": "epoch", "epoch": e, "seconds": s, "samples": n, "expected": n', "bytes": b,
        "bad": k}
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def emit(**event) -> None:
    print(json.dumps(event), flush=True)


class CheckedBytes:
    """The DatasetFolder loader: the file's bytes, checked against its name and size."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __call__(self, path: str) -> tuple[int, bool]:
        with open(path, "rb") as f:
            data = f.read()
        ok = len(data) == self.size and data.startswith(os.path.basename(path).encode() + b"\n")
        return len(data), ok


def collate(batch):
    """(samples, bytes, bad samples) of a batch: a sample is ((length, ok), class index)."""
    return len(batch), sum(n for (n, _), _ in batch), sum(1 for (_, ok), _ in batch if not ok)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", required=True)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--epochs", type=int, required=True)
    p.add_argument("--size", type=int, required=True, help="bytes of every sample")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--compute-ms-per-sample", type=float, default=0.0,
                   help="the emulated accelerator's time per sample (a sleep after each batch)")
    a = p.parse_args()

    from torch.utils.data import DataLoader, DistributedSampler
    from torchvision import datasets

    t0 = time.monotonic()
    dataset = datasets.DatasetFolder(a.root, loader=CheckedBytes(a.size), extensions=(".jpg",))
    sampler = DistributedSampler(dataset, num_replicas=a.world, rank=a.rank, shuffle=True, seed=a.seed)
    loader = DataLoader(dataset, batch_size=a.batch_size, sampler=sampler, num_workers=a.workers,
                        collate_fn=collate)
    emit(event="start", files=len(dataset), list_seconds=round(time.monotonic() - t0, 3))
    for epoch in range(a.epochs):
        emit(event="ready", epoch=epoch)
        if sys.stdin.readline().strip() != "go":
            return 0  # the benchmark stopped
        sampler.set_epoch(epoch)
        start = time.monotonic()
        samples = nbytes = bad = 0
        for batch_samples, batch_bytes, batch_bad in loader:
            if a.compute_ms_per_sample > 0:
                time.sleep(batch_samples * a.compute_ms_per_sample / 1e3)
            samples += batch_samples
            nbytes += batch_bytes
            bad += batch_bad
        emit(event="epoch", epoch=epoch, seconds=round(time.monotonic() - start, 4), samples=samples,
             expected=len(sampler), bytes=nbytes, bad=bad)
    return 0


if __name__ == "__main__":
    sys.exit(main())
