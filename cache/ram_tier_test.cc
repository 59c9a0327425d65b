#include "cache/ram_tier.h"

#include <gtest/gtest.h>

#include <vector>

namespace epochfs::cache {
namespace {

SourceIdentity Id(uint64_t ino, int64_t mtime = 1) {
  return SourceIdentity{.dev = 1, .ino = ino, .size = 100, .mtime_ns = mtime, .ctime_ns = mtime};
}
ChunkKey Key(uint64_t ino, uint32_t chunk = 0) { return ChunkKey{1, ino, chunk}; }
ChunkBytes Bytes(size_t n, char fill = 'x') {
  std::string s(n, fill);
  s.shrink_to_fit();
  return ChunkBytes::Own(std::move(s));
}

TEST(RamTierTest, BudgetIsNeverExceeded) {
  // Entry footprints are what the buffers hold, which may exceed their size a little.
  const uint64_t budget = 10'000;
  RamTier tier(budget, NewLruPolicy());
  for (uint64_t i = 0; i < 100; ++i) {
    tier.Insert(Key(i), Id(i), Bytes(700 + i * 13));
    EXPECT_LE(tier.GetStats().bytes, budget);
  }
  EXPECT_GT(tier.GetStats().evictions, 0u);
  // An entry larger than the whole budget is refused outright.
  EXPECT_FALSE(tier.Insert(Key(1000), Id(1000), Bytes(budget + 1)));
  EXPECT_LE(tier.GetStats().bytes, budget);
}

TEST(RamTierTest, LruEvictsLeastRecentlyUsed) {
  ChunkBytes sample = Bytes(1000);
  RamTier tier(3 * RamTier::Charge(sample), NewLruPolicy());
  ASSERT_TRUE(tier.Insert(Key(1), Id(1), Bytes(1000)));
  ASSERT_TRUE(tier.Insert(Key(2), Id(2), Bytes(1000)));
  ASSERT_TRUE(tier.Insert(Key(3), Id(3), Bytes(1000)));
  ASSERT_TRUE(tier.Lookup(Key(1), Id(1)));  // 1 is now the most recent; 2 the least
  ASSERT_TRUE(tier.Insert(Key(4), Id(4), Bytes(1000)));
  EXPECT_TRUE(tier.Contains(Key(1)));
  EXPECT_FALSE(tier.Contains(Key(2)));
  EXPECT_TRUE(tier.Contains(Key(3)));
  EXPECT_TRUE(tier.Contains(Key(4)));
  EXPECT_EQ(tier.GetStats().evictions, 1u);
}

TEST(RamTierTest, StaticPolicyAdmitsNothingOnceFull) {
  ChunkBytes sample = Bytes(1000);
  RamTier tier(3 * RamTier::Charge(sample), NewStaticPolicy());
  for (uint64_t i = 1; i <= 3; ++i) ASSERT_TRUE(tier.Insert(Key(i), Id(i), Bytes(1000)));
  EXPECT_FALSE(tier.Insert(Key(4), Id(4), Bytes(1000)));
  for (uint64_t i = 1; i <= 3; ++i) EXPECT_TRUE(tier.Lookup(Key(i), Id(i)));
  EXPECT_FALSE(tier.Contains(Key(4)));
  EXPECT_EQ(tier.GetStats().evictions, 0u);
  // A stale entry leaves, which makes room again.
  EXPECT_FALSE(tier.Lookup(Key(2), Id(2, /*mtime=*/99)));
  EXPECT_TRUE(tier.Insert(Key(4), Id(4), Bytes(1000)));
}

TEST(RamTierTest, IdentityMismatchDropsTheEntry) {
  RamTier tier(1 << 20, NewLruPolicy());
  ASSERT_TRUE(tier.Insert(Key(1), Id(1), Bytes(100, 'a')));
  std::optional<ChunkBytes> hit = tier.Lookup(Key(1), Id(1));
  ASSERT_TRUE(hit);
  EXPECT_EQ(std::string(hit->data, hit->size), std::string(100, 'a'));
  EXPECT_FALSE(tier.Lookup(Key(1), Id(1, /*mtime=*/2)));
  EXPECT_EQ(tier.GetStats().stale, 1u);
  // Gone for the old identity too: the entry was dropped, not just hidden.
  EXPECT_FALSE(tier.Lookup(Key(1), Id(1)));
  EXPECT_EQ(tier.GetStats().entries, 0u);
  EXPECT_EQ(tier.GetStats().bytes, 0u);
  // The bytes handed out before stay valid.
  EXPECT_EQ(hit->data[99], 'a');
}

TEST(RamTierTest, EraseFileDropsEveryChunkOfThatFileOnly) {
  RamTier tier(1 << 20, NewLruPolicy());
  for (uint32_t c = 0; c < 4; ++c) ASSERT_TRUE(tier.Insert(Key(5, c), Id(5), Bytes(10)));
  ASSERT_TRUE(tier.Insert(Key(4), Id(4), Bytes(10)));
  ASSERT_TRUE(tier.Insert(Key(6), Id(6), Bytes(10)));
  tier.EraseFile(1, 5);
  for (uint32_t c = 0; c < 4; ++c) EXPECT_FALSE(tier.Contains(Key(5, c)));
  EXPECT_TRUE(tier.Contains(Key(4)));
  EXPECT_TRUE(tier.Contains(Key(6)));
  EXPECT_EQ(tier.GetStats().entries, 2u);
}

// Each entry is charged its bookkeeping too: 10,000 files of 100 bytes do not fit in
// 1 MB (their bytes alone would).
TEST(RamTierTest, SmallEntriesAreChargedTheirBookkeeping) {
  RamTier tier(1'000'000, NewLruPolicy());
  for (uint64_t i = 0; i < 10'000; ++i) tier.Insert(Key(i), Id(i), Bytes(100));
  const RamTier::Stats s = tier.GetStats();
  EXPECT_LE(s.bytes, 1'000'000u);
  EXPECT_LE(s.entries, 1'000'000u / (100 + RamTier::kEntryOverheadBytes));
  EXPECT_GT(s.evictions, 0u);
}

TEST(RamTierTest, InsertIfRoomNeverEvictsOrReplaces) {
  ChunkBytes sample = Bytes(1000);
  RamTier tier(2 * RamTier::Charge(sample), NewLruPolicy());
  ASSERT_TRUE(tier.InsertIfRoom(Key(1), Id(1), Bytes(1000, 'a')));
  EXPECT_FALSE(tier.InsertIfRoom(Key(1), Id(1), Bytes(1000, 'b')));
  ASSERT_TRUE(tier.InsertIfRoom(Key(2), Id(2), Bytes(1000)));
  EXPECT_FALSE(tier.InsertIfRoom(Key(3), Id(3), Bytes(1000)));
  EXPECT_EQ(tier.GetStats().evictions, 0u);
  EXPECT_EQ(tier.Lookup(Key(1), Id(1))->data[0], 'a');
}

// Bytes moved into the kernel's page cache stay charged, as whole pages, until the
// policy lets them go; then the kernel is told to drop them, once per file, and not
// under the tier's lock (the callback takes the tier again).
TEST(RamTierTest, KernelEntriesAreChargedAsPagesAndDroppedWhenTheyLeave) {
  std::vector<uint64_t> dropped;
  RamTier* self = nullptr;
  const uint64_t budget = 3 * RamTier::KernelCharge(5000);
  RamTier tier(budget, NewLruPolicy(), [&](uint64_t dev, uint64_t ino) {
    EXPECT_EQ(dev, 1u);
    EXPECT_FALSE(self->Contains(Key(ino)));  // would deadlock if called under the lock
    dropped.push_back(ino);
  });
  self = &tier;
  ASSERT_TRUE(tier.Insert(Key(1), Id(1), Bytes(5000)));
  auto bytes = tier.TakeForKernel(Key(1), Id(1));
  ASSERT_TRUE(bytes);
  EXPECT_EQ(bytes->size, 5000u);
  EXPECT_FALSE(tier.TakeForKernel(Key(1), Id(1)));  // moved already
  EXPECT_TRUE(tier.HoldsKernelEntry(Key(1), Id(1)));
  EXPECT_FALSE(tier.HoldsBytes(Key(1), Id(1)));
  EXPECT_TRUE(tier.Contains(Key(1)));
  auto s = tier.GetStats();
  EXPECT_EQ(s.kernel_bytes, RamTier::KernelCharge(5000));  // 8192 + bookkeeping
  EXPECT_EQ(s.bytes, s.kernel_bytes);
  EXPECT_EQ(s.kernel_entries, 1u);
  // Three more entries of the same charge: the oldest, the kernel entry, is evicted.
  for (uint64_t ino = 2; ino <= 4; ++ino) {
    ASSERT_TRUE(tier.Insert(Key(ino), Id(ino), Bytes(5000)));
    ASSERT_TRUE(tier.TakeForKernel(Key(ino), Id(ino)));
    EXPECT_LE(tier.GetStats().bytes, budget);
  }
  EXPECT_EQ(dropped, std::vector<uint64_t>{1});
  s = tier.GetStats();
  EXPECT_EQ(s.kernel_entries, 3u);
  EXPECT_EQ(s.kernel_drops, 1u);
  // Erasing a file or finding it stale drops its pages too.
  tier.EraseFile(1, 2);
  EXPECT_FALSE(tier.Lookup(Key(3), Id(3, /*mtime=*/2)));
  EXPECT_EQ(dropped, (std::vector<uint64_t>{1, 2, 3}));
}

// A kernel entry made for bytes the tier never held (pushed straight from a stream) is
// charged, admitted and let go of as a moved entry is: within the budget, its pages
// dropped when it is evicted; one larger than the budget is refused; a read's fill
// replaces it without a drop.
TEST(RamTierTest, AKernelEntryInsertedForBytesPushedElsewhereIsChargedAndDroppedLikeAMovedOne) {
  std::vector<uint64_t> dropped;
  const uint64_t budget = 2 * RamTier::KernelCharge(5000);
  RamTier tier(budget, NewLruPolicy(), [&](uint64_t, uint64_t ino) { dropped.push_back(ino); });
  ASSERT_TRUE(tier.InsertKernelEntry(Key(1), Id(1), 5000));
  EXPECT_TRUE(tier.HoldsKernelEntry(Key(1), Id(1)));
  EXPECT_FALSE(tier.HoldsBytes(Key(1), Id(1)));
  auto s = tier.GetStats();
  EXPECT_EQ(s.kernel_bytes, RamTier::KernelCharge(5000));
  EXPECT_EQ(s.bytes, s.kernel_bytes);
  EXPECT_EQ(s.kernel_entries, 1u);
  EXPECT_FALSE(tier.InsertKernelEntry(Key(9), Id(9), budget));  // larger than the budget
  ASSERT_TRUE(tier.InsertKernelEntry(Key(2), Id(2), 5000));
  ASSERT_TRUE(tier.InsertKernelEntry(Key(3), Id(3), 5000));  // 1, the oldest, goes
  EXPECT_LE(tier.GetStats().bytes, budget);
  EXPECT_EQ(dropped, std::vector<uint64_t>{1});
  ASSERT_TRUE(tier.Insert(Key(2), Id(2), Bytes(5000)));  // a READ's fill: the kernel lost it
  EXPECT_TRUE(tier.HoldsBytes(Key(2), Id(2)));
  EXPECT_EQ(dropped, std::vector<uint64_t>{1});
  // One whose store failed is forgotten without a drop.
  ASSERT_TRUE(tier.InsertKernelEntry(Key(4), Id(4), 5000));
  tier.ForgetKernelEntry(Key(4), Id(4));
  EXPECT_FALSE(tier.Contains(Key(4)));
  EXPECT_EQ(dropped.size(), 2u);  // 1, and 3 evicted to make room for 4
  // Without a way to drop pages, no kernel entry is made.
  RamTier no_drops(budget, NewLruPolicy());
  EXPECT_FALSE(no_drops.InsertKernelEntry(Key(1), Id(1), 5000));
}

// A kernel entry is charged whole pages, more than the bytes it replaces: moving an
// entry into the kernel makes room as an insert would (the oldest entry goes, its
// pages dropped), and when nothing but the entry itself could go, it stays in RAM.
TEST(RamTierTest, MovingIntoTheKernelNeverTakesTheTierPastItsBudget) {
  std::vector<uint64_t> dropped;
  const uint64_t budget = 2 * RamTier::Charge(Bytes(5000)) + RamTier::Charge(Bytes(1000));
  RamTier tier(budget, NewLruPolicy(), [&](uint64_t, uint64_t ino) { dropped.push_back(ino); });
  ASSERT_TRUE(tier.Insert(Key(1), Id(1), Bytes(5000)));
  ASSERT_TRUE(tier.Insert(Key(2), Id(2), Bytes(5000)));
  ASSERT_TRUE(tier.Insert(Key(3), Id(3), Bytes(1000)));
  ASSERT_GT(RamTier::KernelCharge(5000), RamTier::Charge(Bytes(5000)));
  ASSERT_TRUE(tier.TakeForKernel(Key(2), Id(2)));  // 1, the least recent, makes room
  EXPECT_LE(tier.GetStats().bytes, budget);
  EXPECT_FALSE(tier.Contains(Key(1)));
  EXPECT_TRUE(tier.HoldsKernelEntry(Key(2), Id(2)));
  // Alone in a tier of its own size, an entry has nothing to make room with.
  RamTier small(RamTier::Charge(Bytes(5000)), NewLruPolicy(), [](uint64_t, uint64_t) {});
  ASSERT_TRUE(small.Insert(Key(1), Id(1), Bytes(5000)));
  EXPECT_FALSE(small.TakeForKernel(Key(1), Id(1)));
  EXPECT_TRUE(small.HoldsBytes(Key(1), Id(1)));
  EXPECT_LE(small.GetStats().bytes, RamTier::Charge(Bytes(5000)));
  EXPECT_TRUE(dropped.empty());  // 1 was an entry with bytes: no pages to drop
}

// A read that reaches the daemon for a moved chunk means the kernel lost its pages: the
// kernel entry is forgotten without a drop, and the read's fill replaces it.
TEST(RamTierTest, AKernelEntryMissesAndIsForgottenWithoutADrop) {
  int drops = 0;
  RamTier tier(1 << 20, NewLruPolicy(), [&](uint64_t, uint64_t) { ++drops; });
  ASSERT_TRUE(tier.Insert(Key(1), Id(1), Bytes(5000)));
  ASSERT_TRUE(tier.TakeForKernel(Key(1), Id(1)));
  EXPECT_FALSE(tier.Lookup(Key(1), Id(1)));
  EXPECT_FALSE(tier.Contains(Key(1)));
  ASSERT_TRUE(tier.Insert(Key(2), Id(2), Bytes(5000)));
  ASSERT_TRUE(tier.TakeForKernel(Key(2), Id(2)));
  ASSERT_TRUE(tier.Insert(Key(2), Id(2), Bytes(5000, 'y')));
  EXPECT_TRUE(tier.HoldsBytes(Key(2), Id(2)));
  EXPECT_EQ(drops, 0);
  EXPECT_EQ(tier.GetStats().kernel_entries, 0u);
  EXPECT_EQ(tier.GetStats().kernel_bytes, 0u);
}

// A push that failed gives the bytes back: the entry serves hits again.
TEST(RamTierTest, ReturnFromKernelRestoresTheBytes) {
  RamTier tier(1 << 20, NewLruPolicy(), [](uint64_t, uint64_t) {});
  ASSERT_TRUE(tier.Insert(Key(1), Id(1), Bytes(5000, 'z')));
  auto bytes = tier.TakeForKernel(Key(1), Id(1));
  ASSERT_TRUE(bytes);
  tier.ReturnFromKernel(Key(1), Id(1), std::move(*bytes));
  auto hit = tier.Lookup(Key(1), Id(1));
  ASSERT_TRUE(hit);
  EXPECT_EQ(std::string(hit->data, hit->size), std::string(5000, 'z'));
  EXPECT_EQ(tier.GetStats().kernel_entries, 0u);
}

// With no memory limit the kernel gets a copy and the tier keeps its bytes: a file is
// copied once, and again only after a read reached the daemon (the kernel lost it).
TEST(RamTierTest, ACopyForTheKernelKeepsTheBytesAndIsMadeOnceUntilARead) {
  RamTier tier(1 << 20, NewLruPolicy(), [](uint64_t, uint64_t) { FAIL() << "no drop"; });
  ASSERT_TRUE(tier.Insert(Key(1), Id(1), Bytes(5000, 'c')));
  const uint64_t charged = tier.GetStats().bytes;
  EXPECT_TRUE(tier.CopyPending(Key(1), Id(1)));
  ASSERT_TRUE(tier.TakeCopyForKernel(Key(1), Id(1)));
  EXPECT_FALSE(tier.CopyPending(Key(1), Id(1)));
  EXPECT_FALSE(tier.TakeCopyForKernel(Key(1), Id(1)));  // copied already
  EXPECT_TRUE(tier.HoldsBytes(Key(1), Id(1)));
  EXPECT_EQ(tier.GetStats().bytes, charged);
  EXPECT_EQ(tier.GetStats().kernel_entries, 0u);
  ASSERT_TRUE(tier.Lookup(Key(1), Id(1)));  // a read: the kernel's copy is gone
  EXPECT_TRUE(tier.TakeCopyForKernel(Key(1), Id(1)));
  tier.CopyNotTaken(Key(1), Id(1));  // the kernel refused it (no inode yet)
  EXPECT_TRUE(tier.TakeCopyForKernel(Key(1), Id(1)));
  EXPECT_FALSE(tier.TakeCopyForKernel(Key(1), Id(2)));  // another identity: nothing
}


// A budget lowered below what the tier holds is kept at once: the policy's victims go
// (kernel entries with their pages dropped), and where the policy names none (the
// static policy never does) they go in key order all the same. Raised, it admits more.
TEST(RamTierTest, ALoweredBudgetEvictsAtOnceAndARaisedOneAdmitsMore) {
  ChunkBytes sample = Bytes(4096);  // a whole page: pushing it costs no more room
  const uint64_t charge = RamTier::Charge(sample);
  std::vector<uint64_t> dropped;
  RamTier tier(4 * charge, NewLruPolicy(), [&](uint64_t, uint64_t ino) { dropped.push_back(ino); });
  for (uint64_t i = 1; i <= 4; ++i) ASSERT_TRUE(tier.Insert(Key(i), Id(i), Bytes(4096)));
  ASSERT_TRUE(tier.TakeForKernel(Key(1), Id(1)));  // 1, the least recent, is in the kernel
  EXPECT_EQ(tier.budget(), 4 * charge);

  tier.SetBudget(2 * charge);
  RamTier::Stats s = tier.GetStats();
  EXPECT_LE(s.bytes, 2 * charge);
  EXPECT_EQ(s.budget, 2 * charge);
  EXPECT_EQ(s.evictions, 2u);
  EXPECT_FALSE(tier.Contains(Key(2)));  // least recent first (the push made 1 recent)
  EXPECT_FALSE(tier.Contains(Key(3)));
  EXPECT_FALSE(tier.HasRoomFor(4096));
  tier.SetBudget(charge);
  EXPECT_FALSE(tier.Contains(Key(4)));
  EXPECT_TRUE(tier.Contains(Key(1)));
  EXPECT_TRUE(dropped.empty());
  tier.SetBudget(0);
  EXPECT_EQ(tier.GetStats().entries, 0u);
  EXPECT_EQ(dropped, std::vector<uint64_t>{1});  // the pushed one's pages, dropped

  tier.SetBudget(5 * charge);
  for (uint64_t i = 5; i <= 9; ++i) ASSERT_TRUE(tier.Insert(Key(i), Id(i), Bytes(4096)));
  EXPECT_EQ(tier.GetStats().evictions, 4u);
  EXPECT_EQ(tier.GetStats().entries, 5u);

  RamTier fixed(3 * charge, NewStaticPolicy());
  for (uint64_t i = 1; i <= 3; ++i) ASSERT_TRUE(fixed.Insert(Key(i), Id(i), Bytes(4096)));
  fixed.SetBudget(charge);
  EXPECT_LE(fixed.GetStats().bytes, charge);
  fixed.SetBudget(0);
  EXPECT_EQ(fixed.GetStats().entries, 0u);
  EXPECT_FALSE(fixed.Insert(Key(9), Id(9), Bytes(1)));
}

}  // namespace
}  // namespace epochfs::cache
