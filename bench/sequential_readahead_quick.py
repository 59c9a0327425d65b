#!/usr/bin/python3
"""Quick check: a sequential epoch with a warm SSD tier, a cold RAM tier and a dropped
page cache, with and without readahead (EPOCHFS_READAHEAD=0). One reader, sorted
order (a validation pass). Source not throttled (it is not read: the SSD tier is warm).

    /usr/bin/python3 bench/sequential_readahead_quick.py [--workdir /var/tmp/epochfs-cfq]
"""
import argparse, json, os, shutil, subprocess, time

ap = argparse.ArgumentParser()
ap.add_argument("--epochfs", default="build/fs/epochfs")
ap.add_argument("--workdir", default="/var/tmp/epochfs-cfq")  # made by cache_fraction_quick.py
ap.add_argument("--repeats", type=int, default=2)
args = ap.parse_args()
src, mnt, cache = (os.path.join(args.workdir, d) for d in ("src", "mnt-seq", "cache-seq"))
os.makedirs(mnt, exist_ok=True)
names = sorted(os.path.join(dp, f)[len(src) + 1:] for dp, _, fs in os.walk(src) for f in fs)

def mount(env):
    subprocess.run([args.epochfs, "mount", src, mnt, "--cache-dir", cache, "--ram", "2G"],
                   check=True, env=env)

def read_all():
    t0 = time.time()
    for n in names:
        with open(os.path.join(mnt, n), "rb", buffering=0) as f:
            while f.read(1 << 20):
                pass
    return time.time() - t0

def drop():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")

for rep in range(args.repeats):
    for readahead in ("1", "0"):
        env = dict(os.environ, EPOCHFS_READAHEAD=readahead)
        shutil.rmtree(cache, ignore_errors=True)
        mount(env)
        read_all()  # fills the SSD tier
        subprocess.run([args.epochfs, "umount", mnt], check=True)
        drop()
        mount(env)
        secs = read_all()
        with open(os.path.join(mnt, ".epochfs", "stats")) as f:
            s = json.load(f)
        subprocess.run([args.epochfs, "umount", mnt], check=True)
        print(json.dumps(dict(readahead=readahead == "1", seconds=round(secs, 3),
                              files_per_s=round(len(names) / secs), ram_hits=s["ram_hits"],
                              ssd_hits=s["ssd_hits"], misses=s["misses"],
                              pattern=s.get("pattern"), prefetch_hits=s.get("prefetch_hits"))),
              flush=True)
