#include "fs/write_fence.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>

#include <cstring>

#include "fmt/format.h"
#include "spdlog/spdlog.h"

namespace epochfs::fs {

WriteFence::WriteFence(std::filesystem::path lease_through)
    : lease_through_(std::move(lease_through)) {
  if (!lease_through_.empty()) ::signal(SIGIO, SIG_IGN);
}

Result<WriteFence::Held> WriteFence::Enter(const InodeTable& inodes, Inode& node) {
  if (node.is_dir) return Status::InvalidArgument("a directory has no pages to fence");
  if (lease_through_.empty()) {
    if (node.open_for_writing.load() > 0) {
      return Status::Busy(fmt::format("node {} is open for writing", node.nodeid));
    }
    return Held();
  }
  return Lease(inodes, node);
}

Result<WriteFence::Held> WriteFence::Lease(const InodeTable& inodes, const Inode& node) {
  const std::string relative = inodes.PathOf(node);
  if (relative.empty()) return Status::NotFound(fmt::format("node {} has no name", node.nodeid));
  const std::filesystem::path path = lease_through_ / relative;
  // O_NOATIME: the daemon's own open is no access. Not following a symlink: the name may
  // have been renamed over by one underneath.
  int flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOATIME;
  UniqueFd fd(::open(path.c_str(), flags));
  if (!fd && errno == EPERM) fd.reset(::open(path.c_str(), flags & ~O_NOATIME));
  if (!fd) return Status::FromErrno(errno, fmt::format("open '{}' for its lease", path.string()));
  // The name may mean another file by now (renamed underneath): the mount shows the
  // source's inode numbers.
  // An inode's number and type never change: the kernel's cached attributes tell them,
  // with no GETATTR even where they expired (a drop just invalidated them).
  struct ::statx st {};
  if (::statx(fd.get(), "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, STATX_INO | STATX_TYPE, &st) != 0) {
    return Status::FromErrno(errno, "statx for a lease");
  }
  if (static_cast<uint64_t>(st.stx_ino) != node.ino || !S_ISREG(st.stx_mode)) {
    return Status::Stale(fmt::format("'{}' is no longer node {}", relative, node.nodeid));
  }
  if (::fcntl(fd.get(), F_SETLEASE, F_RDLCK) != 0) {
    if (errno == EAGAIN) {
      return Status::Busy(fmt::format("'{}' is open for writing", relative));
    }
    const int err = errno;
    // Leases off (fs.leases-enable = 0), or a daemon without CAP_LEASE on another's file:
    // no page of such a file is stored, and its pages are dropped unfenced (a change
    // underneath must reach readers). Said once.
    if (!lease_error_logged_.exchange(true)) {
      spdlog::warn("no read lease on '{}' ({}): files the kernel will not lease are not "
                   "pushed into its page cache, and a change underneath drops their pages "
                   "even while the mount writes them",
                   path.string(), std::strerror(err));
    }
    return Status::FromErrno(err, fmt::format("lease '{}'", path.string()));
  }
  return Held(std::move(fd));
}

}  // namespace epochfs::fs
