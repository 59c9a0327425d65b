#include "fs/filesystem.h"

#include <fcntl.h>

#include <algorithm>

namespace epochfs::fs {
namespace {

bool IsControlDirName(uint64_t parent, const std::string& name) {
  return parent == kRootNodeId && name == ControlDir::kDirName;
}

Status RefuseInControl(uint64_t parent) {
  if (parent == ControlDir::kDirNodeId) return Status::FromErrno(EPERM, "control directory");
  return Status::Ok();
}

}  // namespace

Filesystem::Filesystem(SourceFs& source, const ControlDir& control, FilesystemOptions options)
    : source_(source), control_(control), options_(options) {}

void Filesystem::AttachKernel(ChangeWatcher* watcher, Invalidator* kernel) {
  kernel_.store(kernel);
  source_.AttachKernel(watcher, options_.kernel_asks_to_open ? kernel : nullptr);
}

EntryReply Filesystem::SourceEntry(const Entry& entry) const {
  EntryReply e;
  e.nodeid = entry.nodeid;
  e.attr = entry.attr;
  e.attr_timeout = options_.timeouts.attr_s;
  e.entry_timeout = options_.timeouts.entry_s;
  // "open" mode keeps the timeouts for regular files too: close-to-open is the OPEN's
  // own work. It opens the name again and answers ESTALE when the name now means
  // another file, or the file changed since the kernel's last LOOKUP of it, and the
  // kernel then looks the name up again (SourceFs::Open). A LOOKUP per open cost a
  // round trip per file. Symlinks and special files, which no OPEN checks, are still
  // looked up at every walk; directories keep their timeouts.
  if (options_.kernel_asks_to_open && !S_ISDIR(entry.attr.st_mode) &&
      !S_ISREG(entry.attr.st_mode)) {
    e.entry_timeout = 0;
  }
  return e;
}

Result<EntryReply> Filesystem::SourceEntry(const Result<Entry>& entry) const {
  if (!entry.ok()) return entry.status();
  return SourceEntry(entry.value());
}

// Control nodes change all the time: the kernel must never trust what it was told.
EntryReply Filesystem::ControlEntry(uint64_t nodeid) const {
  EntryReply e;
  e.nodeid = nodeid;
  e.attr = control_.Attr(nodeid);
  return e;
}

// ---- names and attributes ----

Result<EntryReply> Filesystem::Lookup(uint64_t parent, const std::string& name) {
  if (IsControlDirName(parent, name)) return ControlEntry(ControlDir::kDirNodeId);
  if (parent == ControlDir::kDirNodeId) {
    auto id = control_.Find(name);
    if (!id) return Status::NotFound(name);
    Invalidator* kernel = kernel_.load();
    if (!options_.kernel_asks_to_open && kernel) {
      // "notify" mode opens without asking, so a control file cannot be direct I/O and
      // its pages would be served again. Every path walk to it looks it up (entry
      // timeout 0): drop the pages here, so each open reads a fresh snapshot. Only the
      // control file's own pages are touched, which no other request of ours holds.
      kernel->InvalidateInode(*id);
    }
    return ControlEntry(*id);
  }
  auto entry = source_.Lookup(parent, name);
  if (!entry.ok() && entry.status().code() == Code::kNotFound && options_.timeouts.negative_s > 0) {
    // A negative entry: the kernel remembers "no such name" for a while.
    EntryReply negative;
    negative.entry_timeout = options_.timeouts.negative_s;
    return negative;
  }
  return SourceEntry(entry);
}

void Filesystem::Forget(uint64_t nodeid, uint64_t nlookup) {
  // Control nodes are not counted: they live as long as the mount.
  if (!ControlDir::IsControl(nodeid)) source_.Forget(nodeid, nlookup);
}

Result<AttrReply> Filesystem::GetAttr(uint64_t nodeid, FileHandle* fh, OrderWait wait) {
  if (ControlDir::IsControl(nodeid)) return AttrReply{control_.Attr(nodeid), 0};
  // Without a handle: in "open" mode by name (a name now meaning another file answers
  // ESTALE, and the kernel looks it up again); in "notify" mode the node's own inode
  // (the watcher keeps names current, and an fstat of an unlinked open file works).
  auto st = fh                             ? source_.GetAttr(nodeid, fh, wait)
            : options_.kernel_asks_to_open ? source_.GetAttr(nodeid, nullptr, wait)
                                           : source_.GetAttrByNode(nodeid, wait);
  if (!st.ok()) return st.status();
  return AttrReply{*st, options_.timeouts.attr_s};
}

Result<AttrReply> Filesystem::SetAttr(uint64_t nodeid, const struct ::stat& attr,
                                      SourceFs::AttrChange what, FileHandle* fh, Caller caller) {
  if (ControlDir::IsControl(nodeid)) {
    // Truncating a writable control file (a shell's `>`) is accepted and means nothing:
    // each plan starts with a write at offset 0.
    const bool at_most_size =
        !what.mode && !what.uid && !what.gid && !what.atime && !what.mtime && !what.other;
    if (control_.IsWritable(nodeid) && at_most_size) return AttrReply{control_.Attr(nodeid), 0};
    return Status::FromErrno(EPERM, "control");
  }
  auto st = source_.SetAttr(nodeid, attr, what, fh, caller);
  if (!st.ok()) return st.status();
  return AttrReply{*st, options_.timeouts.attr_s};
}

Result<std::string> Filesystem::ReadLink(uint64_t nodeid) { return source_.ReadLink(nodeid); }

Result<EntryReply> Filesystem::MakeNode(uint64_t parent, const std::string& name, mode_t mode,
                                        dev_t rdev, Caller caller) {
  EPOCHFS_RETURN_IF_ERROR(RefuseInControl(parent));
  return SourceEntry(source_.MakeNode(parent, name, mode, rdev, caller));
}

Result<EntryReply> Filesystem::MakeDir(uint64_t parent, const std::string& name, mode_t mode,
                                       Caller caller) {
  EPOCHFS_RETURN_IF_ERROR(RefuseInControl(parent));
  return SourceEntry(source_.MakeDir(parent, name, mode, caller));
}

Result<EntryReply> Filesystem::SymLink(const std::string& target, uint64_t parent,
                                       const std::string& name, Caller caller) {
  EPOCHFS_RETURN_IF_ERROR(RefuseInControl(parent));
  return SourceEntry(source_.SymLink(target, parent, name, caller));
}

Result<EntryReply> Filesystem::Link(uint64_t nodeid, uint64_t new_parent,
                                    const std::string& new_name) {
  if (ControlDir::IsControl(nodeid) || ControlDir::IsControl(new_parent)) {
    return Status::FromErrno(EPERM, "control");
  }
  return SourceEntry(source_.Link(nodeid, new_parent, new_name));
}

Status Filesystem::Unlink(uint64_t parent, const std::string& name) {
  EPOCHFS_RETURN_IF_ERROR(RefuseInControl(parent));
  return source_.Unlink(parent, name);
}

Status Filesystem::RemoveDir(uint64_t parent, const std::string& name) {
  if (IsControlDirName(parent, name)) return Status::FromErrno(EPERM, name);
  EPOCHFS_RETURN_IF_ERROR(RefuseInControl(parent));
  return source_.RemoveDir(parent, name);
}

Status Filesystem::Rename(uint64_t parent, const std::string& name, uint64_t new_parent,
                          const std::string& new_name, unsigned int flags) {
  if (IsControlDirName(parent, name) || IsControlDirName(new_parent, new_name) ||
      ControlDir::IsControl(parent) || ControlDir::IsControl(new_parent)) {
    return Status::FromErrno(EPERM, "control");
  }
  return source_.Rename(parent, name, new_parent, new_name, flags);
}

// ---- files ----

Result<OpenReply> Filesystem::Open(uint64_t nodeid, int flags, OrderWait wait) {
  OpenReply reply;
  if (!options_.kernel_asks_to_open) {
    // "notify" mode: from now on the kernel opens every file by itself.
    reply.kernel_opens_alone = true;
    return reply;
  }
  if (ControlDir::IsControl(nodeid)) {
    if ((flags & O_ACCMODE) != O_RDONLY && !control_.IsWritable(nodeid)) {
      return Status::FromErrno(EACCES, "control files are read-only");
    }
    if (nodeid == ControlDir::kDirNodeId) {
      return Status::FromErrno(EISDIR, "control directory");
    }
    // No per-open handle: reads take the shared, reference-counted snapshot (a new one
    // at offset 0), as in "notify" mode. A handle freed by RELEASE could still be in
    // use by a READ of the same open being replied (seen under ASan: a read() that
    // returned early while its other direct-I/O requests were still in flight).
    reply.direct_io = true;
    return reply;
  }
  auto open = source_.Open(nodeid, flags, wait);
  if (!open.ok()) return open.status();
  reply.handle = std::move(open->handle);
  reply.keep_cache = open->keep_cache;
  reply.direct_io = open->direct_io;
  reply.backing_id = open->backing_id;
  return reply;
}

Result<CreateReply> Filesystem::Create(uint64_t parent, const std::string& name, mode_t mode,
                                       int flags, Caller caller) {
  EPOCHFS_RETURN_IF_ERROR(RefuseInControl(parent));
  auto created = source_.Create(parent, name, mode, flags, caller);
  if (!created.ok()) return created.status();
  auto& [entry, open] = *created;
  if (!options_.kernel_asks_to_open) {
    // "notify" mode: once an OPEN has been answered ENOSYS, the kernel sends no RELEASE
    // for any file, created ones included (fs/fuse/file.c, fuse_file_put), so a handle
    // given out here would keep its source fd, and the node's, until unmount. The
    // created file is served like every other: by node (WriteNode, ReadNode).
    open.handle.reset();
  }
  return CreateReply{SourceEntry(entry), std::move(open.handle)};
}

Result<cache::ReadBuffer> Filesystem::Read(uint64_t nodeid, FileHandle* fh, uint64_t offset,
                                           size_t size) {
  if (ControlDir::IsControl(nodeid)) {
    // Control files never have a handle (see Open); the snapshot is shared and the
    // buffer keeps it alive while the reply copies it.
    std::shared_ptr<const std::string> snapshot = control_.PaddedSnapshot(nodeid, offset == 0);
    const std::string& content = *snapshot;
    const size_t start = static_cast<size_t>(std::min<uint64_t>(content.size(), offset));
    cache::ReadBuffer buffer;
    buffer.data = content.data() + start;
    buffer.size = std::min(size, content.size() - start);
    buffer.owner = std::move(snapshot);
    return buffer;
  }
  return fh ? source_.Read(*fh, offset, size) : source_.ReadNode(nodeid, offset, size);
}

Result<size_t> Filesystem::Write(uint64_t nodeid, FileHandle* fh, std::string_view data,
                                 uint64_t offset, Caller caller, bool append) {
  if (ControlDir::IsControl(nodeid)) {
    EPOCHFS_RETURN_IF_ERROR(control_.Write(nodeid, offset, data, caller.uid, caller.gid, caller.pid));
    return data.size();
  }
  return fh ? source_.Write(*fh, data.data(), data.size(), offset, append)
            : source_.WriteNode(nodeid, data.data(), data.size(), offset, append);
}

Status Filesystem::Fsync(uint64_t nodeid, FileHandle* fh, bool datasync) {
  if (ControlDir::IsControl(nodeid)) return Status::Ok();
  return fh ? source_.Fsync(*fh, datasync) : source_.FsyncNode(nodeid, datasync);
}

Status Filesystem::Release(std::unique_ptr<FileHandle> fh, OrderWait wait) {
  // Null when the kernel opened the file alone ("notify" mode), or for a control file:
  // nothing to free. Otherwise the handle closes here.
  return source_.Release(std::move(fh), wait);
}

Status Filesystem::DropOwedPages(uint64_t nodeid) {
  if (ControlDir::IsControl(nodeid)) return Status::Ok();
  return source_.DropOwedPages(nodeid);
}

// ---- directories ----

Result<std::unique_ptr<DirHandle>> Filesystem::OpenDir(uint64_t nodeid) {
  if (nodeid == ControlDir::kDirNodeId) return std::unique_ptr<DirHandle>();
  return source_.OpenDir(nodeid);
}

Status Filesystem::ReadControlDir(off_t offset, const DirEmitter& emit) const {
  const auto& files = control_.files();
  for (size_t i = static_cast<size_t>(offset); i < files.size(); i++) {
    if (!emit(files[i].name, ControlEntry(files[i].nodeid), static_cast<off_t>(i + 1))) break;
  }
  return Status::Ok();
}

Status Filesystem::ReadDir(uint64_t nodeid, DirHandle* dh, off_t offset, bool plus,
                           const DirEmitter& emit) {
  if (nodeid == ControlDir::kDirNodeId) return ReadControlDir(offset, emit);
  return source_.ReadDir(*dh, offset, plus,
                         [&](const std::string& name, const Entry& entry, off_t next) {
                           return emit(name, SourceEntry(entry), next);
                         });
}

Status Filesystem::FsyncDir(DirHandle* dh, bool datasync) {
  if (dh == nullptr) return Status::Ok();  // the control directory (OpenDir gave it none)
  return source_.FsyncDir(*dh, datasync);
}

void Filesystem::ReleaseDir(std::unique_ptr<DirHandle> dh) {
  // Null for the control directory; otherwise the source directory closes here.
  dh.reset();
}

Result<struct ::statvfs> Filesystem::StatFs() { return source_.StatFs(); }

// ---- xattrs ----

Result<std::string> Filesystem::GetXattr(uint64_t nodeid, const std::string& name, size_t size) {
  if (ControlDir::IsControl(nodeid)) return Status::FromErrno(ENODATA, "control");
  return source_.GetXattr(nodeid, name, size);
}

Result<std::string> Filesystem::ListXattr(uint64_t nodeid, size_t size) {
  if (ControlDir::IsControl(nodeid)) return std::string();  // control nodes have none
  return source_.ListXattr(nodeid, size);
}

Status Filesystem::SetXattr(uint64_t nodeid, const std::string& name, const std::string& value,
                            int flags) {
  if (ControlDir::IsControl(nodeid)) return Status::FromErrno(EPERM, "control");
  return source_.SetXattr(nodeid, name, value, flags);
}

Status Filesystem::RemoveXattr(uint64_t nodeid, const std::string& name) {
  if (ControlDir::IsControl(nodeid)) return Status::FromErrno(EPERM, "control");
  return source_.RemoveXattr(nodeid, name);
}

}  // namespace epochfs::fs
