// WriteFence: keeps writes through the mount out of a file while the daemon stores bytes
// into the kernel's page cache of it or drops its pages (kernel_cache's PageCachePusher,
// the ChangeWatcher).
//
// Why no check inside the daemon can do this: a buffered write through the mount copies
// the new bytes into the file's page-cache pages, unlocks the full pages, and only then
// queues its WRITE; the WRITE's payload is copied out of those same pages when the daemon
// reads the request (fs/fuse/file.c: fuse_fill_write_pages, fuse_send_write_pages). A
// store (fuse_notify_store takes each page's lock and nothing else) that lands in that gap
// puts old bytes over the new ones, and the WRITE then carries the old bytes to the
// source: the write is acknowledged and lost. The daemon learns of the write only from
// the WRITE itself, too late. A drop in the same gap is no better: a READ can then fill
// the page again from the source before the WRITE reaches it, and keep the old bytes.
//
// So the fence is taken where writers come in, at open:
//  - "open" mode: every open is an OPEN. The node counts its handles open for writing
//    (FileHandle), changed only under the node's open_order lock, which the caller of
//    Enter holds for as long as the store or drop lasts. A write needs an open answered
//    first, so none can start while the lock is held, and none is under way when the
//    count is 0 (RELEASE comes after every write of its file, mmap write-back included).
//  - "notify" mode: the kernel opens files without asking. The fence is a read lease
//    (F_SETLEASE F_RDLCK) on the file, taken through the mount: the kernel grants it only
//    while nobody has the file open for writing (a writable shared mapping counts; its
//    dirty pages are written back when it is unmapped, before its file goes), and holds
//    back every open for writing and every truncate by name until the lease is released
//    (an O_NONBLOCK open for writing gets EWOULDBLOCK for that moment).
// A file the fence refuses (a writer has it open) is not stored into or dropped now.
//
// Thread-safety: thread-safe. Enter may block for as long as the kernel takes to open
// the file through the mount (a LOOKUP of a name whose entry expired).
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>

#include "base/status.h"
#include "base/unique_fd.h"
#include "fs/inode_table.h"

namespace epochfs::fs {

class WriteFence {
 public:
  // `lease_through`: in "notify" mode, the mountpoint (the mount over the source folder,
  // as any reader sees it), through which the files are opened for their leases; SIGIO
  // is then ignored from here on: the kernel sends it to a lease holder a writer waits
  // for, and its default action ends the process. Empty: "open" mode, no leases.
  explicit WriteFence(std::filesystem::path lease_through = {});
  WriteFence(const WriteFence&) = delete;
  WriteFence& operator=(const WriteFence&) = delete;

  // Released when it goes; empty in "open" mode.
  class Held {
   public:
    Held() = default;
    explicit Held(UniqueFd lease) : lease_(std::move(lease)) {}
    // The leased file, opened through the mount ("notify" mode); -1 in "open" mode. Its
    // pages can be dropped through it (posix_fadvise) without a notification that also
    // drops the kernel's attributes.
    int fd() const { return lease_.get(); }

   private:
    UniqueFd lease_;  // closing the fd ends the lease
  };

  // A Held while no write through the mount can touch `node`'s pages; kBusy while a
  // writer has the file open, another error where the lease cannot be taken (it says
  // why). REQUIRES: node.open_order held ("open" mode reads the writers' count under it).
  Result<Held> Enter(const InodeTable& inodes, Inode& node);
  // Whether the fence is a read lease ("notify" mode) rather than the node's count of
  // handles open for writing ("open" mode, which Enter reads under open_order).
  bool leases() const { return !lease_through_.empty(); }

 private:
  Result<Held> Lease(const InodeTable& inodes, const Inode& node);

  const std::filesystem::path lease_through_;
  std::atomic<bool> lease_error_logged_{false};
};

}  // namespace epochfs::fs
