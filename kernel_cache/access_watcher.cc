#include "kernel_cache/access_watcher.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/fanotify.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "base/thread_name.h"
#include "fs/source_fs.h"
#include "spdlog/spdlog.h"

namespace epochfs::kernel_cache {

Result<std::unique_ptr<AccessWatcher>> AccessWatcher::Start(std::filesystem::path mountpoint,
                                                            const fs::SourceFs& fs,
                                                            const Residency& residency,
                                                            prefetch::Prefetcher& prefetcher) {
  UniqueFd fan(::fanotify_init(FAN_CLASS_NOTIF | FAN_CLOEXEC | FAN_NONBLOCK | FAN_REPORT_FID,
                               O_RDONLY | O_CLOEXEC));
  if (!fan) return Status::FromErrno(errno, "fanotify_init");
  UniqueFd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake) return Status::FromErrno(errno, "eventfd");
  return std::unique_ptr<AccessWatcher>(new AccessWatcher(
      std::move(mountpoint), std::move(fan), std::move(wake), fs, residency, prefetcher));
}

AccessWatcher::AccessWatcher(std::filesystem::path mountpoint, UniqueFd fanotify_fd,
                             UniqueFd wake_fd, const fs::SourceFs& fs,
                             const Residency& residency, prefetch::Prefetcher& prefetcher)
    : mountpoint_(std::move(mountpoint)),
      fanotify_fd_(std::move(fanotify_fd)),
      wake_fd_(std::move(wake_fd)),
      fs_(fs),
      residency_(residency),
      prefetcher_(prefetcher),
      thread_([this] { Run(); }) {}

AccessWatcher::~AccessWatcher() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  queued_cv_.notify_one();
  marked_cv_.notify_all();
  const uint64_t one = 1;
  (void)!::write(wake_fd_.get(), &one, sizeof(one));
  thread_.join();
}

void AccessWatcher::Watch(const fs::Inode& dir) {
  {
    MutexLock lock(mu_);
    if (!marked_.insert(dir.nodeid).second) return;
    queued_.push_back(dir.nodeid);
    unmarked_.insert(dir.nodeid);
    unmarked_count_.store(unmarked_.size(), std::memory_order_release);
  }
  queued_cv_.notify_one();
  const uint64_t one = 1;
  (void)!::write(wake_fd_.get(), &one, sizeof(one));
}

void AccessWatcher::Forgotten(uint64_t nodeid) {
  {
    MutexLock lock(mu_);
    marked_.erase(nodeid);
    LeftUnmarkedLocked(nodeid);
  }
  marked_cv_.notify_all();
}

void AccessWatcher::LeftUnmarkedLocked(uint64_t nodeid) {
  unmarked_.erase(nodeid);
  waited_out_.erase(nodeid);
  unmarked_count_.store(unmarked_.size(), std::memory_order_release);
}

void AccessWatcher::WaitMarked(uint64_t nodeid) {
  // Paused: every READ counts already, and the marks coming back need not be waited for.
  if (unmarked_count_.load(std::memory_order_acquire) == 0 || !watching_.load()) return;
  const auto deadline = std::chrono::steady_clock::now() + kMarkWait;
  MutexLock lock(mu_);
  if (waited_out_.count(nodeid) != 0) return;  // once per folder: its READs count instead
  while (!stop_ && unmarked_.count(nodeid) != 0) {
    if (lock.WaitUntil(marked_cv_, deadline) == std::cv_status::timeout) {
      if (unmarked_.count(nodeid) != 0) waited_out_.insert(nodeid);
      return;
    }
  }
}

