#include "kernel_cache/kernel_listing.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace epochfs::kernel_cache {
namespace {

namespace fsys = std::filesystem;

// A folder tree on the local disk stands in for the mount: the listing only opens and
// reads folders below it (mount_view_test.cc has the mount-specific part).
class KernelListingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/epochfs-listing-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    root_ = dir;
    auto view = MountView::Of(root_);
    ASSERT_TRUE(view.ok()) << view.status().ToString();
    view_ = std::move(*view);
  }
  void TearDown() override { fsys::remove_all(root_); }

  // `folders` folders of `files` files each; returns the files' relative paths.
  std::vector<std::string> MakeTree(int folders, int files) {
    std::vector<std::string> paths;
    for (int d = 0; d < folders; ++d) {
      const std::string folder = "class" + std::to_string(d);
      fsys::create_directories(root_ / folder);
      for (int f = 0; f < files; ++f) {
        paths.push_back(folder + "/" + std::to_string(f) + ".jpg");
        std::ofstream(root_ / paths.back()) << "x";
      }
    }
    return paths;
  }
  static void WaitDone(const KernelListing& listing) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!listing.done() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  fsys::path root_;
  std::unique_ptr<MountView> view_;  // the folder as the listing sees it
};

// Several threads share the folders: each is listed once, and every entry is seen.
TEST_F(KernelListingTest, EveryFolderIsListedOnceAcrossItsThreads) {
  const auto paths = MakeTree(10, 5);
  const auto folders = KernelListing::FoldersOf(paths);
  ASSERT_EQ(folders.size(), 10u);
  KernelListing listing(*view_, folders, /*max_entries=*/1'000'000);
  WaitDone(listing);
  ASSERT_TRUE(listing.done());
  EXPECT_EQ(listing.folders_listed(), 10u);
  EXPECT_EQ(listing.entries_seen(), 10u * (5 + 2));  // with "." and ".."
}

// One folder listed: every entry counts, and of them only the regular files as files
// (AttrRefresh compares them with the files read in a pass over the folder).
TEST_F(KernelListingTest, OneListingCountsItsEntriesAndItsFiles) {
  MakeTree(1, 5);
  fsys::create_directories(root_ / "class0" / "sub");
  fsys::create_symlink("0.jpg", root_ / "class0" / "link");
  const std::optional<KernelListing::Listed> listed =
      KernelListing::ListFolder(*view_, "class0", /*max_entries=*/1'000'000);
  ASSERT_TRUE(listed.has_value());
  EXPECT_EQ(listed->entries, 5u + 2 + 2);  // the files, the folder and the link, "." and ".."
  EXPECT_EQ(listed->files, 5u);
  EXPECT_FALSE(KernelListing::ListFolder(*view_, "gone", 1'000'000).has_value());
}

// The entry bound stops the listing; the threads may each have started a folder.
TEST_F(KernelListingTest, TheEntryBoundStopsTheListing) {
  const auto paths = MakeTree(40, 5);
  KernelListing listing(*view_, KernelListing::FoldersOf(paths), /*max_entries=*/1);
  WaitDone(listing);
  ASSERT_TRUE(listing.done());
  EXPECT_GE(listing.folders_listed(), 1u);
  EXPECT_LE(listing.folders_listed(), KernelListing::kThreads);
}

// A folder gone since the record was written is passed over, and none is no work.
TEST_F(KernelListingTest, AMissingFolderIsPassedOverAndNoFoldersIsNoWork) {
  auto paths = MakeTree(3, 2);
  paths.push_back("gone/1.jpg");
  KernelListing listing(*view_, KernelListing::FoldersOf(paths), /*max_entries=*/1'000'000);
  WaitDone(listing);
  ASSERT_TRUE(listing.done());
  EXPECT_EQ(listing.folders_listed(), 3u);
  KernelListing none(*view_, {}, /*max_entries=*/1'000'000);
  EXPECT_TRUE(none.done());
  EXPECT_EQ(none.folders_listed(), 0u);
}

}  // namespace
}  // namespace epochfs::kernel_cache
