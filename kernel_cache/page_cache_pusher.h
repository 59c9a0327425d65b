// PageCachePusher: puts predicted bytes into the kernel's page cache
// (fuse_lowlevel_notify_store), and drops them again when the RAM policy lets them go
// (fuse_lowlevel_notify_inval_inode). The FUSE side of prefetch::KernelPages.
//
// What the kernel does with a store (docs/architecture.md, "Pushed pages", has the
// measurements): it needs the inode in its cache (else ENOENT: a store cannot create
// one); a page becomes up to date only when the store fills it from its start, so
// whole files are stored; a store past the kernel's i_size extends it; the pages are
// charged to the daemon's memory cgroup; they survive the next open only where the
// kernel keeps its cache at open (always in "notify" mode, and in "open" mode when the
// open finds the file unchanged: SourceFs::Open).
//
// Never a stale byte. A push is ordered against the file changing:
//  - against an open ("open" mode), by the node's open_order lock: the push records the
//    identity it stored as the kernel's (InodeTable::SwapKernelCacheId), so an open that
//    finds the file changed drops the pages;
//  - against a change underneath ("notify" mode), by stat-after-store: the file is
//    checked once before and once after the store. A change before the second check is
//    caught there (the pages are dropped at once); one after it reaches the
//    ChangeWatcher later, whose drop then comes after the store;
//  - against a write through the mount: not by anything the daemon sees, because the
//    kernel fills and unlocks a write's pages before the daemon gets its WRITE, whose
//    payload is then copied out of those pages. So a file is stored into (or its pages
//    dropped) only behind a WriteFence, which holds writers off at open: no file open
//    for writing through the mount is pushed, and none is opened for writing while a
//    store or a drop is under way (fs/write_fence.h).
//  Only bytes whose identity matches the source now, the kernel's attributes (so the
//  store does not change i_size) and which are older than the racily clean window are
//  pushed.
//
// Budget: the RAM tier charges the pushed bytes (cache::Cache::MoveToKernel) and tells
// DropLater() when it lets them go; drops run on this class's own thread, because the
// tier may let go inside a FUSE request, where notifying the kernel can deadlock.
//
// Thread-safety: thread-safe. Push and DropLater may be called from any thread; Detach
// waits for pushes in flight.
#pragma once

#include <fuse_lowlevel.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <shared_mutex>
#include <span>
#include <thread>
#include <vector>

#include "base/counters.h"
#include "base/thread_annotations.h"
#include "cache/cache.h"
#include "fs/change_watcher.h"
#include "fs/inode_table.h"
#include "kernel_cache/residency.h"
#include "fs/write_fence.h"
#include "prefetcher/kernel_pages.h"

namespace epochfs::kernel_cache {

// What PageCachePusher::Push did.
enum class PushResult : uint8_t {
  kPushed,    // the bytes are in the kernel's page cache now
  kNotKnown,  // the kernel has no inode for the file yet: worth trying again later
  kRefused,   // not now and not later (changed, being written, another size, an error)
};


class PageCachePusher final : public prefetch::KernelPages {
 public:
  // Made before the cache (whose CacheOptions::drop_kernel_pages calls DropLater) and
  // attached once the session exists. `one_copy` (the daemon runs under a memory
  // limit): the bytes move into the kernel (cache::Cache::MoveToKernel), charged to the
  // RAM tier, and DropLater drops them when the tier lets them go. false (no limit):
  // the tier keeps its bytes and the kernel gets a copy of its own, which its LRU keeps
  // or reclaims as it does the pages of any read (Cache::CopyToKernel). With one copy
  // and no limit, a data set larger than --ram but smaller than free memory ran slower
  // than without pushing, and a page cache dropped (drop_caches, reclaim) sent every
  // read to the SSD tier (docs/architecture.md, "Pushed pages"; the figure:
  // docs/benchmarks.md, "Figures behind design choices").
  // `residency` records what each push stores and tells what the kernel holds.
  explicit PageCachePusher(std::shared_ptr<Residency> residency, bool one_copy = true);
  ~PageCachePusher() override;
  PageCachePusher(const PageCachePusher&) = delete;
  PageCachePusher& operator=(const PageCachePusher&) = delete;

