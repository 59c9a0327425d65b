"""Tests of the image pipeline (epochfs.Loader(decode="image"), epochfs/images.py).

They run on the CPU everywhere; the GPU comparison runs where torch sees a CUDA device.
Run by Debian's /usr/bin/python3 (CTest: loader_python_tests).
"""

import gc
import io
import logging
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import torch

import epochfs
from epochfs import images

try:
    from PIL import Image
    import torchvision
    import torchvision.io as tvio
    from torchvision.io import ImageReadMode
    HAVE_VISION = True
except ImportError:
    HAVE_VISION = False

CUDA = torch.cuda.is_available() and epochfs.cuda_compiled()


def jpeg_bytes(rng, width, height, mode="RGB", quality=90, progressive=False):
    """A real photo-like JPEG: smooth gradients plus noise (compresses like a photo)."""
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([(x * 255 // max(1, width - 1)), (y * 255 // max(1, height - 1)),
                     ((x + y) * 127 // max(1, width + height))], axis=-1)
    noise = rng.integers(0, 40, size=(height, width, 3))
    rgb = np.clip(base + noise, 0, 255).astype(np.uint8)
    im = Image.fromarray(rgb, "RGB").convert(mode)
    out = io.BytesIO()
    im.save(out, format="JPEG", quality=quality, progressive=progressive)
    return out.getvalue()


def png_bytes(rng, width, height):
    rgb = rng.integers(0, 255, size=(height, width, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(rgb, "RGB").save(out, format="PNG")
    return out.getvalue()


def make_folder(root, per_class=6, classes=3, seed=0):
    """An ImageFolder of real JPEGs of varied sizes and qualities."""
    rng = np.random.default_rng(seed)
    for c in range(classes):
        os.makedirs(os.path.join(root, f"c{c}"), exist_ok=True)
        for i in range(per_class):
            w, h = int(rng.integers(200, 500)), int(rng.integers(200, 500))
            data = jpeg_bytes(rng, w, h, quality=int(rng.integers(85, 96)))
            with open(os.path.join(root, f"c{c}", f"{i:03d}.jpg"), "wb") as f:
                f.write(data)


@unittest.skipUnless(HAVE_VISION, "needs torchvision and PIL")
class ImageTestBase(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="epochfs-images-")
        self.rng = np.random.default_rng(7)

    def tearDown(self):
        gc.collect()
        shutil.rmtree(self.root, ignore_errors=True)

    def write(self, rel, data):
        path = os.path.join(self.root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        return path


class Decoding(ImageTestBase):
    def pipeline(self, device="cpu", on_error="raise"):
        return images.ImagePipeline(size=64, train=False, device=device, on_error=on_error)

    def decode(self, pipeline, blobs, names=None):
        tensors = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in blobs]
        return pipeline.decode(tensors, names or [f"blob{i}" for i in range(len(blobs))])

    def test_cpu_decode_is_torchvisions_own(self):
        blobs = [jpeg_bytes(self.rng, 320, 240), jpeg_bytes(self.rng, 300, 401, progressive=True),
                 jpeg_bytes(self.rng, 250, 250, mode="L"), png_bytes(self.rng, 64, 48)]
        got = self.decode(self.pipeline(), blobs)
        for blob, image in zip(blobs, got):
            want = tvio.decode_image(torch.frombuffer(bytearray(blob), dtype=torch.uint8),
                                     mode=ImageReadMode.RGB)
            self.assertEqual(image.shape[0], 3)
            self.assertTrue(torch.equal(image, want))

    def test_cmyk_jpeg_is_converted_as_pil_does(self):
        blob = jpeg_bytes(self.rng, 120, 80, mode="CMYK")
        self.assertEqual(images.jpeg_info(blob)[0], 4)
        (image,) = self.decode(self.pipeline(), [blob])
        with Image.open(io.BytesIO(blob)) as im:
            want = torch.from_numpy(np.asarray(im.convert("RGB"))).permute(2, 0, 1)
        self.assertTrue(torch.equal(image, want))

    def test_jpeg_headers(self):
        self.assertEqual(images.jpeg_info(jpeg_bytes(self.rng, 40, 30)), (3, False))
        self.assertEqual(images.jpeg_info(jpeg_bytes(self.rng, 40, 30, progressive=True)), (3, True))
        self.assertEqual(images.jpeg_info(jpeg_bytes(self.rng, 40, 30, mode="L")), (1, False))
        self.assertIsNone(images.jpeg_info(png_bytes(self.rng, 4, 4)))
        self.assertIsNone(images.jpeg_info(b"\xff\xd8"))
        self.assertTrue(images.jpeg_is_complete(jpeg_bytes(self.rng, 40, 30)))

    def test_truncated_and_non_images_name_the_file_or_are_skipped(self):
        good = jpeg_bytes(self.rng, 100, 100)
        truncated = good[: len(good) // 2]
        blobs = [good, truncated, b"just some text, not an image\n" * 10, png_bytes(self.rng, 8, 8)[:30]]
        names = ["good.jpg", "cut.jpg", "notes.txt", "cut.png"]
        with self.assertRaises(ValueError) as raised:
            self.decode(self.pipeline(), blobs, names)
        self.assertIn("cut.jpg", str(raised.exception))
        self.assertIn("truncated", str(raised.exception))
        for name, blob in zip(names[2:], blobs[2:]):
            with self.assertRaises(ValueError) as raised:
                self.decode(self.pipeline(), [blob], [name])
            self.assertIn(name, str(raised.exception))
        skipping = self.pipeline(on_error="skip")
        with self.assertLogs("epochfs", level="WARNING") as logs:
            got = self.decode(skipping, blobs, names)
            got_again = self.decode(skipping, blobs, names)
        self.assertIsNotNone(got[0])
        self.assertEqual(got[1:], [None, None, None])
        self.assertEqual(got_again[1:], [None, None, None])
        self.assertEqual(len(logs.records), 3, "one warning per file, not per read")

    @unittest.skipUnless(CUDA, "needs a CUDA device")
    def test_gpu_decode_is_close_to_the_cpu_decode(self):
        # nvJPEG and libjpeg-turbo round and upsample chroma differently; the bound is what
        # docs/benchmarks.md reports as measured, with room.
        blobs = [jpeg_bytes(self.rng, int(self.rng.integers(200, 500)), int(self.rng.integers(200, 500)),
                            quality=int(self.rng.integers(85, 96))) for _ in range(16)]
        blobs.append(jpeg_bytes(self.rng, 256, 256, mode="L"))
        gpu = self.decode(self.pipeline(device="cuda"), blobs)
        cpu = self.decode(self.pipeline(), blobs)
        diffs = torch.cat([(g.cpu().int() - c.int()).abs().flatten() for g, c in zip(gpu, cpu)]).float()
        mean, p999, worst = diffs.mean().item(), diffs.quantile(0.999).item(), diffs.max().item()
        print(f"\nnvJPEG vs libjpeg-turbo over {len(blobs)} JPEGs: mean |diff| {mean:.3f}, "
              f"99.9th percentile {p999:.0f}, max {worst:.0f} (of 255)")
        self.assertLess(mean, 2.0)
        self.assertLessEqual(p999, 24)


class Crops(unittest.TestCase):
    def test_boxes_follow_random_resized_crops_ranges(self):
        rng = random.Random(5)
        height, width = 375, 500
        scale, ratio = (0.08, 1.0), (3 / 4, 4 / 3)
        areas, aspects, fallbacks = [], [], 0
        for _ in range(20000):
            top, left, h, w = images.random_resized_crop_box(height, width, scale, ratio, rng)
            self.assertTrue(0 <= top and top + h <= height and 0 <= left and left + w <= width)
            self.assertGreater(h, 0)
            self.assertGreater(w, 0)
            areas.append(h * w / (height * width))
            aspects.append(w / h)
        areas, aspects = np.array(areas), np.array(aspects)
        # Rounding to whole pixels moves a box's area and ratio by a little.
        self.assertGreaterEqual(areas.min(), 0.08 * 0.95)
        self.assertLessEqual(areas.max(), 1.0)
        self.assertGreaterEqual(aspects.min(), 0.75 * 0.95)
        self.assertLessEqual(aspects.max(), 4 / 3 * 1.05)
        if not HAVE_VISION:
            return
        # The same distribution as torchvision's own draws (two-sample Kolmogorov-Smirnov).
        from torchvision.transforms import RandomResizedCrop
        torch.manual_seed(5)
        image = torch.empty(3, height, width)
        theirs = []
        for _ in range(20000):
            _, _, h, w = RandomResizedCrop.get_params(image, list(scale), list(ratio))
            theirs.append(h * w / (height * width))
        theirs = np.sort(np.array(theirs))
        ours = np.sort(areas)
        grid = np.linspace(0, 1, 201)
        ks = np.max(np.abs(np.searchsorted(ours, grid) - np.searchsorted(theirs, grid))) / len(ours)
        self.assertLess(ks, 0.03, f"KS distance {ks:.4f} between our and torchvision's crop areas")
        self.assertAlmostEqual(ours.mean(), theirs.mean(), delta=0.01)


class BatchKernel(ImageTestBase):
    """The batch kernel (loader/image_ops.h) computes what torch's per-image operations do;
    its host build runs the very code the CUDA kernel runs, so this holds without a GPU."""

    def images(self, count=12):
        out = []
        for _ in range(count):
            blob = jpeg_bytes(self.rng, int(self.rng.integers(40, 300)), int(self.rng.integers(40, 300)))
            out.append(tvio.decode_image(torch.frombuffer(bytearray(blob), dtype=torch.uint8),
                                         mode=ImageReadMode.RGB))
        return out

    def compare(self, device, **kwargs):
        decoded = [image.to(device) for image in self.images()]
        native = images.ImagePipeline(device=device, native=True, **kwargs)
        torch_ops = images.ImagePipeline(device=device, native=False, **kwargs)
        for batch_index in range(3):
            a, _ = native.transform(decoded, 1, batch_index)
            b, _ = torch_ops.transform(decoded, 1, batch_index)
            self.assertEqual(a.shape, b.shape)
            self.assertTrue(a.is_contiguous(memory_format=torch.channels_last))
            diff = (a.float() - b.float()).abs().max().item()
            # bfloat16 keeps 8 bits: values up to ~2.6 are within 0.01 of each other.
            self.assertLess(diff, 0.02 if a.dtype == torch.bfloat16 else 1e-3, kwargs)

    def test_train_crops_flips_and_normalisation_match_torch(self):
        self.compare("cpu", size=64, train=True, dtype=torch.float32)
        self.compare("cpu", size=48, train=True, dtype=torch.bfloat16, scale=(0.5, 1.0))

    def test_eval_resize_and_centre_crop_match_torch(self):
        self.compare("cpu", size=32, train=False, dtype=torch.float32)
        self.compare("cpu", size=32, train=False, dtype=torch.float32, resize_size=40)

    @unittest.skipUnless(CUDA, "needs a CUDA device")
    def test_the_cuda_kernel_matches_torch_on_the_gpu(self):
        self.compare("cuda", size=224, train=True, dtype=torch.bfloat16)
        self.compare("cuda", size=224, train=False, dtype=torch.float32)


class Pipeline(ImageTestBase):
    def setUp(self):
        super().setUp()
        make_folder(self.root)

    def test_labels_and_order_are_imagefolders_and_the_samplers(self):
        from torchvision.datasets import ImageFolder
        folder = ImageFolder(self.root)
        loader = epochfs.Loader(self.root, batch_size=4, shuffle=True, seed=3, device="cpu",
                                decode="image", size=32, train=True)
        self.assertEqual(loader.classes, folder.classes)
        for epoch in (0, 1):
            loader.set_epoch(epoch)
            g = torch.Generator()
            g.manual_seed(3 + epoch)
            order = torch.randperm(len(folder), generator=g).tolist()
            got = []
            for x, y in loader:
                self.assertEqual(x.shape[1:], (3, 32, 32))
                self.assertEqual(x.dtype, torch.float32)
                self.assertTrue(x.is_contiguous(memory_format=torch.channels_last))
                got.extend(y.tolist())
            self.assertEqual(got, [folder.targets[i] for i in order])

    def test_eval_transform_matches_torchvisions(self):
        from torchvision import transforms
        loader = epochfs.Loader(self.root, batch_size=5, device="cpu", decode="image", size=224,
                                train=False)
        reference = transforms.Compose([
            transforms.Resize(256, antialias=True), transforms.CenterCrop(224),
            transforms.ConvertImageDtype(torch.float32),
            transforms.Normalize(images.IMAGENET_MEAN, images.IMAGENET_STD)])
        (x, _), files = next(iter(loader)), loader.files[:5]
        for got, path in zip(x, files):
            with open(path, "rb") as f:
                decoded = tvio.decode_image(torch.frombuffer(bytearray(f.read()), dtype=torch.uint8),
                                            mode=ImageReadMode.RGB)
            want = reference(decoded)
            # torchvision resizes uint8 tensors to uint8 (rounded); we keep floats.
            self.assertLess((got - want).abs().max().item(), 0.05, path)

    def test_an_epochs_crops_are_reproducible_and_the_next_epochs_differ(self):
        def epoch(e):
            loader = epochfs.Loader(self.root, batch_size=6, device="cpu", decode="image",
                                    size=48, train=True, seed=9)
            loader.set_epoch(e)
            return torch.cat([x for x, _ in loader])
        a, b, c = epoch(2), epoch(2), epoch(3)
        self.assertTrue(torch.equal(a, b))
        self.assertFalse(torch.equal(a, c))

    def test_a_batch_held_by_the_training_loop_is_never_overwritten(self):
        loader = epochfs.Loader(self.root, batch_size=2, num_buffers=2, device="cpu",
                                decode="image", size=40, train=False)
        held = []
        for x, y in loader:
            held.append((x, x.clone(), y, y.clone()))  # every batch kept, past num_buffers
        self.assertGreater(len(held), 2)
        for x, x_copy, y, y_copy in held:
            self.assertTrue(torch.equal(x, x_copy))
            self.assertTrue(torch.equal(y, y_copy))

    def test_odd_formats_decode_and_bad_files_raise_or_are_skipped(self):
        self.write("c0/gray.jpg", jpeg_bytes(self.rng, 210, 230, mode="L"))
        self.write("c0/cmyk.jpg", jpeg_bytes(self.rng, 230, 210, mode="CMYK"))
        self.write("c1/progressive.jpg", jpeg_bytes(self.rng, 300, 200, progressive=True))
        self.write("c1/image.png", png_bytes(self.rng, 90, 70))
        loader = epochfs.Loader(self.root, batch_size=64, device="cpu", decode="image", size=32)
        x, y = next(iter(loader))
        self.assertEqual(len(x), len(loader.files))
        self.assertTrue(torch.isfinite(x).all())
        good = jpeg_bytes(self.rng, 200, 200)
        self.write("c2/cut.jpg", good[: len(good) // 3])
        self.write("c2/readme.txt", b"not an image")
        with self.assertRaises(ValueError) as raised:
            next(iter(epochfs.Loader(self.root, batch_size=64, device="cpu", decode="image", size=32)))
        self.assertIn("cut.jpg", str(raised.exception))
        skipping = epochfs.Loader(self.root, batch_size=64, device="cpu", decode="image", size=32,
                                  on_error="skip")
        with self.assertLogs("epochfs", level="WARNING"):
            x, y = next(iter(skipping))
        self.assertEqual(len(x), len(skipping.files) - 2)
        _, labels, _ = epochfs.scan_image_folder(self.root)
        kept = [i for i, f in enumerate(skipping.files) if not f.endswith(("cut.jpg", "readme.txt"))]
        self.assertEqual(y.tolist(), [labels[i] for i in kept])

    @unittest.skipUnless(CUDA, "needs a CUDA device")
    def test_on_the_gpu_images_are_bf16_channels_last_on_the_device(self):
        loader = epochfs.Loader(self.root, batch_size=8, decode="image", size=224, train=True,
                                device="cuda")
        x, y = next(iter(loader))
        self.assertEqual(x.device.type, "cuda")
        self.assertEqual(y.device.type, "cuda")
        self.assertEqual(x.dtype, torch.bfloat16)
        self.assertTrue(x.is_contiguous(memory_format=torch.channels_last))
        self.assertGreater(loader.pipeline.stats["gpu_decoded"], 0)


class WithoutTorch(unittest.TestCase):
    def test_the_package_and_the_hook_import_without_torch_and_the_loader_says_what_to_install(self):
        code = (
            "import sys\n"
            "sys.modules['torch'] = None  # as if torch were not installed\n"
            "import epochfs, epochfs.hook\n"
            "print(epochfs.shuffled_order(4, 1))\n"
            "try:\n"
            "    epochfs.Loader\n"
            "except ImportError as e:\n"
            "    print('ImportError:', e)\n")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env=dict(os.environ))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("ImportError: epochfs.Loader needs PyTorch", r.stdout)
        self.assertIn("python3-torch", r.stdout)


if __name__ == "__main__":
    unittest.main()
