// ChangeWatcher: tells the kernel about changes made to the source underneath the
// mount, so that the kernel may keep names, attributes and pages without asking the
// daemon on every open (the "notify" consistency mode, docs/architecture.md).
//
// Every directory the kernel knows (a directory node) is watched with inotify. An
// event for a name in it invalidates the kernel's entry for that name (so the next
// path walk looks it up again: renamed over, deleted, created) and, when the name
// still resolves to a known node, that node's attributes and pages (modified). Events
// caused by the daemon's own pass-through writes leave the kernel's pages alone: it
// follows its own writes (InodeTable::KernelCacheFollows).
// inotify sees changes made on this machine only: network filesystems use the "open"
// mode instead.
//
// Thread-safety: Watch/Unwatch are thread-safe; one thread reads events and calls
// the Invalidator, never from inside a FUSE request (the kernel forbids that).
//
// In the "open" mode the kernel re-checks every file at open, so the watcher only follows
// names that go (Scope::kNamesGone: deleted, renamed away or over): it drops the kernel's
// entry, so that the kernel forgets a file deleted underneath and the daemon lets go of
// its fd of it (with it, the file's disk space). Without it such a node stayed until the
// kernel reclaimed the entry, which a mount that is never looked at again never does.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/counters.h"
#include "base/status.h"
#include "base/thread_annotations.h"
#include "base/unique_fd.h"
#include "fs/inode_table.h"
#include "fs/write_fence.h"

namespace epochfs::fs {

// What the watcher asks of the FUSE layer.
class Invalidator {
 public:
  virtual ~Invalidator() = default;
  virtual void InvalidateEntry(uint64_t parent_nodeid, const std::string& name) = 0;
  virtual void InvalidateInode(uint64_t nodeid) = 0;
  // Drops the kernel's attributes of `nodeid` and none of its pages: the kernel refuses
  // replies to requests sent before, and asks again at the next use that needs them.
  virtual void InvalidateAttrs(uint64_t nodeid) = 0;
  // Makes the kernel's size of `nodeid` at least `size` by storing the file's last byte
  // (`last_byte`, at size - 1) into its pages: the kernel takes a larger size from such a
  // store in the same step that refuses the replies to requests sent before it, so a
  // reader whose GETATTR it refused still reads up to `size`. A smaller size is left as
  // it is. Returns false if the kernel has no such node. Only while no handle writes the
  // file (fs/write_fence.h: a store can land under a buffered write). `size` > 0.
  virtual bool ShowSize(uint64_t nodeid, uint64_t size, char last_byte) = 0;
  // FUSE passthrough (fs/passthrough.h): registers the source file `fd` refers to with the
  // connection, for OPEN replies to name by the id returned, and unregisters an id. A
  // kernel link without passthrough refuses (kUnsupported).
  virtual Result<uint32_t> OpenBackingFile(int /*fd*/) {
    return Status::Unsupported("no passthrough on this connection");
  }
  virtual void CloseBackingFile(uint32_t /*id*/) {}
};

class ChangeWatcher {
 public:
  enum class Scope {
    kEverything,  // "notify" mode: names, attributes and pages
    kNamesGone,   // "open" mode: only names deleted, renamed away or renamed over
  };
  // Starts the event thread. `table` and `fence` outlive the watcher. With a `fence`, a
  // file's pages are dropped only while no write through the mount can be on its way
  // (fs/write_fence.h); one open for writing is tried again kWriterRetryNs later.
  static Result<std::unique_ptr<ChangeWatcher>> Start(const InodeTable& table,
                                                      Invalidator& invalidator,
                                                      Scope scope = Scope::kEverything,
                                                      WriteFence* fence = nullptr);
  static constexpr int64_t kWriterRetryNs = 50'000'000;
  // How long a drop for a change waits for the file's writers at most (DropFenced); a
  // precautionary one (InvalidateLater with a time) waits for as long as they write, tried
  // again every kWriterRetryNs for that long, then every kWriterWaitNs.
  static constexpr int64_t kWriterWaitNs = 1'000'000'000;
  // Whether the watcher follows changes to files' contents (Scope::kEverything).
  bool follows_contents() const { return scope_ == Scope::kEverything; }
  ~ChangeWatcher();

