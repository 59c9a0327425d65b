"""System plumbing for the epoch benchmark, with guaranteed cleanup.

The benchmark needs root-only machinery -- loop devices, ext4 images, a tmpfs,
a blkio cgroup that throttles the loop device, FUSE daemons -- and must leave
none of it behind, whether it finishes, fails, is interrupted with Ctrl-C or
killed.  Three layers make that hold:

1. ``Cleanup``: every resource registers its undo action the moment it
   exists; actions run last-in first-out from ``finally``, ``atexit`` and the
   SIGTERM/SIGHUP handlers (SIGINT raises KeyboardInterrupt, which reaches the
   ``finally``).  Each action runs once and a failing one never stops the rest.
2. ``Workspace``: all state lives under one base directory (default
   /var/tmp/epochfs-bench) guarded by an flock, so two runs never collide.
3. ``sweep_leftovers``: a run that was SIGKILLed cannot clean up, so every run
   starts by undoing what an earlier run may have left under the base
   directory: mounts (deepest first), loop devices backed by its images, the
   cgroup and the processes still in it, old run directories.

Everything here is plain subprocess/sysfs work; nothing benchmark-specific.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Callable

BLKIO_ROOT = "/sys/fs/cgroup/blkio"
MEMORY_ROOT = "/sys/fs/cgroup/memory"
CGROUP_NAME = "epochfs-bench"


def log(msg: str) -> None:
    """Timestamped progress line on stdout."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def warn(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] WARNING: {msg}", flush=True)


def run(cmd: list[str], check: bool = True, timeout: float = 120.0,
        **kw) -> subprocess.CompletedProcess:
    """Runs a command, capturing text output; raises with its stderr on failure."""
    try:
        cp = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    except subprocess.TimeoutExpired as e:
        raise RuntimeError(f"{' '.join(cmd)}: timed out after {timeout:.0f} s") from e
    if check and cp.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {cp.returncode}: {(cp.stderr or cp.stdout).strip()}")
    return cp


def write_file(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def read_file(path: str, default: str = "") -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return default


def drop_caches() -> None:
    """Flushes dirty data and drops the page, dentry and inode caches (cold start)."""
    os.sync()
    write_file("/proc/sys/vm/drop_caches", "3\n")


def stat_every_file(paths: list[str], threads: int = 16) -> float:
    """Stats every path once, ``threads`` at a time (in path order, so that neighbours
    share their directory and inode blocks); returns the seconds it took.

    After drop_caches() this is the least a filesystem must read from the source before
    it may serve each file from a cache of its own (its identity: size, mtime, ctime),
    whatever order or parallelism it reads in: the bound of a restart right at mount."""
    from concurrent.futures import ThreadPoolExecutor
    t0 = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        for _ in pool.map(os.stat, sorted(paths), chunksize=64):
            pass
    return time.monotonic() - t0


# --------------------------------------------------------------------------- cleanup

class Cleanup:
    """A LIFO stack of undo actions that runs exactly once, whatever happens."""

    @dataclass
    class Handle:
        """One registered action; ``release()`` runs it now (idempotent)."""
        desc: str
        fn: Callable[[], None]
        owner: "Cleanup"
        done: bool = False

        def release(self) -> None:
            self.owner._run_one(self)

    def __init__(self) -> None:
        self._stack: list[Cleanup.Handle] = []
        self._pid = os.getpid()

    def push(self, desc: str, fn: Callable[[], None]) -> "Cleanup.Handle":
        h = Cleanup.Handle(desc, fn, self)
        self._stack.append(h)
        return h

    def _run_one(self, h: "Cleanup.Handle") -> None:
        if h.done:
            return
        h.done = True
        if h in self._stack:
            self._stack.remove(h)
        try:
            h.fn()
        except Exception as e:  # noqa: BLE001 -- keep undoing the rest
            warn(f"cleanup: {h.desc}: {e}")

    def run_all(self) -> None:
        """Undoes everything, newest first.  Only the process that registered it acts:
        forked reader processes inherit the object and must not tear mounts down."""
        if os.getpid() != self._pid or not self._stack:
            return
        old = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not abort cleanup
        try:
            log(f"cleaning up ({len(self._stack)} resources)")
            while self._stack:
                self._run_one(self._stack[-1])
        finally:
            signal.signal(signal.SIGINT, old)

    def install(self) -> None:
        """Runs the stack at exit and turns SIGTERM/SIGHUP into SystemExit."""
        atexit.register(self.run_all)

        def on_signal(signum, _frame):
            if os.getpid() != self._pid:
                os._exit(128 + signum)
            raise SystemExit(128 + signum)

        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, on_signal)


