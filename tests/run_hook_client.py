#!/usr/bin/python3
"""The data side of an unmodified torchvision training loop, for run_hook_test.cc.

    run_hook_client.py MOUNT SOURCE WORKERS SEED EPOCHS [unmapped|distributed|distributed-fixed]

A DatasetFolder over MOUNT/train (buffered opens, as PIL's loader does) and a DataLoader
with a seeded RandomSampler; per epoch it prints, as JSON: the order a twin sampler
(same seed) produces, the order the samples were read in, whether every byte matched
the source, the mount's plan counters after the epoch, and the ioctls the mount got
during it. `unmapped`: a data set that
does not say where its samples are (the hook must leave it alone). `distributed`: rank 1
of 2 of a DistributedSampler, set_epoch() called each epoch, as its documentation says;
the report then also has the twin's order for the next epoch. `distributed-fixed`: the
same without set_epoch() (every epoch the same order).
"""
import json
import os
import sys
import zlib

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, RandomSampler
from torchvision.datasets import DatasetFolder

SOURCE = None


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    with open(os.path.join(SOURCE, os.path.relpath(path, MOUNT)), "rb") as f:
        same = f.read() == data
    return path, zlib.crc32(data), same


class Unmapped(Dataset):
    def __init__(self, inner):
        self._inner = inner

    def __len__(self):
        return len(self._inner)

    def __getitem__(self, i):
        return self._inner[i]


def main():
    global MOUNT, SOURCE
    MOUNT, SOURCE = sys.argv[1], sys.argv[2]
    workers, seed, epochs = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    mode = sys.argv[6] if len(sys.argv) > 6 else ""
    folder = DatasetFolder(os.path.join(MOUNT, "train"), loader=load, extensions=(".bin",))
    dataset = Unmapped(folder) if mode == "unmapped" else folder
    if mode.startswith("distributed"):
        sampler = DistributedSampler(dataset, num_replicas=2, rank=1, shuffle=True, seed=seed)
        twin = DistributedSampler(dataset, num_replicas=2, rank=1, shuffle=True, seed=seed)
    else:
        generator = torch.Generator()
        generator.manual_seed(seed)
        sampler = RandomSampler(dataset, generator=generator)
        twin_generator = torch.Generator()
        twin_generator.manual_seed(seed)
        twin = RandomSampler(dataset, generator=twin_generator)
    loader = DataLoader(dataset, batch_size=3, sampler=sampler, num_workers=workers, collate_fn=list)

    def paths(order):
        return [os.path.relpath(folder.samples[i][0], MOUNT) for i in order]
    def stats():
        # Binary and unbuffered: the client's own reads of the stats file send no ioctl.
        with open(os.path.join(MOUNT, ".epochfs", "stats"), "rb", buffering=0) as f:
            return json.loads(f.read())
    ioctls = stats()["requests"].get("ioctl", 0)
    out = []
    for epoch in range(epochs):
        if mode == "distributed":
            sampler.set_epoch(epoch)
            twin.set_epoch(epoch)
        expected = paths(twin)
        report = {}
        if mode == "distributed":
            twin.set_epoch(epoch + 1)
            report["next_expected"] = paths(twin)
        read, all_same = [], True
        for batch in loader:
            for (path, crc, same), _target in batch:
                read.append(os.path.relpath(path, MOUNT))
                all_same = all_same and same
        now = stats()
        report.update({"expected": expected, "read": read, "bytes_match": all_same,
                       "plan_fingerprint": now["plan_fingerprint"],
                       "plans_published": now["plans_published"], "plans": now["plans"],
                       "ioctls": now["requests"].get("ioctl", 0) - ioctls})
        ioctls = now["requests"].get("ioctl", 0)
        out.append(report)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
