#!/usr/bin/python3
"""Unit tests of the harness's pure parts (no root, no mounts, a few seconds).

    /usr/bin/python3 -m unittest discover -s bench -p 'test_*.py'

The privileged parts (loop devices, cgroup, FUSE daemons, cleanup) are tested by
running the benchmark itself; see bench/README.md, "Testing the harness".
"""

import json
import os
import sys
import tempfile
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchenv import parse_mountinfo  # noqa: E402
from dataset import file_bytes, imagefolder_plan, materialize, small_plan  # noqa: E402
from epoch_bench import ALL_SCENARIOS, parse_args, select_scenarios  # noqa: E402
from fusemounts import status_delta  # noqa: E402
from readers import EpochResult, ReadFailure, epoch_order, run_epoch, shard  # noqa: E402
from report import Results, Row, format_table  # noqa: E402


class DatasetTest(unittest.TestCase):
    def test_plan_is_deterministic_and_shaped_like_imagefolder(self):
        a = imagefolder_plan(4000, 100, seed=7)
        self.assertEqual(a, imagefolder_plan(4000, 100, seed=7))
        self.assertNotEqual(a, imagefolder_plan(4000, 100, seed=8))
        images = [p.size for p in a if p.kind == "image"]
        labels = [p.size for p in a if p.kind == "label"]
        self.assertEqual(len(images), 4000)
        self.assertAlmostEqual(np.mean(images) / 110_000, 1.0, delta=0.05)
        self.assertTrue(all(100 <= s <= 300 for s in labels))
        self.assertAlmostEqual(len(labels) / 4000, 0.25, delta=0.03)
        self.assertEqual(len({p.relpath.split("/")[0] for p in a}), 100)

    def test_file_bytes_are_deterministic_and_exact(self):
        plan = imagefolder_plan(20, 4, seed=1, label_fraction=1.0)
        for i, pf in enumerate(plan):
            data = file_bytes(1, i, pf)
            self.assertEqual(len(data), pf.size)
            self.assertEqual(data, file_bytes(1, i, pf))
            if pf.kind == "label":
                json.loads(data)  # a label is a real (padded) JSON document
        self.assertNotEqual(file_bytes(1, 0, plan[0]), file_bytes(2, 0, plan[0]))

    def test_small_plan(self):
        plan = small_plan(10, 3)
        self.assertTrue(all(p.size == 4096 for p in plan))
        self.assertEqual(len({p.relpath for p in plan}), 10)


class ReaderTest(unittest.TestCase):
    def test_epoch_orders_are_fresh_permutations_and_shards_cover_them(self):
        o1, o2 = epoch_order(1000, 3, 1), epoch_order(1000, 3, 2)
        self.assertEqual(sorted(o1.tolist()), list(range(1000)))
        self.assertFalse(np.array_equal(o1, o2))
        self.assertTrue(np.array_equal(o1, epoch_order(1000, 3, 1)))
        parts = [shard(o1, r, 4) for r in range(4)]
        self.assertEqual(sorted(np.concatenate(parts).tolist()), list(range(1000)))
        self.assertEqual(parts[1][0], o1[1])  # interleaved, like DistributedSampler

    def test_run_epoch_reads_everything_and_fails_on_wrong_bytes(self):
        with tempfile.TemporaryDirectory() as d:
            m = materialize("t", imagefolder_plan(60, 5, seed=2, mean_size=5000), 2, [d])
            res = run_epoch(d, m, readers=3, seed=2, epoch=1, timeout=60)
            self.assertEqual(res.files, len(m))
            self.assertEqual(res.bytes, m.total_bytes)
            self.assertGreater(res.files_per_s, 0)
            self.assertLessEqual(res.p50_ms, res.p99_ms)

            victim = os.path.join(d, m.paths[5])
            with open(victim, "r+b") as f:
                f.seek(10)
                byte = f.read(1)
                f.seek(10)
                f.write(bytes([byte[0] ^ 1]))
            with self.assertRaisesRegex(ReadFailure, "CHECKSUM MISMATCH.*crc32"):
                run_epoch(d, m, readers=2, seed=2, epoch=1, timeout=60)
            with self.assertRaisesRegex(ReadFailure, "sha1"):
                run_epoch(d, m, readers=2, seed=2, epoch=1, verify="sha1", timeout=60)
            os.truncate(victim, 3)
            with self.assertRaisesRegex(ReadFailure, "size 3"):
                run_epoch(d, m, readers=2, seed=2, epoch=1, timeout=60)
            os.unlink(victim)
            with self.assertRaisesRegex(ReadFailure, "READ ERROR.*FileNotFoundError"):
                run_epoch(d, m, readers=2, seed=2, epoch=1, timeout=60)


