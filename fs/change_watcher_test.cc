#include "fs/change_watcher.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>

#include "base/testing/test_files.h"

namespace epochfs::fs {
namespace {

using namespace std::chrono_literals;

// Records what the watcher asks of the kernel.
class RecordingInvalidator final : public Invalidator {
 public:
  void InvalidateEntry(uint64_t parent, const std::string& name) override {
    MutexLock lock(mu_);
    entries_.emplace_back(parent, name);
  }
  std::vector<std::pair<uint64_t, std::string>> entries() const {
    MutexLock lock(mu_);
    return entries_;
  }
  void InvalidateInode(uint64_t nodeid) override {
    MutexLock lock(mu_);
    inodes_.push_back(nodeid);
  }
  void InvalidateAttrs(uint64_t) override {}
  bool ShowSize(uint64_t, uint64_t, char) override { return true; }
  std::vector<uint64_t> inodes() const {
    MutexLock lock(mu_);
    return inodes_;
  }

 private:
  mutable Mutex mu_;
  std::vector<uint64_t> inodes_ GUARDED_BY(mu_);
  std::vector<std::pair<uint64_t, std::string>> entries_ GUARDED_BY(mu_);
};

InodeTable MakeTable() {
  struct ::stat st {};
  UniqueFd root(::open("/tmp", O_PATH | O_DIRECTORY | O_CLOEXEC));
  ::fstat(root.get(), &st);
  return InodeTable(std::move(root), st);
}

// A drop asked for a moment (the end of a racily clean window) happens then, not before,
// and once however often it was asked for.
TEST(ChangeWatcher, ADeferredDropHappensAtItsTimeAndOnce) {
  InodeTable table = MakeTable();
  RecordingInvalidator kernel;
  auto watcher = ChangeWatcher::Start(table, kernel);
  ASSERT_TRUE(watcher.ok()) << watcher.status().ToString();
  const int64_t at = cache::WallClockNs() + 300'000'000;
  (*watcher)->InvalidateLater(42, at);
  (*watcher)->InvalidateLater(42, at);
  (*watcher)->InvalidateLater(7);  // now
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(kernel.inodes(), std::vector<uint64_t>{7});
  for (int i = 0; i < 200 && kernel.inodes().size() < 2; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_GE(cache::WallClockNs(), at);
  EXPECT_EQ(kernel.inodes(), (std::vector<uint64_t>{7, 42}));
  EXPECT_EQ((*watcher)->identity_invalidations(), 2u);
}


// A directory forgotten and looked up again gets a new node, and inotify the same watch
// for it. Letting go of the old node after the new one is watched (a READDIRPLUS entry
// the kernel did not keep, beside a LOOKUP of the folder) must leave the new one's watch.
TEST(ChangeWatcher, LettingGoOfAnOldNodeKeepsTheWatchOfItsDirectorysNewOne) {
  testing::TempDir dir;
  std::filesystem::create_directories(dir.path() / "d");
  struct ::stat root_st {};
  UniqueFd root(::open(dir.path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  ASSERT_EQ(::fstat(root.get(), &root_st), 0);
  InodeTable table(std::move(root), root_st);
  RecordingInvalidator kernel;
  auto watcher = ChangeWatcher::Start(table, kernel);
  ASSERT_TRUE(watcher.ok()) << watcher.status().ToString();
  const auto remember_d = [&] {
    UniqueFd fd(::open((dir.path() / "d").c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    struct ::stat st {};
    EXPECT_EQ(::fstat(fd.get(), &st), 0);
    return table.Remember(table.root(), "d", st, std::move(fd), false);
  };
  std::shared_ptr<Inode> old_node = remember_d();
  (*watcher)->Watch(*old_node);
  ASSERT_EQ(table.Forget(old_node->nodeid, 1), old_node);
  std::shared_ptr<Inode> new_node = remember_d();
  ASSERT_NE(new_node->nodeid, old_node->nodeid);
  (*watcher)->Watch(*new_node);
  (*watcher)->Unwatch(*old_node);

  testing::WriteFile(dir.path() / "d" / "made-underneath", "x");
  const std::pair<uint64_t, std::string> want{new_node->nodeid, "made-underneath"};
  const auto seen = [&] {
    const auto entries = kernel.entries();
    return std::find(entries.begin(), entries.end(), want) != entries.end();
  };
  for (int i = 0; i < 200 && !seen(); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(seen()) << "the new node's folder is no longer watched";
}

}  // namespace
}  // namespace epochfs::fs
