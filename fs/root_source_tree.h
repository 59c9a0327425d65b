// RootSourceTree: the prefetcher's SourceTree over the source root's O_PATH fd. Every
// path is checked as a plan path (prefetch::PlanParser::CheckPath) and opened with
// OpenBeneath (fs/open_beneath.h), so no plan entry or directory listing can reach
// anything outside the source or follow a symlink.
//
// It holds its own fd of the root (a dup of the one SourceFs gets), so it depends on
// nothing else of fs/ and can be made before the prefetcher, which SourceFs reports to.
//
// Thread-safety: thread-safe (no mutable state).
#pragma once

#include <string>
#include <vector>

#include "base/unique_fd.h"
#include "prefetcher/source_tree.h"

namespace epochfs::fs {

class RootSourceTree final : public prefetch::SourceTree {
 public:
  // `root_fd`: an O_PATH fd of the source directory, taken before mounting.
  explicit RootSourceTree(UniqueFd root_fd) : root_fd_(std::move(root_fd)) {}

  Result<prefetch::OpenedFile> Open(const std::string& path) const override;
  Result<cache::SourceIdentity> Stat(const std::string& path) const override;
  Result<std::vector<std::string>> ListDir(const std::string& dir) const override;

 private:
  const UniqueFd root_fd_;
};

}  // namespace epochfs::fs
