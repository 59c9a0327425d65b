#include "fs/change_watcher.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <thread>

namespace epochfs::fs {
namespace {

using namespace std::chrono_literals;

// Records what the watcher asks of the kernel.
class RecordingInvalidator final : public Invalidator {
 public:
  void InvalidateEntry(uint64_t, const std::string&) override {}
  void InvalidateInode(uint64_t nodeid) override {
    MutexLock lock(mu_);
    inodes_.push_back(nodeid);
  }
  std::vector<uint64_t> inodes() const {
    MutexLock lock(mu_);
    return inodes_;
  }

 private:
  mutable Mutex mu_;
  std::vector<uint64_t> inodes_ GUARDED_BY(mu_);
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

}  // namespace
}  // namespace epochfs::fs
