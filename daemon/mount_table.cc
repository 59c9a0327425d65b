#include "daemon/mount_table.h"

#include <exception>
#include <fstream>
#include <sstream>

namespace epochfs::daemon {

std::string UnescapeMountField(const std::string& field) {
  std::string out;
  for (size_t i = 0; i < field.size(); i++) {
    auto octal = [&](size_t j) { return j < field.size() && field[j] >= '0' && field[j] <= '7'; };
    if (field[i] == '\\' && octal(i + 1) && octal(i + 2) && octal(i + 3)) {
      out.push_back(static_cast<char>(std::stoi(field.substr(i + 1, 3), nullptr, 8)));
      i += 3;
    } else {
      out.push_back(field[i]);
    }
  }
  return out;
}

std::vector<MountEntry> ReadMountTable() {
  std::vector<MountEntry> mounts;
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    // id parent maj:min root mountpoint options [optional fields...] - fstype source superopts
    std::istringstream fields(line);
    std::string id, parent, devno, root, mountpoint, options, word;
    fields >> id >> parent >> devno >> root >> mountpoint >> options;
    while (fields >> word && word != "-") {
    }
    MountEntry entry;
    std::string super_options;
    fields >> entry.fstype >> entry.source >> super_options;
    std::istringstream options_list(super_options);
    for (std::string option; std::getline(options_list, option, ',');) {
      if (option.rfind("user_id=", 0) == 0) {
        try {
          entry.owner_uid = static_cast<uid_t>(std::stoul(option.substr(8)));
        } catch (const std::exception&) {
        }
      }
    }
    entry.mountpoint = UnescapeMountField(mountpoint);
    entry.device = devno;
    entry.source = UnescapeMountField(entry.source);
    mounts.push_back(std::move(entry));
  }
  return mounts;
}

std::vector<MountEntry> EpochfsMounts() {
  std::vector<MountEntry> result;
  for (auto& m : ReadMountTable()) {
    if (m.fstype == kFsType) result.push_back(std::move(m));
  }
  return result;
}

namespace {

std::optional<MountEntry> LastMountedAt(const std::vector<MountEntry>& table,
                                        const std::string& path) {
  std::optional<MountEntry> visible;
  for (const auto& m : table) {
    if (m.mountpoint == path) visible = m;
  }
  return visible;
}

}  // namespace

std::optional<MountEntry> VisibleMount(const std::filesystem::path& mountpoint) {
  const auto table = ReadMountTable();
  const std::filesystem::path as_given = std::filesystem::absolute(mountpoint).lexically_normal();
  std::string lexical = as_given.string();
  if (lexical.size() > 1 && lexical.back() == '/') lexical.pop_back();
  if (auto found = LastMountedAt(table, lexical)) return found;
  std::error_code ec;
  auto canonical = std::filesystem::weakly_canonical(mountpoint, ec);
  if (ec || canonical.string() == lexical) return std::nullopt;
  return LastMountedAt(table, canonical.string());
}

bool IsEpochfsMount(const std::filesystem::path& mountpoint) {
  const auto visible = VisibleMount(mountpoint);
  return visible && visible->fstype == kFsType;
}

}  // namespace epochfs::daemon
