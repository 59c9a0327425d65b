// The core's routing between the source and the control directory, and what it lets
// the kernel cache, without a mount (tests/ covers the same through real mounts).
#include "fs/filesystem.h"

#include <fcntl.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <future>
#include <thread>
#include <vector>

#include "base/testing/test_files.h"
#include "fs/fuse_ops.h"

namespace epochfs::fs {
namespace {

constexpr uint64_t kStats = 3;
constexpr uint64_t kPlan = 4;

class RecordingInvalidator : public Invalidator {
 public:
  void InvalidateEntry(uint64_t, const std::string&) override {}
  void InvalidateInode(uint64_t nodeid) override { inodes.push_back(nodeid); }
  void InvalidateAttrs(uint64_t nodeid) override { attrs.push_back(nodeid); }
  bool ShowSize(uint64_t nodeid, uint64_t size, char last_byte) override {
    sizes.push_back({nodeid, size, last_byte});
    return true;
  }
  std::vector<uint64_t> attrs;
  std::vector<uint64_t> inodes;
  struct Shown {
    uint64_t nodeid, size;
    char last_byte;
    bool operator==(const Shown&) const = default;
  };
  std::vector<Shown> sizes;
};

class FilesystemTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_.Write("src/file.txt", "hello");
    dir_.Mkdir("src/folder");
    dir_.Mkdir("src/.epochfs");  // a source folder of that name stays hidden
    cache::CacheOptions cache_options;
    cache_options.cache_dir = dir_ / "cache";
    cache_options.ram_budget = 8 << 20;
    cache_options.disk_budget = 0;
    cache_options.use_io_uring = false;
    auto cache = cache::Cache::Open(cache_options);
    ASSERT_TRUE(cache.ok()) << cache.status().ToString();
    cache_ = std::move(cache).value();
    UniqueFd root(::open((dir_ / "src").c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(root);
    auto source = SourceFs::Create(std::move(root), SourceFsOptions{}, *cache_, nullptr);
    ASSERT_TRUE(source.ok()) << source.status().ToString();
    source_ = std::move(source).value();
    control_ = std::make_unique<ControlDir>(
        std::vector<ControlDir::File>{
            ControlDir::File{"stats", kStats, [] { return std::string("{}\n"); }},
            ControlDir::File{"plan", kPlan, [] { return std::string("no plan\n"); },
                             [this](uint64_t, std::string_view data, uid_t, gid_t, pid_t) {
                               written_ += data;
                               return Status::Ok();
                             }}},
        0, 0);
  }

  std::unique_ptr<Filesystem> Make(bool kernel_asks_to_open) {
    FilesystemOptions options;
    options.timeouts.entry_s = 7;
    options.timeouts.attr_s = 8;
    options.timeouts.negative_s = 9;
    options.kernel_asks_to_open = kernel_asks_to_open;
    auto core = std::make_unique<Filesystem>(*source_, *control_, options);
    core->AttachKernel(nullptr, &kernel_);
    return core;
  }

  static int Errno(const Status& status) { return ToErrno(status); }

  testing::TempDir dir_;
  std::unique_ptr<cache::Cache> cache_;
  std::unique_ptr<SourceFs> source_;
  std::unique_ptr<ControlDir> control_;
  RecordingInvalidator kernel_;
  std::string written_;
};

TEST_F(FilesystemTest, ControlNodesAreFoundByNameAndNeverTrusted) {
  auto core = Make(true);
  auto dir = core->Lookup(kRootNodeId, ControlDir::kDirName);
  ASSERT_TRUE(dir.ok());
  EXPECT_EQ(dir->nodeid, ControlDir::kDirNodeId);
  EXPECT_TRUE(S_ISDIR(dir->attr.st_mode));
  EXPECT_EQ(dir->entry_timeout, 0);
  EXPECT_EQ(dir->attr_timeout, 0);
  auto stats = core->Lookup(ControlDir::kDirNodeId, "stats");
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->nodeid, kStats);
  EXPECT_EQ(stats->entry_timeout, 0);
  auto attr = core->GetAttr(kStats, nullptr);
  ASSERT_TRUE(attr.ok());
  EXPECT_EQ(attr->timeout, 0);
  // No negative entry in the control directory: a name there is never remembered.
  EXPECT_EQ(Errno(core->Lookup(ControlDir::kDirNodeId, "nope").status()), ENOENT);
  EXPECT_TRUE(kernel_.inodes.empty()) << "\"open\" mode reads control files with direct I/O";
}

TEST_F(FilesystemTest, SourceEntriesCarryTheModesTimeouts) {
  auto open_mode = Make(true);
  auto file = open_mode->Lookup(kRootNodeId, "file.txt");
  ASSERT_TRUE(file.ok());
  // Close-to-open is the OPEN's own check (see OpenOfAFileChangedUnderneath...): no
  // LOOKUP per open.
  EXPECT_EQ(file->entry_timeout, 7);
  EXPECT_EQ(file->attr_timeout, 8);
  auto folder = open_mode->Lookup(kRootNodeId, "folder");
  ASSERT_TRUE(folder.ok());
  EXPECT_EQ(folder->entry_timeout, 7);
  auto missing = open_mode->Lookup(kRootNodeId, "missing");
  ASSERT_TRUE(missing.ok()) << "a negative entry";
  EXPECT_EQ(missing->nodeid, 0u);
  EXPECT_EQ(missing->entry_timeout, 9);

  auto notify_mode = Make(false);
  auto again = notify_mode->Lookup(kRootNodeId, "file.txt");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->entry_timeout, 7);
}

