// OpenBeneath: the one way fs/ opens a name in the source, so that nothing a request
// or a plan names can lead outside it.
//
// openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_SYMLINKS) refuses `..`
// that leaves the start directory, absolute paths, magic links and symlinks in any
// component. Kernels older than 5.6 lack openat2 (ENOSYS, probed once and logged): the
// fallback walks the path one component at a time with O_NOFOLLOW, refusing absolute
// paths and `..` (EXDEV) and a symlinked folder (ELOOP), which gives the same guarantee.
// Either way a trailing symlink is refused (ELOOP), except with O_PATH, which opens the
// link itself, as openat2 does.
//
// Thread-safety: thread-safe.
#pragma once

#include <sys/types.h>

#include <string>

#include "base/status.h"
#include "base/unique_fd.h"

namespace epochfs::fs {

// Opens `path` (relative, one or more components) beneath `dir_fd` with `flags`
// (O_CLOEXEC and O_NOFOLLOW are added) and, for O_CREAT or O_TMPFILE, `mode` (its
// permission bits only: FUSE passes the file type in it too).
Result<UniqueFd> OpenBeneath(int dir_fd, const std::string& path, int flags, mode_t mode = 0);

// The fallback alone, as OpenBeneath does it without openat2: for tests, which cannot
// take openat2 away.
Result<UniqueFd> OpenBeneathWithoutOpenat2(int dir_fd, const std::string& path, int flags,
                                           mode_t mode = 0);

}  // namespace epochfs::fs
