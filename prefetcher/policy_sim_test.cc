// The policy simulator: exact hits on hand-computed sequences, and the theory on large
// random permutations (DESIGN: LRU c*c/2, static c, remaining-set c + c ln(1/c),
// published order ~1).
#include "prefetcher/policy_sim.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

namespace epochfs::prefetch {
namespace {

std::vector<uint64_t> Hits(const std::vector<SimEpoch>& epochs) {
  std::vector<uint64_t> out;
  for (const auto& e : epochs) out.push_back(e.hits);
  return out;
}
std::vector<uint64_t> Fetches(const std::vector<SimEpoch>& epochs) {
  std::vector<uint64_t> out;
  for (const auto& e : epochs) out.push_back(e.source_fetches);
  return out;
}

TEST(PolicySim, HandComputedSmallCases) {
  const std::vector<std::vector<uint32_t>> twice = {{0, 1, 2}, {0, 1, 2}};
  // LRU with room for 2 of 3 evicts exactly what comes next: never a hit.
  EXPECT_EQ(Hits(Simulate(SimPolicy::kLru, twice, {.capacity = 2})),
            (std::vector<uint64_t>{0, 0}));
  // Static keeps the first two.
  EXPECT_EQ(Hits(Simulate(SimPolicy::kStatic, twice, {.capacity = 2})),
            (std::vector<uint64_t>{0, 2}));
  // Epoch-aware without readahead: a file already read never evicts: static.
  auto aware = Simulate(SimPolicy::kEpochAware, twice, {.capacity = 2});
  EXPECT_EQ(Hits(aware), (std::vector<uint64_t>{0, 2}));
  EXPECT_EQ(Fetches(aware), (std::vector<uint64_t>{3, 1}));

  // With one readahead per read. Epoch 1: 0 misses, then 1, 2, 3 are each fetched
  // ahead (evicting the oldest read file) and hit. Epoch 2 (3 2 1 0): 3 and 2 are
  // cached; after each hit the next unread file in id order (0, then 1) replaces it.
  const std::vector<std::vector<uint32_t>> two = {{0, 1, 2, 3}, {3, 2, 1, 0}};
  auto ahead = Simulate(SimPolicy::kEpochAware, two, {.capacity = 2, .prefetch_per_read = 1});
  EXPECT_EQ(Hits(ahead), (std::vector<uint64_t>{3, 4}));
  EXPECT_EQ(Fetches(ahead), (std::vector<uint64_t>{4, 2}));

  // Published order with room for 1: epoch 1 misses its first file, then each read
  // fetches the next planned file, evicting the one just read. Epoch 2 begins with the
  // file epoch 1 ended on, still cached: every read hits.
  const std::vector<std::vector<uint32_t>> plan = {{2, 0, 1}, {1, 2, 0}};
  auto pub = Simulate(SimPolicy::kPublished, plan, {.capacity = 1, .prefetch_per_read = 1});
  EXPECT_EQ(Hits(pub), (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(Fetches(pub), (std::vector<uint64_t>{3, 2}));
}

std::vector<std::vector<uint32_t>> RandomEpochs(uint32_t n, int epochs, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<uint32_t>> out;
  for (int e = 0; e < epochs; ++e) {
    std::vector<uint32_t> order(n);
    std::iota(order.begin(), order.end(), 0u);
    std::shuffle(order.begin(), order.end(), rng);
    out.push_back(std::move(order));
  }
  return out;
}

// Mean hit ratio over the steady-state epochs (all but the first two).
double SteadyHitRatio(const std::vector<SimEpoch>& epochs, uint32_t n) {
  double sum = 0;
  for (size_t i = 2; i < epochs.size(); ++i) sum += static_cast<double>(epochs[i].hits) / n;
  return sum / static_cast<double>(epochs.size() - 2);
}
double SteadyFetchRatio(const std::vector<SimEpoch>& epochs, uint32_t n) {
  double sum = 0;
  for (size_t i = 2; i < epochs.size(); ++i) {
    sum += static_cast<double>(epochs[i].source_fetches) / n;
  }
  return sum / static_cast<double>(epochs.size() - 2);
}

class Theory : public ::testing::TestWithParam<double> {};

TEST_P(Theory, MatchesTheLinesOfTheDesign) {
  const uint32_t n = 4000;
  const double c = GetParam();
  const auto epochs = RandomEpochs(n, 6, 42);
  const SimOptions demand{.capacity = static_cast<uint32_t>(c * n)};
  const SimOptions ahead{.capacity = static_cast<uint32_t>(c * n), .prefetch_per_read = 1.0};

  const double lru = SteadyHitRatio(Simulate(SimPolicy::kLru, epochs, demand), n);
  const double fixed = SteadyHitRatio(Simulate(SimPolicy::kStatic, epochs, demand), n);
  const auto aware_epochs = Simulate(SimPolicy::kEpochAware, epochs, ahead);
  const double aware = SteadyHitRatio(aware_epochs, n);
  const auto pub_epochs = Simulate(SimPolicy::kPublished, epochs, ahead);
  const double pub = SteadyHitRatio(pub_epochs, n);
  std::printf("c=%.2f lru=%.3f (c*c/2=%.3f) static=%.3f aware=%.3f (c+c ln(1/c)=%.3f) "
              "published=%.3f; source/epoch aware=%.3f published=%.3f\n",
              c, lru, c * c / 2, fixed, aware, c + c * std::log(1 / c), pub,
              SteadyFetchRatio(aware_epochs, n), SteadyFetchRatio(pub_epochs, n));
  // c*c/2 counts reads, not distinct files, between two reads of a file; LRU's stack
  // distance is the distinct count, which the overlap of two epochs makes smaller as c
  // grows (0.40 at c = 0.75 here). So: close to c*c/2 for small c, and always below c.
  if (c <= 0.5) {
    EXPECT_NEAR(lru, c * c / 2, 0.05);
  }
  EXPECT_LT(lru, fixed - 0.2);
  EXPECT_LT(fixed, aware);
  EXPECT_NEAR(fixed, c, 0.03);
  EXPECT_NEAR(aware, c + c * std::log(1 / c), 0.04);
  EXPECT_GE(pub, 0.95);
  // Whatever the policy, at least (1 - c) of the data set comes from the source.
  EXPECT_GE(SteadyFetchRatio(aware_epochs, n), 1 - c - 0.01);
  EXPECT_LE(SteadyFetchRatio(aware_epochs, n), 1 - c + 0.05);
}

INSTANTIATE_TEST_SUITE_P(CacheFractions, Theory, ::testing::Values(0.25, 0.5, 0.75));

}  // namespace
}  // namespace epochfs::prefetch
