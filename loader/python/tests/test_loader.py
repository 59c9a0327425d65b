"""Tests of the epochfs Python module, run by Debian's /usr/bin/python3 with its torch.

    PYTHONPATH=<build>/loader/python /usr/bin/python3 -m unittest discover \
        -s loader/python/tests -v

(CTest runs exactly this as `loader_python_tests`.)
"""

import gc
import math
import os
import shutil
import tempfile
import unittest

import numpy as np
import torch
from torch.utils.data import (DataLoader, DistributedSampler, RandomSampler, SequentialSampler,
                              SubsetRandomSampler, BatchSampler)

import epochfs
from epochfs import _epochfs


def make_image_folder(root, classes=3, per_class=9, seed=0):
    """root/<class>/<i>.bin with distinct random bytes of varied sizes."""
    rng = np.random.default_rng(seed)
    for c in range(classes):
        os.makedirs(os.path.join(root, f"class{c}"), exist_ok=True)
        for i in range(per_class):
            n = int(rng.integers(1, 5000)) if (c, i) != (0, 0) else 0
            with open(os.path.join(root, f"class{c}", f"{i:03d}.bin"), "wb") as f:
                f.write(rng.bytes(n))


def read_all(loader):
    """One epoch as a list of (bytes, label) in delivery order; checks the layout."""
    out = []
    for data, offsets, lengths, labels in loader:
        assert data.dtype == torch.uint8 and data.dim() == 1
        assert offsets.dtype == torch.int64 and lengths.dtype == torch.int64
        assert labels.dtype == torch.int64
        raw = data.cpu().numpy().tobytes()
        for o, n, y in zip(offsets.tolist(), lengths.tolist(), labels.cpu().tolist()):
            out.append((raw[o:o + n], y))
    return out


class Folder(unittest.TestCase):
    """A fresh ImageFolder tree per test."""

    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="epochfs-pytest-")
        make_image_folder(self.root)
        self.files, self.labels, self.classes = epochfs.scan_image_folder(self.root)
        self.content = [open(f, "rb").read() for f in self.files]
        self.index_of = {c: i for i, c in enumerate(self.content)}
        self.assertEqual(len(self.index_of), len(self.files), "contents must be distinct")

    def tearDown(self):
        gc.collect()
        shutil.rmtree(self.root, ignore_errors=True)

    def indices(self, samples):
        return [self.index_of[b] for b, _ in samples]


class LoaderBasics(Folder):
    def test_every_sample_once_in_order_byte_identical_with_folder_labels(self):
        loader = epochfs.Loader(self.root, batch_size=4, device="cpu")
        self.assertEqual(loader.classes, ["class0", "class1", "class2"])
        samples = read_all(loader)
        self.assertEqual(self.indices(samples), list(range(len(self.files))))
        for (data, label), path in zip(samples, self.files):
            self.assertEqual(data, open(path, "rb").read())
            self.assertEqual(loader.classes[label], os.path.basename(os.path.dirname(path)))

    def test_len_matches_dataloader(self):
        n = len(self.files)
        for bs in (1, 4, 5, 27, 100):
            for drop_last in (False, True):
                ours = epochfs.Loader(self.root, batch_size=bs, drop_last=drop_last, device="cpu")
                theirs = DataLoader(range(n), batch_size=bs, drop_last=drop_last)
                self.assertEqual(len(ours), len(theirs), (bs, drop_last))
                self.assertEqual(sum(1 for _ in ours), len(theirs), (bs, drop_last))
        sampler = DistributedSampler(range(n), num_replicas=4, rank=1, shuffle=False)
        self.assertEqual(len(epochfs.Loader(self.root, batch_size=2, sampler=sampler, device="cpu")),
                         len(DataLoader(range(n), batch_size=2, sampler=sampler)))
        self.assertEqual(len(epochfs.Loader(self.root, batch_size=2, rank=1, world_size=4,
                                            device="cpu")),
                         len(DataLoader(range(n), batch_size=2, sampler=sampler)))

    def test_shuffle_and_shards_match_distributed_sampler(self):
        n = len(self.files)
        for world in (1, 2, 4):
            for rank in range(world):
                loader = epochfs.Loader(self.root, batch_size=3, shuffle=True, seed=11,
                                        rank=rank, world_size=world, device="cpu")
                ref = DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=True,
                                         seed=11)
                for epoch in (0, 1, 5):
                    loader.set_epoch(epoch)
                    ref.set_epoch(epoch)
                    self.assertEqual(self.indices(read_all(loader)), list(ref),
                                     (world, rank, epoch))

    def test_epochs_advance_without_set_epoch(self):
        loader = epochfs.Loader(self.root, batch_size=5, shuffle=True, device="cpu")
        first, second = self.indices(read_all(loader)), self.indices(read_all(loader))
        self.assertNotEqual(first, second)
        self.assertEqual(sorted(first), sorted(second))
        loader.set_epoch(0)
        self.assertEqual(self.indices(read_all(loader)), first)

    def test_any_torch_sampler(self):
        n = len(self.files)
        dist = DistributedSampler(range(n), num_replicas=3, rank=2, shuffle=True, seed=4)
        loader = epochfs.Loader(self.root, batch_size=4, sampler=dist, device="cpu")
        for epoch in range(3):
            loader.set_epoch(epoch)  # forwarded to the sampler
            self.assertEqual(dist.epoch, epoch)
            self.assertEqual(self.indices(read_all(loader)), list(dist))
        g = torch.Generator().manual_seed(1)
        for sampler in (SequentialSampler(range(n)), RandomSampler(range(n), generator=g),
                        SubsetRandomSampler([3, 1, 4, 1, 5], generator=g)):
            g.manual_seed(7)
            expected = list(sampler)
            g.manual_seed(7)
            loader = epochfs.Loader(self.root, batch_size=2, sampler=sampler, device="cpu")
            self.assertEqual(self.indices(read_all(loader)), expected, type(sampler).__name__)
        with self.assertRaises(TypeError):
            bad = epochfs.Loader(self.root, batch_size=2, device="cpu",
                                 sampler=BatchSampler(SequentialSampler(range(n)), 2, False))
            next(iter(bad))
        with self.assertRaises(ValueError):
            epochfs.Loader(self.root, batch_size=2, sampler=dist, shuffle=True)

    def test_file_list_with_labels_and_drop_last(self):
        files = self.files[:10]
        loader = epochfs.Loader(files, batch_size=4, labels=list(range(10, 20)), drop_last=True,
                                device="cpu")
        samples = read_all(loader)
        self.assertEqual(self.indices(samples), list(range(8)))
        self.assertEqual([y for _, y in samples], list(range(10, 18)))


