"""Results of the epoch benchmark: rows, ratios, targets, table, JSON and chart.

One ``Row`` is one epoch of one scenario (or a skipped scenario with the
reason).  A scenario's figure is the median files/s of its epochs.  Ratios
are taken within a data set: "x tmpfs" against that data set's tmpfs copy
(the practical ceiling of a reader on this machine), "x source-cold" against
reading the slow source cold (what users have without a cache).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field

from readers import EpochResult

#: Baseline scenarios per data set: (tmpfs, source-cold).
BASELINES = {"main": ("tmpfs", "source-cold"), "small": ("small-tmpfs", "small-source-cold")}


@dataclass
class Row:
    """One measured epoch, or a scenario that could not run (result None, note says why)."""

    scenario: str
    dataset: str
    epoch: int | None = None
    result: EpochResult | None = None
    source_ios: int | None = None
    daemon_peak_rss: int | None = None
    daemon_cpu_s: float | None = None
    status: dict | None = None  # epochfs status counters, delta over the epoch
    note: str = ""
    extra: dict = field(default_factory=dict)  # e.g. mount time and source IOs spent mounting

    @property
    def skipped(self) -> bool:
        return self.result is None

    def to_dict(self) -> dict:
        d = {"scenario": self.scenario, "dataset": self.dataset, "epoch": self.epoch,
             "skipped": self.skipped, "note": self.note, "source_ios": self.source_ios,
             "daemon_peak_rss_bytes": self.daemon_peak_rss,
             "daemon_cpu_s": None if self.daemon_cpu_s is None else round(self.daemon_cpu_s, 3),
             "epochfs_status_delta": self.status, **self.extra}
        if self.result is not None:
            d.update(self.result.to_dict())
            if self.status and isinstance(self.status.get("requests"), dict) and self.result.files:
                d["epochfs_requests_per_file"] = {
                    k: round(v / self.result.files, 3) for k, v in self.status["requests"].items()}
        return d


@dataclass(frozen=True)
class Target:
    """A goal of epochfs: ``scenario`` files/s >= ``factor`` x ``baseline`` files/s."""

    label: str
    scenario: str
    baseline: str
    factor: float


TARGETS = (
    Target("warm epochs >= 0.8x tmpfs files/s", "epochfs-warm", "tmpfs", 0.8),
    Target("restart (SSD tier) >= 5x source-cold files/s, throttled source", "epochfs-restart", "source-cold", 5.0),
    Target("4 KB files: restart >= 1.5x unthrottled source-cold", "small-epochfs-restart", "small-source-cold", 1.5),
    Target("epoch 1 >= 0.95x source-cold files/s", "epochfs-e1", "source-cold", 0.95),
)

#: After a restart the cache must be served without touching the source.
# After a restart epochfs still stats each file once (a lookup; that is how a changed
# file is caught), which costs a few metadata IOs (inode tables, directories) but must
# never read file data: the daemon's own count of data reads must be zero, and the
# loop device's count, metadata included, well under one IO per file.
RESTART_SOURCE_IO_LIMIT = 0.1  # source IOs per file, metadata included


@dataclass
class Results:
    """All rows of a run plus how to summarize them."""

    rows: list[Row] = field(default_factory=list)

    def add(self, row: Row) -> Row:
        self.rows.append(row)
        return row

    def scenarios(self) -> list[str]:
        """Scenario names in the order they ran."""
        seen: dict[str, None] = {}
        for r in self.rows:
            seen.setdefault(r.scenario, None)
        return list(seen)

    def measured(self, scenario: str) -> list[Row]:
        return [r for r in self.rows if r.scenario == scenario and not r.skipped]

    def files_per_s(self, scenario: str) -> float | None:
        """A scenario's figure: the median files/s over its epochs."""
        rows = self.measured(scenario)
        return statistics.median(r.result.files_per_s for r in rows) if rows else None

    def skip_reason(self, scenario: str) -> str:
        notes = [r.note for r in self.rows if r.scenario == scenario and r.skipped and r.note]
        return notes[0] if notes else "not run"

    def ratio(self, value: float | None, baseline: str) -> float | None:
        base = self.files_per_s(baseline)
        if value is None or not base:
            return None
        return value / base

    def summary(self) -> dict:
        out = {}
        for name in self.scenarios():
            rows = self.measured(name)
            if not rows:
                out[name] = {"skipped": True, "note": self.skip_reason(name)}
                continue
            ds = rows[0].dataset
            tmpfs, cold = BASELINES[ds]
            fps = self.files_per_s(name)
            ios = [r.source_ios for r in rows if r.source_ios is not None]
            rss = [r.daemon_peak_rss for r in rows if r.daemon_peak_rss is not None]
            out[name] = {
                "dataset": ds, "epochs": len(rows), "files_per_s": round(fps, 2),
                "mb_per_s": round(statistics.median(r.result.mb_per_s for r in rows), 2),
                "p50_ms": round(statistics.median(r.result.p50_ms for r in rows), 4),
                "p99_ms": round(statistics.median(r.result.p99_ms for r in rows), 4),
                "x_tmpfs": _round(self.ratio(fps, tmpfs)),
                "x_source_cold": _round(self.ratio(fps, cold)),
                "source_ios": sum(ios) if ios else None,
                "source_ios_per_file": round(sum(ios) / sum(r.result.files for r in rows), 4) if ios else None,
                "daemon_peak_rss_bytes": max(rss) if rss else None,
            }
        return out

    def targets(self) -> list[dict]:
        """Each target with PASS / MISS / n/a and the numbers behind it."""
        out = []
        for t in TARGETS:
            value, base = self.files_per_s(t.scenario), self.files_per_s(t.baseline)
            entry = {"target": t.label, "scenario": t.scenario, "baseline": t.baseline,
                     "factor": t.factor, "files_per_s": _round(value), "baseline_files_per_s": _round(base)}
            if value is None or not base:
                missing = t.scenario if value is None else t.baseline
                entry.update(ratio=None, status="n/a", why=f"{missing}: {self.skip_reason(missing)}")
            else:
                ratio = value / base
                entry.update(ratio=round(ratio, 3), status="PASS" if ratio >= t.factor else "MISS")
            out.append(entry)
        rows = self.measured("epochfs-restart")
        entry = {"target": f"restart reads no file data from the source (status source_reads 0; "
                           f"<= {RESTART_SOURCE_IO_LIMIT} metadata IOs/file, loop-device count)",
                 "scenario": "epochfs-restart", "factor": RESTART_SOURCE_IO_LIMIT}
        ios = [r.source_ios for r in rows if r.source_ios is not None]
        if not rows or not ios:
            entry.update(status="n/a", why=f"epochfs-restart: {self.skip_reason('epochfs-restart')}")
        else:
            per_file = sum(ios) / sum(r.result.files for r in rows)
            status_reads = [r.status.get("source_reads") for r in rows if r.status]
            entry.update(source_ios=sum(ios), ios_per_file=round(per_file, 4),
                         status_source_reads=status_reads[0] if status_reads else None,
                         status="PASS" if (per_file <= RESTART_SOURCE_IO_LIMIT and
                                           not any(status_reads)) else "MISS")
        out.append(entry)
        return out


