#include "fs/inode_table.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

namespace epochfs::fs {
namespace {

struct ::stat FakeStat(uint64_t dev, uint64_t ino, mode_t mode) {
  struct ::stat st {};
  st.st_dev = dev;
  st.st_ino = ino;
  st.st_mode = mode;
  return st;
}

InodeTable MakeTable() {
  UniqueFd root(::open("/tmp", O_PATH | O_DIRECTORY | O_CLOEXEC));
  return InodeTable(std::move(root), FakeStat(1, 2, S_IFDIR | 0755));
}

TEST(InodeTable, SameSourceObjectSameNodeAndCountsLookups) {
  InodeTable table = MakeTable();
  auto a = table.Remember(table.root(), "a", FakeStat(1, 100, S_IFREG), UniqueFd());
  auto again = table.Remember(table.root(), "hardlink", FakeStat(1, 100, S_IFREG), UniqueFd());
  EXPECT_EQ(a.get(), again.get());
  EXPECT_GE(a->nodeid, 16u);  // below 16 is reserved for control nodes
  EXPECT_EQ(table.LocationOf(*a).name, "hardlink");  // the last name it was seen by
  auto other_dev = table.Remember(table.root(), "b", FakeStat(2, 100, S_IFREG), UniqueFd());
  EXPECT_NE(other_dev->nodeid, a->nodeid);

  table.Forget(a->nodeid, 1);
  EXPECT_NE(table.Find(a->nodeid), nullptr);  // one lookup left
  table.Forget(a->nodeid, 1);
  EXPECT_EQ(table.Find(a->nodeid), nullptr);
  EXPECT_EQ(table.FindBySource(1, 100), nullptr);
  // Seen again after being forgotten: a new node id, never a reused one.
  auto reborn = table.Remember(table.root(), "a", FakeStat(1, 100, S_IFREG), UniqueFd());
  EXPECT_GT(reborn->nodeid, other_dev->nodeid);
}

TEST(InodeTable, RootIsNeverForgotten) {
  InodeTable table = MakeTable();
  table.Forget(kRootNodeId, 1000);
  ASSERT_NE(table.Find(kRootNodeId), nullptr);
  EXPECT_TRUE(table.Find(kRootNodeId)->is_dir);
}

TEST(InodeTable, MoveAndKernelCacheIdentity) {
  InodeTable table = MakeTable();
  UniqueFd dir_fd(::open("/tmp", O_PATH | O_DIRECTORY | O_CLOEXEC));
  auto dir = table.Remember(table.root(), "d", FakeStat(1, 50, S_IFDIR), std::move(dir_fd));
  auto f = table.Remember(table.root(), "f", FakeStat(1, 51, S_IFREG), UniqueFd());
  table.Move(f, dir, "g");
  Location loc = table.LocationOf(*f);
  EXPECT_EQ(loc.parent.get(), dir.get());
  EXPECT_EQ(loc.name, "g");

  cache::SourceIdentity id{1, 51, 10, 1000, 2000};
  EXPECT_EQ(table.SwapKernelCacheId(*f, id), InodeTable::CacheMatch::kUnknown);
  EXPECT_EQ(table.SwapKernelCacheId(*f, id), InodeTable::CacheMatch::kSame);
  id.mtime_ns++;
  EXPECT_EQ(table.SwapKernelCacheId(*f, id), InodeTable::CacheMatch::kChanged);
  table.ClearKernelCacheId(*f);
  EXPECT_EQ(table.SwapKernelCacheId(*f, id), InodeTable::CacheMatch::kUnknown);
}

TEST(InodeTable, ParentOutlivesForgetWhileAChildHoldsIt) {
  InodeTable table = MakeTable();
  UniqueFd dir_fd(::open("/tmp", O_PATH | O_DIRECTORY | O_CLOEXEC));
  auto dir = table.Remember(table.root(), "d", FakeStat(1, 60, S_IFDIR), std::move(dir_fd));
  auto child = table.Remember(dir, "c", FakeStat(1, 61, S_IFREG), UniqueFd());
  const uint64_t dir_id = dir->nodeid;
  dir.reset();
  table.Forget(dir_id, 1);
  EXPECT_EQ(table.Find(dir_id), nullptr);
  Location loc = table.LocationOf(*child);
  ASSERT_NE(loc.parent, nullptr);
  EXPECT_TRUE(loc.parent->path_fd.valid());  // still open: the child needs it
}

}  // namespace
}  // namespace epochfs::fs

namespace epochfs::fs {
namespace {

TEST(InodeTable, FileNodesKeepTheirFdOnlyUpToTheCap) {
  UniqueFd root(::open("/tmp", O_PATH | O_DIRECTORY | O_CLOEXEC));
  InodeTable table(std::move(root), FakeStat(1, 2, S_IFDIR | 0755), /*max_file_fds=*/2);
  auto fd = [] { return UniqueFd(::open("/tmp", O_PATH | O_CLOEXEC)); };
  auto a = table.Remember(table.root(), "a", FakeStat(1, 101, S_IFREG), fd());
  auto b = table.Remember(table.root(), "b", FakeStat(1, 102, S_IFREG), fd());
  auto c = table.Remember(table.root(), "c", FakeStat(1, 103, S_IFREG), fd());
  auto d = table.Remember(table.root(), "d", FakeStat(1, 104, S_IFDIR), fd());
  EXPECT_TRUE(a->path_fd.valid());
  EXPECT_TRUE(b->path_fd.valid());
  EXPECT_FALSE(c->path_fd.valid()) << "over the cap: reached by name only";
  EXPECT_TRUE(d->path_fd.valid()) << "directories always keep theirs";
  EXPECT_EQ(table.file_fds(), 2u);
  table.Forget(a->nodeid, 1);
  EXPECT_EQ(table.file_fds(), 1u);
  auto e = table.Remember(table.root(), "e", FakeStat(1, 105, S_IFREG), fd());
  EXPECT_TRUE(e->path_fd.valid());
}

}  // namespace
}  // namespace epochfs::fs
