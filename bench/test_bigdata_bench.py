#!/usr/bin/python3
"""Unit tests of bigdata_bench's pure parts (no root, no mounts, no torch; ~1 s).

    /usr/bin/python3 -m unittest discover -s bench -p 'test_*.py'

The privileged parts (the memory cgroup, the copy, the epochfs rows, the real client)
are tested by running the benchmark itself: ``bench/bigdata_bench.py --quick``.
"""

import io
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchenv import parse_oom_control  # noqa: E402
from bigdata_bench import (_lines, evaluate_targets, format_au_table, format_table,  # noqa: E402
                           max_accelerators_at, parse_args, summarize, wait_until_mount_work_stops)
from dataset import imagefolder_plan, jpeg_bytes  # noqa: E402
from readers import EpochResult  # noqa: E402
from realclient import accelerator_utilization  # noqa: E402
from report import Row  # noqa: E402

MiB = 1 << 20


def _row(key, fps, epoch=1, ios=0, **extra):
    res = EpochResult(files=1000, bytes=10**8, seconds=1000 / fps, files_per_s=fps, mb_per_s=fps / 10,
                      p50_ms=1, p90_ms=2, p99_ms=3, max_ms=4, mean_ms=1)
    return Row(key, "main", epoch, res, source_ios=ios, extra=dict(extra))


class AcceleratorUtilizationTest(unittest.TestCase):
    def test_au_is_compute_over_wall(self):
        # 1000 samples x 8 ms on 1 accelerator = 8 s of compute in a 10 s epoch.
        self.assertAlmostEqual(accelerator_utilization(1000, 0.008, 1, 10.0), 0.8)
        # 2 accelerators share the samples: half the compute time in the same wall time.
        self.assertAlmostEqual(accelerator_utilization(1000, 0.008, 2, 10.0), 0.4)
        self.assertAlmostEqual(accelerator_utilization(1000, 0.008, 4, 2.0), 1.0)
        with self.assertRaises(ValueError):
            accelerator_utilization(1000, 0.008, 1, 0.0)
        with self.assertRaises(ValueError):
            accelerator_utilization(1000, 0.008, 0, 1.0)

    def test_max_accelerators_at(self):
        self.assertEqual(max_accelerators_at({1: 0.97, 2: 0.95, 4: 0.62, 8: 0.31}), 2)
        self.assertEqual(max_accelerators_at({1: 0.97, 2: 0.95, 4: 0.91, 8: 0.9}), 8)  # >= holds
        self.assertEqual(max_accelerators_at({1: 0.85, 2: 0.5}), 0)
        self.assertEqual(max_accelerators_at({}), 0)
        # A larger N that reaches the threshold after a smaller one missed it is noise.
        self.assertEqual(max_accelerators_at({1: 0.95, 2: 0.88, 4: 0.92}), 1)
        self.assertEqual(max_accelerators_at({4: 0.6, 1: 0.93, 2: 0.91}), 2)  # order of the dict is irrelevant
        self.assertEqual(max_accelerators_at({1: 0.8, 2: 0.7}, threshold=0.75), 1)


