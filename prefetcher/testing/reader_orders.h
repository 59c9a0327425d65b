// The order in which the daemon sees concurrent readers read a given order: for the
// classifier's and the prefetcher's tests of replays.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace epochfs::prefetch::testing {

// What `readers` threads that take the next file of `order` from one shared iterator
// are seen to read: each file is seen when its read starts or lands, which depends on
// how long the reader's previous files took (a cache hit or a source read). So files a
// few places apart swap, differently in every epoch. Deterministic per seed.
inline std::vector<uint32_t> SeenFromSharedReaders(const std::vector<uint32_t>& order, int readers,
                                                   uint32_t seed) {
  std::mt19937 rng(seed);
  std::exponential_distribution<double> service(1.0);
  std::vector<double> free_at(static_cast<size_t>(readers), 0.0);
  std::vector<std::pair<double, uint32_t>> seen;
  for (uint32_t file : order) {
    auto reader = std::min_element(free_at.begin(), free_at.end());
    const double took = service(rng);
    // Seen when its read lands (a miss) or when it starts (a hit), at random.
    seen.emplace_back(*reader + (rng() % 2 == 0 ? took : 0.0), file);
    *reader += took;
  }
  std::stable_sort(seen.begin(), seen.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<uint32_t> out;
  for (const auto& s : seen) out.push_back(s.second);
  return out;
}

// What a DataLoader's `workers` are seen to read: batch b goes to worker b % workers,
// each worker reads its batch's files one by one at a random pace, and starts a batch
// only once the loader consumed the one `workers * 2` before it (prefetch_factor 2), so
// no worker runs far ahead. Deterministic per seed.
inline std::vector<uint32_t> SeenFromDataLoader(const std::vector<uint32_t>& order, int workers,
                                                int batch, uint32_t seed) {
  std::mt19937 rng(seed);
  std::exponential_distribution<double> service(1.0);
  const size_t batches = (order.size() + batch - 1) / batch;
  std::vector<double> worker_free(static_cast<size_t>(workers), 0.0);
  std::vector<double> consumed(batches, 0.0);
  std::vector<std::pair<double, uint32_t>> seen;
  for (size_t b = 0; b < batches; ++b) {
    double& free_at = worker_free[b % workers];
    double t = free_at;
    if (b >= static_cast<size_t>(workers) * 2) t = std::max(t, consumed[b - workers * 2]);
    for (size_t i = b * batch; i < std::min(order.size(), (b + 1) * batch); ++i) {
      t += service(rng);
      seen.emplace_back(t, order[i]);
    }
    free_at = t;
    consumed[b] = std::max(b == 0 ? 0.0 : consumed[b - 1], t);
  }
  std::stable_sort(seen.begin(), seen.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<uint32_t> out;
  for (const auto& s : seen) out.push_back(s.second);
  return out;
}

}  // namespace epochfs::prefetch::testing
