#!/usr/bin/python3
"""Loader benchmark: torch DataLoader vs the epochfs loader on the same files.

For sample sizes of 4 KB, 128 KB and 2 MB (one file per sample, read from the page
cache), measures samples/s and GB/s delivered to the consumer:

  * torch DataLoader: workers = CPU cores, pin_memory=True when there is CUDA,
    prefetch_factor=2, persistent workers (its best case), batches moved to the device;
  * DataLoader + a side-stream prefetcher (GPU only): the next batch is copied to the
    device on a second stream while the current one is consumed;
  * epochfs.Loader (fixed-size records: one [batch, size] uint8 tensor per batch);
  * the machine's own limit: N threads that only open, pread and close the same files
    (N = the loader's reader threads, and every core).

On a GPU machine it also measures the pinned host-to-device cudaMemcpy peak in the same
run, and the GPU idle fraction of a synthetic loop whose step keeps the GPU busy for
5 ms per batch. Without a GPU (or with a CPU-only torch) the host paths are compared.

Writes docs/bench/loader_bench.json and docs/bench/loader_bench.png; prints a table.

    PYTHONPATH=build/loader/python /usr/bin/python3 bench/loader_bench.py
"""

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

import epochfs

KB = 1024
MB = 1024 * KB
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class RawFiles(Dataset):
    """One uint8 tensor per file: what a DataLoader user would write."""

    def __init__(self, files):
        self.files = files

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        return torch.from_numpy(np.fromfile(self.files[i], dtype=np.uint8)), 0


def make_files(root, size, count):
    os.makedirs(root, exist_ok=True)
    rng = np.random.default_rng(size)
    block = rng.integers(0, 256, size=size + 4096, dtype=np.uint8).tobytes()
    files = []
    for i in range(count):
        path = os.path.join(root, f"{i:06d}.bin")
        with open(path, "wb") as f:
            off = (i * 61) % 4096
            f.write(block[off:off + size])
        files.append(path)
    return files


def warm_page_cache(files):
    for f in files:
        with open(f, "rb") as fh:
            while fh.read(1 << 22):
                pass


def run_epochs(make_iter, on_batch, min_seconds, min_epochs):
    """Times whole epochs (after one warm-up epoch); returns (samples, bytes, seconds, epochs)."""
    for batch in make_iter():  # warm-up: workers start, buffers are allocated
        on_batch(batch)
    samples = nbytes = epochs = 0
    t0 = time.perf_counter()
    while True:
        for batch in make_iter():
            n, b = on_batch(batch)
            samples += n
            nbytes += b
        epochs += 1
        elapsed = time.perf_counter() - t0
        if epochs >= min_epochs and elapsed >= min_seconds:
            return samples, nbytes, elapsed, epochs


def bench_size(size, files, batch, device, args):
    cores = os.cpu_count()
    on_cuda = device.type == "cuda"
    results = []

    def consume(x):
        if on_cuda:
            torch.cuda.current_stream().synchronize()
        return x.shape[0], x.numel() * x.element_size()

    # torch DataLoader
    dl = DataLoader(RawFiles(files), batch_size=batch, shuffle=True, num_workers=cores,
                    pin_memory=on_cuda, prefetch_factor=2, persistent_workers=True)

    def dl_batch(b):
        x = b[0].to(device, non_blocking=True)
        return consume(x)

    results.append(("DataLoader", run_epochs(lambda: iter(dl), dl_batch, args.seconds, 2)))

    if on_cuda:  # DataLoader + side-stream prefetcher
        def prefetched():
            stream = torch.cuda.Stream()
            it = iter(dl)
            nxt = None

            def load():
                try:
                    b = next(it)
                except StopIteration:
                    return None
                with torch.cuda.stream(stream):
                    x = b[0].to(device, non_blocking=True)
                return x

            nxt = load()
            while nxt is not None:
                torch.cuda.current_stream().wait_stream(stream)
                x = nxt
                x.record_stream(torch.cuda.current_stream())
                nxt = load()
                yield x

        results.append(("DataLoader+prefetch",
                        run_epochs(prefetched, consume, args.seconds, 2)))
    del dl

    # epochfs
    loader = epochfs.Loader(files, batch_size=batch, shuffle=True, record_shape=(size,),
                            dtype=torch.uint8, device=device, publish_plan=False,
                            reader_threads=args.reader_threads)
    threads = loader.reader_threads
    results.append((f"epochfs ({loader.io_backend} x{threads})",
                    run_epochs(lambda: iter(loader), lambda b: consume(b[0]), args.seconds, 2)))
    loader.close()
    if threads != cores and not args.reader_threads:  # a reader thread on every core
        loader = epochfs.Loader(files, batch_size=batch, shuffle=True, record_shape=(size,),
                                dtype=torch.uint8, device=device, publish_plan=False,
                                reader_threads=cores)
        results.append((f"epochfs, every core ({loader.io_backend} x{cores})",
                        run_epochs(lambda: iter(loader), lambda b: consume(b[0]), args.seconds, 2)))
        loader.close()
    # The machine's own limit, in the same run: threads that only open, pread and close
    # the same files from the page cache (the loader's thread count, and every core).
    for n in sorted({threads, cores}):
        # Into a buffer as large as the loader's ring (4 batches), as the loader writes.
        f, b, t = epochfs._epochfs.parallel_pread(files, n, args.seconds, 4 * batch * size)
        results.append((f"pread limit x{n}", (f, b, t, 1)))
    if args.pread:  # the same loader on its pread fallback: what io_uring buys
        loader = epochfs.Loader(files, batch_size=batch, shuffle=True, record_shape=(size,),
                                dtype=torch.uint8, device=device, publish_plan=False, io="pread")
        results.append(("epochfs (pread)",
                        run_epochs(lambda: iter(loader), lambda b: consume(b[0]), args.seconds, 2)))
        loader.close()
    return [{"size": size, "loader": name, "samples": s, "bytes": b, "seconds": t,
             "epochs": e, "samples_per_s": s / t, "gb_per_s": b / t / 1e9}
            for name, (s, b, t, e) in results]


