#include "prefetcher/classifier.h"

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

void Classifier::NewEpoch(const std::vector<FileKey>& previous) {
  count_ = scored_ = sequential_hits_ = replay_hits_ = 0;
  seen_paths_.clear();
  seen_.clear();
  previous_ = previous;
  previous_rank_.clear();
  previous_rank_.reserve(previous_.size());
  for (size_t i = 0; i < previous_.size(); ++i) previous_rank_.emplace(previous_[i], i);
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
    if (score && in_order) ++sequential_hits_;
    seen_paths_.emplace(path, index);
  }
  if (auto it = previous_rank_.find(file); it != previous_rank_.end()) {
    bool in_order = it->second == 0;
    if (!in_order) {
      auto pred = seen_.find(previous_[it->second - 1]);
      in_order = pred != seen_.end() && pred->second >= recent;
    }
    if (score && in_order) ++replay_hits_;
  }
  seen_[file] = index;
}

double Classifier::sequential_score() const {
  return scored_ == 0 ? 0.0 : static_cast<double>(sequential_hits_) / scored_;
}
double Classifier::replay_score() const {
  return scored_ == 0 ? 0.0 : static_cast<double>(replay_hits_) / scored_;
}

Pattern Classifier::pattern() const {
  if (count_ < options_.min_accesses) return Pattern::kUnknown;
  if (replay_score() >= options_.threshold) return Pattern::kReplay;
  if (sequential_score() >= options_.threshold) return Pattern::kSequential;
  return Pattern::kShuffled;
}

}  // namespace epochfs::prefetch
