// Filesystem: the core every FUSE request calls, once. A mount shows two kinds of
// nodes: the source's (SourceFs) and the synthetic ones of the control directory
// (ControlDir: `<mount>/.epochfs/` and its files, fixed node ids below 16). This class
// decides which a request is for and answers it, together with what the kernel may
// cache of the answer: entry and attribute timeouts, direct I/O or the kernel's pages
// kept. fs/fuse_ops.cc only decodes a request, calls one method here and turns what it
// returns into one reply; it knows nothing of control nodes or consistency modes.
//
// The consistency mode (docs/architecture.md has the measurements):
//  - "open" (`kernel_asks_to_open`): every open() is a request; it re-checks the source
//    file and lets the kernel keep its cached pages only if the file is unchanged
//    (close-to-open, as NFS). Two round trips per file (open, release) on every epoch.
//  - "notify": OPEN is answered ENOSYS once, after which the kernel opens files
//    without asking and keeps their pages; a warm epoch sends no request at all.
//    Changes made underneath the mount reach the kernel from the ChangeWatcher.
//
// Handles: an open source file is a FileHandle and an open source directory a
// DirHandle, owned by the kernel's open file from Open/OpenDir/Create until
// Release/ReleaseDir. Requests without one (nullptr) come for files the kernel opened
// alone ("notify" mode) and for control nodes, which never get one.
//
// Thread-safety: all methods are thread-safe (SourceFs and ControlDir are).
#pragma once

#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "cache/cache.h"
#include "fs/change_watcher.h"
#include "fs/control.h"
#include "fs/file_handle.h"
#include "fs/source_fs.h"

namespace epochfs::fs {

// What the kernel may cache of the source's answers. Long by default: the source is
// read-mostly. (Control nodes always get 0.)
struct FuseTimeouts {
  double entry_s = 60.0;    // how long the kernel trusts a name -> node mapping
  double attr_s = 60.0;     // how long it trusts attributes
  double negative_s = 1.0;  // how long it trusts "no such name"
};

struct FilesystemOptions {
  FuseTimeouts timeouts;
  bool kernel_asks_to_open = true;  // false: the "notify" consistency mode
};

// A node as the kernel should know it by a name. `nodeid` 0 is a negative entry: the
// name does not exist, and the kernel may remember that for `entry_timeout`.
struct EntryReply {
  uint64_t nodeid = 0;
  struct ::stat attr {};
  double attr_timeout = 0;
  double entry_timeout = 0;
};

struct AttrReply {
  struct ::stat attr {};
  double timeout = 0;
};

struct OpenReply {
  // "notify" mode: the answer is ENOSYS, which is no failure: from now on the kernel
  // opens every file by itself. Nothing below is set.
  bool kernel_opens_alone = false;
  std::unique_ptr<FileHandle> handle;  // null for a control file
  bool direct_io = false;
  // The kernel may keep its cached pages: the source file is unchanged since they were read.
  bool keep_cache = false;
  // The kernel serves this open from the source file itself (fs/passthrough.h): the
  // reply names this backing id, and nothing else above applies.
  std::optional<uint32_t> backing_id;
};

struct CreateReply {
  EntryReply entry;
  std::unique_ptr<FileHandle> handle;
};

class Filesystem {
 public:
  // `source` and `control` outlive the Filesystem.
  Filesystem(SourceFs& source, const ControlDir& control, FilesystemOptions options);
  Filesystem(const Filesystem&) = delete;
  Filesystem& operator=(const Filesystem&) = delete;

  // The one link made after construction (SourceFs::AttachKernel says why). `kernel`
  // drops what the kernel caches; in "open" mode SourceFs uses it from inside opens,
  // in "notify" mode `watcher` reports changes and lookups of control files use it.
  // Detach (nullptr, nullptr) once the session loop has ended.
  void AttachKernel(ChangeWatcher* watcher, Invalidator* kernel);

