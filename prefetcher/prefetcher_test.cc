// The Prefetcher's epoch tracking and pattern, with readahead off (no cache IO).
#include "prefetcher/prefetcher.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>

namespace epochfs::prefetch {
namespace {

std::unique_ptr<Prefetcher> Tracker() {
  PrefetcherOptions o;
  o.enabled = false;  // no workers: Cache is never called
  return Prefetcher::Create(std::move(o), nullptr, Prefetcher::NewPolicy(1 << 20));
}

void Access(Prefetcher& p, uint32_t i) {
  char path[32];
  std::snprintf(path, sizeof(path), "d/%06u.jpg", i);
  p.OnRead(FileKey{1, 100 + i}, path, 0);
  p.DemandDone();
}

TEST(Prefetcher, EpochsAreCountedAndPatternsNamed) {
  auto p = Tracker();
  const uint32_t n = 1000;
  for (uint32_t i = 0; i < n; ++i) Access(*p, i);
  EXPECT_EQ(p->Stats().epoch, 0u);
  EXPECT_EQ(p->Stats().pattern, Pattern::kSequential);
  // Later reads of a file (offset > 0) are not accesses and do not end the epoch.
  p->OnRead(FileKey{1, 100}, "", 4096);
  p->DemandDone();
  EXPECT_EQ(p->Stats().epoch, 0u);

  // A shuffled epoch: the first repeat starts epoch 1.
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  std::shuffle(order.begin(), order.end(), std::mt19937(3));
  for (uint32_t i : order) Access(*p, i);
  EXPECT_EQ(p->Stats().epoch, 1u);
  EXPECT_EQ(p->Stats().epoch_accesses, n);
  EXPECT_EQ(p->Stats().pattern, Pattern::kShuffled);

  // The same order again: replay. A re-read inside the epoch (well before it covered
  // the last one) is not a boundary.
  for (uint32_t k = 0; k < n; ++k) {
    Access(*p, order[k]);
    if (k == 100) Access(*p, order[0]);
  }
  EXPECT_EQ(p->Stats().epoch, 2u);
  EXPECT_EQ(p->Stats().epoch_accesses, n);
  EXPECT_EQ(p->Stats().pattern, Pattern::kReplay);
}

TEST(Prefetcher, PublishedPlanStartsAnEpochAndTracksPosition) {
  auto p = Tracker();
  std::vector<PlannedFile> plan;
  for (uint32_t i = 0; i < 10; ++i) {
    plan.push_back(PlannedFile{"d/" + std::to_string(i), FileKey{1, 100 + i}, 10});
  }
  p->Publish(plan);
  auto s = p->Stats();
  EXPECT_EQ(s.pattern, Pattern::kPublished);
  EXPECT_EQ(s.plan_entries, 10u);
  EXPECT_EQ(s.plans_published, 1u);
  EXPECT_EQ(s.epoch, 1u);
  Access(*p, 3);
  Access(*p, 1);
  EXPECT_EQ(p->Stats().plan_position, 3u);
}

}  // namespace
}  // namespace epochfs::prefetch