  // From now on pushes go to `session` for the nodes of `inodes`, moving bytes out of
  // `cache`; `invalidator` drops pages found stale after a push; `fence` keeps writers
  // through the mount out of a file while its pages are stored or dropped. All outlive
  // Detach().
  void Attach(struct fuse_session* session, fs::InodeTable& inodes, cache::Cache& cache,
              fs::Invalidator& invalidator, fs::WriteFence& fence);
  // No more pushes or drops; returns once the pushes in flight are done. Call before
  // the session ends. Idempotent.
  void Detach();
  bool one_copy() const { return one_copy_; }

  // prefetch::KernelPages. An offer made before Attach, or whose file the kernel has no
  // inode for yet, waits (at most kMaxWaiting of them) and is retried every kRetryPeriod
  // on this class's thread.
  void Offer(const cache::SourceIdentity& file) override;
  bool HoldsWhole(uint64_t dev, uint64_t ino) const override;
  // Stores `bytes` as Push stores a file's, with the same checks, from the caller's
  // buffer: as the kernel's own copy, or under a memory limit as a kernel entry of the
  // RAM tier made for it (charged and dropped like a moved file's).
  bool TakeWhole(const cache::SourceIdentity& file, std::span<const char> bytes) override;
  // The same for the whole of `file` the passthrough filler just read from the source
  // (fs/passthrough.h): the kernel read it by passthrough, so it holds none of it. Only
  // while no handle has the file open and its count of passthrough writers
  // (Inode::passthrough_writes) is still `passthrough_writes_seen`, both read under its
  // open_order before anything else, and never a wait for that lock: the filler holds
  // the fill of these bytes, which a READ in flight may be waiting for.
  bool TakeFilled(const cache::SourceIdentity& file, std::span<const char> bytes,
                  uint64_t passthrough_writes_seen);
  // Moves the bytes of `file`, in the RAM tier with this identity, into the kernel's
  // page cache now. Unless kPushed, the bytes stay in RAM. A FUSE worker passes
  // OrderWait::kNoWait: kRefused, not a wait, while the node's open_order is held.
  PushResult Push(const cache::SourceIdentity& file, fs::OrderWait wait = fs::OrderWait::kWait);

  static constexpr size_t kMaxWaiting = 1 << 16;
  static constexpr std::chrono::milliseconds kRetryPeriod{20};

  // Queues a drop of file (dev, ino)'s pages (the RAM tier let go of them).
  void DropLater(uint64_t dev, uint64_t ino);

  // READ replies have just delivered the whole of `file` (node `node`) into the kernel's
  // page cache. With one copy (a memory limit), those pages are charged and dropped like
  // pushed ones: the RAM tier's bytes of the file become kernel entries (nothing to
  // store, the READ did that), and when the tier does not hold the file (its policy
  // would not keep it: in a shuffled epoch, a file read this epoch is the last one
  // needed) the pages are dropped shortly after, once the reader has copied them. Left
  // to the kernel's LRU they would push out pushed pages not yet read, which are older,
  // and a steady epoch under a limit lost many of its pushes that way
  // (docs/benchmarks.md, "Figures behind design choices"). Called inside the READ
  // request: queues, never notifies the kernel itself.
  void AfterWholeRead(fs::Inode& node, const cache::SourceIdentity& file);