void AccessWatcher::Run() {
  NameThisThread("access-watch");
  while (true) {
    struct pollfd fds[2] = {{fanotify_fd_.get(), POLLIN, 0}, {wake_fd_.get(), POLLIN, 0}};
    // Paused, the READs that resume watching are counted per window of one epoch's time:
    // noise that never ends (proactive reclaim) must not add up to a resume.
    const int timeout_ms =
        watching_.load() ? -1 : static_cast<int>(paused_window_.count());
    const int ready = ::poll(fds, 2, timeout_ms);
    if (ready < 0 && errno != EINTR) {
      spdlog::warn("access watcher: poll: {}", std::strerror(errno));
      {
        MutexLock lock(mu_);
        stop_ = true;  // no folder will be marked now: nobody waits for one
      }
      marked_cv_.notify_all();
      return;
    }
    if (ready == 0 && !watching_.load()) {
      AllowNoiseFromNow();
      continue;
    }
    if (fds[1].revents & POLLIN) {
      uint64_t n;
      (void)!::read(wake_fd_.get(), &n, sizeof(n));
      {
        MutexLock lock(mu_);
        if (stop_) return;
      }
      const bool resume = resume_asked_.exchange(false);
      if (resume) {
        MutexLock lock(mu_);
        queued_.assign(marked_.begin(), marked_.end());  // every directory, again
      }
      MarkQueued();
      if (resume && !watching_.load()) {
        watching_.store(true);
        prefetcher_.SetOpensSeen(true);
        activity_counted_from_ = kNotCounted;  // the next whole epoch is judged
        spdlog::info("access watcher: READs reach the daemon again; watching opens");
      }
    }
    if (fds[0].revents & POLLIN) {
      // Interrupt moderation: a busy reader opens tens of thousands of files a second,
      // and poll() returns at each one. Reading at most once per kEventBatchPeriod
      // lets each read take a batch (handed over in handfuls: one lock, one wake-up of
      // the readahead each); a wake-up per open cost a warm epoch much of its speed
      // (docs/benchmarks.md, "Figures behind design choices"). The prefetcher learns of
      // an open at most that much later.
      // A folder the kernel just looked up does not wait for the batch: until it is
      // marked, the opens in it are seen only through their READs (OnDemandRead).
      const auto deadline = last_read_ + kEventBatchPeriod;
      while (true) {
        bool mark = false;
        {
          MutexLock lock(mu_);
          while (!stop_ && queued_.empty() && std::chrono::steady_clock::now() < deadline) {
            lock.WaitUntil(queued_cv_, deadline);
          }
          if (stop_) return;
          mark = !queued_.empty();
        }
        if (!mark) break;  // the batch period is over
        MarkQueued();
      }
      last_read_ = std::chrono::steady_clock::now();
      ReadEvents(/*judge=*/true);
    }
  }
}

uint64_t AccessWatcher::Noise(uint64_t files_known) { return files_known / kNoiseShare; }

bool AccessWatcher::OnDemandRead(const fs::Inode& file, uint64_t offset) {
  // A READ of a file's start counts that file once; the READs inside a file (holes the
  // kernel's reclaim made, the rest of a file it lost) are counted apart, with more
  // leeway: a file can take many.
  std::atomic<uint64_t>& reads = offset == 0 ? start_reads_ : inner_reads_;
  const uint64_t count = reads.fetch_add(1, std::memory_order_relaxed) + 1;
  if (watching_.load(std::memory_order_acquire)) {
    // A file in a folder not marked yet (WaitMarked gave up, or the mark failed): only
    // its READ tells.
    if (unmarked_count_.load(std::memory_order_acquire) == 0) return false;
    const std::shared_ptr<fs::Inode> folder = fs_.inodes().LocationOf(file).parent;
    if (folder == nullptr) return false;
    MutexLock lock(mu_);
    return unmarked_.count(folder->nodeid) != 0;
  }
  const std::atomic<uint64_t>& limit = offset == 0 ? resume_after_starts_ : resume_after_inner_;
  if (count > limit.load()) AskToResume();
  return true;
}

void AccessWatcher::AskToResume() {
  if (!resume_asked_.exchange(true)) {
    const uint64_t one = 1;
    (void)!::write(wake_fd_.get(), &one, sizeof(one));
  }
}

