// Metrics: one snapshot of a mount's counters, rendered for people and machines.
//
// The snapshot is the JSON object that `.epochfs/stats` serves: MountCounters walks
// every layer's counters (base/counters.h) and StatsSnapshotJson turns the walk into
// JSON. `epochfs status`, `epochfs top`, the Prometheus endpoint and the node-exporter
// textfile all render that same object, so the numbers never disagree.
// Prometheus output follows the text exposition format 0.0.4: `# HELP`, `# TYPE`, then
// samples labelled with the mountpoint. Only the counters whose CounterInfo names a
// Prometheus family are exported, never file names or contents (docs/operations.md,
// "What the counters expose").
//
// Thread-safety: pure functions; MountCounters is a plain value (its two pointers are
// to lock-free counters).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "base/counters.h"
#include "cache/cache.h"
#include "nlohmann/json.hpp"
#include "prefetcher/prefetcher.h"

namespace epochfs::fs {
class ChangeWatcher;
class SourceFs;
class RequestCounters;
}  // namespace epochfs::fs
namespace epochfs::kernel_cache {
class KernelCache;
}  // namespace epochfs::kernel_cache

namespace epochfs::daemon {

// One mount's counters: what the mount knows itself (its options, its process), and
// the layers' own stats, which name their counters themselves.
struct MountCounters {
  std::string version, source, mountpoint, cache_dir, consistency;
  std::string isatty;  // who answers TCGETS on the mount (daemon/isatty_guard.h)
  uint64_t pid = 0;
  bool read_only = false;
  bool parallel_lookups = false;  // FUSE_PARALLEL_DIROPS granted (fs/init_reply.h)
  bool passthrough = false;       // FUSE_PASSTHROUGH granted (fs/init_reply.h)
  bool fuse_uring = false;        // FUSE_OVER_IO_URING granted (fs/fuse_uring.h)
  uint64_t fuse_uring_requests = 0;
  double uptime_s = 0;
  const fs::RequestCounters* requests = nullptr;  // null: every kind 0
  cache::CacheStats cache;
  uint64_t ram_budget_bytes = 0;       // --ram
  uint64_t ram_tier_budget_bytes = 0;  // the part of --ram the RAM tier may fill now
  uint64_t ram_tier_share_bytes = 0;   // its own share: the least it gets (daemon/ram_balancer.h)
  uint64_t ssd_write_queue_bytes = 0;  // the part of --ram for chunks on their way to SSD
  uint64_t ssd_budget_bytes = 0;       // --disk
  const fs::SourceFs* fs = nullptr;              // null: its counts 0
  uint64_t inodes = 0;
  bool metadata_warmup = false;  // the warm-up is opening recorded files now
  uint64_t metadata_warmed = 0, metadata_pins = 0;
  const fs::ChangeWatcher* watcher = nullptr;  // null: not in notify mode, every count 0
  const kernel_cache::KernelCache* kernel_cache = nullptr;  // null: every count 0
  // Without a prefetcher the snapshot has none of its keys (nor the four below).
  std::optional<prefetch::PrefetcherStats> prefetch;
  uint64_t prefetch_threads = 0, prefetch_iops_limit = 0, prefetch_bandwidth_limit = 0;
  bool prefetch_pacing = false;
  uint64_t daemon_rss_bytes = 0, daemon_peak_rss_bytes = 0;

  // Every counter of the snapshot, the layers' included.
  void VisitCounters(const CounterVisitor& visit) const;
};

// The stats snapshot: one key per counter visited (nested where its name has a '/').
nlohmann::json StatsSnapshotJson(const MountCounters& counters);

// Every counter a snapshot can hold (a MountCounters with a prefetcher), values 0:
// what the Prometheus exporter and the tests walk to know the names.
void VisitAllCounters(const CounterVisitor& visit);

// The Prometheus text exposition of one stats snapshot. Keys missing from `stats`
// give no sample; families are emitted in a fixed order.
std::string PrometheusText(const nlohmann::json& stats);

// One line for `systemctl status` (sd_notify STATUS=): hit ratio, source reads, tier
// use, e.g. "Serving /data/x: 97.5% hits (RAM 80.0%, SSD 17.5%), 1.2k source reads,
// SSD 1.5 GiB of 200.0 GiB".
std::string ServiceStatusLine(const nlohmann::json& stats);

// `value` escaped for use inside a label's double quotes.
std::string EscapeLabelValue(const std::string& value);

}  // namespace epochfs::daemon
