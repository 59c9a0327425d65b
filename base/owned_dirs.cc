#include "base/owned_dirs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <system_error>

#include "base/unique_fd.h"

namespace epochfs {
namespace fsys = std::filesystem;

namespace {

Status CheckAndNarrow(const fsys::path& dir, mode_t mode) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) {
    if (errno == ENOTDIR) return Status::InvalidArgument(dir.string() + " is not a folder");
    return Status::FromErrno(errno, "open " + dir.string());
  }
  struct ::stat st {};
  if (::fstat(fd.get(), &st) != 0) return Status::FromErrno(errno, "stat " + dir.string());
  if (st.st_uid != ::geteuid()) {
    return Status::FromErrno(
        EPERM, dir.string() + " belongs to uid " + std::to_string(st.st_uid) + ", not to uid " +
                   std::to_string(::geteuid()) + " that runs epochfs");
  }
  const mode_t now = st.st_mode & 07777;
  if ((now & ~mode) != 0 && ::fchmod(fd.get(), now & mode) != 0) {
    return Status::FromErrno(errno, "chmod " + dir.string());
  }
  return Status::Ok();
}

}  // namespace

Status MakeOwnedDir(const fsys::path& dir, mode_t mode, bool* created) {
  if (created) *created = false;
  std::error_code ec;
  const fsys::path absolute = fsys::absolute(dir, ec).lexically_normal();
  if (ec) return Status::FromErrno(ec.value(), "resolve " + dir.string());
  // From the topmost missing folder down, each made with `mode` and then set to it.
  fsys::path made;
  for (const auto& part : absolute) {
    made /= part;
    if (::mkdir(made.c_str(), mode) == 0) {
      if (::chmod(made.c_str(), mode) != 0) return Status::FromErrno(errno, "chmod " + made.string());
      if (made == absolute && created) *created = true;
    } else if (errno != EEXIST) {
      return Status::FromErrno(errno, "cannot create " + made.string());
    }
  }
  // A folder the administrator linked elsewhere is used where it lies; what is checked
  // and narrowed is that folder, with the fd the check opened.
  return CheckAndNarrow(absolute, mode);
}

Result<uint64_t> MakeTreePrivate(const fsys::path& dir) {
  std::error_code ec;
  uint64_t changed = 0;
  fsys::recursive_directory_iterator it(dir, fsys::directory_options::skip_permission_denied, ec);
  if (ec) return Status::FromErrno(ec.value(), "list " + dir.string());
  for (; it != fsys::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    struct ::stat st {};
    if (::lstat(it->path().c_str(), &st) != 0 || S_ISLNK(st.st_mode)) continue;
    if ((st.st_mode & 077) == 0) continue;
    if (::chmod(it->path().c_str(), st.st_mode & 07700) == 0) changed++;
  }
  return changed;
}

}  // namespace epochfs
