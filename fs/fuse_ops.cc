#include "fs/fuse_ops.h"

#include <fcntl.h>
#include <sys/xattr.h>

#include <cstring>
#include <memory>
#include <vector>

#include "spdlog/spdlog.h"

namespace epochfs::fs {
namespace {

FuseContext& Ctx(fuse_req_t req) { return *static_cast<FuseContext*>(fuse_req_userdata(req)); }

FuseContext& Counted(fuse_req_t req, RequestKind kind) {
  FuseContext& ctx = Ctx(req);
  ctx.counters.Count(kind);
  return ctx;
}

Caller CallerOf(fuse_req_t req) {
  const struct fuse_ctx* c = fuse_req_ctx(req);
  return Caller{c->uid, c->gid};
}

void ReplyError(fuse_req_t req, const Status& status) {
  FuseContext& ctx = Ctx(req);
  ctx.counters.CountError();
  const int err = ToErrno(status);
  // ENOENT and ESTALE are everyday answers, not events worth a log line.
  if (err != ENOENT && err != ESTALE && err != ENOTEMPTY && err != EEXIST && err != ENODATA) {
    spdlog::debug("request failed: {}", status.ToString());
  }
  fuse_reply_err(req, err);
}

// For requests whose whole answer is a Status: a failure is counted like any other.
void ReplyStatus(fuse_req_t req, const Status& status) {
  if (!status.ok()) return ReplyError(req, status);
  fuse_reply_err(req, 0);
}

// Control nodes change all the time: the kernel must never trust what it was told.
void ReplyControlEntry(fuse_req_t req, uint64_t nodeid) {
  struct fuse_entry_param e {};
  e.ino = nodeid;
  e.generation = 1;
  e.attr = Ctx(req).control->Attr(nodeid);
  fuse_reply_entry(req, &e);
}

struct fuse_entry_param EntryParam(const FuseContext& ctx, const Entry& entry) {
  struct fuse_entry_param e {};
  e.ino = entry.nodeid;
  e.generation = 1;  // node ids are never reused, so one generation suffices
  e.attr = entry.attr;
  e.attr_timeout = ctx.timeouts.attr_s;
  e.entry_timeout = ctx.timeouts.entry_s;
  if (ctx.kernel_asks_to_open && !S_ISDIR(entry.attr.st_mode)) {
    // Close-to-open, as NFS does it: every open of a file walks to it with a LOOKUP,
    // which checks that the name still means this file and gives the kernel the size
    // and times the open is about to trust. (Directories keep their timeouts.)
    e.entry_timeout = 0;
  }
  return e;
}

void ReplyEntry(fuse_req_t req, const Entry& entry) {
  const struct fuse_entry_param e = EntryParam(Ctx(req), entry);
  fuse_reply_entry(req, &e);
}

FileHandle* HandleOf(const struct fuse_file_info* fi) {
  return fi ? reinterpret_cast<FileHandle*>(fi->fh) : nullptr;
}


bool IsControlDirLookup(fuse_ino_t parent, const char* name) {
  return parent == kRootNodeId && std::strcmp(name, ControlDir::kDirName) == 0;
}

// ---- names and attributes ----

void DoLookup(fuse_req_t req, fuse_ino_t parent, const char* name) noexcept {
  FuseContext& ctx = Counted(req, RequestKind::k_lookup);
  if (IsControlDirLookup(parent, name)) return ReplyControlEntry(req, ControlDir::kDirNodeId);
  if (parent == ControlDir::kDirNodeId) {
    auto id = ctx.control->Find(name);
    if (!id) return ReplyError(req, Status::NotFound(name));
    if (!ctx.kernel_asks_to_open && ctx.session) {
      // "notify" mode opens without asking, so a control file cannot be direct I/O and
      // its pages would be served again. Every path walk to it looks it up (entry
      // timeout 0): drop the pages here, so each open reads a fresh snapshot. Only the
      // control file's own pages are touched, which no other request of ours holds.
      fuse_lowlevel_notify_inval_inode(ctx.session, *id, 0, 0);
    }
    return ReplyControlEntry(req, *id);
  }
  auto entry = ctx.fs->Lookup(parent, name);
  if (!entry.ok()) {
    if (entry.status().code() == Code::kNotFound && ctx.timeouts.negative_s > 0) {
      // A negative entry: the kernel remembers "no such name" for a while.
      struct fuse_entry_param e {};
      e.entry_timeout = ctx.timeouts.negative_s;
      fuse_reply_entry(req, &e);
      return;
    }
    return ReplyError(req, entry.status());
  }
  ReplyEntry(req, *entry);
}

void DoForget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) noexcept {
  FuseContext& ctx = Counted(req, RequestKind::k_forget);
  if (!ControlDir::IsControl(ino)) ctx.fs->Forget(ino, nlookup);
  fuse_reply_none(req);
}

void DoForgetMulti(fuse_req_t req, size_t count, struct fuse_forget_data* forgets) noexcept {
  FuseContext& ctx = Counted(req, RequestKind::k_forget);
  for (size_t i = 0; i < count; i++) {
    if (!ControlDir::IsControl(forgets[i].ino)) ctx.fs->Forget(forgets[i].ino, forgets[i].nlookup);
  }
  fuse_reply_none(req);
}

void DoGetattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) noexcept {
  FuseContext& ctx = Counted(req, RequestKind::k_getattr);
  if (ControlDir::IsControl(ino)) {
    struct ::stat st = ctx.control->Attr(ino);
    fuse_reply_attr(req, &st, 0);
    return;
  }
  FileHandle* fh = HandleOf(fi);
  // Without a handle: in "open" mode by name (a name now meaning another file answers
  // ESTALE, and the kernel looks it up again); in "notify" mode the node's own inode
  // (the watcher keeps names current, and an fstat of an unlinked open file works).
  auto st = fh                         ? ctx.fs->GetAttr(ino, fh)
            : ctx.kernel_asks_to_open ? ctx.fs->GetAttr(ino, nullptr)
                                      : ctx.fs->GetAttrByNode(ino);
  if (!st.ok()) return ReplyError(req, st.status());
  fuse_reply_attr(req, &*st, ctx.timeouts.attr_s);
}

void DoSetattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set,
               struct fuse_file_info* fi) noexcept {
  FuseContext& ctx = Counted(req, RequestKind::k_setattr);
  if (ControlDir::IsControl(ino)) {
    // Truncating a writable control file (a shell's `>`) is accepted and means nothing:
    // each plan starts with a write at offset 0.
    if (ctx.control->IsWritable(ino) && (to_set & ~FUSE_SET_ATTR_SIZE) == 0) {
      struct ::stat st = ctx.control->Attr(ino);
      fuse_reply_attr(req, &st, 0);
      return;
    }
    return ReplyError(req, Status::FromErrno(EPERM, "control"));
  }
  SourceFs::AttrChange what;
  what.mode = to_set & FUSE_SET_ATTR_MODE;
  what.uid = to_set & FUSE_SET_ATTR_UID;
  what.gid = to_set & FUSE_SET_ATTR_GID;
  what.size = to_set & FUSE_SET_ATTR_SIZE;
  what.atime = to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_ATIME_NOW);
  what.mtime = to_set & (FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_MTIME_NOW);
  what.atime_now = to_set & FUSE_SET_ATTR_ATIME_NOW;
  what.mtime_now = to_set & FUSE_SET_ATTR_MTIME_NOW;
  auto st = ctx.fs->SetAttr(ino, *attr, what, HandleOf(fi), CallerOf(req));
  if (!st.ok()) return ReplyError(req, st.status());
  fuse_reply_attr(req, &*st, ctx.timeouts.attr_s);
}

void DoReadlink(fuse_req_t req, fuse_ino_t ino) noexcept {
  FuseContext& ctx = Counted(req, RequestKind::k_readlink);
  auto target = ctx.fs->ReadLink(ino);
  if (!target.ok()) return ReplyError(req, target.status());
  fuse_reply_readlink(req, target->c_str());
}

Status RefuseInControl(fuse_ino_t parent) {
  if (parent == ControlDir::kDirNodeId) return Status::FromErrno(EPERM, "control directory");
  return Status::Ok();
}

