"""Deterministic synthetic data sets for the epoch benchmark.

Two shapes are generated:

* ``imagefolder``: what a torchvision ``ImageFolder`` sees -- class folders of
  JPEG-sized files (log-normal sizes around a mean of ~110 KB, like ImageNet)
  plus, for a fraction of the samples, a tiny label/annotation file (100-300
  bytes, like a per-sample .json).  Sample bytes are random, so they are as
  incompressible as JPEG and no cache can win by compressing them.
* ``small``: many files of exactly 4 KiB, where per-file overheads (lookup,
  open, release round trips, one IO per file) dominate instead of bandwidth.

Everything is a pure function of the seed: the plan (names, sizes) comes from
one generator and each file's bytes from a generator seeded with
``(seed, index)``, so two runs with the same parameters produce bit-identical
data sets and the manifest digest in the results identifies the data exactly.

The manifest keeps, per file, its size, CRC-32 and SHA-1.  Readers verify
CRC-32 by default: at ~4 GB/s it costs ~25 us per 110 KB file, where SHA-1
would cost ~60 us and blake2 ~130 us -- on a 2-core machine that would cap the
tmpfs baseline and flatter every slower scenario.  CRC-32 plus the size check
catches any wrong, short, stale or shifted bytes a cache could serve; SHA-1 is
there for ``--verify sha1``.

``jpeg_bytes`` makes the image samples real, decodable JPEGs instead (for a
client that decodes, such as torchvision's ``DatasetFolder``), still sized
after the plan and still a pure function of ``(seed, index)``.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import multiprocessing as mp
import os
import time
import zlib
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import numpy as np

#: Bytes in a filesystem block; used to size images and tmpfs mounts.
BLOCK = 4096


@dataclass(frozen=True)
class PlannedFile:
    """One file of a data set plan: where it goes, how big, what it is."""

    relpath: str
    size: int
    kind: str  # "image", "label" or "small"


@dataclass
class Manifest:
    """The files of one generated data set with their checksums.

    Kept as parallel arrays (not objects) because the reader processes index
    them by position millions of times and inherit them through fork().
    """

    name: str
    paths: list[str]
    sizes: np.ndarray  # int64
    crc32: np.ndarray  # uint32
    sha1: list[str]
    kinds: list[str]
    directories: int = 0
    generation: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.paths)

    @property
    def total_bytes(self) -> int:
        return int(self.sizes.sum())

    @property
    def allocated_bytes(self) -> int:
        """Bytes the files occupy in whole blocks (what a filesystem needs)."""
        return int(((self.sizes + BLOCK - 1) // BLOCK * BLOCK).sum())

    def subset(self, indices: Sequence[int], name: str | None = None) -> "Manifest":
        """A manifest of some of the files (used by the throttle check)."""
        idx = np.asarray(indices, dtype=np.int64)
        return Manifest(
            name=name or f"{self.name}-subset",
            paths=[self.paths[i] for i in idx],
            sizes=self.sizes[idx],
            crc32=self.crc32[idx],
            sha1=[self.sha1[i] for i in idx],
            kinds=[self.kinds[i] for i in idx],
        )

    def digest(self) -> str:
        """SHA-1 over (path, size, sha1) of every file: the data set's identity."""
        h = hashlib.sha1()
        for p, s, d in zip(self.paths, self.sizes.tolist(), self.sha1):
            h.update(f"{p}\0{s}\0{d}\n".encode())
        return h.hexdigest()

    def describe(self) -> dict:
        """Summary numbers for the results JSON."""
        sizes = self.sizes
        kinds = {k: self.kinds.count(k) for k in sorted(set(self.kinds))}
        mean_by_kind = {k: round(float(np.mean([s for s, kk in zip(sizes.tolist(), self.kinds) if kk == k])), 1)
                        for k in kinds}
        return {
            "name": self.name,
            "files": len(self),
            "files_by_kind": kinds,
            "size_mean_by_kind": mean_by_kind,
            "directories": self.directories,
            "total_bytes": self.total_bytes,
            "size_min": int(sizes.min()) if len(sizes) else 0,
            "size_median": float(np.median(sizes)) if len(sizes) else 0.0,
            "size_mean": float(sizes.mean()) if len(sizes) else 0.0,
            "size_max": int(sizes.max()) if len(sizes) else 0,
            "manifest_sha1": self.digest(),
            "generation": self.generation,
        }

    def write_json(self, path: str) -> None:
        """Writes the manifest (outside the data set, so readers never list it)."""
        doc = {
            "name": self.name,
            "files": [
                {"path": p, "size": int(s), "crc32": f"{int(c):08x}", "sha1": d, "kind": k}
                for p, s, c, d, k in zip(self.paths, self.sizes, self.crc32, self.sha1, self.kinds)
            ],
        }
        with open(path, "w") as f:
            json.dump(doc, f)


