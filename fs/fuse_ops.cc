#include "fs/fuse_ops.h"

#include <linux/fuse.h>
#include <sys/ioctl.h>

#include <cstring>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "base/thread_name.h"
#include "spdlog/spdlog.h"

namespace epochfs::fs {
namespace {

FuseContext& Ctx(fuse_req_t req) { return *static_cast<FuseContext*>(fuse_req_userdata(req)); }

// The core of the request's mount, with the request counted by kind.
// libfuse starts its workers itself; each takes its name at its first request.
Filesystem& Counted(fuse_req_t req, RequestKind kind) {
  thread_local const bool named = (NameThisThread("fuse-worker"), true);
  (void)named;
  FuseContext& ctx = Ctx(req);
  ctx.counters.Count(kind);
  return *ctx.fs;
}

Caller CallerOf(fuse_req_t req) {
  const struct fuse_ctx* c = fuse_req_ctx(req);
  return Caller{c->uid, c->gid, c->pid};
}

// The kernel's file keeps the core's handle as a pointer in fuse_file_info::fh (0: none).
FileHandle* HandleOf(const struct fuse_file_info* fi) {
  return fi ? reinterpret_cast<FileHandle*>(fi->fh) : nullptr;
}

DirHandle* DirHandleOf(const struct fuse_file_info* fi) {
  return reinterpret_cast<DirHandle*>(fi->fh);
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

struct fuse_entry_param EntryParam(const EntryReply& entry) {
  struct fuse_entry_param e {};
  e.ino = entry.nodeid;
  e.generation = 1;  // node ids are never reused, so one generation suffices
  e.attr = entry.attr;
  e.attr_timeout = entry.attr_timeout;
  e.entry_timeout = entry.entry_timeout;
  return e;
}

void ReplyEntry(fuse_req_t req, const Result<EntryReply>& entry) {
  if (!entry.ok()) return ReplyError(req, entry.status());
  const struct fuse_entry_param e = EntryParam(entry.value());
  fuse_reply_entry(req, &e);
}

void ReplyAttr(fuse_req_t req, const Result<AttrReply>& attr) {
  if (!attr.ok()) return ReplyError(req, attr.status());
  fuse_reply_attr(req, &attr->attr, attr->timeout);
}

// Calls made with OrderWait::kNoWait answer kBusy when the node's open_order is held.
bool OrderWasHeld(const Status& status) { return status.code() == Code::kBusy; }

// Makes such a call again where waiting is allowed (fs/waiting_room.h; without a
// waiting room, here), and replies from there: `retry` must not use the request's
// arguments, which live only as long as this callback.
void RetryInWaitingRoom(FuseContext& ctx, std::function<void()> retry) {
  ctx.counters.CountWaited();
  if (ctx.waiting_room == nullptr) return retry();
  ctx.waiting_room->Run(std::move(retry));
}

// Takes back a handle: at RELEASE, or when an open's reply found the opener gone. A
// drop of the node's pages it leaves owed (its open_order held) is made from the
// waiting room.
void ReleaseHandle(FuseContext& ctx, uint64_t nodeid, std::unique_ptr<FileHandle> handle) {
  if (!OrderWasHeld(ctx.fs->Release(std::move(handle), OrderWait::kNoWait))) return;
  Filesystem* const fs = ctx.fs;
  RetryInWaitingRoom(ctx, [fs, nodeid] { (void)fs->DropOwedPages(nodeid); });
}

// ---- names and attributes ----

void DoLookup(fuse_req_t req, fuse_ino_t parent, const char* name) noexcept {
  ReplyEntry(req, Counted(req, RequestKind::k_lookup).Lookup(parent, name));
}

void DoForget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) noexcept {
  Counted(req, RequestKind::k_forget).Forget(ino, nlookup);
  fuse_reply_none(req);
}

void DoForgetMulti(fuse_req_t req, size_t count, struct fuse_forget_data* forgets) noexcept {
  Filesystem& fs = Counted(req, RequestKind::k_forget);
  for (size_t i = 0; i < count; i++) fs.Forget(forgets[i].ino, forgets[i].nlookup);
  fuse_reply_none(req);
}

void DoGetattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) noexcept {
  FileHandle* const fh = HandleOf(fi);  // held by the kernel's file until this is answered
  auto attr = Counted(req, RequestKind::k_getattr).GetAttr(ino, fh, OrderWait::kNoWait);
  if (OrderWasHeld(attr.status())) {
    return RetryInWaitingRoom(Ctx(req), [req, ino, fh] {
      ReplyAttr(req, Ctx(req).fs->GetAttr(ino, fh, OrderWait::kWait));
    });
  }
  ReplyAttr(req, attr);
}

void DoSetattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set,
               struct fuse_file_info* fi) noexcept {
  Filesystem& fs = Counted(req, RequestKind::k_setattr);
  SourceFs::AttrChange what;
  what.mode = to_set & FUSE_SET_ATTR_MODE;
  what.uid = to_set & FUSE_SET_ATTR_UID;
  what.gid = to_set & FUSE_SET_ATTR_GID;
  what.size = to_set & FUSE_SET_ATTR_SIZE;
  what.atime = to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_ATIME_NOW);
  what.mtime = to_set & (FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_MTIME_NOW);
  what.atime_now = to_set & FUSE_SET_ATTR_ATIME_NOW;
  what.mtime_now = to_set & FUSE_SET_ATTR_MTIME_NOW;
  what.other = to_set & ~(FUSE_SET_ATTR_MODE | FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID |
                          FUSE_SET_ATTR_SIZE | FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_ATIME_NOW |
                          FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_MTIME_NOW);
  ReplyAttr(req, fs.SetAttr(ino, *attr, what, HandleOf(fi), CallerOf(req)));
}

