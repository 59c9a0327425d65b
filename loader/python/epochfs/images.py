"""The image pipeline of ``epochfs.Loader(decode="image")``: decode a batch of encoded
images and transform it, on the GPU where there is one.

Decoding. JPEG batches are decoded on the GPU with nvJPEG, through torchvision
(``torchvision.io.decode_jpeg(..., device="cuda")``, a whole batch in one call where
torchvision takes lists, 0.19 and later). What nvJPEG does not take goes to the CPU:
CMYK/YCCK JPEGs (four components; PIL converts them as torchvision's ImageFolder does),
progressive JPEGs that the GPU refuses, PNG and every other format
(``torchvision.io.decode_image``, then PIL). Without a GPU everything is decoded on the
CPU the same way. Grayscale images come out RGB. A JPEG with no end-of-image marker is
truncated and, like a file no decoder takes, undecodable.

Undecodable files: ``on_error="raise"`` (the default) raises ValueError naming the file;
``on_error="skip"`` leaves the sample out of its batch (its label too) with one warning
per file.

Transforms (on the images' device), as torchvision's:
  train: RandomResizedCrop(size, scale, ratio) with bilinear, antialiased resizing, then
    a horizontal flip with probability 1/2;
  eval: Resize(resize_size, default size * 256 / 224) of the shorter side, then
    CenterCrop(size);
then ToTensor's scaling to [0, 1] and Normalize(mean, std) (ImageNet's by default). On the
GPU all of it is one kernel for the whole batch (loader/image_ops.h), which computes
PyTorch's antialiased bilinear resize; on the CPU it is torch's own operations. The
result is one [B, 3, size, size] tensor of `dtype` (bfloat16 on a GPU, float32 on the CPU
by default) in channels_last memory format. The random draws come from a generator
seeded with (seed, epoch, batch index): an epoch's crops and flips are the same whenever
it is read again.

Pixels: on the CPU they are torchvision's own decode. nvJPEG and libjpeg-turbo differ in
rounding and chroma upsampling; docs/benchmarks.md states the difference measured.
"""

import io
import logging
import math
import random

import torch
import torch.nn.functional as F

from . import _epochfs

try:
    import torchvision.io as tvio
    from torchvision.io import ImageReadMode
except ImportError as e:  # pragma: no cover - depends on the installation
    raise ImportError(
        "epochfs.Loader(decode='image') needs torchvision: `apt install python3-torchvision` "
        "for Debian's python3, or `pip install torchvision` in your environment") from e

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

_log = logging.getLogger("epochfs")


class UndecodableImage(ValueError):
    """A sample no decoder takes (named in the message)."""


# ---- JPEG headers -----------------------------------------------------------------------

def jpeg_info(blob):
    """(components, progressive) of a JPEG from its frame header, or None if `blob` (bytes
    or a 1-D uint8 tensor) is not a JPEG or has no frame header."""
    data = blob if isinstance(blob, (bytes, bytearray, memoryview)) else memoryview(blob.numpy())
    if len(data) < 4 or data[0] != 0xFF or data[1] != 0xD8:
        return None
    pos = 2
    while pos + 4 <= len(data):
        if data[pos] != 0xFF:
            return None
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # no length
            pos += 2
            continue
        length = (data[pos + 2] << 8) | data[pos + 3]
        # SOF0..SOF15, except DHT (C4), JPG (C8) and DAC (CC)
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            if pos + 9 >= len(data):
                return None
            return data[pos + 9], marker in (0xC2, 0xC6, 0xCA, 0xCE)
        if marker == 0xDA:  # scan data before any frame header
            return None
        pos += 2 + length
    return None


def jpeg_is_complete(blob):
    """Whether the JPEG's end-of-image marker (FF D9) is in its last KiB. It cannot occur in
    entropy-coded data (a 0xFF there is followed by 0x00 or a restart marker), so a file cut
    short lacks it; a little padding after it is allowed."""
    tail = bytes(blob[-1024:].numpy()) if torch.is_tensor(blob) else bytes(blob[-1024:])
    return b"\xff\xd9" in tail


# ---- Crops --------------------------------------------------------------------------------

def random_resized_crop_box(height, width, scale, ratio, rng):
    """(top, left, h, w) as torchvision's RandomResizedCrop.get_params draws it, with `rng`
    (a random.Random) instead of torch's global generator."""
    area = height * width
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target_area = area * rng.uniform(scale[0], scale[1])
        aspect = math.exp(rng.uniform(log_ratio[0], log_ratio[1]))
        w = int(round(math.sqrt(target_area * aspect)))
        h = int(round(math.sqrt(target_area / aspect)))
        if 0 < w <= width and 0 < h <= height:
            top = rng.randint(0, height - h)
            left = rng.randint(0, width - w)
            return top, left, h, w
    # Fallback: a central crop of the whole image, its ratio clamped into `ratio`.
    in_ratio = width / height
    if in_ratio < min(ratio):
        w = width
        h = int(round(w / min(ratio)))
    elif in_ratio > max(ratio):
        h = height
        w = int(round(h * max(ratio)))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def _resize(image, height, width):
    """A [3, H, W] uint8 image resized (bilinear, antialiased) to a float [3, h, w]."""
    x = image.unsqueeze(0).float()
    return F.interpolate(x, size=(height, width), mode="bilinear", align_corners=False,
                         antialias=True)[0]


