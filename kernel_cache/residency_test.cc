#include "kernel_cache/residency.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/inode_table.h"
#include "fs/testing/fake_inodes.h"

namespace epochfs::kernel_cache {
namespace {

using fs::InodeTable;
using fs::MountChange;

using epochfs::testing::FakeStat;
using epochfs::testing::MakeTable;

TEST(Residency, AFileIsHeldWholeOnceReadsCoverItFromTheStart) {
  InodeTable table = MakeTable();
  Residency residency;
  residency.SetBudget(/*budget=*/1000, /*count_reads=*/true);
  auto a = table.Remember(table.root(), "a", FakeStat(1, 100, S_IFREG), UniqueFd());
  EXPECT_FALSE(residency.NoteRead(*a, 128, 72, 200));  // out of order: not counted
  EXPECT_FALSE(residency.HoldsWhole(*a));
  EXPECT_FALSE(residency.NoteRead(*a, 0, 128, 200));
  EXPECT_FALSE(residency.HoldsWhole(*a));
  EXPECT_TRUE(residency.NoteRead(*a, 128, 72, 200));
  EXPECT_TRUE(residency.HoldsWhole(*a));
  // A READ of its first pages only: the kernel lost them and kept the rest, or the
  // READs after it bring the rest (as holes): held whole either way.
  EXPECT_FALSE(residency.NoteRead(*a, 0, 128, 200));
  EXPECT_TRUE(residency.HoldsWhole(*a));
  EXPECT_FALSE(residency.NoteRead(*a, 128, 72, 200));  // a hole
  EXPECT_TRUE(residency.HoldsWhole(*a));
  a->kernel_pages.Dropped();
  EXPECT_FALSE(residency.HoldsWhole(*a));
  EXPECT_TRUE(residency.NoteRead(*a, 0, 200, 200));
  EXPECT_TRUE(residency.HoldsWhole(*a));
  EXPECT_TRUE(residency.NoteRead(*a, 0, 200, 200));  // lost and read whole once more
  // Dropped (an invalidation, an open without keep_cache, a change through the mount).
  a->kernel_pages.Dropped();
  EXPECT_FALSE(residency.HoldsWhole(*a));
  residency.NoteRead(*a, 128, 72, 200);  // the coverage went with the pages
  EXPECT_FALSE(residency.HoldsWhole(*a));
}

// Reclaim that takes single pages (proactive reclaim such as DAMON's, or the edge of an
// LRU sweep) leaves holes inside files the kernel otherwise holds. A READ inside a file
// held whole fills its hole; the rest is still there: still held, and readahead does not
// push the whole file again next epoch. So does a READ of its first pages only.
TEST(Residency, AReadInsideAFileHeldWholeFillsAHoleAndTheFileStaysHeld) {
  InodeTable table = MakeTable();
  Residency residency;
  residency.SetBudget(/*budget=*/10'000, /*count_reads=*/true);
  auto a = table.Remember(table.root(), "a", FakeStat(1, 100, S_IFREG), UniqueFd());
  residency.NoteHeldWhole(*a, 1000);  // pushed
  EXPECT_TRUE(residency.FillsHole(*a, 4096));
  EXPECT_FALSE(residency.FillsHole(*a, 0));
  EXPECT_FALSE(residency.NoteRead(*a, 4096, 100, 10'000));  // a hole refilled
  EXPECT_TRUE(residency.HoldsWhole(*a));
  EXPECT_FALSE(residency.NoteRead(*a, 8192, 100, 10'000));  // another
  EXPECT_TRUE(residency.HoldsWhole(*a));
  EXPECT_EQ(residency.hole_reads(), 2u);
  // Its first pages only: the rest is still there (or the READs after this one bring
  // it): still held, and no hole counted (the READ is at its start).
  EXPECT_FALSE(residency.NoteRead(*a, 0, 512, 1000));
  EXPECT_TRUE(residency.HoldsWhole(*a));
  EXPECT_EQ(residency.hole_reads(), 2u);
  // The whole file READ from its start: the kernel had lost it, and holds it again now.
  EXPECT_TRUE(residency.NoteRead(*a, 0, 1000, 1000));
  EXPECT_TRUE(residency.HoldsWhole(*a));
  // Not known whole (dropped): a READ of its first pages does not make it so.
  a->kernel_pages.Dropped();
  EXPECT_FALSE(residency.NoteRead(*a, 0, 512, 1000));
  EXPECT_FALSE(residency.HoldsWhole(*a));
  EXPECT_FALSE(residency.FillsHole(*a, 4096));
  // Under a memory limit the group's own reclaim takes what readahead pushed: a READ
  // anywhere ends the belief, so readahead pushes the file again before its next read.
  Residency limited;
  limited.SetBudget(/*budget=*/10'000, /*count_reads=*/false);
  auto b = table.Remember(table.root(), "b", FakeStat(1, 101, S_IFREG), UniqueFd());
  limited.NoteHeldWhole(*b, 1000);
  EXPECT_FALSE(limited.FillsHole(*b, 4096));
  limited.NoteRead(*b, 4096, 100, 10'000);
  EXPECT_FALSE(limited.HoldsWhole(*b));
  limited.NoteHeldWhole(*b, 1000);
  limited.NoteRead(*b, 0, 100, 10'000);  // its first pages: the same
  EXPECT_FALSE(limited.HoldsWhole(*b));
}

TEST(Residency, OnlyTheLastBudgetOfDeliveredBytesIsBelievedHeld) {
  InodeTable table = MakeTable();
  Residency residency;
  residency.SetBudget(/*budget=*/250, /*count_reads=*/true);
  auto a = table.Remember(table.root(), "a", FakeStat(1, 100, S_IFREG), UniqueFd());
  auto b = table.Remember(table.root(), "b", FakeStat(1, 101, S_IFREG), UniqueFd());
  auto c = table.Remember(table.root(), "c", FakeStat(1, 102, S_IFREG), UniqueFd());
  residency.NoteRead(*a, 0, 100, 100);
  residency.NoteHeldWhole(*b, 100);  // a push
  EXPECT_TRUE(residency.HoldsWhole(*a));
  EXPECT_TRUE(residency.HoldsWhole(*b));
  // 300 bytes delivered since a's: the kernel may have reclaimed it to make room.
  residency.NoteRead(*c, 0, 100, 100);
  EXPECT_FALSE(residency.HoldsWhole(*a));
  EXPECT_TRUE(residency.HoldsWhole(*b));
  EXPECT_TRUE(residency.HoldsWhole(*c));
  // A file larger than the budget is never believed held.
  auto big = table.Remember(table.root(), "big", FakeStat(1, 103, S_IFREG), UniqueFd());
  residency.NoteRead(*big, 0, 300, 300);
  EXPECT_FALSE(residency.HoldsWhole(*big));
}

TEST(Residency, UnderAMemoryLimitOnlyPushesCount) {
  InodeTable table = MakeTable();
  Residency residency;
  residency.SetBudget(/*budget=*/1000, /*count_reads=*/false);
  auto a = table.Remember(table.root(), "a", FakeStat(1, 100, S_IFREG), UniqueFd());
  // The READ that completes a file says so (the caller may hand its bytes to the
  // kernel then), though reads do not count as held here.
  EXPECT_TRUE(residency.NoteRead(*a, 0, 100, 100));
  EXPECT_FALSE(residency.HoldsWhole(*a));
  residency.NoteHeldWhole(*a, 100);
  EXPECT_TRUE(residency.HoldsWhole(*a));
  residency.NoteRead(*a, 0, 100, 100);  // but a READ still says the kernel lost it
  EXPECT_FALSE(residency.HoldsWhole(*a));
}

TEST(Residency, AChangeThroughTheMountEndsTheBelief) {
  InodeTable table = MakeTable();
  Residency residency;
  residency.SetBudget(/*budget=*/1000, /*count_reads=*/true);
  auto a = table.Remember(table.root(), "a", FakeStat(1, 100, S_IFREG), UniqueFd());
  residency.NoteRead(*a, 0, 100, 100);
  ASSERT_TRUE(residency.HoldsWhole(*a));
  { MountChange change(table, a.get()); }  // a write that may have grown the file
  EXPECT_FALSE(residency.HoldsWhole(*a));
}

}  // namespace
}  // namespace epochfs::kernel_cache