void DoReadlink(fuse_req_t req, fuse_ino_t ino) noexcept {
  auto target = Counted(req, RequestKind::k_readlink).ReadLink(ino);
  if (!target.ok()) return ReplyError(req, target.status());
  fuse_reply_readlink(req, target->c_str());
}

void DoMknod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
             dev_t rdev) noexcept {
  ReplyEntry(req,
             Counted(req, RequestKind::k_mknod).MakeNode(parent, name, mode, rdev, CallerOf(req)));
}

void DoMkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) noexcept {
  ReplyEntry(req, Counted(req, RequestKind::k_mkdir).MakeDir(parent, name, mode, CallerOf(req)));
}

void DoSymlink(fuse_req_t req, const char* link, fuse_ino_t parent, const char* name) noexcept {
  ReplyEntry(req, Counted(req, RequestKind::k_symlink).SymLink(link, parent, name, CallerOf(req)));
}

void DoLink(fuse_req_t req, fuse_ino_t ino, fuse_ino_t new_parent, const char* new_name) noexcept {
  ReplyEntry(req, Counted(req, RequestKind::k_link).Link(ino, new_parent, new_name));
}

void DoUnlink(fuse_req_t req, fuse_ino_t parent, const char* name) noexcept {
  ReplyStatus(req, Counted(req, RequestKind::k_unlink).Unlink(parent, name));
}

void DoRmdir(fuse_req_t req, fuse_ino_t parent, const char* name) noexcept {
  ReplyStatus(req, Counted(req, RequestKind::k_rmdir).RemoveDir(parent, name));
}

void DoRename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t new_parent,
              const char* new_name, unsigned int flags) noexcept {
  ReplyStatus(
      req, Counted(req, RequestKind::k_rename).Rename(parent, name, new_parent, new_name, flags));
}

// ---- files ----

constexpr uint32_t kOpenPassthrough = 1u << 7;  // FOPEN_PASSTHROUGH (protocol 7.40)

