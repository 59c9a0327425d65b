// The prefetcher: knows where a training epoch is, predicts what it reads next, reads
// that ahead into the cache, and ranks the RAM tier's entries so that a data set larger
// than the cache does not thrash it.
//
// The algorithm. fs/ reports every demand read that reaches the daemon (OnRead: the
// file, its path relative to the mount, the offset). The first read of a file at
// offset 0 is an *access*; an access to a file already accessed in this epoch, once
// the epoch has covered most of the previous one (or any repeat in the first epoch),
// starts a new epoch; so does a published plan. The Classifier looks at the accesses
// of the epoch so far and names the pattern: sequential (sorted path order), replay
// (the previous epoch's order), shuffled, or published (a plan was written to
// `.epochfs/plan`). It tolerates DataLoader workers reading interleaved slices of one
// order: an access counts as "in order" when its predecessor in the reference order was
// among the last few dozen accesses. Readahead workers then pick files:
//  - published: the plan's next files after the furthest one read;
//  - replay: the previous epoch's next files; sequential: the next names in the same
//    directory (sorted);
//  - shuffled: files not yet read this epoch, in the order the SSD tier holds them
//    (pack, then offset: once per epoch a worker asks the cache's index where each file
//    lies), so SSD reads run sequentially; files the SSD tier lacks follow, in the order
//    they were first seen.
// Each worker takes a batch of up to 64 of them and streams what the SSD tier holds of
// the batch into RAM in pack order, with large sequential reads (Cache::StreamFromSsd:
// after a restart, a 110 KB sample costs a fraction of one IO instead of one random
// read); a file the SSD tier's index lacks is not even stat'ed for it. The rest goes to
// a queue that every worker reads from, one file each with Cache::Prefetch on the
// cache's read path: `threads` workers, and more while the pacer's depth (source
// reads in flight) is larger. The gate (readahead_gate.h) stops readahead altogether
// while the readers are no faster with it. A restarted daemon
// predicts the recorded epoch's pattern, so a shuffled data set streams from mount on.
// Demand reads go first: a worker waits (up to 5 ms) while a demand read is filling
// from the SSD tier or the source (Cache::DemandFillsInFlight), speculative source
// reads are paced below the rate at which demand reads start to queue behind them
// (source_pacer.h), and they stay within an optional budget of reads
// and bytes per second (read_budget.h). The RAM tier's EpochPolicy (see
// epoch_policy.h) evicts files already read this epoch first and, with a plan, the one
// needed furthest in the future; a prefetch that the policy would refuse is not issued,
// so readahead never evicts something more useful than what it brings.
//
// Thread-safety: all methods are thread-safe. The prefetcher owns its worker threads;
// the destructor stops and joins them. The SourceTree is used from worker threads and
// from OnRead/Publish callers, concurrently.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cache/cache.h"
#include "cache/eviction.h"
#include "base/counters.h"
#include "base/status.h"
#include "base/unique_fd.h"
#include "prefetcher/kernel_pages.h"
#include "prefetcher/readahead_gate.h"
#include "prefetcher/source_pacer.h"
#include "prefetcher/source_tree.h"

