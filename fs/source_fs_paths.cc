// SourceFs: paths relative to the source root, for the prefetcher and the plan file.
// Every open goes through openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS) from the root's
// O_PATH fd, so no plan entry can name anything outside the source.
#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include "fmt/format.h"
#include "fs/source_fs.h"
#include "prefetcher/plan_parser.h"

namespace epochfs::fs {
namespace {

Result<UniqueFd> OpenBeneathRoot(int root_fd, const std::string& path, int flags) {
  struct open_how how {};
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC | O_NOFOLLOW);
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_SYMLINKS;
  long fd = ::syscall(SYS_openat2, root_fd, path.c_str(), &how, sizeof(how));
  if (fd < 0) return Status::FromErrno(errno, fmt::format("open '{}'", path));
  return UniqueFd(static_cast<int>(fd));
}

bool MayAccess(const struct ::stat& st, Caller caller, mode_t user_bit) {
  if (caller.uid == 0) return true;
  const mode_t shift = st.st_uid == caller.uid ? 0 : st.st_gid == caller.gid ? 3 : 6;
  return (st.st_mode & (user_bit >> shift)) != 0;
}

}  // namespace

std::string SourceFs::RelativePath(const Inode& inode) const {
  std::vector<std::string> parts;
  Location loc = inodes_.LocationOf(inode);
  while (loc.parent) {
    parts.push_back(std::move(loc.name));
    const Inode& parent = *loc.parent;
    if (parent.nodeid == kRootNodeId) break;
    loc = inodes_.LocationOf(parent);
  }
  std::string path;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
    if (!path.empty()) path += '/';
    path += *it;
  }
  return path;
}

namespace {

// The regular file at `path` (relative, checked) beneath the root, opened with `flags`
// (O_PATH when only its identity is wanted: no data is read), and its identity.
Result<std::pair<UniqueFd, cache::SourceIdentity>> OpenRegularBeneath(int root_fd,
                                                                      const std::string& path,
                                                                      int flags) {
  EPOCHFS_RETURN_IF_ERROR(prefetch::PlanParser::CheckPath(path, PATH_MAX));
  auto fd = OpenBeneathRoot(root_fd, path, flags);
  if (!fd.ok()) return fd.status();
  struct ::stat st {};
  if (::fstat(fd->get(), &st) < 0) return Status::FromErrno(errno, "fstat " + path);
  if (!S_ISREG(st.st_mode)) return Status::InvalidArgument(fmt::format("'{}' is not a regular file", path));
  return std::make_pair(std::move(*fd), cache::SourceIdentity::FromStat(st));
}

}  // namespace

Result<prefetch::OpenedFile> SourceFs::OpenRelative(const std::string& path) const {
  auto opened = OpenRegularBeneath(inodes_.root()->path_fd.get(), path, O_RDONLY);
  if (!opened.ok()) return opened.status();
  return prefetch::OpenedFile{std::move(opened->first), opened->second};
}

Result<cache::SourceIdentity> SourceFs::StatRelative(const std::string& path) const {
  auto opened = OpenRegularBeneath(inodes_.root()->path_fd.get(), path, O_PATH);
  if (!opened.ok()) return opened.status();
  return opened->second;
}

Result<std::vector<std::string>> SourceFs::ListRelativeDir(const std::string& dir) const {
  const int root = inodes_.root()->path_fd.get();
  UniqueFd fd;
  if (dir.empty()) {
    fd = UniqueFd(::openat(root, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd) return Status::FromErrno(errno, "open source root");
  } else {
    EPOCHFS_RETURN_IF_ERROR(prefetch::PlanParser::CheckPath(dir, PATH_MAX));
    auto opened = OpenBeneathRoot(root, dir, O_RDONLY | O_DIRECTORY);
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

Result<prefetch::PlannedFile> SourceFs::ResolvePlanEntry(const std::string& path,
                                                         Caller caller) const {
  EPOCHFS_RETURN_IF_ERROR(prefetch::PlanParser::CheckPath(path, PATH_MAX));
  const int root = inodes_.root()->path_fd.get();
  // The folders on the way must be searchable by the writer, as for an open(); checked
  // first, so a refused plan says nothing about what lies in a folder it cannot search.
  struct ::stat dst {};
  if (::fstat(root, &dst) < 0 || !MayAccess(dst, caller, S_IXUSR)) {
    return Status::FromErrno(EACCES, "the writer may not search the source root");
  }
  for (size_t slash = path.find('/'); slash != std::string::npos; slash = path.find('/', slash + 1)) {
    if (::fstatat(root, path.substr(0, slash).c_str(), &dst, AT_SYMLINK_NOFOLLOW) < 0) {
      return Status::NotFound(fmt::format("'{}': no such folder", path.substr(0, slash)));
    }
    if (!S_ISDIR(dst.st_mode)) {
      return Status::InvalidArgument(fmt::format("'{}' is not a folder", path.substr(0, slash)));
    }
    if (!MayAccess(dst, caller, S_IXUSR)) {
      return Status::FromErrno(EACCES, fmt::format("'{}': the writer may not search its folder", path));
    }
  }
  auto fd = OpenBeneathRoot(root, path, O_PATH);
  if (!fd.ok()) {
    if (fd.status().err() == ENOENT) return Status::NotFound(fmt::format("'{}': no such file", path));
    if (fd.status().err() == EXDEV || fd.status().err() == ELOOP) {
      return Status::InvalidArgument(fmt::format("'{}' leaves the source or is a symlink", path));
    }
    return fd.status();
  }
  struct ::stat st {};
  if (::fstat(fd->get(), &st) < 0) return Status::FromErrno(errno, "fstat " + path);
  if (!S_ISREG(st.st_mode)) return Status::InvalidArgument(fmt::format("'{}' is not a regular file", path));
  if (!MayAccess(st, caller, S_IRUSR)) {
    return Status::FromErrno(EACCES, fmt::format("'{}': the writer may not read it", path));
  }
  return prefetch::PlannedFile{path,
                               prefetch::FileKey{static_cast<uint64_t>(st.st_dev),
                                                 static_cast<uint64_t>(st.st_ino)},
                               static_cast<uint64_t>(st.st_size)};
}

}  // namespace epochfs::fs
