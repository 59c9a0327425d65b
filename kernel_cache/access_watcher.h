// AccessWatcher: tells the prefetcher which files are opened through the mount, also
// when the open and the read never reach the daemon (pages pushed into the kernel's
// page cache, kernel_cache/page_cache_pusher.h; "notify" mode opens). Without it the prefetcher
// would lose track of the epoch exactly when readahead works best.
//
// How (docs/architecture.md, "Seeing reads that reach no daemon"): fanotify, with an
// inode mark on each directory of the mount the kernel knows (FAN_OPEN on its
// children) and FAN_REPORT_FID. Mount and filesystem marks are refused on FUSE (no
// fsid), an inode mark is not; with FID reporting an event carries the file's handle
// instead of an open fd, and a FUSE handle holds the node id: an event costs no FUSE
// request at all. Marks are made on this class's own thread, through the mount's path
// (a directory the kernel just looked up is already in its cache). The marks are
// evictable (FAN_MARK_EVICTABLE, Linux 5.19): they do not keep the kernel from forgetting
// a directory, or it could never forget one deleted underneath, nor let go of the
// daemon's fd of it (and the disk space it holds). A directory forgotten and looked up
// again is a new node, marked anew.
//
// When fanotify is unavailable (not root, an old kernel) Start() fails; the daemon then
// keeps reporting demand reads as accesses, and does not push pages.
//
// Pausing. Once a whole epoch went by with (nearly) no READ reaching the daemon and
// (nearly) nothing for readahead to bring (the page cache holds the data set), or the
// first quarter of an epoch after one that was watched from its start did (and opened
// only files the kernel holds whole: their READs may still be on their way), the events
// are worth nothing and cost every open (made in the reader's open(), read here): the
// marks are flushed. "Nearly": READs of the start of one file in 256 of
// those known, and 16 times as many READs inside files (holes), because a machine with
// proactive reclaim takes a few pages all the time. READs beyond as many again within
// one epoch's time (the kernel dropped files, files changed) resume watching;
// while paused, and until the marks are back, READs count as accesses, as without a
// watcher. With the data set in the page cache, the events held a warm epoch well below
// tmpfs (docs/benchmarks.md, "Pushing into the page cache", the table under "Warm
// epochs, what was done about it").
//
// Thread-safety: Watch() is thread-safe and never blocks on the kernel; WaitMarked()
// blocks its caller (a FUSE worker) for at most kMarkWait; one thread makes marks and
// pauses, and reads events, as does Drain() on its caller's thread (one reader at a
// time).
#pragma once

#include <sys/fanotify.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "base/counters.h"
#include "base/status.h"
#include "base/thread_annotations.h"
#include "base/unique_fd.h"
#include "fs/inode_table.h"
#include "kernel_cache/residency.h"
#include "prefetcher/prefetcher.h"

namespace epochfs::fs {
class SourceFs;
}  // namespace epochfs::fs

namespace epochfs::kernel_cache {


class AccessWatcher {
 public:
  // Starts the thread. `fs` (for node ids and paths) and `prefetcher` outlive it.
  // `residency` tells whether the kernel holds an opened file (a quiet part of an epoch
  // opens only such files).
  static Result<std::unique_ptr<AccessWatcher>> Start(std::filesystem::path mountpoint,
                                                      const fs::SourceFs& fs,
                                                      const Residency& residency,
                                                      prefetch::Prefetcher& prefetcher);
  ~AccessWatcher();
  AccessWatcher(const AccessWatcher&) = delete;
  AccessWatcher& operator=(const AccessWatcher&) = delete;