namespace epochfs::prefetch {

using Status = ::epochfs::Status;
template <typename T>
using Result = ::epochfs::Result<T>;

// A source file: (dev, ino).
struct FileKey {
  uint64_t dev = 0;
  uint64_t ino = 0;
  bool operator==(const FileKey&) const = default;
};
struct FileKeyHash {
  size_t operator()(const FileKey& k) const noexcept {
    uint64_t h = k.dev * 0x9e3779b97f4a7c15ull ^ k.ino;
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
    return static_cast<size_t>(h ^ (h >> 31));
  }
};

enum class Pattern : uint8_t { kUnknown, kSequential, kReplay, kShuffled, kPublished };
const char* PatternName(Pattern pattern);

// One entry of a published plan, validated by the caller (fs/): the file exists
// beneath the source root, is a regular file, and the publisher may read it.
struct PlannedFile {
  std::string path;  // relative to the mount root
  FileKey key;
  uint64_t size = 0;
};

// What the prefetcher's tables hold per file it knows (the catalog, this and the last
// epoch's orders and sets, the RAM policy's marks), and per entry of a published plan,
// on top of the path's own bytes: measured with 300,000 files (docs/operations.md).
// --ram pays for both (daemon/daemon.cc, PlanMemory).
inline constexpr uint64_t kBytesPerKnownFile = 512;
inline constexpr uint64_t kBytesPerPlanEntry = 256;

struct PrefetcherOptions {
  // Readahead first streams what the SSD tier holds of its next files, in pack order
  // (Cache::StreamFromSsd, with identities from SourceTree::Stat), then opens and reads
  // the rest one by one. false: one by one only.
  bool stream_from_ssd = true;
  // Readahead workers = files in flight at most; 0: track and rank only, never read
  // ahead.
  uint32_t threads = 4;
  // With a pacer: up to this many files in flight when the source is latency-bound
  // (SourcePacer::depth); `threads` is the least.
  uint32_t max_depth = 32;
  // How far ahead of the reader (files) readahead may go in an ordered pattern
  // (published, replay, sequential). Within it, the window follows the reader's rate:
  // about one second of its consumption, at least 16 files.
  uint32_t lookahead = 256;
  uint64_t ram_budget = 1ull << 30;  // the RAM tier's budget (the policy's WouldAdmit)
  uint32_t chunk_size = 1u << 20;    // the cache's chunk size
  // The most source reads (chunks) and bytes per second readahead may use; 0: no limit.
  // Demand reads are never limited.
  uint64_t source_reads_per_s = 0;
  uint64_t source_bytes_per_s = 0;
  // Paces readahead's source reads so that demand reads do not queue behind them
  // (source_pacer.h); null: no pacing. Give the cache the same pacer as its
  // CacheOptions::demand_observer: late demand reads are its signal. Not applied
  // while a plan is followed (readahead then reads exactly what is read next).
  std::shared_ptr<SourcePacer> pacer;
  // Turns readahead off (nothing in flight) while the readers are no faster with it
  // than without it, probing now and then (readahead_gate.h); null: always on. The
  // prefetcher feeds it every first access of an epoch.
  std::shared_ptr<ReadaheadGate> gate;
  // The most memory the per-file tables may take (kBytesPerKnownFile plus the path, per
  // file); 0: no bound. Files first seen beyond it are served but not tracked: no
  // readahead, no epoch bookkeeping for them (counted in files_untracked, logged once).
  uint64_t file_table_bytes = 0;
  // The SSD tier's budget (0: no SSD tier). With one, a plan's entries beyond the window
  // that no tier holds (a next epoch's shard this node has never read) are read from the
  // source into it while readahead has nothing nearer to do, as long as the tier has
  // room (below 90% of this): the source is then busy while the reader hits the tiers,
  // not when it reaches them.
  uint64_t ssd_budget = 0;
  // Files readahead brings into RAM are offered to the kernel's page cache once a
  // KernelPages is attached (AttachKernelPages).
  bool push_to_kernel = false;
  // Where the file list and the last epoch's order are kept across restarts (rewritten
  // at each epoch boundary, loaded at Create); empty: nothing is kept.
  std::filesystem::path record_path;
};

struct PrefetcherStats {
  Pattern pattern = Pattern::kUnknown;
  uint64_t epoch = 0;             // epochs started since mount (0 = the first)
  uint64_t epoch_accesses = 0;    // files accessed in the current epoch
  uint64_t prefetched = 0;        // files prefetched with at least one chunk now in RAM
  uint64_t prefetch_hits = 0;     // accesses to files that readahead had brought in
  uint64_t prefetch_overtaken = 0;  // accesses to files readahead had taken, not yet brought
  std::string readahead_gate = "on";  // GateStateName (no gate: "on")
  uint64_t readahead_gate_offs = 0;   // times a probe found readahead did not pay
  uint64_t prefetch_refused = 0;  // candidates skipped: the RAM policy would refuse them
  uint64_t prefetch_in_kernel = 0;  // candidates skipped: the kernel's page cache holds them
  uint64_t prefetch_filled = 0;   // plan entries beyond the window read into the SSD tier
  uint64_t prefetch_errors = 0;   // candidates that could not be opened or read
  uint64_t prefetch_source_reads = 0;  // chunks readahead read from the source
  uint64_t budget_wait_ms = 0;    // time readahead workers waited for the source budget
  double pace_reads_per_s = 0;    // the pacer's current rate (0: not pacing)
  uint64_t pace_slowdowns = 0;    // times the pacer saw reads queue and slowed down
  uint64_t source_base_latency_us = 0;  // the lowest recent readahead source read
  uint32_t source_depth = 0;      // source reads readahead may have in flight now
  uint64_t plans_published = 0;
  uint64_t plans = 0;             // live plans (publishers) merged into the current one
  uint64_t plan_entries = 0;      // entries of the current plan (all publishers')
  uint64_t plan_position = 0;     // furthest plan entry read so far
  uint32_t readahead_window = 0;  // files ahead of the reader, ordered patterns (see lookahead)
  double access_rate = 0;         // files first read per second, smoothed
  // XXH3-64 of the current plan's paths, each followed by '\n', in plan order (0: no
  // plan): lets a publisher check that the mount got exactly the order it sent.
  uint64_t plan_fingerprint = 0;
  uint64_t files_known = 0;      // files in the tables (see PrefetcherOptions::file_table_bytes)
  uint64_t file_table_bytes = 0;  // what they are charged
  uint64_t files_untracked = 0;  // first reads of files the full tables did not take

