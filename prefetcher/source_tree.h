// SourceTree: the prefetcher's view of the source directory, by paths relative to its
// root ('/'-separated). The prefetcher reads ahead by name (a plan's entries, the next
// names of a directory), so it needs to open, identify and list files without going
// through the FUSE layer; fs/ implements this over the source root's fd (beneath the
// root, following no symlink), tests over a plain directory (prefetcher/testing/).
//
// Thread-safety: implementations must be thread-safe: readahead workers and OnRead
// callers use one concurrently.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"
#include "cache/cache.h"

namespace epochfs::prefetch {

// An open source file, for prefetching.
struct OpenedFile {
  UniqueFd fd;
  cache::SourceIdentity id;
};

class SourceTree {
 public:
  virtual ~SourceTree() = default;

  // Opens the regular file at `path` read-only.
  virtual Result<OpenedFile> Open(const std::string& path) const = 0;
  // The identity the regular file at `path` has now (as Open resolves it), without
  // opening it for reading.
  virtual Result<cache::SourceIdentity> Stat(const std::string& path) const = 0;
  // The names of the regular files in directory `dir` ("" = the root), sorted.
  virtual Result<std::vector<std::string>> ListDir(const std::string& dir) const = 0;
};

}  // namespace epochfs::prefetch