void DoMknod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
             dev_t rdev) noexcept {
  FuseContext& ctx = Counted(req, RequestKind::k_mknod);
  if (auto st = RefuseInControl(parent); !st.ok()) return ReplyError(req, st);
  auto entry = ctx.fs->MakeNode(parent, name, mode, rdev, CallerOf(req));
  if (!entry.ok()) return ReplyError(req, entry.status());
  ReplyEntry(req, *entry);
}

void DoMkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) noexcept {
  FuseContext& ctx = Counted(req, RequestKind::k_mkdir);
  if (auto st = RefuseInControl(parent); !st.ok()) return ReplyError(req, st);
  auto entry = ctx.fs->MakeDir(parent, name, mode, CallerOf(req));
  if (!entry.ok()) return ReplyError(req, entry.status());
  ReplyEntry(req, *entry);
}

void DoSymlink(fuse_req_t req, const char* link, fuse_ino_t parent, const char* name) noexcept {
  FuseContext& ctx = Counted(req, RequestKind::k_symlink);
  if (auto st = RefuseInControl(parent); !st.ok()) return ReplyError(req, st);
  auto entry = ctx.fs->SymLink(link, parent, name, CallerOf(req));
  if (!entry.ok()) return ReplyError(req, entry.status());
  ReplyEntry(req, *entry);
}

void DoLink(fuse_req_t req, fuse_ino_t ino, fuse_ino_t new_parent, const char* new_name) noexcept {
  FuseContext& ctx = Counted(req, RequestKind::k_link);
  if (ControlDir::IsControl(ino) || ControlDir::IsControl(new_parent)) {
    return ReplyError(req, Status::FromErrno(EPERM, "control"));
  }
  auto entry = ctx.fs->Link(ino, new_parent, new_name);
  if (!entry.ok()) return ReplyError(req, entry.status());
  ReplyEntry(req, *entry);
}

void DoUnlink(fuse_req_t req, fuse_ino_t parent, const char* name) noexcept {
  FuseContext& ctx = Counted(req, RequestKind::k_unlink);
  if (auto st = RefuseInControl(parent); !st.ok()) return ReplyError(req, st);
  ReplyStatus(req, ctx.fs->Unlink(parent, name));
}

void DoRmdir(fuse_req_t req, fuse_ino_t parent, const char* name) noexcept {
  FuseContext& ctx = Counted(req, RequestKind::k_rmdir);
  if (IsControlDirLookup(parent, name)) return ReplyError(req, Status::FromErrno(EPERM, name));
  if (auto st = RefuseInControl(parent); !st.ok()) return ReplyError(req, st);
  ReplyStatus(req, ctx.fs->RemoveDir(parent, name));
}

void DoRename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t new_parent,
              const char* new_name, unsigned int flags) noexcept {
  FuseContext& ctx = Counted(req, RequestKind::k_rename);
  if (IsControlDirLookup(parent, name) || IsControlDirLookup(new_parent, new_name) ||
      ControlDir::IsControl(parent) || ControlDir::IsControl(new_parent)) {
    return ReplyError(req, Status::FromErrno(EPERM, "control"));
  }
  ReplyStatus(req, ctx.fs->Rename(parent, name, new_parent, new_name, flags));
}

// ---- files ----

void ReplyOpen(fuse_req_t req, FuseContext& ctx, fuse_ino_t ino, OpenResult&& open,
               struct fuse_file_info* fi) {
  if (open.attributes_changed && ctx.session) {
    // The kernel still holds the old size and times. Invalidating only the attributes
    // (offset < 0) takes no inode lock in the kernel, so it is safe from inside open;
    // the next read then fetches the new size before trusting its own.
    fuse_lowlevel_notify_inval_inode(ctx.session, ino, -1, 0);
  }
  fi->keep_cache = open.keep_cache;
  fi->fh = reinterpret_cast<uint64_t>(open.handle.get());
  if (fuse_reply_open(req, fi) == 0) {
    open.handle.release();  // owned by the kernel's file now; freed in release
  }
}

