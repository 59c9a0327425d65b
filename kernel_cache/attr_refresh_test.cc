#include "kernel_cache/attr_refresh.h"

#include <gtest/gtest.h>

#include <chrono>

namespace epochfs::kernel_cache {
namespace {

using FolderReads = AttrRefresh::FolderReads;
using Clock = FolderReads::Clock;
using std::chrono::milliseconds;

// A class folder of a data set: `files` files, listed with "." and "..".
KernelListing::Listed FolderOf(uint64_t files) { return {.entries = files + 2, .files = files}; }

class FolderReadsTest : public ::testing::Test {
 protected:
  // `n` files read to their end, 10 ms apart (a folder of a shuffled epoch).
  void ReadFiles(FolderReads& folder, int n) {
    for (int i = 0; i < n; ++i) {
      now_ += milliseconds(10);
      folder.Read(now_);
    }
  }
  // `folder` is due now and is listed at once: `refreshed` files pending, `files` files
  // seen by the listing.
  void ListNow(FolderReads& folder, uint32_t refreshed, uint64_t files) {
    ASSERT_TRUE(folder.Due(now_));
    EXPECT_EQ(folder.StartListing(), refreshed);
    folder.Listed(FolderOf(files), milliseconds(1));
  }
  Clock::time_point now_ = Clock::time_point{} + std::chrono::hours(1);
};

TEST_F(FolderReadsTest, AFolderNeverListedWaitsForItsFirstBatchOrItsQuiet) {
  FolderReads folder;
  EXPECT_FALSE(folder.Due(now_));
  ReadFiles(folder, AttrRefresh::kFirstBatch - 1);
  EXPECT_FALSE(folder.Due(now_));
  ReadFiles(folder, 1);
  EXPECT_TRUE(folder.Due(now_));

  FolderReads few;  // a restart's few READs
  ReadFiles(few, AttrRefresh::kFirstBatchQuiet - 1);
  EXPECT_FALSE(few.Due(now_ + std::chrono::seconds(10)));
  ReadFiles(few, 1);
  EXPECT_FALSE(few.Due(now_));
  EXPECT_TRUE(few.Due(now_ + std::chrono::seconds(10)));
}

// The demo's data set: class folders of 25 files. The first listing comes after 16 of
// them; the other 9 are listed as soon as the last is read, not once the folder's reads
// went quiet: the next epoch may begin at once and stat them.
TEST_F(FolderReadsTest, TheEndOfTheFirstPassOverTheFolderListsItAtOnce) {
  FolderReads folder;
  ReadFiles(folder, 16);
  ListNow(folder, 16, 25);
  ReadFiles(folder, 8);
  EXPECT_FALSE(folder.Due(now_));  // 8 of 25 pending, the pass not over, not quiet
  ReadFiles(folder, 1);
  ListNow(folder, 9, 25);  // at the 25th file of the pass

  // Later READs are the kernel's misses, spread over epochs: listed at three quarters
  // of the folder, or once quiet, whatever their count since the first pass.
  ReadFiles(folder, 20);
  EXPECT_FALSE(folder.Due(now_));
  ReadFiles(folder, 1);
  ListNow(folder, 21, 25);  // 21 of 27 entries: three quarters
  ReadFiles(folder, 7);
  EXPECT_FALSE(folder.Due(now_));  // 28 READs since the first pass: no pass's end
  EXPECT_FALSE(folder.Due(now_ + milliseconds(100)));
  EXPECT_TRUE(folder.Due(now_ + std::chrono::seconds(1)));  // quiet, with 7 of 27
}

// A pass that ends with less than an eighth of the folder pending is not worth a
// listing of all of it (each entry costs about what a GETATTR does); a quarter pending
// is listed once quiet, as before.
TEST_F(FolderReadsTest, APassThatEndsWithLittlePendingWaitsForTheQuiet) {
  FolderReads folder;
  ReadFiles(folder, 16);
  ListNow(folder, 16, 100);
  ReadFiles(folder, 77);
  ListNow(folder, 77, 100);  // 77 of 102 entries: three quarters
  ReadFiles(folder, 7);  // the pass is over with 7 pending: under an eighth
  EXPECT_FALSE(folder.Due(now_));
  EXPECT_FALSE(folder.Due(now_ + std::chrono::seconds(10)));  // under a quarter
  // Its READs go on in the next epoch: an eighth pending (13), the pass over: listed,
  // which ends the first pass.
  ReadFiles(folder, 6);
  ListNow(folder, 13, 100);
  ReadFiles(folder, 26);  // a later pass: 26 of 102 entries, a quarter, listed once quiet
  EXPECT_FALSE(folder.Due(now_));
  EXPECT_TRUE(folder.Due(now_ + std::chrono::seconds(10)));
}

// The pass's last READs came while a listing of the folder ran (it may have passed
// their entries already): the pass is not over at that listing, and the folder is due
// again at once.
TEST_F(FolderReadsTest, APassThatEndsDuringAListingIsListedAgain) {
  FolderReads folder;
  ReadFiles(folder, 16);
  ASSERT_TRUE(folder.Due(now_));
  EXPECT_EQ(folder.StartListing(), 16u);
  ReadFiles(folder, 9);  // while it runs: the folder's other 9 files
  folder.Listed(FolderOf(25), milliseconds(1));
  ListNow(folder, 9, 25);  // due again at once
  ReadFiles(folder, 4);  // the first pass is over: a later pass waits for three quarters
  EXPECT_FALSE(folder.Due(now_));
}

TEST_F(FolderReadsTest, AFolderTooSlowToListOrGoneIsNeverListedAgain) {
  FolderReads slow;
  ReadFiles(slow, 16);
  slow.StartListing();
  slow.Listed(FolderOf(25), AttrRefresh::kMaxListing + milliseconds(1));
  EXPECT_TRUE(slow.given_up());
  ReadFiles(slow, 25);
  EXPECT_FALSE(slow.Due(now_ + std::chrono::seconds(10)));

  FolderReads gone;
  ReadFiles(gone, 16);
  gone.StartListing();
  gone.Listed(std::nullopt, milliseconds(1));
  EXPECT_TRUE(gone.given_up());

  FolderReads huge;
  ReadFiles(huge, 16);
  huge.StartListing();
  huge.Listed(FolderOf(AttrRefresh::kMaxEntries + 10), milliseconds(1));
  EXPECT_TRUE(huge.given_up());
}

}  // namespace
}  // namespace epochfs::kernel_cache
