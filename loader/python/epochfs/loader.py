"""epochfs.Loader (see the package's docstring).

Without ``decode``, each batch is ``(data, offsets, lengths, labels)``: the samples' raw
bytes back to back in one uint8 tensor (on the device), where sample i is
``data[offsets[i]:offsets[i] + lengths[i]]`` (offsets and lengths are CPU int64 tensors),
and int64 labels on the device. With fixed-size records (``record_shape``) it is
``(records, labels)``. With ``decode="image"`` it is ``(images, labels)``
(epochfs/images.py).

Raw tensors are views of the loader's ring of buffers (zero copy, through DLPack): a
batch's buffer is reused once every tensor of it is gone. Keep at most
``num_buffers - 2`` batches alive at once (``.clone()`` what you want to keep longer);
holding them all raises instead of hanging. Decoded images are tensors of their own.
"""

import ast
import logging
import math
import os
import queue
import struct
import threading

import torch
import torch.utils.dlpack

from . import _epochfs
from ._epochfs import cuda_usable, scan_image_folder, shard_order

__all__ = ["Loader"]

# torch dtype -> DLPack (type code, bits)
_DLPACK_DTYPES = {
    torch.uint8: (1, 8),
    torch.int8: (0, 8),
    torch.int16: (0, 16),
    torch.int32: (0, 32),
    torch.int64: (0, 64),
    torch.float16: (2, 16),
    torch.bfloat16: (4, 16),
    torch.float32: (2, 32),
    torch.float64: (2, 64),
    torch.bool: (6, 8),
}

# .npy descr -> torch dtype (little-endian or byte-sized only)
_NPY_DTYPES = {
    "|u1": torch.uint8, "<u1": torch.uint8, "|i1": torch.int8, "<i1": torch.int8,
    "|b1": torch.bool, "<i2": torch.int16, "<i4": torch.int32, "<i8": torch.int64,
    "<f2": torch.float16, "<f4": torch.float32, "<f8": torch.float64,
}


def _read_npy_header(path):
    """(data offset, torch dtype, shape) of a .npy file, or None if it is not one."""
    with open(path, "rb") as f:
        if f.read(6) != b"\x93NUMPY":
            return None
        major = f.read(2)[0]
        if major == 1:
            (hlen,) = struct.unpack("<H", f.read(2))
            start = 10
        else:
            (hlen,) = struct.unpack("<I", f.read(4))
            start = 12
        header = ast.literal_eval(f.read(hlen).decode("latin1"))
    if header.get("fortran_order"):
        raise ValueError(f"{path}: Fortran-ordered .npy files are not supported")
    descr = header["descr"]
    if descr not in _NPY_DTYPES:
        raise ValueError(f"{path}: unsupported .npy dtype {descr!r} (big-endian or structured?)")
    return start + hlen, _NPY_DTYPES[descr], tuple(header["shape"])


_log = logging.getLogger("epochfs")
_logged = set()


def _log_once(message):
    if message not in _logged:
        _logged.add(message)
        _log.info(message)


def _parse_device(device):
    """('cuda'|'cpu'|'auto', index) from None, 'cuda', 'cuda:1', 'cpu' or a torch.device."""
    if device is None:
        return "auto", 0
    try:
        d = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"device must be cuda or cpu, not {device!r}") from e
    if d.type not in ("cuda", "cpu"):
        raise ValueError(f"device must be cuda or cpu, not {device!r}")
    return d.type, (d.index or 0)


