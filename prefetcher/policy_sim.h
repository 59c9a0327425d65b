// A deterministic simulator of the RAM tier's eviction policies on unit-size files:
// given epochs (each an order of file ids) and a capacity (files), the exact hits and
// source fetches per epoch. It drives the real policy classes (cache/eviction.h's LRU
// and static, this folder's EpochPolicy) through the same calls the RAM tier makes, and
// models readahead as the Prefetcher does it: after each read, up to
// `prefetch_per_read` files (fractions accumulate) are fetched in the policy's order,
// each only if the policy would admit it.
//
// Thread-safety: none needed; pure functions.
#pragma once

#include <cstdint>
#include <vector>

namespace epochfs::prefetch {

enum class SimPolicy : uint8_t {
  kLru,         // demand only, LRU
  kStatic,      // demand only, admit until full
  kEpochAware,  // EpochPolicy, no plan; readahead of unread files in id order
  kPublished,   // EpochPolicy with each epoch's order published; readahead in that order
};

struct SimOptions {
  uint32_t capacity = 0;            // files
  double prefetch_per_read = 0.0;   // readahead fetches allowed per read (bandwidth)
};

struct SimEpoch {
  uint64_t hits = 0;
  uint64_t source_fetches = 0;  // demand misses + readahead fetches
};

std::vector<SimEpoch> Simulate(SimPolicy policy, const std::vector<std::vector<uint32_t>>& epochs,
                               const SimOptions& options);

}  // namespace epochfs::prefetch
