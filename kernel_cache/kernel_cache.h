// KernelCache: the kernel's copy of file data, in one place.
//
// A file's bytes reach the kernel's page cache two ways: readahead pushes them
// (fuse_lowlevel_notify_store) before the reader asks, and READs answered by the daemon
// fill them. Under a memory limit both are charged to --ram and dropped as the epoch
// policy lets them go. This module owns all of it:
//  - pushing (PageCachePusher): what readahead offers through prefetch::KernelPages,
//    behind a WriteFence that keeps writers through the mount out meanwhile, and the
//    retries of offers whose file the kernel has no inode for yet;
//  - what the kernel holds, per file (Residency): from the pushes and from the READs
//    SourceFs reports to this module's observer (KernelActivity), read back by readahead
//    to pass over what the kernel holds (KernelPages::HoldsWhole);
//  - charging and dropping: this module decides what is charged (a push, a whole READ:
//    PageCachePusher::AfterWholeRead) and makes every drop; the ledger is the RAM
//    tier's, which holds such files as kernel entries beside its own bytes, so that one
//    budget (--ram) and one epoch policy rank both, and calls drop_callback() when the
//    policy lets one go;
//  - the opens the kernel makes without asking the daemon (AccessWatcher, "notify"
//    mode), which are the prefetcher's accesses once reads no longer reach the daemon;
//  - the listing after a restart (KernelListing), which gives the kernel inodes to push
//    into before a reader that never lists opens its files;
//  - the kernel's attributes of files it read with READs, which a READ leaves stale
//    (AttrRefresh lists their folders again, so that the next opens cost no GETATTR).
// The rest of the daemon sees this header only.
//
// Life: made before the cache (drop_callback), observing SourceFs once it exists
// (Observe), started once the mount answers (Start), stopped before the session ends
// (Stop, which waits for a push in flight).
//
// Thread-safety: Start and Stop from one thread; the rest is thread-safe.
#pragma once

#include <fuse_lowlevel.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/counters.h"
#include "cache/cache.h"
#include "fs/inode_table.h"
#include "fs/source_fs.h"
#include "fs/source_observer.h"
#include "fs/write_fence.h"
#include "prefetcher/prefetcher.h"

namespace epochfs::kernel_cache {

class AccessWatcher;
class AttrRefresh;
class KernelActivity;
class KernelListing;
class MountView;
class PageCachePusher;
class Residency;

class KernelCache {
 public:
  // `push`: readahead's bytes go on into the kernel (else this module only passes
  // accesses on). `one_copy`: a memory limit applies: the bytes move into the kernel,
  // charged to --ram, and are dropped as the RAM policy lets them go; without one the
  // kernel gets a copy of its own (PageCachePusher).
  KernelCache(bool push, bool one_copy);
  ~KernelCache();
  KernelCache(const KernelCache&) = delete;
  KernelCache& operator=(const KernelCache&) = delete;

  bool pushing() const { return pusher_ != nullptr; }
  // For CacheOptions::drop_kernel_pages (empty when not pushing).
  std::function<void(uint64_t dev, uint64_t ino)> drop_callback() const;

  // The observer to give SourceFs (SourceFs::SetObserver); `prefetcher` may be null.
  fs::SourceObserver& Observe(const fs::SourceFs& fs, prefetch::Prefetcher* prefetcher);

  struct Mount {
    std::filesystem::path mountpoint;
    bool open_mode = false;  // --consistency open: every open reaches the daemon
    struct fuse_session* session = nullptr;
    fs::SourceFs* fs = nullptr;
    cache::Cache* cache = nullptr;
    fs::Invalidator* invalidator = nullptr;
    // Holds writers through the mount off a file while its pages are stored or dropped;
    // outlives this module.
    fs::WriteFence* fence = nullptr;
    prefetch::Prefetcher* prefetcher = nullptr;
    uint64_t ram_budget = 0;  // --ram
    bool read_only = false;   // --read-only: READs leave the kernel's attributes fresh
  };
  // Once the mount answers: sees opens (the access watcher, or OPENs in "open" mode),
  // then pushes (both or neither: pushed pages nobody sees read would hold the RAM
  // budget for good). Call once, after Observe; does nothing when not pushing.
  void Start(const Mount& mount);
  // No more pushes, drops or listing; returns once a push in flight is done. Before the
  // session goes. Idempotent.
  void Stop();

  // Names the counters of pushing, the access watcher and the observer; `kernel_cache`
  // may be null: they are then 0.
  static void VisitCounters(const KernelCache* kernel_cache, const CounterVisitor& visit);

 private:
  // Declared in the order they are needed; destroyed in reverse.
  std::shared_ptr<Residency> residency_;     // shared with the pusher (drop_callback)
  std::shared_ptr<PageCachePusher> pusher_;  // null: not pushing
  std::unique_ptr<KernelActivity> activity_;
  std::unique_ptr<AccessWatcher> access_;
  std::unique_ptr<MountView> mount_view_;  // the listings open folders through it
  std::unique_ptr<KernelListing> listing_;
  std::unique_ptr<AttrRefresh> attr_refresh_;
  // The two made in Start, for VisitCounters: the stats are served from other threads
  // while Start runs.
  std::atomic<const AccessWatcher*> access_counted_{nullptr};
  std::atomic<const AttrRefresh*> attr_refresh_counted_{nullptr};
  prefetch::Prefetcher* prefetcher_ = nullptr;
  bool started_ = false;
};

}  // namespace epochfs::kernel_cache