  struct Stats {
    uint64_t pushed_files = 0;
    uint64_t pushed_bytes = 0;
    uint64_t not_known = 0;  // the kernel had no inode for the file (not looked up yet)
    uint64_t refused = 0;    // changed, racily clean, other attributes, or being written
    uint64_t writers_open = 0;  // pushes and drops put off: a writer had the file open
    uint64_t store_errors = 0;
    uint64_t dropped_after = 0;  // found changed right after the store: dropped at once
    uint64_t reads_moved = 0;    // files a READ delivered whole, then charged as kernel entries
    uint64_t reads_dropped = 0;  // files a READ delivered whole, whose pages were dropped
    uint64_t pushed_from_stream = 0;  // of pushed_files: by TakeWhole
    uint64_t pushed_after_passthrough = 0;  // of pushed_files: by TakeFilled
  };
  Stats GetStats() const;
  // Names the counters above (base/counters.h); `pusher` may be null (pushing off):
  // they are then 0, so the stats keep their keys.
  static void VisitCounters(const PageCachePusher* pusher, const CounterVisitor& visit);

 private:
  void RunDrops();
  // Offers waiting for their file's inode, tried again; on the drop thread.
  void RetryWaiting(std::vector<cache::SourceIdentity> waiting);
  // Whether `node` is a file the kernel may get `file`'s bytes for; under open_order.
  bool MayStore(fs::Inode& node, const cache::SourceIdentity& file,
                const fs::InodeTable::Observation& seen);
  Result<cache::SourceIdentity> StatNow(const fs::Inode& node) const;
  // Stores `file`'s bytes into `node`'s pages by calling `deliver` with the store, under
  // the node's open_order and behind the write fence, between the identity checks that
  // keep the pages from being stale (see the top of this file). Under attach_mu_.
  // What must hold of a node, under its open_order, for StoreChecked to go on.
  using Precondition = std::function<bool(const fs::Inode& node)>;
  // TakeWhole and TakeFilled: `bytes` stored as `file`'s.
  bool Take(const cache::SourceIdentity& file, std::span<const char> bytes, fs::OrderWait wait,
            const Precondition& only_if);
  using Deliver = std::function<bool(const cache::Cache::KernelStore& store)>;
  // `only_if` (may be empty) is checked first: false refuses with no kernel call.
  PushResult StoreChecked(fs::Inode& node, const cache::SourceIdentity& file,
                          const Deliver& deliver, fs::OrderWait wait = fs::OrderWait::kWait,
                          const Precondition& only_if = {});

  // Held shared by each push and exclusively by Attach/Detach.
  mutable std::shared_mutex attach_mu_;
  struct fuse_session* session_ = nullptr;
  fs::InodeTable* inodes_ = nullptr;
  cache::Cache* cache_ = nullptr;
  fs::Invalidator* invalidator_ = nullptr;
  fs::WriteFence* fence_ = nullptr;

  const std::shared_ptr<Residency> residency_;
  const bool one_copy_;
  Mutex drops_mu_;
  std::condition_variable drops_cv_;
  bool stop_ GUARDED_BY(drops_mu_) = false;
  std::vector<std::pair<uint64_t, uint64_t>> drops_ GUARDED_BY(drops_mu_);
  // Drops due later, each in order of its due time: AfterWholeRead's, a moment after
  // their READ (kReadDropDelay), and those put off while a writer had the file open
  // (kPutOffDropDelay).
  struct LaterDrop {
    uint64_t dev, ino;
    std::chrono::steady_clock::time_point due;
  };
  std::deque<LaterDrop> read_drops_ GUARDED_BY(drops_mu_);
  std::deque<LaterDrop> put_off_drops_ GUARDED_BY(drops_mu_);
  // Offers waiting for their file's inode (or for Attach), in offer order.
  std::vector<cache::SourceIdentity> waiting_ GUARDED_BY(drops_mu_);
  std::chrono::steady_clock::time_point next_retry_ GUARDED_BY(drops_mu_){};

  std::atomic<uint64_t> pushed_files_{0}, pushed_bytes_{0}, not_known_{0}, refused_{0},
      writers_open_{0}, store_errors_{0}, dropped_after_{0}, reads_moved_{0}, reads_dropped_{0},
      pushed_from_stream_{0}, pushed_after_passthrough_{0};
  std::thread drop_thread_;
};

}  // namespace epochfs::kernel_cache
