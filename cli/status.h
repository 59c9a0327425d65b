// `epochfs status`: the counters of one mount or of every epochfs mount, as a table or
// as the JSON the daemon serves (MOUNTPOINT/.epochfs/stats), and the number formats
// that `status` and `top` share.
//
// Thread-safety: plain functions; RunStatus prints to stdout and stderr.
#pragma once

#include <filesystem>
#include <string>

#include "base/status.h"
#include "nlohmann/json.hpp"

namespace epochfs::cli {

// The stats snapshot of the epochfs mount at `mountpoint`, or why there is none
// (kInvalidArgument: not an epochfs mount).
Result<nlohmann::json> ReadStats(const std::filesystem::path& mountpoint);

// `epochfs status [MOUNTPOINT] [--json]`. Without a mountpoint, every epochfs mount; a
// daemon that does not answer is reported, and is no failure of this command. Returns
// the exit code.
int RunStatus(const std::string& mountpoint, bool json);

// The table `epochfs status` prints for one snapshot: a title, then one line per row
// of the counter registry (cli/counter_view.h) with every counter the snapshot holds.
std::string StatusTable(const nlohmann::json& stats);

// "512 B", "1.5 GiB".
std::string FormatBytes(double bytes);
// "97.5%" of `whole`; "-" when there is no whole.
std::string FormatShare(double part, double whole);

}  // namespace epochfs::cli
