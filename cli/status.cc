#include "cli/status.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <vector>

#include "cli/counter_view.h"
#include "cli/exit.h"
#include "daemon/mount_table.h"
#include "daemon/stats_socket.h"
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
  const auto mount = daemon::VisibleMount(mountpoint);
  if (!mount || mount->fstype != daemon::kFsType) {
    return Status::InvalidArgument(fmt::format("{} is not an epochfs mount", mountpoint.string()));
  }
  std::string text;
  // The daemon's socket first: it answers while every FUSE worker waits on a hung source.
  auto reply = daemon::QueryStatsSocket(daemon::StatsSocketPath(mount->device),
                                        mount->owner_uid.value_or(0), 2.0);
  if (reply.ok()) {
    text = std::move(reply->text);
  } else if (reply.status().code() != Code::kNotFound &&
             reply.status().code() != Code::kPermission) {
    return Status::IoError(fmt::format("the daemon of {} does not answer: {}",
                                       mountpoint.string(), reply.status().message()));
  } else {
    // No socket (a daemon that could not make one, or one that is gone), or another
    // user's (not believed, and said): the mount's own file, which also tells a dead
    // daemon ("Transport endpoint is not connected").
    if (reply.status().code() == Code::kPermission) {
      std::cerr << "epochfs: " << reply.status().message() << "\n";
    }
    std::ifstream in(mountpoint / ".epochfs" / "stats");
    if (!in) {
      return Status::IoError(fmt::format("cannot read {}/.epochfs/stats: {}",
                                         mountpoint.string(), strerror(errno)));
    }
    std::stringstream file;
    file << in.rdbuf();
    text = file.str();
  }
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return Status::Corruption(fmt::format("bad stats from {}: {}", mountpoint.string(), e.what()));
  }
}

std::string StatusTable(const nlohmann::json& stats) {
  std::string out = fmt::format("epochfs {} on {}\n", IdentityOf(stats, "source"),
                                IdentityOf(stats, "mountpoint"));
  for (const ViewRow& row : ViewRows()) {
    double parts = 0;
    for (const CounterInfo& c : row.counters) {
      if (c.display.part) parts += NumberOf(FindCounter(stats, c.name)).value_or(0);
    }
    std::string items;
    bool any = false;
    for (const CounterInfo& c : row.counters) {
      const nlohmann::json* value = FindCounter(stats, c.name);
      if (value == nullptr) continue;
      any = true;
      if ((c.display.quiet && IsQuiet(*value)) || ShownWithItsPart(c, stats)) continue;
      items += (items.empty() ? "" : ", ") + ShowCounter(c, *value, stats, parts);
    }
    if (any)
      out += fmt::format("  {:<{}}{}\n", row.name, kRowNameWidth, items.empty() ? "-" : items);
  }
  return out;
}

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
      fmt::print("{}", StatusTable(*stats));
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
