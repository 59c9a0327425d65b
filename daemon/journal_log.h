// Logging to the systemd journal with levels.
//
// Under systemd the daemon runs in the foreground and logs to stderr, which the
// journal collects. A line that starts with "<N>" (sd-daemon(3) syslog priority
// prefixes) gets priority N, so `journalctl -p warning -u epochfs@...` works; the
// journal adds its own timestamp and identifier, so the line carries neither.
//
// Thread-safety: call once at start-up, before other threads log.
#pragma once

#include <memory>

#include "spdlog/formatter.h"

namespace epochfs::daemon {

// Whether stderr is the journal stream systemd handed us ($JOURNAL_STREAM names the
// device and inode of that stream).
bool StderrIsJournal();

// A formatter writing "<priority>message" (error 3, warn 4, info 6, debug and trace 7).
std::unique_ptr<spdlog::formatter> JournalFormatter();

}  // namespace epochfs::daemon
