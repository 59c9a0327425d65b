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

Result<std::unique_ptr<MountView>> MountView::Of(std::filesystem::path mountpoint) {
  struct ::stat st {};
  if (::stat(mountpoint.c_str(), &st) != 0) {
    return Status::FromErrno(errno, fmt::format("stat {}", mountpoint.string()));
  }
  return std::unique_ptr<MountView>(new MountView(std::move(mountpoint), st.st_dev));
}

Result<UniqueFd> MountView::Open(const std::string& relative, int flags) const {
  flags |= O_CLOEXEC;
  const char* below = relative.empty() ? "." : relative.c_str();
  UniqueFd fd;
  bool by_path = !private_clones();
  if (!by_path) {
    UniqueFd clone(::open_tree(AT_FDCWD, mountpoint_.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC));
    if (clone) {
      // The clone itself goes when `clone` closes; what `fd` opened holds it until then.
      fd.reset(::openat(clone.get(), below, flags));
    } else if (errno == EPERM || errno == ENOSYS) {
      // No right to clone (not root), or a kernel before 5.2: never will.
      spdlog::info("cannot clone the mount at {} ({}): the daemon's listings open it by path, "
                   "and an unmount during one is busy for that moment",
                   mountpoint_.string(), std::strerror(errno));
      clones_.store(false, std::memory_order_relaxed);
      by_path = true;
    } else {
      // This path only, now (e.g. what is there after an unmount cannot be cloned): by
      // path, and the device check below tells which.
      by_path = true;
    }
  }
  if (by_path) {
    fd.reset(::open(relative.empty() ? mountpoint_.c_str() : (mountpoint_ / relative).c_str(), flags));
  }
  if (!fd) return Status::FromErrno(errno, fmt::format("open {} below {}", below, mountpoint_.string()));
  if (!OnTheMount(fd.get(), "")) {
    return Status::NotFound(fmt::format("{} is no longer mounted", mountpoint_.string()));
  }
  return fd;
}

bool MountView::OnTheMount(int dir_fd, const char* path) const {
  // The device comes from the superblock: no GETATTR, whatever the attributes' age.
  struct ::statx st {};
  if (::statx(dir_fd, path, (*path == '\0' ? AT_EMPTY_PATH : 0) | AT_STATX_DONT_SYNC, 0, &st) != 0) {
    return false;
  }
  return makedev(st.stx_dev_major, st.stx_dev_minor) == dev_;
}

bool MountView::StillMounted() const { return OnTheMount(AT_FDCWD, mountpoint_.c_str()); }

}  // namespace epochfs::kernel_cache
