// The control directory: `<mount>/.epochfs/`, found by lookup and never listed, so that
// ImageFolder-style scans of the mount see exactly the source's files.
//
// It holds read-only files whose contents are made when they are opened (so a reader
// gets one consistent snapshot): `stats` is the JSON of every counter (what
// `epochfs status` reads). Control nodes have fixed node ids below 16; the inode table
// never hands those out.
//
// Thread-safety: immutable after construction; the content callbacks must be
// thread-safe.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace epochfs::fs {

class ControlDir {
 public:
  static constexpr const char* kDirName = ".epochfs";
  static constexpr uint64_t kDirNodeId = 2;

  struct File {
    std::string name;
    uint64_t nodeid;
    std::function<std::string()> content;
  };

  // `owner` is used for the attributes of the control nodes (the source root's owner).
  ControlDir(std::vector<File> files, uid_t owner_uid, gid_t owner_gid);

  static bool IsControl(uint64_t nodeid) { return nodeid >= kDirNodeId && nodeid < 16; }

  // The node id of `name` inside the control directory, if there is such a file.
  std::optional<uint64_t> Find(const std::string& name) const;
  struct ::stat Attr(uint64_t nodeid) const;
  // A snapshot of the file's content; nullopt when `nodeid` is not a control file.
  std::optional<std::string> Content(uint64_t nodeid) const;
  const std::vector<File>& files() const { return files_; }

 private:
  std::vector<File> files_;
  uid_t uid_;
  gid_t gid_;
};

}  // namespace epochfs::fs