def imagefolder_plan(
    samples: int,
    classes: int,
    seed: int,
    mean_size: int = 110_000,
    sigma: float = 0.5,
    label_fraction: float = 0.25,
) -> list[PlannedFile]:
    """Names and sizes of an ImageFolder-like data set.

    Sizes are log-normal with the given *mean* (median = mean * exp(-sigma^2/2))
    clipped to [2 KiB, 1 MiB], like JPEGs of a resized ImageNet.  Samples are
    dealt round-robin to ``classes`` folders; a ``label_fraction`` of them get a
    sibling ``.json`` label of 100-300 bytes.
    """
    rng = np.random.default_rng([seed, 0xDA7A])
    median = mean_size * np.exp(-(sigma**2) / 2)
    sizes = np.clip(rng.lognormal(np.log(median), sigma, samples), 2048, 1 << 20).astype(np.int64)
    has_label = rng.random(samples) < label_fraction
    label_sizes = rng.integers(100, 301, samples)
    plan: list[PlannedFile] = []
    for i in range(samples):
        folder = f"class_{i % classes:03d}"
        stem = f"{folder}/sample_{i:07d}"
        plan.append(PlannedFile(f"{stem}.jpg", int(sizes[i]), "image"))
        if has_label[i]:
            plan.append(PlannedFile(f"{stem}.json", int(label_sizes[i]), "label"))
    return plan


def small_plan(files: int, classes: int, size: int = BLOCK) -> list[PlannedFile]:
    """A data set of ``files`` files of exactly ``size`` bytes in class folders."""
    return [
        PlannedFile(f"class_{i % classes:03d}/item_{i:07d}.bin", size, "small")
        for i in range(files)
    ]


def file_bytes(seed: int, index: int, pf: PlannedFile) -> bytes:
    """The content of file number ``index`` of a plan; a pure function of its inputs."""
    rng = np.random.default_rng([seed, index])
    if pf.kind == "label":
        # A plausible annotation, padded with spaces to the planned size.
        folder, base = pf.relpath.split("/", 1)
        doc = {"sample": base.rsplit(".", 1)[0], "class": folder,
               "box": np.round(rng.random(4), 3).tolist()}
        text = json.dumps(doc, separators=(",", ":"))
        if len(text) >= pf.size:  # keep it valid JSON whatever the planned size
            text = json.dumps({"class": folder}, separators=(",", ":"))
        return (text + " " * (pf.size - 1 - len(text)) + "\n").encode()
    words = (pf.size + 7) // 8
    return rng.bit_generator.random_raw(words).tobytes()[: pf.size]


#: JPEG quality and the bytes per pixel it gives for ``_jpeg_pixels``'s content (measured
#: with Pillow 9 / libjpeg-turbo; only used to pick dimensions -- the manifest records the
#: sizes that came out).  0.57 B/pixel at quality 85 puts a 110 KB sample at ~500x375
#: pixels, an ImageNet-like image that takes ~4.5 ms to decode on this class of CPU.
JPEG_QUALITY = 85
JPEG_BYTES_PER_PIXEL = 0.57


def _jpeg_pixels(seed: int, index: int, width: int, height: int) -> np.ndarray:
    """An RGB image: a random two-axis color gradient with half-amplitude uniform noise.

    The noise makes the bytes per pixel (and so the decode cost per byte) like a photo's
    rather than like a flat synthetic image's; the gradient keeps it from being pure noise.
    Integer numpy (~3 ms for 500x375), a function of ``(seed, index)`` and the size.
    """
    rng = np.random.default_rng([seed, index, 0x1A6E])
    gx = (rng.integers(0, 64, (1, 3)) * np.linspace(0, 1, width)[:, None]).astype(np.uint8)
    gy = (rng.integers(0, 64, (1, 3)) * np.linspace(0, 1, height)[:, None]).astype(np.uint8)
    img = np.frombuffer(rng.bytes(height * width * 3), np.uint8).reshape(height, width, 3) >> 1
    img += gx[None, :, :]  # in place: numpy's broadcast add into a new array is 2x slower
    img += gy[:, None, :]  # noise < 128, gradients < 64 each: no overflow
    return img


def _encode_jpeg(pixels: np.ndarray) -> bytes:
    from PIL import Image  # only the JPEG data sets need Pillow
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, "JPEG", quality=JPEG_QUALITY)
    return buf.getvalue()


