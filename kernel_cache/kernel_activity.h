// KernelActivity: the SourceObserver of a mount. It turns what the kernel does with the
// files into accesses for the prefetcher and into work for the page-cache pusher:
//  - listings: the files a READDIRPLUS gave the kernel are the prefetcher's candidates;
//  - accesses: in "open" mode every read-only OPEN is a file's access (each open reaches
//    the daemon anyway); in "notify" mode the access watcher's fanotify events are, and
//    READs are only while it does not see opens (kernel_cache/access_watcher.h); with neither,
//    READs are;
//  - the access watcher marks each directory the kernel looks up;
//  - what the kernel holds: each READ reply goes on the file's record (Residency);
//  - pushing: a file read ahead whose push found no inode in the kernel is pushed by its
//    OPEN, and a READ that completes a whole file tells the pusher
//    (PageCachePusher::AfterWholeRead: under a memory limit its pages are charged or
//    dropped);
//  - attributes: a READ that reaches a file's end tells AttrRefresh, which lists its
//    folder again once most of it was read (the READ left the kernel's atime stale).
// Made before the session, with none of the watcher and the pusher; they are attached
// once they exist and detached before they go.
//
// Thread-safety: thread-safe; the Set* calls may race requests.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>

#include "base/counters.h"
#include "fs/source_observer.h"
#include "prefetcher/prefetcher.h"

namespace epochfs::fs {
class SourceFs;
}  // namespace epochfs::fs

namespace epochfs::kernel_cache {

class AccessWatcher;
class AttrRefresh;
class PageCachePusher;
class Residency;

class KernelActivity final : public fs::SourceObserver {
 public:
  // `fs`, `residency` and `prefetcher` (may be null: no readahead) outlive this object.
  KernelActivity(const fs::SourceFs& fs, Residency& residency, prefetch::Prefetcher* prefetcher);

  // From now on opens are reported by `access` (which marks every directory looked up
  // from now on, and the root now), not READs; null: READs again.
  void SetAccessWatcher(AccessWatcher* access);
  // From now on each read-only OPEN is the file's access, and READs are not.
  void ReportOpensAsAccesses(bool report) { opens_are_accesses_.store(report); }
  // From now on OPENs and whole READs go to `pusher` too; null: no more.
  void SetPusher(PageCachePusher* pusher) { pusher_.store(pusher); }
  // From now on READs that reach a file's end go to `refresh` too; null: no more.
  void SetAttrRefresh(AttrRefresh* refresh) { attr_refresh_.store(refresh); }

  // SourceObserver
  void DirectoryKnown(const fs::Inode& dir) override;
  void DirectoryForgotten(const fs::Inode& dir) override;
  void BeforeFileKnown(const fs::Inode& dir) override;
  void FilesListed(const std::vector<prefetch::Prefetcher::Opened>& files) override;
  void BeforeReadOnlyOpen(fs::Inode& node) override;
  void ReadOnlyOpened(const fs::Inode& node) override;
  void BeforeNewEpochPlan() override;
  void DemandRead(const fs::Inode& node, uint64_t offset) override;
  void ReadAnswered(fs::Inode& node, uint64_t offset, uint64_t bytes,
                    const cache::SourceIdentity& file) override;
  void PassthroughClosed(const fs::Inode& node) override;
  bool TakeFilled(const cache::SourceIdentity& file, std::span<const char> bytes,
                  uint64_t passthrough_writes_seen) override;

  // Names the counters (base/counters.h); `activity` may be null: they are then 0.
  static void VisitCounters(const KernelActivity* activity, const CounterVisitor& visit);

 private:
  const fs::SourceFs& fs_;
  Residency& residency_;
  prefetch::Prefetcher* const prefetcher_;
  std::atomic<AccessWatcher*> access_{nullptr};
  std::atomic<PageCachePusher*> pusher_{nullptr};
  std::atomic<AttrRefresh*> attr_refresh_{nullptr};
  std::atomic<bool> opens_are_accesses_{false};
  std::atomic<uint64_t> pushes_at_open_{0};
};

}  // namespace epochfs::kernel_cache
