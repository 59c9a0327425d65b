#include "fs/change_watcher.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <optional>

#include "base/thread_name.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"

namespace epochfs::fs {
namespace {

constexpr uint32_t kDirMask = IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_CREATE | IN_DELETE |
                              IN_MOVED_FROM | IN_MOVED_TO | IN_ONLYDIR | IN_EXCL_UNLINK;
constexpr uint32_t kNamesGoneMask =
    IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_ONLYDIR | IN_EXCL_UNLINK;

// Wakes the event thread's poll on eventfd `fd`.
void Poke(int fd) {
  const uint64_t one = 1;
  ssize_t ignored = ::write(fd, &one, sizeof(one));
  (void)ignored;  // an eventfd write of 1 cannot fail short of overflow
}

}  // namespace

Result<std::unique_ptr<ChangeWatcher>> ChangeWatcher::Start(const InodeTable& table,
                                                           Invalidator& invalidator,
                                                           Scope scope, WriteFence* fence) {
  UniqueFd inotify_fd(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  if (!inotify_fd) return Status::FromErrno(errno, "inotify_init1");
  UniqueFd wake_fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake_fd) return Status::FromErrno(errno, "eventfd");
  UniqueFd later_fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!later_fd) return Status::FromErrno(errno, "eventfd");
  std::unique_ptr<ChangeWatcher> watcher(new ChangeWatcher(
      std::move(inotify_fd), std::move(wake_fd), std::move(later_fd), table, invalidator, scope,
      fence));
  watcher->thread_ = std::thread([w = watcher.get()] { w->Run(); });
  return watcher;
}

ChangeWatcher::ChangeWatcher(UniqueFd inotify_fd, UniqueFd wake_fd, UniqueFd later_fd,
                             const InodeTable& table, Invalidator& invalidator, Scope scope,
                             WriteFence* fence)
    : inotify_fd_(std::move(inotify_fd)),
      wake_fd_(std::move(wake_fd)),
      later_fd_(std::move(later_fd)),
      scope_(scope),
      table_(table),
      invalidator_(invalidator),
      fence_(fence) {}

ChangeWatcher::~ChangeWatcher() {
  Poke(wake_fd_.get());
  if (thread_.joinable()) thread_.join();
}

void ChangeWatcher::Watch(const Inode& dir) {
  MutexLock lock(mutex_);
  if (wd_by_nodeid_.count(dir.nodeid)) return;
  // inotify takes a path; the O_PATH fd's /proc link names exactly this directory even
  // when the source is hidden under the mount.
  const std::string path = fmt::format("/proc/self/fd/{}", dir.path_fd.get());
  const int wd = ::inotify_add_watch(inotify_fd_.get(), path.c_str(),
                                     scope_ == Scope::kEverything ? kDirMask : kNamesGoneMask);
  if (wd < 0) {
    if (watch_failures_.fetch_add(1) == 0) {
      spdlog::warn(
          "cannot watch source directories for changes ({}): changes made underneath the "
          "mount are seen only after the attribute timeout; raise "
          "fs.inotify.max_user_watches or use --consistency=open",
          strerror(errno));
    }
    return;
  }
  // Two nodes cannot share a directory, but a wd can come back for a node that was
  // forgotten and looked up again: the newest node wins.
  nodeid_by_wd_[wd] = dir.nodeid;
  wd_by_nodeid_[dir.nodeid] = wd;
}

void ChangeWatcher::Unwatch(const Inode& dir) {
  MutexLock lock(mutex_);
  auto it = wd_by_nodeid_.find(dir.nodeid);
  if (it == wd_by_nodeid_.end()) return;
  const int wd = it->second;
  wd_by_nodeid_.erase(it);
  // The directory may have a newer node already (a LOOKUP beside the READDIRPLUS or
  // FORGET that let go of this one), which inotify gave the same wd: the watch is that
  // node's now.
  auto owner = nodeid_by_wd_.find(wd);
  if (owner == nodeid_by_wd_.end() || owner->second != dir.nodeid) return;
  ::inotify_rm_watch(inotify_fd_.get(), wd);
  nodeid_by_wd_.erase(owner);
}

void ChangeWatcher::InvalidateUnfenced(uint64_t nodeid) {
  {
    MutexLock lock(mutex_);
    unfenced_.push_back(nodeid);
  }
  Poke(later_fd_.get());
}

