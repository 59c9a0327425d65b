#include "cli/mount_command.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <thread>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"
#include "cli/exit.h"
#include "cli/status.h"
#include "daemon/journal_log.h"
#include "daemon/metrics_server.h"
#include "daemon/mount.h"
#include "daemon/mount_table.h"
#include "daemon/stats_socket.h"
#include "fmt/format.h"
#include "spdlog/sinks/basic_file_sink.h"
#include "spdlog/spdlog.h"

namespace epochfs::cli {
namespace {

namespace fsys = std::filesystem;

void SetUpLogging(const daemon::MountOptions& options, bool to_file) {
  if (to_file) {
    const fsys::path path =
        options.log_file.empty() ? options.cache_dir / "epochfs.log" : options.log_file;
    try {
      auto logger = spdlog::basic_logger_mt("epochfs", path.string());
      spdlog::set_default_logger(logger);
    } catch (const spdlog::spdlog_ex&) {
      // Keep the default (stderr, which is /dev/null for a daemon): a log file is not a
      // reason to refuse a mount.
    }
  }
  // ---- systemd: stderr is the journal; give each line its priority (daemon/journal_log.h).
  if (!to_file && daemon::StderrIsJournal()) spdlog::set_formatter(daemon::JournalFormatter());
  spdlog::set_level(spdlog::level::from_str(options.log_level));
  spdlog::flush_on(spdlog::level::warn);
  spdlog::flush_every(std::chrono::seconds(2));
}

// Runs the mount in a child process and returns once it is live (0) or has failed.
int Daemonize(const daemon::MountOptions& options, bool created_cache_dir) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) < 0) return Refuse("pipe: " + std::string(strerror(errno)));
  std::cout.flush();
  std::cerr.flush();
  const pid_t pid = ::fork();
  if (pid < 0) return Refuse("fork: " + std::string(strerror(errno)));
  if (pid == 0) {
    ::close(pipe_fds[0]);
    ::setsid();
    if (::chdir("/") != 0) _exit(1);
    int null_fd = ::open("/dev/null", O_RDWR);
    if (null_fd >= 0) {
      ::dup2(null_fd, 0);
      ::dup2(null_fd, 1);
      ::dup2(null_fd, 2);
      if (null_fd > 2) ::close(null_fd);
    }
    SetUpLogging(options, /*to_file=*/true);
    const int rc = daemon::RunMount(options, [&](const Status& st) {
      const std::string msg = st.ok() ? std::string("OK") : st.message();
      ssize_t ignored = ::write(pipe_fds[1], msg.data(), msg.size());
      (void)ignored;  // the parent sees EOF and reports a failure either way
      ::close(pipe_fds[1]);
    });
    spdlog::shutdown();
    _exit(rc);
  }
  ::close(pipe_fds[1]);
  std::string reply;
  char buf[512];
  ssize_t n;
  while ((n = ::read(pipe_fds[0], buf, sizeof(buf))) != 0) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    reply.append(buf, static_cast<size_t>(n));
  }
  ::close(pipe_fds[0]);
  if (reply == "OK") return 0;
  ::waitpid(pid, nullptr, 0);
  std::error_code ec;
  if (created_cache_dir) fsys::remove_all(options.cache_dir, ec);
  if (reply.empty()) {
    return Refuse(fmt::format("the daemon exited before the mount was ready (see {})",
                              (options.cache_dir / "epochfs.log").string()));
  }
  return Refuse(reply);
}

bool ProcessGone(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string line;
  if (!std::getline(in, line)) return true;
  // A daemon whose parent is gone and is not reaped (no init) lingers as a zombie.
  auto close_paren = line.rfind(')');
  return close_paren == std::string::npos || close_paren + 2 >= line.size() ||
         line[close_paren + 2] == 'Z' || line[close_paren + 2] == 'X';
}

// The daemon behind a mount, found without reading through it where possible.
struct DaemonOfMount {
  pid_t pid = 0;      // 0: not known
  bool live = false;  // it answered
  fsys::path cache_dir;
};

DaemonOfMount FromStats(pid_t pid, const std::string& json) {
  DaemonOfMount d{pid, true, {}};
  try {
    const auto stats = nlohmann::json::parse(json);
    if (d.pid == 0) d.pid = stats.value("pid", 0);
    d.cache_dir = stats.value("cache_dir", "");
  } catch (const nlohmann::json::exception&) {
  }
  return d;
}

