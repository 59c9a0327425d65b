// SourceFs: paths relative to the source root, for the plan file. Every open goes
// through OpenBeneath (fs/open_beneath.h) from the root's O_PATH fd, so no plan entry
// can name anything outside the source.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include "fmt/format.h"
#include "fs/open_beneath.h"
#include "fs/source_fs.h"
#include "prefetcher/plan_parser.h"

namespace epochfs::fs {
namespace {

bool MayAccess(const struct ::stat& st, Caller caller, mode_t user_bit) {
  if (caller.uid == 0) return true;
  const mode_t shift = st.st_uid == caller.uid ? 0 : st.st_gid == caller.gid ? 3 : 6;
  return (st.st_mode & (user_bit >> shift)) != 0;
}

// Whether `caller` may search `folder` (relative to the source root `root`; "" is the
// root itself), as an open() beneath it would need.
Status CheckFolder(int root, const std::string& folder, Caller caller) {
  struct ::stat dst {};
  if (folder.empty()) {
    if (::fstat(root, &dst) < 0 || !MayAccess(dst, caller, S_IXUSR)) {
      return Status::FromErrno(EACCES, "the writer may not search the source root");
    }
    return Status();
  }
  if (::fstatat(root, folder.c_str(), &dst, AT_SYMLINK_NOFOLLOW) < 0) {
    return Status::NotFound(fmt::format("'{}': no such folder", folder));
  }
  if (!S_ISDIR(dst.st_mode)) return Status::InvalidArgument(fmt::format("'{}' is not a folder", folder));
  if (!MayAccess(dst, caller, S_IXUSR)) {
    return Status::FromErrno(EACCES, fmt::format("'{}': the writer may not search it", folder));
  }
  return Status();
}

// Whether `caller` may search every folder on the way to `path`: the root, then each
// folder before a '/'. `folders` (optional) remembers the answers for the next paths.
Status CheckFoldersOnTheWay(int root, const std::string& path, Caller caller,
                            SourceFs::CheckedFolders* folders) {
  auto checked = [&](const std::string& folder) -> Status {
    if (folders == nullptr) return CheckFolder(root, folder, caller);
    auto it = folders->find(folder);
    if (it == folders->end()) it = folders->emplace(folder, CheckFolder(root, folder, caller)).first;
    return it->second;
  };
  EPOCHFS_RETURN_IF_ERROR(checked(""));
  for (size_t slash = path.find('/'); slash != std::string::npos; slash = path.find('/', slash + 1)) {
    EPOCHFS_RETURN_IF_ERROR(checked(path.substr(0, slash)));
  }
  return Status();
}

}  // namespace

void SourceFs::ListPlanFolder(const std::string& folder, Caller caller, uint64_t max_entries) const {
  const int root = inodes_.root()->path_fd.get();
  // The folder itself too: it is on the way to its entries.
  if (!CheckFoldersOnTheWay(root, folder.empty() ? folder : folder + "/", caller, nullptr).ok()) {
    return;
  }
  auto fd = OpenBeneath(root, folder.empty() ? "." : folder, O_RDONLY | O_DIRECTORY);
  if (!fd.ok()) return;
  DIR* dir = ::fdopendir(fd->get());
  if (dir == nullptr) return;
  (void)fd->release();  // the DIR owns it now
  for (uint64_t n = 0; n < max_entries && ::readdir(dir) != nullptr; ++n) {
  }
  ::closedir(dir);
}

std::string SourceFs::RelativePath(const Inode& inode) const { return inodes_.PathOf(inode); }

Result<prefetch::PlannedFile> SourceFs::ResolvePlanEntry(const std::string& path, Caller caller,
                                                         CheckedFolders* folders) const {
  EPOCHFS_RETURN_IF_ERROR(prefetch::PlanParser::CheckPath(path, PATH_MAX));
  const int root = inodes_.root()->path_fd.get();
  // The folders on the way must be searchable by the writer, as for an open(); checked
  // first, so a refused plan says nothing about what lies in a folder it cannot search.
  EPOCHFS_RETURN_IF_ERROR(CheckFoldersOnTheWay(root, path, caller, folders));
  auto fd = OpenBeneath(root, path, O_PATH);
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
