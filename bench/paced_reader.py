"""One paced epoch: the reader of the prefetcher benchmark (prefetch_bench.py).

`readers` threads take the next file of `order` (names relative to `root`), read it
whole unbuffered, then "compute" for `compute` seconds (None: not at all), like a
DataLoader worker whose training step consumes samples at a fixed rate. Returns the
epoch's wall time.

With `dataloader_batch` > 0, a real torch DataLoader reads instead: `readers` worker
processes, batches of that many files of `order` (in order: the sampler is `order`
itself), each worker reading its batch's files one by one, and the training loop
"computing" compute / readers seconds per sample of each batch it gets (the same
consumption rate). Its workers interleave their batches as PyTorch's do, which is what
the daemon then sees.
Imported by prefetch_bench.py, in-process and from its page-cache baseline's child
process (which must run in its own memory cgroup).
"""
import os
import threading
import time


def read_epoch(root, order, readers, compute=None, dataloader_batch=0):
    if dataloader_batch > 0:
        return _read_epoch_dataloader(root, order, readers, compute, dataloader_batch)
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


class _Files:
    """The files of one epoch's order, read whole; a sample is its byte count."""

    def __init__(self, root, order):
        self.root, self.order = root, order

    def __len__(self):
        return len(self.order)

    def __getitem__(self, i):
        n = 0
        with open(os.path.join(self.root, self.order[i]), "rb", buffering=0) as f:
            while chunk := f.read(1 << 20):
                n += len(chunk)
        return n


def _read_epoch_dataloader(root, order, workers, compute, batch):
    import torch.utils.data  # only here: a thread reader needs no torch

    loader = torch.utils.data.DataLoader(_Files(root, order), batch_size=batch, shuffle=False,
                                         num_workers=workers)
    per_sample = (compute or 0.0) / workers
    t0 = time.time()
    for sizes in loader:
        if per_sample > 0:
            time.sleep(len(sizes) * per_sample)
    return time.time() - t0
