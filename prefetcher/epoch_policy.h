// EpochPolicy: the epoch-aware eviction policy of the RAM tier (cache/eviction.h).
//
// Every cached chunk has a rank; the highest rank is evicted first:
//  - a chunk of a file already read this epoch: the kernel page cache holds it now and
//    this epoch will not read it again, so it goes first (oldest read first, so a
//    large file being read right now keeps its other chunks);
//  - a chunk of an unread file with no plan position: next;
//  - a chunk of an unread file in the published plan: its plan position (Belady: the
//    file needed furthest in the future goes first).
// A plan may run on into the next epoch (a publisher that knows it, such as
// DistributedSampler's, appends it), so a file can be in it twice: once a file is read,
// its next position ranks it, like an unread file's; a file read with no later
// position is *spent*. In a replay the prefetcher gives the last epoch's order instead
// (RankByReplay), which runs again after this epoch: a file's place in it ranks it
// unread, and its place in that next run once read.
// A chunk may evict others only if it ranks strictly lower than the worst cached one,
// and a chunk of a spent file never evicts anything (it would only be useful in some
// later epoch, and taking room for it is exactly LRU's thrash). Without
// prefetching this behaves as a static set (hit ratio c under reshuffling); with the
// prefetcher refilling freed room with unread files it is the remaining-set policy
// (c + c ln(1/c)); with a plan, Belady.
//
// Ranks are kept current only once something needs them. Until a decision asks for
// them in an epoch (the tier full, readahead asking for room), reads only mark the file
// and the ranks are rebuilt at that first ask: with the data set in RAM, reranking at
// every read (on the access watcher's thread) was a large share of the daemon's work in
// a warm epoch (docs/benchmarks.md, "Pushing into the page cache", "Warm epochs, what
// was done about it"). From then on until the next epoch, each read reranks its file.
//
// Thread-safety: thread-safe. The RAM tier calls the EvictionPolicy methods under its
// own lock; the prefetcher calls MarkRead/NewEpoch/SetPlan/RankByReplay/WouldAdmit from other
// threads. Lock order: RAM tier lock, then mu_. This class never calls the tier.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "base/thread_annotations.h"
#include "cache/eviction.h"
#include "prefetcher/order_index.h"
#include "prefetcher/prefetcher.h"

namespace epochfs::prefetch {

class EpochPolicy final : public cache::EvictionPolicy {
 public:
  // `budget_bytes` is the RAM tier's budget (for WouldAdmit and Displaceable), until
  // the tier says another (OnBudget).
  explicit EpochPolicy(uint64_t budget_bytes) : budget_(budget_bytes) {}

  // The file was read (on demand) in the current epoch.
  void MarkRead(const FileKey& file);
  // A new epoch starts: every file is unread again.
  void NewEpoch();
  // The upcoming order (positions are indices into `order`; a file's first two count);
  // an empty order clears it, and any replay ranking.
  void SetPlan(const std::vector<FileKey>& order);
  // This epoch replays `last_epoch` (null: no longer), which then runs again: ranked as
  // a plan that repeats, sharing the prefetcher's table rather than building one.
  // Replaces any plan.
  void RankByReplay(std::shared_ptr<const OrderIndex> last_epoch);
  // Whether `bytes` more of `file` would get into the tier now (room, or a worse entry
  // to evict). Approximate: the tier may change before the prefetch lands.
  bool WouldAdmit(const FileKey& file, uint64_t bytes);
  bool WasRead(const FileKey& file) const;
  // How many entries one file of `file`'s rank could take the place of now, counting
  // at most `limit`: free room (in average entries) plus cached entries ranked worse.
  // The prefetcher keeps fewer prefetches in flight than this, so that none of them
  // is fetched only to be refused by the tier.
  uint32_t Displaceable(const FileKey& file, uint32_t limit);

  // cache::EvictionPolicy
  void OnInsert(const cache::ChunkKey& key, uint64_t bytes) override;
  void OnAccess(const cache::ChunkKey& key) override {}
  void OnErase(const cache::ChunkKey& key) override;
  std::optional<cache::ChunkKey> Victim() override;
  bool AdmitWhenFull(const cache::ChunkKey& key, uint64_t bytes) override;
  void OnBudget(uint64_t bytes) override;

 private:
  static constexpr uint64_t kUnplanned = uint64_t{1} << 62;
  uint64_t RankLocked(const FileKey& file) const REQUIRES(mu_);
  // Read this epoch, and not in the plan after that read.
  bool SpentLocked(const FileKey& file) const REQUIRES(mu_) {
    return read_.count(file) != 0 && plan_later_pos_.count(file) == 0 &&
           !(replay_ && replay_->Contains(file));
  }
  void RerankLocked() REQUIRES(mu_);
  void RerankFileLocked(const FileKey& file) REQUIRES(mu_);
  // Before any decision by rank: rebuilds stale ranks, and keeps them current from now
  // on in this epoch.
  void FreshRanksLocked() REQUIRES(mu_);

  mutable Mutex mu_;
  uint64_t budget_ GUARDED_BY(mu_);
  uint64_t bytes_ GUARDED_BY(mu_) = 0;
  uint64_t read_seq_ GUARDED_BY(mu_) = 0;
  std::unordered_map<FileKey, uint64_t, FileKeyHash> read_ GUARDED_BY(mu_);  // file -> read seq
  using PositionMap = std::unordered_map<FileKey, uint64_t, FileKeyHash>;
  PositionMap plan_pos_ GUARDED_BY(mu_);        // first use
  PositionMap plan_later_pos_ GUARDED_BY(mu_);  // second
  std::shared_ptr<const OrderIndex> replay_ GUARDED_BY(mu_);  // RankByReplay
  struct Cached {
    uint64_t rank;
    uint64_t bytes;
  };
  std::map<cache::ChunkKey, Cached> cached_ GUARDED_BY(mu_);
  std::set<std::pair<uint64_t, cache::ChunkKey>> by_rank_ GUARDED_BY(mu_);
  // by_rank_ and cached_'s ranks agree with each other, but may miss reads and the plan.
  bool ranks_stale_ GUARDED_BY(mu_) = false;
  bool ranks_needed_ GUARDED_BY(mu_) = false;  // this epoch: rerank at each read
};

}  // namespace epochfs::prefetch
