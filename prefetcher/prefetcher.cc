// The Prefetcher (see prefetcher.h for the algorithm).
#include "prefetcher/prefetcher.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "base/log_limit.h"
#include "base/thread_annotations.h"
#include "base/thread_name.h"
#include "prefetcher/classifier.h"
#include "prefetcher/epoch_policy.h"
#include "prefetcher/epoch_record.h"
#include "prefetcher/read_budget.h"
#include "prefetcher/source_pacer.h"

namespace epochfs::prefetch {
namespace {

// XXH3-64 of each path followed by '\n', streamed (a plan can hold millions of paths).
template <typename Range, typename PathOf>
uint64_t Fingerprint(const Range& items, PathOf path_of) {
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  for (const auto& item : items) {
    const std::string& path = path_of(item);
    XXH3_64bits_update(state, path.data(), path.size());
    XXH3_64bits_update(state, "\n", 1);
  }
  const uint64_t digest = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return digest;
}

// An access to a file already accessed starts a new epoch once this much of the
// longest of the last kEpochsRemembered epochs has been covered (less would be a re-read
// inside one epoch). The longest, not the last: readers a pass apart (DataLoader workers
// across an epoch's end, or independent readers) cut an epoch short with a repeat, and
// measured against the short one the next was cut shorter still (docs/benchmarks.md,
// "Pushing into the page cache", "Warm epochs, what was done about it").
constexpr double kEpochCoverage = 0.9;
constexpr size_t kEpochsRemembered = 4;
// In the first epoch there is no previous one: a repeat after this many accesses.
constexpr size_t kFirstEpochMinAccesses = 16;
// How long a worker lets demand reads go first before it issues its prefetch anyway.
constexpr auto kDemandGrace = std::chrono::milliseconds(5);
constexpr auto kIdleWait = std::chrono::milliseconds(20);
// How long a worker with nothing to do sleeps when only a notification can bring work
// (an access, a plan, a deeper source queue). Polling at kIdleWait, the many workers of
// a paced mount woke thousands of times a second, a large share of the daemon's CPU in
// a warm epoch (docs/benchmarks.md, "Figures behind design choices").
constexpr auto kQuietWait = std::chrono::seconds(1);
// The epoch record is rewritten at most this often when no new file was seen.
constexpr auto kRecordPeriod = std::chrono::seconds(30);
// The ordered patterns' readahead window: this much of the reader's consumption, at
// least kMinWindow files (and at most PrefetcherOptions::lookahead). The rate is
// re-measured every kRatePeriod and smoothed.
constexpr double kLeadSeconds = 1.0;
constexpr uint32_t kMinWindow = 16;
// A replayed last epoch predicts a replay while this epoch's reads lie within this many
// files of the start of its order beyond the reads so far (several readers interleave
// slices of one order, as the classifier's window allows).
constexpr uint64_t kReplayPredictionSlack = 64;
// Times the RAM tier is ranked by a replay in one epoch (RankByReplayLocked).
constexpr uint32_t kMaxReplayRankings = 2;
// What a batch of readahead takes from being taken to being pushed (stats, a pack read,
// checksums, stores): the files the reader reads in that time are left to it when
// readahead is behind (NextInOrderLocked).
constexpr double kConcedeSeconds = 0.005;
constexpr auto kRatePeriod = std::chrono::milliseconds(250);
// Files a worker takes at once to stream from the SSD tier: about 7 MB of 110 KB
// samples, i.e. two 4 MiB runs when they lie together in a pack.
constexpr size_t kStreamBatch = 64;
// Following a plan, readahead is at most a second ahead of the reader, which may reach a
// file of a batch in flight and wait for the whole batch: smaller batches, which made a
// cold GlusterFS epoch faster (docs/benchmarks.md, "Figures behind design choices").
constexpr size_t kPlanStreamBatch = 8;
// A worker streams once the RAM policy has room for this many files: a reader freeing
// one place at a time would otherwise turn streaming into one small read per file.
constexpr uint32_t kMinStreamBatch = 16;

// Fills: how many plan entries one look may pass over, how often the SSD tier's room is
// read, and how full the tier may get from them.
constexpr size_t kFillScan = 256;
constexpr auto kSsdRoomPeriod = std::chrono::milliseconds(250);
constexpr double kSsdFillFraction = 0.9;

// A plan entry the full file table did not take (PrefetcherOptions::file_table_bytes).
constexpr uint32_t kUntracked = UINT32_MAX;

struct Candidate {
  std::string path;
  std::optional<FileKey> key;
  // A plan entry beyond the window, read from the source into the SSD tier (not RAM's
  // concern, not pushed): PrefetcherOptions::ssd_budget.
  bool fill = false;
};

class PrefetcherImpl final : public Prefetcher {
 public:
  PrefetcherImpl(PrefetcherOptions options, const SourceTree& source, cache::Cache* cache,
                 std::shared_ptr<EpochPolicy> policy)
      : options_(std::move(options)),
        source_(source),
        cache_(cache),
        policy_(std::move(policy)),
        budget_(static_cast<double>(options_.source_reads_per_s), options_.source_bytes_per_s),
        pace_(options_.pacer ? options_.pacer->rate() : 0, 0) {
    if (!options_.record_path.empty()) LoadRecord();
    if (cache_ != nullptr) {
      // Beyond `threads`, workers that only read files one at a time, each active while
      // the pacer's depth reaches it (source_pacer.h: a latency-bound source).
      const uint32_t workers = options_.pacer && options_.threads > 0
                                   ? std::max(options_.threads, options_.max_depth)
                                   : options_.threads;
      for (uint32_t i = 0; i < workers; ++i) workers_.emplace_back([this, i] { Work(i); });
    }
  }

