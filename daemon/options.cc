#include "daemon/options.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>
#include <xxhash.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>

#include "fmt/format.h"
#include "spdlog/spdlog.h"
#include "base/owned_dirs.h"
#include "base/unique_fd.h"
#include "daemon/memory_limit.h"
#include "daemon/mount_table.h"
#include "daemon/stats_socket.h"

namespace epochfs::daemon {
namespace fsys = std::filesystem;

const char* ConsistencyName(Consistency c) {
  switch (c) {
    case Consistency::kAuto: return "auto";
    case Consistency::kOpen: return "open";
    case Consistency::kNotify: return "notify";
  }
  return "?";
}

Consistency ResolveConsistency(Consistency requested, const fsys::path& source, std::string* why) {
  if (requested != Consistency::kAuto) {
    *why = "asked for";
    return requested;
  }
  struct ::statfs sfs {};
  if (::statfs(source.c_str(), &sfs) < 0) {
    *why = "source filesystem unknown";
    return Consistency::kOpen;
  }
  // Filesystems whose files other machines can change: inotify never hears of that.
  struct Remote {
    unsigned long magic;
    const char* name;
  };
  static constexpr Remote kRemote[] = {
      {NFS_SUPER_MAGIC, "nfs"},       {SMB_SUPER_MAGIC, "smb"},      {0xFF534D42, "cifs"},
      {0xFE534D42, "smb2"},           {0x00C36400, "ceph"},          {0x0BD00BD0, "lustre"},
      {V9FS_MAGIC, "9p"},             {0x65735546, "fuse"},          {0x47504653, "gpfs"},
      {0x19830326, "beegfs"},         {0x013111A8, "ibrix"},         {0x6B414653, "afs"},
      {CODA_SUPER_MAGIC, "coda"},     {0x73757245, "coda"},          {0x517B, "smbfs"},
  };
  for (const Remote& r : kRemote) {
    if (static_cast<unsigned long>(sfs.f_type) == r.magic) {
      *why = fmt::format("source is on {}", r.name);
      return Consistency::kOpen;
    }
  }
  *why = "source is on a local filesystem";
  return Consistency::kNotify;
}

Result<uint64_t> ParseSize(const std::string& text) {
  auto bad = [&] {
    return Status::InvalidArgument(fmt::format(
        "invalid size '{}': expected a number with an optional K, M, G or T suffix", text));
  };
  if (text.empty()) return bad();
  size_t digits_end = 0;
  while (digits_end < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[digits_end])) || text[digits_end] == '.')) {
    digits_end++;
  }
  if (digits_end == 0) return bad();
  char* end = nullptr;
  const std::string number = text.substr(0, digits_end);
  const double value = std::strtod(number.c_str(), &end);
  if (end != number.c_str() + number.size() || !std::isfinite(value) || value < 0) return bad();
  std::string suffix = text.substr(digits_end);
  if (suffix.size() == 2 && (suffix[1] == 'B' || suffix[1] == 'b')) suffix.pop_back();
  if (suffix == "iB") return bad();
  double multiplier = 1;
  if (suffix.empty() || suffix == "B" || suffix == "b") {
    multiplier = 1;
  } else if (suffix.size() == 1) {
    switch (std::toupper(static_cast<unsigned char>(suffix[0]))) {
      case 'K': multiplier = 1024.0; break;
      case 'M': multiplier = 1024.0 * 1024; break;
      case 'G': multiplier = 1024.0 * 1024 * 1024; break;
      case 'T': multiplier = 1024.0 * 1024 * 1024 * 1024; break;
      default: return bad();
    }
  } else {
    return bad();
  }
  const double bytes = value * multiplier;
  if (bytes > 9.0e18) return bad();
  if (bytes != std::floor(bytes)) {
    // "0.5" is half a byte, not a budget: say so rather than round it to nothing.
    return Status::InvalidArgument(fmt::format(
        "invalid size '{}': not a whole number of bytes (a unit is K, M, G or T)", text));
  }
  return static_cast<uint64_t>(bytes);
}

