#include "daemon/metrics.h"

#include <algorithm>
#include <map>
#include <vector>

#include "fmt/format.h"
#include "kernel_cache/kernel_cache.h"
#include "fs/change_watcher.h"
#include "fs/source_fs.h"
#include "fs/fuse_ops.h"

namespace epochfs::daemon {
namespace {

// The exported families, in the order they are written (dashboards do not care, but
// a diff of two scrapes reads better when it stays put). Which counters feed a family,
// and its help and type, come from the counters themselves (CounterInfo::prometheus).
constexpr const char* kFamilyOrder[] = {
    "epochfs_uptime_seconds",
    "epochfs_requests_total",
    "epochfs_request_errors_total",
    "epochfs_fuse_uring_requests_total",
    "epochfs_cache_hits_total",
    "epochfs_cache_hit_bytes_total",
    "epochfs_misses_total",
    "epochfs_miss_bytes_total",
    "epochfs_source_reads_total",
    "epochfs_source_bytes_total",
    "epochfs_tier_bytes",
    "epochfs_tier_budget_bytes",
    "epochfs_tier_entries",
    "epochfs_evictions_total",
    "epochfs_ssd_writes_total",
    "epochfs_ssd_write_bytes_total",
    "epochfs_ssd_writes_dropped_total",
    "epochfs_packs",
    "epochfs_packs_reclaimed_total",
    "epochfs_stale_entries_total",
    "epochfs_corrupt_entries_total",
    "epochfs_not_admitted_total",
    "epochfs_compressed_entries",
    "epochfs_ssd_degraded",
    "epochfs_io_uring",
    "epochfs_inodes",
    "epochfs_watched_dirs",
    "epochfs_change_events_total",
    "epochfs_watch_failures_total",
    "epochfs_daemon_rss_bytes",
    "epochfs_daemon_peak_rss_bytes",
};

struct Sample {
  std::string labels;  // extra labels, `tier="ram"`; empty for none
  std::string key;     // the stats key holding the value
};

struct Family {
  std::string type;  // counter or gauge
  std::string help;
  std::vector<Sample> samples;
};

// The exported families by name, from every counter a snapshot can hold.
std::map<std::string, Family> Families() {
  std::map<std::string, Family> families;
  VisitAllCounters([&](const CounterInfo& info, const CounterValue&) {
    if (info.prometheus == nullptr) return;
    Family& f = families[info.prometheus];
    // A family's samples share its help and type (the tests check they agree).
    f.type = info.kind == CounterKind::kCounter ? "counter" : "gauge";
    f.help = info.help;
    f.samples.push_back({info.labels, info.name});
  });
  // Samples by label: tier="ram" before tier="ssd", request kinds alphabetically.
  for (auto& [name, f] : families) {
    std::stable_sort(f.samples.begin(), f.samples.end(),
                     [](const Sample& x, const Sample& y) { return x.labels < y.labels; });
  }
  return families;
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

void MountCounters::VisitCounters(const CounterVisitor& visit) const {
  constexpr auto kText = CounterKind::kText;
  constexpr auto kGauge = CounterKind::kGauge;
  constexpr auto kCounter = CounterKind::kCounter;
  constexpr auto kFlag = CounterKind::kFlag;
  constexpr auto kBytes = Unit::kBytes;
  const char* budget = "The budget of a cache tier.";
  visit(CounterInfo{"version", "The daemon's version.", kText}.Show(
            {.row = "daemon", .label = "version"}),
        version);
  visit(CounterInfo{"pid", "The daemon's process id.", kGauge}.Show(
            {.row = "daemon", .label = "pid", .top = true}),
        pid);
  // The mount's identity heads each view (cli/counter_view.h), on no row.
  visit({"source", "The directory the mount serves.", kText}, source);
  visit({"mountpoint", "Where it is mounted.", kText}, mountpoint);
  visit(
      CounterInfo{"uptime_s", "Seconds since the daemon started.", kGauge, "epochfs_uptime_seconds"}
          .Show({.row = "daemon", .label = "up", .unit = Unit::kSeconds, .top = true}),
      uptime_s);
  visit(CounterInfo{"read_only", "Whether the mount refuses writes.", kFlag}.Show(
            {.row = "daemon", .label = "read-only"}),
        read_only);
  visit(CounterInfo{"cache_dir", "The cache directory (packs, index, epoch record).", kText}.Show(
            {.row = "cache dir", .label = ""}),
        cache_dir);
  visit(CounterInfo{"consistency", "How changes to the source reach the kernel: open or notify.",
                    kText}
            .Show({.row = "consistency", .label = "", .top = true}),
        consistency);
  visit(CounterInfo{"isatty",
                    "Who answers the isatty() of Python's buffered open() on the mount's files: "
                    "the kernel (a BPF LSM program, daemon/isatty_guard.h), or the daemon, one "
                    "request per opened file, and why.",
                    kText}
            .Show({.row = "isatty", .label = ""}),
        isatty);
  visit(CounterInfo{"parallel_lookups",
                    "Whether the kernel sends the lookups and listings of one directory to the "
                    "daemon side by side (FUSE_PARALLEL_DIROPS), not one at a time.",
                    kFlag}
            .Show({.row = "daemon", .label = "parallel lookups"}),
        parallel_lookups);
  visit(CounterInfo{"passthrough",
                    "Whether the kernel may serve opens from the source file itself (FUSE "
                    "passthrough, --passthrough).",
                    kFlag}
            .Show({.row = "daemon", .label = "passthrough"}),
        passthrough);
  visit(CounterInfo{"fuse_uring",
                    "Whether the kernel sends FUSE requests through io_uring rings (Linux 6.14+ "
                    "with the fuse module's enable_uring set; --no-fuse-uring), not /dev/fuse.",
                    kFlag}
            .Show({.row = "daemon", .label = "fuse io_uring"}),
        fuse_uring);
  visit(CounterInfo{"fuse_uring_requests", "FUSE requests that came through io_uring.",
                    CounterKind::kCounter, "epochfs_fuse_uring_requests_total"}
            .Show({.row = "requests", .label = "through io_uring", .quiet = true}),
        fuse_uring_requests);
  static const fs::RequestCounters kNoRequests;
  (requests ? *requests : kNoRequests).VisitCounters(visit);
  cache.VisitCounters(visit);
  visit(CounterInfo{"ram_budget_bytes", budget, kGauge, "epochfs_tier_budget_bytes", "tier=\"ram\""}
            .Show({.row = "RAM tier", .label = "budget", .unit = kBytes}),
        ram_budget_bytes);
  visit(
      CounterInfo{"ram_tier_budget_bytes",
                  "The part of --ram the RAM tier may fill now: its own share, and what the "
                  "rest of the daemon leaves unused.",
                  kGauge}.Show(
          {.row = "RAM tier", .label = "for the tier", .unit = kBytes}),
      ram_tier_budget_bytes);
  visit(CounterInfo{"ram_tier_share_bytes",
                    "The RAM tier's own share of --ram: its budget while the rest of the daemon "
                    "uses all of theirs.",
                    kGauge}
            .Show({.row = "RAM tier", .label = "its share", .unit = kBytes}),
        ram_tier_share_bytes);
  visit(CounterInfo{"ssd_write_queue_bytes",
                    "The part of --ram for chunks on their way to the SSD tier.", kGauge}
            .Show({.row = "SSD writes", .label = "queue", .unit = kBytes}),
        ssd_write_queue_bytes);
  visit(CounterInfo{"ssd_budget_bytes", budget, kGauge, "epochfs_tier_budget_bytes", "tier=\"ssd\""}
            .Show({.row = "SSD tier", .label = "budget", .unit = kBytes}),
        ssd_budget_bytes);
  fs::SourceFs::VisitCounters(fs, visit);
  visit(
      CounterInfo{"inodes", "Nodes the kernel holds references to.", kGauge, "epochfs_inodes"}.Show(
          {.row = "daemon", .label = "inodes"}),
      inodes);
  visit(CounterInfo{"metadata_warmup", "Whether the restart's metadata warm-up is opening files now.",
                    kFlag}
            .Show({.row = "metadata warm-up", .label = "running", .quiet = true}),
        metadata_warmup);
  visit(CounterInfo{"metadata_warmed", "Recorded files whose source metadata the warm-up brought in.",
                    kCounter}
            .Show({.row = "metadata warm-up", .label = "files", .quiet = true}),
        metadata_warmed);
  visit(CounterInfo{"metadata_pins",
                    "Files whose source metadata is held until the kernel looks them up.", kGauge}
            .Show({.row = "metadata warm-up", .label = "held", .quiet = true}),
        metadata_pins);
  fs::ChangeWatcher::VisitCounters(watcher, visit);
  kernel_cache::KernelCache::VisitCounters(kernel_cache, visit);
  if (prefetch) {
    prefetch->VisitCounters(visit);
    visit(CounterInfo{"prefetch_threads", "Readahead threads (--prefetch).", kGauge}.Show(
              {.row = "readahead limits", .label = "threads"}),
          prefetch_threads);
    visit(CounterInfo{"prefetch_iops_limit",
                      "Readahead source reads per second allowed (0: no limit).", kGauge}
              .Show({.row = "readahead limits", .label = "reads/s"}),
          prefetch_iops_limit);
    visit(CounterInfo{"prefetch_bandwidth_limit",
                      "Readahead source bytes per second allowed (0: no limit).", kGauge}
              .Show({.row = "readahead limits", .label = "bytes/s"}),
          prefetch_bandwidth_limit);
    visit(
        CounterInfo{"prefetch_pacing", "Whether readahead is paced by the source's latency.", kFlag}
            .Show({.row = "readahead limits", .label = "paced"}),
        prefetch_pacing);
  }
  visit(CounterInfo{"daemon_rss_bytes", "Resident memory of the daemon.", kGauge,
                    "epochfs_daemon_rss_bytes"}
            .Show({.row = "daemon RSS", .label = "", .unit = kBytes, .top = true}),
        daemon_rss_bytes);
  visit(CounterInfo{"daemon_peak_rss_bytes", "Peak resident memory of the daemon.", kGauge,
                    "epochfs_daemon_peak_rss_bytes"}
            .Show({.row = "daemon RSS", .label = "peak", .unit = kBytes}),
        daemon_peak_rss_bytes);
}

nlohmann::json StatsSnapshotJson(const MountCounters& counters) {
  nlohmann::json j = nlohmann::json::object();
  counters.VisitCounters([&](const CounterInfo& info, const CounterValue& value) {
    nlohmann::json* slot = &j;
    size_t start = 0;
    for (size_t slash; (slash = info.name.find('/', start)) != std::string::npos;
         start = slash + 1) {
      slot = &(*slot)[info.name.substr(start, slash - start)];
    }
    std::visit([&](const auto& v) { (*slot)[info.name.substr(start)] = v; }, value);
  });
  return j;
}

void VisitAllCounters(const CounterVisitor& visit) {
  MountCounters all;
  all.prefetch.emplace();
  all.VisitCounters(visit);
}

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

namespace {

// The length of the valid UTF-8 sequence at the start of `s` (RFC 3629: no overlong
// forms, no surrogates, nothing above U+10FFFF), or 0 if it does not start with one.
size_t Utf8SequenceLength(std::string_view s) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const auto continuation = [&](size_t i) { return i < s.size() && (byte(i) & 0xC0) == 0x80; };
  const unsigned char lead = byte(0);
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return continuation(1) ? 2 : 0;
  if (lead >= 0xE0 && lead <= 0xEF) {
    if (!continuation(1) || !continuation(2)) return 0;
    if (lead == 0xE0 && byte(1) < 0xA0) return 0;   // overlong
    if (lead == 0xED && byte(1) >= 0xA0) return 0;  // a surrogate
    return 3;
  }
  if (lead >= 0xF0 && lead <= 0xF4) {
    if (!continuation(1) || !continuation(2) || !continuation(3)) return 0;
    if (lead == 0xF0 && byte(1) < 0x90) return 0;   // overlong
    if (lead == 0xF4 && byte(1) >= 0x90) return 0;  // above U+10FFFF
    return 4;
  }
  return 0;
}

}  // namespace

std::string EscapeLabelValue(const std::string& value) {
  // The exposition format is UTF-8, and a source path is whatever bytes its folder's
  // name has: each byte that is not part of valid UTF-8 becomes U+FFFD, as the stats
  // JSON's dump does.
  std::string out;
  std::string_view rest(value);
  while (!rest.empty()) {
    const size_t len = Utf8SequenceLength(rest);
    if (len == 0) {
      out += "\xEF\xBF\xBD";
      rest.remove_prefix(1);
      continue;
    }
    const char c = rest[0];
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out.append(rest.substr(0, len));
    }
    rest.remove_prefix(len);
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
  static const std::map<std::string, Family> families = Families();
  for (const char* name : kFamilyOrder) {
    auto it = families.find(name);
    if (it == families.end()) continue;
    const Family& family = it->second;
    std::string lines;
    for (const Sample& s : family.samples) {
      const std::string v = Value(stats, s.key);
      if (v.empty()) continue;
      lines += fmt::format("{}{{{}{}{}}} {}\n", name, mount, s.labels.empty() ? "" : ",",
                           s.labels, v);
    }
    if (lines.empty()) continue;
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, family.help, name, family.type);
    out += lines;
  }
  return out;
}

}  // namespace epochfs::daemon