class Records(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="epochfs-pytest-npy-")

    def tearDown(self):
        shutil.rmtree(self.root, ignore_errors=True)

    def test_npy_records_come_out_as_one_shaped_tensor(self):
        rng = np.random.default_rng(3)
        arrays = []
        for c in ("a", "b"):
            os.makedirs(os.path.join(self.root, c))
            for i in range(7):
                x = rng.standard_normal((3, 4, 5)).astype(np.float32)
                np.save(os.path.join(self.root, c, f"{i}.npy"), x)
                arrays.append(x)
        loader = epochfs.Loader(self.root, batch_size=3, record_shape=(3, 4, 5), device="cpu")
        got, labels = [], []
        for x, y in loader:
            self.assertEqual(x.dtype, torch.float32)  # from the .npy header
            self.assertEqual(tuple(x.shape[1:]), (3, 4, 5))
            got.append(x.clone())
            labels += y.tolist()
        self.assertTrue(torch.equal(torch.cat(got), torch.from_numpy(np.stack(arrays))))
        self.assertEqual(labels, [0] * 7 + [1] * 7)
        with self.assertRaises(ValueError):  # does not fit the files
            epochfs.Loader(self.root, batch_size=3, record_shape=(3, 4, 6), device="cpu")

    def test_raw_records_with_explicit_dtype(self):
        values = [np.arange(6, dtype=np.int16) * (i + 1) for i in range(5)]
        files = []
        for i, v in enumerate(values):
            files.append(os.path.join(self.root, f"{i}.raw"))
            v.tofile(files[-1])
        loader = epochfs.Loader(files, batch_size=2, record_shape=(2, 3), dtype=torch.int16,
                                device="cpu")
        got = torch.cat([x.clone() for x, _ in loader])
        self.assertTrue(torch.equal(got, torch.from_numpy(np.stack(values)).reshape(5, 2, 3)))


class Lifetimes(Folder):
    def test_tensors_outlive_the_loader_and_buffers_are_freed(self):
        before = _epochfs.live_buffer_bytes()
        loader = epochfs.Loader(self.root, batch_size=4, device="cpu")
        it = iter(loader)
        data, offsets, lengths, labels = next(it)
        self.assertGreater(_epochfs.live_buffer_bytes(), before)
        del it, loader
        gc.collect()
        first = data[offsets[0]:offsets[0] + lengths[0]].numpy().tobytes()
        self.assertEqual(first, self.content[0])
        del data, offsets, lengths, labels
        gc.collect()
        self.assertEqual(_epochfs.live_buffer_bytes(), before)

    def test_break_mid_epoch_then_a_full_epoch(self):
        threads = len(os.listdir("/proc/self/task"))
        loader = epochfs.Loader(self.root, batch_size=2, device="cpu")
        for i, _ in enumerate(loader):
            if i == 1:
                break
        self.assertEqual(self.indices(read_all(loader)), list(range(len(self.files))))
        it = iter(loader)
        next(it)
        it2 = iter(loader)  # a newer epoch supersedes the first iterator
        with self.assertRaises(RuntimeError):
            next(it)
        self.assertEqual(sum(1 for _ in it2), len(loader))  # list(it2) would hold every buffer
        loader.close()
        del loader, it, it2
        gc.collect()
        self.assertLessEqual(len(os.listdir("/proc/self/task")), threads + 2)  # io workers linger

    def test_holding_every_buffer_raises_instead_of_hanging(self):
        loader = epochfs.Loader(self.root, batch_size=2, num_buffers=3, device="cpu")
        held = []
        with self.assertRaisesRegex(RuntimeError, "num_buffers"):
            for batch in loader:
                held.append(batch)


