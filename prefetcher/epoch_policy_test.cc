// EpochPolicy's ranks: read files first, then unplanned, then the plan by position; a
// plan that runs on into the next epoch keeps a read file by its next position.
#include "prefetcher/epoch_policy.h"

#include <gtest/gtest.h>

#include <vector>

namespace epochfs::prefetch {
namespace {

FileKey F(uint64_t ino) { return FileKey{1, ino}; }
cache::ChunkKey C(uint64_t ino) { return cache::ChunkKey{1, ino, 0}; }

// Evicts everything, returning the inodes in eviction order.
std::vector<uint64_t> EvictionOrder(EpochPolicy& policy) {
  std::vector<uint64_t> order;
  while (auto victim = policy.Victim()) {
    order.push_back(victim->ino);
    policy.OnErase(*victim);
  }
  return order;
}

TEST(EpochPolicy, ReadFilesGoFirstThenUnplannedThenTheFurthestPlanned) {
  EpochPolicy policy(4 * 100);
  policy.SetPlan({F(1), F(2), F(3)});
  for (uint64_t ino : {1, 2, 3, 4}) policy.OnInsert(C(ino), 100);
  policy.MarkRead(F(1));
  // 1 read (spent), 4 unplanned, then 3 before 2 (needed later).
  EXPECT_EQ(EvictionOrder(policy), (std::vector<uint64_t>{1, 4, 3, 2}));
}

TEST(EpochPolicy, APlanIntoTheNextEpochKeepsAReadFileByItsNextPosition) {
  // This epoch: 1 2 3; the next: 3 1 4. File 2 is not read again.
  EpochPolicy policy(3 * 100);
  policy.SetPlan({F(1), F(2), F(3), F(3), F(1), F(4)});
  for (uint64_t ino : {1, 2, 3}) policy.OnInsert(C(ino), 100);
  policy.MarkRead(F(1));
  policy.MarkRead(F(2));
  // Full: 4 (position 5) may not evict 1 (next read at 4) or 3 (unread, 2), but may
  // take the place of 2, spent.
  EXPECT_TRUE(policy.AdmitWhenFull(C(4), 100));
  EXPECT_TRUE(policy.WouldAdmit(F(4), 100));
  EXPECT_EQ(policy.Displaceable(F(4), 10), 1u);
  // A spent file evicts nothing, even a worse one; a read file with a next use may.
  EXPECT_FALSE(policy.AdmitWhenFull(C(2), 100));
  EXPECT_EQ(policy.Displaceable(F(2), 10), 0u);
  EXPECT_TRUE(policy.AdmitWhenFull(C(1), 100));
  EXPECT_EQ(EvictionOrder(policy), (std::vector<uint64_t>{2, 1, 3}));

  // A new epoch forgets the reads; the next plan ranks afresh.
  policy.NewEpoch();
  policy.SetPlan({F(3), F(1), F(4)});
  for (uint64_t ino : {1, 2, 3}) policy.OnInsert(C(ino), 100);
  EXPECT_EQ(EvictionOrder(policy), (std::vector<uint64_t>{2, 1, 3}));
}

// A replay: a file read ranks by its place in the order's next run, as if a plan named
// it twice; nothing in it is spent.
TEST(EpochPolicy, AReplayRanksAReadFileByItsPlaceInTheNextRun) {
  EpochPolicy policy(4 * 100);
  policy.RankByReplay(std::make_shared<const OrderIndex>(std::vector<FileKey>{F(1), F(2), F(3), F(4)}));
  for (uint64_t ino : {1, 2, 3, 4}) policy.OnInsert(C(ino), 100);
  policy.MarkRead(F(1));
  policy.MarkRead(F(2));
  // 2 is read next at 5, 1 at 4; unread 4 and 3 come before either.
  EXPECT_EQ(EvictionOrder(policy), (std::vector<uint64_t>{2, 1, 4, 3}));
  for (uint64_t ino : {1, 2, 3, 4}) policy.OnInsert(C(ino), 100);
  // Full: a read file not in the order is spent and evicts nothing; one in it may take
  // the place of a file read later.
  policy.MarkRead(F(5));
  EXPECT_FALSE(policy.AdmitWhenFull(C(5), 100));
  EXPECT_TRUE(policy.AdmitWhenFull(C(1), 100));
  // Cleared, read files go first again, oldest read first.
  policy.RankByReplay(nullptr);
  EXPECT_EQ(EvictionOrder(policy), (std::vector<uint64_t>{1, 2, 4, 3}));
  // A published plan replaces the replay ranking.
  policy.RankByReplay(std::make_shared<const OrderIndex>(std::vector<FileKey>{F(1), F(2), F(3), F(4)}));
  policy.SetPlan({F(3)});
  for (uint64_t ino : {1, 2, 3, 4}) policy.OnInsert(C(ino), 100);
  EXPECT_EQ(EvictionOrder(policy), (std::vector<uint64_t>{1, 2, 4, 3}));
}

TEST(EpochPolicy, ReadsMarkedWhileNoDecisionNeededRanksStillCount) {
  // Room for 4: the first reads only mark their files (no decision needs ranks yet).
  EpochPolicy policy(4 * 100);
  for (uint64_t ino : {1, 2, 3}) policy.OnInsert(C(ino), 100);
  policy.MarkRead(F(2));
  policy.MarkRead(F(3));
  EXPECT_EQ(policy.Displaceable(F(9), 1), 1u);  // free room: no ranks needed
  policy.OnInsert(C(4), 100);
  // Full now: the first decision by rank sees both reads (oldest read first).
  EXPECT_TRUE(policy.AdmitWhenFull(C(5), 100));
  EXPECT_EQ(policy.Displaceable(F(9), 10), 2u);
  // From here, each read reranks its file at once.
  policy.MarkRead(F(4));
  EXPECT_EQ(policy.Displaceable(F(9), 10), 3u);
  EXPECT_EQ(EvictionOrder(policy), (std::vector<uint64_t>{2, 3, 4, 1}));

  // A new epoch: every file unread again, and the plan (set lazily too) ranks them.
  policy.NewEpoch();
  for (uint64_t ino : {1, 2, 3, 4}) policy.OnInsert(C(ino), 100);
  policy.SetPlan({F(4), F(3), F(2), F(1)});
  policy.MarkRead(F(4));
  EXPECT_EQ(EvictionOrder(policy), (std::vector<uint64_t>{4, 1, 2, 3}));
}

// The tier's budget moves (daemon/ram_balancer.h): readahead's room follows it.
TEST(EpochPolicy, RoomFollowsTheTiersBudget) {
  EpochPolicy policy(2 * 100);
  policy.OnInsert(C(1), 100);
  policy.OnInsert(C(2), 100);
  // Full of unplanned unread files, which another of the same rank may not displace.
  EXPECT_EQ(policy.Displaceable(F(9), 10), 0u);
  EXPECT_FALSE(policy.WouldAdmit(F(9), 100));
  policy.OnBudget(5 * 100);
  EXPECT_TRUE(policy.WouldAdmit(F(9), 300));
  EXPECT_FALSE(policy.WouldAdmit(F(9), 301));
  EXPECT_EQ(policy.Displaceable(F(9), 10), 3u);  // room for three of the average 100 bytes
  policy.OnBudget(100);
  EXPECT_EQ(policy.Displaceable(F(9), 10), 0u);
  EXPECT_FALSE(policy.WouldAdmit(F(9), 1));
}

}  // namespace
}  // namespace epochfs::prefetch
