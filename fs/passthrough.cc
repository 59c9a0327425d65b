#include "fs/passthrough.h"

#include <sys/resource.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <utility>

#include "base/thread_name.h"
#include "fs/change_watcher.h"

namespace epochfs::fs {

Result<uint32_t> BackingFiles::Acquire(uint64_t nodeid, int fd, Invalidator& kernel) {
  MutexLock lock(mutex_);
  auto it = shared_.find(nodeid);
  if (it == shared_.end()) {
    // Registered under the lock: a second open of the node must name this id, not one
    // of its own (the kernel refuses a second backing file for an inode).
    auto id = kernel.OpenBackingFile(fd);
    if (!id.ok()) {
      const int err = id.status().err();
      const bool for_good = err == EPERM || err == ELOOP || err == EBADF || err == EINVAL ||
                            err == EOPNOTSUPP || err == ENOTTY;
      if (for_good) usable_.store(false, std::memory_order_relaxed);
      if (refusals_++ == 0 || for_good) {
        spdlog::warn("passthrough refused by the kernel ({}); {}", id.status().ToString(),
                     for_good ? "passthrough is off for this mount"
                              : "this open is served by the daemon");
      }
      return id.status();
    }
    it = shared_.emplace(nodeid, Shared{*id, 0}).first;
  }
  ++it->second.handles;
  ++opens_;
  return it->second.id;
}

bool BackingFiles::Release(uint64_t nodeid, Invalidator& kernel) {
  MutexLock lock(mutex_);
  auto it = shared_.find(nodeid);
  if (it == shared_.end()) return false;
  if (--it->second.handles > 0) return false;
  // The kernel holds its own reference to the backing file for as long as an open file
  // uses it; the id only names it for OPEN replies to come.
  kernel.CloseBackingFile(it->second.id);
  shared_.erase(it);
  return true;
}

bool BackingFiles::Has(uint64_t nodeid) const {
  MutexLock lock(mutex_);
  return shared_.contains(nodeid);
}

void BackingFiles::VisitCounters(const BackingFiles* files, const CounterVisitor& visit) {
  uint64_t opens = 0, refusals = 0, live = 0;
  if (files) {
    MutexLock lock(files->mutex_);
    opens = files->opens_;
    refusals = files->refusals_;
    live = files->shared_.size();
  }
  visit(CounterInfo{"passthrough_opens",
                    "Opens the kernel served from the source file itself (--passthrough).",
                    CounterKind::kCounter}
            .Show({.row = "passthrough", .label = "opens", .quiet = true}),
        opens);
  visit(CounterInfo{"passthrough_files", "Files with passthrough opens now.", CounterKind::kGauge}
            .Show({.row = "passthrough", .label = "files open", .quiet = true}),
        live);
  visit(CounterInfo{"passthrough_refused",
                    "Passthrough opens the kernel refused (served by the daemon instead).",
                    CounterKind::kCounter}
            .Show({.row = "passthrough", .label = "refused", .quiet = true}),
        refusals);
}

IdleFiller::IdleFiller(size_t max_queued)
    : max_queued_(max_queued), thread_([this] { Run(); }) {}

IdleFiller::~IdleFiller() { Stop(); }

void IdleFiller::Stop() {
  {
    MutexLock lock(mutex_);
    stopping_ = true;
    queue_.clear();
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void IdleFiller::Offer(std::function<void()> task) {
  {
    MutexLock lock(mutex_);
    if (stopping_) return;
    if (queue_.size() >= max_queued_) {
      ++dropped_;
      return;
    }
    queue_.push_back(std::move(task));
  }
  wake_.notify_one();
}

void IdleFiller::Run() {
  NameThisThread("idle-filler");
  if (::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 19) != 0) {
    spdlog::debug("the passthrough filler runs at normal priority: nice 19 refused");
  }
  MutexLock lock(mutex_);
  while (true) {
    while (!stopping_ && queue_.empty()) lock.Wait(wake_);
    if (stopping_) return;
    std::function<void()> task = std::move(queue_.front());
    queue_.pop_front();
    lock.Unlock();
    task();
    lock.Lock();
    ++done_;
  }
}

void IdleFiller::VisitCounters(const IdleFiller* filler, const CounterVisitor& visit) {
  uint64_t done = 0, dropped = 0, queued = 0;
  if (filler) {
    MutexLock lock(filler->mutex_);
    done = filler->done_;
    dropped = filler->dropped_;
    queued = filler->queue_.size();
  }
  visit(CounterInfo{"passthrough_fills",
                    "Files read into the cache in idle CPU time after passthrough opens.",
                    CounterKind::kCounter}
            .Show({.row = "passthrough", .label = "filled", .quiet = true}),
        done);
  visit(CounterInfo{"passthrough_fills_queued", "Passthrough-read files waiting to be cached.",
                    CounterKind::kGauge}
            .Show({.row = "passthrough", .label = "to fill", .quiet = true}),
        queued);
  visit(CounterInfo{"passthrough_fills_dropped",
                    "Passthrough-read files not cached: the fill queue was full.",
                    CounterKind::kCounter}
            .Show({.row = "passthrough", .label = "fills dropped", .quiet = true}),
        dropped);
}

}  // namespace epochfs::fs