// "open" mode: the kernel keeps a file's name and attributes between opens, so an open
// that finds the file changed since its last LOOKUP must not let the kernel read with
// the old size. It drops the kernel's node and answers ESTALE (the kernel then looks
// the name up again and retries the open once). Until a reply the kernel surely applied
// is recorded, an open sets the kernel's size itself, by storing the file's last byte:
// the LOOKUP's reply, right after the drop, may answer a LOOKUP sent before it, which
// the kernel discards (InodeTable::DropKernelAttrs), and reads stop at its size.
TEST_F(FilesystemTest, OpenOfAFileChangedUnderneathMakesTheKernelLookItUpAgain) {
  auto core = Make(true);
  auto file = core->Lookup(kRootNodeId, "file.txt");
  ASSERT_TRUE(file.ok());
  auto first = core->Open(file->nodeid, O_RDONLY);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_FALSE(first->direct_io);
  EXPECT_TRUE(kernel_.inodes.empty());

  dir_.Write("src/file.txt", "hello, and more");  // changed underneath: a new size
  auto stale = core->Open(file->nodeid, O_RDONLY);
  EXPECT_EQ(Errno(stale.status()), ESTALE);
  EXPECT_EQ(kernel_.inodes, std::vector<uint64_t>{file->nodeid});
  // The kernel's retry: LOOKUP (fresh attributes), then OPEN, which drops the pages.
  auto again = core->Lookup(kRootNodeId, "file.txt");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->nodeid, file->nodeid);
  EXPECT_EQ(again->attr.st_size, 15);
  auto retried = core->Open(file->nodeid, O_RDONLY);
  ASSERT_TRUE(retried.ok()) << retried.status().ToString();
  EXPECT_FALSE(retried->direct_io) << "a shared mapping of it would fail (ENODEV)";
  // Its pages were read from "hello" (kernel_cache_id); whatever the kernel read since
  // the ESTALE's drop, they go again before the store makes the size larger.
  EXPECT_TRUE(retried->keep_cache);
  EXPECT_EQ(kernel_.inodes, (std::vector<uint64_t>{file->nodeid, file->nodeid}));
  using Shown = RecordingInvalidator::Shown;
  EXPECT_EQ(kernel_.sizes, std::vector<Shown>{(Shown{file->nodeid, 15, 'e'})});

  // Grown again before the kernel could look it up a second time: no error, and the
  // size is set again.
  dir_.Write("src/file.txt", "hello, and more still");
  auto grown = core->Open(file->nodeid, O_RDONLY);
  ASSERT_TRUE(grown.ok()) << grown.status().ToString();
  EXPECT_FALSE(grown->direct_io);
  EXPECT_EQ(kernel_.sizes.back(), (Shown{file->nodeid, 21, 'l'}));

  // Shrunk, to less than the size stored (more than any reply told): a store cannot
  // shrink the kernel's size, so this open reads with direct I/O (not clamped to that
  // size, and ended where the daemon's reads end).
  dir_.Write("src/file.txt", "hello, and more s");
  auto shrunk = core->Open(file->nodeid, O_RDONLY);
  ASSERT_TRUE(shrunk.ok()) << shrunk.status().ToString();
  EXPECT_TRUE(shrunk->direct_io);
  EXPECT_EQ(kernel_.sizes.size(), 2u);
}