void DoOpen(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) noexcept {
  FuseContext& ctx = Counted(req, RequestKind::k_open);
  if (!ctx.kernel_asks_to_open) {
    // "notify" mode: from now on the kernel opens every file by itself.
    fuse_reply_err(req, ENOSYS);
    return;
  }
  if (ControlDir::IsControl(ino)) {
    if ((fi->flags & O_ACCMODE) != O_RDONLY && !ctx.control->IsWritable(ino)) {
      return ReplyError(req, Status::FromErrno(EACCES, "control files are read-only"));
    }
    if (ino == ControlDir::kDirNodeId) {
      return ReplyError(req, Status::FromErrno(EISDIR, "control directory"));
    }
    // No per-open handle: reads take the shared, reference-counted snapshot (a new one
    // at offset 0), as in "notify" mode. A handle freed by RELEASE could still be in
    // use by a READ of the same open being replied (seen under ASan: a read() that
    // returned early while its other direct-I/O requests were still in flight).
    fi->direct_io = 1;
    fi->fh = 0;
    fuse_reply_open(req, fi);
    return;
  }
  auto open = ctx.fs->Open(ino, fi->flags);
  if (!open.ok()) return ReplyError(req, open.status());
  ReplyOpen(req, ctx, ino, std::move(*open), fi);
}

void DoCreate(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
              struct fuse_file_info* fi) noexcept {
  FuseContext& ctx = Counted(req, RequestKind::k_create);
  if (auto st = RefuseInControl(parent); !st.ok()) return ReplyError(req, st);
  auto created = ctx.fs->Create(parent, name, mode, fi->flags, CallerOf(req));
  if (!created.ok()) return ReplyError(req, created.status());
  auto& [entry, open] = *created;
  const struct fuse_entry_param e = EntryParam(ctx, entry);
  fi->fh = reinterpret_cast<uint64_t>(open.handle.get());
  if (fuse_reply_create(req, &e, fi) == 0) {
    open.handle.release();
  } else {
    ctx.fs->Forget(entry.nodeid, 1);  // the kernel never got the entry
  }
}

void DoRead(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
            struct fuse_file_info* fi) noexcept {
  FuseContext& ctx = Counted(req, RequestKind::k_read);
  if (ControlDir::IsControl(ino)) {
    // Control files never have a handle (see DoOpen); the snapshot is shared and stays
    // alive while this reply copies it.
    const std::shared_ptr<const std::string> snapshot = ctx.control->PaddedSnapshot(ino, off == 0);
    const std::string& content = *snapshot;
    const size_t start = std::min(content.size(), static_cast<size_t>(off));
    const size_t n = std::min(size, content.size() - start);
    fuse_reply_buf(req, content.data() + start, n);
    return;
  }
  FileHandle* fh = HandleOf(fi);
  auto data = fh ? ctx.fs->Read(*fh, static_cast<uint64_t>(off), size)
                 : ctx.fs->ReadNode(ino, static_cast<uint64_t>(off), size);
  if (!data.ok()) return ReplyError(req, data.status());
  // `data` keeps the bytes alive until the reply has copied them to the kernel.
  fuse_reply_buf(req, data->data, data->size);
}

void DoWrite(fuse_req_t req, fuse_ino_t ino, const char* buf, size_t size, off_t off,
             struct fuse_file_info* fi) noexcept {
  FuseContext& ctx = Counted(req, RequestKind::k_write);
  if (ControlDir::IsControl(ino)) {
    const Caller caller = CallerOf(req);
    Status st = ctx.control->Write(ino, static_cast<uint64_t>(off), std::string_view(buf, size),
                                   caller.uid, caller.gid);
    if (!st.ok()) return ReplyError(req, st);
    fuse_reply_write(req, size);
    return;
  }
  FileHandle* fh = HandleOf(fi);
  auto written = fh ? ctx.fs->Write(*fh, buf, size, static_cast<uint64_t>(off))
                    : ctx.fs->WriteNode(ino, buf, size, static_cast<uint64_t>(off));
  if (!written.ok()) return ReplyError(req, written.status());
  fuse_reply_write(req, *written);
}

void DoRelease(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) noexcept {
  Counted(req, RequestKind::k_release);
  if (fi->fh == 0) {
    // Opened by the kernel alone ("notify" mode), or a control file: nothing to free.
  } else {
    delete HandleOf(fi);
  }
  fuse_reply_err(req, 0);
}

void DoFsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info* fi) noexcept {
  FuseContext& ctx = Counted(req, RequestKind::k_fsync);
  if (ControlDir::IsControl(ino)) {
    fuse_reply_err(req, 0);
    return;
  }
  FileHandle* fh = HandleOf(fi);
  ReplyStatus(req, fh ? ctx.fs->Fsync(*fh, datasync != 0) : ctx.fs->FsyncNode(ino, datasync != 0));
}

// ---- directories ----

void DoOpendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) noexcept {
  FuseContext& ctx = Counted(req, RequestKind::k_opendir);
  if (ino == ControlDir::kDirNodeId) {
    fi->fh = 0;  // listed from the ControlDir itself
    fuse_reply_open(req, fi);
    return;
  }
  auto dh = ctx.fs->OpenDir(ino);
  if (!dh.ok()) return ReplyError(req, dh.status());
  fi->fh = reinterpret_cast<uint64_t>(dh->get());
  fi->cache_readdir = 0;  // a listing must show changes in the source
  if (fuse_reply_open(req, fi) == 0) dh->release();
}

void ReadControlDir(fuse_req_t req, FuseContext& ctx, size_t size, off_t off, bool plus) {
  std::vector<char> buf(size);
  size_t used = 0;
  const auto& files = ctx.control->files();
  for (size_t i = static_cast<size_t>(off); i < files.size(); i++) {
    struct ::stat st = ctx.control->Attr(files[i].nodeid);
    const off_t next = static_cast<off_t>(i + 1);
    size_t need;
    if (plus) {
      struct fuse_entry_param e {};
      e.ino = files[i].nodeid;
      e.generation = 1;  // as its lookup says: another would make the kernel drop the inode
      e.attr = st;
      need = fuse_add_direntry_plus(req, buf.data() + used, size - used, files[i].name.c_str(),
                                    &e, next);
    } else {
      need = fuse_add_direntry(req, buf.data() + used, size - used, files[i].name.c_str(), &st,
                               next);
    }
    if (need > size - used) break;
    used += need;
  }
  fuse_reply_buf(req, buf.data(), used);
}

void ReadDirCommon(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                   struct fuse_file_info* fi, bool plus) {
  FuseContext& ctx = Ctx(req);
  if (ino == ControlDir::kDirNodeId) return ReadControlDir(req, ctx, size, off, plus);
  auto* dh = reinterpret_cast<DirHandle*>(fi->fh);
  std::vector<char> buf(size);
  size_t used = 0;
  auto emit = [&](const std::string& name, const Entry& entry, off_t next) {
    size_t need;
    if (plus) {
      const struct fuse_entry_param e = EntryParam(ctx, entry);
      need = fuse_add_direntry_plus(req, buf.data() + used, size - used, name.c_str(), &e, next);
    } else {
      need = fuse_add_direntry(req, buf.data() + used, size - used, name.c_str(), &entry.attr,
                               next);
    }
    if (need > size - used) return false;
    used += need;
    return true;
  };
  Status st = ctx.fs->ReadDir(*dh, off, plus, emit);
  if (!st.ok() && used == 0) return ReplyError(req, st);
  fuse_reply_buf(req, buf.data(), used);
}

void DoReaddir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
               struct fuse_file_info* fi) noexcept {
  Counted(req, RequestKind::k_readdir);
  ReadDirCommon(req, ino, size, off, fi, false);
}

void DoReaddirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                   struct fuse_file_info* fi) noexcept {
  Counted(req, RequestKind::k_readdirplus);
  ReadDirCommon(req, ino, size, off, fi, true);
}

void DoReleasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) noexcept {
  Counted(req, RequestKind::k_releasedir);
  delete reinterpret_cast<DirHandle*>(fi->fh);  // 0 for the control directory
  fuse_reply_err(req, 0);
}

void DoFsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info* fi) noexcept {
  FuseContext& ctx = Counted(req, RequestKind::k_fsyncdir);
  if (fi->fh == 0) {  // the control directory
    fuse_reply_err(req, 0);
    return;
  }
  ReplyStatus(req, ctx.fs->FsyncDir(*reinterpret_cast<DirHandle*>(fi->fh), datasync != 0));
}