void ChangeWatcher::InvalidateLater(uint64_t nodeid, int64_t at_ns) {
  {
    MutexLock lock(mutex_);
    if (at_ns > 0) {
      later_at_.emplace(at_ns, Queued{nodeid, Why::kPrecaution});
    } else {
      later_.push_back(nodeid);
    }
  }
  Poke(later_fd_.get());
}

uint64_t ChangeWatcher::watched() const {
  MutexLock lock(mutex_);
  return wd_by_nodeid_.size();
}

void ChangeWatcher::Run() {
  NameThisThread("change-watch");
  alignas(struct inotify_event) char buf[64 * 1024];
  struct pollfd fds[3] = {{inotify_fd_.get(), POLLIN, 0},
                          {wake_fd_.get(), POLLIN, 0},
                          {later_fd_.get(), POLLIN, 0}};
  int64_t next_due_ns = 0;  // the next deferred drop, wall clock; 0: none
  while (true) {
    int timeout_ms = -1;
    if (next_due_ns > 0) {
      const int64_t wait_ns = std::max<int64_t>(0, next_due_ns - cache::WallClockNs());
      timeout_ms = static_cast<int>(std::min<int64_t>(wait_ns / 1'000'000 + 1, 1000));
    }
    if (::poll(fds, 3, timeout_ms) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("change watcher stopped: poll: {}", strerror(errno));
      return;
    }
    if (fds[1].revents) return;
    if (fds[2].revents) {
      uint64_t count;
      ssize_t ignored = ::read(later_fd_.get(), &count, sizeof(count));
      (void)ignored;  // the queues are what count
    }
    next_due_ns = DropDueNodes();
    if (!(fds[0].revents & POLLIN)) continue;
    const ssize_t n = ::read(inotify_fd_.get(), buf, sizeof(buf));
    if (n <= 0) continue;
    // One write underneath raises several events for its name (modify, close-write, and
    // more for a rename). Handling looks at the name as it is now, so each name in a batch
    // is handled once with its events' masks together: under load the watcher keeps up
    // with half the work, and drops each node once, not once per event.
    std::vector<std::pair<std::pair<int, std::string>, uint32_t>> batch;
    std::map<std::pair<int, std::string>, size_t> in_batch;
    for (ssize_t off = 0; off < n;) {
      const auto* ev = reinterpret_cast<const struct inotify_event*>(buf + off);
      off += static_cast<ssize_t>(sizeof(struct inotify_event) + ev->len);
      if (ev->mask & IN_Q_OVERFLOW) {
        spdlog::warn("change watcher: inotify queue overflowed; some changes made underneath "
                     "the mount are seen only after the attribute timeout");
        continue;
      }
      if (ev->len == 0) continue;  // an event about the directory itself
      events_.fetch_add(1, std::memory_order_relaxed);
      std::pair<int, std::string> name{ev->wd, ev->name};
      auto [at, added] = in_batch.emplace(name, batch.size());
      if (added) {
        batch.emplace_back(std::move(name), ev->mask);
      } else {
        batch[at->second].second |= ev->mask;
      }
    }
    for (const auto& [name, mask] : batch) Handle(name.first, mask, name.second);
    MutexLock lock(mutex_);  // a drop a writer put off is queued for later
    if (!later_at_.empty()) next_due_ns = later_at_.begin()->first;
  }
}

int64_t ChangeWatcher::DropDueNodes() {
  std::map<uint64_t, Why> due;  // a node asked both ways is dropped for the change
  std::vector<uint64_t> unfenced;
  {
    MutexLock lock(mutex_);
    for (uint64_t nodeid : later_) due[nodeid] = Why::kChanged;
    later_.clear();
    unfenced.swap(unfenced_);
    const int64_t now = cache::WallClockNs();
    auto due_end = later_at_.upper_bound(now);
    for (auto it = later_at_.begin(); it != due_end; ++it) {
      const auto entry = due.emplace(it->second.nodeid, it->second.why).first;
      if (it->second.why == Why::kChanged) entry->second = Why::kChanged;
    }
    later_at_.erase(later_at_.begin(), due_end);
  }
  for (uint64_t nodeid : unfenced) DropAttrsAndPages(nodeid, table_.Find(nodeid).get());
  for (const auto& [nodeid, why] : due) {
    spdlog::debug("dropping the kernel's cache of node {}, as an identity check asked ({})",
                  nodeid, why == Why::kChanged ? "changed" : "a precaution");
    std::shared_ptr<Inode> node = table_.Find(nodeid);
    if (node) {
      DropFenced(*node, why);
    } else {
      {
        MutexLock lock(mutex_);
        deferred_since_.erase(nodeid);  // forgotten while a writer held its drop off
        precaution_deferred_since_.erase(nodeid);
      }
      DropAttrsAndPages(nodeid, nullptr);
    }
  }
  MutexLock lock(mutex_);
  return later_at_.empty() ? 0 : later_at_.begin()->first;
}

