// Folders the daemon keeps outside the source (the cache dir, /run/epochfs), made with
// explicit modes that no umask widens, and checked before use.
//
// Why: the cache holds the bytes and names of every file read through the mount,
// whatever the source's permissions said, so it must be readable by the daemon's user
// alone; and a folder where sockets live must not let another user remove or replace
// them. A folder an older version made too open is tightened, not trusted.
//
// Thread-safety: pure functions (each syscall on its own path).
#pragma once

#include <sys/types.h>

#include <filesystem>

#include "base/status.h"

namespace epochfs {

// Makes `dir` and its missing parents with `mode` (exactly: the umask does not apply),
// or, where `dir` exists, checks that it is a folder (a symlink to one counts) owned by this
// process's user, and takes away every permission bit `mode` does not grant. `*created`
// (may be null) says whether `dir` itself was made. Parents that exist are left as they
// are.
Status MakeOwnedDir(const std::filesystem::path& dir, mode_t mode, bool* created = nullptr);

// Takes group and other permissions away from everything under `dir` (files and
// folders; symlinks are not followed): a cache made by a version that created its files
// readable by anyone. Errors on single entries are skipped; the count of entries changed
// is returned.
Result<uint64_t> MakeTreePrivate(const std::filesystem::path& dir);

}  // namespace epochfs