  // Marks directory node `dir` (once; queued for the thread).
  void Watch(const fs::Inode& dir) EXCLUDES(mu_);
  // The kernel forgot directory node `nodeid` (its mark went with its inode).
  void Forgotten(uint64_t nodeid) EXCLUDES(mu_);
  // Returns once directory node `nodeid` is marked (at once if it is, is not queued, or
  // the watcher is paused), or after kMarkWait. Called before the kernel learns a file
  // in it: an open made before the mark makes no event, and the file's first open in the
  // folder would go unseen. The thread marks within microseconds when it is idle; the
  // wait is bounded because its path walk may need a FUSE worker, and every worker might
  // be waiting here. A folder whose wait ran out (or whose mark failed) is not waited for
  // again: its READs count until its mark is in place.
  void WaitMarked(uint64_t nodeid) EXCLUDES(mu_);
  // Hands the prefetcher every open made through the mount before this call, now
  // (those the kernel has queued and the watcher has not read yet, up to its batch
  // period later). Called before a plan that begins a new epoch takes effect, so that
  // the old epoch's last opens are not counted in the new one. Blocks only while the
  // watcher thread hands over a batch of its own; no request to the mount.
  void Drain() EXCLUDES(read_mu_);
  // A READ of `file` reached the daemon. Returns whether its open may have gone unseen
  // (paused, the marks not back yet, or its folder looked up so lately that its mark is
  // still queued): the caller then reports the read as an access itself. Resumes
  // watching if paused.
  bool OnDemandRead(const fs::Inode& file, uint64_t offset) EXCLUDES(mu_);

  uint64_t opens() const { return opens_.load(std::memory_order_relaxed); }
  // Names the counters (base/counters.h); `watcher` may be null (none running).
  static void VisitCounters(const AccessWatcher* watcher, const CounterVisitor& visit);

 private:
  AccessWatcher(std::filesystem::path mountpoint, UniqueFd fanotify_fd, UniqueFd wake_fd,
                const fs::SourceFs& fs, const Residency& residency,
                prefetch::Prefetcher& prefetcher);
  void Run();
  void MarkQueued() EXCLUDES(mu_);
  // Makes the mark of directory node `nodeid`; false if the kernel refused it.
  bool Mark(uint64_t nodeid) EXCLUDES(mu_);
  void LeftUnmarkedLocked(uint64_t nodeid) REQUIRES(mu_);
  // Wakes the thread to put the marks back, once per pause.
  void AskToResume();
  // Reads every queued event and hands the opens to the prefetcher, kOpensHandedOver at a
  // time; with `judge` (the watcher thread only), MaybePause after each handful. One
  // caller at a time (read_mu_): events read by one are handed over before another reads
  // more.
  void ReadEvents(bool judge) EXCLUDES(read_mu_);
  // After events: pauses once a whole epoch passed with no more READs and files brought
  // by readahead than Noise (a READ that fills a hole in a file the kernel holds is not
  // counted at all: KernelActivity), or once the first part of an epoch did
  // (kEpochShareJudged of the files known).
  void MaybePause();
  void JudgeEndedEpoch();
  void JudgeEpochSoFar();
  // Flushes the marks; READs beyond `noise` within `epoch_time` resume watching.
  void Pause(uint64_t noise, std::chrono::steady_clock::duration epoch_time);
  // What a quiet epoch may still bring, of `files_known`: single files the kernel's own
  // reclaim took (a machine with proactive reclaim keeps taking some), and while paused,
  // the READs that do not resume watching.
  static uint64_t Noise(uint64_t files_known);
  // Paused: the READs from now on that resume watching are those beyond the noise.
  void AllowNoiseFromNow();

  const std::filesystem::path mountpoint_;
  UniqueFd fanotify_fd_;
  UniqueFd wake_fd_;  // eventfd: something queued, or stop
  const fs::SourceFs& fs_;
  const Residency& residency_;
  prefetch::Prefetcher& prefetcher_;