class Loader:
    """An iterable of batches already in device memory, read in the sampler's order.

    Args:
      files_or_root: a folder scanned ImageFolder-style (each sub-folder is a class; its
        files are the samples, labels in sorted class order), or a list of file paths.
      batch_size: samples per batch.
      sampler: any torch sampler of indices (e.g. DistributedSampler); it is iterated
        once per epoch. set_epoch() is forwarded to it. Excludes shuffle/rank/world_size.
      shuffle, seed: without a sampler, shuffle with torch.randperm seeded by
        seed + epoch -- the same order DistributedSampler(shuffle=True, seed=seed) gives.
      drop_last: drop the last batch if it is smaller than batch_size.
      device: "cuda", "cuda:N", "cpu" or None (cuda when torch and the loader both can
        use one, else cpu).
      record_shape, dtype: fixed-size records: every file holds one tensor of this shape
        and dtype, yielded as one [batch, *record_shape] tensor. For .npy files the
        header is skipped and dtype defaults to the file's.
      rank, world_size: without a sampler, read this rank's shard of each epoch, split
        as DistributedSampler splits (padded to a multiple of world_size).
      publish_plan: on an epochfs mount, publish each epoch's order to the filesystem.
      labels: labels for a list of files (default 0).
      num_buffers: batch buffers in the ring (the reader runs up to num_buffers - 1
        batches ahead of a consumer holding one).
      queue_depth: files read at once, over all reader threads.
      io: "auto", "io_uring" or "pread".
      reader_threads: threads reading files, each with its own io_uring ring (0: half
        the cores, at least 2, at most 16). A read from the page cache is a copy made by the thread
        that asks for it, so delivery scales with them.
      decode: None (raw bytes, or records) or "image": decode each sample as an image
        (JPEG on the GPU with nvJPEG, through torchvision; other formats and GPU-less
        machines on the CPU) and transform it (epochfs/images.py), yielding
        (images, labels) on `device`.
      size, train, image_dtype, mean, std, scale, ratio, resize_size, on_error: the
        image pipeline's (epochfs.images.ImagePipeline; image_dtype is its dtype).
      prefetch_batches: with decode="image", batches decoded ahead of the training loop,
        on a thread (and a CUDA stream) of their own.
    """

    def __init__(self, files_or_root, batch_size=1, sampler=None, shuffle=False, seed=0,
                 drop_last=False, device=None, record_shape=None, dtype=None, rank=0,
                 world_size=1, publish_plan=True, labels=None, num_buffers=4,
                 queue_depth=64, io="auto", reader_threads=0, decode=None, size=224,
                 train=True, image_dtype=None, mean=None, std=None, scale=(0.08, 1.0),
                 ratio=(3.0 / 4.0, 4.0 / 3.0), resize_size=None, on_error="raise",
                 prefetch_batches=2):
        if isinstance(files_or_root, (str, os.PathLike)):
            files, scanned_labels, self.classes = scan_image_folder(os.fspath(files_or_root))
            if labels is not None:
                raise ValueError("labels come from the class folders when given a root folder")
            labels = scanned_labels
        else:
            files = [os.fspath(f) for f in files_or_root]
            self.classes = []
            labels = [] if labels is None else [int(x) for x in labels]
        if sampler is not None and (shuffle or world_size != 1 or rank != 0):
            raise ValueError("with a sampler, pass shuffle/rank/world_size to the sampler")
        if not (0 <= rank < world_size):
            raise ValueError(f"rank {rank} is not in [0, world_size={world_size})")
        self.files = files
        self.batch_size = int(batch_size)
        self.sampler = sampler
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.drop_last = bool(drop_last)
        self.rank = int(rank)
        self.world_size = int(world_size)
        self._epoch = 0
        self._generation = 0
        self._prefetch = None
        self.prefetch_batches = int(prefetch_batches)
        if self.prefetch_batches < 1:
            raise ValueError("prefetch_batches must be at least 1")

        kind, index = _parse_device(device)
        if kind == "auto":
            usable, why = cuda_usable()
            kind = "cuda" if usable and torch.cuda.is_available() else "cpu"
            if kind == "cpu":
                _log_once(f"no CUDA ({why if not usable else 'torch ' + torch.__version__ + ' has no CUDA'}); "
                          "batches are delivered in host memory")
        elif kind == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("device='cuda' but this torch has no CUDA "
                               f"(torch {torch.__version__}); use device='cpu'")
        self.device = torch.device("cuda", index) if kind == "cuda" else torch.device("cpu")
        if decode not in (None, "image"):
            raise ValueError(f"decode must be None or 'image', not {decode!r}")
        self.pipeline = None
        if decode == "image":
            if record_shape is not None or dtype is not None:
                raise ValueError("decode='image' reads whole files: no record_shape or dtype")
            from .images import ImagePipeline
            self.pipeline = ImagePipeline(
                size=size, train=train, device=self.device, dtype=image_dtype, mean=mean, std=std,
                scale=scale, ratio=ratio, resize_size=resize_size, seed=self.seed,
                on_error=on_error, files=files)
            # The encoded bytes stay in host memory: nvJPEG takes them from there.
            kind = "cpu"

        record_offset, record_bytes = 0, 0
        self.record_shape = None
        self.dtype = None
        if record_shape is not None or dtype is not None:
            header = _read_npy_header(files[0]) if files else None
            if header is not None:
                record_offset, npy_dtype, npy_shape = header
                dtype = npy_dtype if dtype is None else dtype
                if record_shape is None:
                    record_shape = npy_shape
            if record_shape is None:
                raise ValueError("record_shape is needed for files that are not .npy")
            dtype = torch.uint8 if dtype is None else dtype
            if dtype not in _DLPACK_DTYPES:
                raise ValueError(f"unsupported dtype {dtype}")
            self.record_shape = tuple(int(d) for d in record_shape)
            self.dtype = dtype
            record_bytes = math.prod(self.record_shape) * (_DLPACK_DTYPES[dtype][1] // 8)
            if header is not None:
                npy_bytes = math.prod(header[2]) * (_DLPACK_DTYPES[header[1]][1] // 8)
                if npy_bytes != record_bytes:
                    raise ValueError(f"{files[0]}: holds {header[1]}{list(header[2])}, which does "
                                     f"not fit record_shape={self.record_shape} of {dtype}")
            if record_bytes == 0:
                raise ValueError("record_shape describes an empty record")

        self._impl = _epochfs.Loader(
            files=files, labels=labels, batch_size=self.batch_size, drop_last=self.drop_last,
            device=kind, cuda_device=index, record_offset=record_offset,
            record_bytes=record_bytes, num_buffers=int(num_buffers),
            queue_depth=int(queue_depth), io=io, publish_plan=bool(publish_plan),
            reader_threads=int(reader_threads))

    # ---- epochs -----------------------------------------------------------------------

    def set_epoch(self, epoch):
        """Sets the epoch the next iteration reads (seeds the shuffle; forwarded to the
        sampler). Without calls, each iteration advances the epoch by one."""
        self._epoch = int(epoch)
        if self.sampler is not None and hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)

    def _order(self, epoch):
        if self.sampler is not None:
            order = []
            for i in self.sampler:
                if isinstance(i, (list, tuple)) or (torch.is_tensor(i) and i.dim() > 0):
                    raise TypeError("the sampler yields batches; pass a sampler of indices "
                                    "(the loader makes the batches)")
                order.append(int(i))
            return order
        n = len(self.files)
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(self.seed + epoch)
            order = torch.randperm(n, generator=g).tolist()
        else:
            order = list(range(n))
        if self.world_size > 1:
            order = shard_order(order, self.rank, self.world_size, False)
        return order

    def _num_samples(self):
        if self.sampler is not None:
            return len(self.sampler)
        return math.ceil(len(self.files) / self.world_size)

    def __len__(self):
        n = self._num_samples()
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def __iter__(self):
        epoch = self._epoch
        self._epoch += 1  # the next iteration reads the next epoch unless set_epoch() says
        order = self._order(epoch)
        self._generation += 1
        self._stop_prefetch()  # its thread reads the reader's batches: gone before it restarts
        self._impl.start_epoch(order)
        if self.pipeline is not None:
            return self._images_prefetched(self._generation, epoch)
        return self._batches(self._generation, epoch)

    def _stop_prefetch(self):
        if self._prefetch is not None:
            self._prefetch.close()
            self._prefetch = None

    def _images_prefetched(self, generation, epoch):
        prefetch = _ImagePrefetch(self, epoch, self.prefetch_batches)
        self._prefetch = prefetch
        try:
            while True:
                if generation != self._generation:
                    raise RuntimeError("a newer iter(loader) has started another epoch")
                item = prefetch.get()
                if item is None:
                    return
                yield item
        finally:
            prefetch.close()
            if generation == self._generation:
                self._impl.stop()

    def _batches(self, generation, epoch):
        on_cuda = self.device.type == "cuda"
        try:
            while True:
                if generation != self._generation:
                    raise RuntimeError("a newer iter(loader) has started another epoch")
                stream = torch.cuda.current_stream(self.device).cuda_stream if on_cuda else 0
                batch = self._impl.next(stream)
                if batch is None:
                    return
                yield self._tensors(batch)
        finally:
            if generation == self._generation:
                self._impl.stop()

    def _tensors(self, batch):
        from_dlpack = torch.utils.dlpack.from_dlpack
        labels = from_dlpack(batch.labels())
        if self.record_shape is not None:
            code, bits = _DLPACK_DTYPES[self.dtype]
            data = from_dlpack(batch.data([batch.size, *self.record_shape], code, bits))
            return data, labels
        data = from_dlpack(batch.data())
        return data, from_dlpack(batch.offsets()), from_dlpack(batch.lengths()), labels

    def _images(self, batch, epoch):
        from_dlpack = torch.utils.dlpack.from_dlpack
        data = from_dlpack(batch.data())
        offsets = from_dlpack(batch.offsets())
        lengths = from_dlpack(batch.lengths())
        indices = from_dlpack(batch.indices())
        labels = from_dlpack(batch.labels())
        images, keep = self.pipeline(data, offsets, lengths, indices, epoch, batch.index)
        del data  # the ring's buffer goes back once the decode is done with it
        # A copy (indexing copies too): the labels must not hold the ring's buffer.
        labels = labels[keep] if keep is not None else labels.clone()
        return images, labels.to(self.device, non_blocking=True)

    # ---- information -----------------------------------------------------------------

    @property
    def io_backend(self):
        return self._impl.io_backend

    @property
    def reader_threads(self):
        return self._impl.reader_threads

    @property
    def plan_root(self):
        """The epochfs mount the order is published to, or None."""
        return self._impl.plan_root or None

    def stats(self):
        return self._impl.stats()

    def close(self):
        """Stops the epoch in progress and frees the reader (buffers go with the last
        tensor using them)."""
        self._generation += 1
        self._stop_prefetch()
        self._impl.stop()

    def __repr__(self):
        return (f"epochfs.Loader({len(self.files)} files, batch_size={self.batch_size}, "
                f"device={self.device}, io={self.io_backend})")


class _ImagePrefetch:
    """Decodes and transforms the next `depth` batches of an epoch on a thread of its own,
    on a CUDA stream of its own, while the training loop works on the current one: the
    decode's host work (nvJPEG's Huffman stage, the launches) overlaps with the training
    step's. A batch is handed over with an event the consumer's stream waits for, and its
    tensors are recorded on that stream, so their memory is not reused while it runs."""

    _END = object()

    def __init__(self, loader, epoch, depth):
        self.loader = loader
        self.epoch = epoch
        self.queue = queue.Queue(maxsize=depth)
        self.stopping = threading.Event()
        on_cuda = loader.device.type == "cuda"
        self.stream = torch.cuda.Stream(loader.device) if on_cuda else None
        self.thread = threading.Thread(target=self._run, name="epochfs-images", daemon=True)
        self.thread.start()

    def _put(self, item):
        while not self.stopping.is_set():
            try:
                self.queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self):
        try:
            with torch.cuda.stream(self.stream) if self.stream is not None else _no_stream():
                while not self.stopping.is_set():
                    batch = self.loader._impl.next(0)
                    if batch is None:
                        self._put(self._END)
                        return
                    images, labels = self.loader._images(batch, self.epoch)
                    del batch
                    event = None
                    if self.stream is not None:
                        event = torch.cuda.Event()
                        event.record(self.stream)
                    if not self._put((images, labels, event)):
                        return
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, raised there
            self._put(e)

    def get(self):
        item = self.queue.get()
        if item is self._END:
            return None
        if isinstance(item, BaseException):
            raise item
        images, labels, event = item
        if event is not None:
            current = torch.cuda.current_stream(self.loader.device)
            current.wait_event(event)
            images.record_stream(current)
            labels.record_stream(current)
        return images, labels

    def close(self):
        self.stopping.set()
        while self.thread.is_alive():
            try:
                self.queue.get(timeout=0.05)
            except queue.Empty:
                pass
        self.thread.join()


class _no_stream:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
