#!/usr/bin/python3
"""Training benchmark: how busy does each input pipeline keep the accelerator?

Trains resnet18 and resnet50 (bf16 autocast, channels_last, SGD) for a few epochs on a
generated ImageFolder of real JPEGs (sizes 200-500 px, quality 85-95, a few grayscale
and progressive ones) and reports images/s of steady epochs and accelerator utilisation
(AU = images/s / the ceiling), side by side in one run:

  * ceiling: batches already on the device, the model alone;
  * DataLoader + PIL: torchvision ImageFolder, RandomResizedCrop + flip + normalise on
    the CPU, workers = cores - 2, pinned memory;
  * DataLoader + GPU decode: workers read the bytes only; nvJPEG decodes and the same GPU
    transforms as epochfs's apply (epochfs.images.ImagePipeline), so the row differs
    from the next only in how the bytes arrive;
  * epochfs.Loader(decode="image"): the loader's reader threads, then the same pipeline;

each read directly from the data set folder and through an epochfs mount of it.

Without a GPU it runs the same rows on the CPU with a small model and a small data set.
Writes docs/bench/train_bench.json and train_bench.png and prints a table.

    PYTHONPATH=build/loader/python /usr/bin/python3 bench/train_bench.py [--quick]
"""

import argparse
import io
import json
import multiprocessing as mp
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn

import epochfs
from epochfs.images import ImagePipeline

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---- the data set ---------------------------------------------------------------------

def _make_image(args):
    path, seed = args
    from PIL import Image
    rng = np.random.default_rng(seed)
    w, h = int(rng.integers(200, 501)), int(rng.integers(200, 501))
    y, x = np.mgrid[0:h, 0:w]
    phase = rng.uniform(0, 6.28, size=3)
    base = np.stack([127 + 100 * np.sin(x / (10 + 30 * rng.random()) + phase[c]) *
                     np.cos(y / (10 + 30 * rng.random())) for c in range(3)], axis=-1)
    rgb = np.clip(base + rng.normal(0, 12, size=base.shape), 0, 255).astype(np.uint8)
    im = Image.fromarray(rgb, "RGB")
    kind = rng.random()
    if kind < 0.02:
        im = im.convert("L")
    im.save(path, format="JPEG", quality=int(rng.integers(85, 96)), progressive=0.02 <= kind < 0.07)
    return os.path.getsize(path)


def make_dataset(root, images, classes):
    jobs = []
    for c in range(classes):
        os.makedirs(os.path.join(root, f"class{c:03d}"), exist_ok=True)
    for i in range(images):
        jobs.append((os.path.join(root, f"class{i % classes:03d}", f"{i:06d}.jpg"), i))
    with mp.Pool(os.cpu_count()) as pool:
        sizes = pool.map(_make_image, jobs, chunksize=64)
    return sum(sizes)


# ---- input pipelines ------------------------------------------------------------------

class RawBytes(torch.utils.data.Dataset):
    """(bytes, label): what a DataLoader worker hands over for GPU decoding (bytes, not
    tensors: a tensor per sample costs a shared-memory fd each)."""

    def __init__(self, root):
        from torchvision.datasets import ImageFolder
        self.samples = ImageFolder(root).samples

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        path, label = self.samples[i]
        with open(path, "rb") as f:
            return f.read(), label


def stop_workers(dl):
    """Ends a DataLoader's persistent workers now (each row starts its own)."""
    iterator = getattr(dl, "_iterator", None)
    if iterator is not None and hasattr(iterator, "_shutdown_workers"):
        iterator._shutdown_workers()
    dl._iterator = None


def collate_bytes(batch):
    return [b for b, _ in batch], torch.tensor([y for _, y in batch])


def dataloader_pil(root, args, device):
    from torchvision import datasets, transforms
    tf = transforms.Compose([transforms.RandomResizedCrop(args.size), transforms.RandomHorizontalFlip(),
                             transforms.ToTensor(),
                             transforms.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])
    dl = torch.utils.data.DataLoader(
        datasets.ImageFolder(root, tf), batch_size=args.batch, shuffle=True, drop_last=True,
        num_workers=args.workers, pin_memory=device.type == "cuda", persistent_workers=True,
        prefetch_factor=4)

    def epochs():
        for x, y in dl:
            yield (x.to(device, non_blocking=True).contiguous(memory_format=torch.channels_last),
                   y.to(device, non_blocking=True))
    return epochs, lambda: stop_workers(dl)


def dataloader_gpu_decode(root, args, device):
    dl = torch.utils.data.DataLoader(
        RawBytes(root), batch_size=args.batch, shuffle=True, drop_last=True,
        num_workers=args.workers, collate_fn=collate_bytes, persistent_workers=True,
        prefetch_factor=4)
    pipeline = ImagePipeline(size=args.size, train=True, device=device)

    def epochs():
        for batch_index, (blobs, y) in enumerate(dl):
            data = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in blobs]
            decoded = pipeline.decode(data, [f"sample {i}" for i in range(len(data))])
            x, _ = pipeline.transform(decoded, 0, batch_index)
            yield x, y.to(device, non_blocking=True)
    return epochs, lambda: stop_workers(dl)


