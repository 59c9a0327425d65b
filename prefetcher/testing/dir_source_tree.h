// DirSourceTree: a SourceTree over a plain directory, for the prefetcher's tests. It
// records the paths it was asked to open and to stat (in order) and can refuse to
// list, so a test can see exactly what readahead fetched and keep it off sequential
// readahead.
//
// Thread-safety: thread-safe.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "base/thread_annotations.h"
#include "prefetcher/source_tree.h"

namespace epochfs::prefetch::testing {

class DirSourceTree final : public SourceTree {
 public:
  // `root`: the directory paths are relative to (none: every call fails NotFound).
  // Without `can_list`, ListDir fails, which keeps readahead off the sequential pattern.
  explicit DirSourceTree(std::filesystem::path root = {}, bool can_list = true)
      : root_(std::move(root)), can_list_(can_list) {}

  Result<OpenedFile> Open(const std::string& path) const override;
  Result<cache::SourceIdentity> Stat(const std::string& path) const override;
  Result<std::vector<std::string>> ListDir(const std::string& dir) const override;

  // The paths Open was called with, in call order.
  std::vector<std::string> opened() const;
  // The paths Stat was called with, in call order.
  std::vector<std::string> stated() const;

 private:
  const std::filesystem::path root_;
  const bool can_list_;
  mutable Mutex mu_;
  mutable std::vector<std::string> opened_ GUARDED_BY(mu_);
  mutable std::vector<std::string> stated_ GUARDED_BY(mu_);
};

}  // namespace epochfs::prefetch::testing