// A node is opened by the name it is known by. A lookup that finds the node's file by
// another name (a hard link, or a name a rename underneath ends right after the
// lookup's stat: a listing's "x.tmp" renamed over "x") must not move the node to that
// name while its own still names the file: once the other name goes, every open of
// the node would answer ESTALE, and the kernel's one retry (its LOOKUP of the name it
// uses) would give the file a second node. Seen in the torture test as an owner's open
// failing with ESTALE after its own rename underneath.
TEST_F(FilesystemTest, ALookupByAnotherNameOfTheFileKeepsTheNameItsNodeOpensBy) {
  auto core = Make(true);
  ASSERT_EQ(::link((dir_.path() / "src/file.txt").c_str(),
                   (dir_.path() / "src/file.tmp").c_str()), 0);
  auto file = core->Lookup(kRootNodeId, "file.txt");
  ASSERT_TRUE(file.ok());
  auto other = core->Lookup(kRootNodeId, "file.tmp");
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->nodeid, file->nodeid);  // one file, one node
  ASSERT_EQ(::unlink((dir_.path() / "src/file.tmp").c_str()), 0);

  // The unlink moved the file's ctime: the kernel is asked to look the name up again
  // (one ESTALE), and its retry must then open it, through the same node.
  auto open = core->Open(file->nodeid, O_RDONLY);
  if (!open.ok() && Errno(open.status()) == ESTALE) {
    auto retry = core->Lookup(kRootNodeId, "file.txt");
    ASSERT_TRUE(retry.ok());
    EXPECT_EQ(retry->nodeid, file->nodeid) << "a second node for the same file";
    open = core->Open(retry->nodeid, O_RDONLY);
  }
  ASSERT_TRUE(open.ok()) << open.status().ToString();
  EXPECT_TRUE(core->Release(std::move(open->handle)).ok());
}

// A write through the mount is in the kernel's pages before it is in the source, so no
// open drops the pages of a file open for writing (the kernel would keep zeros where
// such a write went: tests/integrity_test.cc); and a writer never gets direct I/O (the
// kernel drops a direct write's range before the write reaches the source).
TEST_F(FilesystemTest, NoOpenDropsThePagesOfAFileOpenForWriting) {
  auto core = Make(true);
  auto file = core->Lookup(kRootNodeId, "file.txt");
  ASSERT_TRUE(file.ok());
  auto writer = core->Open(file->nodeid, O_WRONLY | O_APPEND);
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  EXPECT_FALSE(writer->direct_io);

  dir_.Write("src/file.txt", "hello, and more");  // changed underneath
  auto stale = core->Open(file->nodeid, O_RDONLY);
  EXPECT_EQ(Errno(stale.status()), ESTALE);  // the kernel's attributes first
  auto again = core->Lookup(kRootNodeId, "file.txt");
  ASSERT_TRUE(again.ok());
  auto reader = core->Open(file->nodeid, O_RDONLY);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  EXPECT_TRUE(kernel_.inodes.empty()) << "a drop while a writer has the file open";
  EXPECT_TRUE(reader->keep_cache);
  EXPECT_TRUE(reader->direct_io) << "the reader must read around the older pages";

  EXPECT_EQ(kernel_.attrs, std::vector<uint64_t>{file->nodeid}) << "the attributes only";

  // Changed again: a second writer is not given direct I/O (whether it is asked to look
  // the name up first depends on the relookup's window, a tenth of a second), and drops
  // the kernel's attributes only.
  dir_.Write("src/file.txt", "hi");
  auto second = core->Open(file->nodeid, O_RDWR);
  if (!second.ok() && Errno(second.status()) == ESTALE) {
    ASSERT_TRUE(core->Lookup(kRootNodeId, "file.txt").ok());
    second = core->Open(file->nodeid, O_RDWR);
  }
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_FALSE(second->direct_io);
  EXPECT_TRUE(kernel_.inodes.empty());

  // The drop waits for the last writer's release.
  EXPECT_TRUE(core->Release(std::move(writer->handle)).ok());
  EXPECT_TRUE(kernel_.inodes.empty());
  EXPECT_TRUE(core->Release(std::move(second->handle)).ok());
  EXPECT_EQ(kernel_.inodes, std::vector<uint64_t>{file->nodeid});
  EXPECT_TRUE(core->Release(std::move(reader->handle)).ok());
  ASSERT_TRUE(core->Lookup(kRootNodeId, "file.txt").ok());
  auto after = core->Open(file->nodeid, O_RDONLY);
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  // Its LOOKUP came within a second of the release's drop, so the kernel's size is not
  // trusted, and the file shrank (15 bytes, then 2): a store cannot set a smaller size.
  EXPECT_TRUE(after->direct_io);
  EXPECT_TRUE(kernel_.sizes.empty());
}