  Mutex read_mu_;  // ReadEvents
  Mutex mu_;
  bool stop_ GUARDED_BY(mu_) = false;
  std::vector<uint64_t> queued_ GUARDED_BY(mu_);     // directory node ids to mark
  std::condition_variable queued_cv_;  // something queued (or stop): cuts the batch wait
  std::condition_variable marked_cv_;  // a folder left unmarked_, or a mark failed
  std::unordered_set<uint64_t> marked_ GUARDED_BY(mu_);  // queued or marked already
  // Queued and not yet marked (or its mark failed). A folder leaves this set right
  // after its mark is made; until then WaitMarked holds back the kernel's learning of its
  // files, and a READ in it reports the access itself. Past a wait that ran out, two
  // narrow windows remain: an open made just after the mark whose READ comes before the
  // folder left the set counts twice (the prefetcher takes the second as a re-read,
  // which ends the epoch once it has most of its files: 90% of the longest, or 16 in the
  // first), and an open made just before the mark whose READ comes after it is
  // lost.
  std::unordered_set<uint64_t> unmarked_ GUARDED_BY(mu_);
  std::unordered_set<uint64_t> waited_out_ GUARDED_BY(mu_);  // of unmarked_: not waited for
  std::atomic<size_t> unmarked_count_{0};  // unmarked_.size(), read without the lock
  std::atomic<uint64_t> opens_{0}, marks_{0}, mark_failures_{0}, pauses_{0};
  // Opens of files the kernel was not known to hold whole when their event was read: a
  // file whose READs are still to come (a reader that opens ahead of its reads), or
  // one the kernel lost. A part of an epoch with such opens is not quiet, whatever the
  // READs counted so far say.
  std::atomic<uint64_t> opens_not_held_{0};
  // The watcher thread's own: FAN_MARK_EVICTABLE, or 0 once the kernel refused it.
  unsigned evictable_ = FAN_MARK_EVICTABLE;
  // READs that reached the daemon: of a file's start (a file the kernel lacks), and inside
  // a file (a hole, or the rest of a file whose start the kernel kept).
  std::atomic<uint64_t> start_reads_{0}, inner_reads_{0};
  // Opens are seen (marks in place); false from a pause until the marks are back.
  std::atomic<bool> watching_{true};
  std::atomic<bool> resume_asked_{false};
  // Paused: a READ beyond this many start_reads_ (inner_reads_) resumes watching. The
  // watcher thread moves them up to the READs so far + the noise once per
  // paused_window_ (AllowNoiseFromNow).
  std::atomic<uint64_t> resume_after_starts_{0}, resume_after_inner_{0};
  // The watcher thread's own: what MaybePause last saw.
  static constexpr uint64_t kNoiseShare = 256;  // Noise: one file in this many
  // READs inside files allowed per file of noise: holes come several to a file.
  static constexpr uint64_t kInnerReadsPerNoise = 16;
  static constexpr uint64_t kNotCounted = UINT64_MAX;
  uint64_t checked_epoch_ = 0;  // the prefetcher's epoch at the last look
  // READs + files read ahead when the current epoch's first look came (kNotCounted: it
  // began before the watcher watched; it is not judged).
  uint64_t activity_counted_from_ = kNotCounted;
  uint64_t inner_counted_from_ = 0;  // inner_reads_ then
  std::chrono::steady_clock::time_point epoch_looked_at_{};  // the last epoch's first look
  uint64_t files_known_ = 0;    // the prefetcher's, at this epoch's first look
  uint64_t opens_at_look_ = 0;  // opens_ then
  uint64_t not_held_at_look_ = 0;  // opens_not_held_ then
  // The current epoch is judged once so far, when opens_ reaches this (kNotCounted: done,
  // or not before the epoch's first look). A first part this large with nothing reaching
  // the daemon tells what a whole epoch would: in a warm epoch the events cost each open
  // for nothing until its end (docs/benchmarks.md, "The watcher's pause within an
  // epoch"). A wrong guess costs little: READs beyond the noise resume watching.
  static constexpr uint64_t kEpochShareJudged = 4;  // a quarter of the files known
  static constexpr uint64_t kMinOpensJudged = 64;
  uint64_t judge_at_opens_ = kNotCounted;
  // While paused: the noise allowed, and the window it is allowed in (the quiet epoch's
  // time, within bounds).
  static constexpr auto kMinPausedWindow = std::chrono::milliseconds(1000);
  static constexpr auto kMaxPausedWindow = std::chrono::milliseconds(600'000);
  uint64_t paused_noise_ = 0;
  std::chrono::milliseconds paused_window_{kMinPausedWindow};
  // The watcher thread's own: when it last read events (see Run).
  static constexpr auto kEventBatchPeriod = std::chrono::milliseconds(4);
  // Opens handed to the prefetcher at once: an epoch's first look comes at most this many
  // opens into it, however many events queued.
  static constexpr size_t kOpensHandedOver = 64;
  static constexpr auto kMarkWait = std::chrono::milliseconds(20);
  std::chrono::steady_clock::time_point last_read_{};
  std::thread thread_;
};

}  // namespace epochfs::kernel_cache
