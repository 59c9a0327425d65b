#include "kernel_cache/kernel_cache.h"

#include <unistd.h>

#include <algorithm>

#include "kernel_cache/access_watcher.h"
#include "kernel_cache/attr_refresh.h"
#include "kernel_cache/kernel_activity.h"
#include "kernel_cache/kernel_listing.h"
#include "kernel_cache/mount_view.h"
#include "kernel_cache/page_cache_pusher.h"
#include "kernel_cache/residency.h"
#include "spdlog/spdlog.h"

namespace epochfs::kernel_cache {

KernelCache::KernelCache(bool push, bool one_copy) : residency_(std::make_shared<Residency>()) {
  if (push) pusher_ = std::make_shared<PageCachePusher>(residency_, one_copy);
}

KernelCache::~KernelCache() { Stop(); }

std::function<void(uint64_t, uint64_t)> KernelCache::drop_callback() const {
  if (!pusher_) return {};
  return [pusher = pusher_](uint64_t dev, uint64_t ino) { pusher->DropLater(dev, ino); };
}

fs::SourceObserver& KernelCache::Observe(const fs::SourceFs& fs, prefetch::Prefetcher* prefetcher) {
  prefetcher_ = prefetcher;
  activity_ = std::make_unique<KernelActivity>(fs, *residency_, prefetcher);
  // From now on readahead offers its files here; they wait for Start (and for their
  // inodes) in the pusher.
  if (pusher_ && prefetcher_) prefetcher_->AttachKernelPages(pusher_.get());
  return *activity_;
}

void KernelCache::Start(const Mount& mount) {
  if (!pusher_ || !activity_ || started_) return;
  if (!mount_view_) {
    auto view = MountView::Of(mount.mountpoint);
    if (!view.ok()) {
      spdlog::warn("no pushing into the page cache: {}", view.status().ToString());
      if (mount.prefetcher) mount.prefetcher->AttachKernelPages(nullptr);
      return;
    }
    mount_view_ = std::move(*view);
  }
  // Listings give attributes (READDIRPLUS) because pushing asks for every listing to
  // (DoInit); a read-only mount's READs leave them fresh.
  if (!mount.read_only && !attr_refresh_) {
    attr_refresh_ = std::make_unique<AttrRefresh>(*mount_view_);
    attr_refresh_counted_.store(attr_refresh_.get(), std::memory_order_release);
    activity_->SetAttrRefresh(attr_refresh_.get());
  }
  if (mount.prefetcher == nullptr) return;
  // Pushed files are read with no READ: the prefetcher must see their opens some other
  // way. In "open" mode every open of a file reaches the daemon as an OPEN, which is the
  // access. In "notify" mode the kernel opens files alone, and a fanotify watcher
  // reports the opens (access_watcher.h). Its events cost every reader's open(); in
  // "open" mode they would only repeat the OPENs.
  if (mount.open_mode) {
    activity_->ReportOpensAsAccesses(true);
  } else {
    auto access = AccessWatcher::Start(mount.mountpoint, *mount.fs, *residency_, *mount.prefetcher);
    if (!access.ok()) {
      spdlog::warn("no pushing into the page cache: cannot see opens without fanotify ({})",
                   access.status().ToString());
      mount.prefetcher->AttachKernelPages(nullptr);
      return;
    }
    access_ = std::move(*access);
    access_counted_.store(access_.get(), std::memory_order_release);
    activity_->SetAccessWatcher(access_.get());
  }
  started_ = true;
  // Which files the kernel holds whole (residency.h). Under a memory
  // limit only pushed files count, within the most the RAM tier that pays for them can
  // hold (its budget moves up to --ram: daemon/ram_balancer.h; a file whose pages it lets
  // go of is no longer believed held, page_cache_pusher.cc).
  // Without one the kernel keeps what READs and copies bring as long as memory lasts:
  // believed for up to the machine's memory, since a READ of a file it reclaimed ends
  // the belief in that file. (Believed for --ram only, a data set larger than --ram
  // that fits in memory would be pushed again, all but --ram of it, every epoch.)
  const uint64_t physical = static_cast<uint64_t>(::sysconf(_SC_PHYS_PAGES)) *
                            static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const bool limited = pusher_->one_copy();
  residency_->SetBudget(
      limited ? mount.ram_budget : std::max(mount.ram_budget, physical), /*count_reads=*/!limited);
  pusher_->Attach(mount.session, mount.fs->inodes(), *mount.cache, *mount.invalidator, *mount.fence);
  activity_->SetPusher(pusher_.get());
  // After a restart: a reader that never lists (it opens files by path from a list of
  // its own) gives the kernel no inode to push into before each open. The recorded
  // folders are listed for it, up to as many files as the RAM tier could hold at once
  // (a kernel entry is charged a page at least; its budget moves up to --ram:
  // daemon/ram_balancer.h), and 100,000 in any case.
  if (std::vector<std::string> paths = mount.prefetcher->KnownPaths(); !paths.empty()) {
    listing_ = std::make_unique<KernelListing>(*mount_view_, KernelListing::FoldersOf(paths),
                                               std::max<uint64_t>(100'000, mount.ram_budget / 4096));
  }
}

void KernelCache::Stop() {
  if (prefetcher_) prefetcher_->AttachKernelPages(nullptr);
  if (attr_refresh_) {
    activity_->SetAttrRefresh(nullptr);
    attr_refresh_->Stop();
  }
  if (!started_) return;
  started_ = false;
  if (listing_) listing_->Stop();
  activity_->SetPusher(nullptr);
  pusher_->Detach();
  activity_->SetAccessWatcher(nullptr);
}

void KernelCache::VisitCounters(const KernelCache* kernel_cache, const CounterVisitor& visit) {
  PageCachePusher::VisitCounters(kernel_cache ? kernel_cache->pusher_.get() : nullptr, visit);
  AccessWatcher::VisitCounters(
      kernel_cache ? kernel_cache->access_counted_.load(std::memory_order_acquire) : nullptr, visit);
  KernelActivity::VisitCounters(kernel_cache ? kernel_cache->activity_.get() : nullptr, visit);
  AttrRefresh::VisitCounters(
      kernel_cache ? kernel_cache->attr_refresh_counted_.load(std::memory_order_acquire) : nullptr,
      visit);
}

}  // namespace epochfs::kernel_cache