// Python's buffered open() asks isatty() of every file it opens, and the kernel sends
// each such ioctl to the daemon (it does not remember a refusal). epochfs defines no
// ioctl: the cheapest answer is this one, at once, with nothing looked up.
void DoIoctl(fuse_req_t req, fuse_ino_t, unsigned int, void*, fuse_file_info*, unsigned,
             const void*, size_t, size_t) noexcept {
  Counted(req, RequestKind::k_ioctl);
  fuse_reply_err(req, ENOTTY);
}

void DoStatfs(fuse_req_t req, fuse_ino_t ino) noexcept {
  FuseContext& ctx = Counted(req, RequestKind::k_statfs);
  auto sv = ctx.fs->StatFs();
  if (!sv.ok()) return ReplyError(req, sv.status());
  fuse_reply_statfs(req, &*sv);
}

// ---- xattrs ----

void ReplyXattr(fuse_req_t req, size_t size, const Result<std::string>& value) {
  if (!value.ok()) return ReplyError(req, value.status());
  if (size == 0) {
    fuse_reply_xattr(req, value->size());
  } else {
    fuse_reply_buf(req, value->data(), value->size());
  }
}

void DoSetxattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value, size_t size,
                int flags) noexcept {
  FuseContext& ctx = Counted(req, RequestKind::k_setxattr);
  if (ControlDir::IsControl(ino)) return ReplyError(req, Status::FromErrno(EPERM, "control"));
  ReplyStatus(req, ctx.fs->SetXattr(ino, name, std::string(value, size), flags));
}

void DoGetxattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) noexcept {
  FuseContext& ctx = Counted(req, RequestKind::k_getxattr);
  if (ControlDir::IsControl(ino)) return ReplyError(req, Status::FromErrno(ENODATA, "control"));
  ReplyXattr(req, size, ctx.fs->GetXattr(ino, name, size));
}

void DoListxattr(fuse_req_t req, fuse_ino_t ino, size_t size) noexcept {
  FuseContext& ctx = Counted(req, RequestKind::k_listxattr);
  if (ControlDir::IsControl(ino)) {
    return size == 0 ? (void)fuse_reply_xattr(req, 0) : (void)fuse_reply_buf(req, nullptr, 0);
  }
  ReplyXattr(req, size, ctx.fs->ListXattr(ino, size));
}

void DoRemovexattr(fuse_req_t req, fuse_ino_t ino, const char* name) noexcept {
  FuseContext& ctx = Counted(req, RequestKind::k_removexattr);
  if (ControlDir::IsControl(ino)) return ReplyError(req, Status::FromErrno(EPERM, "control"));
  ReplyStatus(req, ctx.fs->RemoveXattr(ino, name));
}

void DoInit(void* userdata, struct fuse_conn_info* conn) noexcept {
  // Readdirplus only where the kernel thinks it pays (a scan that stats what it lists).
  if (conn->capable & FUSE_CAP_READDIRPLUS) conn->want |= FUSE_CAP_READDIRPLUS;
  if (conn->capable & FUSE_CAP_READDIRPLUS_AUTO) conn->want |= FUSE_CAP_READDIRPLUS_AUTO;
  // The daemon alone says when the kernel's pages are stale: the watcher ("notify"),
  // the open that finds the file changed ("open"). The kernel must not drop them on
  // its own when fresh attributes show a new mtime (auto_inval_data): a drop while a
  // buffered write through the mount is in flight lets a reader re-read the page
  // before that write reaches the source, and the kernel then keeps a zero-filled
  // range where the write went (measured: an appender with readers, 1 read in ~100;
  // libfuse's passthrough_ll shows the same with cache=auto,timeout=60).
  conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;
  if (conn->capable & FUSE_CAP_EXPLICIT_INVAL_DATA) conn->want |= FUSE_CAP_EXPLICIT_INVAL_DATA;
  if (conn->capable & FUSE_CAP_PARALLEL_DIROPS) conn->want |= FUSE_CAP_PARALLEL_DIROPS;
  if (conn->capable & FUSE_CAP_CACHE_SYMLINKS) conn->want |= FUSE_CAP_CACHE_SYMLINKS;
  // Writes go straight through to the source; no writeback cache to get wrong.
  conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
  // O_TRUNC as a separate setattr(size=0): in "notify" mode there is no OPEN request
  // that could carry it.
  conn->want &= ~FUSE_CAP_ATOMIC_O_TRUNC;
  // The kernel keeps POSIX and flock locks locally, which is what a single node needs.
  conn->want &= ~(FUSE_CAP_POSIX_LOCKS | FUSE_CAP_FLOCK_LOCKS);
}

}  // namespace