  ~PrefetcherImpl() override {
    {
      MutexLock lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
    // At unmount: keep the files seen so far too (the last complete epoch's order stays
    // the recorded one), so the next mount can prefetch unread files from the start.
    MutexLock lock(mu_);
    if (!options_.record_path.empty() && catalog_.size() >= kFirstEpochMinAccesses) {
      // The epoch in progress counts as the last one once it is as long: with the page
      // cache serving later epochs, the daemon may never see a second epoch begin.
      if (order_.size() >= previous_order_.size()) {
        previous_pattern_ = PatternLocked();
        previous_order_ = std::move(order_);
      }
      SaveRecordLocked();
    }
  }

  void OnRead(const FileKey& file, const std::string& path, uint64_t offset) override;
  void OnOpens(const std::vector<Opened>& opens) override;
  void OnListed(const std::vector<Opened>& files) override;
  void SetOpensSeen(bool seen) override;
  void Publish(std::vector<PlannedFile> plan, bool new_epoch, uint32_t plans) override;
  void AttachKernelPages(KernelPages* pages) override { kernel_pages_.store(pages); }
  std::vector<std::string> KnownPaths() const override;
  PrefetcherStats Stats() const override;
  uint64_t Epoch() const override;
  bool PlanLeftToReadahead() const override {
    return has_plan_.load(std::memory_order_relaxed) && options_.threads > 0 &&
           (!options_.gate || options_.gate->Runs());
  }

 private:
  Pattern PatternLocked() const REQUIRES(mu_) {
    if (!plan_.empty()) return Pattern::kPublished;
    const Pattern pattern = classifier_.pattern();
    // Until the classifier has seen enough of this epoch, the last epoch's pattern
    // predicts it: readahead starts at once instead of bursting once it is sure (or, for
    // a replay, leaving the epoch's first files to demand reads). A replay only while
    // this epoch's reads stay near the start of the last epoch's order: the first reads
    // of a shuffle jump far into it.
    if (pattern == Pattern::kUnknown) {
      if (previous_pattern_ == Pattern::kShuffled) return Pattern::kShuffled;
      if (previous_pattern_ == Pattern::kReplay &&
          replay_cursor_ < classifier_.accesses() + kReplayPredictionSlack) {
        return Pattern::kReplay;
      }
    }
    return pattern;
  }
  void NewEpochLocked() REQUIRES(mu_);
  // While this epoch replays the last one, the RAM tier's policy ranks files by when
  // they are read next, in this epoch or the next (the last epoch's order, repeating),
  // as for a published plan. Without that, the files read this epoch go first, oldest read
  // first: the tier ends each epoch holding that epoch's last files, a replay reads
  // them last, so no room frees for readahead until then, and the tier acts as a static
  // set (docs/benchmarks.md, "A replay the classifier missed").
  void RankByReplayLocked() REQUIRES(mu_);
  // The file's catalog index, adding it if new and the tables have room (nullopt: full).
  std::optional<uint32_t> CatalogIndexLocked(const FileKey& file, const std::string& path)
      REQUIRES(mu_);
  // Whether an access to `file`, read already this epoch, starts the next epoch: once
  // the epoch covered kEpochCoverage of the longest, or after unseen opens at a repeat
  // of a file seen since (SetOpensSeen).
  bool RepeatEndsEpochLocked(const FileKey& file) const REQUIRES(mu_);
  std::optional<Candidate> NextLocked() REQUIRES(mu_);
  std::optional<Candidate> NextInOrderLocked(const std::vector<uint32_t>& order, size_t* next,
                                             size_t cursor) REQUIRES(mu_);
  // The next plan entry beyond the window that no tier holds (ssd_budget).
  std::optional<Candidate> NextFillLocked() REQUIRES(mu_);
  // Whether the SSD tier has room for fills (checked at most every kSsdRoomPeriod).
  bool SsdHasRoom();
  std::optional<Candidate> NextSequentialLocked() REQUIRES(mu_);
  std::optional<Candidate> NextShuffledLocked() REQUIRES(mu_);
  // Sort the catalog by SSD position for this epoch's remaining-set readahead, in
  // three steps so that one worker can drop mu_ around the index lookups (ordering_
  // keeps the others from starting too): Begin marks the sort under way and returns the
  // keys to look up, PackOrder looks them up, End installs the order unless a new epoch
  // began meanwhile. (Thread-safety analysis cannot follow a lock dropped through a
  // MutexLock& parameter, hence the split.)
  std::vector<FileKey> BeginPackOrderLocked(uint64_t* epoch) REQUIRES(mu_);
  struct PackOrdered {
    std::vector<uint32_t> order;  // catalog indices, by SSD position
    std::vector<uint32_t> held;   // those the kernel holds whole (not looked up)
  };
  PackOrdered PackOrder(const std::vector<FileKey>& keys) const EXCLUDES(mu_);
  void EndPackOrderLocked(uint64_t epoch, PackOrdered ordered) REQUIRES(mu_);
  void WaitForBudgetLocked(MutexLock& lock) REQUIRES(mu_);
  uint32_t WindowLocked() const REQUIRES(mu_) {
    if (access_rate_ <= 0) return options_.lookahead;  // not measured yet
    const double files = std::ceil(access_rate_ * kLeadSeconds);
    return static_cast<uint32_t>(std::clamp<double>(
        files, std::min(kMinWindow, options_.lookahead), options_.lookahead));
  }
  void CountAccessLocked() REQUIRES(mu_);
  // Whether waking a worker for an access may find it something to do. Not in a
  // shuffled epoch whose remaining set is used up (a warm epoch: every file read, read
  // ahead or held by the kernel): only a new epoch or a file never seen brings work.
  // Waking the workers for each batch of opens anyway only spent context switches, on
  // the 2 cores the readers need.
  // Whether an access should wake a worker: a wake-up per open costs a warm epoch (the
  // kernel holds everything, nothing is left to read ahead) much of its speed on 2
  // cores. For an ordered pattern the window past the reader is looked at here, passing
  // over what the kernel holds as a worker would (on GlusterFS, where every open is an
  // OPEN, warm epochs with a published plan were slower than without one until then:
  // docs/benchmarks.md, "Figures behind design choices").
  bool MayHaveWorkLocked() REQUIRES(mu_) {
    if (!GateAllowsLocked()) return false;  // an access that reopens it wakes them all
    switch (PatternLocked()) {
      case Pattern::kShuffled:
        return !(pack_order_epoch_ == epoch_ && shuffled_next_ >= catalog_.size());
      case Pattern::kPublished:
        return FirstToFetchLocked(plan_order_, &plan_next_, plan_cursor_).has_value();
      case Pattern::kReplay:
        return FirstToFetchLocked(previous_order_, &replay_next_, replay_cursor_).has_value();
      case Pattern::kSequential:
      case Pattern::kUnknown:
        break;
    }
    return true;
  }
  // The position in `order` of the first file in the window past `cursor` that
  // readahead would still fetch, if any, passing over (for good) what the kernel holds.
  // Advances *next past the handled files before the window.
  std::optional<size_t> FirstToFetchLocked(const std::vector<uint32_t>& order, size_t* next,
                                           size_t cursor) REQUIRES(mu_);
  // Records a file's first read this epoch (starting the next epoch where it is read
  // again after most of this one); false if there is nothing new for the readahead.
  bool RecordAccessLocked(const FileKey& file, const std::string& path) REQUIRES(mu_);
  bool HandledLocked(const FileKey& key) const REQUIRES(mu_) {
    return accessed_.Contains(key) || prefetched_.count(key) != 0;
  }
  // Whether the kernel's page cache holds the whole file already (a warm epoch): then
  // it is handled for this epoch, and counted. Readahead would otherwise stat it on the
  // source, and push bytes the kernel has, for every file of every warm epoch, which
  // held warm epochs well below tmpfs (docs/benchmarks.md, "Figures behind design
  // choices").
  bool InKernelLocked(const FileKey& key) REQUIRES(mu_) {
    KernelPages* pages = kernel_pages_.load();
    if (pages == nullptr || !pages->HoldsWhole(key.dev, key.ino)) return false;
    PassOverLocked(key);
    return true;
  }
  // Handles a file the kernel holds whole for this epoch, without reading it ahead.
  void PassOverLocked(const FileKey& key) REQUIRES(mu_) {
    if (prefetched_.insert(key).second) ++prefetch_in_kernel_;
  }
  // InKernelLocked for a candidate picked by path (a sequential guess), whose file is
  // known only once it was looked up on the source.
  bool PassedOverNow(const FileKey& key) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return InKernelLocked(key);
  }
  // Whether the policy would refuse `key` once the prefetches in flight have landed
  // (each takes one place): fetching it now would only waste source IO.
  bool RefusedLocked(const FileKey& key, uint64_t /*bytes*/) REQUIRES(mu_) {
    if (!policy_ || policy_->Displaceable(key, inflight_ + 1) > inflight_) return false;
    ++prefetch_refused_;
    return true;
  }
  void Work(uint32_t index);
  // Source reads readahead may have in flight now.
  uint32_t DepthLocked() const REQUIRES(mu_) {
    const uint32_t depth =
        options_.pacer ? std::max(options_.threads, options_.pacer->depth()) : options_.threads;
    return options_.gate ? options_.gate->Depth(depth) : depth;
  }
  // Whether readahead may take new work (readahead_gate.h).
  bool GateAllowsLocked() const REQUIRES(mu_) { return !options_.gate || options_.gate->Allows(); }
  // The gate closed: the files queued for the source are left to the readers.
  void DropSourceQueueLocked() REQUIRES(mu_) {
    for (const Candidate& c : source_queue_) {
      if (c.key) taken_.erase(*c.key);
    }
    inflight_ -= static_cast<uint32_t>(source_queue_.size());
    source_queue_.clear();
  }
  // Whether the RAM policy has room for kMinStreamBatch more unread files (free room or
  // files already read this epoch to evict), beyond those in flight. A plan's next files
  // (or a replay's) are checked one by one instead (RefusedLocked): files read this
  // epoch but planned again (the next epoch's) rank above an unplanned file, and would
  // always say no.
  bool RoomForStreamLocked() const REQUIRES(mu_) {
    if (!policy_ || PatternLocked() == Pattern::kPublished || replay_ranked_) return true;
    const uint32_t want = inflight_ + kMinStreamBatch;
    return policy_->Displaceable(FileKey{}, want) >= want;  // an unread file, no plan
  }
  // Takes up to `max` candidates (each counted in flight). Returns with `lock` held.
  std::vector<Candidate> TakeBatchLocked(size_t max) REQUIRES(mu_);
  // Streams what the SSD tier holds of `batch` into RAM; returns the rest.
  std::vector<Candidate> StreamBatch(std::vector<Candidate> batch);
  void Fetch(const Candidate& candidate);
  // Offers a file readahead just brought into RAM to the kernel's page cache, if a
  // KernelPages is attached and the reader has not read it yet.
  void PushToKernel(const cache::SourceIdentity& id) EXCLUDES(mu_);
  void WaitForDemandReads() const;
  void LoadRecord();
  void SaveRecordLocked() REQUIRES(mu_);

  const PrefetcherOptions options_;
  const SourceTree& source_;
  cache::Cache* const cache_;
  const std::shared_ptr<EpochPolicy> policy_;  // may be null (no feedback to the tier)
  ReadBudget budget_;  // the user's ceiling (PrefetcherOptions::source_*_per_s)
  ReadBudget pace_;    // the pacer's rate, followed while the pattern is speculative