void ReplyOpen(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi,
               Result<OpenReply> open) {
  if (!open.ok() && open.status().code() == Code::kStale) {
    // "Look the name up again" ("open" mode, a file changed underneath): an everyday
    // answer, counted as open_relookups, not among the errors of a healthy mount.
    fuse_reply_err(req, ESTALE);
    return;
  }
  if (!open.ok()) return ReplyError(req, open.status());
  if (open->kernel_opens_alone) {
    fuse_reply_err(req, ENOSYS);  // no failure: the kernel stops asking
    return;
  }
  fi->direct_io = open->direct_io;
  fi->keep_cache = open->keep_cache;
  fi->fh = reinterpret_cast<uint64_t>(open->handle.get());
  FuseContext& ctx = Ctx(req);  // the request is gone once replied to
  int sent;
  if (open->backing_id) {
    // libfuse 3.14's fuse_reply_open cannot name a backing file: the reply is written
    // as the kernel reads it (struct fuse_open_out of protocol 7.40, whose last field,
    // padding before, is the backing id). No other flag: the kernel refuses any but a
    // few with passthrough, and a passthrough open never uses the page cache.
    struct fuse_open_out out {};
    out.fh = fi->fh;
    out.open_flags = kOpenPassthrough;
    std::memcpy(&out.padding, &*open->backing_id, sizeof(out.padding));
    sent = fuse_reply_buf(req, reinterpret_cast<const char*>(&out), sizeof(out));
  } else {
    sent = fuse_reply_open(req, fi);
  }
  if (sent == 0) {
    open->handle.release();  // owned by the kernel's file now; freed in release
  } else {
    // The opener is gone (interrupted): released as the kernel would have, so that a
    // drop owed to the last writer (SourceFs::Release) is paid.
    ReleaseHandle(ctx, ino, std::move(open->handle));
  }
}

void DoOpen(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) noexcept {
  auto open = Counted(req, RequestKind::k_open).Open(ino, fi->flags, OrderWait::kNoWait);
  if (OrderWasHeld(open.status())) {
    return RetryInWaitingRoom(Ctx(req), [req, ino, info = *fi]() mutable {
      ReplyOpen(req, ino, &info, Ctx(req).fs->Open(ino, info.flags, OrderWait::kWait));
    });
  }
  ReplyOpen(req, ino, fi, std::move(open));
}

void DoCreate(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
              struct fuse_file_info* fi) noexcept {
  Filesystem& fs = Counted(req, RequestKind::k_create);
  auto created = fs.Create(parent, name, mode, fi->flags, CallerOf(req));
  if (!created.ok()) return ReplyError(req, created.status());
  const struct fuse_entry_param e = EntryParam(created->entry);
  fi->fh = reinterpret_cast<uint64_t>(created->handle.get());
  FuseContext& ctx = Ctx(req);  // the request is gone once replied to
  if (fuse_reply_create(req, &e, fi) == 0) {
    created->handle.release();
  } else {
    ReleaseHandle(ctx, created->entry.nodeid, std::move(created->handle));
    fs.Forget(created->entry.nodeid, 1);  // the kernel never got the entry
  }
}

void DoRead(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
            struct fuse_file_info* fi) noexcept {
  auto data =
      Counted(req, RequestKind::k_read).Read(ino, HandleOf(fi), static_cast<uint64_t>(off), size);
  if (!data.ok()) return ReplyError(req, data.status());
  // `data` keeps the bytes alive until the reply has copied them to the kernel.
  fuse_reply_buf(req, data->data, data->size);
}

void DoWrite(fuse_req_t req, fuse_ino_t ino, const char* buf, size_t size, off_t off,
             struct fuse_file_info* fi) noexcept {
  // An O_APPEND write appends where the source ends (SourceFs::Write). Not a shared
  // mapping's write-back (writepage), which writes pages where they are, and not direct
  // I/O: the kernel splits a large one into WRITEs at consecutive offsets sent at once,
  // which workers would append in the order they happen to run.
  const bool append =
      (fi->flags & O_APPEND) != 0 && (fi->flags & O_DIRECT) == 0 && fi->writepage == 0;
  auto written = Counted(req, RequestKind::k_write)
                     .Write(ino, HandleOf(fi), std::string_view(buf, size),
                            static_cast<uint64_t>(off), CallerOf(req), append);
  if (!written.ok()) return ReplyError(req, written.status());
  fuse_reply_write(req, *written);
}

void DoRelease(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) noexcept {
  (void)Counted(req, RequestKind::k_release);
  ReleaseHandle(Ctx(req), ino, std::unique_ptr<FileHandle>(HandleOf(fi)));
  fuse_reply_err(req, 0);
}

void DoFsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info* fi) noexcept {
  ReplyStatus(req, Counted(req, RequestKind::k_fsync).Fsync(ino, HandleOf(fi), datasync != 0));
}

// ---- directories ----

void DoOpendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) noexcept {
  auto dh = Counted(req, RequestKind::k_opendir).OpenDir(ino);
  if (!dh.ok()) return ReplyError(req, dh.status());
  fi->fh = reinterpret_cast<uint64_t>(dh->get());
  fi->cache_readdir = 0;  // a listing must show changes in the source
  if (fuse_reply_open(req, fi) == 0) dh->release();
}

void ReadDirCommon(fuse_req_t req, Filesystem& fs, fuse_ino_t ino, size_t size, off_t off,
                   struct fuse_file_info* fi, bool plus) {
  std::vector<char> buf(size);
  size_t used = 0;
  auto emit = [&](const std::string& name, const EntryReply& entry, off_t next) {
    size_t need;
    if (plus) {
      const struct fuse_entry_param e = EntryParam(entry);
      need = fuse_add_direntry_plus(req, buf.data() + used, size - used, name.c_str(), &e, next);
    } else {
      need =
          fuse_add_direntry(req, buf.data() + used, size - used, name.c_str(), &entry.attr, next);
    }
    if (need > size - used) return false;
    used += need;
    return true;
  };
  Status st = fs.ReadDir(ino, DirHandleOf(fi), off, plus, emit);
  if (!st.ok() && used == 0) return ReplyError(req, st);
  fuse_reply_buf(req, buf.data(), used);
}

void DoReaddir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
               struct fuse_file_info* fi) noexcept {
  ReadDirCommon(req, Counted(req, RequestKind::k_readdir), ino, size, off, fi, false);
}

void DoReaddirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                   struct fuse_file_info* fi) noexcept {
  ReadDirCommon(req, Counted(req, RequestKind::k_readdirplus), ino, size, off, fi, true);
}

void DoReleasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) noexcept {
  Counted(req, RequestKind::k_releasedir).ReleaseDir(std::unique_ptr<DirHandle>(DirHandleOf(fi)));
  fuse_reply_err(req, 0);
}

void DoFsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info* fi) noexcept {
  ReplyStatus(req, Counted(req, RequestKind::k_fsyncdir).FsyncDir(DirHandleOf(fi), datasync != 0));
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
  auto sv = Counted(req, RequestKind::k_statfs).StatFs();
  if (!sv.ok()) return ReplyError(req, sv.status());
  fuse_reply_statfs(req, &*sv);
}

// ---- xattrs ----

void ReplyXattr(fuse_req_t req, size_t size, const Result<std::string>& value) {
  // "No such attribute" answers a question, it reports no failure: `ls -l` asks for four
  // attributes of every file (SELinux label, ACLs), and 100,000 files made 400,000
  // "errors" in the counters.
  if (!value.ok() && ToErrno(value.status()) == ENODATA) {
    fuse_reply_err(req, ENODATA);
    return;
  }
  if (!value.ok()) return ReplyError(req, value.status());
  if (size == 0) {
    fuse_reply_xattr(req, value->size());
  } else {
    fuse_reply_buf(req, value->data(), value->size());
  }
}

void DoSetxattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value, size_t size,
                int flags) noexcept {
  ReplyStatus(
      req,
      Counted(req, RequestKind::k_setxattr).SetXattr(ino, name, std::string(value, size), flags));
}

void DoGetxattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) noexcept {
  ReplyXattr(req, size, Counted(req, RequestKind::k_getxattr).GetXattr(ino, name, size));
}

void DoListxattr(fuse_req_t req, fuse_ino_t ino, size_t size) noexcept {
  ReplyXattr(req, size, Counted(req, RequestKind::k_listxattr).ListXattr(ino, size));
}

void DoRemovexattr(fuse_req_t req, fuse_ino_t ino, const char* name) noexcept {
  ReplyStatus(req, Counted(req, RequestKind::k_removexattr).RemoveXattr(ino, name));
}

