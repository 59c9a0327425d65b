#include "kernel_cache/kernel_activity.h"

#include "kernel_cache/access_watcher.h"
#include "kernel_cache/attr_refresh.h"
#include "kernel_cache/page_cache_pusher.h"
#include "kernel_cache/residency.h"
#include "fs/source_fs.h"

namespace epochfs::kernel_cache {

KernelActivity::KernelActivity(const fs::SourceFs& fs, Residency& residency,
                               prefetch::Prefetcher* prefetcher)
    : fs_(fs), residency_(residency), prefetcher_(prefetcher) {}

void KernelActivity::SetAccessWatcher(AccessWatcher* access) {
  access_.store(access);
  if (access) access->Watch(*fs_.inodes().root());
}

void KernelActivity::DirectoryKnown(const fs::Inode& dir) {
  if (AccessWatcher* access = access_.load()) access->Watch(dir);
}

void KernelActivity::BeforeFileKnown(const fs::Inode& dir) {
  if (AccessWatcher* access = access_.load()) access->WaitMarked(dir.nodeid);
}

void KernelActivity::DirectoryForgotten(const fs::Inode& dir) {
  if (AccessWatcher* access = access_.load()) access->Forgotten(dir.nodeid);
}

void KernelActivity::FilesListed(const std::vector<prefetch::Prefetcher::Opened>& files) {
  if (prefetcher_ != nullptr) prefetcher_->OnListed(files);
}

void KernelActivity::BeforeReadOnlyOpen(fs::Inode& node) {
  // A file read ahead into RAM whose push found no inode in the kernel (a reader that
  // opens by path, never listing: the kernel learns each inode from the LOOKUP right
  // before its open). Pushed now, the open finds the kernel holding it and only checks
  // the source (close-to-open), and the read costs no request. Otherwise, on a network
  // source, the open opened the file there, the close flushed it (two round trips),
  // and the READ came to the daemon.
  PageCachePusher* pusher = pusher_.load();
  if (pusher == nullptr || node.is_dir || fs_.inodes().KernelHasRead(node)) return;
  // Only with no other open: then no READ of the file is in flight, holding a page
  // lock the store would wait for on this FUSE worker.
  if (node.open_handles.load(std::memory_order_relaxed) != 0) return;
  // The identity the kernel's attributes show: a store never changes its size, and
  // Push checks the source against it (and the RAM tier holds nothing else).
  if (std::optional<cache::SourceIdentity> id = fs_.inodes().KernelAttrId(node)) {
    // Never a wait for the node's open_order on a FUSE worker (fs/inode_table.h).
    if (pusher->Push(*id, fs::OrderWait::kNoWait) == PushResult::kPushed) {
      pushes_at_open_.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

void KernelActivity::ReadOnlyOpened(const fs::Inode& node) {
  if (prefetcher_ == nullptr || !opens_are_accesses_.load(std::memory_order_relaxed)) return;
  prefetcher_->OnRead(prefetch::FileKey{node.dev, node.ino}, fs_.RelativePath(node), 0);
}

void KernelActivity::BeforeNewEpochPlan() {
  // The kernel queued the events of every open made before the plan's write: read now,
  // they count in the epoch they were made in.
  if (AccessWatcher* access = access_.load()) access->Drain();
}

void KernelActivity::DemandRead(const fs::Inode& node, uint64_t offset) {
  // With opens seen (as OPENs, or by the access watcher), a READ is no access of its own
  // (it would count twice), unless the watcher is paused.
  if (opens_are_accesses_.load(std::memory_order_relaxed)) return;
  if (AccessWatcher* access = access_.load();
      access != nullptr && !access->OnDemandRead(node, offset)) {
    return;
  }
  if (prefetcher_ == nullptr) return;
  // The path only matters for a file's first read (offset 0): skip the walk otherwise.
  prefetcher_->OnRead(prefetch::FileKey{node.dev, node.ino},
                      offset == 0 ? fs_.RelativePath(node) : std::string(), offset);
}

void KernelActivity::ReadAnswered(fs::Inode& node, uint64_t offset, uint64_t bytes,
                                  const cache::SourceIdentity& file) {
  if (AttrRefresh* refresh = attr_refresh_.load(); refresh && offset + bytes >= file.size) {
    refresh->ReadToEnd(fs_.RelativePath(node));
  }
  if (!residency_.NoteRead(node, offset, bytes, file.size)) return;
  if (PageCachePusher* pusher = pusher_.load()) pusher->AfterWholeRead(node, file);
}

void KernelActivity::PassthroughClosed(const fs::Inode& node) {
  // Listed again like a folder of files READs served, so that the next open's stat costs
  // no GETATTR.
  if (AttrRefresh* refresh = attr_refresh_.load()) refresh->ReadToEnd(fs_.RelativePath(node));
}

bool KernelActivity::TakeFilled(const cache::SourceIdentity& file, std::span<const char> bytes,
                                uint64_t passthrough_writes_seen) {
  PageCachePusher* pusher = pusher_.load();
  return pusher != nullptr && pusher->TakeFilled(file, bytes, passthrough_writes_seen);
}

void KernelActivity::VisitCounters(const KernelActivity* activity, const CounterVisitor& visit) {
  constexpr auto kCounter = CounterKind::kCounter;
  const uint64_t pushes = activity ? activity->pushes_at_open_.load(std::memory_order_relaxed) : 0;
  visit(CounterInfo{"pushed_at_open",
                    "Files read ahead whose bytes the open that needed them put into the "
                    "kernel's page cache (the kernel had no inode for them when readahead "
                    "pushed).",
                    kCounter}
            .Show({.row = "source fds", .label = "pushed at open", .quiet = true}),
        pushes);
  visit(CounterInfo{"kernel_hole_reads",
                    "READs inside a file the kernel's page cache was believed to hold whole, "
                    "not at its start: holes its own reclaim made.",
                    kCounter},
        activity ? activity->residency_.hole_reads() : 0);
}

}  // namespace epochfs::kernel_cache