# --------------------------------------------------------------------------- mounts

@dataclass(frozen=True)
class MountEntry:
    """One line of /proc/self/mountinfo."""
    majmin: str
    mountpoint: str
    fstype: str
    source: str


def _unescape(field: str) -> str:
    """Decodes mountinfo's octal escapes (\\040 for space, ...)."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and i + 3 < len(field) and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> list[MountEntry]:
    entries = []
    for line in text.splitlines():
        left, _, right = line.partition(" - ")
        f, r = left.split(), right.split()
        if len(f) < 5 or len(r) < 2:
            continue
        entries.append(MountEntry(f[2], _unescape(f[4]), r[0], _unescape(r[1])))
    return entries


def mounts() -> list[MountEntry]:
    return parse_mountinfo(read_file("/proc/self/mountinfo"))


def mount_at(path: str) -> MountEntry | None:
    """The (topmost) mount at exactly ``path``, if any."""
    path = os.path.realpath(path)
    found = [m for m in mounts() if m.mountpoint == path]
    return found[-1] if found else None


def mounts_under(prefix: str) -> list[MountEntry]:
    """Mounts at or below ``prefix``, deepest (and newest) first: the unmount order."""
    prefix = os.path.realpath(prefix).rstrip("/")
    found = [m for m in mounts() if m.mountpoint == prefix or m.mountpoint.startswith(prefix + "/")]
    return sorted(found, key=lambda m: m.mountpoint.count("/"), reverse=True)


def _abort_fuse(majmin: str) -> None:
    """Aborts a FUSE connection, which un-hangs every process blocked on it."""
    minor = majmin.split(":")[1]
    path = f"/sys/fs/fuse/connections/{minor}/abort"
    if os.path.exists(path):
        write_file(path, "1")


def unmount(path: str, timeout: float = 60.0) -> None:
    """Unmounts ``path`` however it takes: polite first, then lazy (+ FUSE abort)."""
    m = mount_at(path)
    if m is None:
        return
    attempts = [["umount", path]]
    if m.fstype.startswith("fuse"):
        attempts = [["fusermount3", "-u", path], ["fusermount", "-u", path]] + attempts
    for cmd in attempts:
        if shutil.which(cmd[0]) is None:
            continue
        try:
            if run(cmd, check=False, timeout=timeout).returncode == 0 and mount_at(path) is None:
                return
        except RuntimeError:
            pass
    if m.fstype.startswith("fuse"):
        _abort_fuse(m.majmin)
    run(["umount", "-l", path], check=False, timeout=timeout)
    if mount_at(path) is not None:
        raise RuntimeError(f"{path} is still mounted")


def wait_for_mount(path: str, timeout: float, alive: Callable[[], bool] | None = None,
                   fstype_prefix: str = "fuse") -> MountEntry:
    """Waits until a ``fstype_prefix`` filesystem is mounted at ``path``."""
    deadline = time.monotonic() + timeout
    while True:
        m = mount_at(path)
        if m is not None and m.fstype.startswith(fstype_prefix):
            return m
        if alive is not None and not alive():
            raise RuntimeError(f"daemon for {path} exited before the mount appeared")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{path}: not mounted after {timeout:.0f} s")
        time.sleep(0.05)


def mount_tmpfs(cleanup: Cleanup, path: str, size_bytes: int) -> Cleanup.Handle:
    os.makedirs(path, exist_ok=True)
    run(["mount", "-t", "tmpfs", "-o", f"size={size_bytes},mode=0755", "tmpfs", path])
    return cleanup.push(f"umount tmpfs {path}", lambda: unmount(path))


# --------------------------------------------------------------------------- loop images

class LoopImage:
    """An ext4 image file on a loop device, mounted: the benchmark's "slow disk".

    The loop device is what the blkio throttle targets.  ``--direct-io=on`` makes
    the loop driver read the backing file with O_DIRECT, so the image's bytes are
    cached once (in the ext4-on-loop page cache, which drop_caches empties) and
    never twice through the backing file's own page cache.
    """

    def __init__(self, cleanup: Cleanup, image: str, mountpoint: str) -> None:
        self.cleanup = cleanup
        self.image = image
        self.mountpoint = mountpoint
        self.device = ""
        self.direct_io = False

    def create(self, size_bytes: int, inodes: int) -> None:
        """Makes the image, attaches and mounts it read-write (for generation)."""
        with open(self.image, "wb") as f:
            f.truncate(size_bytes)
        # 4 KiB blocks: for images under 512 MB mke2fs would pick 1 KiB blocks, which
        # splits directories, inode tables and files into several IOs each.
        # No lazy init: no background kernel writes while we measure.
        run(["mkfs.ext4", "-q", "-F", "-b", "4096", "-I", "256", "-m", "0", "-N", str(inodes),
             "-E", "lazy_itable_init=0,lazy_journal_init=0", self.image], timeout=300)
        cp = run(["losetup", "--find", "--show", "--direct-io=on", self.image], check=False)
        if cp.returncode == 0:
            self.direct_io = True
        else:
            warn(f"losetup --direct-io=on failed ({cp.stderr.strip()}); using buffered loop IO")
            cp = run(["losetup", "--find", "--show", self.image])
        self.device = cp.stdout.strip()
        self.cleanup.push(f"detach {self.device}", self._detach)
        if read_file(f"/sys/block/{self.name}/loop/dio").strip() != "1":
            self.direct_io = False
        os.makedirs(self.mountpoint, exist_ok=True)
        run(["mount", "-o", "noatime", self.device, self.mountpoint])
        self.cleanup.push(f"umount {self.mountpoint}", lambda: unmount(self.mountpoint))

    def _detach(self) -> None:
        # The kernel may hold the device for a moment after umount; retry briefly.
        for _ in range(20):
            if run(["losetup", "-d", self.device], check=False).returncode == 0:
                return
            time.sleep(0.25)
        raise RuntimeError(f"could not detach {self.device}")

    def remount_readonly(self) -> None:
        os.sync()
        run(["mount", "-o", "remount,ro", self.mountpoint])

    @property
    def name(self) -> str:
        return os.path.basename(self.device)

    @property
    def majmin(self) -> str:
        return read_file(f"/sys/block/{self.name}/dev").strip()

    def read_ios(self) -> int:
        """Completed read IOs of the loop device: the ground-truth "source IOs"."""
        return int(read_file(f"/sys/block/{self.name}/stat").split()[0])

    def queue_info(self) -> dict:
        q = f"/sys/block/{self.name}/queue"
        return {
            "device": self.device,
            "direct_io": self.direct_io,
            "read_ahead_kb": read_file(f"{q}/read_ahead_kb").strip(),
            "max_sectors_kb": read_file(f"{q}/max_sectors_kb").strip(),
            "scheduler": read_file(f"{q}/scheduler").strip(),
        }


def loop_devices_backed_under(prefix: str) -> list[str]:
    """Loop devices whose backing file lives under ``prefix`` (leftovers of a run)."""
    found = []
    for name in sorted(os.listdir("/sys/block")):
        backing = read_file(f"/sys/block/{name}/loop/backing_file").strip()
        if backing.endswith(" (deleted)"):
            backing = backing[: -len(" (deleted)")]
        if backing and (backing + "/").startswith(prefix.rstrip("/") + "/"):
            found.append(f"/dev/{name}")
    return found


# --------------------------------------------------------------------------- cgroup

def cgroup_of(pid: int, controller: str = "blkio") -> str | None:
    """The cgroup v1 path of ``pid`` for ``controller`` (None if the pid is gone)."""
    for line in read_file(f"/proc/{pid}/cgroup").splitlines():
        _, ctrls, path = line.split(":", 2)
        if controller in ctrls.split(","):
            return path
    return None


class BlkioThrottle:
    """A cgroup v1 blkio group that this process (and all its children) live in.

    Limits are per device ("MAJ:MIN IOPS"), so only the throttled loop device is
    slow; tmpfs, the cache disk and the unthrottled loop device run at full speed.
    Joining at start means every reader and every FUSE daemon we start -- the
    processes that touch the source -- inherit the group.
    """

    def __init__(self, cleanup: Cleanup, name: str = CGROUP_NAME) -> None:
        self.cleanup = cleanup
        self.path = os.path.join(BLKIO_ROOT, name)
        self.rel = "/" + name

    def create_and_join(self) -> None:
        if not os.path.isdir(BLKIO_ROOT):
            raise RuntimeError(f"{BLKIO_ROOT} is not mounted (cgroup v1 blkio needed)")
        os.makedirs(self.path, exist_ok=True)
        self.cleanup.push(f"remove cgroup {self.path}", self.destroy)
        write_file(os.path.join(self.path, "cgroup.procs"), f"{os.getpid()}\n")

    def limit(self, majmin: str, read_iops: int = 0, read_bps: int = 0) -> None:
        if read_iops:
            write_file(os.path.join(self.path, "blkio.throttle.read_iops_device"), f"{majmin} {read_iops}\n")
        if read_bps:
            write_file(os.path.join(self.path, "blkio.throttle.read_bps_device"), f"{majmin} {read_bps}\n")

    def read_bios(self, majmin: str) -> int:
        """Read bios this group issued to a device, as the throttle counts them (before
        the block layer merges them into the requests /sys/block/*/stat counts)."""
        for line in read_file(os.path.join(self.path, "blkio.throttle.io_serviced")).splitlines():
            f = line.split()
            if len(f) == 3 and f[0] == majmin and f[1] == "Read":
                return int(f[2])
        return 0

    def contains(self, pid: int) -> bool:
        return cgroup_of(pid) == self.rel

    def destroy(self) -> None:
        destroy_cgroup(self.path)


def destroy_cgroup(path: str, home: str | None = None) -> None:
    """Moves us out (to ``home``, a cgroup directory of the same hierarchy; default: the
    hierarchy's root), kills the processes still in the group (ours), removes it."""
    if not os.path.isdir(path):
        return
    me = os.getpid()
    procs = os.path.join(path, "cgroup.procs")
    if str(me) in read_file(procs).split():
        write_file(os.path.join(home or os.path.dirname(path), "cgroup.procs"), f"{me}\n")
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = [int(p) for p in read_file(procs).split() if int(p) != me]
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        if pids:
            time.sleep(1.0)
    for _ in range(20):
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.25)
    raise RuntimeError(f"could not remove {path}: {read_file(procs).split()} still in it")


class MemoryCgroup:
    """A cgroup v1 memory group: a machine with less memory than the data set.

    Everything charged while a process sits in the group -- its anonymous memory, the
    page cache of the files it reads or writes, tmpfs/shm pages it creates -- counts
    against ``memory.limit_in_bytes``; past the limit the kernel reclaims page cache
    (the group's own, LRU) and, when nothing is left to reclaim, OOM-kills a member.

    Charges stay with the group that was charged when a process moves
    (``memory.move_charge_at_immigrate`` stays 0).  So a process that joins early
    (``join(pid)`` from the process itself: a reader's ``child_setup``, a shell that
    then execs ``cp``) is charged for nearly everything it does, and the benchmark can
    join only for the moment it spawns a daemon that must be born inside
    (``joined()``) and then go back to its original group (``home``, which is not
    necessarily the root) -- staying outside is what keeps the benchmark itself from
    being the group's OOM victim.
    """

    def __init__(self, cleanup: Cleanup, name: str) -> None:
        self.cleanup = cleanup
        self.path = os.path.join(MEMORY_ROOT, name)
        self.rel = "/" + name
        home = cgroup_of(os.getpid(), "memory") or "/"
        self.home = os.path.join(MEMORY_ROOT, home.lstrip("/")) if home != "/" else MEMORY_ROOT

    def create(self, limit_bytes: int) -> None:
        if not os.path.isdir(MEMORY_ROOT):
            raise RuntimeError(f"{MEMORY_ROOT} is not mounted (cgroup v1 memory controller needed)")
        os.makedirs(self.path, exist_ok=True)
        self.cleanup.push(f"remove memory cgroup {self.path}", self.destroy)
        self.set_limit(limit_bytes)

    def _file(self, name: str) -> str:
        return os.path.join(self.path, name)

    def set_limit(self, limit_bytes: int) -> None:
        """Sets memory.limit_in_bytes.  Lowering it below the usage makes the kernel
        reclaim first; if it cannot (EBUSY), the page cache is dropped and it retries."""
        for attempt in range(3):
            try:
                write_file(self._file("memory.limit_in_bytes"), f"{int(limit_bytes)}\n")
                return
            except OSError as e:
                if attempt == 2:
                    raise RuntimeError(f"cannot set {self.path} to {int(limit_bytes)} bytes: its usage is "
                                       f"{self.usage()} bytes and cannot be reclaimed ({e})") from e
                drop_caches()
                time.sleep(0.5)

    def limit(self) -> int:
        return int(read_file(self._file("memory.limit_in_bytes"), "0").strip() or 0)

    def join(self, pid: int | None = None) -> None:
        write_file(self._file("cgroup.procs"), f"{pid or os.getpid()}\n")

    def leave(self, pid: int | None = None) -> None:
        """Moves ``pid`` (default: us) back to the cgroup we were started in."""
        write_file(os.path.join(self.home, "cgroup.procs"), f"{pid or os.getpid()}\n")

    @contextlib.contextmanager
    def joined(self):
        """``with memcg.joined():`` -- what we fork or spawn in the block lives in the group."""
        self.join()
        try:
            yield self
        finally:
            self.leave()

    def contains(self, pid: int) -> bool:
        return cgroup_of(pid, "memory") == self.rel

    def usage(self) -> int:
        return int(read_file(self._file("memory.usage_in_bytes"), "0").strip() or 0)

    def max_usage(self) -> int:
        return int(read_file(self._file("memory.max_usage_in_bytes"), "0").strip() or 0)

    def reset_max_usage(self) -> None:
        """memory.max_usage_in_bytes restarts from the current usage."""
        write_file(self._file("memory.max_usage_in_bytes"), "0\n")

    def failcnt(self) -> int:
        """How often the usage hit the limit (each time the kernel had to reclaim first)."""
        return int(read_file(self._file("memory.failcnt"), "0").strip() or 0)

    def oom_kills(self) -> int:
        """Processes the OOM killer killed in this group so far."""
        return parse_oom_control(read_file(self._file("memory.oom_control"))).get("oom_kill", 0)

    def stat(self) -> dict[str, int]:
        out = {}
        for line in read_file(self._file("memory.stat")).splitlines():
            k, _, v = line.partition(" ")
            if v.strip().isdigit():
                out[k] = int(v)
        return out

    def destroy(self) -> None:
        destroy_cgroup(self.path, home=self.home)


def parse_oom_control(text: str) -> dict[str, int]:
    """``memory.oom_control`` ("oom_kill_disable 0\\nunder_oom 0\\noom_kill 3") as a dict."""
    out = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) == 2 and f[1].lstrip("-").isdigit():
            out[f[0]] = int(f[1])
    return out


# --------------------------------------------------------------------------- processes

def proc_status_kb(pid: int, key: str) -> int | None:
    """A "kB" field of /proc/PID/status (VmHWM, VmRSS) in bytes, or None."""
    for line in read_file(f"/proc/{pid}/status").splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return None


def proc_cpu_seconds(pid: int) -> float | None:
    """User+system CPU seconds of a process (all its threads)."""
    stat = read_file(f"/proc/{pid}/stat")
    if not stat:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy_s() -> float:
    """CPU seconds the whole machine spent not idle (nor waiting on IO) since boot."""
    ticks = [int(x) for x in read_file("/proc/stat").splitlines()[0].split()[1:]]
    return (sum(ticks[:8]) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")  # less idle, iowait


def named_processes_cpu(names: set[str]) -> dict[int, tuple[str, float]]:
    """Each live process named one of `names`: pid -> (name, user+system CPU seconds)."""
    found: dict[int, tuple[str, float]] = {}
    for entry in os.listdir("/proc"):
        name = read_file(f"/proc/{entry}/comm").strip() if entry.isdigit() else ""
        if name in names:
            found[int(entry)] = (name, proc_cpu_seconds(int(entry)) or 0.0)
    return found


def named_processes_cpu_since(before: dict[int, tuple[str, float]], names: set[str]) -> dict[str, float]:
    """CPU seconds the processes named `names` spent since `before` (named_processes_cpu), by
    name. Per process: one that has exited since (an unmounted client may take a while)
    counts nothing, not minus its whole life."""
    spent = dict.fromkeys(names, 0.0)
    for pid, (name, cpu) in named_processes_cpu(names).items():
        spent[name] += cpu - before.get(pid, (name, 0.0))[1]
    return spent


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = read_file(f"/proc/{pid}/stat")
    return bool(stat) and stat.rsplit(")", 1)[1].split()[0] != "Z"


def find_daemon_pid(mountpoint: str, name_hint: str) -> int | None:
    """The pid of a process whose argv names ``mountpoint`` and whose argv[0] contains
    ``name_hint`` (how we find a daemon that forked itself into the background)."""
    best = None
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        argv = read_file(f"/proc/{entry}/cmdline").split("\0")
        if argv and name_hint in os.path.basename(argv[0]) and mountpoint in argv and "mount" in argv:
            pid = int(entry)
            if pid != os.getpid() and pid_alive(pid):
                best = pid if best is None else max(best, pid)
    return best


def wait_pid_exit(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.05)
    return not pid_alive(pid)


# --------------------------------------------------------------------------- workspace

class Workspace:
    """The base directory of all benchmark state, locked for one run at a time."""

    def __init__(self, base: str, cleanup: Cleanup, cgroups: list[str] | None = None) -> None:
        self.base = os.path.realpath(base)
        self.cleanup = cleanup
        self.cgroups = cgroups  # cgroup dirs an earlier run may have left (None: epoch_bench's)
        self._lock_fd: int | None = None
        self.run_dir = ""

    def open(self) -> None:
        os.makedirs(self.base, exist_ok=True)
        # A POSIX record lock, not flock(): it belongs to this process only, so forked
        # readers that outlive a SIGKILLed run do not keep the next run locked out.
        self._lock_fd = os.open(os.path.join(self.base, ".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.lockf(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            sys.exit(f"another epoch_bench run holds {self.base}/.lock; wait for it to finish")
        sweep_leftovers(self.base, self.cgroups)
        self.run_dir = os.path.join(self.base, f"run-{os.getpid()}")
        os.makedirs(self.run_dir)
        self.cleanup.push(f"remove {self.run_dir}", self._remove_run_dir)

    def _remove_run_dir(self) -> None:
        """Deletes the run's scratch space but keeps the daemons' logs (small, and what
        one needs after a failed mount) in <base>/last-logs, replacing the previous run's."""
        keep = os.path.join(self.base, "last-logs")
        shutil.rmtree(keep, ignore_errors=True)
        os.makedirs(keep)
        for name in os.listdir(self.run_dir):
            if name.endswith(".log"):
                shutil.move(os.path.join(self.run_dir, name), os.path.join(keep, name))
        shutil.rmtree(self.run_dir, ignore_errors=True)

    def path(self, *parts: str) -> str:
        return os.path.join(self.run_dir, *parts)


def sweep_leftovers(base: str, cgroups: list[str] | None = None) -> None:
    """Undoes whatever an interrupted earlier run left under ``base`` and in ``cgroups``
    (cgroup directories; default: epoch_bench's blkio group)."""
    found = mounts_under(base)
    loops = loop_devices_backed_under(base)
    cgs = [os.path.join(BLKIO_ROOT, CGROUP_NAME)] if cgroups is None else list(cgroups)
    present = [cg for cg in cgs if os.path.isdir(cg)]
    runs = [d for d in os.listdir(base) if d.startswith("run-")]
    if not (found or loops or present or runs):
        return
    log(f"sweeping leftovers of an earlier run: {len(found)} mounts, {len(loops)} loop devices, "
        f"cgroups {' '.join(present) or 'absent'}, {len(runs)} run dirs")
    for m in found:
        try:
            unmount(m.mountpoint)
        except RuntimeError as e:
            warn(str(e))
    # The old run's daemons and readers are the only members of its cgroups.
    for cg in present:
        try:
            destroy_cgroup(cg)
        except RuntimeError as e:
            warn(str(e))
    for dev in loops:
        run(["losetup", "-d", dev], check=False)
    for d in runs:
        shutil.rmtree(os.path.join(base, d), ignore_errors=True)
