// OrderIndex: the files of one epoch in the order they were first read, and each
// file's place in that order.
//
// The prefetcher fills one as an epoch is read (it is also its set of files read this
// epoch), and at the epoch's end hands it on, unchanged and shared, to the classifier
// (is the next epoch a replay?), to its own replay readahead, and to the RAM policy
// (rank by the next run of that order). Built once, as the reads come, rather than
// rebuilt by each of them at the epoch boundary under the prefetcher's lock:
// docs/benchmarks.md, "The epoch boundary at a million files".
//
// Thread-safety: none while filled; a const one is safe to share.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "prefetcher/prefetcher.h"

namespace epochfs::prefetch {

class OrderIndex {
 public:
  OrderIndex() = default;
  // The files of `order`, each at its first place (later repeats are left out).
  explicit OrderIndex(const std::vector<FileKey>& order) {
    for (const FileKey& file : order) Append(file);
  }

  // Adds `file` at the end unless it is in the order already; whether it was added.
  bool Append(const FileKey& file) {
    if (!position_.emplace(file, static_cast<uint32_t>(order_.size())).second) return false;
    order_.push_back(file);
    return true;
  }
  std::optional<uint32_t> Position(const FileKey& file) const {
    auto it = position_.find(file);
    if (it == position_.end()) return std::nullopt;
    return it->second;
  }
  bool Contains(const FileKey& file) const { return position_.count(file) != 0; }
  const std::vector<FileKey>& order() const { return order_; }
  size_t size() const { return order_.size(); }
  bool empty() const { return order_.empty(); }

 private:
  std::vector<FileKey> order_;
  std::unordered_map<FileKey, uint32_t, FileKeyHash> position_;
};

}  // namespace epochfs::prefetch
