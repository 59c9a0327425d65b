#include "fs/inode_table.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/testing/test_files.h"
#include "fs/testing/fake_inodes.h"

namespace epochfs::fs {
namespace {

using testing::FakeStat;
using testing::MakeTable;

TEST(InodeTable, SameSourceObjectSameNodeAndCountsLookups) {
  InodeTable table = MakeTable();
  auto a = table.Remember(table.root(), "a", FakeStat(1, 100, S_IFREG), UniqueFd());
  auto again = table.Remember(table.root(), "hardlink", FakeStat(1, 100, S_IFREG), UniqueFd());
  EXPECT_EQ(a.get(), again.get());
  EXPECT_GE(a->nodeid, 16u);  // below 16 is reserved for control nodes
  EXPECT_EQ(table.LocationOf(*a).name, "a");  // a file keeps the name it is opened by
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

// A file renamed in the source gets a new node under its new name. Two requests that
// name it there side by side (a LOOKUP and a READDIRPLUS: the kernel sends them in
// parallel) both find the old name gone before either makes that node: they must share
// it, or the file has two nodes and a change reaches only one of them.
TEST(InodeTable, TwoRequestsForARenamedFilesNewNameShareOneNewNode) {
  InodeTable table = MakeTable();
  auto old_node = table.Remember(table.root(), "old", FakeStat(1, 100, S_IFREG), UniqueFd());
  auto first = table.Remember(table.root(), "new", FakeStat(1, 100, S_IFREG), UniqueFd(),
                              /*old_name_gone=*/true);
  auto second = table.Remember(table.root(), "new", FakeStat(1, 100, S_IFREG), UniqueFd(),
                               /*old_name_gone=*/true);
  EXPECT_NE(first->nodeid, old_node->nodeid);
  EXPECT_EQ(first.get(), second.get());
  EXPECT_EQ(first->nlookup, 2u);
  EXPECT_EQ(table.LocationOf(*old_node).name, "old");  // the old node keeps its dead name
}

// A regular file (1, 100) of `size` bytes whose ctime is `ctime_s`.
struct ::stat FileStat(off_t size, time_t ctime_s) {
  struct ::stat st = FakeStat(1, 100, S_IFREG);
  st.st_size = size;
  st.st_ctim = {ctime_s, 0};
  return st;
}

// A node is never found without the attributes its LOOKUP reply gives the kernel: a push
// that found it in between was refused, for a file the kernel was about to know.
TEST(InodeTable, ANodeIsFoundWithTheAttributesItsReplyCarries) {
  InodeTable table = MakeTable();
  const struct ::stat st = FileStat(4096, 10);
  auto a = table.Remember(table.root(), "a", st, UniqueFd());
  const auto id = cache::SourceIdentity::FromStat(st);
  EXPECT_TRUE(table.KernelAttrsShow(*a, id, InodeTable::Observe(*a)));
  EXPECT_EQ(table.KernelAttrId(*a), id);
  // Found again as it was: the kernel shows it whichever reply it kept.
  table.Remember(table.root(), "a", st, UniqueFd());
  EXPECT_TRUE(table.KernelAttrsShow(*a, id, InodeTable::Observe(*a)));
}

// The kernel applies attribute replies in an order of its own: it discards a reply to a
// request sent before another reply was applied, so of two replies the one computed
// first may be the one it keeps (the torture test once read a file at a size from before
// an append that a later LOOKUP had reported). Replies that disagree leave what the
// kernel shows unknown until its attributes are dropped; after the drop it asks again
// before it uses a size, and the replies from then on count.
// As if the window after the last drop of `node`'s attributes had passed: a reply
// recorded now answers a request the kernel sent after that drop.
void WindowAfterDropPassed(Inode& node) {
  node.kernel_attrs_dropped_at_ns -= InodeTable::kDroppedReplyWindowNs;
}

TEST(InodeTable, RepliesThatDisagreeLeaveTheKernelsAttributesUnknownUntilADrop) {
  InodeTable table = MakeTable();
  struct ::stat st = FileStat(4096, 10);
  auto a = table.Remember(table.root(), "a", st, UniqueFd());
  const auto before = cache::SourceIdentity::FromStat(st);
  st.st_size = 8192;  // appended underneath
  st.st_ctim = {11, 0};
  const auto after = cache::SourceIdentity::FromStat(st);
  ASSERT_EQ(table.Remember(table.root(), "a", st, UniqueFd()).get(), a.get());
  EXPECT_FALSE(table.KernelAttrsShow(*a, after, InodeTable::Observe(*a)));
  EXPECT_FALSE(table.KernelAttrsShow(*a, before, InodeTable::Observe(*a)));
  EXPECT_EQ(table.KernelAttrId(*a), std::nullopt);

  // Dropped: nothing is trusted until a reply is recorded (one stat'ed before an open's
  // check may be recorded, and applied, after it).
  table.DropKernelAttrs(*a);
  EXPECT_FALSE(table.KernelAttrsShow(*a, after, InodeTable::Observe(*a)));
  EXPECT_EQ(table.KernelAttrId(*a), std::nullopt);  // no size to push by
  WindowAfterDropPassed(*a);
  table.NoteKernelAttrs(*a, after, InodeTable::Observe(*a));  // the relookup's reply, or a GETATTR's
  EXPECT_TRUE(table.KernelAttrsShow(*a, after, InodeTable::Observe(*a)));
  EXPECT_TRUE(table.KernelAttrsShow(*a, before, InodeTable::Observe(*a)));  // older: its ctime
  EXPECT_EQ(table.KernelAttrId(*a), after);

  // A GETATTR (or a short READ) computed before the change, answered after the drop.
  table.NoteKernelAttrs(*a, before, InodeTable::Observe(*a));
  EXPECT_FALSE(table.KernelAttrsShow(*a, after, InodeTable::Observe(*a)));

  // The mount's own change: the kernel follows it, and discards every reply sent before.
  st.st_size = 100;
  st.st_ctim = {12, 0};
  const auto truncated = cache::SourceIdentity::FromStat(st);
  const auto seen_before_the_change = InodeTable::Observe(*a);
  MountChange(table, a.get()).Made(truncated);
  EXPECT_TRUE(table.KernelAttrsShow(*a, truncated, InodeTable::Observe(*a)));
  EXPECT_EQ(table.KernelAttrId(*a), truncated);
  // A reply stat'ed before that change ended answers a request the kernel sent before
  // its own truncate, and loses to it: no news. So does one recorded after the change
  // ended but stat'ed before it (older ctime).
  table.NoteKernelAttrs(*a, after, seen_before_the_change);
  EXPECT_EQ(table.KernelAttrId(*a), truncated);
  table.NoteKernelAttrs(*a, before, InodeTable::Observe(*a));
  EXPECT_EQ(table.KernelAttrId(*a), truncated);
}

// The kernel discards the reply to a GETATTR it sent before a drop of the attributes,
// however late the reply is computed, and a read that waited for it goes on with the old
// size: it ends early. Such a reply must not make an open trust the kernel's size (seen
// once in the torture test: a fresh open after a write underneath read 0 bytes of 5,456).
TEST(InodeTable, AReplyRecordedSoonAfterADropIsNotTrusted) {
  InodeTable table = MakeTable();
  auto a = table.Remember(table.root(), "a", FileStat(0, 10), UniqueFd());
  const auto written = cache::SourceIdentity::FromStat(FileStat(5456, 11));  // underneath
  table.DropKernelAttrs(*a);  // an open found the change
  table.NoteKernelAttrs(*a, written, InodeTable::Observe(*a));  // a GETATTR sent before it
  EXPECT_FALSE(table.KernelAttrsShow(*a, written, InodeTable::Observe(*a)));
  EXPECT_TRUE(table.KernelAttrsDropped(*a));  // an open sets the size, or reads around it
  // A LOOKUP's reply, recorded by Remember, is no more trusted.
  ASSERT_EQ(table.Remember(table.root(), "a", FileStat(5456, 11), UniqueFd()).get(), a.get());
  EXPECT_FALSE(table.KernelAttrsShow(*a, written, InodeTable::Observe(*a)));

  // A result of the mount's own change is the kernel's (it sets it itself), unless a reply
  // in the window disagrees: the kernel may then hold either.
  const auto truncated = cache::SourceIdentity::FromStat(FileStat(100, 12));
  MountChange(table, a.get()).Made(truncated);
  table.NoteKernelAttrs(*a, truncated, InodeTable::Observe(*a));
  EXPECT_TRUE(table.KernelAttrsShow(*a, truncated, InodeTable::Observe(*a)));
  table.NoteKernelAttrs(*a, written, InodeTable::Observe(*a));
  EXPECT_FALSE(table.KernelAttrsShow(*a, truncated, InodeTable::Observe(*a)));

  // Once the window has passed, a reply answers a request sent after the drop.
  table.DropKernelAttrs(*a);
  WindowAfterDropPassed(*a);
  table.NoteKernelAttrs(*a, truncated, InodeTable::Observe(*a));
  EXPECT_TRUE(table.KernelAttrsShow(*a, truncated, InodeTable::Observe(*a)));
}

// An open that cannot trust the kernel's size stores the file's last byte to set it
// (SourceFs::ShowSizeToKernel); a store only grows the size, so that is only right while
// no reply since the kernel last surely held a size told it a larger one.
TEST(InodeTable, ASizeIsShownByAStoreOnlyIfNoReplyToldALargerOne) {
  InodeTable table = MakeTable();
  auto a = table.Remember(table.root(), "a", FileStat(4096, 10), UniqueFd());
  EXPECT_TRUE(table.MayShowSize(*a, 4096));
  EXPECT_TRUE(table.MayShowSize(*a, 8192));
  EXPECT_FALSE(table.MayShowSize(*a, 100));  // truncated underneath: the kernel has 4096

  table.DropKernelAttrs(*a);
  table.NoteKernelAttrs(*a, cache::SourceIdentity::FromStat(FileStat(9000, 11)),
                        InodeTable::Observe(*a));  // not trusted, but perhaps applied
  EXPECT_FALSE(table.MayShowSize(*a, 4096));
  EXPECT_TRUE(table.MayShowSize(*a, 9000));
  MountChange(table, a.get()).Made(cache::SourceIdentity::FromStat(FileStat(12000, 12)));
  EXPECT_FALSE(table.MayShowSize(*a, 9000));  // the kernel's own write grew it

  // A reply surely applied: the kernel's size is that one again.
  table.DropKernelAttrs(*a);
  WindowAfterDropPassed(*a);
  table.NoteKernelAttrs(*a, cache::SourceIdentity::FromStat(FileStat(50, 13)),
                        InodeTable::Observe(*a));
  EXPECT_TRUE(table.MayShowSize(*a, 50));
}

// A rename, a link, an unlink or an xattr through the mount only moves the ctime the
// kernel shows; it keeps the size its attributes held. Such a change must not make the
// daemon believe the kernel shows a size that an earlier change underneath left.
TEST(InodeTable, AChangeThatOnlyMovesTheCtimeKeepsWhatTheKernelShows) {
  InodeTable table = MakeTable();
  auto a = table.Remember(table.root(), "a", FileStat(4096, 10), UniqueFd());
  // Appended underneath (no reply since), then renamed through the mount.
  const auto renamed = cache::SourceIdentity::FromStat(FileStat(8192, 12));
  MountChange(table, a.get(), KernelLearns::kCtimeOnly).Made(renamed);
  EXPECT_FALSE(table.KernelAttrsShow(*a, renamed, InodeTable::Observe(*a)));
  // Renamed again with nothing else changed: the kernel's size is still right.
  table.DropKernelAttrs(*a);
  WindowAfterDropPassed(*a);
  table.NoteKernelAttrs(*a, renamed, InodeTable::Observe(*a));
  auto moved = renamed;
  moved.ctime_ns += 1'000'000'000;
  MountChange(table, a.get(), KernelLearns::kCtimeOnly).Made(moved);
  EXPECT_TRUE(table.KernelAttrsShow(*a, moved, InodeTable::Observe(*a)));
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

  // An old ctime: settled, so an equal identity is trusted.
  cache::SourceIdentity id{1, 51, 10, 1000, 2000};
  auto swap = [&](const cache::SourceIdentity& seen_id) {
    return table.SwapKernelCacheId(*f, seen_id, InodeTable::Observe(*f));
  };
  EXPECT_EQ(swap(id), InodeTable::CacheMatch::kUnknown);
  EXPECT_EQ(swap(id), InodeTable::CacheMatch::kSame);
  id.mtime_ns++;
  id.ctime_ns++;
  EXPECT_EQ(swap(id), InodeTable::CacheMatch::kChanged);
  EXPECT_EQ(swap(id), InodeTable::CacheMatch::kSame);
  --id.ctime_ns;
  EXPECT_EQ(swap(id), InodeTable::CacheMatch::kSame) << "older than recorded: a late look";
}

// Observes `node` as `id` now: what a check or the watcher does.
InodeTable::CacheMatch SwapNow(InodeTable& table, Inode& node, const cache::SourceIdentity& id) {
  return table.SwapKernelCacheId(node, id, InodeTable::Observe(node));
}
bool FollowsNow(const InodeTable& table, const Inode& node, const cache::SourceIdentity& id) {
  return table.KernelCacheFollows(node, id, InodeTable::Observe(node));
}

cache::SourceIdentity RecentIdentity(uint64_t size) {
  const int64_t now = cache::WallClockNs();
  return cache::SourceIdentity{1, 70, size, now, now};
}

TEST(InodeTable, RecentChangeNotMadeByTheMountIsDistrustedUntilItSettles) {
  InodeTable table = MakeTable();
  auto f = table.Remember(table.root(), "f", FakeStat(1, 70, S_IFREG), UniqueFd());
  auto swap = [&](const cache::SourceIdentity& id) {
    return table.SwapKernelCacheId(*f, id, InodeTable::Observe(*f));
  };
  EXPECT_EQ(swap(cache::SourceIdentity{1, 70, 1, 1000, 1000}), InodeTable::CacheMatch::kUnknown);
  const auto changed = RecentIdentity(2);
  EXPECT_EQ(swap(changed), InodeTable::CacheMatch::kChanged);
  // Racily clean: the same identity again, so soon after its ctime, may hide a second
  // change within the same timestamp tick.
  EXPECT_EQ(swap(changed), InodeTable::CacheMatch::kChanged);
  // So the watcher, reporting a change of that file, does not take it for old news.
  EXPECT_FALSE(FollowsNow(table, *f, changed));
}

struct ::stat StatOf(const cache::SourceIdentity& id) {
  struct ::stat st = FakeStat(id.dev, id.ino, S_IFREG);
  st.st_size = static_cast<off_t>(id.size);
  st.st_mtim = timespec{id.mtime_ns / 1'000'000'000, id.mtime_ns % 1'000'000'000};
  st.st_ctim = timespec{id.ctime_ns / 1'000'000'000, id.ctime_ns % 1'000'000'000};
  return st;
}

// The kernel forgets the node of a file the mount just wrote, and looks the file up
// again: the new node must not take the mount's own recent change for one made
// underneath (the racily clean rule would then drop its pages while the mount writes
// it, and a drop can race with a write the kernel has copied but not yet sent).
TEST(InodeTable, ANodeMadeAgainTrustsTheMountsOwnRecentChange) {
  InodeTable table = MakeTable();
  auto f = table.Remember(table.root(), "f", FakeStat(1, 70, S_IFREG), UniqueFd());
  const auto written = RecentIdentity(5);
  MountChange(table, f.get()).Made(written);
  const uint64_t old_id = f->nodeid;
  f.reset();
  ASSERT_NE(table.Forget(old_id, 1), nullptr);
  auto again = table.Remember(table.root(), "f", StatOf(written), UniqueFd());
  ASSERT_NE(again->nodeid, old_id);
  EXPECT_TRUE(FollowsNow(table, *again, written));
  EXPECT_EQ(SwapNow(table, *again, written), InodeTable::CacheMatch::kSame);
  EXPECT_EQ(SwapNow(table, *again, written), InodeTable::CacheMatch::kSame);
  // Changed underneath since the mount's change: an identity the mount did not make,
  // distrusted while it is recent.
  auto g = table.Remember(table.root(), "g", FakeStat(1, 71, S_IFREG), UniqueFd());
  cache::SourceIdentity made_g = RecentIdentity(5), then = RecentIdentity(6);
  made_g.ino = then.ino = 71;
  MountChange(table, g.get()).Made(made_g);
  const uint64_t g_id = g->nodeid;
  g.reset();
  ASSERT_NE(table.Forget(g_id, 1), nullptr);
  auto g_again = table.Remember(table.root(), "g", StatOf(then), UniqueFd());
  EXPECT_FALSE(FollowsNow(table, *g_again, then));
  EXPECT_EQ(SwapNow(table, *g_again, then), InodeTable::CacheMatch::kUnknown);
  EXPECT_EQ(SwapNow(table, *g_again, then), InodeTable::CacheMatch::kChanged);
}

// With a watcher to drop pages later, a recent identity is dropped once, when its window
// has passed, instead of at every observation inside it (each drop is a refetch, and each
// refetch another observation). Without one (an open), every observation drops.
TEST(InodeTable, ARecentIdentityIsDroppedOnceWhenItsWindowHasPassed) {
  InodeTable table = MakeTable();
  auto f = table.Remember(table.root(), "f", FakeStat(1, 70, S_IFREG), UniqueFd());
  const auto recent = RecentIdentity(3);
  auto swap = [&](Inode& node, const cache::SourceIdentity& id, bool can_defer) {
    return table.SwapKernelCacheId(node, id, InodeTable::Observe(node), can_defer);
  };
  EXPECT_EQ(swap(*f, recent, true), InodeTable::CacheMatch::kRecent);
  EXPECT_EQ(swap(*f, recent, true), InodeTable::CacheMatch::kSame);
  EXPECT_TRUE(FollowsNow(table, *f, recent));
  EXPECT_GT(InodeTable::RacilyCleanUntil(recent), recent.ctime_ns + cache::kRacilyCleanNs);
  // Changed again: dropped now, then once more after the new window.
  auto again = RecentIdentity(4);
  EXPECT_EQ(swap(*f, again, true), InodeTable::CacheMatch::kChanged);
  EXPECT_EQ(swap(*f, again, true), InodeTable::CacheMatch::kRecent);
  EXPECT_EQ(swap(*f, again, true), InodeTable::CacheMatch::kSame);

  auto g = table.Remember(table.root(), "g", FakeStat(1, 71, S_IFREG), UniqueFd());
  auto other = RecentIdentity(5);
  other.ino = 71;
  EXPECT_EQ(swap(*g, other, false), InodeTable::CacheMatch::kUnknown);
  EXPECT_EQ(swap(*g, other, false), InodeTable::CacheMatch::kChanged);
  EXPECT_EQ(swap(*g, other, false), InodeTable::CacheMatch::kChanged);
}

TEST(InodeTable, IdentityAMountChangeLeftIsTrustedAtOnce) {
  InodeTable table = MakeTable();
  auto f = table.Remember(table.root(), "f", FakeStat(1, 70, S_IFREG), UniqueFd());
  const auto written = RecentIdentity(5);
  MountChange(table, f.get()).Made(written);
  EXPECT_EQ(table.SwapKernelCacheId(*f, written, InodeTable::Observe(*f)),
            InodeTable::CacheMatch::kSame);
  EXPECT_TRUE(table.KernelCacheFollows(*f, written, InodeTable::Observe(*f)));
}

TEST(InodeTable, ObservationOverlappingAMountChangeIsNoNews) {
  InodeTable table = MakeTable();
  auto f = table.Remember(table.root(), "f", FakeStat(1, 70, S_IFREG), UniqueFd());
  MountChange(table, f.get()).Made(RecentIdentity(5));

  // Observed while a change is under way: whatever the stat showed explains nothing.
  {
    MountChange change(table, f.get());
    const auto seen = InodeTable::Observe(*f);
    const auto during = RecentIdentity(6);
    EXPECT_EQ(table.SwapKernelCacheId(*f, during, seen), InodeTable::CacheMatch::kSame);
    EXPECT_TRUE(table.KernelCacheFollows(*f, during, seen));
    change.Made(RecentIdentity(7));
  }
  // Observed before the change, compared after it ended: with a coarse clock the
  // stale identity can carry the very same ctime, so only the count orders them.
  const auto stale = RecentIdentity(9);
  MountChange(table, f.get()).Made(stale);
  const auto seen = InodeTable::Observe(*f);
  {
    MountChange change(table, f.get());
    cache::SourceIdentity after = stale;
    after.size = 8;  // same tick: same ctime and mtime
    change.Made(after);
  }
  EXPECT_EQ(table.SwapKernelCacheId(*f, stale, seen), InodeTable::CacheMatch::kSame);
  EXPECT_TRUE(table.KernelCacheFollows(*f, stale, seen));
  // Taken afresh, the stale identity is a change the mount did not make.
  EXPECT_FALSE(table.KernelCacheFollows(*f, stale, InodeTable::Observe(*f)));
  EXPECT_EQ(table.SwapKernelCacheId(*f, stale, InodeTable::Observe(*f)),
            InodeTable::CacheMatch::kChanged);
}

TEST(InodeTable, FailedMountChangeKeepsTheRecordedIdentity) {
  InodeTable table = MakeTable();
  auto f = table.Remember(table.root(), "f", FakeStat(1, 70, S_IFREG), UniqueFd());
  const auto id = RecentIdentity(5);
  MountChange(table, f.get()).Made(id);
  { MountChange failed(table, f.get()); }
  EXPECT_EQ(table.SwapKernelCacheId(*f, id, InodeTable::Observe(*f)),
            InodeTable::CacheMatch::kSame);
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

namespace epochfs::fs {
namespace {

// Pins hold a file's fd until its node exists, within 3/4 of the file fd budget.
TEST(InodeTable, PinsAreHeldUntilTheNodeExistsWithinTheBudget) {
  UniqueFd root(::open("/tmp", O_PATH | O_DIRECTORY | O_CLOEXEC));
  InodeTable table(std::move(root), FakeStat(1, 2, S_IFDIR | 0755), /*max_file_fds=*/4);
  auto fd = [] { return UniqueFd(::open("/tmp", O_PATH | O_CLOEXEC)); };
  auto known = table.Remember(table.root(), "known", FakeStat(1, 200, S_IFREG), fd());
  EXPECT_TRUE(table.Pin(FakeStat(1, 200, S_IFREG), fd())) << "known: nothing to pin";
  EXPECT_EQ(table.pins(), 0u);
  EXPECT_TRUE(table.Pin(FakeStat(1, 201, S_IFREG), fd()));
  EXPECT_TRUE(table.Pin(FakeStat(1, 201, S_IFREG), fd())) << "pinned already";
  EXPECT_TRUE(table.Pin(FakeStat(1, 202, S_IFREG), fd()));
  EXPECT_TRUE(table.Pin(FakeStat(1, 203, S_IFREG), fd()));
  EXPECT_FALSE(table.Pin(FakeStat(1, 204, S_IFREG), fd())) << "3 of 4 fds are pins already";
  EXPECT_EQ(table.pins(), 3u);
  EXPECT_EQ(table.file_fds(), 4u);  // one node, three pins
  // The kernel looks a pinned file up: its node's fd replaces the pin.
  auto looked_up = table.Remember(table.root(), "b", FakeStat(1, 201, S_IFREG), fd());
  EXPECT_TRUE(looked_up->path_fd.valid());
  EXPECT_EQ(table.pins(), 2u);
  EXPECT_EQ(table.file_fds(), 4u);
  EXPECT_EQ(table.ReleasePins(/*all=*/true), 0u);
  EXPECT_EQ(table.file_fds(), 2u);
}

// While the warm-up holds its pins, a file node the kernel forgets (it learnt it early,
// from a listing, and dropped it under memory pressure) leaves a pin behind, so that
// its next LOOKUP finds the metadata in memory; afterwards forgetting pins nothing.
TEST(InodeTable, AForgottenNodeLeavesAPinWhileTheWarmUpHolds) {
  UniqueFd root(::open("/tmp", O_PATH | O_DIRECTORY | O_CLOEXEC));
  InodeTable table(std::move(root), FakeStat(1, 2, S_IFDIR | 0755), /*max_file_fds=*/8);
  auto fd = [] { return UniqueFd(::open("/tmp", O_PATH | O_CLOEXEC)); };
  table.SetPinForgotten(true);
  auto a = table.Remember(table.root(), "a", FakeStat(1, 300, S_IFREG), fd());
  auto no_fd = table.Remember(table.root(), "n", FakeStat(1, 301, S_IFREG), UniqueFd());
  EXPECT_TRUE(table.Forget(a->nodeid, 1));
  EXPECT_TRUE(table.Forget(no_fd->nodeid, 1));
  EXPECT_EQ(table.pins(), 1u);  // a node without an fd has nothing to pin
  EXPECT_TRUE(a->path_fd.valid()) << "the node keeps its own fd for whoever holds it";
  EXPECT_EQ(table.file_fds(), 1u);
  // Looked up again: the new node takes over, the pin goes.
  auto again = table.Remember(table.root(), "a", FakeStat(1, 300, S_IFREG), fd());
  EXPECT_EQ(table.pins(), 0u);
  table.SetPinForgotten(false);
  EXPECT_TRUE(table.Forget(again->nodeid, 1));
  EXPECT_EQ(table.pins(), 0u);
  EXPECT_EQ(table.file_fds(), 0u);
}

// A pinned file deleted underneath loses its pin at the next check: a pin must not
// keep a deleted file's space.
TEST(InodeTable, PinOfADeletedFileIsReleased) {
  testing::TempDir dir;
  UniqueFd root(::open(dir.path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  struct ::stat root_st {};
  ASSERT_EQ(::fstat(root.get(), &root_st), 0);
  InodeTable table(std::move(root), root_st);
  for (const char* name : {"keep", "delete"}) {
    UniqueFd pin(::open(dir.Write(name, "bytes").c_str(), O_PATH | O_CLOEXEC));
    struct ::stat st {};
    ASSERT_EQ(::fstat(pin.get(), &st), 0);
    ASSERT_TRUE(table.Pin(st, std::move(pin)));
  }
  EXPECT_EQ(table.ReleasePins(/*all=*/false), 2u);
  ASSERT_EQ(::unlink((dir / "delete").c_str()), 0);
  EXPECT_EQ(table.ReleasePins(/*all=*/false), 1u);
  EXPECT_EQ(table.file_fds(), 1u);
  EXPECT_EQ(table.ReleasePins(/*all=*/true), 0u);
}

}  // namespace
}  // namespace epochfs::fs
