// Black-box tests of what the filesystem promises beyond reading: POSIX semantics of
// attribute changes and creation, close-to-open consistency by name, reads that see what
// other writers wrote, and faults (odd names, a damaged index, a low fd limit) that must
// never kill the daemon or lose data. Each one mounts epochfs for real.
#include <fcntl.h>
#include <signal.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "base/unique_fd.h"
#include "tests/mount_fixture.h"

namespace epochfs::testing {
namespace {

// Sets the process umask for the life of the guard: the kernel applies the caller's
// umask to a create before epochfs sees it, so tests of modes pin it.
class ScopedUmask {
 public:
  explicit ScopedUmask(mode_t mask) : old_(::umask(mask)) {}
  ~ScopedUmask() { ::umask(old_); }

 private:
  mode_t old_;
};

struct ::stat Lstat(const fsys::path& p) {
  struct ::stat st {};
  EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p << ": " << std::strerror(errno);
  return st;
}

// "line 0\n" up to "line to-1\n", from `from` on.
std::string Lines(int from, int to) {
  std::string text;
  for (int i = from; i < to; i++) text += "line " + std::to_string(i) + "\n";
  return text;
}

class IntegrityTest : public ConsistencyModeTest {
 protected:
  // A ten-line log written an hour ago (outside any racily clean window), the mount over
  // it, and a first read of it through the mount, checked. The caller asserts ok().
  std::unique_ptr<Mount> MountOverAnHourOldLog() {
    WriteFile(src_ / "log", Lines(0, 10));
    AgeFile(src_ / "log", 3600);
    auto m = MountIt();
    if (m->ok()) {
      EXPECT_EQ(ReadFile(mnt_ / "log"), Lines(0, 10));
    }
    return m;
  }
};

INSTANTIATE_TEST_SUITE_P(Modes, IntegrityTest, ::testing::Values("notify", "open"));

// ---------------------------------------------------------------------------------
// Attribute changes and creation

TEST_P(IntegrityTest, DirectoryAttributeChangesReachTheSource) {
  auto m = MountIt();
  ASSERT_TRUE(m->ok());
  ASSERT_EQ(::mkdir((mnt_ / "d").c_str(), 0755), 0);

  ASSERT_EQ(::chmod((mnt_ / "d").c_str(), 0700), 0) << std::strerror(errno);
  EXPECT_EQ(Lstat(src_ / "d").st_mode & 07777, 0700u);

  ASSERT_EQ(::chown((mnt_ / "d").c_str(), 65534, 65533), 0) << std::strerror(errno);
  EXPECT_EQ(Lstat(src_ / "d").st_uid, 65534u);
  EXPECT_EQ(Lstat(src_ / "d").st_gid, 65533u);

  struct timespec times[2] = {{1000000000, 5}, {1100000000, 7}};
  ASSERT_EQ(::utimensat(AT_FDCWD, (mnt_ / "d").c_str(), times, 0), 0) << std::strerror(errno);
  EXPECT_EQ(Lstat(src_ / "d").st_atim.tv_sec, 1000000000);
  EXPECT_EQ(Lstat(src_ / "d").st_mtim.tv_sec, 1100000000);
  EXPECT_EQ(Lstat(src_ / "d").st_mtim.tv_nsec, 7);

  // Extended attributes of a directory are the directory's too.
  ASSERT_EQ(::setxattr((mnt_ / "d").c_str(), "user.k", "v1", 2, 0), 0) << std::strerror(errno);
  char value[8] = {};
  ASSERT_EQ(::getxattr((src_ / "d").c_str(), "user.k", value, sizeof(value)), 2);
  EXPECT_EQ(std::string(value, 2), "v1");
  ASSERT_EQ(::getxattr((mnt_ / "d").c_str(), "user.k", value, sizeof(value)), 2);
  ASSERT_EQ(::removexattr((mnt_ / "d").c_str(), "user.k"), 0) << std::strerror(errno);
  EXPECT_LT(::getxattr((src_ / "d").c_str(), "user.k", value, sizeof(value)), 0);

  // And through the mount's own view.
  EXPECT_EQ(Lstat(mnt_ / "d").st_mode & 07777, 0700u);
  EXPECT_EQ(Lstat(mnt_ / "d").st_uid, 65534u);
  // The root of the mount is a directory too.
  ASSERT_EQ(::chmod(mnt_.c_str(), 0751), 0) << std::strerror(errno);
  EXPECT_EQ(Lstat(src_).st_mode & 07777, 0751u);
}

TEST_P(IntegrityTest, CreatedModesAreExactlyTheCallersAfterItsUmask) {
  auto m = MountIt();
  ASSERT_TRUE(m->ok());
  {
    ScopedUmask mask(0);
    int fd = ::open((mnt_ / "f666").c_str(), O_CREAT | O_WRONLY, 0666);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    ::close(fd);
    ASSERT_EQ(::mkdir((mnt_ / "d777").c_str(), 0777), 0);
    ASSERT_EQ(::mknod((mnt_ / "fifo").c_str(), S_IFIFO | 0666, 0), 0);
  }
  EXPECT_EQ(Lstat(src_ / "f666").st_mode & 07777, 0666u);
  EXPECT_EQ(Lstat(src_ / "d777").st_mode & 07777, 0777u);
  EXPECT_EQ(Lstat(src_ / "fifo").st_mode & 07777, 0666u);
  {
    ScopedUmask mask(027);
    int fd = ::open((mnt_ / "f640").c_str(), O_CREAT | O_WRONLY, 0666);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    ::close(fd);
  }
  EXPECT_EQ(Lstat(src_ / "f640").st_mode & 07777, 0640u);
}

TEST_P(IntegrityTest, SetuidSetgidAndStickyBitsSurviveCreate) {
  auto m = MountIt();
  ASSERT_TRUE(m->ok());
  ScopedUmask mask(0);
  int fd = ::open((mnt_ / "suid").c_str(), O_CREAT | O_WRONLY, 06755);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ::close(fd);
  EXPECT_EQ(Lstat(src_ / "suid").st_mode & 07777, 06755u);
  ASSERT_EQ(::mkdir((mnt_ / "sticky").c_str(), 01777), 0);
  EXPECT_EQ(Lstat(src_ / "sticky").st_mode & 07777, 01777u);
  ASSERT_EQ(::mknod((mnt_ / "sgid_fifo").c_str(), S_IFIFO | 02644, 0), 0);
  EXPECT_EQ(Lstat(src_ / "sgid_fifo").st_mode & 07777, 02644u);
}

TEST_P(IntegrityTest, SetgidDirectoryGivesItsGroupToNewEntries) {
  fsys::create_directories(src_ / "sg");
  ASSERT_EQ(::chown((src_ / "sg").c_str(), 0, 123), 0);
  ASSERT_EQ(::chmod((src_ / "sg").c_str(), 02777), 0);
  auto m = MountIt();
  ASSERT_TRUE(m->ok());
  ScopedUmask mask(022);
  WriteFile(mnt_ / "sg" / "f", "x");
  ASSERT_EQ(::mkdir((mnt_ / "sg" / "sub").c_str(), 0755), 0);
  ASSERT_EQ(::symlink("f", (mnt_ / "sg" / "link").c_str()), 0);
  EXPECT_EQ(Lstat(src_ / "sg" / "f").st_gid, 123u);
  EXPECT_EQ(Lstat(src_ / "sg" / "sub").st_gid, 123u);
  EXPECT_EQ(Lstat(src_ / "sg" / "link").st_gid, 123u);
  // A directory inherits the setgid bit itself.
  EXPECT_EQ(Lstat(src_ / "sg" / "sub").st_mode & 07777, 02755u);
  EXPECT_EQ(Lstat(mnt_ / "sg" / "f").st_gid, 123u);
}

TEST_P(IntegrityTest, CreatedEntriesBelongToTheCaller) {
  // Another user reaches the mount only with allow_other and search rights on the way.
  fsys::permissions(dir_.path(), fsys::perms::owner_all | fsys::perms::others_exec |
                                     fsys::perms::group_exec);
  fsys::permissions(src_, fsys::perms::all);
  auto m = MountIt({"--allow-other"});
  ASSERT_TRUE(m->ok());
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (::setgid(4321) != 0 || ::setuid(1234) != 0) ::_exit(10);
    ::umask(022);
    int fd = ::open((mnt_ / "mine").c_str(), O_CREAT | O_WRONLY, 02755);
    if (fd < 0) ::_exit(11);
    ::close(fd);
    if (::mkdir((mnt_ / "mydir").c_str(), 0700) != 0) ::_exit(12);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(Lstat(src_ / "mine").st_uid, 1234u);
  EXPECT_EQ(Lstat(src_ / "mine").st_gid, 4321u);
  // The caller is in group 4321, so its setgid bit stays.
  EXPECT_EQ(Lstat(src_ / "mine").st_mode & 07777, 02755u);
  EXPECT_EQ(Lstat(src_ / "mydir").st_uid, 1234u);
}

// ---------------------------------------------------------------------------------
// Close-to-open by name, and reads that see other writers

TEST_P(IntegrityTest, NameRenamedInTheSourceIsSeenByTheNextOpen) {
  WriteFile(src_ / "a", "AAAA\n");
  WriteFile(src_ / "b", "BBBB\n");
  auto m = MountIt();
  ASSERT_TRUE(m->ok());
  EXPECT_EQ(ReadFile(mnt_ / "a"), "AAAA\n");
  EXPECT_EQ(ReadFile(mnt_ / "b"), "BBBB\n");
  fsys::rename(src_ / "a", src_ / "b");
  if (std::string(GetParam()) == "notify") {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the watcher's notice
  }
  EXPECT_EQ(ReadFile(mnt_ / "b"), "AAAA\n");
  // "a" no longer exists: an append by that name creates a new S/a, and S/b is untouched.
  {
    std::ofstream out(mnt_ / "a", std::ios::app);
    out << "x\n";
    ASSERT_TRUE(out.good());
  }
  EXPECT_EQ(ReadFile(src_ / "b"), "AAAA\n");
  EXPECT_EQ(ReadFile(src_ / "a"), "x\n");
  EXPECT_EQ(ReadFile(mnt_ / "a"), "x\n");
  EXPECT_EQ(ReadFile(mnt_ / "b"), "AAAA\n");
}

// A file appended underneath and then renamed through the mount is read whole by its
// new name. The daemon must not take the rename's result for what the kernel shows:
// by the FUSE code a rename moves only the ctime the kernel shows (the size it held
// stays). On this machine's kernel the read was right before that rule too.
TEST_P(IntegrityTest, AFileAppendedUnderneathThenRenamedThroughTheMountIsReadWhole) {
  WriteFile(src_ / "a", "0123456789");
  AgeFile(src_ / "a", 3600);
  auto m = MountIt();
  ASSERT_TRUE(m->ok());
  // Read without a stat (a stat of a node whose ctime the rename invalidated asks the
  // daemon, and brings the size along): the kernel keeps a 10-byte size.
  EXPECT_EQ(ReadWhole(mnt_ / "a"), "0123456789");
  {
    std::ofstream out(src_ / "a", std::ios::app);
    out << "abcdefghij";
  }
  if (std::string(GetParam()) == "notify") {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the watcher's notice
  }
  fsys::rename(mnt_ / "a", mnt_ / "b");
  EXPECT_EQ(ReadWhole(mnt_ / "b"), "0123456789abcdefghij");
}

TEST_P(IntegrityTest, AReaderSeesWhatAnotherOpenWroteBeyondItsOpenSize) {
  WriteFile(src_ / "f", "0123456789");
  AgeFile(src_ / "f", 3600);
  auto m = MountIt();
  ASSERT_TRUE(m->ok());
  int reader = ::open((mnt_ / "f").c_str(), O_RDONLY);
  ASSERT_GE(reader, 0);
  char buf[64] = {};
  ASSERT_EQ(::pread(reader, buf, sizeof(buf), 0), 10);
  int writer = ::open((mnt_ / "f").c_str(), O_WRONLY | O_APPEND);
  ASSERT_GE(writer, 0);
  ASSERT_EQ(::write(writer, "abcdefghij", 10), 10);
  ::close(writer);
  ASSERT_EQ(::pread(reader, buf, sizeof(buf), 0), 20) << "read cut at the size seen at open";
  EXPECT_EQ(std::string(buf, 20), "0123456789abcdefghij");
  // Overwritten in place through another open: the reader's next read sees it too.
  writer = ::open((mnt_ / "f").c_str(), O_WRONLY);
  ASSERT_GE(writer, 0);
  ASSERT_EQ(::pwrite(writer, "XY", 2, 4), 2);
  ::close(writer);
  ASSERT_EQ(::pread(reader, buf, sizeof(buf), 0), 20);
  EXPECT_EQ(std::string(buf, 20), "0123XY6789abcdefghij");
  ::close(reader);
}

// An O_APPEND writer and readers of the same file, all through the mount: no line may
// be lost, in the source or as the mount shows it afterwards, and no reader, through
// the page cache or O_DIRECT, may see a byte that was never written (the kernel used to
// zero-fill a page it re-read while an append was in flight: fs/fuse_ops.cc, DoInit).
// What readers saw while a writer appended lines to a file through the mount.
struct AppendSeen {
  std::string source;    // the source file once the writer closed
  std::string mount;     // the file through the mount then
  std::string want;      // every line, in order
  int zero_direct_reads = 0;  // O_DIRECT reads that held a NUL byte (the file has none)
  int zero_cached_reads = 0;  // the same through the page cache
  std::string first_zero;     // where the first one was, for the failure message
};

// One writer appends `lines` lines to `name` through the mount (O_APPEND), while two
// readers (one O_DIRECT, one through the page cache) open and read the whole file again
// and again, and `beside` runs once per 100 lines.
AppendSeen AppendWithReaders(const fsys::path& mnt, const fsys::path& src, const std::string& name,
                             int lines, const std::function<void()>& beside = {}) {
  AppendSeen seen;
  std::atomic<bool> done{false};
  std::atomic<int> zero_direct{0}, zero_cached{0};
  std::mutex first_mu;
  auto read_loop = [&](bool direct, std::atomic<int>& zero_reads) {
    void* raw = nullptr;
    ASSERT_EQ(::posix_memalign(&raw, 4096, 1 << 20), 0);
    std::unique_ptr<char, decltype(&std::free)> buf(static_cast<char*>(raw), &std::free);
    while (!done) {
      int fd = ::open((mnt / name).c_str(), O_RDONLY | (direct ? O_DIRECT : 0));
      ASSERT_GE(fd, 0) << std::strerror(errno);
      std::string got;
      ssize_t n;
      while ((n = ::read(fd, buf.get(), 1 << 20)) > 0) got.append(buf.get(), n);
      ::close(fd);
      if (size_t zero = got.find('\0'); zero != std::string::npos) {
        zero_reads++;
        std::lock_guard lock(first_mu);
        if (seen.first_zero.empty()) {
          seen.first_zero = std::string(direct ? "an O_DIRECT" : "a cached") + " read of " +
                            std::to_string(got.size()) + " bytes: NUL at " + std::to_string(zero);
        }
      }
    }
  };
  std::thread direct_reader(read_loop, true, std::ref(zero_direct));
  std::thread cached_reader(read_loop, false, std::ref(zero_cached));
  int fd = ::open((mnt / name).c_str(), O_WRONLY | O_APPEND);
  EXPECT_GE(fd, 0) << std::strerror(errno);
  for (int i = 0; i < lines && fd >= 0; i++) {
    const std::string line = "line " + std::to_string(i) + "\n";
    EXPECT_EQ(::write(fd, line.data(), line.size()), static_cast<ssize_t>(line.size()));
    if (beside && i % 100 == 0) beside();
  }
  if (fd >= 0) ::close(fd);
  done = true;
  direct_reader.join();
  cached_reader.join();
  seen.zero_direct_reads = zero_direct;
  seen.zero_cached_reads = zero_cached;
  seen.source = ReadFile(src / name);
  seen.mount = ReadFile(mnt / name);
  return seen;
}

// Appends Lines(from, to) to `path` underneath the mount, as another program would.
void AppendUnderneath(const fsys::path& path, int from, int to) {
  std::ofstream out(path, std::ios::app);
  out << Lines(from, to);
}

// Waits (2 s at most) until the watcher has dropped a file from the kernel since its
// count was `drops_before`; whether it has.
bool AwaitWatcherDrop(const Mount& m, uint64_t drops_before) {
  for (int i = 0; i < 2000; i++) {
    if (m.Stats()["identity_invalidations"].get<uint64_t>() > drops_before) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

TEST_P(IntegrityTest, AppendingWriterWithConcurrentReadersLosesNoLine) {
  WriteFile(src_ / "log", "");
  auto m = MountIt();
  ASSERT_TRUE(m->ok());
  const AppendSeen seen = AppendWithReaders(mnt_, src_, "log", 8000);
  EXPECT_EQ(seen.source, Lines(0, 8000));
  EXPECT_EQ(seen.mount, Lines(0, 8000));
  // The counters say which of the daemon's decisions (drops, direct I/O) were in play.
  EXPECT_EQ(seen.zero_direct_reads, 0) << seen.first_zero << "\n" << m->Stats().dump();
  EXPECT_EQ(seen.zero_cached_reads, 0) << seen.first_zero << "\n" << m->Stats().dump();
  // Nothing changed underneath: no drop may have been forced on the writer.
  EXPECT_EQ(m->Stats()["watch_drops_forced"].get<uint64_t>(), 0u) << m->Stats().dump();
}

// A write through the mount is in the kernel's pages before it is in the source: the
// kernel copies the bytes into its page, sends the WRITE, and extends the file's size
// when the reply comes. A drop of the pages in between lets a reader read that page
// again from the source, without the bytes, and the kernel then keeps zeros where the
// write went. Such a drop comes from the writer's own open when it reads with direct
// I/O (the kernel drops the range before each direct write), and from another opener
// that finds the file changed. Here the appender opens right after a reader's open
// dropped the kernel's attributes: an open whose attributes the daemon cannot vouch
// for.
TEST_P(IntegrityTest, AnAppenderOpenedRightAfterADropLeavesNoZerosForReaders) {
  auto m = MountOverAnHourOldLog();
  ASSERT_TRUE(m->ok());
  const uint64_t drops_before = m->Stats()["identity_invalidations"].get<uint64_t>();
  // Changed underneath: the next open through the mount drops what the kernel holds.
  AppendUnderneath(src_ / "log", 10, 20);
  AgeFile(src_ / "log", 3600);
  if (std::string(GetParam()) == "notify") {
    // The watcher's drop, not an open, is what tells the kernel there; wait for it
    // (within the watcher's lag the kernel's pages and size are the old file's:
    // AnAppendNeverOverwritesBytesAppendedUnderneath).
    ASSERT_TRUE(AwaitWatcherDrop(*m, drops_before)) << "the watcher never dropped the changed file";
  }
  const int reader = ::open((mnt_ / "log").c_str(), O_RDONLY);
  ASSERT_GE(reader, 0);
  const AppendSeen seen = AppendWithReaders(mnt_, src_, "log", 4000);
  ::close(reader);
  EXPECT_EQ(seen.source, Lines(0, 20) + Lines(0, 4000));
  EXPECT_EQ(seen.mount, Lines(0, 20) + Lines(0, 4000));
  EXPECT_EQ(seen.zero_direct_reads, 0) << seen.first_zero << "\n" << m->Stats().dump();
  EXPECT_EQ(seen.zero_cached_reads, 0) << seen.first_zero << "\n" << m->Stats().dump();
  // Nothing changed underneath while the writer had the file open: no drop may have been
  // forced on it (APrecautionaryDropWaitsForTheWriterInsteadOfRacingIt).
  EXPECT_EQ(m->Stats()["watch_drops_forced"].get<uint64_t>(), 0u) << m->Stats().dump();
}

// How long the watcher's drop for a change waits for a writer (fs::ChangeWatcher).
constexpr int64_t kWatcherWriterWaitNs = 1'000'000'000;

// A file read within its racily clean window (cache::kRacilyCleanNs after its ctime) has
// its pages dropped once that window passes, in case a second change came within the
// same timestamp tick ("notify" mode: SourceFs::CheckKernelCache). That drop is only a
// precaution: while a writer through the mount holds the file open it waits for the
// writer, however long. A drop under a writer may race a write on its way into the
// kernel's pages and leave zeros there (fs/write_fence.h); only a change seen underneath
// is worth that risk. This used to be forced after a second, and a CI run once saw
// AnAppenderOpenedRightAfterADropLeavesNoZerosForReaders's file through the mount differ
// from the source after its appends.
TEST_P(IntegrityTest, APrecautionaryDropWaitsForTheWriterInsteadOfRacingIt) {
  if (std::string(GetParam()) != "notify") GTEST_SKIP() << "the watcher's drops: notify mode";
  auto m = MountOverAnHourOldLog();
  ASSERT_TRUE(m->ok());
  // Changed underneath; the watcher's drop records the new identity, and a read right
  // after it meets that identity again within its racily clean window.
  uint64_t drops_before = m->Stats()["identity_invalidations"].get<uint64_t>();
  AppendUnderneath(src_ / "log", 10, 20);
  ASSERT_TRUE(AwaitWatcherDrop(*m, drops_before)) << "the watcher never dropped the changed file";
  EXPECT_EQ(ReadFile(mnt_ / "log"), Lines(0, 20));
  drops_before = m->Stats()["identity_invalidations"].get<uint64_t>();
  const int fd = ::open((mnt_ / "log").c_str(), O_WRONLY | O_APPEND);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  // Held open well past the second a drop for a change waits for its writer.
  const auto held_until =
      std::chrono::steady_clock::now() +
      std::chrono::nanoseconds(2 * kWatcherWriterWaitNs);
  int lines = 0;
  while (std::chrono::steady_clock::now() < held_until) {
    const std::string line = "line " + std::to_string(lines++) + "\n";
    ASSERT_EQ(::write(fd, line.data(), line.size()), static_cast<ssize_t>(line.size()));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const nlohmann::json during = m->Stats();
  ::close(fd);
  EXPECT_GT(during["watch_drops_deferred"].get<uint64_t>(), 0u)
      << "no precautionary drop was asked: the test no longer tests it\n" << during.dump();
  EXPECT_EQ(during["watch_drops_forced"].get<uint64_t>(), 0u) << during.dump();
  EXPECT_EQ(during["identity_invalidations"].get<uint64_t>(), drops_before) << during.dump();
  // Made once the writer is gone.
  bool dropped = false;
  for (int i = 0; i < 300 && !dropped; i++) {
    dropped = m->Stats()["identity_invalidations"].get<uint64_t>() > drops_before;
    if (!dropped) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(dropped) << "the precautionary drop was never made\n" << m->Stats().dump();
  EXPECT_EQ(ReadFile(src_ / "log"), Lines(0, 20) + Lines(0, lines));
  EXPECT_EQ(ReadFile(mnt_ / "log"), Lines(0, 20) + Lines(0, lines));
}

// A change underneath, though, is not hidden for as long as a writer through the mount
// keeps the file open (a log held open for hours): its drop waits a second for the
// writer, then goes ahead.
TEST_P(IntegrityTest, AChangeUnderneathIsShownThoughAWriterKeepsTheFileOpen) {
  if (std::string(GetParam()) != "notify") GTEST_SKIP() << "the watcher's drops: notify mode";
  auto m = MountOverAnHourOldLog();
  ASSERT_TRUE(m->ok());
  const int fd = ::open((mnt_ / "log").c_str(), O_WRONLY | O_APPEND);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  AppendUnderneath(src_ / "log", 10, 20);
  std::string seen;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::nanoseconds(3 * kWatcherWriterWaitNs);
  while (seen != Lines(0, 20) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    seen = ReadFile(mnt_ / "log");
  }
  EXPECT_EQ(seen, Lines(0, 20));
  EXPECT_GT(m->Stats()["watch_drops_forced"].get<uint64_t>(), 0u) << m->Stats().dump();
  ::close(fd);
}

// The same while a precautionary drop already waits for that writer: the change's drop
// takes the queued one over, and is not held back with it.
TEST_P(IntegrityTest, AChangeUnderneathIsShownThoughAPrecautionWaitsForTheWriter) {
  if (std::string(GetParam()) != "notify") GTEST_SKIP() << "the watcher's drops: notify mode";
  auto m = MountOverAnHourOldLog();
  ASSERT_TRUE(m->ok());
  const uint64_t drops_before = m->Stats()["identity_invalidations"].get<uint64_t>();
  AppendUnderneath(src_ / "log", 10, 20);
  ASSERT_TRUE(AwaitWatcherDrop(*m, drops_before)) << "the watcher never dropped the changed file";
  EXPECT_EQ(ReadFile(mnt_ / "log"), Lines(0, 20));  // within its racily clean window
  const int fd = ::open((mnt_ / "log").c_str(), O_WRONLY | O_APPEND);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  const std::string mine = "appended through the mount\n";
  ASSERT_EQ(::write(fd, mine.data(), mine.size()), static_cast<ssize_t>(mine.size()));
  // Past the precaution's first second of tries: it is tried once a second now.
  std::this_thread::sleep_for(std::chrono::nanoseconds(kWatcherWriterWaitNs * 3 / 2));
  ASSERT_GT(m->Stats()["watch_drops_deferred"].get<uint64_t>(), 0u) << m->Stats().dump();
  AppendUnderneath(src_ / "log", 20, 30);
  const std::string want = Lines(0, 20) + mine + Lines(20, 30);
  EXPECT_EQ(ReadFile(src_ / "log"), want);
  std::string seen;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::nanoseconds(3 * kWatcherWriterWaitNs);
  while (seen != want && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    seen = ReadFile(mnt_ / "log");
  }
  EXPECT_EQ(seen, want);
  EXPECT_GT(m->Stats()["watch_drops_forced"].get<uint64_t>(), 0u) << m->Stats().dump();
  ::close(fd);
}

// An O_APPEND write through the mount is placed by the kernel at the end it believes,
// which may be older than the file: changed underneath a moment ago ("notify" mode: the
// watcher's drop is on its way). The source must append where the file really ends, not
// over what was written underneath; the mount shows the file as it is once that writer
// is done.
TEST_P(IntegrityTest, AnAppendNeverOverwritesBytesAppendedUnderneath) {
  auto m = MountOverAnHourOldLog();
  ASSERT_TRUE(m->ok());
  AppendUnderneath(src_ / "log", 10, 20);
  const int fd = ::open((mnt_ / "log").c_str(), O_WRONLY | O_APPEND);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  const std::string mine = "appended through the mount\n";
  EXPECT_EQ(::write(fd, mine.data(), mine.size()), static_cast<ssize_t>(mine.size()));
  ::close(fd);
  EXPECT_EQ(ReadFile(src_ / "log"), Lines(0, 20) + mine);
  std::string seen;
  for (int i = 0; i < 200 && seen != Lines(0, 20) + mine; i++) {
    if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    seen = ReadFile(mnt_ / "log");
  }
  EXPECT_EQ(seen, Lines(0, 20) + mine);
}

// A large O_DIRECT append: the kernel splits it into WRITEs at consecutive offsets and
// sends them at once, which the daemon's workers serve in any order. Each must land at
// its own offset, not appended in the order the workers ran (as a source fd opened
// O_APPEND did: pwrite appends there, whatever the offset).
TEST_P(IntegrityTest, ALargeDirectAppendLandsInOrder) {
  WriteFile(src_ / "log", std::string(4096, 'h'));
  auto m = MountIt();
  ASSERT_TRUE(m->ok());
  constexpr size_t kSize = 8 << 20;
  void* raw = nullptr;
  ASSERT_EQ(::posix_memalign(&raw, 4096, kSize), 0);
  std::unique_ptr<char, decltype(&std::free)> buf(static_cast<char*>(raw), &std::free);
  for (size_t i = 0; i < kSize; i += 8) std::snprintf(buf.get() + i, 9, "%07zx\n", i / 8);
  const int fd = ::open((mnt_ / "log").c_str(), O_WRONLY | O_APPEND | O_DIRECT);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  EXPECT_EQ(::write(fd, buf.get(), kSize), static_cast<ssize_t>(kSize)) << std::strerror(errno);
  ::close(fd);
  const std::string want = std::string(4096, 'h') + std::string(buf.get(), kSize);
  EXPECT_TRUE(ReadFile(src_ / "log") == want) << "the source's bytes are out of order";
  EXPECT_TRUE(ReadFile(mnt_ / "log") == want);
}

// A source file marked append-only (chattr +a) is opened for writing only with O_APPEND:
// appends through the mount must work.
TEST_P(IntegrityTest, AnAppendOnlySourceFileTakesAppends) {
  WriteFile(src_ / "log", Lines(0, 10));
  const std::string quoted = "'" + (src_ / "log").string() + "'";
  if (std::system(("chattr +a " + quoted + " 2>/dev/null").c_str()) != 0) {
    GTEST_SKIP() << "no chattr +a on this filesystem";
  }
  // Taken off however the test ends: an append-only file left behind cannot be removed
  // with the test's folder.
  struct AppendOnlyOff {
    std::string quoted;
    ~AppendOnlyOff() { std::system(("chattr -a " + quoted).c_str()); }
  } append_only_off{quoted};
  auto m = MountIt();
  ASSERT_TRUE(m->ok());
  const int fd = ::open((mnt_ / "log").c_str(), O_WRONLY | O_APPEND);
  EXPECT_GE(fd, 0) << std::strerror(errno);
  if (fd >= 0) {
    const std::string more = Lines(10, 12);
    EXPECT_EQ(::write(fd, more.data(), more.size()), static_cast<ssize_t>(more.size()))
        << std::strerror(errno);
    ::close(fd);
  }
  EXPECT_EQ(ReadFile(src_ / "log"), Lines(0, 12));
  EXPECT_EQ(ReadFile(mnt_ / "log"), Lines(0, 12));
}

// The other half: while the appender writes, something underneath changes the file's
// attributes (a chmod: its ctime moves, its bytes do not). Every reader's open after
// that finds the file changed; none may drop the kernel's pages while the appender's
// writes are on their way.
TEST_P(IntegrityTest, OpensThatFindAFileChangedDropNothingUnderAnAppender) {
  WriteFile(src_ / "log", "");
  AgeFile(src_ / "log", 3600);
  auto m = MountIt();
  ASSERT_TRUE(m->ok());
  int flip = 0;
  const AppendSeen seen = AppendWithReaders(mnt_, src_, "log", 6000, [&] {
    ASSERT_EQ(::chmod((src_ / "log").c_str(), (flip++ % 2) ? 0644 : 0664), 0);
  });
  EXPECT_EQ(seen.source, Lines(0, 6000));
  EXPECT_EQ(seen.mount, Lines(0, 6000));
  EXPECT_EQ(seen.zero_direct_reads, 0) << seen.first_zero << "\n" << m->Stats().dump();
  EXPECT_EQ(seen.zero_cached_reads, 0) << seen.first_zero << "\n" << m->Stats().dump();
}

// A log appended to underneath (not through the mount) and followed through the mount
// by a reader that keeps it open and reads on past the end (`tail -f`). It may lag the
// source (by the watcher's moment in "notify" mode), but whatever it reads must be a
// prefix of the file the source ends with: never a NUL byte, which is what the kernel's
// old last page (zero-filled past the old end) shows under a size it learnt from a newer
// reply before those pages were dropped. The attributes expire quickly here, so that the
// kernel asks for them often, as it does once a minute by default.
TEST_P(IntegrityTest, AFollowerOfALogAppendedUnderneathSeesOnlyItsPrefixes) {
  WriteFile(src_ / "log", Lines(0, 10));
  AgeFile(src_ / "log", 3600);
  auto m = MountIt({"--attr-timeout", "0.02"});
  ASSERT_TRUE(m->ok());
  constexpr int kLines = 6000;
  const std::string want = Lines(0, kLines);
  std::atomic<bool> done{false};
  std::string got, bad;
  std::thread follower([&] {
    const int fd = ::open((mnt_ / "log").c_str(), O_RDONLY);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    char buf[1 << 16];
    while (!done) {
      const ssize_t n = ::pread(fd, buf, sizeof(buf), static_cast<off_t>(got.size()));
      ASSERT_GE(n, 0) << std::strerror(errno);
      got.append(buf, static_cast<size_t>(n));
      if (want.compare(0, got.size(), got) != 0) {
        size_t at = 0;
        while (at < got.size() && at < want.size() && got[at] == want[at]) at++;
        bad = "a read of " + std::to_string(got.size()) + " bytes differs at " +
              std::to_string(at) + " (byte " +
              (at < got.size() ? std::to_string(int(got[at])) : "past its end") + ")";
        break;
      }
    }
    ::close(fd);
  });
  const int fd = ::open((src_ / "log").c_str(), O_WRONLY | O_APPEND);
  EXPECT_GE(fd, 0) << std::strerror(errno);
  for (int i = 10; i < kLines && fd >= 0; i++) {
    const std::string line = "line " + std::to_string(i) + "\n";
    EXPECT_EQ(::write(fd, line.data(), line.size()), static_cast<ssize_t>(line.size()));
    if (i % 16 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  if (fd >= 0) ::close(fd);
  done = true;
  follower.join();
  EXPECT_EQ(bad, "") << m->Stats().dump();
  // And once the writer is done, the mount shows all of it.
  std::string last;
  for (int i = 0; i < 200 && last != want; i++) {
    if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    last = ReadFile(mnt_ / "log");
  }
  EXPECT_EQ(last, want);
}

// ---------------------------------------------------------------------------------
// Faults

// GlusterFS's client answers an open at once and opens on the brick later; a stat that
// reaches it in between (it stats through the open fd) fails with EBADFD. The daemon
// stats a source file it opens, and again as it reads: the reader must still get the
// file's bytes. flaky_source fails the N-th stat of each file while it is open.
TEST_P(IntegrityTest, AReaderGetsTheBytesWhenTheSourceFailsTheStatOfAnOpenFile) {
  const fsys::path backing = dir_ / "backing";
  fsys::create_directories(backing);
  const std::string content = Lines(1, 40);
  WriteFile(backing / "sample.bin", content);
  AgeFile(backing / "sample.bin", 3600);
  for (const char* nth : {"1", "2", "3"}) {
    SCOPED_TRACE(std::string("failing stat ") + nth);
    const fsys::path failures = dir_ / (std::string("failures-") + nth + ".log");
    const CommandResult source = testing::Run(
        {EPOCHFS_FLAKY_SOURCE, backing.string(), src_.string(), failures.string(), nth});
    ASSERT_EQ(source.exit_code, 0) << source.output;
    UnmountOnExit unmount_source(src_);
    auto m = MountIt({"--prefetch", "0"});  // the reader's open is the file's first
    ASSERT_TRUE(m->ok());
    EXPECT_EQ(ReadWhole(mnt_ / "sample.bin"), content);
    // The open's check is the first stat in both modes; how many come after it (READs,
    // the cache's check of what it read) depends on the mode.
    if (std::string(nth) == "1") {
      EXPECT_EQ(ReadFile(failures), "/sample.bin\n") << "the open's stat did not fail";
    }
    EXPECT_TRUE(m->Unmount());
  }
}

TEST_P(IntegrityTest, NamesThatAreNotUtf8NeverKillTheDaemon) {
  // Source, mountpoint and cache dir with bytes that are not UTF-8.
  const fsys::path src = dir_ / "src\xff\xfe";
  const fsys::path mnt = dir_ / "mnt\xc3\x28";
  const fsys::path cache = dir_ / "cache\x80";
  fsys::create_directories(src);
  fsys::create_directories(mnt);
  WriteFile(src / "bad\xff.bin", "payload");
  Mount m(src, mnt, cache, {"--consistency", GetParam()});
  ASSERT_TRUE(m.ok()) << m.output();
  EXPECT_EQ(ReadFile(mnt / "bad\xff.bin"), "payload");
  EXPECT_NO_THROW(m.Stats());
  auto status = Epochfs({"status", mnt.string()});
  EXPECT_EQ(status.exit_code, 0) << status.output;
  auto json = Epochfs({"status", mnt.string(), "--json"});
  EXPECT_EQ(json.exit_code, 0) << json.output;
  auto warm = Epochfs({"warm", mnt.string()});
  EXPECT_EQ(warm.exit_code, 0) << warm.output;
  // Still serving.
  EXPECT_EQ(ReadFile(mnt / "bad\xff.bin"), "payload");
  EXPECT_TRUE(IsMounted(mnt));
}

// A write through a hard link outside the source raises no inotify event under the
// source. In "notify" mode the next read that reaches the daemon sees the file's new
// identity and has the kernel drop its old pages of the file.
TEST_F(MountedDirsTest, NotifyModeSeesAHardLinkWriteAtTheNextReadThatMisses) {
  const std::string before(8 << 20, 'a');
  WriteFile(src_ / "f", before);
  AgeFile(src_ / "f", 3600);
  const fsys::path outside = dir_ / "outside";
  ASSERT_EQ(::link((src_ / "f").c_str(), outside.c_str()), 0);
  Mount m(src_, mnt_, cache_, {"--consistency", "notify", "--readahead", "128K"});
  ASSERT_TRUE(m.ok()) << m.output();
  int fd = ::open((mnt_ / "f").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  char buf[4096];
  ASSERT_EQ(::pread(fd, buf, sizeof(buf), 0), 4096);  // the first pages are now cached
  EXPECT_EQ(buf[0], 'a');
  {
    int w = ::open(outside.c_str(), O_WRONLY);
    ASSERT_GE(w, 0);
    ASSERT_EQ(::pwrite(w, "B", 1, 0), 1);
    ASSERT_EQ(::pwrite(w, "C", 1, 7 << 20), 1);
    ::close(w);
  }
  // A read far from the cached pages goes to the daemon and sees the change.
  ASSERT_EQ(::pread(fd, buf, 1, 7 << 20), 1);
  EXPECT_EQ(buf[0], 'C');
  bool fresh = false;
  for (int i = 0; i < 200 && !fresh; i++) {
    ASSERT_EQ(::pread(fd, buf, 1, 0), 1);
    fresh = buf[0] == 'B';
    if (!fresh) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(fresh) << "the kernel kept the page from before the write";
  EXPECT_GE(m.Stats()["identity_invalidations"].get<uint64_t>(), 1u);
  ::close(fd);
}

// The same write, seen by a listing (READDIRPLUS: `ls -l`, a data set class's scan, the
// daemon's own listings): it gives the kernel the file's attributes as a GETATTR does,
// and checks the identity as a GETATTR does. Without that check, listings would keep
// the attributes fresh and the GETATTR that finds the change would never come; here
// the reader never stats at all (it opens and reads, as `head` does), so only the
// listing can see it.
TEST_F(MountedDirsTest, NotifyModeSeesAHardLinkWriteAtTheNextListing) {
  fsys::create_directories(src_ / "d");
  WriteFile(src_ / "d" / "f", std::string(4096, 'a'));
  AgeFile(src_ / "d" / "f", 3600);
  const fsys::path outside = dir_ / "outside";
  ASSERT_EQ(::link((src_ / "d" / "f").c_str(), outside.c_str()), 0);
  // Past the racily-clean window (its ctime is now): else the identity the READ records
  // is distrusted and the page dropped a moment later anyway, listing or not.
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  // No readahead: its own identity check of a file it finds opened would see the
  // change too, sooner or later; only the listing is under test.
  Mount m(src_, mnt_, cache_, {"--consistency", "notify", "--prefetch", "0"});
  ASSERT_TRUE(m.ok()) << m.output();
  const auto first_byte = [&] {
    char c = 0;
    int fd = ::open((mnt_ / "d" / "f").c_str(), O_RDONLY);
    if (fd < 0 || ::pread(fd, &c, 1, 0) != 1) ADD_FAILURE() << "read: " << std::strerror(errno);
    if (fd >= 0) ::close(fd);
    return c;
  };
  ASSERT_EQ(first_byte(), 'a');  // the kernel holds its page now
  {
    int w = ::open(outside.c_str(), O_WRONLY);
    ASSERT_GE(w, 0);
    ASSERT_EQ(::pwrite(w, "B", 1, 0), 1);  // same size: the kernel keeps its page
    ::close(w);
  }
  for (const auto& entry : fsys::directory_iterator(mnt_ / "d")) (void)entry;
  bool fresh = false;
  // The drop follows the listing's reply within milliseconds. Not a second: this VM's
  // kernel reclaims idle page-cache pages on its own about then (docs/benchmarks.md,
  // "This VM takes page-cache pages back on its own"), and a READ after that would
  // read the new byte whatever the listing did.
  for (int i = 0; i < 30 && !fresh; i++) {
    fresh = first_byte() == 'B';
    if (!fresh) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(fresh) << "the listing showed the change but the kernel kept the old page";
  EXPECT_GE(m.Stats()["identity_invalidations"].get<uint64_t>(), 1u);
}

// A daemon started under a low fd limit (a container, LimitNOFILE=256) still serves a
// job that holds 2,000 files open at once: handles share the fds it may have
// (fs/file_handle.h) instead of failing opens with EMFILE.
TEST_F(MountedDirsTest, TwoThousandOpenFilesUnderAnFdLimitOf256) {
  constexpr int kFiles = 2000;
  for (int i = 0; i < kFiles; i++) {
    WriteFile(src_ / ("f" + std::to_string(i)), "file " + std::to_string(i) + "\n");
  }
  // Only the daemon runs under the limit (prlimit), as under systemd's LimitNOFILE=.
  CommandResult mounted =
      epochfs::testing::Run({"prlimit", "--nofile=256:256", EPOCHFS_BINARY, "mount", src_.string(), mnt_.string(),
           "--cache-dir", cache_.string(), "--consistency", "open"});
  ASSERT_EQ(mounted.exit_code, 0) << mounted.output;
  const UnmountOnExit unmount(mnt_);
  auto stats_of = [&] { return nlohmann::json::parse(ReadFile(mnt_ / ".epochfs" / "stats")); };

  std::vector<int> fds;
  int failed_opens = 0;
  for (int i = 0; i < kFiles; i++) {
    const int flags = i % 10 == 0 ? O_RDWR : O_RDONLY;
    int fd = ::open((mnt_ / ("f" + std::to_string(i))).c_str(), flags);
    if (fd < 0) {
      failed_opens++;
      continue;
    }
    fds.push_back(fd);
  }
  EXPECT_EQ(failed_opens, 0);
  // Every open file reads right (most of them reopened by the daemon), and a write
  // through a handle whose fd was closed by the budget reaches the source.
  int wrong = 0;
  for (size_t i = 0; i < fds.size(); i++) {
    char buf[64] = {};
    const std::string want = "file " + std::to_string(i) + "\n";
    if (::pread(fds[i], buf, sizeof(buf), 0) != static_cast<ssize_t>(want.size()) ||
        want != buf) {
      wrong++;
    }
  }
  EXPECT_EQ(wrong, 0);
  ASSERT_EQ(::pwrite(fds[0], "FILE", 4, 0), 4);
  ASSERT_EQ(::fsync(fds[0]), 0);
  EXPECT_EQ(ReadFile(src_ / "f0"), "FILE 0\n");
  auto stats = stats_of();
  EXPECT_LE(stats["open_file_fds"].get<uint64_t>(), stats["open_file_fds_max"].get<uint64_t>());
  EXPECT_LE(stats["open_file_fds_max"].get<uint64_t>(), 64u);
  EXPECT_GT(stats["open_file_fd_reopens"].get<uint64_t>(), 0u);
  for (int fd : fds) ::close(fd);
}

// The "open" mode over a real network filesystem: a GlusterFS volume on this machine
// (tests/glusterfs.sh), mounted through Gluster's FUSE client, which `auto` must treat
// as remote. One volume for the suite: starting one takes seconds.
class GlusterSourceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!FuseAvailable()) return;
    dir_ = new TempDir();
    CommandResult r = epochfs::testing::Run(
        {"bash", EPOCHFS_SOURCE_DIR "/tests/glusterfs.sh", "start", (dir_->path() / "g").string()});
    if (r.exit_code == 0) {
      volume_ = dir_->path() / "g" / "mnt";
    } else {
      skip_reason_ = r.output;
    }
  }
  static void TearDownTestSuite() {
    if (dir_) {
      epochfs::testing::Run(
          {"bash", EPOCHFS_SOURCE_DIR "/tests/glusterfs.sh", "stop", (dir_->path() / "g").string()});
    }
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    EPOCHFS_SKIP_WITHOUT_FUSE();
    if (volume_.empty()) GTEST_SKIP() << "GlusterFS could not start: " << skip_reason_;
    // Each test its own folder in the volume, and its own mountpoint and cache.
    src_ = volume_ / ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fsys::remove_all(src_);
    fsys::create_directories(src_);
    fsys::create_directories(mnt_);
  }

  static inline TempDir* dir_ = nullptr;
  static inline fsys::path volume_;
  static inline std::string skip_reason_;
  TempDir local_;
  fsys::path src_;
  fsys::path mnt_ = local_ / "mnt";
  fsys::path cache_ = local_ / "cache";
};

// Two nodes over one GlusterFS volume, each with its own Gluster client, its own epochfs
// and its own cache (docs/multi-node.md). A write through node A is read through node B
// at its next open once B's Gluster client shows it (epochfs adds no staleness of its
// own: B never shows older bytes than its client does), and a node whose daemon dies
// right after a write loses nothing of it.
TEST_F(GlusterSourceTest, TwoNodesSeeEachOthersWritesAndADeadNodeLosesNothing) {
  // Node B's own client of the same volume (tests/glusterfs.sh names it epochfs-g).
  const fsys::path client_b = local_ / "client-b";
  fsys::create_directories(client_b);
  CommandResult mounted = epochfs::testing::Run(
      {"glusterfs", "--volfile-server=localhost", "--volfile-id=epochfs-g", client_b.string()});
  ASSERT_EQ(mounted.exit_code, 0) << mounted.output;
  struct ClientBack {
    fsys::path dir;
    ~ClientBack() { epochfs::testing::Run({"umount", "-l", dir.string()}); }
  } client_back{client_b};
  for (int i = 0; i < 50 && epochfs::testing::Run({"mountpoint", "-q", client_b.string()}).exit_code != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const std::string name = src_.filename().string();
  const fsys::path src_b = client_b / name;
  const fsys::path mnt_b = local_ / "mnt-b";
  fsys::create_directories(mnt_b);
  WriteFile(src_ / "shared.bin", "version 1\n");
  Mount a(src_, mnt_, cache_);
  ASSERT_TRUE(a.ok()) << a.output();
  Mount b(src_b, mnt_b, local_ / "cache-b");
  ASSERT_TRUE(b.ok()) << b.output();
  EXPECT_EQ(b.Stats()["consistency"].get<std::string>(), "open");

  // Reads B until its client shows `want`; then B itself must show it at its next open.
  auto b_follows = [&](const std::string& file, const std::string& want) {
    for (int i = 0; i < 100; ++i) {
      std::error_code ec;
      if (fsys::exists(src_b / file, ec) && ReadFile(src_b / file) == want) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_EQ(ReadFile(src_b / file), want) << "node B's Gluster client never showed it";
    EXPECT_EQ(ReadFile(mnt_b / file), want) << "node B's epochfs is behind its client";
  };
  EXPECT_EQ(ReadFile(mnt_b / "shared.bin"), "version 1\n");  // B caches version 1
  WriteFile(mnt_ / "shared.bin", "version 2, longer than the first\n");  // through node A
  b_follows("shared.bin", "version 2, longer than the first\n");
  WriteFile(mnt_ / "shared.bin", "v3\n");  // shorter
  b_follows("shared.bin", "v3\n");
  WriteFile(mnt_ / "new.bin", std::string(300000, 'n'));  // a file B has never seen
  b_follows("new.bin", std::string(300000, 'n'));

  // Node A dies right after a write returned: the write is in the volume.
  WriteFile(mnt_ / "last.bin", "written just before the crash\n");
  const int pid = a.Stats()["pid"].get<int>();
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  b_follows("last.bin", "written just before the crash\n");
  EXPECT_EQ(ReadFile(src_ / "last.bin"), "written just before the crash\n");  // A's client too
}

// On the network source, with the order published, readahead runs ahead of the reader
// (many reads in flight); files changed underneath after they were read ahead (and
// pushed, or kept in RAM) are read with their new bytes: same size with the old mtime
// back, longer, emptied.
TEST_F(GlusterSourceTest, ReadAheadFilesChangedUnderneathAreReadNew) {
  std::vector<std::string> names;
  for (int i = 0; i < 120; ++i) {
    names.push_back("f" + std::to_string(i) + ".bin");
    WriteFile(src_ / names.back(), RandomBytes(40000, i));
    AgeFile(src_ / names.back(), 3600);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(150));  // the racily-clean rule
  Mount m(src_, mnt_, cache_);
  ASSERT_TRUE(m.ok()) << m.output();
  for (const auto& e : fsys::directory_iterator(mnt_)) (void)e;  // the kernel learns them
  std::string plan = "epochfs-plan 1\n";
  for (const auto& n : names) plan += n + "\n";
  ASSERT_EQ(WritePlan(mnt_, plan + "\n"), 0);
  // Until readahead has the whole plan in (RAM or the page cache).
  for (int i = 0; i < 200 && m.Stats()["prefetched"].get<uint64_t>() < 120; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::map<std::string, std::string> want;
  for (int i = 0; i < 120; ++i) want[names[i]] = RandomBytes(40000, i);
  want[names[10]] = RandomBytes(40000, 10'000);
  WriteFile(src_ / names[10], want[names[10]]);
  AgeFile(src_ / names[10], 3600);  // only ctime tells
  want[names[50]] = RandomBytes(70000, 50'000);
  WriteFile(src_ / names[50], want[names[50]]);
  want[names[90]] = "";
  WriteFile(src_ / names[90], "");
  for (const auto& n : names) ASSERT_EQ(ReadFile(mnt_ / n), want[n]) << n;
  const auto s = m.Stats();
  EXPECT_GE(s["prefetched"].get<uint64_t>(), 100u) << s.dump();
}

TEST_F(GlusterSourceTest, AutoPicksOpenModeAndReadsAreByteIdentical) {
  Dataset d = Dataset::Make(src_, 200, 4, 200000, 21);
  Mount m(src_, mnt_, cache_);
  ASSERT_TRUE(m.ok()) << m.output();
  EXPECT_EQ(m.Stats()["consistency"].get<std::string>(), "open");
  for (int epoch = 0; epoch < 2; epoch++) {
    for (const auto& [name, content] : d.files) ASSERT_EQ(ReadFile(mnt_ / name), content) << name;
  }
}

TEST_F(GlusterSourceTest, RenameUnderneathIsSeenByTheNextOpenByName) {
  WriteFile(src_ / "a", "AAAA\n");
  WriteFile(src_ / "b", "BBBB\n");
  Mount m(src_, mnt_, cache_);
  ASSERT_TRUE(m.ok()) << m.output();
  EXPECT_EQ(ReadFile(mnt_ / "a"), "AAAA\n");
  EXPECT_EQ(ReadFile(mnt_ / "b"), "BBBB\n");
  fsys::rename(src_ / "a", src_ / "b");
  EXPECT_EQ(ReadFile(mnt_ / "b"), "AAAA\n");
  {
    std::ofstream out(mnt_ / "a", std::ios::app);
    out << "x\n";
  }
  EXPECT_EQ(ReadFile(src_ / "b"), "AAAA\n");
  EXPECT_EQ(ReadFile(src_ / "a"), "x\n");
}

TEST_F(GlusterSourceTest, ChangesUnderneathAreSeenByTheNextOpen) {
  WriteFile(src_ / "f", std::string(100000, 'a'));
  Mount m(src_, mnt_, cache_);
  ASSERT_TRUE(m.ok()) << m.output();
  EXPECT_EQ(ReadFile(mnt_ / "f"), std::string(100000, 'a'));
  WriteFile(src_ / "f", std::string(50000, 'b'));  // shrunk and rewritten in place
  EXPECT_EQ(ReadFile(mnt_ / "f"), std::string(50000, 'b'));
  WriteFile(src_ / "f", std::string(150000, 'c'));  // grown
  EXPECT_EQ(ReadFile(mnt_ / "f"), std::string(150000, 'c'));
  fsys::remove(src_ / "f");
  // The next open finds the name gone (an open checks it). A stat may answer from the
  // kernel's entry and attributes (they were just read) until the watcher's drop of the
  // name lands.
  const UniqueFd gone(::open((mnt_ / "f").c_str(), O_RDONLY | O_CLOEXEC));
  EXPECT_FALSE(gone);
  EXPECT_EQ(errno, ENOENT);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (fsys::exists(mnt_ / "f") && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_FALSE(fsys::exists(mnt_ / "f"));
}

TEST_F(GlusterSourceTest, AppendingWriterWithConcurrentReadersLosesNothing) {
  WriteFile(src_ / "log", "");
  Mount m(src_, mnt_, cache_);
  ASSERT_TRUE(m.ok()) << m.output();
  std::atomic<bool> done{false};
  std::atomic<int> bad{0};
  std::thread reader([&] {
    while (!done) {
      if (ReadFile(mnt_ / "log").find('\0') != std::string::npos) bad++;
    }
  });
  std::string want;
  int fd = ::open((mnt_ / "log").c_str(), O_WRONLY | O_APPEND);
  ASSERT_GE(fd, 0);
  for (int i = 0; i < 1500; i++) {
    const std::string line = "line " + std::to_string(i) + "\n";
    ASSERT_EQ(::write(fd, line.data(), line.size()), static_cast<ssize_t>(line.size()));
    want += line;
  }
  ::close(fd);
  done = true;
  reader.join();
  EXPECT_EQ(ReadFile(src_ / "log"), want);
  EXPECT_EQ(ReadFile(mnt_ / "log"), want);
  EXPECT_EQ(bad.load(), 0);
}

// Inside a memory cgroup (a container's or a job scheduler's limit) the daemon and its
// readers share the limit. --ram bounds what the daemon holds (RAM tier, SSD write
// queue, index memory): two epochs over a data set 2.5x the limit run to the end,
// nothing is OOM-killed and the daemon's peak RSS stays within --ram + 72 MB (the
// issue's bound is 100 MB; this run's peak before the write queue and the index came
// out of --ram: docs/benchmarks.md, "Figures behind design choices").
TEST_F(MountedDirsTest, DataTwoAndAHalfTimesAMemoryLimitNothingOomKilled) {
  constexpr uint64_t kLimit = 160ull << 20;
  const MemoryCgroup group(kLimit);
  if (!group.ok()) GTEST_SKIP() << group.why_not();
  // 400 MB of 128 KB files: 2.5x the limit.
  const std::string block = RandomBytes(128 << 10, 77);
  constexpr int kFiles = 3200;
  for (int i = 0; i < kFiles; i++) {
    fsys::create_directories(src_ / std::to_string(i % 16));
    WriteFile(src_ / std::to_string(i % 16) / std::to_string(i), block.substr(i % 97) + block.substr(0, i % 97));
  }
  AgeFile(src_, 3600);
  ::sync();
  std::ofstream("/proc/sys/vm/drop_caches") << "3\n";
  const std::string in_group = group.Enter();
  CommandResult mounted = epochfs::testing::Run(
      {"sh", "-c", in_group + EPOCHFS_BINARY + " mount " + src_.string() + " " + mnt_.string() +
                       " --cache-dir " + cache_.string() + " --ram 64M"});
  ASSERT_EQ(mounted.exit_code, 0) << mounted.output;
  const UnmountOnExit unmount(mnt_);
  for (int epoch = 0; epoch < 2; epoch++) {
    CommandResult read = epochfs::testing::Run(
        {"sh", "-c", in_group + "find " + mnt_.string() + " -type f -exec cat {} + | cksum"});
    EXPECT_EQ(read.exit_code, 0) << read.output;
  }
  // Still alive, and its bytes right.
  const auto stats = nlohmann::json::parse(ReadFile(mnt_ / ".epochfs" / "stats"));
  EXPECT_EQ(ReadFile(mnt_ / "5" / "5"), block.substr(5) + block.substr(0, 5));
  EXPECT_EQ(group.OomKills(), 0u);
  EXPECT_LE(stats["daemon_peak_rss_bytes"].get<uint64_t>(), (64ull + 72) << 20) << stats.dump();
  std::cout << "daemon peak RSS " << (stats["daemon_peak_rss_bytes"].get<uint64_t>() >> 20)
            << " MiB with --ram 64M in a " << (kLimit >> 20) << " MiB cgroup, "
            << (stats["ssd_writes_dropped"].get<uint64_t>()) << " SSD writes dropped\n";
}

}  // namespace
}  // namespace epochfs::testing