  // ---- names and attributes ----
  Result<EntryReply> Lookup(uint64_t parent, const std::string& name);
  void Forget(uint64_t nodeid, uint64_t nlookup);
  // `fh` is the open file the request came through, if any. `wait`: whether the call may
  // wait for the node's open_order (fs/inode_table.h, OrderWait; kBusy if it may not).
  Result<AttrReply> GetAttr(uint64_t nodeid, FileHandle* fh, OrderWait wait = OrderWait::kWait);
  Result<AttrReply> SetAttr(uint64_t nodeid, const struct ::stat& attr, SourceFs::AttrChange what,
                            FileHandle* fh, Caller caller);
  Result<std::string> ReadLink(uint64_t nodeid);
  Result<EntryReply> MakeNode(uint64_t parent, const std::string& name, mode_t mode, dev_t rdev,
                              Caller caller);
  Result<EntryReply> MakeDir(uint64_t parent, const std::string& name, mode_t mode, Caller caller);
  Result<EntryReply> SymLink(const std::string& target, uint64_t parent, const std::string& name,
                             Caller caller);
  Result<EntryReply> Link(uint64_t nodeid, uint64_t new_parent, const std::string& new_name);
  Status Unlink(uint64_t parent, const std::string& name);
  Status RemoveDir(uint64_t parent, const std::string& name);
  Status Rename(uint64_t parent, const std::string& name, uint64_t new_parent,
                const std::string& new_name, unsigned int flags);

  // ---- files ----
  Result<OpenReply> Open(uint64_t nodeid, int flags, OrderWait wait = OrderWait::kWait);
  Result<CreateReply> Create(uint64_t parent, const std::string& name, mode_t mode, int flags,
                             Caller caller);
  // The bytes stay alive as long as the buffer (its owner) does.
  Result<cache::ReadBuffer> Read(uint64_t nodeid, FileHandle* fh, uint64_t offset, size_t size);
  // `append`: the writer's file is O_APPEND (SourceFs::Write).
  Result<size_t> Write(uint64_t nodeid, FileHandle* fh, std::string_view data, uint64_t offset,
                       Caller caller, bool append = false);
  Status Fsync(uint64_t nodeid, FileHandle* fh, bool datasync);
  // Takes back what Open or Create handed out (null: nothing was). kBusy: a drop of the
  // node's pages is still owed (`wait` refused to wait for its open_order): make it with
  // DropOwedPages where waiting is allowed.
  Status Release(std::unique_ptr<FileHandle> fh, OrderWait wait = OrderWait::kWait);
  Status DropOwedPages(uint64_t nodeid);

  // ---- directories ----
  // Null for the control directory, which is listed from the ControlDir itself.
  Result<std::unique_ptr<DirHandle>> OpenDir(uint64_t nodeid);
  // Calls `emit(name, entry, next_offset)` for each entry from `offset` on until it
  // returns false (the reply buffer is full); SourceFs::ReadDir says how `plus` counts
  // lookups. Without `plus` only the entry's attr.st_ino and the type bits of
  // attr.st_mode are set.
  using DirEmitter =
      std::function<bool(const std::string& name, const EntryReply& entry, off_t next_offset)>;
  Status ReadDir(uint64_t nodeid, DirHandle* dh, off_t offset, bool plus, const DirEmitter& emit);
  Status FsyncDir(DirHandle* dh, bool datasync);
  void ReleaseDir(std::unique_ptr<DirHandle> dh);

  Result<struct ::statvfs> StatFs();

  // ---- xattrs ----
  // `size` 0 asks only for the length: the value is then that many NUL bytes.
  Result<std::string> GetXattr(uint64_t nodeid, const std::string& name, size_t size);
  Result<std::string> ListXattr(uint64_t nodeid, size_t size);
  Status SetXattr(uint64_t nodeid, const std::string& name, const std::string& value, int flags);
  Status RemoveXattr(uint64_t nodeid, const std::string& name);

 private:
  // A source node's entry with the timeouts its kind and the mode call for.
  EntryReply SourceEntry(const Entry& entry) const;
  Result<EntryReply> SourceEntry(const Result<Entry>& entry) const;
  // A control node's entry: its attributes, never to be trusted (timeouts 0).
  EntryReply ControlEntry(uint64_t nodeid) const;
  Status ReadControlDir(off_t offset, const DirEmitter& emit) const;

  SourceFs& source_;
  const ControlDir& control_;
  const FilesystemOptions options_;
  std::atomic<Invalidator*> kernel_{nullptr};  // AttachKernel
};

}  // namespace epochfs::fs