void DoInit(void* userdata, struct fuse_conn_info* conn) noexcept {
  // Readdirplus only where the kernel thinks it pays (a scan that stats what it lists),
  // or always when pushing pages wants the inodes known (FuseContext).
  if (conn->capable & FUSE_CAP_READDIRPLUS) conn->want |= FUSE_CAP_READDIRPLUS;
  const auto* ctx = static_cast<const FuseContext*>(userdata);
  if (ctx->readdirplus_always) {
    conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;
  } else if (conn->capable & FUSE_CAP_READDIRPLUS_AUTO) {
    conn->want |= FUSE_CAP_READDIRPLUS_AUTO;
  }
  // The daemon alone says when the kernel's pages are stale: the watcher ("notify"),
  // the open that finds the file changed ("open"). The kernel must not drop them on
  // its own when fresh attributes show a new mtime (auto_inval_data): a drop while a
  // buffered write through the mount is in flight lets a reader re-read the page
  // before that write reaches the source, and the kernel then keeps a zero-filled
  // range where the write went (seen with an appender and readers, and with libfuse's
  // passthrough_ll at cache=auto,timeout=60: docs/benchmarks.md, "Figures behind design
  // choices").
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
  // Marked first: a READ that refills the pages after the drop counts again.
  if (inodes_ != nullptr) {
    if (std::shared_ptr<Inode> node = inodes_->Find(nodeid)) node->kernel_pages.Dropped();
  }
  fuse_lowlevel_notify_inval_inode(session_, nodeid, 0, 0);  // attributes and all pages
}

void KernelInvalidator::InvalidateAttrs(uint64_t nodeid) {
  fuse_lowlevel_notify_inval_inode(session_, nodeid, -1, 0);  // a negative offset: no page
}

bool KernelInvalidator::ShowSize(uint64_t nodeid, uint64_t size, char last_byte) {
  // fuse_notify_store: a store ending past i_size sets i_size to its end, under the lock
  // that moves the attributes' version on (fuse_write_update_attr). Its one byte lands in
  // the last page, which the kernel reads whole again unless the byte begins it (then
  // the rest of the page is past the end: zeros, which the kernel fills in).
  struct fuse_bufvec buf = FUSE_BUFVEC_INIT(1);
  buf.buf[0].mem = &last_byte;
  return fuse_lowlevel_notify_store(session_, nodeid, size - 1, &buf,
                                    static_cast<fuse_buf_copy_flags>(0)) == 0;
}

namespace {
// From the kernel's include/uapi/linux/fuse.h (protocol 7.40), newer than bookworm's
// linux-libc-dev.
struct BackingMap {
  int32_t fd;
  uint32_t flags;
  uint64_t padding;
};
constexpr unsigned long kBackingOpen = _IOW(229, 1, BackingMap);
constexpr unsigned long kBackingClose = _IOW(229, 2, uint32_t);
}  // namespace

Result<uint32_t> KernelInvalidator::OpenBackingFile(int fd) {
  BackingMap map{fd, 0, 0};
  const int id = ::ioctl(fuse_session_fd(session_), kBackingOpen, &map);
  if (id < 0) return Status::FromErrno(errno, "register a passthrough file");
  return static_cast<uint32_t>(id);
}

void KernelInvalidator::CloseBackingFile(uint32_t id) {
  if (::ioctl(fuse_session_fd(session_), kBackingClose, &id) < 0) {
    spdlog::debug("unregister passthrough file {}: {}", id, std::strerror(errno));
  }
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
  // In the views for people the kinds are parts of all requests, most never used (left
  // out while 0); the errors go on the same row.
  for (size_t k = 0; k < static_cast<size_t>(RequestKind::kCount); k++) {
    const auto kind = static_cast<RequestKind>(k);
    visit(CounterInfo{std::string("requests/") + RequestKindName(kind), "FUSE requests by kind.",
                      CounterKind::kCounter, "epochfs_requests_total",
                      std::string("kind=\"") + RequestKindName(kind) + "\""}
              .Show({.row = "requests", .part = true, .quiet = true, .top = true}),
          count(kind));
  }
  visit(CounterInfo{"request_errors", "FUSE requests answered with an error.",
                    CounterKind::kCounter, "epochfs_request_errors_total"}
            .Show({.row = "requests", .label = "errors", .top = true}),
        errors());
  visit(CounterInfo{"requests_waited",
                    "FUSE requests made again from the waiting room: a node's open_order was "
                    "held, which a FUSE worker never waits for.",
                    CounterKind::kCounter}
            .Show({.row = "requests", .label = "waited", .quiet = true}),
        waited());
}

}  // namespace epochfs::fs
