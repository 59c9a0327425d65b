#include "fs/metadata_warmup.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <thread>

#include "base/testing/test_files.h"

namespace epochfs::fs {
namespace {

using namespace std::chrono_literals;

class MetadataWarmupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 20; ++i) paths_.push_back(dir_.Write("c" + std::to_string(i % 3) + "/f" + std::to_string(i), "x"));
    for (std::string& p : paths_) p = p.substr(dir_.path().string().size() + 1);
    root_ = UniqueFd(::open(dir_.path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    struct ::stat st {};
    ASSERT_EQ(::fstat(root_.get(), &st), 0);
    table_ = std::make_unique<InodeTable>(UniqueFd(::dup(root_.get())), st);
  }

  static bool Eventually(const std::function<bool()>& done) {
    for (int i = 0; i < 500 && !done(); ++i) std::this_thread::sleep_for(10ms);
    return done();
  }

  testing::TempDir dir_;
  std::vector<std::string> paths_;
  UniqueFd root_;
  std::unique_ptr<InodeTable> table_;
};

TEST_F(MetadataWarmupTest, PinsEveryRecordedFileAndReleasesThemAtTheEnd) {
  std::vector<std::string> paths = paths_;
  paths.push_back("missing");     // gone since the record: skipped
  paths.push_back("../escape");   // never outside the source
  {
    MetadataWarmup warmup(root_.get(), paths, *table_, {.threads = 3});
    warmup.WaitWalked();
    EXPECT_EQ(warmup.opened(), 20u);
    EXPECT_EQ(warmup.failed(), 2u);
    EXPECT_EQ(table_->pins(), 20u);
  }
  EXPECT_EQ(table_->pins(), 0u) << "destroyed: every pin closed";
  EXPECT_EQ(table_->file_fds(), 0u);
}

// A lookup takes over its file's pin; a deleted file's pin goes at the next check, and
// when no pin is left the warm-up is done.
TEST_F(MetadataWarmupTest, LookupsAndDeletionsReleasePins) {
  MetadataWarmup warmup(root_.get(), {paths_[0], paths_[1]}, *table_,
                        {.threads = 2, .check_every = 20ms});
  warmup.WaitWalked();
  ASSERT_EQ(table_->pins(), 2u);
  struct ::stat st {};
  ASSERT_EQ(::stat((dir_.path() / paths_[0]).c_str(), &st), 0);
  table_->Remember(table_->root(), "f0", st, UniqueFd(::open(dir_.path().c_str(), O_PATH)));
  EXPECT_EQ(table_->pins(), 1u);
  ASSERT_EQ(::unlink((dir_.path() / paths_[1]).c_str()), 0);
  EXPECT_TRUE(Eventually([&] { return table_->pins() == 0; }));
}

TEST_F(MetadataWarmupTest, PinsAreReleasedAfterMaxHold) {
  MetadataWarmup warmup(root_.get(), paths_, *table_,
                        {.threads = 2, .check_every = 10ms, .max_hold = 0s});
  warmup.WaitWalked();
  EXPECT_TRUE(Eventually([&] { return table_->pins() == 0; }));
}

TEST_F(MetadataWarmupTest, StopsAtThePinBudget) {
  struct ::stat st {};
  ASSERT_EQ(::fstat(root_.get(), &st), 0);
  InodeTable small(UniqueFd(::dup(root_.get())), st, /*max_file_fds=*/8);  // 6 pins at most
  MetadataWarmup warmup(root_.get(), paths_, small, {.threads = 1});
  warmup.WaitWalked();
  EXPECT_EQ(warmup.opened(), 6u);
  EXPECT_EQ(small.pins(), 6u);
}

}  // namespace
}  // namespace epochfs::fs