fsys::path DefaultCacheDir(const fsys::path& source) {
  const std::string path = source.string();
  std::string readable;
  for (char c : path) {
    if (c == '/') {
      if (!readable.empty() && readable.back() != '-') readable.push_back('-');
    } else if (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_') {
      readable.push_back(c);
    } else {
      readable.push_back('_');
    }
  }
  while (!readable.empty() && readable.back() == '-') readable.pop_back();
  if (readable.size() > 80) readable = readable.substr(readable.size() - 80);
  if (readable.empty()) readable = "root";
  const uint32_t hash = static_cast<uint32_t>(XXH3_64bits(path.data(), path.size()));
  return fsys::path("/var/cache/epochfs") / fmt::format("{}-{:08x}", readable, hash);
}

namespace {

// What to do about a mountpoint or source that answers "Transport endpoint is not
// connected": a FUSE daemon died and left its mount behind.
std::string DeadMountHint(int err, const fsys::path& path) {
  if (err != ENOTCONN) return "";
  return fmt::format(" (a mount whose daemon is gone: clear it with `epochfs umount --lazy {}`)",
                     path.string());
}

// Whether the epochfs mount `mount` at `mountpoint` has lost its daemon. Asks the
// daemon's socket first (a hung mount must not hang this check).
bool DaemonIsGone(const fsys::path& mountpoint, const MountEntry& mount) {
  auto reply = QueryStatsSocket(StatsSocketPath(mount.device), mount.owner_uid.value_or(0), 2.0);
  // A socket another user bound there is no daemon's.
  if (reply.ok() || (reply.status().code() != Code::kNotFound &&
                     reply.status().code() != Code::kPermission)) {
    return false;
  }
  struct ::stat st {};
  return ::stat((mountpoint / ".epochfs").c_str(), &st) < 0 && errno == ENOTCONN;
}

bool IsInside(const fsys::path& inner, const fsys::path& outer) {
  auto i = inner.begin();
  for (auto o = outer.begin(); o != outer.end(); ++o, ++i) {
    if (i == inner.end() || *i != *o) return false;
  }
  return true;
}

}  // namespace