void AccessWatcher::AllowNoiseFromNow() {
  resume_after_starts_.store(start_reads_.load() + paused_noise_);
  resume_after_inner_.store(inner_reads_.load() + kInnerReadsPerNoise * paused_noise_);
}

void AccessWatcher::MaybePause() {
  if (!watching_.load()) return;  // a folder marked while paused sends events too
  // An epoch is judged at the first batch of opens after it ended: a warm epoch can be
  // shorter than any fixed period between looks, and a look once per period judged it
  // an epoch or more late. The epoch's number is cheap to ask; the prefetcher's stats
  // (its lock) are taken only then, and once more when a part of the epoch was seen.
  if (prefetcher_.Epoch() != checked_epoch_) {
    JudgeEndedEpoch();
  } else if (activity_counted_from_ != kNotCounted &&
             opens_.load(std::memory_order_relaxed) >= judge_at_opens_) {
    judge_at_opens_ = kNotCounted;  // once an epoch
    JudgeEpochSoFar();
  }
}

void AccessWatcher::JudgeEndedEpoch() {
  const auto now = std::chrono::steady_clock::now();
  const prefetch::PrefetcherStats s = prefetcher_.Stats();
  checked_epoch_ = s.epoch;
  const auto epoch_time = now - std::exchange(epoch_looked_at_, now);
  files_known_ = s.files_known;
  opens_at_look_ = opens_.load(std::memory_order_relaxed);
  not_held_at_look_ = opens_not_held_.load(std::memory_order_relaxed);
  judge_at_opens_ =
      opens_at_look_ + std::max<uint64_t>(kMinOpensJudged, s.files_known / kEpochShareJudged);
  // READs and files readahead brought since the last epoch's end. The look after an
  // epoch's end comes with the next one's first opens, and counts their READs with the
  // epoch that ended: its last READs would otherwise count against the next one too.
  const uint64_t activity = start_reads_.load(std::memory_order_relaxed) + s.prefetched;
  const uint64_t inner = inner_reads_.load(std::memory_order_relaxed);
  const uint64_t counted_from = std::exchange(activity_counted_from_, activity);
  const uint64_t inner_from = std::exchange(inner_counted_from_, inner);
  if (counted_from == kNotCounted) return;  // the epoch did not start watched
  const uint64_t noise = Noise(s.files_known);
  if (activity - counted_from > noise || inner - inner_from > kInnerReadsPerNoise * noise) {
    return;
  }
  Pause(noise, epoch_time);
}

void AccessWatcher::JudgeEpochSoFar() {
  const prefetch::PrefetcherStats s = prefetcher_.Stats();
  if (s.epoch != checked_epoch_) return;  // ended meanwhile: judged at the next batch
  const uint64_t activity = start_reads_.load(std::memory_order_relaxed) + s.prefetched;
  const uint64_t inner = inner_reads_.load(std::memory_order_relaxed);
  const uint64_t noise = Noise(files_known_);
  // The READs of the part's last opens may still be on their way; its opens of files the
  // kernel did not hold tell at once.
  if (activity - activity_counted_from_ > noise ||
      inner - inner_counted_from_ > kInnerReadsPerNoise * noise ||
      opens_not_held_.load(std::memory_order_relaxed) - not_held_at_look_ > noise) {
    return;
  }
  // The rest of the epoch is likely as quiet as its start; if not, its READs resume
  // watching past the noise, as after a whole quiet epoch. The window the noise is
  // allowed in is this epoch's time, guessed from its part so far.
  const auto part = std::chrono::steady_clock::now() - epoch_looked_at_;
  const uint64_t opens =
      std::max<uint64_t>(1, opens_.load(std::memory_order_relaxed) - opens_at_look_);
  Pause(noise, part * static_cast<int64_t>(std::max(files_known_, opens) / opens));
}