// A reader that keeps the file open learns a size changed underneath from a GETATTR
// (`tail -f` once the attributes expired): the kernel's pages of the old file go before
// that reply, and only for a new size (their old last page is zero-filled past the old
// end). Under a writer the drop waits for its release.
TEST_F(FilesystemTest, AGetattrThatFindsANewSizeDropsTheKernelsPagesFirst) {
  auto core = Make(true);
  auto file = core->Lookup(kRootNodeId, "file.txt");
  ASSERT_TRUE(file.ok());
  auto reader = core->Open(file->nodeid, O_RDONLY);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  ASSERT_TRUE(core->Read(file->nodeid, reader->handle.get(), 0, 100).ok());
  kernel_.inodes.clear();

  dir_.Write("src/file.txt", "HELLO");  // rewritten in place: the same size
  ASSERT_TRUE(core->GetAttr(file->nodeid, reader->handle.get()).ok());
  EXPECT_TRUE(kernel_.inodes.empty()) << "no zeros to show: the next open decides";

  dir_.Write("src/file.txt", "HELLO, and more");
  auto grown = core->GetAttr(file->nodeid, reader->handle.get());
  ASSERT_TRUE(grown.ok());
  EXPECT_EQ(grown->attr.st_size, 15);
  EXPECT_EQ(kernel_.inodes, std::vector<uint64_t>{file->nodeid});
  ASSERT_TRUE(core->GetAttr(file->nodeid, reader->handle.get()).ok());
  ASSERT_TRUE(core->GetAttr(file->nodeid, nullptr).ok());
  EXPECT_EQ(kernel_.inodes.size(), 1u) << "once per change";

  auto writer = core->Open(file->nodeid, O_WRONLY);
  if (!writer.ok() && Errno(writer.status()) == ESTALE) {
    ASSERT_TRUE(core->Lookup(kRootNodeId, "file.txt").ok());
    writer = core->Open(file->nodeid, O_WRONLY);
  }
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  kernel_.inodes.clear();
  dir_.Write("src/file.txt", "HELLO, and more still");
  ASSERT_TRUE(core->GetAttr(file->nodeid, reader->handle.get()).ok());
  EXPECT_TRUE(kernel_.inodes.empty()) << "a drop while a writer has the file open";
  EXPECT_TRUE(core->Release(std::move(writer->handle)).ok());
  EXPECT_EQ(kernel_.inodes, std::vector<uint64_t>{file->nodeid}) << "paid at its release";
  EXPECT_TRUE(core->Release(std::move(reader->handle)).ok());
}

