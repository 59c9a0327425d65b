// The FUSE low-level glue: decode a request, call SourceFs or the control directory,
// map the Status to an errno in one place (ToErrno), send exactly one reply.
//
// Kernel-side caching is chosen here (docs/architecture.md has the measurements):
// long entry and attribute timeouts (the source is read-mostly), FLUSH answered ENOSYS
// once so close() costs no round trip, readdirplus, and one of two consistency modes:
//  - "open": every open() is a request; it re-checks the source file and lets the
//    kernel keep its cached pages only if the file is unchanged (close-to-open, as
//    NFS). Two round trips per file (open, release) on every epoch.
//  - "notify": OPEN is answered ENOSYS once, after which the kernel opens files
//    without asking and keeps their pages; a warm epoch sends no request at all.
//    Changes made underneath the mount reach the kernel from the ChangeWatcher.
//
// Thread-safety: callbacks run on libfuse's worker threads concurrently; everything
// they share (SourceFs, ControlDir, the counters) is thread-safe.
#pragma once

#include <fuse_lowlevel.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "base/counters.h"
#include "base/status.h"
#include "fs/change_watcher.h"
#include "fs/control.h"
#include "fs/source_fs.h"

namespace epochfs::fs {

#define EPOCHFS_REQUEST_KINDS(X)                                                             \
  X(lookup) X(forget) X(getattr) X(setattr) X(readlink) X(mknod) X(mkdir) X(unlink) X(rmdir) \
  X(symlink) X(rename) X(link) X(open) X(read) X(write) X(flush) X(release) X(fsync)         \
  X(opendir) X(readdir) X(readdirplus) X(releasedir) X(fsyncdir) X(statfs) X(setxattr)      \
  X(getxattr) X(listxattr) X(removexattr) X(create) X(ioctl)

enum class RequestKind : uint8_t {
#define EPOCHFS_ENUM(name) k_##name,
  EPOCHFS_REQUEST_KINDS(EPOCHFS_ENUM)
#undef EPOCHFS_ENUM
  kCount
};

const char* RequestKindName(RequestKind kind);

// Requests received, by kind, and errors replied. Lock-free.
class RequestCounters {
 public:
  void Count(RequestKind kind) {
    counts_[static_cast<size_t>(kind)].fetch_add(1, std::memory_order_relaxed);
  }
  void CountError() { errors_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t count(RequestKind kind) const {
    return counts_[static_cast<size_t>(kind)].load(std::memory_order_relaxed);
  }
  uint64_t errors() const { return errors_.load(std::memory_order_relaxed); }

  // One counter per kind ("requests/lookup"), then the errors (base/counters.h).
  void VisitCounters(const CounterVisitor& visit) const;

 private:
  std::array<std::atomic<uint64_t>, static_cast<size_t>(RequestKind::kCount)> counts_{};
  std::atomic<uint64_t> errors_{0};
};

struct FuseTimeouts {
  double entry_s = 60.0;     // how long the kernel trusts a name -> node mapping
  double attr_s = 60.0;      // how long it trusts attributes
  double negative_s = 1.0;   // how long it trusts "no such name"
};

// What every callback reaches through fuse_req_userdata().
struct FuseContext {
  SourceFs* fs = nullptr;
  const ControlDir* control = nullptr;
  FuseTimeouts timeouts;
  bool kernel_asks_to_open = true;  // false: the "notify" consistency mode
  RequestCounters counters;
  struct fuse_session* session = nullptr;
};

// Invalidates the kernel's caches through the session (for the ChangeWatcher).
class KernelInvalidator : public Invalidator {
 public:
  explicit KernelInvalidator(struct fuse_session* session) : session_(session) {}
  void InvalidateEntry(uint64_t parent_nodeid, const std::string& name) override;
  void InvalidateInode(uint64_t nodeid) override;

 private:
  struct fuse_session* session_;
};

// The one place a Status becomes an errno.
int ToErrno(const Status& status);

const struct fuse_lowlevel_ops& FuseOperations();

}  // namespace epochfs::fs
