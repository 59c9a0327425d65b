#include "fs/root_source_tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include "fmt/format.h"
#include "fs/open_beneath.h"
#include "prefetcher/plan_parser.h"

namespace epochfs::fs {
namespace {

// The regular file at `path` (relative, checked) beneath the root, opened with `flags`
// (O_PATH when only its identity is wanted: no data is read), and its identity.
Result<std::pair<UniqueFd, cache::SourceIdentity>> OpenRegularBeneath(int root_fd,
                                                                      const std::string& path,
                                                                      int flags) {
  EPOCHFS_RETURN_IF_ERROR(prefetch::PlanParser::CheckPath(path, PATH_MAX));
  auto fd = OpenBeneath(root_fd, path, flags);
  if (!fd.ok()) return fd.status();
  auto st = cache::StatForIdentity(fd->get());
  if (!st.ok()) return st.status();
  if (!S_ISREG(st->st_mode)) return Status::InvalidArgument(fmt::format("'{}' is not a regular file", path));
  return std::make_pair(std::move(*fd), cache::SourceIdentity::FromStat(*st));
}

}  // namespace

Result<prefetch::OpenedFile> RootSourceTree::Open(const std::string& path) const {
  auto opened = OpenRegularBeneath(root_fd_.get(), path, O_RDONLY);
  if (!opened.ok()) return opened.status();
  return prefetch::OpenedFile{std::move(opened->first), opened->second};
}

Result<cache::SourceIdentity> RootSourceTree::Stat(const std::string& path) const {
  auto opened = OpenRegularBeneath(root_fd_.get(), path, O_PATH);
  if (!opened.ok()) return opened.status();
  return opened->second;
}

Result<std::vector<std::string>> RootSourceTree::ListDir(const std::string& dir) const {
  UniqueFd fd;
  if (dir.empty()) {
    fd = UniqueFd(::openat(root_fd_.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd) return Status::FromErrno(errno, "open source root");
  } else {
    EPOCHFS_RETURN_IF_ERROR(prefetch::PlanParser::CheckPath(dir, PATH_MAX));
    auto opened = OpenBeneath(root_fd_.get(), dir, O_RDONLY | O_DIRECTORY);
    if (!opened.ok()) return opened.status();
    fd = std::move(*opened);
  }
  DIR* d = ::fdopendir(fd.get());
  if (!d) return Status::FromErrno(errno, "fdopendir " + dir);
  (void)fd.release();  // owned by `d` now
  std::vector<std::string> names;
  while (struct dirent* e = ::readdir(d)) {
    if (e->d_type == DT_REG) names.emplace_back(e->d_name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace epochfs::fs