def epochfs_loader(root, args, device):
    loader = epochfs.Loader(root, batch_size=args.batch, shuffle=True, drop_last=True,
                            decode="image", size=args.size, train=True, device=device)

    def epochs():
        yield from loader
    return epochs, loader.close


def pipeline_alone(root, args, device):
    """The image pipeline without training: its own images/s, and one batch's decode and
    transform times (each timed 5 times, synchronised) -- what bounds the rows above."""
    loader = epochfs.Loader(root, batch_size=args.batch, shuffle=True, drop_last=True,
                            decode="image", size=args.size, train=True, device=device)
    for _ in loader:  # warm-up
        pass
    sync(device)
    images, t0 = 0, time.perf_counter()
    for x, _ in loader:
        images += x.shape[0]
    sync(device)
    rate = images / (time.perf_counter() - t0)
    loader.close()
    pipeline = loader.pipeline
    files = loader.files[:args.batch]
    blobs = [torch.frombuffer(bytearray(open(f, "rb").read()), dtype=torch.uint8) for f in files]

    def timed(fn):
        fn()
        sync(device)
        t = time.perf_counter()
        for _ in range(5):
            result = fn()
        sync(device)
        return (time.perf_counter() - t) / 5, result
    decode_s, decoded = timed(lambda: pipeline.decode(blobs, files))
    transform_s, _ = timed(lambda: pipeline.transform(decoded, 0, 0))
    return {"images_per_s": rate, "batch": len(files), "decode_ms_per_batch": decode_s * 1e3,
            "transform_ms_per_batch": transform_s * 1e3, "native_transform": pipeline.native,
            "decoded": dict(pipeline.stats)}


def pipelines(gpu):
    return {
        "DataLoader + PIL": dataloader_pil,
        # Without a GPU the same row decodes on the CPU, in the training process.
        "DataLoader + GPU decode" if gpu else "DataLoader + decode in the loop": dataloader_gpu_decode,
        "epochfs.Loader (image pipeline)": epochfs_loader,
    }


# ---- training -------------------------------------------------------------------------

def make_model(name, classes, device):
    import torchvision
    if name == "tiny":
        model = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                              nn.Flatten(), nn.Linear(16, classes))
    else:
        model = getattr(torchvision.models, name)(num_classes=classes)
    model = model.to(device).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    return model, opt


def train_step(model, opt, x, y, device):
    with torch.autocast(device_type=device.type, dtype=torch.bfloat16,
                        enabled=device.type == "cuda"):
        loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_epochs(model, opt, batches, device, args):
    """images/s over the epochs after the first, at least `args.epochs - 1` of them or
    `args.seconds` seconds."""
    for x, y in batches():  # warm-up epoch: workers start, caches fill, kernels tune
        train_step(model, opt, x, y, device)
    sync(device)
    images, epochs, t0 = 0, 0, time.perf_counter()
    while epochs < args.epochs - 1 or (time.perf_counter() - t0 < args.seconds and epochs < 20):
        for x, y in batches():
            train_step(model, opt, x, y, device)
            images += x.shape[0]
        epochs += 1
    sync(device)
    return images / (time.perf_counter() - t0), epochs


def ceiling(model, opt, device, args, classes):
    x = torch.randn(args.batch, 3, args.size, args.size, device=device).contiguous(
        memory_format=torch.channels_last)
    y = torch.randint(0, classes, (args.batch,), device=device)
    for _ in range(5):
        train_step(model, opt, x, y, device)
    sync(device)
    steps, t0 = 0, time.perf_counter()
    while steps < 20 or time.perf_counter() - t0 < min(args.seconds, 5):
        train_step(model, opt, x, y, device)
        steps += 1
    sync(device)
    return steps * args.batch / (time.perf_counter() - t0)


# ---- the mount ------------------------------------------------------------------------

class EpochfsMount:
    def __init__(self, binary, source, workdir):
        self.binary, self.mnt = binary, os.path.join(workdir, "mnt")
        os.makedirs(self.mnt, exist_ok=True)
        subprocess.run([binary, "mount", source, self.mnt, "--cache-dir",
                        os.path.join(workdir, "cache"), "--ram", "4G"], check=True)

    def close(self):
        if subprocess.run([self.binary, "umount", self.mnt], check=False).returncode != 0:
            subprocess.run([self.binary, "umount", "--lazy", self.mnt], check=False)


# ---- main -----------------------------------------------------------------------------