void AccessWatcher::Pause(uint64_t noise, std::chrono::steady_clock::duration epoch_time) {
  // FAN_MARK_FLUSH: every inode mark of this group goes; marked_ remembers them.
  if (::fanotify_mark(fanotify_fd_.get(), FAN_MARK_FLUSH, 0, AT_FDCWD, nullptr) != 0) {
    spdlog::debug("access watcher: cannot flush marks: {}", std::strerror(errno));
    activity_counted_from_ = kNotCounted;
    return;
  }
  paused_noise_ = noise;
  AllowNoiseFromNow();
  paused_window_ = std::clamp(std::chrono::duration_cast<std::chrono::milliseconds>(epoch_time),
                              kMinPausedWindow, kMaxPausedWindow);
  watching_.store(false);
  prefetcher_.SetOpensSeen(false);  // so that it still finds where the next epoch starts
  marks_.store(0);
  pauses_.fetch_add(1, std::memory_order_relaxed);
  spdlog::info("access watcher: every file of an epoch so far was in the page cache; not "
               "watching opens until more than {} READs reach the daemon",
               noise);
  // READs that came in between found watching_ still true and did not ask to resume.
  if (start_reads_.load() > resume_after_starts_.load() ||
      inner_reads_.load() > resume_after_inner_.load()) {
    AskToResume();
  }
}

void AccessWatcher::MarkQueued() {
  std::vector<uint64_t> queued;
  {
    MutexLock lock(mu_);
    queued.swap(queued_);
  }
  for (uint64_t nodeid : queued) {
    const bool marked = Mark(nodeid);
    {
      MutexLock lock(mu_);
      if (marked) {
        LeftUnmarkedLocked(nodeid);
      } else {
        // Its READs count from now on (it stays in unmarked_), with no wait for a mark
        // that failed; a later lookup may try again.
        marked_.erase(nodeid);
        waited_out_.insert(nodeid);
      }
    }
    marked_cv_.notify_all();
  }
}

