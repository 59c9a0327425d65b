#include "cli/status.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <vector>

#include "cli/exit.h"
#include "daemon/mount_table.h"
#include "fmt/format.h"

namespace epochfs::cli {

std::string FormatBytes(double n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (n >= 1024 && u < 4) {
    n /= 1024;
    u++;
  }
  return u == 0 ? fmt::format("{:.0f} B", n) : fmt::format("{:.1f} {}", n, units[u]);
}

std::string FormatShare(double part, double whole) {
  return whole <= 0 ? "-" : fmt::format("{:.1f}%", 100.0 * part / whole);
}

Result<nlohmann::json> ReadStats(const std::filesystem::path& mountpoint) {
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

namespace {

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
             FormatBytes(u("ram_hit_bytes")), FormatShare(u("ram_hits"), reads));
  fmt::print("  {:<16}{:>12} {:>12} {:>10}\n", "  SSD hits", u("ssd_hits"),
             FormatBytes(u("ssd_hit_bytes")), FormatShare(u("ssd_hits"), reads));
  fmt::print("  {:<16}{:>12} {:>12} {:>10}\n", "  misses", u("misses"), FormatBytes(u("miss_bytes")),
             FormatShare(u("misses"), reads));
  fmt::print("  {:<16}{:>12} {:>12}\n", "source reads", u("source_reads"),
             FormatBytes(u("source_bytes")));
  fmt::print("  {:<16}{} of {} in {} entries, {} evicted\n", "RAM tier", FormatBytes(u("ram_bytes")),
             FormatBytes(u("ram_budget_bytes")), u("ram_entries"), u("ram_evictions"));
  fmt::print("  {:<16}{} of {} in {} entries, {} packs, {} evicted{}\n", "SSD tier",
             FormatBytes(u("ssd_bytes")), FormatBytes(u("ssd_budget_bytes")), u("ssd_entries"), u("packs"),
             u("ssd_evictions"),
             s.value("ssd_degraded", false)
                 ? fmt::format(" (DEGRADED: {})", s.value("ssd_degraded_reason", ""))
                 : "");
  fmt::print("  {:<16}corrupt {}, stale {}, not admitted {}, writes dropped {}\n", "entries",
             u("corrupt_entries"), u("stale_entries"), u("not_admitted"),
             u("ssd_writes_dropped"));
  fmt::print("  {:<16}{} (peak {}), {} inodes, io_uring {}\n", "daemon RSS",
             FormatBytes(u("daemon_rss_bytes")), FormatBytes(u("daemon_peak_rss_bytes")), u("inodes"),
             s.value("io_uring", false) ? "on" : "off (pread)");
}

}  // namespace

int RunStatus(const std::string& mountpoint, bool json) {
  std::vector<std::filesystem::path> targets;
  if (!mountpoint.empty()) {
    targets.push_back(std::filesystem::absolute(mountpoint).lexically_normal());
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

}  // namespace epochfs::cli
