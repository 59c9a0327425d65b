#include "daemon/memory_limit.h"

#include <fstream>
#include <sstream>

namespace epochfs::daemon {
namespace fsys = std::filesystem;
namespace {

// A v1 limit this high means "none" (the kernel's PAGE_COUNTER_MAX, page-rounded).
constexpr uint64_t kNoLimitAbove = 1ull << 62;

std::optional<uint64_t> ReadLimit(const fsys::path& file) {
  std::ifstream in(file);
  std::string text;
  if (!(in >> text) || text == "max") return std::nullopt;
  try {
    const uint64_t bytes = std::stoull(text);
    if (bytes >= kNoLimitAbove) return std::nullopt;
    return bytes;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// The smallest limit in `knob` from the cgroup `path` (as /proc/self/cgroup names it)
// up to `root`: a parent's limit bounds its children too.
std::optional<MemoryLimit> SmallestOnTheWayUp(const fsys::path& root, const std::string& path,
                                              const char* knob) {
  std::optional<MemoryLimit> smallest;
  for (fsys::path dir = fsys::path(path).relative_path();; dir = dir.parent_path()) {
    if (auto bytes = ReadLimit(root / dir / knob)) {
      if (!smallest || *bytes < smallest->bytes) smallest = MemoryLimit{*bytes, "/" + dir.string()};
    }
    if (dir.empty()) break;
  }
  return smallest;
}

}  // namespace

std::optional<MemoryLimit> CgroupMemoryLimit(const std::string& proc_self_cgroup,
                                             const fsys::path& cgroup_root) {
  std::istringstream lines(proc_self_cgroup);
  std::string line;
  std::optional<MemoryLimit> v1, v2;
  while (std::getline(lines, line)) {
    // hierarchy-id:controllers:path
    const size_t first = line.find(':');
    const size_t second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    bool memory = false;
    std::istringstream names(controllers);
    for (std::string name; std::getline(names, name, ',');) memory |= name == "memory";
    if (memory) {
      v1 = SmallestOnTheWayUp(cgroup_root / "memory", path, "memory.limit_in_bytes");
    } else if (controllers.empty() && line.rfind("0:", 0) == 0) {
      v2 = SmallestOnTheWayUp(cgroup_root, path, "memory.max");
    }
  }
  // A v1 memory controller, where mounted, is the one that charges this process.
  return v1 ? v1 : v2;
}

std::optional<MemoryLimit> MemoryLimitOfThisProcess() {
  std::ifstream in("/proc/self/cgroup");
  std::stringstream text;
  text << in.rdbuf();
  return CgroupMemoryLimit(text.str(), "/sys/fs/cgroup");
}

}  // namespace epochfs::daemon
