// The control directory: `<mount>/.epochfs/`, found by lookup and never listed, so that
// ImageFolder-style scans of the mount see exactly the source's files.
//
// It holds read-only files whose content is a snapshot: `stats` is the JSON of every
// counter (what `epochfs status` reads). Where the kernel asks before opening (the
// "open" consistency mode) the file is read with direct I/O and no per-open handle.
// Where it opens without asking ("notify" mode) it reads through its page cache. Either
// way the file has a fixed size (the snapshot padded with spaces, which JSON ignores), a
// read at offset 0 takes a new snapshot, and the attributes (timeout 0, mtime "now")
// make the kernel drop its old pages before each new read.
// A file with a writer (the plan) is mode 0666 and size 0; writes are handed to it.
// Control nodes have fixed node ids below 16; the inode table never hands those out.
//
// Thread-safety: thread-safe; the content callbacks must be thread-safe.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/thread_annotations.h"

namespace epochfs::fs {

class ControlDir {
 public:
  static constexpr const char* kDirName = ".epochfs";
  static constexpr uint64_t kDirNodeId = 2;

  // A write to a writable control file (the plan): offset, bytes, and who wrote.
  using Writer = std::function<Status(uint64_t offset, std::string_view data, uid_t uid,
                                      gid_t gid, pid_t pid)>;

  struct File {
    std::string name;
    uint64_t nodeid;
    std::function<std::string()> content;
    // When set, the file is writable by everyone (mode 0666: what is written is
    // validated, and reads return `content`); writes go here.
    Writer write = nullptr;
  };

  // `owner` is used for the attributes of the control nodes (the source root's owner).
  ControlDir(std::vector<File> files, uid_t owner_uid, gid_t owner_gid);

  static bool IsControl(uint64_t nodeid) { return nodeid >= kDirNodeId && nodeid < 16; }

  // The node id of `name` inside the control directory, if there is such a file.
  std::optional<uint64_t> Find(const std::string& name) const;
  static constexpr size_t kPaddedSize = 64 * 1024;

  struct ::stat Attr(uint64_t nodeid) const;
  // A new snapshot of the file's content; nullopt when `nodeid` is not a control file.
  std::optional<std::string> Content(uint64_t nodeid) const;
  // The content padded to kPaddedSize: a new snapshot when `fresh` (or when there is
  // none yet), else the last one, so one reader's reads at later offsets match.
  std::shared_ptr<const std::string> PaddedSnapshot(uint64_t nodeid, bool fresh) const;
  const std::vector<File>& files() const { return files_; }
  bool IsWritable(uint64_t nodeid) const;
  // Hands a write to a writable control file; kPermission for the others.
  Status Write(uint64_t nodeid, uint64_t offset, std::string_view data, uid_t uid,
               gid_t gid, pid_t pid = 0) const;

 private:
  std::vector<File> files_;
  uid_t uid_;
  gid_t gid_;
  mutable Mutex mutex_;
  mutable std::unordered_map<uint64_t, std::shared_ptr<const std::string>>
      latest_ GUARDED_BY(mutex_);
};

}  // namespace epochfs::fs
