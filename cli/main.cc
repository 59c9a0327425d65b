// The epochfs command line: mount, umount, status.
//
// Exit codes: 0 success; 2 bad input or a refused mount (a one-line message says why,
// nothing is left mounted or created); 1 a failure while running.
#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <thread>

#include "CLI/CLI.hpp"
#include "fmt/format.h"
#include "cli/config.h"
#include "cli/mount_flags.h"
#include "daemon/journal_log.h"
#include "daemon/metrics_server.h"
#include "daemon/mount.h"
#include "daemon/mount_table.h"
#include "daemon/options.h"
#include "cli/top.h"
#include "cli/warm.h"
#include "nlohmann/json.hpp"
#include "spdlog/sinks/basic_file_sink.h"
#include "spdlog/spdlog.h"

#ifndef EPOCHFS_VERSION
#define EPOCHFS_VERSION "dev"
#endif

namespace {

using epochfs::Result;
using epochfs::Status;
namespace cli = epochfs::cli;
namespace daemon = epochfs::daemon;
namespace fsys = std::filesystem;

constexpr int kExitBadInput = 2;

int Refuse(const std::string& message) {
  std::cerr << "epochfs: error: " << message << "\n";
  return kExitBadInput;
}

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

Result<nlohmann::json> ReadStats(const fsys::path& mountpoint) {
  if (!daemon::IsEpochfsMount(mountpoint)) {
    return Status::InvalidArgument(fmt::format("{} is not an epochfs mount", mountpoint.string()));
  }
  std::ifstream in(mountpoint / ".epochfs" / "stats");
  if (!in) {
    return Status::IoError(fmt::format("cannot read {}/.epochfs/stats: {}", mountpoint.string(),
                                       strerror(errno)));
  }
  std::stringstream text;
  text << in.rdbuf();
  try {
    return nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    return Status::Corruption(fmt::format("bad stats from {}: {}", mountpoint.string(), e.what()));
  }
}

std::string Bytes(uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    u++;
  }
  return u == 0 ? fmt::format("{} B", n) : fmt::format("{:.1f} {}", v, units[u]);
}

std::string Ratio(uint64_t part, uint64_t whole) {
  return whole == 0 ? "-" : fmt::format("{:.1f}%", 100.0 * part / whole);
}

void PrintStatusTable(const nlohmann::json& s) {
  auto u = [&](const char* key) { return s.value(key, uint64_t{0}); };
  const uint64_t reads = u("ram_hits") + u("ssd_hits") + u("misses");
  fmt::print("epochfs {} on {}\n", s.value("source", ""), s.value("mountpoint", ""));
  fmt::print("  {:<16}{} (pid {}, up {:.0f} s, {})\n", "daemon", s.value("version", ""),
             u("pid"), s.value("uptime_s", 0.0), s.value("read_only", false) ? "read-only" : "read-write");
  fmt::print("  {:<16}{}\n", "cache dir", s.value("cache_dir", ""));
  std::string requests;
  for (const auto& [kind, count] : s["requests"].items()) {
    if (count.get<uint64_t>() > 0) requests += fmt::format("{} {}  ", kind, count.get<uint64_t>());
  }
  fmt::print("  {:<16}{}(errors {})\n", "requests", requests, u("request_errors"));
  fmt::print("  {:<16}{:>12} {:>12} {:>10}\n", "chunk reads", "count", "bytes", "share");
  fmt::print("  {:<16}{:>12} {:>12} {:>10}\n", "  RAM hits", u("ram_hits"),
             Bytes(u("ram_hit_bytes")), Ratio(u("ram_hits"), reads));
  fmt::print("  {:<16}{:>12} {:>12} {:>10}\n", "  SSD hits", u("ssd_hits"),
             Bytes(u("ssd_hit_bytes")), Ratio(u("ssd_hits"), reads));
  fmt::print("  {:<16}{:>12} {:>12} {:>10}\n", "  misses", u("misses"), Bytes(u("miss_bytes")),
             Ratio(u("misses"), reads));
  fmt::print("  {:<16}{:>12} {:>12}\n", "source reads", u("source_reads"),
             Bytes(u("source_bytes")));
  fmt::print("  {:<16}{} of {} in {} entries, {} evicted\n", "RAM tier", Bytes(u("ram_bytes")),
             Bytes(u("ram_budget_bytes")), u("ram_entries"), u("ram_evictions"));
  fmt::print("  {:<16}{} of {} in {} entries, {} packs, {} evicted{}\n", "SSD tier",
             Bytes(u("ssd_bytes")), Bytes(u("ssd_budget_bytes")), u("ssd_entries"), u("packs"),
             u("ssd_evictions"),
             s.value("ssd_degraded", false)
                 ? fmt::format(" (DEGRADED: {})", s.value("ssd_degraded_reason", ""))
                 : "");
  fmt::print("  {:<16}corrupt {}, stale {}, not admitted {}, writes dropped {}\n", "entries",
             u("corrupt_entries"), u("stale_entries"), u("not_admitted"),
             u("ssd_writes_dropped"));
  fmt::print("  {:<16}{} (peak {}), {} inodes, io_uring {}\n", "daemon RSS",
             Bytes(u("daemon_rss_bytes")), Bytes(u("daemon_peak_rss_bytes")), u("inodes"),
             s.value("io_uring", false) ? "on" : "off (pread)");
}

