// `epochfs top MOUNTPOINT`: a live view of one mount, redrawn every interval.
//
// Each frame compares two stats snapshots (daemon/metrics.h) taken `interval` apart and
// shows the counters the registry marks for it (CounterDisplay::top), on the rows
// `epochfs status` uses (cli/counter_view.h): a counter as its rate over the interval
// and its total since mount, a row's parts (RAM hits, SSD hits, misses) as their sum
// per second and their shares, request kinds as the three busiest, levels (tier use
// against budget, the consistency mode, the epoch pattern the prefetcher detects) as
// they are now. On a terminal the screen is cleared before each frame; otherwise
// frames are plain text separated by a blank line, so `epochfs top ... > log` stays
// readable.
//
// Thread-safety: RunTop blocks the calling thread.
#pragma once

#include <cstdio>
#include <functional>
#include <string>

#include "base/status.h"
#include "nlohmann/json.hpp"

namespace epochfs::cli {

struct TopOptions {
  double interval_s = 1.0;
  bool once = false;  // one frame (two snapshots `interval` apart), then return
};

// One frame from the snapshots `before` and `after`, `seconds` apart.
std::string TopFrame(const nlohmann::json& before, const nlohmann::json& after, double seconds);

// Draws frames to `out` until `read_stats` fails (the mount went away: returns 1) or,
// with `once`, after one frame (returns 0).
int RunTop(const TopOptions& options, const std::function<Result<nlohmann::json>()>& read_stats,
           FILE* out);

}  // namespace epochfs::cli