  mutable Mutex mu_;  // lock order: mu_, then the policy's lock
  std::condition_variable cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  Classifier classifier_ GUARDED_BY(mu_);
  Pattern previous_pattern_ GUARDED_BY(mu_) = Pattern::kUnknown;  // the last epoch's, at its end
  // The policy ranks by the last epoch's order (RankByReplayLocked), set so often this
  // epoch; at most kMaxReplayRankings (each setting ranks every file anew, and a
  // verdict on the edge would flap).
  bool replay_ranked_ GUARDED_BY(mu_) = false;
  uint32_t replay_rankings_ GUARDED_BY(mu_) = 0;
  uint64_t epoch_ GUARDED_BY(mu_) = 0;
  std::atomic<uint64_t> epoch_now_{0};  // epoch_, for Epoch()
  std::atomic<bool> has_plan_{false};    // !plan_.empty(), for PlanLeftToReadahead()
  // Every file seen, in first-seen order (for the first epoch: the SSD tier's write
  // order). Orders refer to it by index.
  std::vector<std::pair<FileKey, std::string>> catalog_ GUARDED_BY(mu_);
  std::unordered_map<FileKey, uint32_t, FileKeyHash> catalog_index_ GUARDED_BY(mu_);
  // This and the last epoch's accesses.
  std::vector<uint32_t> order_ GUARDED_BY(mu_);
  std::vector<uint32_t> previous_order_ GUARDED_BY(mu_);
  std::deque<size_t> epoch_lengths_ GUARDED_BY(mu_);  // the last kEpochsRemembered epochs' accesses
  // The last epoch's files by place in its order (shared with the classifier and the
  // RAM policy), and this epoch's so far: the files read this epoch, in the order of
  // order_.
  std::shared_ptr<const OrderIndex> previous_ GUARDED_BY(mu_) = std::make_shared<const OrderIndex>();
  OrderIndex accessed_ GUARDED_BY(mu_);
  // Opens go unseen now (SetOpensSeen), and the place in accessed_ from which this
  // epoch's accesses followed unseen ones (nullopt: none went unseen this epoch).
  bool opens_unseen_ GUARDED_BY(mu_) = false;
  std::optional<size_t> unseen_since_ GUARDED_BY(mu_);
  // The index previous_ held before the last NewEpochLocked, for its caller to free
  // outside mu_: freeing a large one holds the lock up (docs/benchmarks.md, "The epoch
  // boundary at a million files").
  std::shared_ptr<const OrderIndex> retired_ GUARDED_BY(mu_);
  std::unordered_set<FileKey, FileKeyHash> prefetched_ GUARDED_BY(mu_);  // issued this epoch
  // Issued this epoch (sequential).
  std::unordered_set<std::string> prefetched_paths_ GUARDED_BY(mu_);
  // Prefetched, in RAM, not yet read.
  std::unordered_set<FileKey, FileKeyHash> landed_ GUARDED_BY(mu_);
  // Taken by a worker this epoch, not landed yet: a reader's access to one overtook
  // readahead (the gate's signal).
  std::unordered_set<FileKey, FileKeyHash> taken_ GUARDED_BY(mu_);
  uint64_t prefetch_overtaken_ GUARDED_BY(mu_) = 0;
  std::vector<PlannedFile> plan_ GUARDED_BY(mu_);
  std::unordered_map<FileKey, uint32_t, FileKeyHash> plan_index_ GUARDED_BY(mu_);
  std::vector<uint32_t> plan_order_ GUARDED_BY(mu_);  // plan as catalog indices
  size_t plan_next_ GUARDED_BY(mu_) = 0;
  size_t plan_cursor_ GUARDED_BY(mu_) = 0;
  size_t replay_next_ GUARDED_BY(mu_) = 0;
  size_t replay_cursor_ GUARDED_BY(mu_) = 0;
  // The shuffled pattern's readahead order: catalog indices sorted by SSD position,
  // valid for epoch `pack_order_epoch_`; catalog entries past its size follow in
  // first-seen order. shuffled_next_ is a position in that sequence.
  std::vector<uint32_t> pack_order_ GUARDED_BY(mu_);
  uint64_t pack_order_epoch_ GUARDED_BY(mu_) = UINT64_MAX;
  bool ordering_ GUARDED_BY(mu_) = false;  // a worker is computing pack_order_
  size_t shuffled_next_ GUARDED_BY(mu_) = 0;
  std::string last_path_ GUARDED_BY(mu_);
  double access_rate_ GUARDED_BY(mu_) = 0;  // files/s, smoothed; 0: not measured yet
  uint64_t rate_count_ GUARDED_BY(mu_) = 0;
  std::chrono::steady_clock::time_point rate_since_ GUARDED_BY(mu_) =
      std::chrono::steady_clock::now();
  std::string listed_dir_ GUARDED_BY(mu_);
  std::vector<std::string> listed_names_ GUARDED_BY(mu_);  // of listed_dir_, sorted
  uint32_t inflight_ GUARDED_BY(mu_) = 0;  // candidates handed to workers and not finished
  // Candidates of streamed batches that the SSD tier lacked, to read from the source
  // (counted in inflight_).
  std::deque<Candidate> source_queue_ GUARDED_BY(mu_);
  uint32_t source_inflight_ GUARDED_BY(mu_) = 0;  // Fetch() calls reading now (DepthLocked)
  uint32_t notified_depth_ GUARDED_BY(mu_) = 0;  // DepthLocked() when workers last heard it
  bool save_failed_ GUARDED_BY(mu_) = false;  // warned once
  size_t record_saved_files_ GUARDED_BY(mu_) = SIZE_MAX;  // catalog_.size() then
  std::chrono::steady_clock::time_point record_saved_at_ GUARDED_BY(mu_){};
  uint64_t prefetched_count_ GUARDED_BY(mu_) = 0;
  uint64_t prefetch_hits_ GUARDED_BY(mu_) = 0;
  uint64_t prefetch_refused_ GUARDED_BY(mu_) = 0;
  uint64_t prefetch_in_kernel_ GUARDED_BY(mu_) = 0;
  uint64_t prefetch_filled_ GUARDED_BY(mu_) = 0;
  size_t fill_next_ GUARDED_BY(mu_) = 0;  // plan entries before it are handled or in the window
  std::unordered_set<FileKey, FileKeyHash> filled_ GUARDED_BY(mu_);  // issued this epoch
  std::atomic<bool> ssd_room_{true};
  std::atomic<int64_t> ssd_room_checked_ns_{0};
  uint64_t prefetch_errors_ GUARDED_BY(mu_) = 0;
  uint64_t plans_published_ GUARDED_BY(mu_) = 0;
  uint32_t plans_ GUARDED_BY(mu_) = 0;  // publishers merged into plan_
  uint64_t prefetch_source_reads_ GUARDED_BY(mu_) = 0;
  std::chrono::steady_clock::duration budget_wait_ GUARDED_BY(mu_){};
  uint64_t plan_fingerprint_ GUARDED_BY(mu_) = 0;
  // Any local user may publish (with --allow-other): a few lines a minute at most.
  LogLimiter publications_logged_{5, std::chrono::minutes(1)};
  uint64_t file_table_bytes_ GUARDED_BY(mu_) = 0;  // charged for catalog_
  uint64_t files_untracked_ GUARDED_BY(mu_) = 0;

