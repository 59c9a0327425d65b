// Metrics: one snapshot of a mount's counters, rendered for people and machines.
//
// The snapshot is the JSON object that `.epochfs/stats` serves (built in
// daemon/mount.cc); `epochfs status`, `epochfs top`, the Prometheus endpoint and the
// node-exporter textfile all render that same object, so the numbers never disagree
// and a key added to the snapshot (the prefetcher's `pattern`) reaches all of them.
// Prometheus output follows the text exposition format 0.0.4: `# HELP`, `# TYPE`, then
// samples labelled with the mountpoint. Only counters and sizes are exported, never
// file names or contents (docs/operations.md, "What the counters expose").
//
// Thread-safety: pure functions.
#pragma once

#include <string>

#include "nlohmann/json.hpp"

namespace epochfs::daemon {

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
