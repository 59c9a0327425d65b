// Test helpers for the cache: source files opened as fs/ would pass them, the
// racily-clean wait, page-cache residency; the shared ones (TempDir, file contents)
// come from base/testing.
//
// Thread-safety: plain functions; each call stands alone.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "base/testing/test_files.h"
#include "cache/cache.h"
#include "base/unique_fd.h"

namespace epochfs::cache::testing {

using epochfs::testing::RandomBytes;
using epochfs::testing::ReadFile;
using epochfs::testing::TempDir;
using epochfs::testing::TextBytes;
using epochfs::testing::WriteFile;

// An open source file: the fd and its identity, as fs/ would pass them.
struct OpenSource {
  UniqueFd fd;
  SourceFile file;
};
OpenSource OpenSourceFile(const std::filesystem::path& path);

// Sleeps past the cache's "racily clean" window so that files just written are
// admitted by the cache.
void WaitUntilFilesSettle();

// How many pages of the file at `path` are in the page cache now (mincore).
size_t ResidentPages(const std::filesystem::path& path);

}  // namespace epochfs::cache::testing