def pinned_copy_peak(device):
    n = 256 * MB
    host = torch.empty(n, dtype=torch.uint8).pin_memory()
    dev = torch.empty(n, dtype=torch.uint8, device=device)
    for _ in range(3):
        dev.copy_(host, non_blocking=True)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    reps = 20
    start.record()
    for _ in range(reps):
        dev.copy_(host, non_blocking=True)
    end.record()
    end.synchronize()
    return n * reps / (start.elapsed_time(end) / 1e3) / 1e9


def gpu_idle_fraction(files, size, batch, device, step_ms=5.0, steps=200):
    """Idle share of the GPU in a loop whose step is a 5 ms kernel per batch."""
    # Calibrate torch.cuda._sleep cycles to step_ms.
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    cycles = 1_000_000
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    cycles = int(cycles * step_ms / start.elapsed_time(end))

    out = {}
    loader = epochfs.Loader(files, batch_size=batch, shuffle=True, record_shape=(size,),
                            dtype=torch.uint8, device=device, publish_plan=False)
    dl = DataLoader(RawFiles(files), batch_size=batch, shuffle=True,
                    num_workers=os.cpu_count(), pin_memory=True, prefetch_factor=2,
                    persistent_workers=True)
    for name, make in (("epochfs", lambda: (b[0] for b in loader)),
                       ("DataLoader", lambda: (b[0].to(device, non_blocking=True) for b in dl))):
        for x in make():  # warm-up epoch
            pass
        torch.cuda.synchronize()
        done = 0
        t0 = time.perf_counter()
        while done < steps:
            for x in make():
                torch.cuda._sleep(cycles)  # the "training step"
                done += 1
                if done >= steps:
                    break
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        out[name] = max(0.0, 1.0 - done * step_ms / 1e3 / wall)
    loader.close()
    return out


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    sizes = sorted({r["size"] for r in results})
    loaders = list(dict.fromkeys(r["loader"] for r in results))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.8 / len(loaders)
    for ax, key, label in ((axes[0], "samples_per_s", "samples/s"),
                           (axes[1], "gb_per_s", "GB/s delivered")):
        for j, name in enumerate(loaders):
            vals = [next((r[key] for r in results if r["size"] == s and r["loader"] == name), 0)
                    for s in sizes]
            ax.bar([i + j * width for i in range(len(sizes))], vals, width, label=name)
        ax.set_xticks([i + width * (len(loaders) - 1) / 2 for i in range(len(sizes))])
        ax.set_xticklabels([f"{s // KB} KB" if s < MB else f"{s // MB} MB" for s in sizes])
        ax.set_ylabel(label)
        ax.set_yscale("log")
        ax.set_xlabel("sample size")
    axes[0].legend()
    fig.suptitle(f"epochfs loader vs torch DataLoader ({os.cpu_count()} cores, page cache)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workdir", default=None, help="where to write the sample files")
    p.add_argument("--seconds", type=float, default=3.0, help="timed seconds per measurement")
    p.add_argument("--out", default=os.path.join(REPO, "docs", "bench"))
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda if usable)")
    p.add_argument("--no-pread", dest="pread", action="store_false",
                   help="skip the epochfs pread-fallback rows")
    p.add_argument("--reader-threads", type=int, default=0,
                   help="the loader's reader threads (0: its default, half the cores)")
    args = p.parse_args()

    usable, why = epochfs.cuda_usable()
    if args.device:
        device = torch.device(args.device)
    else:
        device = torch.device("cuda" if usable and torch.cuda.is_available() else "cpu")
    # (sample size, files, batch size): 80 MB to 2 GB per size, all in the page cache. More
    # 2 MB files where memory allows: an epoch of 8 batches is mostly its start and end.
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    plan = [(4 * KB, 20000, 64), (128 * KB, 2000, 64),
            (2 * MB, 1024 if memory > 32 * 1024**3 else 256, 32)]

    load_before = os.getloadavg()[0]
    workdir = tempfile.mkdtemp(prefix="epochfs-loader-bench-", dir=args.workdir)
    results = []
    gpu = None
    try:
        for size, count, batch in plan:
            files = make_files(os.path.join(workdir, str(size)), size, count)
            warm_page_cache(files)
            rows = bench_size(size, files, batch, device, args)
            results += rows
            for r in rows:
                print(f"  {size // KB:>5d} KB  {r['loader']:<22s} {r['samples_per_s']:>10.0f} "
                      f"samples/s {r['gb_per_s']:>7.3f} GB/s", flush=True)
            if device.type == "cuda" and size == 2 * MB:
                gpu = {"pinned_copy_peak_gb_per_s": pinned_copy_peak(device),
                       "idle_fraction_5ms_step": gpu_idle_fraction(files, size, batch, device),
                       "name": torch.cuda.get_device_name(device)}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    def value(size, prefix, key="samples_per_s"):
        return next(r[key] for r in results if r["size"] == size and r["loader"].startswith(prefix)
                    and "(pread)" not in r["loader"])

    def limit(size, threads, key="gb_per_s"):
        return next(r[key] for r in results
                    if r["size"] == size and r["loader"] == f"pread limit x{threads}")

    summary = {}
    for size, _, _ in plan:
        epochfs_row = next(r for r in results if r["size"] == size
                           and r["loader"].startswith("epochfs (") and "(pread)" not in r["loader"])
        threads = int(epochfs_row["loader"].rsplit("x", 1)[1].rstrip(")"))
        summary[str(size)] = {
            "speedup_vs_dataloader": value(size, "epochfs") / value(size, "DataLoader"),
            "reader_threads": threads,
            "fraction_of_pread_limit_same_threads": epochfs_row["gb_per_s"] / limit(size, threads),
            "fraction_of_pread_limit_all_cores": epochfs_row["gb_per_s"] / limit(size, os.cpu_count()),
        }
    if gpu:
        summary["2MB_fraction_of_pinned_peak"] = (value(2 * MB, "epochfs", "gb_per_s") /
                                                  gpu["pinned_copy_peak_gb_per_s"])
    report = {
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0],
                    "torch": torch.__version__, "platform": platform.platform(),
                    "device": str(device), "cuda": {"usable": usable, "why_not": why},
                    "loadavg_before": load_before, "loadavg_after": os.getloadavg()[0]},
        "setup": "files in the page cache, shuffled order, whole epochs after one warm-up; "
                 "DataLoader: num_workers=cpu_count, prefetch_factor=2, persistent workers, "
                 "pin_memory when on CUDA; epochfs: fixed-size records, publish_plan off. "
                 "Neither consumer touches the bytes on the host: DataLoader batches arrive "
                 "collated through shared memory, epochfs batches are views of its ring.",
        "results": results,
        "gpu": gpu,
        "summary": summary,
        "targets": {"speedup_up_to_128KB": 2.0, "fraction_of_pinned_peak_2MB": 0.85,
                    "gpu_idle_fraction": 0.05, "fraction_of_pread_limit_without_gpu": 0.8},
    }
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "loader_bench.json"), "w") as f:
        json.dump(report, f, indent=2)
    plot(results, os.path.join(args.out, "loader_bench.png"))

    print()
    print(f"{'size':>8s}  {'loader':<22s} {'samples/s':>10s} {'GB/s':>8s}")
    for r in results:
        print(f"{r['size'] // KB:>5d} KB  {r['loader']:<22s} {r['samples_per_s']:>10.0f} "
              f"{r['gb_per_s']:>8.3f}")
    for size, _, _ in plan:
        sm = summary[str(size)]
        print(f"{size // KB:>5d} KB: epochfs / DataLoader = {sm['speedup_vs_dataloader']:.2f}x; "
              f"epochfs / pread limit = {sm['fraction_of_pread_limit_same_threads']:.0%} at its "
              f"{sm['reader_threads']} threads, {sm['fraction_of_pread_limit_all_cores']:.0%} of "
              f"every core's")
    if gpu:
        print(f"pinned cudaMemcpy peak {gpu['pinned_copy_peak_gb_per_s']:.2f} GB/s; epochfs at 2 MB "
              f"reaches {summary['2MB_fraction_of_pinned_peak']:.0%} of it")
        print(f"GPU idle with a 5 ms step: {gpu['idle_fraction_5ms_step']}")
    else:
        print(f"(host mode: {why if not usable else 'torch has no CUDA'})")
    print(f"wrote {os.path.join(args.out, 'loader_bench.json')} and loader_bench.png")


if __name__ == "__main__":
    main()