void ChangeWatcher::QueueLocked(uint64_t nodeid, int64_t at_ns, Why why) {
  // Once in the queue per node, however many events ask meanwhile. A change keeps its
  // own time: a precaution queued before it may be waiting longer.
  for (auto it = later_at_.begin(); it != later_at_.end(); ++it) {
    if (it->second.nodeid != nodeid) continue;
    if (why != Why::kChanged || it->second.why == Why::kChanged) return;
    if (it->first <= at_ns) {
      it->second.why = Why::kChanged;
      return;
    }
    later_at_.erase(it);
    break;
  }
  later_at_.emplace(at_ns, Queued{nodeid, why});
}

bool ChangeWatcher::DropFenced(Inode& node, Why why) {
  // A write through the mount is in the kernel's pages before it is in the source; a
  // drop in between lets a READ fill the page again without it, and the kernel keeps
  // zeros where the write went (fs/write_fence.h). The fence holds writers off while
  // the drop runs, and refuses while one has the file open.
  std::optional<MutexLock> order;
  if (fence_ != nullptr && !fence_->leases()) order.emplace(node.open_order);  // Enter's contract
  Result<WriteFence::Held> held =
      fence_ != nullptr ? fence_->Enter(table_, node) : Result<WriteFence::Held>(WriteFence::Held());
  const int64_t now = cache::WallClockNs();
  if (!held.ok() && held.status().code() == Code::kBusy) {
    MutexLock lock(mutex_);
    node.maybe_open_for_writing = true;
    if (why == Why::kPrecaution) {
      // Nothing is known wrong in the kernel's pages, and a drop under a writer may
      // leave zeros in them: it waits for the writer, however long it keeps the file.
      drops_deferred_.fetch_add(1, std::memory_order_relaxed);
      const int64_t since = precaution_deferred_since_.emplace(node.nodeid, now).first->second;
      QueueLocked(node.nodeid, now + (now - since < kWriterWaitNs ? kWriterRetryNs : kWriterWaitNs),
                  why);
      return false;
    }
    // Not for ever: a writer may keep its file open for hours (a log), and the kernel's
    // pages of the change underneath are wrong meanwhile (with a size learnt from a
    // later reply, its old last page shows zeros). After kWriterWaitNs the drop goes
    // ahead: a write of the mount's that happens to be on its way then may leave zeros
    // in its page until the next drop, a rarer and shorter harm.
    const int64_t since = deferred_since_.emplace(node.nodeid, now).first->second;
    if (now - since < kWriterWaitNs) {
      drops_deferred_.fetch_add(1, std::memory_order_relaxed);
      QueueLocked(node.nodeid, now + kWriterRetryNs, why);
      return false;
    }
    drops_forced_.fetch_add(1, std::memory_order_relaxed);
  }
  {
    MutexLock lock(mutex_);
    deferred_since_.erase(node.nodeid);
    precaution_deferred_since_.erase(node.nodeid);
  }
  node.maybe_open_for_writing = false;
  // Any other refusal (no lease to be had: fs.leases-enable=0, the name gone meanwhile)
  // drops unfenced too: a change underneath must not stay hidden from readers.
  DropAttrsAndPages(node.nodeid, &node);
  return true;
}

void ChangeWatcher::DropAttrsAndPages(uint64_t nodeid, Inode* node) {
  // The asks counted before the drop begins are the ones it answers.
  const uint64_t asked = node ? node->kernel_drops_asked.load() : 0;
  if (node) table_.DropKernelAttrs(*node);
  invalidator_.InvalidateInode(nodeid);
  if (node) Answered(*node, asked);
  identity_invalidations_.fetch_add(1, std::memory_order_relaxed);
}

