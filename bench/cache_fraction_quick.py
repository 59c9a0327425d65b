#!/usr/bin/python3
"""Quick cache-fraction measurement of the prefetcher (not the full benchmark).

A data set larger than the RAM tier (SSD tier off), shuffled epochs by `--readers`
threads of an *unmodified* reader (no plan), or with each epoch's order published to
.epochfs/plan (`--publish`). Before every epoch the kernel's page cache is dropped, so
the daemon's RAM tier is the only cache (what the full benchmark gets with a memory
limit). Prints, per epoch, the RAM hit ratio and source bytes / data set, from the
daemon's counters. The source is NOT throttled here: readahead can keep up, so these
are the policy's numbers, not a bandwidth-limited run.

    /usr/bin/python3 bench/cache_fraction_quick.py --fractions 0.25 0.5 0.75
"""
import argparse, json, os, random, shutil, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from paced_reader import read_epoch  # noqa: E402

def stats(mnt):
    with open(os.path.join(mnt, ".epochfs", "stats")) as f:
        return json.load(f)

def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("1\n")

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochfs", default="build/fs/epochfs")
    ap.add_argument("--workdir", default="/var/tmp/epochfs-cfq")
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--readers", type=int, default=4)
    ap.add_argument("--fractions", type=float, nargs="+", default=[0.5])
    ap.add_argument("--publish", action="store_true")
    args = ap.parse_args()
    src, mnt, cache = (os.path.join(args.workdir, d) for d in ("src", "mnt", "cache"))
    if not os.path.isdir(src) or len(os.listdir(src)) != 10:
        shutil.rmtree(args.workdir, ignore_errors=True)
        for c in range(10):
            os.makedirs(os.path.join(src, f"c{c}"))
        for i in range(args.files):
            with open(os.path.join(src, f"c{i % 10}", f"{i:06}.jpg"), "wb") as f:
                f.write(os.urandom(args.size))
        time.sleep(0.2)
    os.makedirs(mnt, exist_ok=True)
    names = sorted(os.path.join(f"c{c}", n) for c in range(10) for n in os.listdir(os.path.join(src, f"c{c}")))
    total = sum(os.path.getsize(os.path.join(src, n)) for n in names)
    results = []
    for frac in args.fractions:
        shutil.rmtree(cache, ignore_errors=True)
        ram = int(frac * total * 1.0)
        subprocess.run([args.epochfs, "mount", src, mnt, "--cache-dir", cache, "--ram", str(ram),
                        "--disk", "0"], check=True)
        try:
            for epoch in range(args.epochs):
                order = names[:]
                random.Random(epoch).shuffle(order)
                if args.publish:
                    with open(os.path.join(mnt, ".epochfs", "plan"), "w") as f:
                        f.write("epochfs-plan 1\n" + "".join(n + "\n" for n in order) + "\n")
                drop_caches()
                before = stats(mnt)
                dt = read_epoch(mnt, order, args.readers)
                after = stats(mnt)
                d = lambda k: after[k] - before[k]
                reads = d("ram_hits") + d("misses") + d("ssd_hits")
                row = dict(fraction=frac, epoch=epoch, publish=args.publish, seconds=round(dt, 2),
                           ram_hit_ratio=round(d("ram_hits") / max(reads, 1), 3),
                           source_bytes_per_dataset=round(d("source_bytes") / total, 3),
                           pattern=after.get("pattern"), prefetched=d("prefetched"),
                           misses=d("misses"), prefetch_from_source=d("prefetch_from_source"),
                           already=after["prefetch_already_cached"] - before["prefetch_already_cached"] if "prefetch_already_cached" in after else None,
                           evictions=d("ram_evictions"), epoch_no=after.get("epoch"))
                print(json.dumps(row), flush=True)
                results.append(row)
        finally:
            subprocess.run([args.epochfs, "umount", mnt])
    return results

if __name__ == "__main__":
    main()