# ---- The pipeline -------------------------------------------------------------------------

class ImagePipeline:
    def __init__(self, size=224, train=True, device=None, dtype=None, mean=None, std=None,
                 scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0), resize_size=None, seed=0,
                 on_error="raise", files=None, native=None):
        if on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', not {on_error!r}")
        self.size = int(size)
        if self.size <= 0:
            raise ValueError(f"size must be positive, not {size}")
        self.train = bool(train)
        self.device = torch.device("cpu") if device is None else torch.device(device)
        on_gpu = self.device.type == "cuda"
        self.dtype = dtype if dtype is not None else (torch.bfloat16 if on_gpu else torch.float32)
        if not self.dtype.is_floating_point:
            raise ValueError(f"dtype must be a floating point type, not {self.dtype}")
        self.scale = (float(scale[0]), float(scale[1]))
        self.ratio = (float(ratio[0]), float(ratio[1]))
        if not (0 < self.scale[0] <= self.scale[1] <= 1) or not (0 < self.ratio[0] <= self.ratio[1]):
            raise ValueError(f"scale {scale} and ratio {ratio} must be ordered ranges (scale in (0, 1])")
        self.resize_size = int(resize_size) if resize_size else int(round(self.size * 256 / 224))
        self.seed = int(seed)
        self.on_error = on_error
        self.files = files
        mean = IMAGENET_MEAN if mean is None else mean
        std = IMAGENET_STD if std is None else std
        self._mean = torch.tensor(mean, dtype=torch.float32, device=self.device).view(1, 3, 1, 1) * 255
        self._std = torch.tensor(std, dtype=torch.float32, device=self.device).view(1, 3, 1, 1) * 255
        self._native_mean = [m * 255.0 for m in mean]
        self._native_inv_std = [1.0 / (d * 255.0) for d in std]
        # The batch kernel: on the GPU, where one launch replaces four per image. On the CPU
        # torch's separable resize is the faster one. (`native` forces either, for tests.)
        self.native = on_gpu and _epochfs.cuda_compiled() if native is None else bool(native)
        self._warned = set()
        self._gpu_batches = on_gpu  # False once torchvision refused a list (before 0.19)
        self.stats = {"gpu_decoded": 0, "cpu_decoded": 0, "skipped": 0}

    # -- decoding --

    def _name(self, index):
        return self.files[index] if self.files is not None else f"sample {index}"

    def _decode_cpu(self, blob, name):
        """A [3, H, W] uint8 CPU tensor, or UndecodableImage."""
        info = jpeg_info(blob)
        if info is not None and not jpeg_is_complete(blob):
            raise UndecodableImage(f"{name}: truncated JPEG (no end-of-image marker)")
        if info is None or info[0] != 4:
            try:
                return tvio.decode_image(blob, mode=ImageReadMode.RGB)
            except (RuntimeError, ValueError):
                pass
        try:  # PIL: CMYK/YCCK JPEGs, and formats this torchvision does not read
            from PIL import Image
            with Image.open(io.BytesIO(bytes(blob.numpy()))) as im:
                rgb = im.convert("RGB")
                return torch.frombuffer(bytearray(rgb.tobytes()), dtype=torch.uint8).view(
                    rgb.height, rgb.width, 3).permute(2, 0, 1).contiguous()
        except Exception as e:  # noqa: BLE001 - PIL raises many kinds
            raise UndecodableImage(f"{name}: not an image any decoder here reads ({e})") from e

    def decode(self, blobs, names):
        """Decoded [3, H, W] uint8 images on self.device, None where undecodable (skip)."""
        out = [None] * len(blobs)
        gpu = []
        if self.device.type == "cuda":
            for i, blob in enumerate(blobs):
                info = jpeg_info(blob)
                if info is not None and info[0] in (1, 3) and jpeg_is_complete(blob):
                    gpu.append(i)
        if gpu and self._gpu_batches:
            try:
                decoded = tvio.decode_jpeg([blobs[i] for i in gpu], mode=ImageReadMode.RGB,
                                           device=self.device)
                for i, image in zip(gpu, decoded):
                    out[i] = image
                self.stats["gpu_decoded"] += len(gpu)
                gpu = []
            except TypeError:
                self._gpu_batches = False  # this torchvision decodes one image per call
            except RuntimeError:
                pass  # one of them is not for nvJPEG: one at a time, below
        for i in gpu:
            try:
                out[i] = tvio.decode_jpeg(blobs[i], mode=ImageReadMode.RGB, device=self.device)
                self.stats["gpu_decoded"] += 1
            except RuntimeError:
                pass  # to the CPU, below
        for i, blob in enumerate(blobs):
            if out[i] is not None:
                continue
            try:
                out[i] = self._decode_cpu(blob, names[i]).to(self.device, non_blocking=True)
                self.stats["cpu_decoded"] += 1
            except UndecodableImage as e:
                if self.on_error == "raise":
                    raise
                self.stats["skipped"] += 1
                if names[i] not in self._warned:
                    self._warned.add(names[i])
                    _log.warning("epochfs: skipping %s", e)
        return out

    # -- transforms --

    def _train_crop(self, image, rng):
        _, height, width = image.shape
        top, left, h, w = random_resized_crop_box(height, width, self.scale, self.ratio, rng)
        return _resize(image[:, top:top + h, left:left + w], self.size, self.size)

    def _eval_crop(self, image):
        _, height, width = image.shape
        short = self.resize_size
        if height <= width:
            h, w = short, int(short * width / height)
        else:
            h, w = int(short * height / width), short
        resized = _resize(image, h, w)
        s = self.size
        if s > h or s > w:  # smaller than the crop: zero padding, as torchvision's CenterCrop
            pad_w, pad_h = max(0, s - w), max(0, s - h)
            resized = F.pad(resized, (pad_w // 2, (pad_w + 1) // 2, pad_h // 2, (pad_h + 1) // 2))
            h, w = resized.shape[1], resized.shape[2]
        top = int(round((h - s) / 2.0))
        left = int(round((w - s) / 2.0))
        return resized[:, top:top + s, left:left + s]

    def __call__(self, data, offsets, lengths, indices, epoch, batch_index):
        """(images, keep): the batch's images, and the positions kept (None: all)."""
        names = [self._name(int(i)) for i in indices]
        blobs = [data[int(o):int(o) + int(n)] for o, n in zip(offsets, lengths)]
        return self.transform(self.decode(blobs, names), epoch, batch_index)

    def transform(self, decoded, epoch, batch_index):
        """(images, keep) from decode()'s images: one [B, 3, size, size] tensor of the
        images not None, and their positions (None: all of them)."""
        keep = [i for i, image in enumerate(decoded) if image is not None]
        keep_index = None if len(keep) == len(decoded) else torch.tensor(keep, dtype=torch.int64)
        rng = random.Random(f"{self.seed}:{epoch}:{batch_index}")
        if self.native:
            images = [decoded[i].contiguous() for i in keep]  # alive until the kernel is queued
            jobs = self._jobs(images, rng)
            if jobs is not None:
                return self._resize_native(jobs, len(keep)), keep_index
            rng = random.Random(f"{self.seed}:{epoch}:{batch_index}")  # the same draws below
        out = torch.empty((len(keep), 3, self.size, self.size), dtype=torch.float32,
                          device=self.device)
        flips = []
        for slot, i in enumerate(keep):
            if self.train:
                out[slot] = self._train_crop(decoded[i], rng)
                flips.append(rng.random() < 0.5)
            else:
                out[slot] = self._eval_crop(decoded[i])
        if self.train and any(flips):
            mask = torch.tensor(flips, device=self.device).view(-1, 1, 1, 1)
            out = torch.where(mask, out.flip(3), out)
        out = ((out - self._mean) / self._std).to(self.dtype)
        return out.contiguous(memory_format=torch.channels_last), keep_index

    # -- the batch kernel (loader/image_ops.h) --

    def _jobs(self, images, rng):
        """ResizeJob fields of each image, flattened, drawing crops and flips as the torch
        path does; None where the batch kernel cannot do it (a centre crop that needs
        padding)."""
        flat = []
        for image in images:
            _, height, width = image.shape
            if self.train:
                top, left, h, w = random_resized_crop_box(height, width, self.scale, self.ratio, rng)
                region = (top, left, h, w)
                resized, window = (self.size, self.size), (0, 0)
                flip = 1 if rng.random() < 0.5 else 0
            else:
                short = self.resize_size
                if height <= width:
                    rh, rw = short, int(short * width / height)
                else:
                    rh, rw = int(short * height / width), short
                if self.size > rh or self.size > rw:
                    return None
                region, resized, flip = (0, 0, height, width), (rh, rw), 0
                window = (int(round((rh - self.size) / 2.0)), int(round((rw - self.size) / 2.0)))
            flat += [image.data_ptr(), height, width, *region, *resized, *window, flip]
        return flat

    def _resize_native(self, jobs, count):
        kernel_dtype = self.dtype if self.dtype in (torch.float32, torch.bfloat16) else torch.float32
        out = torch.empty((count, self.size, self.size, 3), dtype=kernel_dtype, device=self.device)
        on_device = self.device.type == "cuda"
        stream = torch.cuda.current_stream(self.device).cuda_stream if on_device else 0
        _epochfs.resize_normalize(jobs, self.size, self._native_mean, self._native_inv_std,
                                  out.data_ptr(), kernel_dtype == torch.bfloat16, on_device, stream)
        images = out.permute(0, 3, 1, 2)  # [B, 3, size, size], channels_last in memory
        return images if kernel_dtype == self.dtype else images.to(self.dtype)