int CmdStatus(const std::string& mountpoint, bool json) {
  std::vector<fsys::path> targets;
  if (!mountpoint.empty()) {
    targets.push_back(fsys::absolute(mountpoint).lexically_normal());
  } else {
    for (const auto& m : daemon::EpochfsMounts()) targets.push_back(m.mountpoint);
    if (targets.empty() && !json) {
      fmt::print("no epochfs mounts\n");
      return 0;
    }
  }
  nlohmann::json all = nlohmann::json::array();
  for (const auto& target : targets) {
    auto stats = ReadStats(target);
    // ---- all mounts: one dead daemon must not hide the others. It is reported (an
    // "error" key in JSON) but is no failure of this command, which did its job.
    if (!stats.ok() && mountpoint.empty()) {
      if (json) {
        all.push_back({{"mountpoint", target.string()}, {"error", stats.status().message()}});
      } else {
        fmt::print("epochfs on {}: NOT RESPONDING ({})\n  the daemon is gone; clear it with "
                   "`epochfs umount --lazy {}` and mount again\n",
                   target.string(), stats.status().message(), target.string());
      }
      continue;
    }
    if (!stats.ok()) return Refuse(stats.status().message());
    if (json) {
      all.push_back(*stats);
    } else {
      PrintStatusTable(*stats);
    }
  }
  if (json) {
    // One mount asked for: its object; all of them: an array.
    std::cout << (mountpoint.empty() ? all : all[0]).dump(2, ' ', false,
                                                         nlohmann::json::error_handler_t::replace) << "\n";
  }
  return 0;
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

int CmdUmount(const std::string& mountpoint_arg, bool lazy, bool dead_only) {
  const fsys::path mountpoint = fsys::absolute(mountpoint_arg).lexically_normal();
  auto stats = ReadStats(mountpoint);
  // A mount whose daemon died has no stats ("Transport endpoint is not connected") but
  // must still be unmountable; there is then no daemon to wait for.
  if (!stats.ok() && !daemon::IsEpochfsMount(mountpoint)) return Refuse(stats.status().message());
  const pid_t pid = stats.ok() ? stats->value("pid", 0) : 0;
  // --dead-only (the unit's ExecStopPost): clear a dead daemon's mount, never a live one
  // that another instance or a person made.
  if (dead_only && stats.ok()) {
    return Refuse(fmt::format("{} is served by a live daemon (pid {}); not unmounting it",
                              mountpoint.string(), pid));
  }
  if (::umount2(mountpoint.c_str(), lazy ? MNT_DETACH : 0) < 0) {
    if (errno == EBUSY) {
      return Refuse(fmt::format("{} is busy (files are open on it); close them, or use --lazy",
                                mountpoint.string()));
    }
    if (errno != EPERM) return Refuse(fmt::format("umount {}: {}", mountpoint.string(), strerror(errno)));
    // Not root: the setuid helper unmounts what this user mounted.
    const std::string cmd =
        fmt::format("fusermount3 -u {} '{}'", lazy ? "-z" : "", mountpoint.string());
    if (std::system(cmd.c_str()) != 0) return Refuse("fusermount3 -u failed");
  }
  // The daemon flushes its cache after the unmount; wait so that a following mount of
  // the same cache dir finds it complete.
  const auto start = std::chrono::steady_clock::now();
  auto last_note = start;
  while (pid > 0 && !ProcessGone(pid)) {
    const auto now = std::chrono::steady_clock::now();
    if (now - start > std::chrono::minutes(5)) {
      return Refuse(fmt::format("daemon pid {} still running after 5 minutes", pid));
    }
    if (now - last_note > std::chrono::seconds(5)) {
      fmt::print(stderr, "epochfs: waiting for daemon pid {} to flush its cache...\n", pid);
      last_note = now;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return 0;
}

int CmdMount(daemon::MountOptions options) {
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
int MountOptionsFromFileAndFlags(const cli::MountFlags& flags, daemon::MountOptions& options) {
  options = daemon::MountOptions();
  const std::string path = flags.ConfigPath();
  std::error_code ec;
  if (!path.empty() && (!flags.ConfigMayBeMissing() || fsys::exists(path, ec))) {
    Status st = cli::ApplyConfigFile(path, options, nullptr);
    if (!st.ok()) return Refuse(st.message());
  }
  // A missing SOURCE is reported before a bad flag value, as it always was.
  Status given = flags.ApplyGiven(options);
  if (options.source.empty()) {
    return Refuse("mount needs a SOURCE (on the command line or as `source` in --config)");
  }
  if (!given.ok()) return Refuse(given.message());
  return 0;
}


}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"epochfs: a caching filesystem that feeds training data to GPUs"};
  app.set_version_flag("--version", std::string("epochfs ") + EPOCHFS_VERSION);
  app.require_subcommand(1);

  auto* mount = app.add_subcommand("mount", "Mount SOURCE, over itself unless MOUNTPOINT is given");
  // Every flag of `mount` comes from the option table (cli/option_table.h).
  cli::MountFlags mount_flags(mount);

  cli::TopOptions top_options;
  std::string top_target;
  auto* top = app.add_subcommand("top", "A live view of one epochfs mount");
  top->add_option("MOUNTPOINT", top_target, "The mount")->required();
  top->add_option("-i,--interval", top_options.interval_s, "Seconds between frames")
      ->check(CLI::Range(0.05, 3600.0))
      ->capture_default_str();
  top->add_flag("--once", top_options.once, "Draw one frame and exit");

  bool lazy = false;
  std::string umount_target;
  auto* umount = app.add_subcommand("umount", "Unmount an epochfs mount and wait for its daemon");
  umount->alias("unmount");
  umount->add_option("MOUNTPOINT", umount_target, "The mount")->required();
  umount->add_flag("-l,--lazy", lazy, "Detach now, finish when no longer busy");
  bool dead_only = false;  // ---- systemd ExecStopPost ----
  umount->add_flag("--dead-only", dead_only,
                   "Only unmount if its daemon is gone (Transport endpoint is not connected)");

  bool json = false;
  std::string status_target;
  auto* status = app.add_subcommand("status", "Counters of one epochfs mount, or of all");
  status->add_option("MOUNTPOINT", status_target, "The mount (default: every epochfs mount)");
  status->add_flag("--json", json, "Machine-readable output");

  // ---- warm (implementation in cli/warm.cc) ----
  cli::WarmOptions warm_options;
  std::string warm_target;
  auto* warm = app.add_subcommand("warm", "Load files of a mount into its cache (resumable)");
  warm->add_option("MOUNTPOINT", warm_target, "The mount")->required();
  warm->add_option("PATH", warm_options.paths, "Files or folders inside it (default: all)");
  warm->add_flag("--ram", warm_options.ram, "Also keep them in RAM (the page cache too) while they fit");
  warm->add_option("-j,--threads", warm_options.threads, "Parallel readers")->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    return Refuse(what + " (see epochfs --help)");
  }

  if (*mount) {
    daemon::MountOptions mount_options;
    const int config_rc = MountOptionsFromFileAndFlags(mount_flags, mount_options);
    if (config_rc != 0) return config_rc;
    return CmdMount(mount_options);
  }
  // ---- epochfs top ----
  if (*top) {
    const fsys::path target = fsys::absolute(top_target).lexically_normal();
    return cli::RunTop(top_options, [&] { return ReadStats(target); }, stdout);
  }
  if (*umount) return CmdUmount(umount_target, lazy, dead_only);
  if (*status) return CmdStatus(status_target, json);
  if (*warm) {
    warm_options.mountpoint = warm_target;
    return cli::RunWarm(warm_options);
  }
  return Refuse("no command given (see epochfs --help)");
}
