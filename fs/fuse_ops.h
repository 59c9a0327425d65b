// The FUSE low-level glue: decode a request, make one call into the core
// (fs/filesystem.h), send exactly one reply made from what it returns; a Status becomes
// an errno in one place (ToErrno). Whether a request is for the source or the control
// directory, and what the kernel may cache of the answer (timeouts, the consistency
// mode), is the core's business.
//
// What the connection asks of the kernel is chosen here, at INIT (docs/architecture.md
// has the measurements): readdirplus, FLUSH answered ENOSYS once so close() costs no
// round trip, no writeback cache, and page invalidation only when the daemon says so.
//
// Thread-safety: callbacks run on libfuse's worker threads concurrently; everything
// they share (the Filesystem, the counters) is thread-safe.
#pragma once

#include <fuse_lowlevel.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "base/counters.h"
#include "base/status.h"
#include "fs/change_watcher.h"
#include "fs/filesystem.h"
#include "fs/waiting_room.h"

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
  void CountWaited() { waited_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t count(RequestKind kind) const {
    return counts_[static_cast<size_t>(kind)].load(std::memory_order_relaxed);
  }
  uint64_t errors() const { return errors_.load(std::memory_order_relaxed); }
  uint64_t waited() const { return waited_.load(std::memory_order_relaxed); }

  // One counter per kind ("requests/lookup"), then the errors (base/counters.h).
  void VisitCounters(const CounterVisitor& visit) const;

 private:
  std::array<std::atomic<uint64_t>, static_cast<size_t>(RequestKind::kCount)> counts_{};
  std::atomic<uint64_t> errors_{0};
  std::atomic<uint64_t> waited_{0};
};

// What every callback reaches through fuse_req_userdata().
struct FuseContext {
  Filesystem* fs = nullptr;  // set before mounting
  RequestCounters counters;
  // Every listing with attributes (READDIRPLUS), not only the first chunk of one
  // (libfuse's default READDIRPLUS_AUTO): a listed file's inode is then in the kernel
  // before its first open, so readahead can push its bytes (kernel_cache/page_cache_pusher.h).
  bool readdirplus_always = false;  // set before mounting
  // Where requests that must wait for a node's open_order are made (null: on the worker).
  WaitingRoom* waiting_room = nullptr;  // set before mounting
};

// Invalidates the kernel's caches through the session (for the ChangeWatcher), and
// tells `inodes` (may be null) that a node's pages are gone (KernelPagesRecord, the
// record kernel_cache/residency.h keeps on each node).
class KernelInvalidator : public Invalidator {
 public:
  explicit KernelInvalidator(struct fuse_session* session, InodeTable* inodes = nullptr)
      : session_(session), inodes_(inodes) {}
  void InvalidateEntry(uint64_t parent_nodeid, const std::string& name) override;
  void InvalidateInode(uint64_t nodeid) override;
  void InvalidateAttrs(uint64_t nodeid) override;
  bool ShowSize(uint64_t nodeid, uint64_t size, char last_byte) override;
  Result<uint32_t> OpenBackingFile(int fd) override;
  void CloseBackingFile(uint32_t id) override;

 private:
  struct fuse_session* session_;
  InodeTable* inodes_;
};

// The one place a Status becomes an errno.
int ToErrno(const Status& status);

const struct fuse_lowlevel_ops& FuseOperations();

}  // namespace epochfs::fs
