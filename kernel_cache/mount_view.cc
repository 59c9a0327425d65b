#include "kernel_cache/mount_view.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <sys/sysmacros.h>

#include <cerrno>
#include <cstring>

#include "fmt/format.h"
#include "spdlog/spdlog.h"

namespace epochfs::kernel_cache {

Result<MountView> MountView::Of(std::filesystem::path mountpoint) {
  struct ::stat st {};
  if (::stat(mountpoint.c_str(), &st) != 0) {
    return Status::FromErrno(errno, fmt::format("stat {}", mountpoint.string()));
  }
  return MountView(std::move(mountpoint), st.st_dev);
}

Result<UniqueFd> MountView::Open(const std::string& relative, int flags) const {
  flags |= O_CLOEXEC;
  const char* below = relative.empty() ? "." : relative.c_str();
  UniqueFd fd;
  if (private_clones()) {
    UniqueFd clone(::open_tree(AT_FDCWD, mountpoint_.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC));
    if (clone) {
      // The clone itself goes when `clone` closes; what `fd` opened holds it until then.
      fd.reset(::openat(clone.get(), below, flags));
    } else if (errno == EPERM || errno == ENOSYS || errno == EINVAL) {
      spdlog::info("cannot clone the mount at {} ({}): the daemon's listings open it by path, "
                   "and an unmount during one is busy for that moment",
                   mountpoint_.string(), std::strerror(errno));
      clones_.store(false, std::memory_order_relaxed);
    } else {
      return Status::FromErrno(errno, fmt::format("clone the mount at {}", mountpoint_.string()));
    }
  }
  if (!private_clones()) {
    fd.reset(::open(relative.empty() ? mountpoint_.c_str() : (mountpoint_ / relative).c_str(), flags));
  }
  if (!fd) return Status::FromErrno(errno, fmt::format("open {} below {}", below, mountpoint_.string()));
  // The device comes from the superblock: no GETATTR, whatever the attributes' age.
  struct ::statx st {};
  if (::statx(fd.get(), "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, 0, &st) != 0) {
    return Status::FromErrno(errno, "statx");
  }
  if (makedev(st.stx_dev_major, st.stx_dev_minor) != dev_) {
    return Status::NotFound(fmt::format("{} is no longer mounted", mountpoint_.string()));
  }
  return fd;
}

}  // namespace epochfs::kernel_cache