// Whether the daemon that held `cache_dir` went down cleanly: it clears its pid from the
// lock file as its very last step (daemon/daemon.h), so a pid still there means it was
// killed on the way.
bool EndedCleanly(const fsys::path& cache_dir, pid_t pid) {
  std::ifstream lock(cache_dir / "lock");
  std::string text;
  std::getline(lock, text);
  return text != std::to_string(pid);
}

DaemonOfMount FindDaemon(const fsys::path& mountpoint, const daemon::MountEntry& mount,
                         bool may_read_the_mount) {
  auto reply = daemon::QueryStatsSocket(daemon::StatsSocketPath(mount.device),
                                        mount.owner_uid.value_or(0), 2.0);
  if (reply.ok()) return FromStats(reply->pid, reply->text);
  if (reply.status().code() == Code::kPermission) {
    // Another user's socket: no word of it is believed; the mount itself is asked.
    std::cerr << "epochfs: " << reply.status().message() << "\n";
  } else if (reply.status().code() != Code::kNotFound) {
    return {0, true, {}};  // there, but wedged
  }
  if (!may_read_the_mount) return {};
  // No socket: the stats file. A dead daemon's mount answers ENOTCONN at once.
  auto stats = ReadStats(mountpoint);
  if (!stats.ok()) return {};
  return FromStats(0, stats->dump());
}

// `ask(last)`, and again every 20 ms for a second while `busy(answer)`; the last answer.
template <typename Ask, typename Busy>
auto AskForASecond(const Ask& ask, const Busy& busy) {
  constexpr int kRetries = 50;
  auto answer = ask(false);
  for (int retry = 1; retry <= kRetries && busy(answer); ++retry) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    answer = ask(retry == kRetries);
  }
  return answer;
}

