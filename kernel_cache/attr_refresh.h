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
// in the source against a stat: docs/benchmarks.md), so a folder is listed once three quarters of its files were read to their end since
// its last listing, or once its reads went quiet with a quarter of them pending (the
// last files of an epoch). A folder whose open fails, or whose listing took longer than
// kMaxListing, is not listed again. A folder never listed yet is listed after kFirstBatch such
// files, or kFirstBatchQuiet once quiet (a restart's few READs list nothing). A folder of
// more than kMaxEntries entries is left alone after its first listing (which stops
// there): each listing would give the kernel that many inodes to hold. The same
// mechanics as KernelListing (KernelListing::ListFolder): getdents64 on the mount, a
// FUSE worker answers.
//
// Thread-safety: ReadToEnd from any thread (it only records); the listing runs on one
// thread of its own. Stop() before the session ends; destroy after it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <string>
#include <thread>
#include <unordered_map>

#include "base/counters.h"
#include "base/thread_annotations.h"
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

 private:
  struct Folder {
    uint32_t pending = 0;  // files read to their end since the last listing
    // At the last listing; 0: never listed; over kMaxEntries: not to be listed (too
    // large, too slow, or it could not be opened).
    uint64_t entries = 0;
    std::chrono::steady_clock::time_point last_read;
    std::chrono::steady_clock::duration gap{};  // between its reads, smoothed
  };
  // Whether `folder` should be listed now.
  static bool Due(const Folder& folder, std::chrono::steady_clock::time_point now);
  void Run();

  const MountView& mount_;
  Mutex mu_;
  std::condition_variable cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  std::unordered_map<std::string, Folder> folders_ GUARDED_BY(mu_);
  std::atomic<uint64_t> listings_{0}, entries_listed_{0}, files_refreshed_{0};
  std::thread thread_;  // last: started when everything above is ready
};

}  // namespace epochfs::kernel_cache
