// Test helpers for loader/ tests: counters of the process's fds and threads for leak
// checks (TempDir and file contents come from base/testing). Test-only; not in
// epochfs_loader.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/testing/test_files.h"

namespace epochfs::loader::testing {

using epochfs::testing::RandomBytes;
using epochfs::testing::ReadFile;
using epochfs::testing::TempDir;
using epochfs::testing::WriteFile;

// Entries in /proc/self/fd and /proc/self/task.
int CountOpenFds();
int CountThreads();
// Polls until CountThreads() <= n (io_uring workers exit asynchronously); returns the
// last count.
int WaitForThreadsAtMost(int n, int timeout_ms = 5000);

}  // namespace epochfs::loader::testing
