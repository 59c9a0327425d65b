#include "fs/control.h"

#include <time.h>

#include "fmt/format.h"
#include "spdlog/spdlog.h"

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
  } else if (IsWritable(nodeid)) {
    st.st_mode = S_IFREG | 0666;
    st.st_nlink = 1;
  } else {
    st.st_mode = S_IFREG | 0444;
    st.st_nlink = 1;
    st.st_size = static_cast<off_t>(kPaddedSize);
  }
  return st;
}

std::shared_ptr<const std::string> ControlDir::PaddedSnapshot(uint64_t nodeid, bool fresh) const {
  if (!fresh) {
    MutexLock lock(mutex_);
    auto it = latest_.find(nodeid);
    if (it != latest_.end()) return it->second;
  }
  std::string content = Content(nodeid).value_or(std::string());
  if (content.size() < kPaddedSize) content.resize(kPaddedSize, ' ');
  content.resize(kPaddedSize);  // never more than the size the kernel was told
  auto snapshot = std::make_shared<const std::string>(std::move(content));
  MutexLock lock(mutex_);
  latest_[nodeid] = snapshot;
  return snapshot;
}

bool ControlDir::IsWritable(uint64_t nodeid) const {
  for (const File& f : files_) {
    if (f.nodeid == nodeid) return f.write != nullptr;
  }
  return false;
}

Status ControlDir::Write(uint64_t nodeid, uint64_t offset, std::string_view data, uid_t uid,
                         gid_t gid, pid_t pid) const {
  for (const File& f : files_) {
    if (f.nodeid == nodeid && f.write) return f.write(offset, data, uid, gid, pid);
  }
  return Status::FromErrno(EBADF, "control file is read-only");
}

std::optional<std::string> ControlDir::Content(uint64_t nodeid) const {
  for (const File& f : files_) {
    if (f.nodeid != nodeid) continue;
    // Rendering runs inside a FUSE callback: an exception here would end the daemon.
    try {
      return f.content();
    } catch (const std::exception& e) {
      spdlog::error("rendering .epochfs/{}: {}", f.name, e.what());
      return fmt::format("{{\"error\": \"rendering failed, see the daemon's log\"}}\n");
    }
  }
  return std::nullopt;
}

}  // namespace epochfs::fs
