"""epochfs.hook: every torch DataLoader publishes each epoch's order to its epochfs mount.

An order published to ``<mount>/.epochfs/plan`` lets the prefetcher read exactly what
comes next. ``epochfs.Loader`` publishes its own; this hook does the same for an
unmodified ``torch.utils.data.DataLoader``:

    epochfs run -- python train.py      # every DataLoader of the script, no change to it

or, in the script itself:

    import epochfs.hook
    epochfs.hook.install()

How. A DataLoader draws its indices from its index sampler (the batch sampler, or the
sampler when batching is off) once per epoch, in the main process, before handing them
to its workers. ``install()`` wraps that sampler: at the epoch's first index it lets the
real sampler produce the whole epoch (the same draws from the same generators, at the
same moment as without the hook), maps the indices to file paths, publishes them, and
then hands out exactly those indices. So the script reads the same samples in the same
order, with and without the hook; the plan is written before the first read.

Which data sets: those that say where their samples are: ``samples`` or ``imgs`` (lists
whose items are paths or (path, ...) tuples: torchvision's DatasetFolder and
ImageFolder), or an ``epochfs_paths`` attribute (a list of paths, or a callable from an
index to a path), and ``torch.utils.data.Subset`` of any of those. A data set that
cannot be mapped, or whose files are not on an epochfs mount, is left alone (one log
line). An ``IterableDataset`` has no sampler and is left alone. Publishing is an
optimisation: a refused plan is one warning, and the epoch goes on.

Several DataLoaders, or ranks (``DistributedSampler``: each rank's shard), each publish
their own order; see docs/operations.md for how the mount serves several plans.

The next epoch too, where it is known: ``DistributedSampler`` draws each epoch's order
from a generator seeded with ``seed + epoch``, so its next order can be drawn now, from
a copy, without touching the real one. Its plan is then this epoch's shard followed by
the next one's, and the mount fetches the next shard during this epoch (from the shared
filesystem, for the files this node has never read). The next epoch is the sampler's
``epoch`` plus the step ``set_epoch()`` took last time (1 at first, as its
documentation asks; 0 for a script that never calls it). Any other sampler draws from
a generator the script also uses, and gets this epoch only. A mount that refuses the
longer plan (its plan memory is a sixteenth of --ram) gets this epoch alone.

Buffered binary reads without the isatty() round trip. Python's ``open(path, "rb")``
(PIL's ``Image.open``, torchvision's ``pil_loader``, ``numpy.load``) asks the file
isatty() to choose line buffering, which binary files never use; on a FUSE mount that
is an ioctl the kernel sends to the daemon on every open (it never remembers the
answer), a round trip as long as the read of a small cached file. ``install()`` also
replaces ``open``/``io.open`` with one that builds exactly what ``io.open`` builds for
``"rb"`` with the default buffering (a ``BufferedReader`` over a ``FileIO``, buffer
size ``st_blksize``) without asking; any other call goes to the real ``open``
unchanged. Python 3.14's ``open`` skips the same question for regular files. Set
``EPOCHFS_KEEP_ISATTY=1`` to keep the real ``open`` everywhere.
"""

import builtins
import copy
import io
import logging
import os
import threading
import weakref

__all__ = ["install", "installed", "paths_of", "find_mount_root", "plan_text", "publish",
           "next_epoch_indices", "open_without_isatty"]

_log = logging.getLogger("epochfs.hook")
_lock = threading.Lock()
_installed = False
_logged = set()
_HEADER = "epochfs-plan 1\n"


def _log_once(key, level, message, *args):
    with _lock:
        if key in _logged:
            return
        _logged.add(key)
    _log.log(level, message, *args)


def _path_of_item(item):
    if isinstance(item, (str, os.PathLike)):
        return os.fspath(item)
    if isinstance(item, (tuple, list)) and item and isinstance(item[0], (str, os.PathLike)):
        return os.fspath(item[0])
    return None


def paths_of(dataset):
    """A function from a sample index to its file path, or None if `dataset` says nowhere
    where its samples are."""
    try:
        from torch.utils.data import Subset
    except ImportError:  # pragma: no cover - torch is what this hook is for
        Subset = ()
    if Subset and isinstance(dataset, Subset):
        inner = paths_of(dataset.dataset)
        if inner is None:
            return None
        indices = dataset.indices
        return lambda i: inner(indices[i])
    given = getattr(dataset, "epochfs_paths", None)
    if callable(given):
        return lambda i: os.fspath(given(i))
    for name in ("epochfs_paths", "samples", "imgs"):
        items = getattr(dataset, name, None)
        if isinstance(items, (list, tuple)) and items and _path_of_item(items[0]) is not None:
            return lambda i, items=items: _path_of_item(items[i])
    return None


def find_mount_root(path):
    """The epochfs mount root at or above the folder of `path` (the first folder that
    has ``.epochfs/plan``), or None. Stops at a filesystem boundary."""
    folder = os.path.dirname(os.path.realpath(path))
    try:
        dev = os.stat(folder).st_dev
    except OSError:
        return None
    while True:
        if os.path.exists(os.path.join(folder, ".epochfs", "plan")):
            return folder
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        try:
            if os.stat(parent).st_dev != dev:
                return None
        except OSError:
            return None
        folder = parent


