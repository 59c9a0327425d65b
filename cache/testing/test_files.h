// Test helpers: a temporary directory that removes itself, source files in it, and
// file contents (compressible and not).
//
// Thread-safety: TempDir is not thread-safe; the content generators are pure.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "cache/cache.h"
#include "base/unique_fd.h"

namespace epochfs::cache::testing {

// A fresh directory under /tmp, removed (recursively) on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// Writes `content` to `path` (replacing it). Aborts the test on failure.
void WriteFile(const std::filesystem::path& path, const std::string& content);
std::string ReadWholeFile(const std::filesystem::path& path);

// An open source file: the fd and its identity, as fs/ would pass them.
struct OpenSource {
  UniqueFd fd;
  SourceFile file;
};
OpenSource OpenSourceFile(const std::filesystem::path& path);

// `n` pseudo-random (incompressible) bytes.
std::string RandomBytes(size_t n, uint64_t seed);
// `n` bytes of repetitive text (lz4 shrinks it a lot).
std::string TextBytes(size_t n, uint64_t seed);

// Sleeps past the cache's "racily clean" window so that files just written are
// admitted by the cache.
void WaitUntilFilesSettle();

// How many pages of the file at `path` are in the page cache now (mincore).
size_t ResidentPages(const std::filesystem::path& path);

}  // namespace epochfs::cache::testing