void ChangeWatcher::Answered(Inode& node, uint64_t asked) {
  // Only forward: a drop that began before a later ask answers only the asks before it.
  uint64_t answered = node.kernel_drops_answered.load();
  while (answered < asked &&
         !node.kernel_drops_answered.compare_exchange_weak(answered, asked)) {
  }
}

void ChangeWatcher::Handle(int wd, uint32_t mask, const std::string& name) {
  uint64_t parent_nodeid;
  {
    MutexLock lock(mutex_);
    auto it = nodeid_by_wd_.find(wd);
    if (it == nodeid_by_wd_.end()) return;
    parent_nodeid = it->second;
  }
  auto parent = table_.Find(parent_nodeid);
  if (!parent) return;
  // The name may now point at another object (created, renamed over) or at nothing.
  if (mask & (IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO)) {
    invalidator_.InvalidateEntry(parent_nodeid, name);
  }
  if (scope_ == Scope::kNamesGone) return;
  if (mask & (IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_TO)) {
    struct ::stat st {};
    const int dir_fd = parent->path_fd.get();
    if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return;
    auto node = table_.FindBySource(st.st_dev, st.st_ino);
    if (!node) return;
    // Our own writes, renames and attribute changes through the mount raise these events
    // too; the kernel already has their result. Only a change it has not seen drops its
    // pages. The node is known only after a first stat; the identity compared is from a
    // second one, taken after the observation began (InodeTable::Observe).
    const auto seen = InodeTable::Observe(*node);
    if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return;
    if (static_cast<uint64_t>(st.st_ino) != node->ino ||
        static_cast<uint64_t>(st.st_dev) != node->dev) {
      return;  // renamed over meanwhile: that rename has its own event
    }
    const cache::SourceIdentity id = cache::SourceIdentity::FromStat(st);
    if (!table_.KernelCacheFollows(*node, id, seen)) {
      spdlog::debug("dropping the kernel's cache of node {} (source inode {}, '{}'): changed "
                    "underneath, size now {}",
                    node->nodeid, node->ino, name, st.st_size);
      // Recorded first, as asked of this drop: the pages read after it are of this file
      // or a newer one, and a reply with these attributes is no news from then on
      // (SourceFs::CheckKernelCache).
      table_.SwapKernelCacheId(*node, id, seen, /*can_defer=*/false, /*drop_later=*/true);
      DropFenced(*node, Why::kChanged);
    }
  }
}

void ChangeWatcher::VisitCounters(const ChangeWatcher* watcher, const CounterVisitor& visit) {
  auto value = [&](uint64_t (ChangeWatcher::*get)() const) -> uint64_t {
    return watcher ? (watcher->*get)() : 0;
  };
  visit(CounterInfo{"watched_dirs", "Source directories under an inotify watch.",
                    CounterKind::kGauge, "epochfs_watched_dirs"}
            .Show({.row = "change watch", .label = "dirs"}),
        value(&ChangeWatcher::watched));
  visit(CounterInfo{"change_events", "Changes seen in the source by inotify.",
                    CounterKind::kCounter, "epochfs_change_events_total"}
            .Show({.row = "change watch", .label = "changes seen"}),
        value(&ChangeWatcher::events));
  visit(CounterInfo{"watch_failures", "Directories that could not be watched.",
                    CounterKind::kCounter, "epochfs_watch_failures_total"}
            .Show({.row = "change watch", .label = "dirs not watched"}),
        value(&ChangeWatcher::watch_failures));
  visit(CounterInfo{"identity_invalidations",
                    "Nodes dropped from the kernel after an identity check found them changed.",
                    CounterKind::kCounter}
            .Show({.row = "change watch", .label = "nodes dropped"}),
        value(&ChangeWatcher::identity_invalidations));
  visit(CounterInfo{"watch_drops_deferred",
                    "Drops of a changed file's pages put off because a writer had it open "
                    "through the mount.",
                    CounterKind::kCounter}
            .Show({.row = "change watch", .label = "drops put off", .quiet = true}),
        value(&ChangeWatcher::drops_deferred));
  visit(CounterInfo{"watch_drops_forced",
                    "Of those, drops made while the writer still had the file open, once "
                    "they had waited a second.",
                    CounterKind::kCounter}
            .Show({.row = "change watch", .label = "drops forced", .quiet = true}),
        value(&ChangeWatcher::drops_forced));
}

}  // namespace epochfs::fs
