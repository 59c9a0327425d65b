#include "daemon/metrics.h"

#include <vector>

#include "fmt/format.h"

namespace epochfs::daemon {
namespace {

struct Sample {
  std::string labels;  // extra labels, `tier="ram"`; empty for none
  std::string key;     // the stats key holding the value
};

struct Family {
  const char* name;
  const char* type;  // counter or gauge
  const char* help;
  std::vector<Sample> samples;
};

std::vector<Family> Families(const nlohmann::json& stats) {
  std::vector<Family> f = {
      {"epochfs_uptime_seconds", "gauge", "Seconds since the daemon started.", {{"", "uptime_s"}}},
      {"epochfs_request_errors_total",
       "counter",
       "FUSE requests answered with an error.",
       {{"", "request_errors"}}},
      {"epochfs_cache_hits_total",
       "counter",
       "Chunk reads served from a cache tier.",
       {{"tier=\"ram\"", "ram_hits"}, {"tier=\"ssd\"", "ssd_hits"}}},
      {"epochfs_cache_hit_bytes_total",
       "counter",
       "Bytes served from a cache tier.",
       {{"tier=\"ram\"", "ram_hit_bytes"}, {"tier=\"ssd\"", "ssd_hit_bytes"}}},
      {"epochfs_misses_total", "counter", "Chunk reads no tier could serve.", {{"", "misses"}}},
      {"epochfs_miss_bytes_total",
       "counter",
       "Bytes of chunk reads no tier could serve.",
       {{"", "miss_bytes"}}},
      {"epochfs_source_reads_total",
       "counter",
       "Reads issued to the source filesystem.",
       {{"", "source_reads"}}},
      {"epochfs_source_bytes_total",
       "counter",
       "Bytes read from the source filesystem.",
       {{"", "source_bytes"}}},
      {"epochfs_tier_bytes",
       "gauge",
       "Bytes held by a cache tier.",
       {{"tier=\"ram\"", "ram_bytes"}, {"tier=\"ssd\"", "ssd_bytes"}}},
      {"epochfs_tier_budget_bytes",
       "gauge",
       "The budget of a cache tier.",
       {{"tier=\"ram\"", "ram_budget_bytes"}, {"tier=\"ssd\"", "ssd_budget_bytes"}}},
      {"epochfs_tier_entries",
       "gauge",
       "Entries held by a cache tier.",
       {{"tier=\"ram\"", "ram_entries"}, {"tier=\"ssd\"", "ssd_entries"}}},
      {"epochfs_evictions_total",
       "counter",
       "Entries evicted from a cache tier.",
       {{"tier=\"ram\"", "ram_evictions"}, {"tier=\"ssd\"", "ssd_evictions"}}},
      {"epochfs_ssd_writes_total",
       "counter",
       "Entries written to the SSD tier.",
       {{"", "ssd_writes"}}},
      {"epochfs_ssd_write_bytes_total",
       "counter",
       "Bytes written to the SSD tier.",
       {{"", "ssd_write_bytes"}}},
      {"epochfs_ssd_writes_dropped_total",
       "counter",
       "SSD tier writes dropped (queue full, disk full or failing).",
       {{"", "ssd_writes_dropped"}}},
      {"epochfs_packs", "gauge", "Pack files in the SSD tier.", {{"", "packs"}}},
      {"epochfs_packs_reclaimed_total",
       "counter",
       "Pack files reclaimed.",
       {{"", "packs_reclaimed"}}},
      {"epochfs_stale_entries_total",
       "counter",
       "Cached entries dropped because the source file changed.",
       {{"", "stale_entries"}}},
      {"epochfs_corrupt_entries_total",
       "counter",
       "Cached entries that failed their checksum (the source was served instead).",
       {{"", "corrupt_entries"}}},
      {"epochfs_not_admitted_total",
       "counter",
       "Reads not admitted to the cache.",
       {{"", "not_admitted"}}},
      {"epochfs_compressed_entries",
       "gauge",
       "SSD entries stored lz4-compressed.",
       {{"", "compressed_entries"}}},
      {"epochfs_ssd_degraded",
       "gauge",
       "1 when the SSD tier is off (cache disk full or failing) and reads go to the source.",
       {{"", "ssd_degraded"}}},
      {"epochfs_io_uring",
       "gauge",
       "1 when reads use io_uring, 0 for the pread fallback.",
       {{"", "io_uring"}}},
      {"epochfs_inodes", "gauge", "Nodes the kernel holds references to.", {{"", "inodes"}}},
      {"epochfs_watched_dirs",
       "gauge",
       "Source directories under an inotify watch.",
       {{"", "watched_dirs"}}},
      {"epochfs_change_events_total",
       "counter",
       "Changes seen in the source by inotify.",
       {{"", "change_events"}}},
      {"epochfs_watch_failures_total",
       "counter",
       "Directories that could not be watched.",
       {{"", "watch_failures"}}},
      {"epochfs_daemon_rss_bytes",
       "gauge",
       "Resident memory of the daemon.",
       {{"", "daemon_rss_bytes"}}},
      {"epochfs_daemon_peak_rss_bytes",
       "gauge",
       "Peak resident memory of the daemon.",
       {{"", "daemon_peak_rss_bytes"}}},
  };
  // One sample per FUSE request kind, whatever kinds the daemon counts.
  Family requests{"epochfs_requests_total", "counter", "FUSE requests by kind.", {}};
  if (stats.contains("requests") && stats["requests"].is_object()) {
    for (const auto& [kind, count] : stats["requests"].items()) {
      requests.samples.push_back(
          {fmt::format("kind=\"{}\"", EscapeLabelValue(kind)), "requests/" + kind});
    }
  }
  f.insert(f.begin() + 1, std::move(requests));
  return f;
}

// The value of `key` ("a" or "a/b") as a Prometheus number, or "" when absent.
std::string Value(const nlohmann::json& stats, const std::string& key) {
  const nlohmann::json* v = &stats;
  size_t start = 0;
  while (true) {
    const size_t slash = key.find('/', start);
    const std::string part = key.substr(start, slash == std::string::npos ? slash : slash - start);
    if (!v->is_object() || !v->contains(part)) return "";
    v = &(*v)[part];
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  if (v->is_boolean()) return v->get<bool>() ? "1" : "0";
  if (v->is_number_unsigned()) return std::to_string(v->get<uint64_t>());
  if (v->is_number_integer()) return std::to_string(v->get<int64_t>());
  if (v->is_number_float()) return fmt::format("{}", v->get<double>());
  return "";
}

}  // namespace

std::string ServiceStatusLine(const nlohmann::json& stats) {
  auto u = [&](const char* key) {
    auto it = stats.find(key);
    return it != stats.end() && it->is_number() ? it->get<double>() : 0.0;
  };
  auto bytes = [](double n) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (n >= 1024 && i < 4) {
      n /= 1024;
      i++;
    }
    return fmt::format("{:.1f} {}", n, units[i]);
  };
  const double reads = u("ram_hits") + u("ssd_hits") + u("misses");
  std::string line = fmt::format("Serving {}: ", stats.value("source", std::string()));
  if (reads == 0) {
    line += "no reads yet";
  } else {
    line += fmt::format("{:.1f}% hits (RAM {:.1f}%, SSD {:.1f}%)",
                        100 * (u("ram_hits") + u("ssd_hits")) / reads, 100 * u("ram_hits") / reads,
                        100 * u("ssd_hits") / reads);
  }
  line += fmt::format(", {:.0f} source reads, SSD {} of {}", u("source_reads"),
                      bytes(u("ssd_bytes")), bytes(u("ssd_budget_bytes")));
  if (stats.value("ssd_degraded", false)) line += " (DEGRADED)";
  return line;
}

std::string EscapeLabelValue(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string PrometheusText(const nlohmann::json& stats) {
  const std::string mount =
      fmt::format("mountpoint=\"{}\"", EscapeLabelValue(stats.value("mountpoint", std::string())));
  std::string out;
  // An info metric carries the strings, so other families stay small.
  out += "# HELP epochfs_info The mount: source, version and consistency mode (always 1).\n";
  out += "# TYPE epochfs_info gauge\n";
  out += fmt::format("epochfs_info{{{},source=\"{}\",version=\"{}\",consistency=\"{}\"}} 1\n",
                     mount, EscapeLabelValue(stats.value("source", std::string())),
                     EscapeLabelValue(stats.value("version", std::string())),
                     EscapeLabelValue(stats.value("consistency", std::string())));
  for (const Family& family : Families(stats)) {
    std::string lines;
    for (const Sample& s : family.samples) {
      const std::string v = Value(stats, s.key);
      if (v.empty()) continue;
      lines += fmt::format("{}{{{}{}{}}} {}\n", family.name, mount, s.labels.empty() ? "" : ",",
                           s.labels, v);
    }
    if (lines.empty()) continue;
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", family.name, family.help, family.name,
                       family.type);
    out += lines;
  }
  return out;
}

}  // namespace epochfs::daemon