// Runs `args` (searched on PATH, no shell: a mountpoint may hold any character); whether
// it exited with 0. An error if it could not be run at all.
Result<bool> RunCommand(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  pid_t child = 0;
  if (const int err = ::posix_spawnp(&child, argv[0], nullptr, nullptr, argv.data(), environ)) {
    return Status::FromErrno(err, fmt::format("cannot run {}", args[0]));
  }
  int status = 0;
  while (::waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) return Status::FromErrno(errno, fmt::format("waitpid {}", args[0]));
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// Aborts the FUSE connection of `mount` through the kernel's fusectl filesystem (its
// folder is named by the minor number of the mount's device), mounting fusectl first
// where it is not. Writes nothing through the mount: it may not answer.
Status AbortConnection(const daemon::MountEntry& mount) {
  const auto colon = mount.device.find(':');
  if (colon == std::string::npos) {
    return Status::InvalidArgument(
        fmt::format("no device number in the mount table: '{}'", mount.device));
  }
  const fsys::path connections = "/sys/fs/fuse/connections";
  const fsys::path abort = connections / mount.device.substr(colon + 1) / "abort";
  std::error_code ec;
  if (!fsys::exists(abort, ec) && fsys::is_empty(connections, ec) &&
      ::mount("fusectl", connections.c_str(), "fusectl", 0, nullptr) != 0 && errno != EBUSY) {
    return Status::FromErrno(errno, fmt::format("mount fusectl on {} (mount -t fusectl none {})",
                                                connections.string(), connections.string()));
  }
  const UniqueFd fd(::open(abort.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return Status::FromErrno(errno, fmt::format("open {}", abort.string()));
  if (::write(fd.get(), "1", 1) != 1) {
    return Status::FromErrno(errno, fmt::format("write {}", abort.string()));
  }
  return Status::Ok();
}

}  // namespace

int RunUmountCommand(const std::string& mountpoint_arg, const UmountOptions& options) {
  const bool lazy = options.lazy;
  const bool dead_only = options.dead_only;
  const fsys::path mountpoint = fsys::absolute(mountpoint_arg).lexically_normal();
  const auto mount = daemon::VisibleMount(mountpoint);
  if (!mount || mount->fstype != daemon::kFsType) {
    return Refuse(fmt::format("{} is not an epochfs mount", mountpoint.string()));
  }
  // A lazy unmount reads nothing through the mount: it is what one runs when the mount
  // or its source hangs, and a read would hang with them (in D state, unkillable).
  // Nor does one that aborts: the mount is not answering.
  const DaemonOfMount daemon =
      FindDaemon(mountpoint, *mount, (!lazy || dead_only) && !options.abort);
  const pid_t pid = daemon.pid;
  // --dead-only (the unit's ExecStopPost): clear a dead daemon's mount, never a live one
  // that another instance or a person made.
  if (dead_only && daemon.live) {
    return Refuse(fmt::format("{} is served by a live daemon{}; not unmounting it",
                              mountpoint.string(), pid > 0 ? fmt::format(" (pid {})", pid) : ""));
  }
  if (options.abort) {
    if (Status aborted = AbortConnection(*mount); !aborted.ok()) {
      return Refuse(fmt::format("cannot abort the connection of {}: {}", mountpoint.string(),
                                aborted.message()));
    }
    fmt::print(stderr, "epochfs: aborted the connection of {}: requests in flight failed\n",
               mountpoint.string());
  }
  // EBUSY for a moment can be the daemon's own: a file it holds open while it pushes pages
  // (fs/write_fence.h), or, in a daemon that is not root, a folder it lists
  // (kernel_cache/mount_view.h). Asked again for a second before calling the mount busy.
  const int err = AskForASecond(
      [&](bool) { return ::umount2(mountpoint.c_str(), lazy ? MNT_DETACH : 0) < 0 ? errno : 0; },
      [](int e) { return e == EBUSY; });
  if (err != 0) {
    if (err == EBUSY) {
      return Refuse(fmt::format("{} is busy (files are open on it); close them, or use --lazy",
                                mountpoint.string()));
    }
    if (err != EPERM) return Refuse(fmt::format("umount {}: {}", mountpoint.string(), strerror(err)));
    // Not root: the setuid helper unmounts what this user mounted, asked again for a
    // second as above (quietly, but for the last time).
    const auto fusermount = [&](bool last) {
      std::vector<std::string> args = {"fusermount3", "-u"};
      if (lazy) args.push_back("-z");
      if (!last) args.push_back("-q");
      args.push_back(mountpoint.string());
      return RunCommand(args);
    };
    Result<bool> done = AskForASecond(fusermount, [](Result<bool>& r) { return r.ok() && !*r; });
    if (!done.ok()) return Refuse(done.status().message());
    if (!*done) return Refuse("fusermount3 -u failed");
  }
  // The daemon flushes its cache after the unmount; wait so that a following mount of
  // the same cache dir finds it complete. A lazy unmount waits a moment only: the daemon
  // goes on until nothing uses the mount (open files, requests stuck in the source).
  const auto start = std::chrono::steady_clock::now();
  const auto patience = lazy ? std::chrono::seconds(1) : std::chrono::seconds(300);
  auto last_note = start;
  while (pid > 0 && !ProcessGone(pid)) {
    const auto now = std::chrono::steady_clock::now();
    if (lazy && now - start > patience) {
      fmt::print(stderr,
                 "epochfs: {} is detached; daemon pid {} finishes (and flushes its cache) once "
                 "nothing uses the mount any more\n",
                 mountpoint.string(), pid);
      return 0;
    }
    if (now - start > patience) {
      return Refuse(fmt::format("daemon pid {} still running after 5 minutes", pid));
    }
    if (now - last_note > std::chrono::seconds(5)) {
      fmt::print(stderr, "epochfs: waiting for daemon pid {} to flush its cache...\n", pid);
      last_note = now;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (pid > 0 && !daemon.cache_dir.empty() && !EndedCleanly(daemon.cache_dir, pid)) {
    return Fail(fmt::format(
        "daemon pid {} of {} was killed before it finished going down (the OOM killer? see "
        "dmesg and {}): the cache stays consistent, but chunks still queued for its SSD tier "
        "were lost and will be read from the source again",
        pid, mountpoint.string(), (daemon.cache_dir / "epochfs.log").string()));
  }
  return 0;
}

int RunMountCommand(daemon::MountOptions options) {
  if (!options.metrics_listen.empty()) {
    auto addr = daemon::ParseListenAddress(options.metrics_listen, options.metrics_allow_remote);
    if (!addr.ok()) return Refuse(addr.status().message());
  }

  Status valid = daemon::ResolveAndValidate(options);
  if (!valid.ok()) return Refuse(valid.message());
  bool created = false;
  Status prepared = daemon::PrepareCacheDir(options.cache_dir, &created);
  if (!prepared.ok()) return Refuse(prepared.message());

  if (!options.foreground) return Daemonize(options, created);
  SetUpLogging(options, /*to_file=*/!options.log_file.empty());
  const int rc = daemon::RunMount(options, [&](const Status& st) {
    if (!st.ok()) {
      std::error_code ec;
      if (created) fsys::remove_all(options.cache_dir, ec);
      std::cerr << "epochfs: error: " << st.message() << "\n";
    }
  });
  spdlog::shutdown();
  return rc;
}

// ---- Configuration file (cli/config.h): the file first, then the flags given. ----

// The options of `epochfs mount`: the defaults, then the config file (skipped when it
// may be missing and is), then the flags given on the command line.
}  // namespace epochfs::cli