  // Starts watching directory node `dir` (idempotent). A failure (the inotify watch
  // limit) is logged once and counted; that directory's changes are then seen only
  // after the attribute and entry timeouts.
  void Watch(const Inode& dir);
  void Unwatch(const Inode& dir);
  // Drops the kernel's attributes and pages of `nodeid` from the watcher's thread: for a
  // change found by an identity check inside a request (which must not notify the
  // kernel itself), one inotify cannot report (a hard link outside the source, a
  // shared mapping). With `at_ns` (wall clock), not before then: once the racily clean
  // window of a recent identity has passed (InodeTable::CacheMatch::kRecent). That drop
  // is a precaution against a second change within one timestamp tick, not for a change
  // seen, and it never goes under a writer through the mount (DropFenced).
  void InvalidateLater(uint64_t nodeid, int64_t at_ns = 0);
  // Drops the kernel's attributes of `nodeid`, and none of its pages, from the caller's
  // thread: safe inside a request (no page lock is taken). The kernel then refuses the
  // attributes of every reply to a request sent before, that request's own included.
  void InvalidateAttrsNow(uint64_t nodeid) { invalidator_.InvalidateAttrs(nodeid); }
  // At once and past the fence: for pages known not to be the file's already (an append
  // the kernel placed elsewhere than the source did: SourceFs::WriteFd), which a writer
  // that keeps the file open must not keep wrong for as long as it does.
  void InvalidateUnfenced(uint64_t nodeid);
  uint64_t identity_invalidations() const {
    return identity_invalidations_.load(std::memory_order_relaxed);
  }
  uint64_t drops_deferred() const { return drops_deferred_.load(std::memory_order_relaxed); }
  uint64_t drops_forced() const { return drops_forced_.load(std::memory_order_relaxed); }

  uint64_t watched() const;
  uint64_t events() const { return events_.load(std::memory_order_relaxed); }
  uint64_t watch_failures() const { return watch_failures_.load(std::memory_order_relaxed); }

  // Names the counters above (base/counters.h). `watcher` may be null (another
  // consistency mode, or inotify unavailable): the counters are then 0, so the stats
  // keep the same keys in every mode.
  static void VisitCounters(const ChangeWatcher* watcher, const CounterVisitor& visit);

 private:
  ChangeWatcher(UniqueFd inotify_fd, UniqueFd wake_fd, UniqueFd later_fd,
                const InodeTable& table, Invalidator& invalidator, Scope scope,
                WriteFence* fence);
  void Run();
  void Handle(int wd, uint32_t mask, const std::string& name);
  // Why a drop is asked: a change seen underneath (its pages are the old file's), or a
  // precaution (they may be: InvalidateLater with a time).
  enum class Why : uint8_t { kChanged, kPrecaution };
  // Drops the kernel's attributes and pages of `node` behind the fence; false when a
  // writer has the file open (queued again for later). A drop for a change goes ahead
  // once it has waited kWriterWaitNs; a precaution waits for the writer.
  bool DropFenced(Inode& node, Why why);
  // Queues the drop of `nodeid` for `at_ns`, or keeps the one queued already; a change
  // makes it a drop for a change, due no later than `at_ns`.
  void QueueLocked(uint64_t nodeid, int64_t at_ns, Why why) REQUIRES(mutex_);
  // Drops the kernel's attributes and pages of `nodeid` now, unfenced, and counts the
  // asks for that drop answered. `node`: its table entry, nullptr once forgotten (the
  // kernel's pages may outlive it).
  void DropAttrsAndPages(uint64_t nodeid, Inode* node);
  // The asks for a drop of `node`'s pages, `asked` of them when it began, are answered
  // (Inode::kernel_drops_answered).
  static void Answered(Inode& node, uint64_t asked);

  UniqueFd inotify_fd_;
  UniqueFd wake_fd_;   // an eventfd that ends Run()
  UniqueFd later_fd_;  // an eventfd: InvalidateLater() queued something
  const Scope scope_;
  const InodeTable& table_;
  Invalidator& invalidator_;
  WriteFence* const fence_;  // may be null: drops unfenced
  mutable Mutex mutex_;
  std::unordered_map<int, uint64_t> nodeid_by_wd_ GUARDED_BY(mutex_);
  std::unordered_map<uint64_t, int> wd_by_nodeid_ GUARDED_BY(mutex_);
  std::vector<uint64_t> later_ GUARDED_BY(mutex_);
  std::vector<uint64_t> unfenced_ GUARDED_BY(mutex_);
  // Nodes whose drop a writer put off, and since when (wall clock): for a change, and
  // for a precaution.
  std::unordered_map<uint64_t, int64_t> deferred_since_ GUARDED_BY(mutex_);
  std::unordered_map<uint64_t, int64_t> precaution_deferred_since_ GUARDED_BY(mutex_);
  struct Queued {
    uint64_t nodeid;
    Why why;
  };
  std::multimap<int64_t, Queued> later_at_ GUARDED_BY(mutex_);  // wall clock -> drop
  // Drops the nodes queued by InvalidateLater that are due; returns the wall clock time
  // the next one is due, or 0.
  int64_t DropDueNodes();
  std::atomic<uint64_t> identity_invalidations_{0};
  std::atomic<uint64_t> drops_deferred_{0};
  std::atomic<uint64_t> drops_forced_{0};
  std::atomic<uint64_t> events_{0};
  std::atomic<uint64_t> watch_failures_{0};
  std::thread thread_;
};

}  // namespace epochfs::fs