class Errors(Folder):
    def test_missing_file_names_it(self):
        with self.assertRaises(FileNotFoundError) as cm:
            epochfs.Loader(self.files[:3] + [self.root + "/nope.bin"], batch_size=2, device="cpu")
        self.assertIn("nope.bin", str(cm.exception))
        with self.assertRaises(FileNotFoundError):
            epochfs.Loader(self.root + "/no-such-folder", batch_size=2)

    def test_file_deleted_after_listing_raises_by_name_during_iteration(self):
        loader = epochfs.Loader(self.root, batch_size=4, device="cpu")
        os.unlink(self.files[9])
        seen = 0
        with self.assertRaises(FileNotFoundError) as cm:
            for batch in loader:
                seen += 1
        self.assertEqual(seen, 2)
        self.assertIn(self.files[9], str(cm.exception))

    def test_file_changed_after_listing_raises_by_name(self):
        loader = epochfs.Loader(self.root, batch_size=4, device="cpu")
        with open(self.files[5], "r+b") as f:
            f.truncate(1)
        with self.assertRaises(OSError) as cm:
            read_all(loader)
        self.assertIn(self.files[5], str(cm.exception))
        self.assertIn("changed", str(cm.exception))

    def test_a_folder_where_a_file_should_be(self):
        with self.assertRaises(OSError) as cm:
            epochfs.Loader([self.files[0], self.root + "/class1"], batch_size=2, device="cpu")
        self.assertIn("class1", str(cm.exception))

    def test_bad_arguments(self):
        with self.assertRaises(ValueError):
            epochfs.Loader(self.root, batch_size=0, device="cpu")
        with self.assertRaises(ValueError):
            epochfs.Loader(self.root, batch_size=2, rank=2, world_size=2, device="cpu")
        with self.assertRaises(ValueError):
            epochfs.Loader(self.root, batch_size=2, device="tpu")
        with self.assertRaises(ValueError):
            epochfs.Loader(self.root, batch_size=2, io="aio", device="cpu")


class Plan(Folder):
    def test_order_is_published_to_an_epochfs_mount(self):
        os.makedirs(os.path.join(self.root, ".epochfs"))
        open(os.path.join(self.root, ".epochfs", "plan"), "wb").close()  # stands in for it
        root = os.path.realpath(self.root)
        loader = epochfs.Loader(self.root, batch_size=4, shuffle=True, seed=2, rank=1,
                                world_size=2, device="cpu")
        self.assertEqual(loader.plan_root, root)
        it = iter(loader)  # the plan is written before the first batch is read
        plan = open(os.path.join(root, ".epochfs", "plan")).read().splitlines()
        self.assertEqual(plan[0], "epochfs-plan 1")
        self.assertEqual(plan[-1], "")  # the empty line that publishes it
        read = [self.files[i] for i in self.indices(read_all_from(it))]
        self.assertEqual([os.path.join(root, p) for p in plan[1:-1]],
                         [os.path.realpath(f) for f in read])
        self.assertEqual(loader.stats()["plans_published"], 1)

    def test_no_plan_on_a_plain_folder(self):
        loader = epochfs.Loader(self.root, batch_size=4, device="cpu")
        self.assertIsNone(loader.plan_root)


def read_all_from(iterator):
    out = []
    for data, offsets, lengths, labels in iterator:
        raw = data.numpy().tobytes()
        out += [(raw[o:o + n], y) for o, n, y in zip(offsets.tolist(), lengths.tolist(),
                                                      labels.tolist())]
    return out


class Cuda(Folder):
    def setUp(self):
        usable, why = epochfs.cuda_usable()
        if not usable:
            self.skipTest(f"no usable CUDA device ({why}); CUDA path not tested")
        if not torch.cuda.is_available():
            self.skipTest(f"torch {torch.__version__} has no CUDA; CUDA path not tested")
        super().setUp()

    def test_batches_arrive_on_the_device_byte_identical(self):
        loader = epochfs.Loader(self.root, batch_size=4, device="cuda")
        self.assertEqual(loader.device.type, "cuda")
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):  # the loader makes the current stream wait
            samples = []
            for data, offsets, lengths, labels in loader:
                self.assertTrue(data.is_cuda and labels.is_cuda)
                self.assertFalse(offsets.is_cuda)
                raw = data.cpu().numpy().tobytes()
                samples += [(raw[o:o + n], y) for o, n, y in
                            zip(offsets.tolist(), lengths.tolist(), labels.cpu().tolist())]
        self.assertEqual(self.indices(samples), list(range(len(self.files))))
        self.assertEqual([y for _, y in samples], self.labels)


if __name__ == "__main__":
    unittest.main()
