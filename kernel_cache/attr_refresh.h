// AttrRefresh: lists again, through the mount, the folders whose files the kernel has
// just read with READs, so that the kernel's attributes of those files are fresh again.
//
// Why: the kernel marks a FUSE file's atime stale whenever a READ completes (unless the
// whole filesystem is read-only), and the next stat() of the file asks the daemon: a
// GETATTR round trip. Python's open() stats every file it opens, so after an epoch
// served by READs (the first one, from the source) each file of the next epoch cost one
// more round trip than a file pushed into the page cache: the first warm epoch ran at
// about half the speed of the ones after it (docs/benchmarks.md, "The first warm epoch:
// a GETATTR per file"). A listing with attributes (READDIRPLUS) gives the kernel every
// listed file's attributes at once, which clears the mark, from a thread of the daemon's
// own instead of in each reader's open. The listing's replies check each file's
// identity as a GETATTR's do (a changed file is dropped, not refreshed).
//
// When: a listed entry costs the daemon a little less than a GETATTR does (an fstatat
// in the source against a stat: docs/benchmarks.md), so a folder is listed once most of
// it is due (FolderReads::Due): three quarters of its files read to their end since its
// last listing; or its reads went quiet with a quarter of them pending; or, in the first
// pass over it, as many READs as it has files with an eighth of them pending (the first
// epoch, from the source, has just read the whole folder, and the next epoch may stat
// its last files at once). A
// folder whose open fails, or whose listing took longer than kMaxListing, is not listed
// again. A folder never listed yet is listed after kFirstBatch such files, or
// kFirstBatchQuiet once quiet (a restart's few READs list nothing). A folder of more
// than kMaxEntries entries is left alone after its first listing (which stops there):
// each listing would give the kernel that many inodes to hold. The same mechanics as
// KernelListing (KernelListing::ListFolder): getdents64 on the mount, a FUSE worker
// answers.
//
// Thread-safety: ReadToEnd from any thread (it only records); the listing runs on one
// thread of its own. Stop() before the session ends; destroy after it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>

#include "base/counters.h"
#include "base/thread_annotations.h"
#include "kernel_cache/kernel_listing.h"
#include "kernel_cache/mount_view.h"

namespace epochfs::kernel_cache {

class AttrRefresh {
 public:
  // `mount` outlives this.
  explicit AttrRefresh(const MountView& mount);
  ~AttrRefresh();
  AttrRefresh(const AttrRefresh&) = delete;
  AttrRefresh& operator=(const AttrRefresh&) = delete;

  // A READ of the file at `path` (relative to the mount) reached the file's end.
  void ReadToEnd(const std::string& path);
  // No folder is listed after this one; returns at once (a listing in progress ends
  // when its READDIRPLUS is answered, or when the session goes).
  void Stop();

  // Names the counters; `refresh` may be null: they are then 0.
  static void VisitCounters(const AttrRefresh* refresh, const CounterVisitor& visit);

  // A folder never listed by this class is listed once this many of its files were read.
  static constexpr uint32_t kFirstBatch = 16;
  static constexpr uint32_t kFirstBatchQuiet = 4;
  // How long a folder's reads must have been quiet for its last few files to be listed:
  // kQuietGaps times the usual gap between its reads, and at least kQuiet (a folder of
  // a data set with a thousand of them is read a few times a second: its gaps are not
  // the end of its reads).
  static constexpr std::chrono::milliseconds kQuiet{200};
  static constexpr int kQuietGaps = 8;
  // The largest folder listed again.
  static constexpr uint64_t kMaxEntries = 8192;
  // A folder whose listing took longer than this is not listed again (a slow source:
  // its entries cost more than the GETATTRs they save).
  static constexpr std::chrono::milliseconds kMaxListing{500};

  // One folder's reads since its listings, and whether it is due for one. Public for its
  // tests; AttrRefresh keeps one per folder under its lock.
  class FolderReads {
   public:
    using Clock = std::chrono::steady_clock;
    // A file of the folder was read to its end.
    void Read(Clock::time_point now);
    bool Due(Clock::time_point now) const;
    // A listing starts: the files it refreshes (pending until now). READs that come
    // while it runs stay pending: the listing may have passed their entries already.
    uint32_t StartListing();
    // The listing ended; nullopt: the folder could not be opened. `took`: how long it ran.
    void Listed(const std::optional<KernelListing::Listed>& listed, Clock::duration took);
    // Whether the folder is never to be listed again.
    bool given_up() const { return entries_ > kMaxEntries; }

   private:
    uint32_t pending_ = 0;  // files read to their end since the last listing
    // Files read to their end in the first pass over the folder, which ends at a listing
    // once there were as many as it has files. Only the first: later READs are the
    // kernel's misses (a memory limit, evictions), whose count says nothing of where an
    // epoch stands.
    uint64_t first_pass_reads_ = 0;
    uint64_t first_pass_reads_listed_ = 0;  // of them, before the listing under way began
    bool first_pass_ = true;
    // At the last listing; 0: never listed; over kMaxEntries: not to be listed (too
    // large, too slow, or it could not be opened).
    uint64_t entries_ = 0;
    uint64_t files_ = 0;  // regular files at the last listing
    Clock::time_point last_read_;
    Clock::duration gap_{};  // between its reads, smoothed
  };

 private:
  void Run();

  const MountView& mount_;
  Mutex mu_;
  std::condition_variable cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  std::unordered_map<std::string, FolderReads> folders_ GUARDED_BY(mu_);
  std::atomic<uint64_t> listings_{0}, entries_listed_{0}, files_refreshed_{0};
  std::thread thread_;  // last: started when everything above is ready
};

}  // namespace epochfs::kernel_cache
