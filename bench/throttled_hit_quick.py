#!/usr/bin/python3
"""Quick throttled check of the prefetcher's hit-ratio targets (not the full benchmark).

The source is an ext4 loop image throttled to --iops read IOPS (cgroup v1 blkio; this
process and the epochfs daemon it starts are in the group). The data set is larger than
the RAM tier (--fraction of it; SSD tier off); the kernel page cache is dropped before
every epoch. --readers threads read a fresh permutation each epoch and "compute" for a
fixed time per sample, so that together they consume --rate samples/s (450 on a
300-IOPS source: 1.5x). Runs an unmodified reader and one that publishes each epoch's
order, and prints per epoch the RAM hit ratio, source bytes / data set and the time.

    /usr/bin/python3 bench/throttled_hit_quick.py
"""
import argparse, json, os, random, shutil, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchenv import BlkioThrottle, Cleanup, LoopImage, drop_caches  # noqa: E402
from paced_reader import read_epoch  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--epochfs", default=os.path.abspath("build/fs/epochfs"))
ap.add_argument("--workdir", default="/var/tmp/epochfs-thq")
ap.add_argument("--files", type=int, default=2000)
ap.add_argument("--size", type=int, default=100_000)
ap.add_argument("--iops", type=int, default=300)
ap.add_argument("--rate", type=float, default=450.0)
ap.add_argument("--readers", type=int, default=4)
ap.add_argument("--fraction", type=float, default=0.5)
ap.add_argument("--epochs", type=int, default=4)
ap.add_argument("--baseline", action="store_true",
                help="also: the kernel page cache over the raw source, the reader in a memory "
                     "cgroup limited to the same fraction of the data set (the LRU baseline)")
args = ap.parse_args()

cleanup = Cleanup()
cleanup.install()
shutil.rmtree(args.workdir, ignore_errors=True)
os.makedirs(args.workdir)
cg = BlkioThrottle(cleanup)
cg.create_and_join()
loop = LoopImage(cleanup, os.path.join(args.workdir, "src.img"), os.path.join(args.workdir, "src"))
loop.create(int(args.files * args.size * 1.3) + (256 << 20), args.files + 1024)
root = os.path.join(loop.mountpoint, "data")
names = []
for i in range(args.files):
    d = os.path.join(root, f"c{i % 10}")
    os.makedirs(d, exist_ok=True)
    name = f"c{i % 10}/{i:06}.jpg"
    with open(os.path.join(root, name), "wb") as f:
        f.write(os.urandom(args.size))
    names.append(name)
names.sort()
total = args.files * args.size
time.sleep(0.2)
loop.remount_readonly()
cg.limit(loop.majmin, args.iops)
mnt, cache = os.path.join(args.workdir, "mnt"), os.path.join(args.workdir, "cache")
os.makedirs(mnt, exist_ok=True)
compute = args.readers / args.rate  # seconds per sample per reader


def stats():
    with open(os.path.join(mnt, ".epochfs", "stats")) as f:
        return json.load(f)


BASELINE_CHILD = r"""
import json, os, random, sys
cg, limit, root, loopname, epochs, readers, compute, total, bench_dir = sys.argv[1:10]
sys.path.insert(0, bench_dir)
from paced_reader import read_epoch
names = sorted(os.path.join(dp, f)[len(root) + 1:] for dp, _, fs in os.walk(root) for f in fs)
with open(os.path.join(cg, "cgroup.procs"), "w") as f:
    f.write(str(os.getpid()))
def sectors():
    with open(f"/sys/block/{loopname}/stat") as f:
        return int(f.read().split()[2])
for epoch in range(int(epochs)):
    order = names[:]
    random.Random(epoch).shuffle(order)
    s0 = sectors()
    secs = read_epoch(root, order, int(readers), float(compute))
    print(json.dumps(dict(baseline="page cache, memory cgroup " + limit, epoch=epoch,
                          seconds=round(secs, 2), samples_per_s=round(len(order) / secs),
                          source_bytes_per_dataset=round((sectors() - s0) * 512 / int(total), 3))),
          flush=True)
"""

if args.baseline:
    cgpath = "/sys/fs/cgroup/memory/epochfs-thq"
    os.makedirs(cgpath, exist_ok=True)
    cleanup.push("remove memory cgroup", lambda: os.rmdir(cgpath))
    limit = int(args.fraction * total) + (24 << 20)  # + the interpreter's own memory
    with open(os.path.join(cgpath, "memory.limit_in_bytes"), "w") as f:
        f.write(str(limit))
    drop_caches()
    subprocess.run([sys.executable, "-c", BASELINE_CHILD, cgpath, str(limit), root, loop.name,
                    str(args.epochs), str(args.readers), str(compute), str(total),
                    os.path.dirname(os.path.abspath(__file__))], check=True)

for publish in (False, True):
    shutil.rmtree(cache, ignore_errors=True)
    subprocess.run([args.epochfs, "mount", root, mnt, "--cache-dir", cache, "--ram",
                    str(int(args.fraction * total)), "--disk", "0"], check=True)
    try:
        for epoch in range(args.epochs):
            order = names[:]
            random.Random(epoch).shuffle(order)
            drop_caches()
            if publish:
                with open(os.path.join(mnt, ".epochfs", "plan"), "w") as f:
                    f.write("epochfs-plan 1\n" + "".join(n + "\n" for n in order) + "\n")
            before = stats()
            secs = read_epoch(mnt, order, args.readers, compute)
            after = stats()
            d = lambda k: after[k] - before[k]
            reads = d("ram_hits") + d("misses") + d("ssd_hits")
            print(json.dumps(dict(publish=publish, epoch=epoch, fraction=args.fraction,
                                  iops=args.iops, rate=args.rate, seconds=round(secs, 2),
                                  samples_per_s=round(len(order) / secs),
                                  ram_hit_ratio=round(d("ram_hits") / max(reads, 1), 3),
                                  source_bytes_per_dataset=round(d("source_bytes") / total, 3),
                                  pattern=after.get("pattern"))), flush=True)
    finally:
        subprocess.run([args.epochfs, "umount", mnt])
cleanup.run_all()