// A FUSE worker never waits for a node's open_order (its holder may be dropping pages
// that a READ in flight keeps locked, which only a free worker answers): an open, a
// GETATTR and a release's owed drop made with kNoWait answer kBusy while another thread
// holds it, change nothing, and succeed once made again where waiting is allowed.
TEST_F(FilesystemTest, CallsThatMayNotWaitForAHeldOpenOrderAreToldBusy) {
  auto core = Make(true);
  auto file = core->Lookup(kRootNodeId, "file.txt");
  ASSERT_TRUE(file.ok());
  std::shared_ptr<Inode> node = source_->inodes().Find(file->nodeid);
  ASSERT_TRUE(node);
  auto writer = core->Open(file->nodeid, O_WRONLY);
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  node->pages_drop_owed = true;  // as an open that found older pages under this writer
  kernel_.inodes.clear();

  std::promise<void> held, let_go;
  std::thread holder([&] {
    MutexLock order(node->open_order);
    held.set_value();
    let_go.get_future().wait();
  });
  held.get_future().wait();
  auto open = core->Open(file->nodeid, O_RDONLY, OrderWait::kNoWait);
  EXPECT_EQ(open.status().code(), Code::kBusy) << open.status().ToString();
  auto attr = core->GetAttr(file->nodeid, nullptr, OrderWait::kNoWait);
  EXPECT_EQ(attr.status().code(), Code::kBusy) << attr.status().ToString();
  Status release = core->Release(std::move(writer->handle), OrderWait::kNoWait);
  EXPECT_EQ(release.code(), Code::kBusy) << release.ToString();
  EXPECT_EQ(node->open_handles.load(), 0) << "the handle is gone; only its drop waits";
  EXPECT_TRUE(node->pages_drop_owed.load());
  EXPECT_TRUE(kernel_.inodes.empty()) << "nothing dropped without the lock";
  let_go.set_value();
  holder.join();

  EXPECT_TRUE(core->DropOwedPages(file->nodeid).ok());
  EXPECT_EQ(kernel_.inodes, std::vector<uint64_t>{file->nodeid});
  EXPECT_FALSE(node->pages_drop_owed.load());
  auto reader = core->Open(file->nodeid, O_RDONLY, OrderWait::kNoWait);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  EXPECT_TRUE(core->GetAttr(file->nodeid, nullptr, OrderWait::kNoWait).ok());
  EXPECT_TRUE(core->Release(std::move(reader->handle), OrderWait::kNoWait).ok());
}

TEST_F(FilesystemTest, NotifyModeAnswersOpenOnceAndDropsControlPagesAtLookup) {
  auto core = Make(false);
  auto file = core->Lookup(kRootNodeId, "file.txt");
  ASSERT_TRUE(file.ok());
  auto open = core->Open(file->nodeid, O_RDONLY);
  ASSERT_TRUE(open.ok());
  EXPECT_TRUE(open->kernel_opens_alone);
  EXPECT_EQ(open->handle, nullptr);
  ASSERT_TRUE(core->Lookup(ControlDir::kDirNodeId, "stats").ok());
  EXPECT_EQ(kernel_.inodes, std::vector<uint64_t>{kStats});
  // Without a handle, reads go to the node's own inode.
  auto data = core->Read(file->nodeid, nullptr, 0, 100);
  ASSERT_TRUE(data.ok());
  EXPECT_EQ(std::string(data->data, data->size), "hello");
}

