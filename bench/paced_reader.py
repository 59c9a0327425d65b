"""One paced epoch: the reader of the prefetcher benchmark (prefetch_bench.py).

`readers` threads take the next file of `order` (names relative to `root`), read it
whole unbuffered, then "compute" for `compute` seconds (None: not at all), like a
DataLoader worker whose training step consumes samples at a fixed rate. Returns the
epoch's wall time.
Imported by prefetch_bench.py, in-process and from its page-cache baseline's child
process (which must run in its own memory cgroup).
"""
import os
import threading
import time


def read_epoch(root, order, readers, compute=None):
    it = iter(order)
    lock = threading.Lock()

    def reader():
        while True:
            with lock:
                name = next(it, None)
            if name is None:
                return
            with open(os.path.join(root, name), "rb", buffering=0) as f:
                while f.read(1 << 20):
                    pass
            if compute is not None:
                time.sleep(compute)

    t0 = time.time()
    threads = [threading.Thread(target=reader) for _ in range(readers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.time() - t0
