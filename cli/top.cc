#include "cli/top.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>
#include <vector>

#include "cli/status.h"
#include "fmt/format.h"

namespace epochfs::cli {
namespace {

uint64_t U(const nlohmann::json& s, const char* key) {
  auto it = s.find(key);
  return it != s.end() && it->is_number() ? it->get<uint64_t>() : 0;
}

struct Reads {
  double ram, ssd, miss, ram_bytes, ssd_bytes, miss_bytes, source, source_bytes;
  double total() const { return ram + ssd + miss; }
  double bytes() const { return ram_bytes + ssd_bytes + miss_bytes; }
};

Reads ReadsOf(const nlohmann::json& s) {
  return {double(U(s, "ram_hits")),      double(U(s, "ssd_hits")),      double(U(s, "misses")),
          double(U(s, "ram_hit_bytes")), double(U(s, "ssd_hit_bytes")), double(U(s, "miss_bytes")),
          double(U(s, "source_reads")),  double(U(s, "source_bytes"))};
}

std::string Pattern(const nlohmann::json& s) {
  auto it = s.find("pattern");
  if (it == s.end() || it->is_null()) return "-";
  if (it->is_string()) return it->get<std::string>().empty() ? "-" : it->get<std::string>();
  return it->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);  // an object from a newer daemon: show it as it is
}

}  // namespace

std::string TopFrame(const nlohmann::json& before, const nlohmann::json& after, double seconds) {
  const Reads a = ReadsOf(before), b = ReadsOf(after);
  const Reads d{b.ram - a.ram,
                b.ssd - a.ssd,
                b.miss - a.miss,
                b.ram_bytes - a.ram_bytes,
                b.ssd_bytes - a.ssd_bytes,
                b.miss_bytes - a.miss_bytes,
                b.source - a.source,
                b.source_bytes - a.source_bytes};
  const double secs = seconds > 0 ? seconds : 1;
  std::string out;
  out += fmt::format("epochfs top  {}  (source {}, pid {}, up {:.0f} s)\n",
                     after.value("mountpoint", ""), after.value("source", ""), U(after, "pid"),
                     after.value("uptime_s", 0.0));
  out += fmt::format("  {:<14}{}    epoch pattern: {}\n", "consistency",
                     after.value("consistency", std::string("-")), Pattern(after));
  out +=
      fmt::format("  {:<14}{:>14} {:>14}\n", "", fmt::format("last {:.1f} s", secs), "since mount");
  out += fmt::format("  {:<14}{:>14} {:>14}\n", "RAM hits", FormatShare(d.ram, d.total()),
                     FormatShare(b.ram, b.total()));
  out += fmt::format("  {:<14}{:>14} {:>14}\n", "SSD hits", FormatShare(d.ssd, d.total()),
                     FormatShare(b.ssd, b.total()));
  out += fmt::format("  {:<14}{:>14} {:>14}\n", "misses", FormatShare(d.miss, d.total()),
                     FormatShare(b.miss, b.total()));
  out += fmt::format("  {:<14}{:>14} {:>14}\n", "chunk reads/s",
                     fmt::format("{:.0f}", d.total() / secs), fmt::format("{:.0f}", b.total()));
  out += fmt::format("  {:<14}{:>14} {:>14}\n", "read MB/s",
                     fmt::format("{:.1f}", d.bytes() / secs / 1e6), FormatBytes(b.bytes()));
  out += fmt::format("  {:<14}{:>14} {:>14}\n", "source IO/s",
                     fmt::format("{:.0f}", d.source / secs), fmt::format("{:.0f}", b.source));
  out += fmt::format("  {:<14}{:>14} {:>14}\n", "source MB/s",
                     fmt::format("{:.1f}", d.source_bytes / secs / 1e6), FormatBytes(b.source_bytes));
  // FUSE requests: zero in a warm notify-mode epoch (the kernel serves it alone), two
  // per file in open mode; the busiest kinds say what the kernel asks for.
  std::vector<std::pair<double, std::string>> kinds;
  double requests = 0, requests_total = 0;
  if (after.contains("requests") && after["requests"].is_object()) {
    for (const auto& [kind, count] : after["requests"].items()) {
      const double now = count.is_number() ? count.get<double>() : 0;
      const auto& was = before.contains("requests") ? before["requests"] : nlohmann::json();
      const double then = was.is_object() && was.contains(kind) && was[kind].is_number()
                              ? was[kind].get<double>()
                              : 0;
      requests += now - then;
      requests_total += now;
      if (now > then) kinds.emplace_back(now - then, kind);
    }
  }
  std::sort(kinds.rbegin(), kinds.rend());
  std::string busiest;
  for (size_t i = 0; i < kinds.size() && i < 3; i++) {
    busiest +=
        fmt::format("{}{} {:.0f}/s", i ? ", " : "  (", kinds[i].second, kinds[i].first / secs);
  }
  if (!busiest.empty()) busiest += ")";
  out +=
      fmt::format("  {:<14}{:>14} {:>14}{}\n", "requests/s", fmt::format("{:.0f}", requests / secs),
                  fmt::format("{:.0f}", requests_total), busiest);
  out +=
      fmt::format("  {:<14}{} of {} ({}), {} entries\n", "RAM tier",
                  FormatBytes(double(U(after, "ram_bytes"))), FormatBytes(double(U(after, "ram_budget_bytes"))),
                  FormatShare(double(U(after, "ram_bytes")), double(U(after, "ram_budget_bytes"))),
                  U(after, "ram_entries"));
  out +=
      fmt::format("  {:<14}{} of {} ({}), {} entries, {} packs{}\n", "SSD tier",
                  FormatBytes(double(U(after, "ssd_bytes"))), FormatBytes(double(U(after, "ssd_budget_bytes"))),
                  FormatShare(double(U(after, "ssd_bytes")), double(U(after, "ssd_budget_bytes"))),
                  U(after, "ssd_entries"), U(after, "packs"),
                  after.value("ssd_degraded", false)
                      ? fmt::format("  DEGRADED: {}", after.value("ssd_degraded_reason", ""))
                      : "");
  out += fmt::format("  {:<14}corrupt {}, stale {}, daemon RSS {}\n", "health",
                     U(after, "corrupt_entries"), U(after, "stale_entries"),
                     FormatBytes(double(U(after, "daemon_rss_bytes"))));
  return out;
}

int RunTop(const TopOptions& options, const std::function<Result<nlohmann::json>()>& read_stats,
           FILE* out) {
  const bool tty = ::isatty(::fileno(out));
  auto before = read_stats();
  if (!before.ok()) {
    fmt::print(stderr, "epochfs: error: {}\n", before.status().message());
    return 2;
  }
  auto t0 = std::chrono::steady_clock::now();
  bool first = true;
  while (true) {
    std::this_thread::sleep_for(std::chrono::duration<double>(options.interval_s));
    auto after = read_stats();
    const auto t1 = std::chrono::steady_clock::now();
    if (!after.ok()) {
      fmt::print(stderr, "epochfs: {}\n", after.status().message());
      return 1;
    }
    const std::string frame =
        TopFrame(*before, *after, std::chrono::duration<double>(t1 - t0).count());
    if (tty) {
      fmt::print(out, "\033[H\033[2J{}", frame);
    } else {
      fmt::print(out, "{}{}", first ? "" : "\n", frame);
    }
    std::fflush(out);
    first = false;
    if (options.once) return 0;
    before = std::move(after);
    t0 = t1;
  }
}

}  // namespace epochfs::cli