class SummaryTest(unittest.TestCase):
    def rows(self):
        return [
            _row("source", 300, ios=1200, memcg_limit_bytes=100 * MiB, memcg_max_usage_bytes=100 * MiB,
                 oom_kills=0, memcg_failcnt=10),
            _row("copy-cold", 1000, oom_kills=0, memcg_limit_bytes=1),
            _row("copy-steady", 2000, epoch=2, oom_kills=0, memcg_limit_bytes=1),
            _row("copy-steady", 3000, epoch=3, oom_kills=0, memcg_limit_bytes=1),
            _row("epochfs-e1", 290, ios=1300, oom_kills=0, memcg_limit_bytes=1),
            _row("epochfs-steady", 4000, epoch=2, oom_kills=0, memcg_limit_bytes=1),
            _row("epochfs-steady", 4500, epoch=3, oom_kills=0, memcg_limit_bytes=1),
            _row("epochfs-steady", 5000, epoch=4, oom_kills=0, memcg_limit_bytes=1),
            _row("epochfs-plan", 6000, epoch=5, oom_kills=0, memcg_limit_bytes=1),
            _row("epochfs-restart", 2500, epoch=6, oom_kills=0, memcg_limit_bytes=1),
            _row("epochfs-ram-cold", 1500, epoch=7),
            _row("epochfs-ram-steady", 7500, epoch=8),
            _row("tmpfs", 10000),
        ]

    def test_means_and_ratios(self):
        s = summarize(self.rows())
        self.assertEqual(s["copy-steady"]["files_per_s"], 2500)  # mean, not median
        self.assertEqual(s["epochfs-steady"]["files_per_s"], 4500)
        self.assertEqual(s["epochfs-steady"]["files_per_s_by_epoch"], [4000, 4500, 5000])
        self.assertAlmostEqual(s["epochfs-steady"]["x_plain_copy"], 4500 / 2500, places=3)  # steady vs steady
        self.assertAlmostEqual(s["epochfs-restart"]["x_plain_copy"], 2.5, places=3)  # cold vs the copy read cold
        self.assertAlmostEqual(s["epochfs-steady"]["x_source"], 15.0, places=3)
        # The published-order row is a steady state; the all-in-RAM rows compare like with
        # like: dentries dropped against the copy read cold, page cache only against its steady state.
        self.assertAlmostEqual(s["epochfs-plan"]["x_plain_copy"], 6000 / 2500, places=3)
        self.assertAlmostEqual(s["epochfs-ram-cold"]["x_plain_copy"], 1.5, places=3)
        self.assertAlmostEqual(s["epochfs-ram-steady"]["x_plain_copy"], 3.0, places=3)
        self.assertFalse(s["epochfs-ram-steady"]["under_memory_limit"])
        self.assertIn("all in RAM", format_table(self.rows()))
        self.assertEqual(s["source"]["source_ios_per_file"], 1.2)
        self.assertTrue(s["source"]["under_memory_limit"])
        self.assertFalse(s["tmpfs"]["under_memory_limit"])
        self.assertIsNone(s["tmpfs"]["oom_kills"])

    def test_table_has_means_and_failed_rows(self):
        rows = self.rows()
        rows.append(Row("epochfs-steady", "main", 5, note="FAILED after 1 OOM kill(s): x",
                        extra={"failed": True, "oom_kills": 1}))
        text = format_table(rows)
        self.assertIn("mean", text)
        self.assertIn("FAILED after 1 OOM kill(s)", text)
        s = summarize(rows)
        self.assertEqual(s["epochfs-steady"]["failed_epochs"], 1)
        self.assertEqual(s["epochfs-steady"]["oom_kills"], 1)

    def test_au_table(self):
        client = {"tmpfs": [{"accelerators": 1, "au": 0.97, "samples_per_s": 120, "wall_s": 60, "first_batch_s": 1,
                             "data_wait_s": 1}],
                  "epochfs": [{"failed": True, "note": "FAILED after 1 OOM kill(s)", "oom_kills": 1}]}
        text = format_au_table(client, [1, 2], 8.0, 32, 4)
        self.assertIn("0.970", text)
        self.assertIn("FAILED after 1 OOM kill(s)", text)


class TargetTest(unittest.TestCase):
    def summary(self, restart=2500, steady=4500):
        rows = [_row("source", 300), _row("copy-cold", 1000), _row("copy-steady", 3000),
                _row("epochfs-steady", steady), _row("epochfs-restart", restart)]
        return summarize(rows)

    def test_all_pass(self):
        t = evaluate_targets(self.summary(), {"tmpfs": {1: 0.97, 2: 0.95, 4: 0.6}, "epochfs": {1: 0.96, 2: 0.92}},
                             ram_bytes=100 * MiB, daemon_peak_rss=150 * MiB, oom_kills=0)
        self.assertEqual([x["status"] for x in t], ["PASS"] * 6)
        au = next(x for x in t if x["target"].startswith("real client"))
        self.assertEqual(au["accelerators"], 2)
        self.assertEqual((au["tmpfs_au"], au["epochfs_au"]), (0.95, 0.92))

    def test_misses(self):
        t = evaluate_targets(self.summary(restart=1900, steady=4400),
                             {"tmpfs": {1: 0.97, 2: 0.95}, "epochfs": {1: 0.96, 2: 0.89}},
                             ram_bytes=100 * MiB, daemon_peak_rss=201 * MiB, oom_kills=2)
        status = [x["status"] for x in t]
        # 1.9x < 2x; 4400/3000 = 1.47x < 1.5x; 4400/300 = 14.7x >= 10x; AU 0.89 < 0.95 - 0.05;
        # 201 MiB > 100 + 100 MiB; 2 OOM kills.
        self.assertEqual(status, ["MISS", "MISS", "PASS", "MISS", "MISS", "MISS"])
        self.assertEqual(t[0]["ratio"], 1.9)

    def test_not_measured(self):
        t = evaluate_targets(summarize([_row("source", 300)]), {"tmpfs": {1: 0.8}}, ram_bytes=MiB,
                             daemon_peak_rss=None, oom_kills=None)
        self.assertEqual([x["status"] for x in t], ["n/a"] * 6)
        t = evaluate_targets({}, {"tmpfs": {1: 0.8, 2: 0.5}, "epochfs": {1: 0.8}}, ram_bytes=MiB,
                             daemon_peak_rss=None, oom_kills=None)
        self.assertIn("never holds", t[3]["detail"])  # tmpfs below 0.9 even at N=1: nothing to compare

    def test_epochfs_stopped_before_n_star(self):
        # tmpfs holds 0.9 up to N=4; epochfs fell below 0.5 at N=2 and stopped: MISS, not n/a.
        t = evaluate_targets({}, {"tmpfs": {1: 0.97, 2: 0.95, 4: 0.91}, "epochfs": {1: 0.9, 2: 0.45}},
                             ram_bytes=MiB, daemon_peak_rss=None, oom_kills=0)
        self.assertEqual(t[3]["status"], "MISS")
        self.assertIn("not measured there", t[3]["detail"])
        # The real client on epochfs failed (an OOM kill) before any epoch: MISS as well.
        t = evaluate_targets({}, {"tmpfs": {1: 0.97}, "epochfs": {}}, ram_bytes=MiB, daemon_peak_rss=None,
                             oom_kills=1)
        self.assertEqual(t[3]["status"], "MISS")


