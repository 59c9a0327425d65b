#include "fs/file_handle.h"

#include <fcntl.h>

#include <algorithm>

namespace epochfs::fs {

HandleFds::HandleFds(size_t max_open) : max_open_(std::max<size_t>(1, max_open)) {}

size_t HandleFds::open() const {
  MutexLock lock(mutex_);
  return open_;
}

void HandleFds::ShrinkLocked() {
  while (open_ > max_open_ && !idle_.empty()) {
    FileHandle* victim = idle_.front();
    idle_.pop_front();
    victim->idle_listed_ = false;
    victim->fd_.reset();
    open_--;
  }
}

void HandleFds::Release(FileHandle& handle) {
  MutexLock lock(mutex_);
  if (--handle.pins_ == 0 && handle.fd_) {
    handle.idle_pos_ = idle_.insert(idle_.end(), &handle);
    handle.idle_listed_ = true;
    ShrinkLocked();
  }
}

FdLease::~FdLease() {
  if (handle_) handle_->fds_.Release(*handle_);
}

FileHandle::FileHandle(std::shared_ptr<Inode> inode, UniqueFd fd, cache::SourceIdentity id,
                       int flags, HandleFds& fds, Reopen reopen)
    : inode_(std::move(inode)),
      flags_(flags & ~(O_TRUNC | O_CREAT | O_EXCL)),
      fds_(fds),
      reopen_(std::move(reopen)),
      id_(id) {
  inode_->open_handles.fetch_add(1);
  if (may_write()) inode_->open_for_writing.fetch_add(1);
  MutexLock lock(fds_.mutex_);
  fd_ = std::move(fd);
  if (fd_) {
    fds_.open_++;
    idle_pos_ = fds_.idle_.insert(fds_.idle_.end(), this);
    idle_listed_ = true;
    fds_.ShrinkLocked();
  }
}

FileHandle::~FileHandle() {
  inode_->open_handles.fetch_sub(1);
  if (may_write()) inode_->open_for_writing.fetch_sub(1);
  MutexLock lock(fds_.mutex_);
  if (idle_listed_) fds_.idle_.erase(idle_pos_);
  if (fd_) fds_.open_--;
}

bool FileHandle::holds_fd() const {
  MutexLock lock(fds_.mutex_);
  return static_cast<bool>(fd_);
}

Result<FdLease> FileHandle::Fd() {
  {
    MutexLock lock(fds_.mutex_);
    if (fd_) {
      if (idle_listed_) {
        fds_.idle_.erase(idle_pos_);
        idle_listed_ = false;
      }
      pins_++;
      return FdLease(this, fd_.get());
    }
  }
  // Closed by the budget: open the same inode again, outside the lock (a network
  // source may take a while).
  auto reopened = reopen_(*inode_, flags_);
  if (!reopened.ok()) return reopened.status();
  fds_.reopens_.fetch_add(1, std::memory_order_relaxed);
  MutexLock lock(fds_.mutex_);
  if (!fd_) {  // another request of this handle may have reopened it meanwhile
    fd_ = std::move(*reopened);
    fds_.open_++;
  }
  if (idle_listed_) {
    fds_.idle_.erase(idle_pos_);
    idle_listed_ = false;
  }
  pins_++;
  fds_.ShrinkLocked();
  return FdLease(this, fd_.get());
}

}  // namespace epochfs::fs
