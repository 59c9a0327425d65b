#include "fs/control.h"

#include <time.h>

namespace epochfs::fs {

ControlDir::ControlDir(std::vector<File> files, uid_t owner_uid, gid_t owner_gid)
    : files_(std::move(files)), uid_(owner_uid), gid_(owner_gid) {}

std::optional<uint64_t> ControlDir::Find(const std::string& name) const {
  for (const File& f : files_) {
    if (f.name == name) return f.nodeid;
  }
  return std::nullopt;
}

struct ::stat ControlDir::Attr(uint64_t nodeid) const {
  struct ::stat st {};
  st.st_ino = nodeid;
  st.st_uid = uid_;
  st.st_gid = gid_;
  struct timespec now {};
  ::clock_gettime(CLOCK_REALTIME, &now);
  st.st_atim = st.st_mtim = st.st_ctim = now;
  if (nodeid == kDirNodeId) {
    st.st_mode = S_IFDIR | 0555;
    st.st_nlink = 2;
  } else {
    // Size 0: the content is made at open and read with direct I/O, so the size the
    // kernel believes does not limit what is read.
    st.st_mode = S_IFREG | 0444;
    st.st_nlink = 1;
  }
  return st;
}

std::optional<std::string> ControlDir::Content(uint64_t nodeid) const {
  for (const File& f : files_) {
    if (f.nodeid == nodeid) return f.content();
  }
  return std::nullopt;
}

}  // namespace epochfs::fs
