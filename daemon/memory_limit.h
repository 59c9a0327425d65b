// The memory limit the daemon runs under: training jobs run in memory cgroups
// (containers, job schedulers), and a daemon whose --ram does not fit its cgroup's limit
// is OOM-killed and leaves a dead mount behind. `epochfs mount` refuses such a --ram up
// front instead (daemon::ResolveAndValidate).
//
// Thread-safety: plain functions over files; safe from any thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace epochfs::daemon {

struct MemoryLimit {
  uint64_t bytes = 0;
  std::string cgroup;  // the cgroup that sets it, for the message
};

// The smallest memory limit on the way from the cgroup named in `proc_self_cgroup` (the
// text of /proc/self/cgroup) up to `cgroup_root`: v1's memory.limit_in_bytes under
// `cgroup_root`/memory, or v2's memory.max under `cgroup_root`. Nothing when no limit
// is set, or none can be read.
std::optional<MemoryLimit> CgroupMemoryLimit(const std::string& proc_self_cgroup,
                                             const std::filesystem::path& cgroup_root);

// The same for this process, from /proc/self/cgroup and /sys/fs/cgroup.
std::optional<MemoryLimit> MemoryLimitOfThisProcess();

}  // namespace epochfs::daemon
