// MountView: opens folders of the mount from the daemon's own threads without making
// the mount busy for the users' umount.
//
// Why: umount(2) fails with EBUSY while any file is open on the mount, the daemon's own
// included. The daemon's listings (KernelListing after a restart, AttrRefresh after
// READs) each hold a folder open for as long as its READDIRPLUS takes, which is seconds
// for a large folder on a cold source; a user's `umount` or `fusermount3 -u` that came
// in that moment failed.
//
// How: every Open makes a private clone of the mount (open_tree(2), OPEN_TREE_CLONE): a
// mount of its own, of the same superblock, attached nowhere. What is opened through it
// pins the clone, not the mount the users see, so their umount goes through. The
// superblock, and with it the FUSE connection, lives on until the last file opened
// through a clone is closed: the listing in progress is answered to its end, and then
// the daemon sees the unmount as it always does. No clone is kept between opens: one
// kept would keep the connection alive after the unmount, and the daemon would never
// learn of it.
//
// After the unmount the same path is the folder underneath (the source): every Open
// checks that what it opened is on the mount's device, and refuses it otherwise. A
// listing under way when the users unmount asks StillMounted() between its reads, so
// that it ends at once rather than keep the connection, and the daemon, alive for as
// long as the rest of the folder takes.
//
// open_tree needs CAP_SYS_ADMIN (and Linux 5.2): a daemon without it opens by path as
// before, and an unmount during a listing is EBUSY for that moment (`epochfs umount`
// retries). A clone refused for another reason opens that one folder by path.
//
// Thread-safety: thread-safe.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>

#include "base/status.h"
#include "base/unique_fd.h"

namespace epochfs::kernel_cache {

class MountView {
 public:
  // `mountpoint` is the mount's root, already answering: its device is taken now.
  static Result<std::unique_ptr<MountView>> Of(std::filesystem::path mountpoint);
  MountView(const MountView&) = delete;
  MountView& operator=(const MountView&) = delete;

  // Opens `relative` ("" for the root) below the mount with `flags` (O_CLOEXEC added).
  // NotFound when the mount is no longer there.
  Result<UniqueFd> Open(const std::string& relative, int flags) const;

  // Whether the mount is still at its mountpoint (a path walk; no request to the daemon).
  bool StillMounted() const;

  // Whether opens go through private clones (false: by path, pinning the mount).
  bool private_clones() const { return clones_.load(std::memory_order_relaxed); }
  const std::filesystem::path& mountpoint() const { return mountpoint_; }

 private:
  MountView(std::filesystem::path mountpoint, dev_t dev)
      : mountpoint_(std::move(mountpoint)), dev_(dev) {}
  // Whether `path` relative to `dir_fd` ("" for dir_fd itself) is on the mount's device.
  bool OnTheMount(int dir_fd, const char* path) const;

  std::filesystem::path mountpoint_;
  dev_t dev_;
  mutable std::atomic<bool> clones_{true};  // until open_tree is refused once
};

}  // namespace epochfs::kernel_cache
