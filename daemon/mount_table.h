// Reading /proc/self/mountinfo: which epochfs mounts exist, and where.
//
// Thread-safety: pure functions.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace epochfs::daemon {

inline constexpr const char* kFsType = "fuse.epochfs";

struct MountEntry {
  std::string mountpoint;  // unescaped
  std::string fstype;
  std::string source;      // the "mount source" field (fsname)
  std::string device;      // "major:minor" of the mounted filesystem
  // The user who mounted it (a FUSE mount's "user_id=" option): its daemon's uid.
  std::optional<uid_t> owner_uid;
};

std::vector<MountEntry> ReadMountTable();
// The epochfs mounts on this machine, in mount order.
std::vector<MountEntry> EpochfsMounts();
// The mount visible at `mountpoint` (the last one mounted there), if any. The path is
// looked up as given first, and canonicalized only when that finds nothing: stat-ing a
// mountpoint can wait on its daemon, and a hung one must not hang the caller.
std::optional<MountEntry> VisibleMount(const std::filesystem::path& mountpoint);
bool IsEpochfsMount(const std::filesystem::path& mountpoint);

// Unescapes mountinfo's octal escapes (\040 for a space, ...).
std::string UnescapeMountField(const std::string& field);

}  // namespace epochfs::daemon