  // Names each counter for the stats snapshot (base/counters.h); none is exported to
  // Prometheus.
  void VisitCounters(const CounterVisitor& visit) const;
};

// The fingerprint of a list of paths, as PrefetcherStats::plan_fingerprint computes it.
uint64_t PlanFingerprint(const std::vector<std::string>& paths);

class Prefetcher {
 public:
  // Readahead opens, identifies and lists files through `source` (by their paths
  // relative to the mount root) and reads them into `cache`; both must outlive the
  // prefetcher. A null `cache` tracks and ranks only (no workers). `policy` must be the
  // one plugged into the cache's CacheOptions::ram_policy_override (see NewPolicy).
  static std::unique_ptr<Prefetcher> Create(PrefetcherOptions options,
                                            const SourceTree& source, cache::Cache* cache,
                                            std::shared_ptr<cache::EvictionPolicy> policy);

  // The epoch-aware RAM policy to give the cache before it is opened.
  static std::shared_ptr<cache::EvictionPolicy> NewPolicy(uint64_t ram_budget);

  virtual ~Prefetcher() = default;

  // A demand read reached the daemon. `path` is the file's path relative to the mount
  // (may be empty when unknown; only needed for offset-0 reads). Call before the cache
  // read. (Demand-first needs no call after it: the cache counts its demand fills.)
  virtual void OnRead(const FileKey& file, const std::string& path, uint64_t offset) = 0;

  // Files opened, seen together (the access watcher's fanotify batch): each as an
  // OnRead at offset 0, under one lock and with one wake-up of the readahead. A wake-up
  // per open cost a warm epoch (every file in the page cache, no request to the daemon)
  // much of its speed (docs/benchmarks.md, "Figures behind design choices").
  struct Opened {
    FileKey file;
    std::string path;
  };
  virtual void OnOpens(const std::vector<Opened>& opens) = 0;

  // Whether opens reach OnOpens: false while the access watcher does not watch them
  // (kernel_cache/access_watcher.h), true once it watches again. An epoch whose opens
  // went unseen lacks files, and may never cover the longest epoch, by which a repeat
  // tells a new epoch from a re-read: its end is then also the first repeat of a file
  // seen after the opens went unseen (and not just before the repeat: a file opened
  // twice). A file seen before may be one this epoch read while it went unseen.
  virtual void SetOpensSeen(bool seen) = 0;

  // Regular files a reader listed (READDIRPLUS), not read yet. A shuffled epoch's
  // remaining set is every file known and not read this epoch; without these, the
  // first epoch's was empty, and a latency-bound source served each file to the
  // reader one round trip at a time. A reader lists what it means to read
  // (torchvision's DatasetFolder lists its root when it is made).
  virtual void OnListed(const std::vector<Opened>& files) = 0;

  // Replaces the plan and starts a new epoch with it (an empty plan drops it).
  void Publish(std::vector<PlannedFile> plan) {
    const uint32_t plans = plan.empty() ? 0 : 1;
    Publish(std::move(plan), /*new_epoch=*/true, plans);
  }
  // The same for a plan merged from `plans` publishers' (fs/plan_file.h): `new_epoch`
  // false when one publisher's plan joined or left the others mid-epoch (what was read
  // this epoch stays read).
  virtual void Publish(std::vector<PlannedFile> plan, bool new_epoch, uint32_t plans) = 0;

  // From now on, files readahead brings into RAM are offered to `pages` (null: no more),
  // which pushes them into the kernel's page cache when it can (kernel_pages.h). Set back
  // to null before `pages` goes away (an offer already running finishes on its own).
  virtual void AttachKernelPages(KernelPages* pages) = 0;

  // The paths of every file known so far (those the epoch record remembered at
  // creation, then those read since), in no particular order. The metadata warm-up
  // takes them at mount instead of parsing the record a second time.
  virtual std::vector<std::string> KnownPaths() const = 0;

  virtual PrefetcherStats Stats() const = 0;
  // The current epoch's number (PrefetcherStats::epoch) without the prefetcher's lock:
  // cheap enough to ask at every batch of opens.
  virtual uint64_t Epoch() const = 0;
  // Whether a published plan orders the current epoch and readahead is bringing its
  // files: their opens are then left to it (fs/passthrough.h). Not without readahead
  // threads (--prefetch 0), nor once the gate has stopped readahead (readahead_gate.h):
  // nothing brings them then, and the gate's next try compares the readers' rate with
  // readahead against their rate without it, which is passthrough's where the mount has
  // it. Without the prefetcher's lock.
  virtual bool PlanLeftToReadahead() const = 0;
};

}  // namespace epochfs::prefetch
