// FileHandle: one open of a source file through the mount ("open" consistency mode),
// and HandleFds, the budget of file descriptors all handles share.
//
// Why a budget: a training job may hold thousands of files open at once, while the
// daemon's fd limit may be low (a container, LimitNOFILE=, `ulimit -n 256`). A handle
// therefore owns its source fd only while the budget allows: beyond it, the least
// recently used idle handle's fd is closed, and that handle reopens the very same inode
// (through its node's O_PATH fd, or by name checked against (dev, ino)) the next time
// it is used. The application never sees EMFILE for opens it could make on the source.
//
// Thread-safety: all methods are thread-safe. A lease pins its handle's fd: it is never
// closed while a request uses it. Lock order: HandleFds::mutex_ alone (no other lock is
// taken while it is held).
#pragma once

#include <fcntl.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>

#include "base/thread_annotations.h"
#include "base/unique_fd.h"
#include "cache/cache.h"
#include "fs/inode_table.h"

namespace epochfs::fs {

class FileHandle;

class HandleFds {
 public:
  // At most `max_open` handle fds open at once (at least 1).
  explicit HandleFds(size_t max_open);
  HandleFds(const HandleFds&) = delete;
  HandleFds& operator=(const HandleFds&) = delete;

  size_t max_open() const { return max_open_; }
  size_t open() const;
  uint64_t reopens() const { return reopens_.load(std::memory_order_relaxed); }

 private:
  friend class FileHandle;
  friend class FdLease;
  void Release(FileHandle& handle);
  // Closes idle fds, least recently used first, down to the budget.
  void ShrinkLocked() REQUIRES(mutex_);

  const size_t max_open_;
  mutable Mutex mutex_;
  size_t open_ GUARDED_BY(mutex_) = 0;  // handles holding an fd
  std::list<FileHandle*> idle_ GUARDED_BY(mutex_);  // holding an fd, unpinned; LRU first
  std::atomic<uint64_t> reopens_{0};
};

// A borrowed fd, valid while the lease lives.
class FdLease {
 public:
  FdLease(FdLease&& other) noexcept : handle_(other.handle_), fd_(other.fd_) {
    other.handle_ = nullptr;
  }
  FdLease(const FdLease&) = delete;
  FdLease& operator=(const FdLease&) = delete;
  FdLease& operator=(FdLease&&) = delete;
  ~FdLease();
  int get() const { return fd_; }

 private:
  friend class FileHandle;
  FdLease(FileHandle* handle, int fd) : handle_(handle), fd_(fd) {}
  FileHandle* handle_;
  int fd_;
};

class FileHandle {
 public:
  // `reopen` opens the handle's file again (the same inode) with `flags`.
  using Reopen = std::function<Result<UniqueFd>(const Inode& inode, int flags)>;

  FileHandle(std::shared_ptr<Inode> inode, UniqueFd fd, cache::SourceIdentity id, int flags,
             HandleFds& fds, Reopen reopen);
  ~FileHandle();
  FileHandle(const FileHandle&) = delete;
  FileHandle& operator=(const FileHandle&) = delete;

  const std::shared_ptr<Inode>& inode() const { return inode_; }
  // Opened for writing: counted in the node's open_for_writing while the handle lives.
  bool may_write() const { return (flags_ & O_ACCMODE) != O_RDONLY; }
  // Its source fd is O_APPEND.
  bool appends() const { return (flags_ & O_APPEND) != 0; }
  // The source fd, reopened first if the budget closed it (or the open only checked
  // the file: SourceFs::Open).
  Result<FdLease> Fd();
  // Whether the handle holds its source fd now (Fd() would not open one).
  bool holds_fd() const;
  cache::SourceIdentity identity() const {
    MutexLock lock(id_mutex_);
    return id_;
  }
  void set_identity(const cache::SourceIdentity& id) {
    MutexLock lock(id_mutex_);
    id_ = id;
  }
  // Whether the kernel keeps what READs through this open bring (not a direct I/O
  // open): SourceObserver::ReadAnswered.
  bool reads_fill_page_cache() const { return reads_fill_page_cache_; }
  void set_reads_bypass_page_cache() { reads_fill_page_cache_ = false; }
  // The kernel serves this open from the source file itself (fs/passthrough.h): no READ
  // or WRITE comes through it. Set before the handle is given out.
  bool passthrough() const { return passthrough_; }
  void set_passthrough() { passthrough_ = true; }

 private:
  friend class HandleFds;
  friend class FdLease;

  std::shared_ptr<Inode> inode_;
  const int flags_;  // what the source fd was opened with, O_TRUNC and O_CREAT taken out
  HandleFds& fds_;
  const Reopen reopen_;
  // Guarded by fds_.mutex_. Not written as GUARDED_BY(fds_.mutex_): HandleFds takes
  // its own mutex_ and then touches handle.fd_, and the analysis cannot tell that
  // handle.fds_.mutex_ and this->mutex_ are the same lock, so every such access would
  // need an assertion instead of a check.
  UniqueFd fd_;
  int pins_ = 0;
  bool idle_listed_ = false;
  std::list<FileHandle*>::iterator idle_pos_;

  mutable Mutex id_mutex_;
  cache::SourceIdentity id_ GUARDED_BY(id_mutex_);
  bool reads_fill_page_cache_ = true;  // set once, before the handle is handed out
  bool passthrough_ = false;            // set once, before the handle is handed out
};

}  // namespace epochfs::fs