// In notify mode the kernel never sends RELEASE (not even for a file it created), so
// a create must leave no handle, and so no source fd, behind: the created file is then
// written and read by node. In open mode RELEASE comes, and the handle is the open's.
TEST_F(FilesystemTest, NotifyModeCreateLeavesNoHandleAndTheFileIsWrittenByNode) {
  for (const bool kernel_asks_to_open : {false, true}) {
    SCOPED_TRACE(kernel_asks_to_open ? "open mode" : "notify mode");
    auto core = Make(kernel_asks_to_open);
    const std::string name = kernel_asks_to_open ? "made-open" : "made-notify";
    auto created = core->Create(kRootNodeId, name, 0644, O_CREAT | O_WRONLY | O_TRUNC, Caller{});
    ASSERT_TRUE(created.ok()) << created.status().ToString();
    EXPECT_EQ(created->handle == nullptr, !kernel_asks_to_open);
    EXPECT_EQ(source_->handle_fds().open(), kernel_asks_to_open ? 1u : 0u);
    auto written = core->Write(created->entry.nodeid, created->handle.get(), "fresh", 0,
                               Caller{});
    ASSERT_TRUE(written.ok()) << written.status().ToString();
    EXPECT_EQ(*written, 5u);
    EXPECT_TRUE(core->Release(std::move(created->handle)).ok());
    EXPECT_EQ(source_->handle_fds().open(), 0u);
    EXPECT_EQ(testing::ReadFile(dir_ / "src" / name), "fresh");
  }
}

TEST_F(FilesystemTest, ControlFilesOpenWithDirectIoAndNoHandle) {
  auto core = Make(true);
  auto stats = core->Open(kStats, O_RDONLY);
  ASSERT_TRUE(stats.ok());
  EXPECT_FALSE(stats->kernel_opens_alone);
  EXPECT_TRUE(stats->direct_io);
  EXPECT_EQ(stats->handle, nullptr);
  EXPECT_EQ(Errno(core->Open(kStats, O_WRONLY).status()), EACCES);
  EXPECT_TRUE(core->Open(kPlan, O_WRONLY).ok());
  EXPECT_EQ(Errno(core->Open(ControlDir::kDirNodeId, O_RDONLY).status()), EISDIR);
  EXPECT_TRUE(core->Release(nullptr).ok());  // what RELEASE of a control file hands back

  auto file = core->Lookup(kRootNodeId, "file.txt");
  ASSERT_TRUE(file.ok());
  auto open = core->Open(file->nodeid, O_RDONLY);
  ASSERT_TRUE(open.ok());
  EXPECT_FALSE(open->direct_io);
  ASSERT_NE(open->handle, nullptr);
  auto data = core->Read(file->nodeid, open->handle.get(), 1, 100);
  ASSERT_TRUE(data.ok());
  EXPECT_EQ(std::string(data->data, data->size), "ello");
  EXPECT_TRUE(core->Release(std::move(open->handle)).ok());
}

TEST_F(FilesystemTest, ControlReadsArePaddedSnapshotsAndWritesGoToTheWriter) {
  auto core = Make(true);
  auto head = core->Read(kStats, nullptr, 0, 3);
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(std::string(head->data, head->size), "{}\n");
  auto tail = core->Read(kStats, nullptr, ControlDir::kPaddedSize - 2, 100);
  ASSERT_TRUE(tail.ok());
  EXPECT_EQ(std::string(tail->data, tail->size), "  ");
  auto past = core->Read(kStats, nullptr, ControlDir::kPaddedSize + 5, 100);
  ASSERT_TRUE(past.ok());
  EXPECT_EQ(past->size, 0u);

  auto written = core->Write(kPlan, nullptr, "epochfs-plan 1\n", 0, Caller{});
  ASSERT_TRUE(written.ok());
  EXPECT_EQ(*written, 15u);
  EXPECT_EQ(written_, "epochfs-plan 1\n");
  EXPECT_EQ(Errno(core->Write(kStats, nullptr, "x", 0, Caller{}).status()), EBADF);
  EXPECT_TRUE(core->Fsync(kPlan, nullptr, false).ok());
}

TEST_F(FilesystemTest, OnlyTruncatingAWritableControlFileIsAccepted) {
  auto core = Make(true);
  struct ::stat attr {};
  SourceFs::AttrChange truncate;
  truncate.size = true;
  auto plan = core->SetAttr(kPlan, attr, truncate, nullptr, Caller{});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->timeout, 0);
  EXPECT_EQ(Errno(core->SetAttr(kStats, attr, truncate, nullptr, Caller{}).status()), EPERM);
  SourceFs::AttrChange truncate_and_ctime = truncate;
  truncate_and_ctime.other = true;
  EXPECT_EQ(Errno(core->SetAttr(kPlan, attr, truncate_and_ctime, nullptr, Caller{}).status()),
            EPERM);
  SourceFs::AttrChange chmod;
  chmod.mode = true;
  EXPECT_EQ(Errno(core->SetAttr(kPlan, attr, chmod, nullptr, Caller{}).status()), EPERM);
}

