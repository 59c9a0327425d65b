#include "fs/open_beneath.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>

#include "fmt/format.h"
#include "spdlog/spdlog.h"

namespace epochfs::fs {
namespace {

// The fallback without openat2: every folder on the way is opened with O_NOFOLLOW, so
// no symlink is ever followed, and `..` is refused outright (openat2 allows a `..` that
// stays beneath; no caller passes one).
int OpenByComponents(int dir_fd, const std::string& path, int flags, mode_t mode) {
  if (path.empty() || path.front() == '/') {
    errno = path.empty() ? ENOENT : EXDEV;
    return -1;
  }
  UniqueFd dir;  // the folder reached so far (dir_fd until the first '/')
  size_t start = 0;
  while (true) {
    const size_t slash = path.find('/', start);
    const std::string name =
        path.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    if (name == "..") {
      errno = EXDEV;
      return -1;
    }
    const int at = dir ? dir.get() : dir_fd;
    if (slash == std::string::npos) return ::openat(at, name.c_str(), flags, mode);
    if (!name.empty() && name != ".") {
      UniqueFd next(::openat(at, name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!next) {
        const int err = errno;
        struct ::stat st {};
        // A symlinked folder fails as "not a folder"; openat2 calls it a loop.
        const bool is_link = err == ENOTDIR &&
                             ::fstatat(at, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                             S_ISLNK(st.st_mode);
        errno = is_link ? ELOOP : err;
        return -1;
      }
      dir = std::move(next);
    }
    start = slash + 1;
  }
}

}  // namespace

Result<UniqueFd> OpenBeneath(int dir_fd, const std::string& path, int flags, mode_t mode) {
  static std::atomic<bool> have_openat2{true};
  flags |= O_CLOEXEC | O_NOFOLLOW;
  mode = (flags & (O_CREAT | O_TMPFILE)) ? (mode & 07777) : 0;
  if (have_openat2.load(std::memory_order_relaxed)) {
    struct open_how how {};
    how.flags = static_cast<uint64_t>(flags);
    how.mode = mode;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_SYMLINKS;
    long fd = ::syscall(SYS_openat2, dir_fd, path.c_str(), &how, sizeof(how));
    if (fd >= 0) return UniqueFd(static_cast<int>(fd));
    if (errno != ENOSYS) return Status::FromErrno(errno, fmt::format("open '{}'", path));
    if (have_openat2.exchange(false, std::memory_order_relaxed)) {
      spdlog::warn("the kernel has no openat2: source paths are opened one component at a time");
    }
  }
  return OpenBeneathWithoutOpenat2(dir_fd, path, flags, mode);
}

Result<UniqueFd> OpenBeneathWithoutOpenat2(int dir_fd, const std::string& path, int flags,
                                           mode_t mode) {
  flags |= O_CLOEXEC | O_NOFOLLOW;
  mode = (flags & (O_CREAT | O_TMPFILE)) ? (mode & 07777) : 0;
  int fd = OpenByComponents(dir_fd, path, flags, mode);
  if (fd < 0) return Status::FromErrno(errno, fmt::format("open '{}'", path));
  return UniqueFd(fd);
}

}  // namespace epochfs::fs
