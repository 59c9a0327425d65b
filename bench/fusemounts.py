"""The FUSE filesystems under test: epochfs, rclone's VFS cache and mergerfs.

Each wrapper mounts one filesystem over the source directory, knows its
daemon's pid (for peak RSS = VmHWM and CPU time), checks that the daemon sits
in the throttled blkio cgroup (a daemon outside it would read the "slow" disk
at full speed and make every number a lie), and unmounts it on ``stop()``
or from the cleanup stack if the run dies first.

rclone and mergerfs are started in the foreground as our own children (in a
new session, so a terminal Ctrl-C reaches the benchmark, which then unmounts
them in order, rather than the daemons directly).  epochfs follows its own
CLI contract: ``epochfs mount`` daemonizes and returns once the mount is live.
"""

from __future__ import annotations

import json
import os
import subprocess

from benchenv import (BlkioThrottle, Cleanup, find_daemon_pid, mount_at, pid_alive,
                      proc_cpu_seconds, proc_status_kb, run, unmount, wait_for_mount,
                      wait_pid_exit, warn)

#: Keys the benchmark reads from ``epochfs status MOUNT --json``.
#: Of them, the counters an epoch's delta is taken of (status_delta).
EPOCHFS_COUNTER_KEYS = ("source_reads", "source_bytes", "ram_hits", "ssd_hits", "misses", "corrupt_entries",
                        # what readahead, pushing and the access watcher did (kept in the JSON
                        # for diagnosis)
                        "prefetched", "prefetch_hits", "prefetch_refused", "prefetch_in_kernel",
                        "pushed_files", "push_not_known", "push_refused", "kernel_page_drops",
                        "read_pages_moved", "read_pages_dropped", "access_opens",
                        "access_opens_not_held", "access_pauses")
EPOCHFS_STATUS_KEYS = (*EPOCHFS_COUNTER_KEYS, "daemon_rss_bytes", "requests", "access_paused")


class MountError(Exception):
    """A filesystem could not be mounted; its scenarios are skipped, the run goes on."""


class FuseMount:
    """Common part: a mounted FUSE filesystem served by one daemon process."""

    kind = "fuse"

    def __init__(self, cleanup: Cleanup, cgroup: BlkioThrottle, mountpoint: str, log_path: str) -> None:
        self.cleanup = cleanup
        self.cgroup = cgroup
        self.mountpoint = mountpoint
        self.log_path = log_path
        self.pid: int | None = None
        self.command: list[str] = []
        self._handle: Cleanup.Handle | None = None

    # -- lifecycle (subclasses implement _start/_stop) ---------------------------------
    def start(self) -> None:
        os.makedirs(self.mountpoint, exist_ok=True)
        self._handle = self.cleanup.push(f"unmount {self.kind} at {self.mountpoint}", self._stop_quietly)
        try:
            self._start()
        except Exception as e:
            self._handle.release()
            raise MountError(f"{self.kind}: {e}{self._log_tail()}") from e
        if self.pid is not None and not self.cgroup.contains(self.pid):
            warn(f"{self.kind} daemon {self.pid} is NOT in the throttled cgroup: its source reads are not throttled")

    def stop(self) -> None:
        """Unmounts and waits for the daemon to exit."""
        if self._handle is not None:
            self._handle.release()

    def _stop_quietly(self) -> None:
        try:
            self._stop()
        finally:
            # Whatever the daemon did, leave nothing mounted and nothing running.
            if mount_at(self.mountpoint) is not None:
                unmount(self.mountpoint)
            if self.pid is not None and not wait_pid_exit(self.pid, 30):
                warn(f"{self.kind} daemon {self.pid} did not exit; killing it")
                try:
                    os.kill(self.pid, 9)
                except ProcessLookupError:
                    pass
                wait_pid_exit(self.pid, 5)

    def _start(self) -> None:
        raise NotImplementedError

    def _stop(self) -> None:
        unmount(self.mountpoint)

    # -- measurements ------------------------------------------------------------------
    def peak_rss_bytes(self) -> int | None:
        return proc_status_kb(self.pid, "VmHWM") if self.pid else None

    def cpu_seconds(self) -> float | None:
        return proc_cpu_seconds(self.pid) if self.pid else None

    def status(self) -> dict | None:
        """Daemon-side counters, where the filesystem has them."""
        return None

    def _log_tail(self, lines: int = 15) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                tail = f.read().splitlines()[-lines:]
        except OSError:
            return ""
        return ("\n    log: " + "\n    log: ".join(tail)) if tail else ""