  std::atomic<KernelPages*> kernel_pages_{nullptr};  // AttachKernelPages
  std::vector<std::thread> workers_;
};

std::optional<uint32_t> PrefetcherImpl::CatalogIndexLocked(const FileKey& file,
                                                           const std::string& path) {
  if (auto it = catalog_index_.find(file); it != catalog_index_.end()) {
    std::string& known = catalog_[it->second].second;
    if (!path.empty() && known != path) {
      file_table_bytes_ = file_table_bytes_ - known.size() + path.size();
      known = path;  // renamed, or first seen without a path
    }
    return it->second;
  }
  const uint64_t cost = kBytesPerKnownFile + path.size();
  if (options_.file_table_bytes != 0 && file_table_bytes_ + cost > options_.file_table_bytes) {
    ++files_untracked_;
    if (files_untracked_ == 1) {
      spdlog::warn("prefetch: the file table is full ({} files in {} MiB, an eighth of --ram); "
                   "files first read from now on are served but not read ahead",
                   catalog_.size(), options_.file_table_bytes >> 20);
    }
    return std::nullopt;
  }
  file_table_bytes_ += cost;
  const auto index = static_cast<uint32_t>(catalog_.size());
  catalog_index_.emplace(file, index);
  catalog_.emplace_back(file, path);
  return index;
}

void PrefetcherImpl::LoadRecord() {
  // A record of files the tables could hold is text of about a line of 20-40 bytes plus
  // the path per file, and an order line per file: well below twice what the tables are
  // charged. A bigger one was written under a larger --ram, or is damaged (a huge one
  // sent the RSS far past --ram at mount: docs/benchmarks.md, "Figures behind design
  // choices"): parsing it whole would break the bound.
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(options_.record_path, ec);
  if (!ec && options_.file_table_bytes != 0 && size > 2 * options_.file_table_bytes + (1u << 20)) {
    spdlog::warn("prefetch: ignoring {} ({} MiB, more than the file table's {} MiB allows); a "
                 "restart starts without the last epoch's order",
                 options_.record_path.string(), size >> 20, options_.file_table_bytes >> 20);
    return;
  }
  auto record = LoadEpochRecord(options_.record_path);
  if (!record.ok()) {
    if (record.status().code() != Code::kNotFound) {
      spdlog::warn("prefetch: ignoring {}", record.status().ToString());
    }
    return;
  }
  MutexLock lock(mu_);
  for (auto& [key, path] : record->files) {
    if (!CatalogIndexLocked(key, path)) break;  // the rest would not fit either
  }
  files_untracked_ = 0;  // a smaller --ram than the record's: no reads went untracked
  order_.clear();
  for (uint32_t i : record->order) {
    auto it = catalog_index_.find(record->files[i].first);
    if (it != catalog_index_.end() && accessed_.Append(it->first)) order_.push_back(it->second);
  }
  NewEpochLocked();  // the recorded order becomes the previous epoch
  epoch_ = 0;
  epoch_now_.store(0, std::memory_order_relaxed);
  // A published plan does not survive a restart; until a new one comes, the rest of the
  // epoch is what a shuffled reader reads.
  previous_pattern_ =
      record->pattern == Pattern::kPublished ? Pattern::kShuffled : record->pattern;
  spdlog::info("prefetch: {} files and an epoch of {} remembered from {}", catalog_.size(),
               previous_order_.size(), options_.record_path.string());
}

std::vector<std::string> PrefetcherImpl::KnownPaths() const {
  MutexLock lock(mu_);
  std::vector<std::string> paths;
  paths.reserve(catalog_.size());
  for (const auto& [key, path] : catalog_) {
    if (!path.empty()) paths.push_back(path);
  }
  return paths;
}

void PrefetcherImpl::SaveRecordLocked() {
  // Rewritten whole: O(files), a few ms for 100k files.
  record_saved_files_ = catalog_.size();
  record_saved_at_ = std::chrono::steady_clock::now();
  EpochRecord record;
  record.files = catalog_;
  record.order = previous_order_;
  record.pattern = previous_pattern_;
  Status st = SaveEpochRecord(options_.record_path, record);
  if (!st.ok() && !save_failed_) {
    spdlog::warn("prefetch: cannot record the epoch order ({}); a restart forgets it",
                 st.ToString());
    save_failed_ = true;
  }
}

void PrefetcherImpl::NewEpochLocked() {
  previous_pattern_ = PatternLocked();
  previous_order_ = std::move(order_);
  if (!previous_order_.empty()) {
    if (epoch_lengths_.size() == kEpochsRemembered) epoch_lengths_.pop_front();
    epoch_lengths_.push_back(previous_order_.size());
  }
  // At an epoch's end, when files were seen that the record lacks (what a restart
  // streams), else at most every kRecordPeriod (the order; the unmount saves it too):
  // rewriting it at every epoch was a large share of the access watcher's work when the
  // page cache held the data set, an epoch every fraction of a second
  // (docs/benchmarks.md, "Figures behind design choices").
  if (!options_.record_path.empty() && previous_order_.size() >= kFirstEpochMinAccesses &&
      (catalog_.size() != record_saved_files_ ||
       std::chrono::steady_clock::now() - record_saved_at_ >= kRecordPeriod)) {
    SaveRecordLocked();
  }
  order_.clear();
  unseen_since_ = opens_unseen_ ? std::optional<size_t>(0) : std::nullopt;
  // The epoch's files were indexed as they were read: handed on whole, not rebuilt. The
  // index before is freed by the caller once it has let go of mu_ (retired_).
  retired_ = std::move(previous_);
  previous_ = std::make_shared<const OrderIndex>(std::move(accessed_));
  accessed_ = OrderIndex();
  classifier_.NewEpoch(previous_);
  prefetched_.clear();
  prefetched_paths_.clear();
  landed_.clear();
  taken_.clear();
  plan_.clear();
  has_plan_.store(false, std::memory_order_relaxed);
  plan_index_.clear();
  plan_order_.clear();
  plan_next_ = plan_cursor_ = replay_next_ = replay_cursor_ = shuffled_next_ = fill_next_ = 0;
  filled_.clear();
  pack_order_.clear();
  inflight_ -= static_cast<uint32_t>(source_queue_.size());  // the old epoch's order
  source_queue_.clear();
  if (policy_) {
    policy_->SetPlan({});
    policy_->NewEpoch();
  }
  replay_ranked_ = false;
  replay_rankings_ = 0;
  if (options_.gate) options_.gate->OnNewEpoch();
  epoch_now_.store(++epoch_, std::memory_order_relaxed);
  RankByReplayLocked();  // a replay predicted from the last epoch's pattern
}

void PrefetcherImpl::RankByReplayLocked() {
  if (!policy_ || !plan_.empty()) return;  // a published plan ranks the tier
  // Ranked from the first sign of a replay (predicted or named). Until the classifier
  // has a verdict, a prediction that lapses keeps the ranking: with many workers it
  // flickers in an epoch's first reads. A verdict other than replay ends it.
  const bool replay = PatternLocked() == Pattern::kReplay ||
                      (replay_ranked_ && classifier_.pattern() == Pattern::kUnknown);
  if (replay == replay_ranked_) return;
  if (replay && replay_rankings_ == kMaxReplayRankings) return;
  replay_ranked_ = replay;
  if (replay) ++replay_rankings_;
  spdlog::debug("prefetch: epoch {} {} by the last epoch's order after {} accesses", epoch_,
                replay ? "ranks the RAM tier" : "no longer ranks the RAM tier",
                classifier_.accesses());
  policy_->RankByReplay(replay ? previous_ : nullptr);
}

void PrefetcherImpl::OnRead(const FileKey& file, const std::string& path, uint64_t offset) {
  if (offset != 0) return;
  std::shared_ptr<const OrderIndex> retired;  // freed after the lock (NewEpochLocked)
  {
    MutexLock lock(mu_);
    const bool recorded = RecordAccessLocked(file, path);
    retired = std::move(retired_);
    if (!recorded || !MayHaveWorkLocked()) return;
  }
  // One worker is enough to react to an access (room freed, a window moved); waking
  // them all on every file costs more CPU than the readahead saves.
  cv_.notify_one();
}

void PrefetcherImpl::OnOpens(const std::vector<Opened>& opens) {
  size_t recorded = 0;
  std::shared_ptr<const OrderIndex> retired;  // freed after the lock (NewEpochLocked)
  {
    MutexLock lock(mu_);
    for (const Opened& o : opens) recorded += RecordAccessLocked(o.file, o.path) ? 1 : 0;
    retired = std::move(retired_);
    if (!MayHaveWorkLocked()) return;
  }
  // One worker per access, as OnRead wakes, up to the base number of workers (the
  // pacer's extra ones join as its depth grows): one worker alone fetches one file at a
  // time, and a batch of accesses may be that much work at once.
  const size_t wake = std::min<size_t>(recorded, options_.threads);
  for (size_t i = 0; i < wake; ++i) cv_.notify_one();
}

void PrefetcherImpl::OnListed(const std::vector<Opened>& files) {
  {
    MutexLock lock(mu_);
    const size_t known = catalog_.size();
    for (const Opened& f : files) {
      if (!CatalogIndexLocked(f.file, f.path)) break;  // the tables are full
    }
    if (catalog_.size() == known || !MayHaveWorkLocked()) return;
  }
  cv_.notify_all();
}

void PrefetcherImpl::SetOpensSeen(bool seen) {
  MutexLock lock(mu_);
  opens_unseen_ = !seen;
  if (!seen && !unseen_since_) unseen_since_ = accessed_.size();
}

bool PrefetcherImpl::RepeatEndsEpochLocked(const FileKey& file) const {
  const size_t longest =
      epoch_lengths_.empty() ? 0 : *std::max_element(epoch_lengths_.begin(), epoch_lengths_.end());
  const size_t need = longest == 0 ? kFirstEpochMinAccesses
                                   : static_cast<size_t>(kEpochCoverage * static_cast<double>(longest));
  if (accessed_.size() >= std::max<size_t>(need, 1)) return true;
  if (!unseen_since_) return false;  // a re-read in this epoch
  const size_t at = *accessed_.Position(file);
  return at >= *unseen_since_ && accessed_.size() - at > kFirstEpochMinAccesses;
}

bool PrefetcherImpl::RecordAccessLocked(const FileKey& file, const std::string& path) {
  if (accessed_.Contains(file)) {
    if (!RepeatEndsEpochLocked(file)) return false;  // a re-read in this epoch
    spdlog::debug("prefetch: epoch {} ends after {} files ({}; replay score {:.2f}, sequential {:.2f})",
                  epoch_, accessed_.size(), PatternName(PatternLocked()),
                  classifier_.replay_score(), classifier_.sequential_score());
    NewEpochLocked();
  }
  const std::optional<uint32_t> known = CatalogIndexLocked(file, path);
  if (!known) return false;  // served, but the tables have no room to track it
  const uint32_t index = *known;
  accessed_.Append(file);
  CountAccessLocked();
  order_.push_back(index);
  classifier_.Access(file, catalog_[index].second);
  if (policy_) policy_->MarkRead(file);
  if (auto it = plan_index_.find(file); it != plan_index_.end()) {
    plan_cursor_ = std::max<size_t>(plan_cursor_, it->second);
  }
  if (const std::optional<uint32_t> place = previous_->Position(file)) {
    replay_cursor_ = std::max<size_t>(replay_cursor_, *place);
  }
  RankByReplayLocked();
  if (!catalog_[index].second.empty()) last_path_ = catalog_[index].second;
  ReadaheadGate::Access seen = ReadaheadGate::Access::kMiss;
  if (landed_.erase(file) != 0) {
    ++prefetch_hits_;
    seen = ReadaheadGate::Access::kHit;
  } else if (taken_.erase(file) != 0) {
    ++prefetch_overtaken_;
    seen = ReadaheadGate::Access::kOvertaken;
  }
  // Reopened: the workers sleep until told (MayHaveWorkLocked said no meanwhile).
  if (options_.gate && options_.gate->OnAccess(seen)) cv_.notify_all();
  return true;
}

void PrefetcherImpl::CountAccessLocked() {
  ++rate_count_;
  const auto now = std::chrono::steady_clock::now();
  const double seconds = std::chrono::duration<double>(now - rate_since_).count();
  if (seconds < std::chrono::duration<double>(kRatePeriod).count()) return;
  const double rate = static_cast<double>(rate_count_) / seconds;
  access_rate_ = access_rate_ <= 0 ? rate : 0.5 * access_rate_ + 0.5 * rate;
  rate_count_ = 0;
  rate_since_ = now;
}

void PrefetcherImpl::Publish(std::vector<PlannedFile> plan, bool new_epoch, uint32_t plans) {
  std::shared_ptr<const OrderIndex> retired;  // freed after the lock (NewEpochLocked)
  {
    MutexLock lock(mu_);
    if (new_epoch) {
      NewEpochLocked();
      retired = std::move(retired_);
    } else {
      // Another publisher's plan joined or left: the same epoch, a new merged order.
      plan_index_.clear();
      plan_order_.clear();
      plan_next_ = plan_cursor_ = fill_next_ = 0;
    }
    // A plan written (a new epoch, or one more publisher), not one dropped, counts.
    if (new_epoch || plans > plans_) ++plans_published_;
    plans_ = plans;
    plan_ = std::move(plan);
    has_plan_.store(!plan_.empty(), std::memory_order_relaxed);
    std::vector<FileKey> keys;
    keys.reserve(plan_.size());
    plan_order_.reserve(plan_.size());
    for (size_t i = 0; i < plan_.size(); ++i) {
      keys.push_back(plan_[i].key);
      const bool first_use = plan_index_.emplace(plan_[i].key, static_cast<uint32_t>(i)).second;
      plan_order_.push_back(CatalogIndexLocked(plan_[i].key, plan_[i].path).value_or(kUntracked));
      // Mid-epoch, the reader is as far as the furthest entry it has read (a file's
      // second entry, in the next epoch, is not read yet).
      if (!new_epoch && first_use && accessed_.Contains(plan_[i].key)) plan_cursor_ = i;
    }
    if (policy_) policy_->SetPlan(keys);
    replay_ranked_ = false;  // the plan's ranks replaced the replay's
    RankByReplayLocked();    // a plan withdrawn: a replay may rank again
    plan_fingerprint_ = Fingerprint(plan_, [](const PlannedFile& f) -> const std::string& {
      return f.path;
    });
    uint64_t held_back = 0;
    if (publications_logged_.Allow(&held_back)) {
      spdlog::info("prefetch: plan of {} files published (epoch {}){}", plan_.size(), epoch_,
                   held_back == 0 ? "" : fmt::format("; {} more not logged", held_back));
    }
  }
  cv_.notify_all();
}

std::optional<size_t> PrefetcherImpl::FirstToFetchLocked(const std::vector<uint32_t>& order,
                                                         size_t* next, size_t cursor) {
  // Everything before *next is handled; look no further than the window past the reader.
  auto handled = [&](size_t i) REQUIRES(mu_) {
    return order[i] == kUntracked || HandledLocked(catalog_[order[i]].first);
  };
  while (*next < order.size() && handled(*next)) ++*next;
  const size_t end = std::min(order.size(), cursor + 1 + WindowLocked());
  for (size_t i = *next; i < end; ++i) {
    if (order[i] == kUntracked) continue;
    const auto& [key, path] = catalog_[order[i]];
    if (HandledLocked(key) || path.empty() || InKernelLocked(key)) continue;
    return i;
  }
  return std::nullopt;
}

std::optional<Candidate> PrefetcherImpl::NextInOrderLocked(const std::vector<uint32_t>& order,
                                                           size_t* next, size_t cursor) {
  // Behind the reader, the files right past it are its own: a batch taken from there is
  // overtaken (the reader reads its files first, through FUSE, and the readahead's work
  // on them is lost), and on 2 cores that lost work kept readahead behind for whole
  // epochs. Readahead starts where it can arrive first, leaving the reader what it
  // reads meanwhile; once ahead, this changes nothing.
  const size_t concede = static_cast<size_t>(std::ceil(access_rate_ * kConcedeSeconds));
  if (access_rate_ > 0 && *next < cursor + 1 + concede) *next = cursor + 1 + concede;
  const std::optional<size_t> i = FirstToFetchLocked(order, next, cursor);
  if (!i) return std::nullopt;
  const auto& [key, path] = catalog_[order[*i]];
  const uint64_t size = *i < plan_.size() && &order == &plan_order_ ? plan_[*i].size : 0;
  if (RefusedLocked(key, size)) return std::nullopt;  // all later ones rank worse
  prefetched_.insert(key);
  taken_.insert(key);
  return Candidate{path, key};
}

std::optional<Candidate> PrefetcherImpl::NextSequentialLocked() {
  if (last_path_.empty()) return std::nullopt;
  const size_t slash = last_path_.rfind('/');
  const std::string dir = slash == std::string::npos ? "" : last_path_.substr(0, slash);
  const std::string name = slash == std::string::npos ? last_path_ : last_path_.substr(slash + 1);
  if (dir != listed_dir_ || listed_names_.empty()) {
    auto names = source_.ListDir(dir);  // a readdir of the source; rare (per directory)
    if (!names.ok()) return std::nullopt;
    listed_dir_ = dir;
    listed_names_ = std::move(*names);
  }
  auto it = std::upper_bound(listed_names_.begin(), listed_names_.end(), name);
  const uint32_t window = WindowLocked();
  for (uint32_t n = 0; it != listed_names_.end() && n < window; ++it, ++n) {
    std::string path = dir.empty() ? *it : dir + "/" + *it;
    if (prefetched_paths_.count(path) != 0) continue;
    prefetched_paths_.insert(path);
    return Candidate{std::move(path), std::nullopt};
  }
  return std::nullopt;
}

std::optional<Candidate> PrefetcherImpl::NextShuffledLocked() {
  // The remaining set: files not read this epoch, in pack order, as long as the policy
  // has room or something already read to evict.
  const bool ordered = pack_order_epoch_ == epoch_;
  while (shuffled_next_ < catalog_.size()) {
    const size_t i = ordered && shuffled_next_ < pack_order_.size() ? pack_order_[shuffled_next_]
                                                                    : shuffled_next_;
    const auto& [key, path] = catalog_[i];
    if (HandledLocked(key) || path.empty() || InKernelLocked(key)) {
      ++shuffled_next_;
      continue;
    }
    if (RefusedLocked(key, 0)) return std::nullopt;
    ++shuffled_next_;
    prefetched_.insert(key);
    taken_.insert(key);
    return Candidate{path, key};
  }
  return std::nullopt;
}

std::vector<FileKey> PrefetcherImpl::BeginPackOrderLocked(uint64_t* epoch) {
  ordering_ = true;
  *epoch = epoch_;
  std::vector<FileKey> keys;
  keys.reserve(catalog_.size());
  for (const auto& entry : catalog_) keys.push_back(entry.first);
  return keys;
}

PrefetcherImpl::PackOrdered PrefetcherImpl::PackOrder(const std::vector<FileKey>& keys) const {
  // One index lookup per file; files the SSD tier lacks sort last, stably, so they keep
  // their first-seen order. So do files the kernel holds whole, without a lookup:
  // readahead passes over them (in a warm epoch, all of them; the lookups were a large
  // share of the daemon's work there: docs/benchmarks.md, "Figures behind design
  // choices").
  KernelPages* pages = kernel_pages_.load();
  PackOrdered out;
  std::vector<std::pair<uint64_t, uint32_t>> positions;
  positions.reserve(keys.size());
  for (uint32_t i = 0; i < keys.size(); ++i) {
    if (pages != nullptr && pages->HoldsWhole(keys[i].dev, keys[i].ino)) {
      out.held.push_back(i);
      continue;
    }
    positions.emplace_back(cache_->SsdPosition(keys[i].dev, keys[i].ino).value_or(UINT64_MAX), i);
  }
  std::stable_sort(positions.begin(), positions.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  out.order.reserve(keys.size());
  for (const auto& p : positions) out.order.push_back(p.second);
  out.order.insert(out.order.end(), out.held.begin(), out.held.end());
  return out;
}

void PrefetcherImpl::EndPackOrderLocked(uint64_t epoch, PackOrdered ordered) {
  ordering_ = false;
  if (epoch_ != epoch) return;  // a new epoch began meanwhile; the next worker redoes it
  // Held whole a moment ago: handled for this epoch without asking again one by one.
  for (uint32_t i : ordered.held) {
    if (!HandledLocked(catalog_[i].first)) PassOverLocked(catalog_[i].first);
  }
  pack_order_ = std::move(ordered.order);
  pack_order_epoch_ = epoch;
  shuffled_next_ = 0;  // what was issued meanwhile is skipped as handled
}

void PrefetcherImpl::WaitForBudgetLocked(MutexLock& lock) {
  while (!stop_) {
    // With a plan, readahead reads what is read next, in order: every read is a demand
    // read done early, and holding it back would only turn it into a demand miss.
    auto delay = budget_.Delay();
    if (options_.pacer && PatternLocked() != Pattern::kPublished) {
      pace_.SetReadsPerSecond(options_.pacer->rate());
      delay = std::max(delay, pace_.Delay());
    }
    if (delay <= std::chrono::steady_clock::duration::zero()) return;
    const auto start = std::chrono::steady_clock::now();
    lock.WaitFor(cv_, std::min<std::chrono::steady_clock::duration>(delay, kIdleWait));
    budget_wait_ += std::chrono::steady_clock::now() - start;
  }
}

std::optional<Candidate> PrefetcherImpl::NextLocked() {
  switch (PatternLocked()) {
    case Pattern::kPublished:
      if (auto next = NextInOrderLocked(plan_order_, &plan_next_, plan_cursor_)) return next;
      return NextFillLocked();
    case Pattern::kReplay:
      return NextInOrderLocked(previous_order_, &replay_next_, replay_cursor_);
    case Pattern::kSequential:
      return NextSequentialLocked();
    case Pattern::kShuffled:
      return NextShuffledLocked();
    case Pattern::kUnknown:
      break;
  }
  return std::nullopt;
}

std::optional<Candidate> PrefetcherImpl::NextFillLocked() {
  if (options_.ssd_budget == 0 || !ssd_room_.load(std::memory_order_relaxed)) return std::nullopt;
  // Nearer entries are the window's (NextInOrderLocked).
  fill_next_ = std::max<size_t>(fill_next_, plan_cursor_ + 1 + WindowLocked());
  for (size_t looked = 0; fill_next_ < plan_order_.size() && looked < kFillScan; ++looked) {
    const uint32_t index = plan_order_[fill_next_++];
    if (index == kUntracked) continue;
    const auto& [key, path] = catalog_[index];
    // Read this epoch: the tiers have it (or could not keep it, and will not now).
    if (path.empty() || HandledLocked(key) || !filled_.insert(key).second) continue;
    return Candidate{path, key, /*fill=*/true};
  }
  return std::nullopt;
}

bool PrefetcherImpl::SsdHasRoom() {
  const int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
  int64_t checked = ssd_room_checked_ns_.load(std::memory_order_relaxed);
  if (now - checked >= std::chrono::nanoseconds(kSsdRoomPeriod).count() &&
      ssd_room_checked_ns_.compare_exchange_strong(checked, now)) {
    const cache::SsdStats ssd = cache_->Stats().ssd;
    ssd_room_.store(!ssd.degraded && static_cast<double>(ssd.bytes) <
                                         kSsdFillFraction * static_cast<double>(options_.ssd_budget),
                    std::memory_order_relaxed);
  }
  return ssd_room_.load(std::memory_order_relaxed);
}

std::vector<Candidate> PrefetcherImpl::TakeBatchLocked(size_t max) {
  std::vector<Candidate> batch;
  while (batch.size() < max) {
    std::optional<Candidate> next = NextLocked();
    if (!next) break;
    batch.push_back(std::move(*next));
    ++inflight_;  // so that the policy's room is not promised twice
  }
  return batch;
}

void PrefetcherImpl::Work(uint32_t index) {
  NameThisThread("prefetch-" + std::to_string(index));
  // Streaming, a worker takes a batch, streams what the SSD tier holds of it in pack
  // order (no source reads: no budget to wait for), then reads the rest one file at a
  // time within the budget. Otherwise, one file at a time. A worker past `threads` (a
  // deep queue for a latency-bound source) reads one file at a time, while the depth
  // reaches it.
  const bool extra = index >= options_.threads;
  const bool streaming = options_.stream_from_ssd && !extra;
  while (true) {
    std::vector<Candidate> batch;
    bool from_source_queue = false;
    {
      MutexLock lock(mu_);
      while (true) {
        if (stop_) return;
        if (PatternLocked() == Pattern::kShuffled && pack_order_epoch_ != epoch_ && !ordering_) {
          uint64_t epoch;
          std::vector<FileKey> keys = BeginPackOrderLocked(&epoch);
          lock.Unlock();
          PackOrdered order = PackOrder(keys);
          lock.Lock();
          EndPackOrderLocked(epoch, std::move(order));
          continue;
        }
        if (!streaming) WaitForBudgetLocked(lock);
        if (stop_) return;
        if (!GateAllowsLocked()) {
          // Readahead does not pay now: nothing new, nothing queued; an access that
          // reopens the gate wakes every worker.
          DropSourceQueueLocked();
          lock.WaitFor(cv_, kQuietWait);
          continue;
        }
        if (streaming && !RoomForStreamLocked()) {
          lock.WaitFor(cv_, kIdleWait);
          continue;
        }
        if (extra && index >= DepthLocked()) {
          lock.WaitFor(cv_, kQuietWait);  // Fetch notifies when the depth grows
          continue;
        }
        if (!source_queue_.empty()) {
          if (streaming) WaitForBudgetLocked(lock);  // the others waited above
          if (stop_) return;
          if (source_queue_.empty()) continue;
          batch.push_back(std::move(source_queue_.front()));
          source_queue_.pop_front();
          from_source_queue = true;
          break;
        }
        batch = TakeBatchLocked(!streaming ? 1 : PatternLocked() == Pattern::kPublished ? kPlanStreamBatch : kStreamBatch);
        if (!batch.empty()) {
          // There may be more: the next worker looks too (an access wakes only one,
          // and the others sleep until notified).
          cv_.notify_one();
          break;
        }
        // Work comes with an access, a plan or a new epoch (each notifies), except
        // pushes to retry and a plan's fills, which wait for time (the SSD tier's room).
        const bool timed = PatternLocked() == Pattern::kPublished && options_.ssd_budget != 0;
        lock.WaitFor(cv_, timed ? kIdleWait : kQuietWait);
      }
    }
    if (streaming && !from_source_queue) {
      const size_t taken = batch.size();
      std::vector<Candidate> rest = StreamBatch(std::move(batch));
      MutexLock lock(mu_);
      inflight_ -= static_cast<uint32_t>(taken - rest.size());
      // What the SSD tier lacks is read from the source one file at a time, by whichever
      // worker is free. Read in turn by the worker that took the batch, a batch's later
      // files were overtaken by the readers on a network source (each read a round trip).
      for (Candidate& c : rest) source_queue_.push_back(std::move(c));
      if (!rest.empty()) cv_.notify_all();
      continue;
    }
    for (const Candidate& candidate : batch) Fetch(candidate);
    MutexLock lock(mu_);
    inflight_ -= static_cast<uint32_t>(batch.size());
    // The pacer may have deepened the queue: workers beyond the old depth wake.
    const uint32_t depth = DepthLocked();
    if (depth > notified_depth_) cv_.notify_all();
    notified_depth_ = depth;
  }
}

void PrefetcherImpl::WaitForDemandReads() const {
  // Demand first: while a demand read is filling from below (a miss on its way from the
  // SSD tier or the source), add no IO of our own, for up to kDemandGrace.
  const auto deadline = std::chrono::steady_clock::now() + kDemandGrace;
  while (cache_->DemandFillsInFlight() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

std::vector<Candidate> PrefetcherImpl::StreamBatch(std::vector<Candidate> batch) {
  // The identities the files have now: a file changed since it was cached is not
  // streamed (the cache compares them with the packs' records).
  std::vector<cache::SourceIdentity> ids;
  std::vector<size_t> which;  // ids[k] belongs to batch[which[k]]
  std::vector<Candidate> rest;
  for (size_t i = 0; i < batch.size(); ++i) {
    // Not in the SSD tier, as far as the plan or the index knows: its identity (a round
    // trip on a network source, for each file of a batch in turn) would buy nothing.
    if (batch[i].fill ||
        (batch[i].key && !cache_->SsdPosition(batch[i].key->dev, batch[i].key->ino))) {
      rest.push_back(std::move(batch[i]));
      continue;
    }
    Result<cache::SourceIdentity> id = source_.Stat(batch[i].path);
    if (!id.ok()) {
      rest.push_back(std::move(batch[i]));  // Fetch() meets the error and counts it
      continue;
    }
    if (!batch[i].key && PassedOverNow(FileKey{id->dev, id->ino})) continue;
    ids.push_back(*id);
    which.push_back(i);
  }
  if (ids.empty()) return rest;
  WaitForDemandReads();
  // Whole files go on into the kernel's page cache straight from the stream's buffers,
  // where the kernel takes them; the rest land in RAM and are offered below.
  std::unordered_set<FileKey, FileKeyHash> in_kernel;
  cache::Cache::WholeFileTaker push_whole;
  KernelPages* pages = options_.push_to_kernel ? kernel_pages_.load() : nullptr;
  if (pages != nullptr) {
    push_whole = [&](const cache::SourceIdentity& id, std::span<const char> bytes) {
      const FileKey key{id.dev, id.ino};
      {
        MutexLock lock(mu_);
        if (accessed_.Contains(key)) return false;  // the reader got there first
      }
      if (!pages->TakeWhole(id, bytes)) return false;
      in_kernel.insert(key);
      return true;
    };
  }
  const std::vector<bool> brought = cache_->StreamFromSsd(ids, push_whole);
  std::vector<cache::SourceIdentity> to_push;
  {
    MutexLock lock(mu_);
    for (size_t k = 0; k < ids.size(); ++k) {
      const FileKey key{ids[k].dev, ids[k].ino};
      if (!batch[which[k]].key) prefetched_.insert(key);
      const bool pushed = in_kernel.count(key) != 0;
      if (!pushed && accessed_.Contains(key)) continue;  // the reader got there first
      if (brought[k]) {
        ++prefetched_count_;
        landed_.insert(key);
        taken_.erase(key);
        if (!pushed) to_push.push_back(ids[k]);
      } else {
        rest.push_back(std::move(batch[which[k]]));
      }
    }
  }
  for (const cache::SourceIdentity& id : to_push) PushToKernel(id);
  return rest;
}

void PrefetcherImpl::Fetch(const Candidate& candidate) {
  // A fill of a file the SSD tier holds already costs nothing (the identity is checked
  // when it is read); one past the tier's room is not made.
  if (candidate.fill && (!SsdHasRoom() || cache_->SsdPosition(candidate.key->dev, candidate.key->ino))) {
    return;
  }
  // A source the pacer finds latency-bound (its reads do not queue) serves readahead
  // beside demand reads: on GlusterFS, with four readers, some demand read was nearly
  // always in flight, and this grace held every readahead read back 5 ms.
  if (!options_.pacer || options_.pacer->queueing()) WaitForDemandReads();
  bool saturated = false;
  {
    MutexLock lock(mu_);
    // The reader got there first while this waited: nothing to do (the access counted
    // it as overtaken).
    if (candidate.key && accessed_.Contains(*candidate.key)) return;
    while (!stop_ && source_inflight_ >= DepthLocked()) {
      if (!GateAllowsLocked()) {  // closed: the file is left to the reader
        if (candidate.key) taken_.erase(*candidate.key);
        return;
      }
      lock.WaitFor(cv_, kIdleWait);
    }
    ++source_inflight_;
    saturated = source_inflight_ >= DepthLocked();
  }
  // Done with the file either way: landed (landed_ has it) or not (nothing to overtake).
  struct SlotBack {
    PrefetcherImpl* self;
    std::optional<FileKey> key;
    ~SlotBack() {
      MutexLock lock(self->mu_);
      --self->source_inflight_;
      if (key) self->taken_.erase(*key);
    }
  } slot_back{this, candidate.key};
  auto opened = source_.Open(candidate.path);
  if (!opened.ok()) {
    MutexLock lock(mu_);
    ++prefetch_errors_;
    spdlog::debug("prefetch {}: {}", candidate.path, opened.status().ToString());
    return;
  }
  const FileKey key{opened->id.dev, opened->id.ino};
  if (!candidate.key && PassedOverNow(key)) return;
  {
    MutexLock lock(mu_);
    if (accessed_.Contains(key)) return;  // the reader got there first
    if (!candidate.key) prefetched_.insert(key);
  }
  const auto started = std::chrono::steady_clock::now();
  auto done = cache_->Prefetch(cache::SourceFile{opened->fd.get(), opened->id, {}});
  if (done.ok()) {
    budget_.Charge(done->source_reads, done->source_bytes);
    pace_.Charge(done->source_reads, 0);
    if (options_.pacer) {
      options_.pacer->OnReadaheadRead(std::chrono::steady_clock::now() - started,
                                      done->source_reads, saturated);
    }
  }
  MutexLock lock(mu_);
  if (!done.ok()) {
    ++prefetch_errors_;
    return;
  }
  prefetch_source_reads_ += done->source_reads;
  if (candidate.fill) {
    if (done->source_reads > 0) ++prefetch_filled_;
    return;  // far ahead: pushing it now would only fill the page cache early
  }
  if (done->chunks_in_ram > 0 && !accessed_.Contains(key)) {
    ++prefetched_count_;
    landed_.insert(key);
    lock.Unlock();
    PushToKernel(opened->id);
  }
}

void PrefetcherImpl::PushToKernel(const cache::SourceIdentity& id) {
  if (!options_.push_to_kernel) return;
  KernelPages* pages = kernel_pages_.load();
  if (pages == nullptr) return;
  {
    MutexLock lock(mu_);
    if (accessed_.Contains(FileKey{id.dev, id.ino})) return;  // the reader got there first
  }
  pages->Offer(id);  // now, or once the kernel has the file's inode (kernel_pages.h)
}

uint64_t PrefetcherImpl::Epoch() const { return epoch_now_.load(std::memory_order_relaxed); }

PrefetcherStats PrefetcherImpl::Stats() const {
  MutexLock lock(mu_);
  PrefetcherStats s;
  s.pattern = PatternLocked();
  s.epoch = epoch_;
  s.epoch_accesses = accessed_.size();
  s.prefetched = prefetched_count_;
  s.prefetch_hits = prefetch_hits_;
  s.prefetch_overtaken = prefetch_overtaken_;
  if (options_.gate) {
    s.readahead_gate = GateStateName(options_.gate->state());
    s.readahead_gate_offs = options_.gate->offs();
  }
  s.prefetch_refused = prefetch_refused_;
  s.prefetch_in_kernel = prefetch_in_kernel_;
  s.prefetch_filled = prefetch_filled_;
  s.prefetch_errors = prefetch_errors_;
  s.prefetch_source_reads = prefetch_source_reads_;
  if (options_.pacer) {
    s.pace_reads_per_s = options_.pacer->rate();
    s.pace_slowdowns = options_.pacer->slowdowns();
    s.source_depth = DepthLocked();
    const auto base = options_.pacer->base_latency();
    s.source_base_latency_us =
        base == std::chrono::steady_clock::duration::max()
            ? 0
            : static_cast<uint64_t>(
                  std::chrono::duration_cast<std::chrono::microseconds>(base).count());
  }
  s.budget_wait_ms = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(budget_wait_).count());
  s.plans_published = plans_published_;
  s.plan_fingerprint = plan_fingerprint_;
  s.files_known = catalog_.size();
  s.file_table_bytes = file_table_bytes_;
  s.files_untracked = files_untracked_;
  s.plan_entries = plan_.size();
  s.plans = plan_.empty() ? 0 : plans_;
  s.plan_position = plan_cursor_;
  s.readahead_window = WindowLocked();
  s.access_rate = access_rate_;
  return s;
}

}  // namespace

std::shared_ptr<cache::EvictionPolicy> Prefetcher::NewPolicy(uint64_t ram_budget) {
  return std::make_shared<EpochPolicy>(ram_budget);
}

std::unique_ptr<Prefetcher> Prefetcher::Create(PrefetcherOptions options,
                                               const SourceTree& source, cache::Cache* cache,
                                               std::shared_ptr<cache::EvictionPolicy> policy) {
  return std::make_unique<PrefetcherImpl>(std::move(options), source, cache,
                                          std::dynamic_pointer_cast<EpochPolicy>(policy));
}

uint64_t PlanFingerprint(const std::vector<std::string>& paths) {
  return Fingerprint(paths, [](const std::string& p) -> const std::string& { return p; });
}

void PrefetcherStats::VisitCounters(const CounterVisitor& visit) const {
  constexpr auto kCounter = CounterKind::kCounter;
  constexpr auto kGauge = CounterKind::kGauge;
  visit(CounterInfo{"pattern", "The access pattern readahead detected.", CounterKind::kText}.Show(
            {.row = "epoch pattern", .label = "", .top = true}),
        std::string(PatternName(pattern)));
  visit(CounterInfo{"epoch", "Epochs started since mount (0 = the first).", kGauge}.Show(
            {.row = "epoch", .label = "", .top = true}),
        epoch);
  visit(CounterInfo{"epoch_accesses", "Files accessed in the current epoch.", kGauge}.Show(
            {.row = "epoch", .label = "files read", .top = true}),
        epoch_accesses);
  visit(CounterInfo{"access_rate", "Files first read per second, smoothed.", kGauge}.Show(
            {.row = "epoch", .label = "files/s"}),
        access_rate);
  visit(CounterInfo{"prefetched", "Files prefetched with at least one chunk now in RAM.", kGauge}
            .Show({.row = "readahead", .label = "files in RAM"}),
        prefetched);
  visit(CounterInfo{"prefetch_hits", "Accesses to files that readahead had brought in.", kCounter}
            .Show({.row = "readahead", .label = "hits", .top = true}),
        prefetch_hits);
  visit(CounterInfo{"prefetch_overtaken",
                    "Accesses to files readahead had taken and not brought in yet (it was late).",
                    kCounter}
            .Show({.row = "readahead", .label = "overtaken"}),
        prefetch_overtaken);
  visit(CounterInfo{"readahead_gate",
                    "Whether readahead runs: on, off (the readers were no faster with it), or "
                    "probing.",
                    CounterKind::kText}
            .Show({.row = "readahead", .label = "gate"}),
        readahead_gate);
  visit(CounterInfo{"readahead_gate_offs",
                    "Times a probe found the readers no faster with readahead and turned it off.",
                    kCounter}
            .Show({.row = "readahead", .label = "turned off"}),
        readahead_gate_offs);
  visit(CounterInfo{"readahead_window", "Files read ahead of the reader.", kGauge}.Show(
            {.row = "readahead", .label = "window"}),
        uint64_t{readahead_window});
  visit(
      CounterInfo{"prefetch_refused", "Readahead candidates the RAM policy would refuse.", kCounter}
          .Show({.row = "readahead", .label = "refused"}),
      prefetch_refused);
  visit(CounterInfo{"prefetch_in_kernel",
                    "Readahead candidates skipped: the kernel's page cache holds them whole.",
                    kCounter}
            .Show({.row = "readahead", .label = "in page cache"}),
        prefetch_in_kernel);
  visit(CounterInfo{"prefetch_filled",
                    "Plan entries beyond the readahead window read from the source into the SSD "
                    "tier (a next epoch's files no tier held).",
                    kCounter}
            .Show({.row = "readahead", .label = "filled ahead"}),
        prefetch_filled);
  visit(CounterInfo{"prefetch_errors", "Readahead candidates that could not be opened or read.",
                    kCounter}
            .Show({.row = "readahead", .label = "errors"}),
        prefetch_errors);
  visit(CounterInfo{"prefetch_source_reads",
                    "Source reads charged to the readahead budget (--prefetch-iops).", kCounter}
            .Show({.row = "readahead", .label = "source reads"}),
        prefetch_source_reads);
  visit(CounterInfo{"prefetch_budget_wait_ms",
                    "Milliseconds readahead waited for the source budget.", kCounter}
            .Show({.row = "readahead pace", .label = "budget wait ms"}),
        budget_wait_ms);
  visit(
      CounterInfo{"prefetch_pace_reads_per_s", "The pacer's current rate (0: not pacing).", kGauge}
          .Show({.row = "readahead pace", .label = "reads/s"}),
      pace_reads_per_s);
  visit(CounterInfo{"prefetch_pace_slowdowns", "Times the pacer saw reads queue and slowed down.",
                    kCounter}
            .Show({.row = "readahead pace", .label = "slowdowns"}),
        pace_slowdowns);
  visit(CounterInfo{"source_base_latency_us", "The lowest recent readahead source read, in us.",
                    kGauge}
            .Show({.row = "readahead pace", .label = "source base latency us"}),
        source_base_latency_us);
  visit(CounterInfo{"prefetch_source_depth",
                    "Source reads readahead may have in flight now (deeper on a latency-bound "
                    "source).",
                    kGauge}
            .Show({.row = "readahead pace", .label = "in flight"}),
        source_depth);
  visit(CounterInfo{"plans_published", "Read plans written to .epochfs/plan.", kCounter}.Show(
            {.row = "read plan", .label = "published"}),
        plans_published);
  visit(CounterInfo{"plans", "Live plans (publishers: ranks, loaders) merged into the current one.",
                    kGauge}
            .Show({.row = "read plan", .label = "live plans"}),
        plans);
  visit(CounterInfo{"plan_entries", "Entries of the current plan (all live plans).", kGauge}.Show(
            {.row = "read plan", .label = "entries"}),
        plan_entries);
  visit(CounterInfo{"plan_position", "Furthest plan entry read so far.", kGauge}.Show(
            {.row = "read plan", .label = "read up to"}),
        plan_position);
  // Hex text: many JSON readers hold numbers as doubles, which lose bits above 2^53.
  visit(CounterInfo{"plan_fingerprint", "XXH3-64 of the current plan's paths (0: no plan).",
                    CounterKind::kText}
            .Show({.row = "read plan", .label = "fingerprint"}),
        fmt::format("{:016x}", plan_fingerprint));
  visit(CounterInfo{"files_known", "Files in the prefetcher's tables.", kGauge}.Show(
            {.row = "file table", .label = "files"}),
        files_known);
  visit(CounterInfo{"file_table_bytes",
                    "Memory charged to the prefetcher's per-file tables (within --ram).", kGauge}
            .Show({.row = "file table", .label = "", .unit = Unit::kBytes}),
        file_table_bytes);
  visit(CounterInfo{"files_untracked",
                    "First reads of files the full file table did not take (no readahead).",
                    kCounter}
            .Show({.row = "file table", .label = "untracked"}),
        files_untracked);
}

}  // namespace epochfs::prefetch