TEST_F(FilesystemTest, TheControlDirectoryCannotBeChanged) {
  auto core = Make(true);
  const uint64_t dir = ControlDir::kDirNodeId;
  EXPECT_EQ(Errno(core->MakeDir(dir, "d", 0755, Caller{}).status()), EPERM);
  EXPECT_EQ(Errno(core->MakeNode(dir, "n", S_IFREG | 0644, 0, Caller{}).status()), EPERM);
  EXPECT_EQ(Errno(core->SymLink("x", dir, "l", Caller{}).status()), EPERM);
  EXPECT_EQ(Errno(core->Create(dir, "c", 0644, O_WRONLY, Caller{}).status()), EPERM);
  EXPECT_EQ(Errno(core->Unlink(dir, "stats")), EPERM);
  EXPECT_EQ(Errno(core->RemoveDir(kRootNodeId, ControlDir::kDirName)), EPERM);
  EXPECT_EQ(Errno(core->Rename(kRootNodeId, "file.txt", dir, "f", 0)), EPERM);
  EXPECT_EQ(Errno(core->Rename(kRootNodeId, ControlDir::kDirName, kRootNodeId, "x", 0)), EPERM);
  EXPECT_EQ(Errno(core->Link(kStats, kRootNodeId, "s").status()), EPERM);
  EXPECT_EQ(Errno(core->SetXattr(kStats, "user.x", "1", 0)), EPERM);
  EXPECT_EQ(Errno(core->RemoveXattr(kStats, "user.x")), EPERM);
  EXPECT_EQ(Errno(core->GetXattr(kStats, "user.x", 0).status()), ENODATA);
  auto list = core->ListXattr(kStats, 0);
  ASSERT_TRUE(list.ok());
  EXPECT_TRUE(list->empty());
  core->Forget(kStats, 1);  // ignored: control nodes live as long as the mount
  EXPECT_TRUE(core->Lookup(dir, "stats").ok());
}

TEST_F(FilesystemTest, TheControlDirectoryListsItsFilesWithoutAHandle) {
  auto core = Make(true);
  auto dh = core->OpenDir(ControlDir::kDirNodeId);
  ASSERT_TRUE(dh.ok());
  EXPECT_EQ(*dh, nullptr);
  std::vector<std::string> names;
  std::vector<off_t> offsets;
  auto emit = [&](const std::string& name, const EntryReply& entry, off_t next) {
    EXPECT_EQ(entry.entry_timeout, 0);
    names.push_back(name);
    offsets.push_back(next);
    return true;
  };
  ASSERT_TRUE(core->ReadDir(ControlDir::kDirNodeId, nullptr, 0, true, emit).ok());
  EXPECT_EQ(names, (std::vector<std::string>{"stats", "plan"}));
  EXPECT_EQ(offsets, (std::vector<off_t>{1, 2}));
  names.clear();
  ASSERT_TRUE(core->ReadDir(ControlDir::kDirNodeId, nullptr, 1, false, emit).ok());
  EXPECT_EQ(names, std::vector<std::string>{"plan"});
  EXPECT_TRUE(core->FsyncDir(nullptr, false).ok());
  core->ReleaseDir(nullptr);

  // The root's listing never shows the control directory.
  auto root = core->OpenDir(kRootNodeId);
  ASSERT_TRUE(root.ok());
  ASSERT_NE(*root, nullptr);
  names.clear();
  ASSERT_TRUE(core->ReadDir(kRootNodeId, root->get(), 0, false,
                            [&](const std::string& name, const EntryReply&, off_t) {
                              names.push_back(name);
                              return true;
                            })
                  .ok());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{".", "..", "file.txt", "folder"}));
  core->ReleaseDir(std::move(*root));
}

}  // namespace
}  // namespace epochfs::fs