class ForegroundDaemonMount(FuseMount):
    """A daemon we run in the foreground as a child process until unmounted."""

    mount_timeout = 60.0
    proc: subprocess.Popen | None = None

    def _start(self) -> None:
        with open(self.log_path, "ab") as logf:
            self.proc = subprocess.Popen(self.command, stdin=subprocess.DEVNULL, stdout=logf,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        self.pid = self.proc.pid
        wait_for_mount(self.mountpoint, self.mount_timeout, alive=lambda: self.proc.poll() is None)

    def _stop(self) -> None:
        unmount(self.mountpoint)
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            warn(f"{self.kind} did not exit after unmount; terminating")
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class RcloneMount(ForegroundDaemonMount):
    """``rclone mount --vfs-cache-mode full``: a FUSE cache that persists to disk."""

    kind = "rclone"

    def __init__(self, cleanup, cgroup, mountpoint, log_path, *, source: str, cache_dir: str,
                 config_path: str, extra: list[str]) -> None:
        super().__init__(cleanup, cgroup, mountpoint, log_path)
        if not os.path.exists(config_path):
            open(config_path, "w").close()  # an empty config: no "config not found" notice
        self.command = ["rclone", "mount", f":local:{source}", mountpoint,
                        "--vfs-cache-mode", "full", "--cache-dir", cache_dir,
                        "--config", config_path, "--read-only", *extra]


class MergerfsMount(ForegroundDaemonMount):
    """mergerfs with one branch: a plain FUSE pass-through with page caching."""

    kind = "mergerfs"

    def __init__(self, cleanup, cgroup, mountpoint, log_path, *, source: str, options: str) -> None:
        super().__init__(cleanup, cgroup, mountpoint, log_path)
        self.command = ["mergerfs", "-f", "-o", f"{options},fsname=epochfs-bench-mergerfs",
                        source, mountpoint]


class EpochfsMount(FuseMount):
    """epochfs through its CLI: ``mount`` (daemonizes), ``status --json``, ``umount``."""

    kind = "epochfs"

    def __init__(self, cleanup, cgroup, mountpoint, log_path, *, binary: str, source: str,
                 cache_dir: str, ram: str, disk: str, log_level: str, extra: list[str]) -> None:
        super().__init__(cleanup, cgroup, mountpoint, log_path)
        self.binary = binary
        self.command = [binary, "mount", source, mountpoint, "--cache-dir", cache_dir,
                        "--ram", ram, "--disk", disk, "--log-level", log_level, *extra]
        self._missing_keys_warned = False

    def _start(self) -> None:
        cp = run(self.command, check=False, timeout=120)
        with open(self.log_path, "a") as f:
            f.write(f"$ {' '.join(self.command)}\n{cp.stdout}{cp.stderr}")
        if cp.returncode != 0:
            lines = (cp.stderr or cp.stdout).strip().splitlines() or ["(no output)"]
            raise RuntimeError(f"`epochfs mount` exited {cp.returncode}: {lines[-1]}")  # all of it is in the log
        m = mount_at(self.mountpoint)
        if m is None or not m.fstype.startswith("fuse"):
            raise RuntimeError("`epochfs mount` returned 0 but nothing is mounted at the mountpoint")
        st = self.status() or {}
        pid = st.get("daemon_pid") or st.get("pid")
        self.pid = int(pid) if pid else find_daemon_pid(self.mountpoint, "epochfs")
        if self.pid is None:
            warn("could not find the epochfs daemon's pid; peak RSS falls back to status daemon_rss_bytes")

    def _stop(self) -> None:
        if mount_at(self.mountpoint) is None:
            return
        cp = run([self.binary, "umount", self.mountpoint], check=False, timeout=300)
        if cp.returncode != 0:
            warn(f"`epochfs umount` exited {cp.returncode}: {(cp.stderr or cp.stdout).strip()[-500:]}")

    def status(self) -> dict | None:
        try:
            cp = run([self.binary, "status", self.mountpoint, "--json"], check=False, timeout=30)
        except RuntimeError as e:
            warn(str(e))
            return None
        if cp.returncode != 0:
            warn(f"`epochfs status` exited {cp.returncode}: {(cp.stderr or cp.stdout).strip()[-300:]}")
            return None
        try:
            doc = json.loads(cp.stdout)
        except json.JSONDecodeError as e:
            warn(f"`epochfs status --json` printed invalid JSON: {e}")
            return None
        missing = [k for k in EPOCHFS_STATUS_KEYS if k not in doc]
        if missing and not self._missing_keys_warned:
            self._missing_keys_warned = True
            warn(f"`epochfs status --json` lacks keys {missing}")
        return doc

    def peak_rss_bytes(self) -> int | None:
        if self.pid and pid_alive(self.pid):
            return proc_status_kb(self.pid, "VmHWM")
        st = self.status() or {}
        rss = st.get("daemon_rss_bytes")
        return int(rss) if rss is not None else None


def status_delta(before: dict | None, after: dict | None) -> dict | None:
    """Counter differences between two epochfs status snapshots (gauges kept as-is)."""
    if before is None or after is None:
        return None
    out: dict = {}
    for key in EPOCHFS_COUNTER_KEYS:
        if isinstance(after.get(key), (int, float)) and isinstance(before.get(key), (int, float)):
            out[key] = after[key] - before[key]
    if "corrupt_entries" in after:
        out["corrupt_entries_total"] = after["corrupt_entries"]
    for gauge in ("daemon_rss_bytes", "access_paused"):  # as at the epoch's end
        if gauge in after:
            out[gauge] = after[gauge]
    req_a, req_b = after.get("requests"), before.get("requests") or {}
    if isinstance(req_a, dict):
        out["requests"] = {k: v - req_b.get(k, 0) for k, v in req_a.items()
                           if isinstance(v, (int, float)) and isinstance(req_b.get(k, 0), (int, float))}
    return out