class SelectionTest(unittest.TestCase):
    def test_groups_names_and_commas(self):
        self.assertEqual(select_scenarios(["all"]), list(ALL_SCENARIOS))
        self.assertEqual(select_scenarios(["tmpfs,source-cold"]), ["source-cold", "tmpfs"])
        self.assertIn("rclone-restart", select_scenarios(["rclone"]))
        with self.assertRaises(ValueError):
            select_scenarios(["nope"])

    def test_a_baseline_binary_mirrors_each_selected_epochfs_scenario(self):
        args = parse_args(["--scenarios", "epochfs-warm,small-epochfs-restart,tmpfs",
                           "--baseline-epochfs", sys.executable])
        self.assertEqual(args.selected, ["tmpfs", "epochfs-warm", "small-epochfs-restart",
                                         "baseline-warm", "small-baseline-restart"])
        self.assertNotIn("baseline-warm", parse_args(["--scenarios", "epochfs-warm"]).selected)


class MountinfoTest(unittest.TestCase):
    def test_parses_fuse_lines_with_escapes(self):
        text = ("36 35 0:40 / /mnt/a\\040b rw,relatime shared:1 - fuse.rclone :local:/x rw\n"
                "37 35 7:0 / /var/tmp/src rw - ext4 /dev/loop0 rw\n")
        m = parse_mountinfo(text)
        self.assertEqual(m[0].mountpoint, "/mnt/a b")
        self.assertEqual((m[0].fstype, m[0].majmin), ("fuse.rclone", "0:40"))
        self.assertEqual(m[1].source, "/dev/loop0")


def _row(scenario, fps, dataset="main", epoch=1, ios=0):
    res = EpochResult(files=1000, bytes=10**8, seconds=1000 / fps, files_per_s=fps, mb_per_s=fps / 10,
                      p50_ms=1, p90_ms=2, p99_ms=3, max_ms=4, mean_ms=1)
    return Row(scenario, dataset, epoch, res, source_ios=ios)


class ReportTest(unittest.TestCase):
    def test_targets(self):
        r = Results()
        for row in (_row("source-cold", 300, ios=1000), _row("tmpfs", 10000), _row("tmpfs", 12000, epoch=2),
                    _row("epochfs-e1", 290, ios=1000), _row("epochfs-warm", 9000, epoch=2),
                    _row("epochfs-warm", 9400, epoch=3), _row("epochfs-restart", 1000, epoch=4, ios=3)):
            r.add(row)
        r.add(Row("small-epochfs-restart", "small", note="epochfs binary not found"))
        t = {x["scenario"] + ":" + str(x.get("baseline")): x for x in r.targets()}
        self.assertEqual(r.files_per_s("tmpfs"), 11000)  # median of epochs
        self.assertEqual(t["epochfs-warm:tmpfs"]["status"], "PASS")  # 9200 / 11000 = 0.84
        self.assertEqual(t["epochfs-restart:source-cold"]["status"], "MISS")  # 3.3x < 5x
        self.assertEqual(t["epochfs-e1:source-cold"]["status"], "PASS")  # 0.967 >= 0.95
        self.assertEqual(t["small-epochfs-restart:small-source-cold"]["status"], "n/a")
        self.assertIn("binary not found", t["small-epochfs-restart:small-source-cold"]["why"])
        self.assertEqual(t["epochfs-restart:None"]["status"], "PASS")  # 3 IOs / 1000 files
        self.assertIn("skipped: epochfs binary not found", format_table(r))
        self.assertAlmostEqual(r.summary()["epochfs-warm"]["x_tmpfs"], 9200 / 11000, places=3)

    def test_status_delta(self):
        a = {"source_reads": 5, "ram_hits": 1, "corrupt_entries": 0, "requests": {"open": 10, "read": 3}}
        a["access_pauses"] = 1
        b = {"source_reads": 9, "ram_hits": 4, "corrupt_entries": 0, "daemon_rss_bytes": 7,
             "access_pauses": 2, "access_paused": 0, "requests": {"open": 30, "read": 3, "lookup": 2}}
        d = status_delta(a, b)
        self.assertEqual(d["source_reads"], 4)
        self.assertEqual(d["access_pauses"], 1)  # a counter: the epoch's share
        self.assertEqual(d["access_paused"], 0)  # a gauge: as at the end
        self.assertEqual(d["requests"], {"open": 20, "read": 0, "lookup": 2})
        self.assertEqual(d["daemon_rss_bytes"], 7)
        self.assertIsNone(status_delta(None, b))


if __name__ == "__main__":
    unittest.main()