void KernelInvalidator::InvalidateEntry(uint64_t parent_nodeid, const std::string& name) {
  // -ENOENT (the kernel has no such entry cached) is the common, harmless answer.
  fuse_lowlevel_notify_inval_entry(session_, parent_nodeid, name.c_str(), name.size());
}

void KernelInvalidator::InvalidateInode(uint64_t nodeid) {
  fuse_lowlevel_notify_inval_inode(session_, nodeid, 0, 0);  // attributes and all pages
}

const char* RequestKindName(RequestKind kind) {
  static constexpr const char* kNames[] = {
#define EPOCHFS_NAME(name) #name,
      EPOCHFS_REQUEST_KINDS(EPOCHFS_NAME)
#undef EPOCHFS_NAME
  };
  return kNames[static_cast<size_t>(kind)];
}

int ToErrno(const Status& status) {
  if (status.ok()) return 0;
  if (status.err() > 0) return status.err();  // the source's own answer, kept as it was
  switch (status.code()) {
    case Code::kOk: return 0;
    case Code::kNotFound: return ENOENT;
    case Code::kIoError: return EIO;
    case Code::kCorruption: return EIO;  // the caller sees a failed read, never bad bytes
    case Code::kNoSpace: return ENOSPC;
    case Code::kInvalidArgument: return EINVAL;
    case Code::kBusy: return EAGAIN;
    case Code::kStale: return ESTALE;
    case Code::kPermission: return EACCES;
    case Code::kUnsupported: return ENOSYS;
    case Code::kNoMemory: return ENOMEM;
    case Code::kDeviceError: return EIO;
  }
  return EIO;
}

const struct fuse_lowlevel_ops& FuseOperations() {
  static const struct fuse_lowlevel_ops ops = [] {
    struct fuse_lowlevel_ops o {};
    o.init = DoInit;
    o.lookup = DoLookup;
    o.forget = DoForget;
    o.forget_multi = DoForgetMulti;
    o.getattr = DoGetattr;
    o.setattr = DoSetattr;
    o.readlink = DoReadlink;
    o.mknod = DoMknod;
    o.mkdir = DoMkdir;
    o.unlink = DoUnlink;
    o.rmdir = DoRmdir;
    o.symlink = DoSymlink;
    o.rename = DoRename;
    o.link = DoLink;
    o.open = DoOpen;
    o.read = DoRead;
    o.write = DoWrite;
    // No flush: libfuse answers ENOSYS once and the kernel stops sending it, so close()
    // costs no round trip. Writes are already in the source when write() returns.
    o.release = DoRelease;
    o.fsync = DoFsync;
    o.opendir = DoOpendir;
    o.readdir = DoReaddir;
    o.readdirplus = DoReaddirplus;
    o.releasedir = DoReleasedir;
    o.fsyncdir = DoFsyncdir;
    o.statfs = DoStatfs;
    o.ioctl = DoIoctl;
    o.setxattr = DoSetxattr;
    o.getxattr = DoGetxattr;
    o.listxattr = DoListxattr;
    o.removexattr = DoRemovexattr;
    o.create = DoCreate;
    return o;
  }();
  return ops;
}

void RequestCounters::VisitCounters(const CounterVisitor& visit) const {
  for (size_t k = 0; k < static_cast<size_t>(RequestKind::kCount); k++) {
    const auto kind = static_cast<RequestKind>(k);
    visit({std::string("requests/") + RequestKindName(kind), "FUSE requests by kind.",
           CounterKind::kCounter, "epochfs_requests_total",
           std::string("kind=\"") + RequestKindName(kind) + "\""},
          count(kind));
  }
  visit({"request_errors", "FUSE requests answered with an error.", CounterKind::kCounter,
         "epochfs_request_errors_total"},
        errors());
}

}  // namespace epochfs::fs
