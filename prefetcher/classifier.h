// Classifier: names the access pattern of the current epoch from its accesses so far.
//
// An access is "in order" against a reference order when the file that precedes it in
// that order was accessed among the last `window` accesses (or it is the first of the
// order). Several DataLoader workers reading interleaved slices of one order keep this
// true (a file's predecessor was read by the same worker a few accesses earlier), while
// a random permutation makes it rare (about window/i for the i-th access). References:
//  - replay: the previous epoch's access order, as the daemon saw it. That order is
//    itself reordered by the readers' timing (threads sharing one iterator swap
//    neighbours; DataLoader workers interleave their batches), differently in each
//    epoch, so a file's predecessor there is often seen after it here. A replay is also
//    found by position: the access lies within the spread of the last `spread_window`
//    accesses' positions in that order (median +- 3 interquartile ranges), and that
//    median moved forward through the order over the last `progress_accesses`
//    accesses. Scored against the chance that a random file lands there (a random order
//    spreads the positions over the whole order, and such accesses are not scored).
//    Closeness alone would call orders near the last one replays: shards read in a new
//    order, each shuffled inside, or the last order backwards; their median does not
//    move steadily forward. The replay score is the better of the two rules. Files the
//    previous epoch did not see (the kernel served them) are not scored for replay;
//  - sequential: sorted path order among the files accessed so far in this epoch (so
//    no listing of the whole data set is needed, and it works in the first epoch).
//    Early in an epoch few paths are known, so a random file's predecessor among them
//    is one of the last `window` accesses by chance alone (about window/i at the i-th
//    access). The sequential score counts only the hits above that chance: 0 for a
//    random order, 1 when every access is in order.
// After `min_accesses` accesses, a score of at least `threshold` names the pattern
// (replay is preferred when both hold); otherwise it is shuffled. With a last order to
// compare with, a pattern other than replay is named only once replay by position
// could have been (spread_window + progress_accesses + window accesses): named
// shuffled meanwhile, a replay by many readers lost its readahead and RAM ranking
// until then.
//
// Thread-safety: none; the Prefetcher calls it under its own lock.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "prefetcher/order_index.h"
#include "prefetcher/prefetcher.h"

namespace epochfs::prefetch {

struct ClassifierOptions {
  uint32_t window = 64;
  uint32_t min_accesses = 128;
  // Replay by position: the recent positions whose spread an access must lie within,
  // and the most of the previous order that spread may cover for the access to count
  // (a wider one says little; a random order's covers it all).
  uint32_t spread_window = 32;
  double max_spread_share = 0.25;
  // ... and the forward progress asked of their median: at least `min_progress`
  // positions over the last `progress_accesses` accesses.
  uint32_t progress_accesses = 128;
  uint32_t min_progress = 16;
  double threshold = 0.7;
  // An epoch's first this many accesses decide its pattern; later ones are counted
  // only. Scoring every access (a sorted map of paths) cost a share of the access
  // watcher's work in a warm epoch (docs/benchmarks.md, "Figures behind design
  // choices"), and memory per file read.
  uint32_t max_accesses = 8192;
};

class Classifier {
 public:
  explicit Classifier(ClassifierOptions options = {}) : options_(options) {}

  // Starts a new epoch; `previous` is the last epoch's access order (may be null or
  // empty).
  void NewEpoch(std::shared_ptr<const OrderIndex> previous);
  void NewEpoch(const std::vector<FileKey>& previous);
  // Records the next access of this epoch.
  void Access(const FileKey& file, const std::string& path);
  Pattern pattern() const;
  double sequential_score() const;
  double replay_score() const;
  uint64_t accesses() const { return count_; }

 private:
  ClassifierOptions options_;
  uint64_t count_ = 0;
  uint64_t scored_ = 0;  // accesses scored (count_ - window at most)
  uint64_t sequential_scored_ = 0;  // scored accesses that had a path
  uint64_t sequential_hits_ = 0;
  double sequential_by_chance_ = 0;  // hits a random order would expect among those
  uint64_t replay_scored_ = 0;  // scored accesses of files in the previous order
  uint64_t replay_hits_ = 0;
  // Replay by position: the last spread_window accesses' positions in the previous
  // order (a ring), and the accesses scored against it.
  std::vector<uint32_t> recent_ranks_;
  size_t recent_next_ = 0;
  std::vector<uint32_t> sorted_ranks_;  // scratch: recent_ranks_ sorted
  // The medians of recent_ranks_ at the last progress_accesses + 1 accesses (a ring).
  std::vector<uint32_t> past_medians_;
  size_t past_median_next_ = 0;
  uint64_t spread_scored_ = 0;
  uint64_t spread_hits_ = 0;
  double spread_by_chance_ = 0;
  double spread_score() const;
  // Scores one access at `rank` in the previous order by position.
  void ScoreSpread(uint64_t rank);
  std::map<std::string, uint64_t> seen_paths_;  // path -> access index
  std::unordered_map<FileKey, uint64_t, FileKeyHash> seen_;           // file -> access index
  std::shared_ptr<const OrderIndex> previous_ = std::make_shared<const OrderIndex>();
};

}  // namespace epochfs::prefetch
