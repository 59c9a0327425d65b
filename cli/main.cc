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
  // ---- end systemd ----
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
    // ---- end all mounts ----
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

int CmdMount(daemon::MountOptions options, const std::string& ram, const std::string& disk,
             const std::string& chunk, const std::string& readahead,
             const std::string& prefetch_bandwidth) {
  // An empty size string: not given on the command line (the config file's or the
  // default value is in `options` already).
  if (!ram.empty()) {
    auto ram_bytes = daemon::ParseSize(ram);
    if (!ram_bytes.ok()) return Refuse("--ram: " + ram_bytes.status().message());
    options.ram_budget = *ram_bytes;
  }
  if (!disk.empty()) {
    auto disk_bytes = daemon::ParseSize(disk);
    if (!disk_bytes.ok()) return Refuse("--disk: " + disk_bytes.status().message());
    options.disk_budget = *disk_bytes;
    options.disk_budget_set = true;
  }
  if (!chunk.empty()) {
    auto chunk_bytes = daemon::ParseSize(chunk);
    if (!chunk_bytes.ok()) return Refuse("--chunk-size: " + chunk_bytes.status().message());
    options.chunk_size = static_cast<uint32_t>(std::min<uint64_t>(*chunk_bytes, 1u << 30));
  }
  if (!readahead.empty()) {
    auto readahead_bytes = daemon::ParseSize(readahead);
    if (!readahead_bytes.ok()) return Refuse("--readahead: " + readahead_bytes.status().message());
    options.readahead = *readahead_bytes;
  }
  if (!prefetch_bandwidth.empty()) {
    auto bytes = daemon::ParseSize(prefetch_bandwidth);
    if (!bytes.ok()) return Refuse("--prefetch-bandwidth: " + bytes.status().message());
    options.prefetch_bandwidth = *bytes;
  }
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

// Sets in `options` every value the command line did not give from the config file
// (`path`; skipped when `if_exists` and it is missing). The size strings (`ram`, `chunk`,
// `disk`, `readahead`) are cleared when not given, so CmdMount keeps the file's (or the
// default) value.
int ApplyConfig(CLI::App* mount, const std::string& path, bool if_exists,
                daemon::MountOptions& options, std::string& ram, std::string& chunk,
                std::string& disk, std::string& readahead, std::string& prefetch_bandwidth) {
  auto given = [&](const char* name) { return mount->get_option(name)->count() > 0; };
  daemon::MountOptions file = daemon::MountOptions();
  std::set<std::string> keys;
  if (!path.empty()) {
    std::error_code ec;
    if (!if_exists || fsys::exists(path, ec)) {
      Status st = cli::ApplyConfigFile(path, file, &keys);
      if (!st.ok()) return Refuse(st.message());
    }
  }
  if (!given("SOURCE")) options.source = file.source;
  if (!given("MOUNTPOINT")) options.mountpoint = file.mountpoint;
  if (!given("--cache-dir")) options.cache_dir = file.cache_dir;
  if (!given("--log-file")) options.log_file = file.log_file;
  if (!given("--ram")) {
    ram.clear();
    options.ram_budget = file.ram_budget;
  }
  if (!given("--disk")) {
    disk.clear();
    options.disk_budget = file.disk_budget;
    options.disk_budget_set = file.disk_budget_set;
  }
  if (!given("--chunk-size")) {
    chunk.clear();
    options.chunk_size = file.chunk_size;
  }
  if (!given("--readahead")) {
    readahead.clear();
    options.readahead = file.readahead;
  }
  if (!given("--prefetch-bandwidth")) {
    prefetch_bandwidth.clear();
    options.prefetch_bandwidth = file.prefetch_bandwidth;
  }
  if (!given("--prefetch")) options.prefetch_threads = file.prefetch_threads;
  if (!given("--prefetch-iops")) options.prefetch_iops = file.prefetch_iops;
  if (!given("--no-prefetch-pacing")) options.prefetch_pacing = file.prefetch_pacing;
  if (!given("--read-only")) options.read_only = file.read_only;
  if (!given("--allow-other")) options.allow_other = file.allow_other;
  if (!given("--no-io-uring")) options.use_io_uring = file.use_io_uring;
  if (!given("--log-level")) options.log_level = file.log_level;
  if (!given("--consistency")) options.consistency = file.consistency;
  if (!given("--attr-timeout")) options.timeouts.attr_s = file.timeouts.attr_s;
  if (!given("--entry-timeout")) options.timeouts.entry_s = file.timeouts.entry_s;
  if (!given("--threads")) options.max_threads = file.max_threads;
  if (!given("--metrics-listen")) options.metrics_listen = file.metrics_listen;
  if (!given("--metrics-allow-remote")) options.metrics_allow_remote = file.metrics_allow_remote;
  if (!given("--metrics-textfile")) options.metrics_textfile = file.metrics_textfile;
  if (options.source.empty()) {
    return Refuse("mount needs a SOURCE (on the command line or as `source` in --config)");
  }
  return 0;
}

// ---- end configuration file ----

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"epochfs: a caching filesystem that feeds training data to GPUs"};
  app.set_version_flag("--version", std::string("epochfs ") + EPOCHFS_VERSION);
  app.require_subcommand(1);

  daemon::MountOptions mount_options;
  std::string ram = "1G", disk, chunk = "1M", readahead = "1M", prefetch_bandwidth;
  std::string source, mountpoint;
  auto* mount = app.add_subcommand("mount", "Mount SOURCE, over itself unless MOUNTPOINT is given");
  mount->add_option("SOURCE", source, "The data set folder (or `source` in --config)");
  mount->add_option("MOUNTPOINT", mountpoint, "Where to mount (default: SOURCE itself)");
  mount->add_option("--cache-dir", mount_options.cache_dir,
                    "The SSD tier (default: /var/cache/epochfs/<source>-<hash>)");
  mount->add_option("--ram", ram, "RAM tier budget, e.g. 8G")->capture_default_str();
  mount->add_option("--disk", disk, "SSD tier budget, e.g. 200G (default: half the free space)");
  mount->add_option("--chunk-size", chunk,
                    "Files up to this size are cached whole; larger ones in chunks of it")
      ->capture_default_str();
  mount->add_option("--readahead", readahead,
                    "Kernel readahead for the mount (0 keeps the kernel's default)")
      ->capture_default_str();
  mount->add_option("--prefetch", mount_options.prefetch_threads,
                    "Files read ahead at once by the prefetcher (0: no readahead at all)")
      ->check(CLI::Range(0u, 64u))
      ->capture_default_str();
  mount->add_option("--prefetch-iops", mount_options.prefetch_iops,
                    "Most source reads per second readahead may use, leaving the rest to "
                    "demand reads (0: no limit)")
      ->check(CLI::NonNegativeNumber);
  bool no_prefetch_pacing = false;
  mount->add_flag("--no-prefetch-pacing", no_prefetch_pacing,
                  "Let readahead read the source as fast as it can, instead of pacing it below "
                  "the rate at which its reads start to queue behind each other");
  mount->add_option("--prefetch-bandwidth", prefetch_bandwidth,
                    "Most source bytes per second readahead may use, e.g. 100M (default: no "
                    "limit)");
  mount->add_flag("-f,--foreground", mount_options.foreground, "Stay in the foreground");
  mount->add_flag("--read-only", mount_options.read_only, "Refuse writes with EROFS");
  mount->add_flag("--allow-other", mount_options.allow_other,
                  "Let other users use the mount (permissions still apply)");
  mount->add_option("--log-level", mount_options.log_level, "trace, debug, info, warn, error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
      ->capture_default_str();
  mount->add_option("--log-file", mount_options.log_file,
                    "Log here (default: stderr in the foreground, CACHE_DIR/epochfs.log otherwise)");
  mount->add_option("--attr-timeout", mount_options.timeouts.attr_s,
                    "Seconds the kernel trusts attributes")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
  mount->add_option("--entry-timeout", mount_options.timeouts.entry_s,
                    "Seconds the kernel trusts names")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
  mount->add_option("--threads", mount_options.max_threads, "Most FUSE worker threads")
      ->check(CLI::Range(1u, 1024u))
      ->capture_default_str();
  std::string consistency = "auto";
  mount->add_option("--consistency", consistency,
                    "How changes made underneath reach readers: notify (inotify; no request "
                    "per open), open (every open re-checks the source), auto (notify on local "
                    "filesystems, open on network ones)")
      ->check(CLI::IsMember({"auto", "open", "notify"}))
      ->capture_default_str();
  bool no_io_uring = false;
  mount->add_flag("--no-io-uring", no_io_uring, "Read with pread instead of io_uring");

  // ---- Configuration file and metrics options (cli/config.h, daemon/metrics_server.h). ----
  std::string config_file, config_if_exists;
  auto* config_option = mount->add_option(
      "--config", config_file, "Read options from this TOML file; flags given here override it");
  mount->add_option("--config-if-exists", config_if_exists,
                    "Like --config, but a missing file is no error (what the systemd unit uses)")
      ->excludes(config_option);
  mount->add_option("--metrics-listen", mount_options.metrics_listen,
                    "Serve Prometheus metrics at http://HOST:PORT/metrics (loopback only "
                    "unless --metrics-allow-remote)");
  mount->add_flag("--metrics-allow-remote", mount_options.metrics_allow_remote,
                  "Allow a non-loopback --metrics-listen host");
  mount->add_option("--metrics-textfile", mount_options.metrics_textfile,
                    "Write Prometheus metrics to this file every 10 s (node-exporter textfile "
                    "collector)");

  cli::TopOptions top_options;
  std::string top_target;
  auto* top = app.add_subcommand("top", "A live view of one epochfs mount");
  top->add_option("MOUNTPOINT", top_target, "The mount")->required();
  top->add_option("-i,--interval", top_options.interval_s, "Seconds between frames")
      ->check(CLI::Range(0.05, 3600.0))
      ->capture_default_str();
  top->add_flag("--once", top_options.once, "Draw one frame and exit");
  // ---- end configuration file and metrics options ----

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

  // ---- warm (prefetcher issue #3; implementation in cli/warm.cc) ----
  cli::WarmOptions warm_options;
  std::string warm_target;
  auto* warm = app.add_subcommand("warm", "Load files of a mount into its cache (resumable)");
  warm->add_option("MOUNTPOINT", warm_target, "The mount")->required();
  warm->add_option("PATH", warm_options.paths, "Files or folders inside it (default: all)");
  warm->add_flag("--ram", warm_options.ram, "Also keep them in RAM (the page cache too) while they fit");
  warm->add_option("-j,--threads", warm_options.threads, "Parallel readers")->capture_default_str();
  // ---- end warm ----

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
    mount_options.source = source;
    mount_options.mountpoint = mountpoint;
    mount_options.use_io_uring = !no_io_uring;
    mount_options.prefetch_pacing = !no_prefetch_pacing;
    mount_options.consistency = consistency == "open"     ? daemon::Consistency::kOpen
                                : consistency == "notify" ? daemon::Consistency::kNotify
                                                          : daemon::Consistency::kAuto;
    // ---- configuration file: file values under the flags given ----
    const bool if_exists = config_file.empty();
    const int config_rc = ApplyConfig(mount, if_exists ? config_if_exists : config_file,
                                      if_exists, mount_options, ram, chunk, disk, readahead,
                                      prefetch_bandwidth);
    if (config_rc != 0) return config_rc;
    // ---- end configuration file ----
    return CmdMount(mount_options, ram, disk, chunk, readahead, prefetch_bandwidth);
  }
  // ---- epochfs top ----
  if (*top) {
    const fsys::path target = fsys::absolute(top_target).lexically_normal();
    return cli::RunTop(top_options, [&] { return ReadStats(target); }, stdout);
  }
  // ---- end epochfs top ----
  if (*umount) return CmdUmount(umount_target, lazy, dead_only);
  if (*status) return CmdStatus(status_target, json);
  if (*warm) {
    warm_options.mountpoint = warm_target;
    return cli::RunWarm(warm_options);
  }
  return Refuse("no command given (see epochfs --help)");
}