def jpeg_bytes(seed: int, index: int, pf: PlannedFile) -> bytes:
    """Like ``file_bytes``, but an image sample is a real JPEG of about ``pf.size`` bytes.

    Dimensions come from the planned size (aspect ratio drawn in [3:4, 4:3]); if the first
    encoding misses the planned size by more than 10 %, the image is rescaled once by the
    miss and encoded again, which lands within a few percent.  Deterministic: the same
    ``(seed, index, pf)`` gives the same bytes with the same Pillow/libjpeg (the manifest
    digest in the results identifies them).  Labels and other kinds: ``file_bytes``.
    """
    if pf.kind != "image":
        return file_bytes(seed, index, pf)
    aspect = np.random.default_rng([seed, index, 0xA5]).uniform(0.75, 4 / 3)
    pixels = pf.size / JPEG_BYTES_PER_PIXEL
    width = max(16, round(math.sqrt(pixels * aspect)))
    height = max(16, round(pixels / width))
    data = _encode_jpeg(_jpeg_pixels(seed, index, width, height))
    miss = pf.size / len(data)
    if abs(miss - 1) > 0.10:
        scale = math.sqrt(miss)
        width, height = max(16, round(width * scale)), max(16, round(height * scale))
        data = _encode_jpeg(_jpeg_pixels(seed, index, width, height))
    return data


def _make_one(args) -> bytes:
    make_bytes, seed, index, pf = args
    return make_bytes(seed, index, pf)


def materialize(
    name: str,
    plan: Sequence[PlannedFile],
    seed: int,
    roots: Iterable[str],
    progress: Callable[[str], None] | None = None,
    make_bytes: Callable[[int, int, PlannedFile], bytes] = file_bytes,
    workers: int = 1,
) -> Manifest:
    """Writes every file of ``plan`` under each of ``roots``; returns the manifest.

    Writing the same bytes to several roots at once (the slow source image and
    the tmpfs copy) avoids reading the throttled source just to copy it.
    ``make_bytes(seed, index, pf)`` makes a file's content (``file_bytes``: random
    bytes; ``jpeg_bytes``: real JPEGs); with ``workers`` > 1 it runs in that many
    forked processes (JPEG encoding is CPU-bound), while this process writes the
    files in plan order and checksums them, so the result does not depend on it.
    """
    roots = list(roots)
    dirs = sorted({os.path.dirname(pf.relpath) for pf in plan})
    for root in roots:
        for d in dirs:
            os.makedirs(os.path.join(root, d), exist_ok=True)
    n = len(plan)
    sizes = np.empty(n, dtype=np.int64)
    crcs = np.empty(n, dtype=np.uint32)
    sha1s: list[str] = []
    t0 = last = time.monotonic()
    written = 0
    jobs = ((make_bytes, seed, i, pf) for i, pf in enumerate(plan))
    pool = mp.get_context("fork").Pool(workers) if workers > 1 else None
    contents = pool.imap(_make_one, jobs, chunksize=8) if pool else map(_make_one, jobs)
    done = False
    try:
        for i, (pf, data) in enumerate(zip(plan, contents)):
            _write_one(roots, pf, data)
            sizes[i] = len(data)
            crcs[i] = zlib.crc32(data)
            sha1s.append(hashlib.sha1(data).hexdigest())
            written += len(data)
            now = time.monotonic()
            if progress and (now - last >= 2.0 or i == n - 1):
                last = now
                progress(f"{name}: {i + 1}/{n} files, {written / 1e6:.0f} MB, {now - t0:.1f} s")
        done = True
    finally:
        if pool is not None:
            if done:
                # Every job handed out: the workers leave at the end of the queue. (A
                # terminate() here once left bigdata_bench waiting forever on a worker
                # that never got its SIGTERM.)
                pool.close()
            else:
                pool.terminate()  # Ctrl-C or an error: no generator process outlives us
            pool.join()
    return Manifest(
        name=name,
        paths=[pf.relpath for pf in plan],
        sizes=sizes,
        crc32=crcs,
        sha1=sha1s,
        kinds=[pf.kind for pf in plan],
        directories=len(dirs),
        generation={"seed": seed, "seconds": round(time.monotonic() - t0, 2),
                    "content": getattr(make_bytes, "__name__", str(make_bytes))},
    )


def _write_one(roots: list[str], pf: PlannedFile, data: bytes) -> None:
    for root in roots:
        with open(os.path.join(root, pf.relpath), "wb") as f:
            f.write(data)