Status ResolveAndValidate(MountOptions& options) {
  std::error_code ec;
  if (options.source.empty()) return Status::InvalidArgument("no SOURCE given");
  struct ::stat st {};
  if (::stat(options.source.c_str(), &st) < 0) {
    return Status::FromErrno(errno, fmt::format("source {}{}", options.source.string(),
                                                DeadMountHint(errno, options.source)));
  }
  if (!S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument(
        fmt::format("source {} is not a directory", options.source.string()));
  }
  options.source = fsys::canonical(options.source, ec);
  if (ec) return Status::IoError(fmt::format("source: {}", ec.message()));

  if (options.mountpoint.empty()) options.mountpoint = options.source;
  if (::stat(options.mountpoint.c_str(), &st) < 0) {
    return Status::FromErrno(errno, fmt::format("mountpoint {}{}", options.mountpoint.string(),
                                                DeadMountHint(errno, options.mountpoint)));
  }
  if (!S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument(
        fmt::format("mountpoint {} is not a directory", options.mountpoint.string()));
  }
  options.mountpoint = fsys::canonical(options.mountpoint, ec);
  if (ec) return Status::IoError(fmt::format("mountpoint: {}", ec.message()));
  if (const auto mounted = VisibleMount(options.mountpoint); mounted && mounted->fstype == kFsType) {
    return Status::InvalidArgument(fmt::format(
        "{} is already an epochfs mount{}", options.mountpoint.string(),
        DaemonIsGone(options.mountpoint, *mounted) ? DeadMountHint(ENOTCONN, options.mountpoint)
                                                   : ""));
  }
  // The kernel would look names up in the mount while serving it: every unmount of
  // the inner mount is busy, and a lazy one leaves the daemon waiting forever.
  if (options.mountpoint != options.source && IsInside(options.mountpoint, options.source)) {
    return Status::InvalidArgument(fmt::format(
        "mountpoint {} lies inside the source {}: mount over the source itself, or outside it",
        options.mountpoint.string(), options.source.string()));
  }
  if (IsEpochfsMount(options.source)) {
    return Status::InvalidArgument(fmt::format(
        "source {} is itself an epochfs mount: unmount it first, or mount its source",
        options.source.string()));
  }

  if (options.cache_dir.empty()) options.cache_dir = DefaultCacheDir(options.source);
  options.cache_dir = fsys::absolute(options.cache_dir).lexically_normal();
  if (IsInside(options.cache_dir, options.source) ||
      IsInside(options.cache_dir, options.mountpoint)) {
    return Status::InvalidArgument(fmt::format(
        "cache dir {} lies inside the source or mountpoint", options.cache_dir.string()));
  }
  if (options.chunk_size < 4096 || options.chunk_size > (64u << 20)) {
    return Status::InvalidArgument("chunk size must be between 4K and 64M");
  }
  if (options.ram_budget < kMinRamBudget) {
    return Status::InvalidArgument(fmt::format(
        "--ram {} is below the least the daemon works with (4M)", options.ram_budget));
  }
  // Checked here, where the daemon will run (it stays in this process's cgroup), and
  // not left to the OOM killer, which would leave a dead mount behind.
  if (auto limit = MemoryLimitOfThisProcess();
      limit && options.ram_budget + kDaemonOverheadBytes > limit->bytes) {
    return Status::InvalidArgument(fmt::format(
        "--ram {} MiB and the daemon's own ~{} MiB exceed the memory limit of {} MiB of the "
        "cgroup it would run in ({}): the kernel would OOM-kill it; lower --ram (the "
        "training job shares that limit too)",
        options.ram_budget >> 20, kDaemonOverheadBytes >> 20, limit->bytes >> 20,
        limit->cgroup));
  }
  if (options.max_threads < 1) return Status::InvalidArgument("--threads must be at least 1");
  // NaN passes every range check ("nan < 0" and "nan > 86400" are both false).
  for (const auto& [flag, seconds] : {std::pair{"--attr-timeout", options.timeouts.attr_s},
                                      std::pair{"--entry-timeout", options.timeouts.entry_s}}) {
    if (!std::isfinite(seconds) || seconds < 0 || seconds > 86400) {
      return Status::InvalidArgument(
          fmt::format("{} must be a number of seconds from 0 to 86400, not {}", flag, seconds));
    }
  }
  if (!options.log_file.empty()) {
    // The daemon's only voice once it is in the background: refuse a log that cannot be
    // written instead of logging nowhere.
    options.log_file = fsys::absolute(options.log_file).lexically_normal();
    UniqueFd log(::open(options.log_file.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!log) {
      return Status::FromErrno(errno,
                               fmt::format("cannot write log file {}", options.log_file.string()));
    }
  }
  return Status::Ok();
}

Status PrepareCacheDir(const fsys::path& dir, bool* created) {
  std::error_code ec;
  *created = false;
  if (fsys::exists(dir, ec) && !fsys::is_directory(dir, ec)) {
    return Status::InvalidArgument(fmt::format("cache dir {} is not a directory", dir.string()));
  }
  // The cache holds the bytes and names of every file read through the mount, whatever
  // the source let other users see: the daemon's user alone may enter it. A cache dir an
  // older version made open to everyone is closed, and so is everything in it.
  struct ::stat before {};
  const bool was_open = ::stat(dir.c_str(), &before) == 0 && (before.st_mode & 077) != 0;
  Status made = MakeOwnedDir(dir, 0700, created);
  if (!made.ok()) {
    return Status::FromErrno(made.err() != 0 ? made.err() : EACCES,
                             fmt::format("cache dir {}: {}", dir.string(), made.message()));
  }
  if (was_open) {
    if (auto narrowed = MakeTreePrivate(dir); narrowed.ok() && *narrowed > 0) {
      spdlog::info("cache dir {}: {} files and folders made private (an older version left "
                   "them readable by other users)",
                   dir.string(), *narrowed);
    }
  }
  // access() is not enough: a read-only filesystem or a full disk only shows on a write.
  const fsys::path probe = dir / fmt::format(".write-probe-{}", ::getpid());
  {
    std::ofstream out(probe);
    out << "probe";
    out.flush();
    if (!out) {
      const int err = errno != 0 ? errno : EACCES;
      if (*created) fsys::remove_all(dir, ec);
      return Status::FromErrno(err, fmt::format("cache dir {} is not writable", dir.string()));
    }
  }
  fsys::remove(probe, ec);
  return Status::Ok();
}

}  // namespace epochfs::daemon
