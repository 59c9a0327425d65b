"""A DataLoader training loop, and the same loop on epochfs: a two-line change.

The data set is ImageFolder-style, one preprocessed float32 [3, 32, 32] array per .npy
file: root/<class>/<sample>.npy. The two lines that change are in make_loader():

    -    loader = DataLoader(NpyFolder(root), batch_size=64, shuffle=True,
    -                        num_workers=os.cpu_count(), pin_memory=True)
    +    import epochfs
    +    loader = epochfs.Loader(root, batch_size=64, shuffle=True, record_shape=(3, 32, 32))

(This script also passes device=..., only because it lets you pick one; the default is
the GPU when there is one.) The loop itself is untouched: `for x, y in loader` yields the same (x, y) pairs, except
that with epochfs they are already on the GPU, so `.to(device, non_blocking=True)` is a
no-op.

    /usr/bin/python3 loader/examples/train.py ROOT             # epochfs
    /usr/bin/python3 loader/examples/train.py ROOT --torch     # the original DataLoader
    /usr/bin/python3 loader/examples/train.py --synthetic      # makes a small data set, runs both
"""

import argparse
import os
import shutil
import tempfile
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


class NpyFolder(Dataset):
    """What a DataLoader user writes today: ImageFolder over .npy files."""

    def __init__(self, root):
        self.classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
        self.samples = [(os.path.join(root, c, f), label)
                        for label, c in enumerate(self.classes)
                        for f in sorted(os.listdir(os.path.join(root, c)))]

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        path, label = self.samples[i]
        return torch.from_numpy(np.load(path)), label


def make_loader(root, use_torch, device):
    pin = device.type == "cuda"
    if use_torch:
        return DataLoader(NpyFolder(root), batch_size=64, shuffle=True,
                          num_workers=os.cpu_count(), pin_memory=pin)
    import epochfs  # noqa: E402  (line 1 of the change)
    return epochfs.Loader(root, batch_size=64, shuffle=True, record_shape=(3, 32, 32),  # line 2
                          device=device)


def train(root, use_torch, epochs, device):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(4),
        torch.nn.Flatten(), torch.nn.Linear(16 * 16, 2)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = make_loader(root, use_torch, device)
    name = "DataLoader" if use_torch else "epochfs"
    for epoch in range(epochs):
        t0, seen, total = time.perf_counter(), 0, 0.0
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            seen += len(y)
            total += loss.item() * len(y)
        dt = time.perf_counter() - t0
        print(f"{name:10s} epoch {epoch}: {seen} samples, loss {total / seen:.4f}, "
              f"{seen / dt:.0f} samples/s")
    return seen


def make_synthetic(root, per_class=256):
    rng = np.random.default_rng(0)
    for label, c in enumerate(("cats", "dogs")):
        os.makedirs(os.path.join(root, c))
        for i in range(per_class):
            x = rng.standard_normal((3, 32, 32)).astype(np.float32) + (0.5 if label else -0.5)
            np.save(os.path.join(root, c, f"{i:05d}.npy"), x)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("root", nargs="?")
    p.add_argument("--torch", action="store_true", help="use torch's DataLoader")
    p.add_argument("--synthetic", action="store_true", help="make a data set; run both loaders")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args()
    device = torch.device(args.device)
    if args.synthetic:
        root = tempfile.mkdtemp(prefix="epochfs-example-")
        try:
            make_synthetic(root)
            n_torch = train(root, True, args.epochs, device)
            n_epochfs = train(root, False, args.epochs, device)
            assert n_torch == n_epochfs == 512, (n_torch, n_epochfs)
        finally:
            shutil.rmtree(root)
    else:
        if not args.root:
            p.error("give a data folder, or --synthetic")
        train(args.root, args.torch, args.epochs, device)


if __name__ == "__main__":
    main()