def plot(report, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    models = list(report["models"])
    fig, axes = plt.subplots(1, len(models), figsize=(6 * len(models), 4), squeeze=False)
    for ax, name in zip(axes[0], models):
        rows = report["models"][name]["rows"]
        labels = [f"{r['pipeline']}\n({r['where']})" for r in rows]
        ax.barh(labels, [r["au"] for r in rows])
        ax.axvline(1.0, color="gray", linestyle=":")
        ax.set_xlabel("AU (images/s / ceiling)")
        ax.set_title(f"{name}: ceiling {report['models'][name]['ceiling']:.0f} img/s")
    fig.suptitle(f"{report['machine']['device_name']}, {report['machine']['cpus']} cores")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=None, help="data set size")
    p.add_argument("--classes", type=int, default=100)
    p.add_argument("--models", default=None, help="comma-separated torchvision models")
    p.add_argument("--batch", type=int, default=None)
    p.add_argument("--size", type=int, default=None, help="crop size")
    p.add_argument("--epochs", type=int, default=3, help="epochs per row (the first is warm-up)")
    p.add_argument("--seconds", type=float, default=8.0, help="least timed seconds per row")
    p.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    p.add_argument("--epochfs", default=os.path.join(REPO, "build", "cli", "epochfs"),
                   help="the epochfs binary for the through-the-mount rows ('' to skip them)")
    p.add_argument("--workdir", default=None)
    p.add_argument("--out", default=os.path.join(REPO, "docs", "bench"))
    p.add_argument("--quick", action="store_true", help="a small run (CI smoke test)")
    args = p.parse_args()

    usable, why = epochfs.cuda_usable()
    device = torch.device("cuda" if usable and torch.cuda.is_available() else "cpu")
    gpu = device.type == "cuda"
    args.images = args.images or (10000 if gpu else 800)
    args.batch = args.batch or (256 if gpu else 32)
    args.size = args.size or (224 if gpu else 64)
    models = (args.models or ("resnet18,resnet50" if gpu else "tiny")).split(",")
    if args.quick:
        args.images, args.epochs, args.seconds = min(args.images, 256), 2, 0.0
        args.classes = min(args.classes, 8)
    if gpu:
        torch.backends.cudnn.benchmark = True

    workdir = tempfile.mkdtemp(prefix="epochfs-train-bench-", dir=args.workdir)
    source = os.path.join(workdir, "data")
    mount = None
    report = {"machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0],
                          "torch": torch.__version__, "platform": platform.platform(),
                          "device": str(device), "cuda": {"usable": usable, "why_not": why},
                          "device_name": torch.cuda.get_device_name(device) if gpu else "CPU only"},
              "setup": vars(args).copy(), "models": {}}
    try:
        t0 = time.perf_counter()
        total = make_dataset(source, args.images, args.classes)
        print(f"{args.images} JPEGs in {args.classes} classes, {total / 1e6:.0f} MB, made in "
              f"{time.perf_counter() - t0:.1f} s", flush=True)
        wheres = [("directly", source)]
        if args.epochfs and os.path.exists(args.epochfs) and os.geteuid() == 0:
            mount = EpochfsMount(args.epochfs, source, workdir)
            wheres.append(("through the mount", mount.mnt))
        else:
            print("(no through-the-mount rows: no epochfs binary, or not root)")
        alone = pipeline_alone(source, args, device)
        report["pipeline_alone"] = alone
        print(f"epochfs image pipeline alone: {alone['images_per_s']:.0f} images/s; a batch of "
              f"{alone['batch']}: decode {alone['decode_ms_per_batch']:.1f} ms, transform "
              f"{alone['transform_ms_per_batch']:.1f} ms (batch kernel: {alone['native_transform']})",
              flush=True)
        for name in models:
            model, opt = make_model(name, args.classes, device)
            top = ceiling(model, opt, device, args, args.classes)
            print(f"{name}: ceiling {top:.0f} images/s", flush=True)
            rows = []
            for pipeline, make in pipelines(gpu).items():
                for where, root in wheres:
                    batches, close = make(root, args, device)
                    try:
                        rate, epochs = timed_epochs(model, opt, batches, device, args)
                    finally:
                        close()
                    rows.append({"pipeline": pipeline, "where": where, "images_per_s": rate,
                                 "au": rate / top, "timed_epochs": epochs})
                    print(f"  {pipeline:<32s} {where:<18s} {rate:>9.0f} images/s  AU {rate / top:.2f}",
                          flush=True)
            report["models"][name] = {"ceiling": top, "rows": rows}
    finally:
        if mount:
            mount.close()
        shutil.rmtree(workdir, ignore_errors=True)

    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "train_bench.json"), "w") as f:
        json.dump(report, f, indent=2)
    plot(report, os.path.join(args.out, "train_bench.png"))
    print()
    for name, m in report["models"].items():
        print(f"{name} (ceiling {m['ceiling']:.0f} images/s, {report['machine']['device_name']})")
        print(f"  {'pipeline':<32s} {'read':<18s} {'images/s':>9s} {'AU':>5s}")
        for r in m["rows"]:
            print(f"  {r['pipeline']:<32s} {r['where']:<18s} {r['images_per_s']:>9.0f} {r['au']:>5.2f}")
        pil = next((r for r in m["rows"] if r["pipeline"] == "DataLoader + PIL"
                    and r["where"] == "through the mount"), None)
        ours = next((r for r in m["rows"] if r["pipeline"].startswith("epochfs")
                     and r["where"] == "through the mount"), None)
        if pil and ours:
            print(f"  epochfs image pipeline / DataLoader + PIL, through the mount: "
                  f"{ours['images_per_s'] / pil['images_per_s']:.2f}x")
    print(f"wrote {os.path.join(args.out, 'train_bench.json')} and train_bench.png")


if __name__ == "__main__":
    main()