class ArgsTest(unittest.TestCase):
    def test_quick_and_defaults(self):
        a = parse_args(["--quick"])
        self.assertEqual((a.files, a.steady_epochs, a.copy_steady_epochs, a.accelerators), (3000, 1, 1, [1, 2]))
        a = parse_args([])
        self.assertEqual((a.files, a.steady_epochs, a.copy_steady_epochs, a.accelerators), (8000, 3, 2, [1, 2, 4, 8]))
        self.assertEqual(a.client_allowance, 96)  # 24 MiB x 4 workers
        self.assertEqual((a.mem_fraction, a.ram_fraction), (0.4, 0.5))
        a = parse_args(["--epochfs-arg=--foo", "--epochfs-arg=--bar=1", "--accelerators", "4", "1"])
        self.assertEqual(a.epochfs_arg, ["--foo", "--bar=1"])
        self.assertEqual(a.accelerators, [1, 4])


class HelpersTest(unittest.TestCase):
    def test_parse_oom_control(self):
        self.assertEqual(parse_oom_control("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"),
                         {"oom_kill_disable": 0, "under_oom": 0, "oom_kill": 3})
        self.assertEqual(parse_oom_control(""), {})

    def test_lines_are_delivered_as_printed(self):
        r, w = os.pipe()
        os.write(w, b'{"event": "start"}\n{"event": "epoch"}\npartial')
        os.close(w)
        got = list(_lines(r, time.monotonic() + 5))
        os.close(r)
        self.assertEqual(got, ['{"event": "start"}', '{"event": "epoch"}', "partial"])
        r, w = os.pipe()
        got = list(_lines(r, time.monotonic() + 0.2))  # nothing written: the deadline passes
        os.close(r)
        os.close(w)
        self.assertEqual(got, [None])


class WaitTest(unittest.TestCase):
    def test_waits_for_the_counter_to_stop_and_the_warmup_to_end(self):
        class FakeMount:
            def __init__(self, states):
                self.states = states

            def status(self):
                return self.states.pop(0) if len(self.states) > 1 else self.states[0]

        states = [{"ram_bytes": 1, "metadata_warmup": True}, {"ram_bytes": 5, "metadata_warmup": True},
                  {"ram_bytes": 5, "metadata_warmup": True}, {"ram_bytes": 5, "metadata_warmup": False},
                  {"ram_bytes": 5, "metadata_warmup": False}]
        fake = FakeMount(states)
        self.assertEqual(wait_until_mount_work_stops(fake, "ram_bytes", 0.001, 2, 5.0), 5)
        self.assertEqual(len(fake.states), 1, "stopped only once still and warmed up")


class JpegTest(unittest.TestCase):
    def test_jpegs_are_decodable_deterministic_and_sized_by_the_plan(self):
        from PIL import Image
        plan = imagefolder_plan(12, 3, seed=5, label_fraction=0.5)
        for i, pf in enumerate(plan):
            data = jpeg_bytes(5, i, pf)
            self.assertEqual(data, jpeg_bytes(5, i, pf))
            if pf.kind == "image":
                img = Image.open(io.BytesIO(data))
                self.assertEqual(img.format, "JPEG")
                img.convert("RGB").load()
                self.assertAlmostEqual(len(data) / pf.size, 1.0, delta=0.12)
            else:
                self.assertEqual(len(data), pf.size)
        self.assertNotEqual(jpeg_bytes(5, 0, plan[0]), jpeg_bytes(6, 0, plan[0]))


if __name__ == "__main__":
    unittest.main()
