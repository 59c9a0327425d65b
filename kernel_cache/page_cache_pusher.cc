#include "kernel_cache/page_cache_pusher.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <mutex>
#include <optional>
#include <utility>

#include "base/thread_name.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"

namespace epochfs::kernel_cache {

namespace {
// How long after the READ that completed a file its pages are dropped: long enough for
// the reader to copy them (a drop before would cost it the READ again), short enough
// that a few milliseconds of reads is all the kernel holds on top of --ram.
constexpr auto kReadDropDelay = std::chrono::milliseconds(10);
// How long a drop put off by a writer waits before it is tried again.
constexpr auto kPutOffDropDelay = std::chrono::milliseconds(100);
}  // namespace

PageCachePusher::PageCachePusher(std::shared_ptr<Residency> residency, bool one_copy)
    : residency_(std::move(residency)), one_copy_(one_copy), drop_thread_([this] { RunDrops(); }) {}

PageCachePusher::~PageCachePusher() {
  Detach();
  {
    MutexLock lock(drops_mu_);
    stop_ = true;
  }
  drops_cv_.notify_all();
  drop_thread_.join();
}

void PageCachePusher::Attach(struct fuse_session* session, fs::InodeTable& inodes,
                             cache::Cache& cache, fs::Invalidator& invalidator, fs::WriteFence& fence) {
  std::unique_lock attached(attach_mu_);
  session_ = session;
  inodes_ = &inodes;
  cache_ = &cache;
  invalidator_ = &invalidator;
  fence_ = &fence;
}

void PageCachePusher::Detach() {
  std::unique_lock attached(attach_mu_);  // waits for the pushes in flight
  session_ = nullptr;
  inodes_ = nullptr;
  cache_ = nullptr;
  invalidator_ = nullptr;
  fence_ = nullptr;
}

Result<cache::SourceIdentity> PageCachePusher::StatNow(const fs::Inode& node) const {
  Result<struct ::stat> st = Status::Stale("no parent");
  if (node.path_fd) {
    st = cache::StatForIdentity(node.path_fd.get());
  } else if (const fs::Location loc = inodes_->LocationOf(node); loc.parent) {
    st = cache::StatForIdentity(loc.dir_fd(), loc.name.c_str(), AT_SYMLINK_NOFOLLOW);
  }
  if (!st.ok()) return st.status();
  return cache::SourceIdentity::FromStat(*st);
}

bool PageCachePusher::MayStore(fs::Inode& node, const cache::SourceIdentity& file,
                               const fs::InodeTable::Observation& seen) {
  if (seen.during_change) return false;  // a write through the mount is under way
  // A relookup's reply may be on its way: a drop now would make the kernel discard it.
  if (inodes_->RelookupPending(node)) return false;
  if (cache::WallClockNs() < fs::InodeTable::RacilyCleanUntil(file)) return false;
  Result<cache::SourceIdentity> now = StatNow(node);
  if (!now.ok() || !(*now == file)) return false;
  // The kernel must believe this size already: a store past its i_size would extend it.
  if (!inodes_->KernelAttrsShow(node, file, seen)) return false;
  switch (inodes_->SwapKernelCacheId(node, file, seen)) {
    case fs::InodeTable::CacheMatch::kSame:
    case fs::InodeTable::CacheMatch::kUnknown:
      return true;
    case fs::InodeTable::CacheMatch::kChanged:
    case fs::InodeTable::CacheMatch::kRecent:
      // The kernel's pages are of an older file: they go before these come (we are not
      // inside a request, so the kernel may be told here).
      inodes_->DropKernelAttrs(node);
      invalidator_->InvalidateInode(node.nodeid);
      return true;
  }
  return false;
}

PushResult PageCachePusher::Push(const cache::SourceIdentity& file, fs::OrderWait wait) {
  std::shared_lock attached(attach_mu_);
  if (session_ == nullptr) return PushResult::kRefused;
  std::shared_ptr<fs::Inode> node = inodes_->FindBySource(file.dev, file.ino);
  if (!node) {
    not_known_.fetch_add(1, std::memory_order_relaxed);
    return PushResult::kNotKnown;
  }
  if (node->is_dir) return PushResult::kRefused;
  // Nothing to store (moved already, or copied and not read since): spare the checks,
  // two source stats each (round trips on a network source), a file already pushed
  // would cost at every epoch.
  if (!(one_copy_ ? cache_->HoldsInRam(file) : cache_->CopyPending(file))) {
    // Copied, and no READ reached the daemon since (a READ marks the copy lost): the
    // kernel holds it, as far as anyone can tell. Believed again (the belief may have
    // aged out of the residency budget), readahead passes it over from now on instead
    // of coming back to it every epoch.
    if (!one_copy_ && cache_->HoldsInRam(file)) residency_->NoteHeldWhole(*node, file.size);
    return PushResult::kRefused;
  }
  return StoreChecked(
      *node, file,
      [&](const cache::Cache::KernelStore& store) {
        return one_copy_ ? cache_->MoveToKernel(file, store) : cache_->CopyToKernel(file, store);
      },
      wait);
}

bool PageCachePusher::TakeWhole(const cache::SourceIdentity& file, std::span<const char> bytes) {
  const bool pushed = Take(file, bytes, fs::OrderWait::kWait, {});
  if (pushed) pushed_from_stream_.fetch_add(1, std::memory_order_relaxed);
  return pushed;
}

bool PageCachePusher::TakeFilled(const cache::SourceIdentity& file, std::span<const char> bytes,
                                 uint64_t passthrough_writes_seen) {
  // No handle open: then no READ of the file is in flight, holding page locks a store
  // or a drop would wait for while the READ waits for the caller's fill of these very
  // bytes (new opens wait for open_order meanwhile). No passthrough writer since the
  // fill's read: its writes bypassed the daemon, and one through a shared mapping moves
  // no timestamp the identity checks would see.
  const auto unopened_and_unwritten = [passthrough_writes_seen](const fs::Inode& node) {
    return node.open_handles.load() == 0 &&
           node.passthrough_writes.load() == passthrough_writes_seen;
  };
  const bool pushed = Take(file, bytes, fs::OrderWait::kNoWait, unopened_and_unwritten);
  if (pushed) pushed_after_passthrough_.fetch_add(1, std::memory_order_relaxed);
  return pushed;
}

bool PageCachePusher::Take(const cache::SourceIdentity& file, std::span<const char> bytes,
                           fs::OrderWait wait, const Precondition& only_if) {
  if (bytes.size() != file.size) return false;
  std::shared_lock attached(attach_mu_);
  if (session_ == nullptr) return false;
  std::shared_ptr<fs::Inode> node = inodes_->FindBySource(file.dev, file.ino);
  if (!node || node->is_dir) return false;  // Offer counts and retries it, from RAM
  // Under a memory limit the pages are charged as a kernel entry of the RAM tier, made
  // for them (Cache::MoveToKernel); without one they are the kernel's own copy.
  const PushResult pushed = StoreChecked(
      *node, file,
      [&](const cache::Cache::KernelStore& store) {
        return one_copy_ ? cache_->MoveToKernel(file, bytes, store) : store(0, bytes);
      },
      wait, only_if);
  return pushed == PushResult::kPushed;
}

PushResult PageCachePusher::StoreChecked(fs::Inode& node, const cache::SourceIdentity& file,
                                         const Deliver& deliver, fs::OrderWait wait,
                                         const Precondition& only_if) {
  bool stored = false;
  bool forgotten = false;
  {
    if (!fs::TakeOpenOrder(node, wait)) {
      refused_.fetch_add(1, std::memory_order_relaxed);
      return PushResult::kRefused;
    }
    MutexLock order(node.open_order, std::adopt_lock);
    // Before anything that may notify the kernel (MayStore's drop of older pages).
    if (only_if && !only_if(node)) {
      refused_.fetch_add(1, std::memory_order_relaxed);
      return PushResult::kRefused;
    }
    const Result<fs::WriteFence::Held> fenced = fence_->Enter(*inodes_, node);
    if (!fenced.ok()) {
      if (fenced.status().code() == Code::kBusy) {
        writers_open_.fetch_add(1, std::memory_order_relaxed);
      }
      refused_.fetch_add(1, std::memory_order_relaxed);
      return PushResult::kRefused;
    }
    const fs::InodeTable::Observation seen = fs::InodeTable::Observe(node);
    if (!MayStore(node, file, seen)) {
      refused_.fetch_add(1, std::memory_order_relaxed);
      return PushResult::kRefused;
    }
    const uint64_t nodeid = node.nodeid;
    const cache::Cache::KernelStore store = [&](uint64_t offset, std::span<const char> bytes) {
      struct fuse_bufvec buf = FUSE_BUFVEC_INIT(bytes.size());
      buf.buf[0].mem = const_cast<char*>(bytes.data());
      const int err = fuse_lowlevel_notify_store(session_, nodeid, offset, &buf,
                                                 static_cast<fuse_buf_copy_flags>(0));
      if (err == -ENOENT) {
        not_known_.fetch_add(1, std::memory_order_relaxed);  // forgotten meanwhile
        forgotten = true;
      } else if (err != 0) {
        store_errors_.fetch_add(1, std::memory_order_relaxed);
        spdlog::debug("notify_store node {}: {}", nodeid, err);
      }
      return err == 0;
    };
    stored = deliver(store);
    // Stat after store: a change the first check missed is caught here; a later one
    // reaches the watcher (or the next open) after the store, whose drop then follows it.
    const fs::InodeTable::Observation after = fs::InodeTable::Observe(node);
    Result<cache::SourceIdentity> now = StatNow(node);
    if (after.during_change || after.changes_made != seen.changes_made || !now.ok() ||
        !(*now == file)) {
      inodes_->DropKernelAttrs(node);
      invalidator_->InvalidateInode(nodeid);
      cache_->Invalidate(file.dev, file.ino);
      dropped_after_.fetch_add(1, std::memory_order_relaxed);
      return PushResult::kRefused;
    }
  }
  if (!stored) return forgotten ? PushResult::kNotKnown : PushResult::kRefused;
  // The tier may have let go of the kernel entries while the store was on its way (a
  // budget lowered, an eviction): their drop may have run before the pages arrived,
  // which would leave them uncharged and never dropped. Dropped again now, after them.
  if (one_copy_ && !cache_->HoldsInKernel(file)) {
    DropLater(file.dev, file.ino);
    refused_.fetch_add(1, std::memory_order_relaxed);
    return PushResult::kRefused;
  }
  residency_->NoteHeldWhole(node, file.size);
  pushed_files_.fetch_add(1, std::memory_order_relaxed);
  pushed_bytes_.fetch_add(file.size, std::memory_order_relaxed);
  return PushResult::kPushed;
}

void PageCachePusher::Offer(const cache::SourceIdentity& file) {
  {
    std::shared_lock attached(attach_mu_);
    if (session_ != nullptr && Push(file) != PushResult::kNotKnown) return;
  }
  MutexLock lock(drops_mu_);
  if (waiting_.size() < kMaxWaiting) waiting_.push_back(file);
  // The drop thread waits for time while offers wait; wake it from an untimed wait.
  if (waiting_.size() == 1) drops_cv_.notify_one();
}

void PageCachePusher::RetryWaiting(std::vector<cache::SourceIdentity> waiting) {
  std::vector<cache::SourceIdentity> still;
  {
    std::shared_lock attached(attach_mu_);
    if (session_ == nullptr) {
      still = std::move(waiting);  // not attached yet: they wait on
    } else {
      for (const cache::SourceIdentity& id : waiting) {
        const std::shared_ptr<fs::Inode> node = inodes_->FindBySource(id.dev, id.ino);
        if (node == nullptr) {
          still.push_back(id);  // the kernel has not looked it up yet
          continue;
        }
        // Gone from RAM meanwhile (evicted, or read and replaced), or the kernel got the
        // whole file by READs (the reader came first): nothing to push.
        if (!cache_->HoldsInRam(id) || residency_->HoldsWhole(*node)) continue;
        if (Push(id) == PushResult::kNotKnown) still.push_back(id);
      }
    }
  }
  if (still.empty()) return;
  MutexLock lock(drops_mu_);
  still.insert(still.end(), waiting_.begin(), waiting_.end());
  if (still.size() > kMaxWaiting) still.resize(kMaxWaiting);
  waiting_.swap(still);
}

bool PageCachePusher::HoldsWhole(uint64_t dev, uint64_t ino) const {
  std::shared_lock attached(attach_mu_);
  if (inodes_ == nullptr) return false;
  std::shared_ptr<fs::Inode> node = inodes_->FindBySource(dev, ino);
  return node != nullptr && residency_->HoldsWhole(*node);
}

void PageCachePusher::DropLater(uint64_t dev, uint64_t ino) {
  // Copies are the kernel's own (no kernel entry lets go of them): nothing to drop.
  if (!one_copy_) return;
  {
    MutexLock lock(drops_mu_);
    drops_.emplace_back(dev, ino);
  }
  drops_cv_.notify_one();
}

void PageCachePusher::AfterWholeRead(fs::Inode& node, const cache::SourceIdentity& file) {
  if (!one_copy_ || node.is_dir) return;
  {
    std::shared_lock attached(attach_mu_);
    if (session_ == nullptr) return;
    // Nothing is stored: the READ's reply put the bytes there.
    const cache::Cache::KernelStore already_there = [](uint64_t, std::span<const char>) {
      return true;
    };
    if (cache_->MoveToKernel(file, already_there)) {
      residency_->NoteHeldWhole(node, file.size);
      reads_moved_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
  }
  {
    MutexLock lock(drops_mu_);
    read_drops_.push_back(
        LaterDrop{file.dev, file.ino, std::chrono::steady_clock::now() + kReadDropDelay});
  }
  drops_cv_.notify_one();
}

void PageCachePusher::RunDrops() {
  NameThisThread("page-drops");
  std::vector<std::pair<uint64_t, uint64_t>> batch;
  std::vector<cache::SourceIdentity> retry;
  size_t from_reads = 0;
  while (true) {
    {
      MutexLock lock(drops_mu_);
      while (true) {
        if (stop_) return;
        const auto now = std::chrono::steady_clock::now();
        if (!waiting_.empty() && now >= next_retry_) {
          retry.swap(waiting_);
          next_retry_ = now + kRetryPeriod;
        }
        while (!read_drops_.empty() && read_drops_.front().due <= now) {
          batch.emplace_back(read_drops_.front().dev, read_drops_.front().ino);
          read_drops_.pop_front();
          ++from_reads;
        }
        while (!put_off_drops_.empty() && put_off_drops_.front().due <= now) {
          batch.emplace_back(put_off_drops_.front().dev, put_off_drops_.front().ino);
          put_off_drops_.pop_front();
        }
        if (!drops_.empty()) {
          batch.insert(batch.end(), drops_.begin(), drops_.end());
          drops_.clear();
        }
        if (!batch.empty() || !retry.empty()) break;
        std::optional<std::chrono::steady_clock::time_point> next;
        for (const auto* later : {&read_drops_, &put_off_drops_}) {
          if (!later->empty() && (!next || later->front().due < *next)) next = later->front().due;
        }
        if (!waiting_.empty() && (!next || next_retry_ < *next)) next = next_retry_;
        if (next) {
          lock.WaitFor(drops_cv_, *next - now);
        } else {
          lock.Wait(drops_cv_);
        }
      }
    }
    if (!retry.empty()) RetryWaiting(std::exchange(retry, {}));
    reads_dropped_.fetch_add(from_reads, std::memory_order_relaxed);
    from_reads = 0;
    std::shared_lock attached(attach_mu_);
    if (session_ == nullptr) {
      batch.clear();
      continue;
    }
    for (const auto& [dev, ino] : batch) {
      std::shared_ptr<fs::Inode> node = inodes_->FindBySource(dev, ino);
      // A node the kernel forgot took its pages with it.
      if (!node || node->is_dir) continue;
      MutexLock order(node->open_order);
      const Result<fs::WriteFence::Held> fenced = fence_->Enter(*inodes_, *node);
      if (!fenced.ok() && fenced.status().code() == Code::kBusy) {
        // A writer has the file open: its pages are the write's to keep current. Tried
        // again later (until then the kernel holds them beyond --ram).
        writers_open_.fetch_add(1, std::memory_order_relaxed);
        MutexLock lock(drops_mu_);
        put_off_drops_.push_back(
            LaterDrop{dev, ino, std::chrono::steady_clock::now() + kPutOffDropDelay});
        continue;
      }
      // Without a fence for another reason (no lease, the name gone), the drop still goes:
      // pages held beyond --ram are a sure cost, a writer racing it an unlikely one.
      node->kernel_pages.Dropped();
      // Through the lease's fd ("notify" mode) only the pages go: a notification would
      // drop the kernel's attributes too (FUSE does with any page range), and each
      // reader's next open or stat of the file would cost a GETATTR. A page the drop
      // skips (mapped by a reader, or locked by a READ in flight) stays, as with the
      // notification, which waits for it instead.
      if (fenced.ok() && fenced->fd() >= 0 &&
          ::posix_fadvise(fenced->fd(), 0, 0, POSIX_FADV_DONTNEED) == 0) {
        continue;
      }
      fuse_lowlevel_notify_inval_inode(session_, node->nodeid, 0, 0);
    }
    batch.clear();
  }
}

PageCachePusher::Stats PageCachePusher::GetStats() const {
  Stats s;
  s.pushed_files = pushed_files_.load();
  s.pushed_bytes = pushed_bytes_.load();
  s.not_known = not_known_.load();
  s.refused = refused_.load();
  s.writers_open = writers_open_.load();
  s.store_errors = store_errors_.load();
  s.dropped_after = dropped_after_.load();
  s.reads_moved = reads_moved_.load();
  s.reads_dropped = reads_dropped_.load();
  s.pushed_from_stream = pushed_from_stream_.load();
  s.pushed_after_passthrough = pushed_after_passthrough_.load();
  return s;
}

void PageCachePusher::VisitCounters(const PageCachePusher* pusher, const CounterVisitor& visit) {
  constexpr auto kCounter = CounterKind::kCounter;
  constexpr auto kBytes = Unit::kBytes;
  const Stats s = pusher ? pusher->GetStats() : Stats{};
  visit(CounterInfo{"pushed_files", "Files readahead put into the kernel's page cache.", kCounter}
            .Show({.row = "page cache pushes", .label = "files"}),
        s.pushed_files);
  visit(CounterInfo{"pushed_bytes", "Bytes readahead put into the kernel's page cache.", kCounter}
            .Show({.row = "page cache pushes", .label = "pushed", .unit = kBytes}),
        s.pushed_bytes);
  visit(CounterInfo{"pushed_from_stream",
                    "Of pushed_files: stored straight from the SSD tier's stream, never copied "
                    "into the RAM tier.",
                    kCounter}
            .Show({.row = "page cache pushes", .label = "from the stream"}),
        s.pushed_from_stream);
  visit(CounterInfo{"pushed_after_passthrough",
                    "Of pushed_files: read by the passthrough filler after the kernel read "
                    "them from the source, stored from its buffer, never copied into the RAM "
                    "tier.",
                    kCounter}
            .Show({.row = "page cache pushes", .label = "after passthrough", .quiet = true}),
        s.pushed_after_passthrough);
  visit(CounterInfo{"push_not_known",
                    "Pushes skipped: the kernel had not looked the file up yet.", kCounter}
            .Show({.row = "page cache pushes", .label = "inode unknown"}),
        s.not_known);
  visit(CounterInfo{"push_refused",
                    "Pushes skipped: the file changed, is being written, or the kernel "
                    "believes another size.",
                    kCounter}
            .Show({.row = "page cache pushes", .label = "refused"}),
        s.refused);
  visit(CounterInfo{"push_writers_open",
                    "Pushes and page drops put off: a writer had the file open through the "
                    "mount (fs/write_fence.h).",
                    kCounter}
            .Show({.row = "page cache pushes", .label = "writers open"}),
        s.writers_open);
  visit(CounterInfo{"push_errors", "Stores the kernel refused for another reason.", kCounter}
            .Show({.row = "page cache pushes", .label = "errors"}),
        s.store_errors);
  visit(CounterInfo{"push_dropped_after",
                    "Pushes found stale right after the store, dropped at once.", kCounter}
            .Show({.row = "page cache pushes", .label = "dropped at once"}),
        s.dropped_after);
  visit(CounterInfo{"read_pages_moved",
                    "Files a READ brought whole into the kernel's page cache, then charged to "
                    "the RAM tier like pushed ones (under a memory limit).",
                    kCounter}
            .Show({.row = "pages of READs", .label = "charged"}),
        s.reads_moved);
  visit(CounterInfo{"read_pages_dropped",
                    "Files a READ brought whole into the kernel's page cache whose pages were "
                    "dropped after the read (under a memory limit; the RAM tier did not keep them).",
                    kCounter}
            .Show({.row = "pages of READs", .label = "dropped"}),
        s.reads_dropped);
}

}  // namespace epochfs::kernel_cache
