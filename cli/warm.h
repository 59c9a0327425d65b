// `epochfs warm MOUNTPOINT [PATH...]`: loads a tree into the cache by reading every
// file through the mount, so the daemon caches it as it would for a reader.
//
// Parallel (`threads` readers), and resumable by construction: a file already in the
// SSD tier is read back as a cheap SSD (or RAM) hit and never touches the source, so
// running warm again after an interruption only fetches what is missing; the summary
// says how much came from the source and how much was already cached (the daemon's
// counters, before and after). If the cache disk falls behind and chunks are dropped
// on their way to the SSD tier, it reads everything again (at most 3 passes; stored
// files are cheap hits) unless the tier is full or degraded. Without --ram the pages are dropped from the kernel's
// page cache after each file (POSIX_FADV_DONTNEED), so warming does not push a
// running job's pages out; with --ram they are kept, and the daemon's RAM tier fills
// while it has room. Progress: a redrawn bar (files, bytes, rate, ETA) on a terminal,
// a plain line every few seconds otherwise.
//
// Thread-safety: RunWarm blocks and runs its own reader threads.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace epochfs::cli {

struct WarmOptions {
  std::filesystem::path mountpoint;
  std::vector<std::string> paths;  // inside the mount (relative to it, or absolute); empty = all
  bool ram = false;
  unsigned threads = 8;
  double report_interval_s = 5.0;  // plain progress lines when not on a terminal
};

// Returns the process exit code (0: every file read; 1: some failed; 2: bad arguments).
int RunWarm(const WarmOptions& options);

}  // namespace epochfs::cli