def _round(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


def _fmt(x, spec: str, width: int) -> str:
    return ("-" if x is None else format(x, spec)).rjust(width)


HEADER = (f"{'scenario':<22} {'ep':>3} {'files/s':>9} {'MB/s':>8} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'x tmpfs':>8} {'x src-cold':>10} {'src IOs':>8} {'RSS MiB':>8}")


def format_row(row: Row, results: Results) -> str:
    """One table line; ratios use the baselines measured so far."""
    if row.skipped:
        return f"{row.scenario:<22} {'-':>3}  skipped: {row.note}"
    r = row.result
    tmpfs, cold = BASELINES[row.dataset]
    line = (f"{row.scenario:<22} {_fmt(row.epoch, 'd', 3)} {r.files_per_s:9.0f} {r.mb_per_s:8.1f} "
            f"{r.p50_ms:8.3f} {r.p99_ms:8.2f} {_fmt(results.ratio(r.files_per_s, tmpfs), '.3f', 8)} "
            f"{_fmt(results.ratio(r.files_per_s, cold), '.2f', 10)} {_fmt(row.source_ios, 'd', 8)} "
            f"{_fmt(None if row.daemon_peak_rss is None else row.daemon_peak_rss / 2**20, '.0f', 8)}")
    if row.note:
        line += f"  ({row.note})"
    return line


def format_table(results: Results) -> str:
    lines = [HEADER, "-" * len(HEADER)]
    last_ds = None
    for row in results.rows:
        if last_ds is not None and row.dataset != last_ds:
            lines.append("")
        last_ds = row.dataset
        lines.append(format_row(row, results))
        if row.status and isinstance(row.status.get("requests"), dict) and not row.skipped:
            per = {k: v / row.result.files for k, v in row.status["requests"].items() if v}
            extra = ", ".join(f"{k} {v:.2f}" for k, v in sorted(per.items()))
            counters = ", ".join(f"{k} {row.status[k]}" for k in ("source_reads", "ram_hits", "ssd_hits", "misses")
                                 if k in row.status)
            watcher = ""
            if "access_opens" in row.status and "access_paused" in row.status:
                # Opens the access watcher saw, and whether it stopped watching (a warm
                # epoch it watched to its end costs every open an event).
                paused = "paused" if row.status["access_paused"] else "watching"
                watcher = (f"; opens watched {row.status['access_opens']}"
                           f" ({row.status.get('access_opens_not_held', '?')} not known held), {paused} at the end")
            lines.append(f"{'':<26}epochfs: {counters}; requests/file: {extra or '-'}{watcher}")
    return "\n".join(lines)


def format_targets(targets: list[dict]) -> str:
    lines = []
    for t in targets:
        if t["status"] == "n/a":
            detail = t.get("why", "")
        elif "ratio" in t:
            detail = (f"{t['scenario']} {t['files_per_s']:.0f} files/s = {t['ratio']:.2f}x "
                      f"{t['baseline']} {t['baseline_files_per_s']:.0f} files/s")
        else:
            detail = (f"{t['source_ios']} source IOs = {t['ios_per_file']:.4f}/file"
                      + (f"; status source_reads {t['status_source_reads']}" if t.get("status_source_reads") is not None else ""))
        lines.append(f"  [{t['status']:>4}] {t['target']}: {detail}")
    return "\n".join(lines)


def write_json(path: str, doc: dict) -> None:
    with open(path, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=False)
        f.write("\n")


_FAMILY_COLORS = {"source": "#8c8c8c", "tmpfs": "#2ca02c", "epochfs": "#1f77b4", "baseline": "#aec7e8",
                  "rclone": "#ff7f0e", "mergerfs": "#9467bd"}


def _family(scenario: str) -> str:
    name = scenario.removeprefix("small-")
    return name.split("-")[0]


def plot(path: str, results: Results, title: str) -> None:
    """Bar chart of files/s per scenario (log scale), one panel per data set,
    with the tmpfs ceiling and the source-cold floor drawn as lines."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [ds for ds in ("main", "small") if any(r.dataset == ds for r in results.rows)]
    if not panels:
        return
    widths = [max(2, len({r.scenario for r in results.rows if r.dataset == ds})) for ds in panels]
    fig, axes = plt.subplots(1, len(panels), figsize=(2.0 + 0.75 * sum(widths), 5.5),
                             gridspec_kw={"width_ratios": widths}, squeeze=False)
    for ax, ds in zip(axes[0], panels):
        names = [s for s in results.scenarios() if any(r.dataset == ds and r.scenario == s for r in results.rows)]
        values = [results.files_per_s(s) for s in names]
        xs = range(len(names))
        measured = [v for v in values if v]
        ax.bar(xs, [v or 0 for v in values], color=[_FAMILY_COLORS.get(_family(s), "#444") for s in names])
        ax.set_yscale("log")
        for x, v in zip(xs, values):
            ax.text(x, v if v else (min(measured) if measured else 1), f"{v:.0f}" if v else "skipped",
                    ha="center", va="bottom", fontsize=8, rotation=0 if v else 90)
        tmpfs, cold = BASELINES[ds]
        for base, style, label in ((tmpfs, "--", "tmpfs"), (cold, ":", "source cold")):
            v = results.files_per_s(base)
            if v:
                ax.axhline(v, color="k", linestyle=style, linewidth=1, label=f"{label} ({v:.0f}/s)")
        ax.set_xticks(list(xs))
        ax.set_xticklabels(names, rotation=35, ha="right", fontsize=9)
        ax.set_title("110 KB-class files, throttled source" if ds == "main" else "4 KB files, unthrottled source",
                     fontsize=10)
        ax.set_ylabel("files/s (median over epochs, log)")
        if measured:
            ax.set_ylim(min(measured) / 2, max(measured) * 3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, loc="best")
        ax.grid(axis="y", which="both", alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