bool AccessWatcher::Mark(uint64_t nodeid) {
  std::shared_ptr<fs::Inode> dir = fs_.inodes().Find(nodeid);
  if (!dir) return true;  // forgotten meanwhile: nothing to watch
  const std::string relative = nodeid == fs::kRootNodeId ? std::string() : fs_.RelativePath(*dir);
  const std::filesystem::path path = relative.empty() ? mountpoint_ : mountpoint_ / relative;
  // Resolving the path may send LOOKUPs to this daemon: fine, from this thread.
  int marked = ::fanotify_mark(fanotify_fd_.get(), FAN_MARK_ADD | FAN_MARK_ONLYDIR | evictable_,
                               FAN_OPEN | FAN_EVENT_ON_CHILD, AT_FDCWD, path.c_str());
  if (marked != 0 && errno == EINVAL && evictable_ != 0) {
    spdlog::info("access watcher: this kernel has no evictable fanotify marks (Linux 5.19): "
                 "a directory deleted underneath keeps its inode while the mount lives");
    evictable_ = 0;
    marked = ::fanotify_mark(fanotify_fd_.get(), FAN_MARK_ADD | FAN_MARK_ONLYDIR,
                             FAN_OPEN | FAN_EVENT_ON_CHILD, AT_FDCWD, path.c_str());
  }
  if (marked == 0) {
    marks_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  if (mark_failures_.fetch_add(1, std::memory_order_relaxed) == 0) {
    spdlog::warn("access watcher: cannot mark {} ({}): opens there reach the prefetcher "
                 "only as demand reads; logged once",
                 path.string(), std::strerror(errno));
  }
  return false;
}

void AccessWatcher::Drain() { ReadEvents(/*judge=*/false); }

void AccessWatcher::ReadEvents(bool judge) {
  MutexLock lock(read_mu_);
  alignas(struct fanotify_event_metadata) char buf[16384];
  const pid_t self = ::getpid();
  std::vector<prefetch::Prefetcher::Opened> opened;
  // A handful of opens at once: one lock and one wake-up of the readahead. Judged after
  // each handful, not after all queued (a thread kept off the CPU finds a whole epoch
  // queued): an epoch's first look and its quarter come where they fall among the opens.
  const auto hand_over = [&] {
    if (opened.empty()) return;
    prefetcher_.OnOpens(opened);
    opened.clear();
    if (judge) MaybePause();
  };
  while (true) {
    const ssize_t len = ::read(fanotify_fd_.get(), buf, sizeof(buf));
    if (len <= 0) return;  // EAGAIN: drained
    const auto* event = reinterpret_cast<const struct fanotify_event_metadata*>(buf);
    ssize_t left = len;
    for (; FAN_EVENT_OK(event, left); event = FAN_EVENT_NEXT(event, left)) {
      if (event->vers != FANOTIFY_METADATA_VERSION) continue;
      if (event->mask & FAN_Q_OVERFLOW) {
        spdlog::debug("access watcher: event queue overflowed");
        continue;
      }
      if (event->pid == self || !(event->mask & FAN_OPEN)) continue;
      if (event->metadata_len + sizeof(struct fanotify_event_info_fid) > event->event_len) continue;
      const auto* info = reinterpret_cast<const struct fanotify_event_info_fid*>(
          reinterpret_cast<const char*>(event) + event->metadata_len);
      if (info->hdr.info_type != FAN_EVENT_INFO_TYPE_FID) continue;
      const auto* handle = reinterpret_cast<const struct file_handle*>(info->handle);
      if (handle->handle_bytes < 8) continue;
      // A FUSE file handle starts with the node id, high half first (fuse_encode_fh).
      uint32_t words[2];
      std::memcpy(words, handle->f_handle, sizeof(words));
      const uint64_t nodeid = (uint64_t{words[0]} << 32) | words[1];
      std::shared_ptr<fs::Inode> inode = fs_.inodes().Find(nodeid);
      if (!inode || inode->is_dir) continue;  // a control file, or forgotten already
      opens_.fetch_add(1, std::memory_order_relaxed);
      if (!residency_.HoldsWhole(*inode)) opens_not_held_.fetch_add(1, std::memory_order_relaxed);
      opened.push_back({prefetch::FileKey{inode->dev, inode->ino}, fs_.RelativePath(*inode)});
      if (opened.size() == kOpensHandedOver) hand_over();
    }
    hand_over();
  }
}

void AccessWatcher::VisitCounters(const AccessWatcher* watcher, const CounterVisitor& visit) {
  constexpr auto kCounter = CounterKind::kCounter;
  constexpr auto kGauge = CounterKind::kGauge;
  uint64_t opens = 0, not_held = 0, marks = 0, failures = 0, pauses = 0, paused = 0;
  if (watcher) {
    opens = watcher->opens_.load();
    not_held = watcher->opens_not_held_.load();
    marks = watcher->marks_.load();
    failures = watcher->mark_failures_.load();
    pauses = watcher->pauses_.load();
    paused = watcher->watching_.load() ? 0 : 1;
  }
  visit(CounterInfo{"access_opens", "Opens of files through the mount seen by fanotify.", kCounter}
            .Show({.row = "opens seen", .label = ""}),
        opens);
  visit(CounterInfo{"access_opens_not_held",
                    "Of those, opens of files the kernel was not known to hold whole.", kCounter}
            .Show({.row = "opens seen", .label = "not held"}),
        not_held);
  visit(CounterInfo{"access_marks", "Directories of the mount marked for fanotify.", kGauge}
            .Show({.row = "opens seen", .label = "directories"}),
        marks);
  visit(CounterInfo{"access_mark_failures", "Directories that could not be marked.", kCounter}
            .Show({.row = "opens seen", .label = "unmarked"}),
        failures);
  visit(CounterInfo{"access_pauses",
                    "Times the watcher stopped seeing opens: every file was in the page cache.",
                    kCounter}
            .Show({.row = "opens seen", .label = "pauses"}),
        pauses);
  visit(CounterInfo{"access_paused", "1 while opens are not watched (see access_pauses).", kGauge}
            .Show({.row = "opens seen", .label = "paused"}),
        paused);
}

}  // namespace epochfs::kernel_cache