def plan_text(root, paths):
    """The plan file's text for `paths` under mount `root` (a path outside it, or with a
    newline in its name, is left out)."""
    lines = [_HEADER]
    # realpath stats every component: once per folder, not per sample (a data set has
    # few folders and many files; on a mount each stat may be a request).
    real_folders = {}
    for p in paths:
        folder = os.path.dirname(p)
        real = real_folders.get(folder)
        if real is None:
            real = real_folders[folder] = os.path.realpath(folder)
        rel = os.path.relpath(os.path.join(real, os.path.basename(p)), root)
        if rel.startswith("..") or "\n" in rel:
            continue
        lines.append(rel + "\n")
    lines.append("\n")
    return "".join(lines)


def publish(root, paths, quiet=False):
    """Writes the plan; returns True if the mount took it (`quiet`: no warning if not)."""
    try:
        # Binary with an explicit buffer size: no isatty() ioctl on the mount.
        with _real_open(os.path.join(root, ".epochfs", "plan"), "wb", buffering=1 << 16) as f:
            f.write(plan_text(root, paths).encode("utf-8"))
        return True
    except OSError as e:
        if not quiet:
            _log_once(("refused", root), logging.WARNING,
                      "epochfs: %s refused the epoch's plan (%s); reading on without it", root, e)
        return False


# The epoch each DistributedSampler had at its last epoch (for the step set_epoch takes).
_last_epochs = weakref.WeakKeyDictionary()


def next_epoch_indices(index_sampler):
    """The indices the next epoch of `index_sampler` (a sampler, or a batch sampler over
    one) will draw, or None where that is not known now (see the module's docstring)."""
    try:
        from torch.utils.data import DistributedSampler
    except ImportError:  # pragma: no cover
        return None
    sampler = getattr(index_sampler, "sampler", index_sampler)
    # Exactly DistributedSampler's own order: a subclass may draw its own way.
    if not isinstance(sampler, DistributedSampler) or type(sampler).__iter__ is not DistributedSampler.__iter__:
        return None
    epoch = sampler.epoch
    with _lock:
        last = _last_epochs.get(sampler)
        _last_epochs[sampler] = epoch
    twin = copy.copy(sampler)
    twin.set_epoch(epoch + (1 if last is None else epoch - last))
    return list(twin)


def _flatten(items):
    for item in items:
        if isinstance(item, (list, tuple)):
            yield from item
        else:
            yield item


class _PublishingSampler:
    """Stands in for a DataLoader's index sampler: the same indices, in the same order,
    drawn at the same moment; the epoch's order is published at its first index."""

    def __init__(self, loader, sampler):
        self._loader = loader
        self._sampler = sampler

    def __len__(self):
        return len(self._sampler)

    def __iter__(self):
        items = list(self._sampler)  # where the real sampler draws its first index
        _publish_epoch(self._loader, items, self._sampler)
        yield from items


def _publish_epoch(loader, items, index_sampler):
    try:
        path_of = paths_of(loader.dataset)
        if path_of is None:
            _log_once(("unmapped", id(loader)), logging.WARNING,
                      "epochfs: %s does not say where its samples are (samples, imgs or "
                      "epochfs_paths): its order is not published",
                      type(loader.dataset).__name__)
            return
        paths = [path_of(int(i)) for i in _flatten(items)]
        if not paths:
            return
        root = find_mount_root(paths[0])
        if root is None:
            _log_once(("no-mount", id(loader)), logging.WARNING,
                      "epochfs: %s is not on an epochfs mount: its order is not published",
                      os.path.dirname(paths[0]))
            return
        upcoming = next_epoch_indices(index_sampler)
        if upcoming and publish(root, paths + [path_of(int(i)) for i in upcoming], quiet=True):
            return
        publish(root, paths)
    except Exception as e:  # publishing must never break training
        _log_once(("error", id(loader)), logging.WARNING,
                  "epochfs: could not publish the epoch's order: %r", e)


_real_open = io.open


def open_without_isatty(file, mode="r", buffering=-1, encoding=None, errors=None, newline=None,
                        closefd=True, opener=None):
    """``io.open``, except that a plain ``open(path, "rb")`` does not call isatty()
    (see the module's docstring). Same object, same buffer size, same errors."""
    if (mode == "rb" and buffering == -1 and encoding is None and errors is None and newline is None
            and closefd is True and opener is None and not isinstance(file, int)):
        raw = io.FileIO(file, "rb")
        try:
            return io.BufferedReader(raw, raw._blksize)
        except BaseException:
            raw.close()
            raise
    return _real_open(file, mode, buffering, encoding, errors, newline, closefd, opener)


def _install_open():
    if os.environ.get("EPOCHFS_KEEP_ISATTY", "0") not in ("", "0"):
        return
    # Both names: pathlib and some libraries call io.open, most code the builtin.
    builtins.open = open_without_isatty
    io.open = open_without_isatty


def install():
    """Makes every torch DataLoader publish each epoch's order, and buffered binary
    opens skip isatty() (idempotent)."""
    global _installed
    with _lock:
        if _installed:
            return
        _installed = True
    _install_open()
    from torch.utils.data import dataloader

    original = dataloader.DataLoader._index_sampler

    def _index_sampler(self):
        sampler = original.fget(self)
        if sampler is None or getattr(self, "_dataset_kind", None) != dataloader._DatasetKind.Map:
            return sampler
        return _PublishingSampler(self, sampler)

    dataloader.DataLoader._index_sampler = property(_index_sampler)


def installed():
    return _installed
