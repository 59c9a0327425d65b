#include "prefetcher/classifier.h"

#include <algorithm>
#include <cmath>
#include <optional>

namespace epochfs::prefetch {

const char* PatternName(Pattern pattern) {
  switch (pattern) {
    case Pattern::kSequential: return "sequential";
    case Pattern::kReplay: return "replay";
    case Pattern::kShuffled: return "shuffled";
    case Pattern::kPublished: return "published";
    case Pattern::kUnknown: break;
  }
  return "unknown";
}

void Classifier::NewEpoch(std::shared_ptr<const OrderIndex> previous) {
  count_ = scored_ = sequential_scored_ = sequential_hits_ = replay_scored_ = replay_hits_ = 0;
  sequential_by_chance_ = 0;
  recent_ranks_.clear();
  recent_next_ = 0;
  past_medians_.clear();
  past_median_next_ = 0;
  spread_scored_ = spread_hits_ = 0;
  spread_by_chance_ = 0;
  seen_paths_.clear();
  seen_.clear();
  previous_ = previous ? std::move(previous) : std::make_shared<const OrderIndex>();
}

void Classifier::NewEpoch(const std::vector<FileKey>& previous) {
  NewEpoch(std::make_shared<const OrderIndex>(previous));
}

void Classifier::Access(const FileKey& file, const std::string& path) {
  const uint64_t index = count_++;
  if (index >= options_.max_accesses) return;  // decided
  const uint64_t recent = index > options_.window ? index - options_.window : 0;
  // The first `window` accesses are in any window: they do not say anything.
  const bool score = index >= options_.window;
  if (score) ++scored_;

  if (!path.empty()) {
    auto next = seen_paths_.lower_bound(path);
    bool in_order;
    if (next == seen_paths_.begin()) {
      // Nothing smaller seen yet: in order only as the very first access.
      in_order = seen_paths_.empty();
    } else {
      in_order = std::prev(next)->second >= recent;
    }
    if (score) {
      // A random path falls in one of seen + 1 gaps between the sorted seen paths; it is
      // "in order" when the path below it is one of the (at most) `window` recent ones.
      const double seen = static_cast<double>(seen_paths_.size());
      sequential_by_chance_ += std::min<double>(options_.window, seen) / (seen + 1);
      ++sequential_scored_;
      if (in_order) ++sequential_hits_;
    }
    seen_paths_.emplace(path, index);
  }
  if (const std::optional<uint32_t> rank = previous_->Position(file)) {
    bool in_order = *rank == 0;
    if (!in_order) {
      auto pred = seen_.find(previous_->order()[*rank - 1]);
      in_order = pred != seen_.end() && pred->second >= recent;
    }
    if (score) {
      ++replay_scored_;
      if (in_order) ++replay_hits_;
    }
    ScoreSpread(*rank);
  }
  seen_[file] = index;
}

void Classifier::ScoreSpread(uint64_t rank) {
  const size_t window = options_.spread_window;
  if (window == 0) return;
  if (recent_ranks_.size() == window) {
    sorted_ranks_ = recent_ranks_;
    std::sort(sorted_ranks_.begin(), sorted_ranks_.end());
    const uint32_t median = sorted_ranks_[window / 2];
    const double spread = sorted_ranks_[(3 * window) / 4] - sorted_ranks_[window / 4];
    // The median progress_accesses accesses ago, once known.
    const size_t history = options_.progress_accesses + 1;
    std::optional<uint32_t> past;
    if (past_medians_.size() == history) {
      past = past_medians_[past_median_next_];
      past_medians_[past_median_next_] = median;
      past_median_next_ = (past_median_next_ + 1) % history;
    } else {
      past_medians_.push_back(median);
    }
    // At least a few places either way: one reader's own neighbours.
    const double reach = std::max(8.0, 3.0 * spread);
    const double n = static_cast<double>(previous_->size());
    const double covered = std::min(n - 1, median + reach) - std::max(0.0, median - reach) + 1;
    if (past && covered / n <= options_.max_spread_share) {
      ++spread_scored_;
      spread_by_chance_ += covered / n;
      const bool near = std::abs(static_cast<double>(rank) - median) <= reach;
      const bool forward = median >= *past + options_.min_progress;
      if (near && forward) ++spread_hits_;
    }
    recent_ranks_[recent_next_] = static_cast<uint32_t>(rank);
    recent_next_ = (recent_next_ + 1) % window;
  } else {
    recent_ranks_.push_back(static_cast<uint32_t>(rank));
  }
}

namespace {

// Cohen's kappa against chance: (observed - expected) / (all - expected).
double HitsAboveChance(uint64_t hits, uint64_t scored, double by_chance) {
  const double above_chance = static_cast<double>(hits) - by_chance;
  const double possible = static_cast<double>(scored) - by_chance;
  if (possible <= 0) return 0.0;
  return std::max(0.0, above_chance / possible);
}

}  // namespace

double Classifier::sequential_score() const {
  return HitsAboveChance(sequential_hits_, sequential_scored_, sequential_by_chance_);
}

double Classifier::spread_score() const {
  // Too few accesses near enough to judge (a random order, or a small previous one).
  if (spread_scored_ < options_.window) return 0.0;
  return HitsAboveChance(spread_hits_, spread_scored_, spread_by_chance_);
}

double Classifier::replay_score() const {
  const double by_predecessor =
      replay_scored_ == 0 ? 0.0 : static_cast<double>(replay_hits_) / replay_scored_;
  return std::max(by_predecessor, spread_score());
}

Pattern Classifier::pattern() const {
  if (count_ < options_.min_accesses) return Pattern::kUnknown;
  if (replay_score() >= options_.threshold) return Pattern::kReplay;
  // Replay by position needs a longer look (its window, its progress check, then enough
  // scored accesses): with a last order to compare with, nothing else is named before.
  const uint64_t position_verdict =
      uint64_t{options_.spread_window} + options_.progress_accesses + options_.window;
  if (!previous_->empty() && count_ < position_verdict) return Pattern::kUnknown;
  if (sequential_score() >= options_.threshold) return Pattern::kSequential;
  return Pattern::kShuffled;
}

}  // namespace epochfs::prefetch
