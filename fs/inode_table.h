// InodeTable: the one owner of FUSE node ids and their lookup counts.
//
// A FUSE node id names one source object (dev, ino) for as long as the kernel holds a
// lookup reference on it. Node ids come from a counter and are never reused or derived
// from pointers. Every node keeps an O_PATH fd of its source object: a directory's is
// the base of the `*at()` calls beneath it, which is what lets epochfs be mounted over
// the source folder itself; a file's reaches that very inode even after it was
// unlinked or renamed over, so a reader that opened it first keeps reading it. What a
// *name* means now is answered by resolving (parent directory, name) again and
// checking (dev, ino): a file renamed over or deleted in the source is noticed instead
// of served stale. A child holds a shared_ptr to its parent, so the parent's fd stays
// open while any child needs it.
//
// Thread-safety: all methods are thread-safe. `mutex_` guards the maps and every
// Inode's mutable fields (parent, name, nlookup, kernel_cache_id); Inode::path_fd and
// the (dev, ino) key are immutable after creation and read without the lock.
#pragma once

#include <sys/stat.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "cache/cache.h"
#include "cache/unique_fd.h"

namespace epochfs::fs {

inline constexpr uint64_t kRootNodeId = 1;  // FUSE_ROOT_ID

struct Inode {
  uint64_t nodeid = 0;
  uint64_t dev = 0;
  uint64_t ino = 0;
  bool is_dir = false;
  UniqueFd path_fd;  // O_PATH fd of the source object (invalid if it could not be taken)
  // Open file handles ("open" mode): while there are any, the node's attributes are its
  // inode's even if its name now means something else (fstat of an unlinked open file).
  std::atomic<int> open_handles{0};
  // Writes through the mount now between their pwrite and recording the identity they
  // left: the kernel's pages follow such writes (write-through), so a change of
  // identity they explain is no reason to drop those pages.
  std::atomic<int> writes_in_flight{0};
  // Held by an open while it compares the file's identity with the kernel's pages and
  // drops them ("open" mode).
  std::mutex open_order;

  // Guarded by InodeTable::mutex_.
  std::shared_ptr<Inode> parent;  // null for the root
  std::string name;               // the last name it was looked up or renamed by
  uint64_t nlookup = 0;
  // Identity of the source file when the kernel last filled its page cache for this
  // node (set at open). An open that sees the same identity keeps the kernel's cache.
  std::optional<cache::SourceIdentity> kernel_cache_id;
  int64_t kernel_cache_id_at_ns = 0;  // wall clock when kernel_cache_id was recorded
  bool kernel_cache_id_written = false;  // recorded after a write through the mount
};

// Where a non-directory lives: a parent directory fd (kept open by `parent`) and a name.
struct Location {
  std::shared_ptr<Inode> parent;
  std::string name;
  int dir_fd() const { return parent->path_fd.get(); }
};

class InodeTable {
 public:
  // The root is (dev, ino) of `root_fd`, an O_PATH fd of the source directory. At most
  // `max_file_fds` non-directory nodes keep their O_PATH fd (the fd limit is finite);
  // beyond that a file node is reached by name only. Directories always keep theirs.
  InodeTable(UniqueFd root_fd, const struct ::stat& root_stat,
             uint64_t max_file_fds = UINT64_MAX);

  std::shared_ptr<Inode> Find(uint64_t nodeid) const;
  // The node of source object (dev, ino), if the kernel knows it.
  std::shared_ptr<Inode> FindBySource(uint64_t dev, uint64_t ino) const;
  std::shared_ptr<Inode> root() const { return root_; }

  // Records a lookup reference on the object `st` found as `name` in `parent`, creating
  // its node on first sight. `path_fd` is the object's O_PATH fd (kept only if the
  // node is new). Updates the node's location.
  //
  // `old_name_gone`: the caller found that the name the object's node was last known
  // by no longer names it (renamed in the source). The object then gets a new node,
  // and the old one stays bound to its old, dead name until the kernel forgets it: a
  // path the kernel still caches under the old name then answers ESTALE instead of
  // quietly reaching the object under its new name (close-to-open by name).
  std::shared_ptr<Inode> Remember(const std::shared_ptr<Inode>& parent, const std::string& name,
                                  const struct ::stat& st, UniqueFd path_fd,
                                  bool old_name_gone = false);

  // Drops `n` lookup references; the node goes away at zero (the root never does), and
  // is then returned so the caller can let go of what it holds for it.
  std::shared_ptr<Inode> Forget(uint64_t nodeid, uint64_t n);

  // The current location of a non-root node.
  Location LocationOf(const Inode& inode) const;

  // After a rename in the source: the node now lives at (new_parent, new_name).
  void Move(const std::shared_ptr<Inode>& inode, const std::shared_ptr<Inode>& new_parent,
            const std::string& new_name);

  // Compares `id` with the identity the kernel's cached pages of `inode` were read
  // with, and records `id` as the new one.
  enum class CacheMatch { kSame, kChanged, kUnknown };
  // A write through the mount in flight counts as kSame: the kernel's pages already
  // hold what it writes. An equal identity counts only if the file had not changed
  // shortly before it was recorded (git's "racily clean" rule): a change in the same
  // tick of a coarse timestamp clock leaves size, mtime and ctime as they were. An
  // identity older (by ctime) than the one recorded is a late observation, not a
  // change: kSame, and the recorded one stays. An
  // identity `written` by the mount itself (recorded right after its write) is
  // trusted even if recent: the kernel's pages hold that write, and dropping them at
  // every open while a writer appends races with its next write. (What that trust
  // misses: a writer underneath changing the same file within the same timestamp
  // tick without changing its size.)
  CacheMatch SwapKernelCacheId(Inode& inode, const cache::SourceIdentity& id,
                               bool written = false);
  void ClearKernelCacheId(Inode& inode);
  // Whether the kernel's pages of `inode` are those of the file as `id` now says: the
  // change was made through the mount (or is being made now). Dropping the pages then
  // would only race with the write that keeps them current (the kernel zero-fills a
  // page re-read before that write reaches the source).
  bool KernelCacheFollows(const Inode& inode, const cache::SourceIdentity& id) const;

  size_t size() const;
  uint64_t file_fds() const;

 private:
  // REQUIRES mutex_. SwapKernelCacheId at wall-clock time `now`.
  CacheMatch Compare(Inode& inode, const cache::SourceIdentity& id, bool written, int64_t now);

  struct DevIno {
    uint64_t dev, ino;
    bool operator==(const DevIno&) const = default;
  };
  struct DevInoHash {
    size_t operator()(const DevIno& k) const { return k.ino * 0x9E3779B97F4A7C15ull ^ k.dev; }
  };

  mutable std::mutex mutex_;
  std::shared_ptr<Inode> root_;
  uint64_t next_nodeid_ = 16;  // ids below 16 are reserved for control nodes
  const uint64_t max_file_fds_;
  uint64_t file_fds_ = 0;      // GUARDED_BY(mutex_): file nodes in the table holding an fd
  std::unordered_map<uint64_t, std::shared_ptr<Inode>> by_nodeid_;  // GUARDED_BY(mutex_)
  std::unordered_map<DevIno, uint64_t, DevInoHash> by_devino_;      // GUARDED_BY(mutex_)
};

}  // namespace epochfs::fs
