// Black-box tests: mount epochfs for real and check what a training script would see.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <future>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "tests/mount_fixture.h"

namespace epochfs::testing {
namespace {

class MountTest : public MountedDirsTest {
 protected:
  std::unique_ptr<Mount> MountIt(const std::vector<std::string>& extra = {}) {
    auto m = std::make_unique<Mount>(src_, mnt_, cache_, extra);
    EXPECT_TRUE(m->ok()) << m->output();
    return m;
  }

  // Mounts in "open" mode over a source holding `f` ("first", an hour old) and reads it
  // through the mount once: the kernel then holds its name, attributes and pages.
  std::unique_ptr<Mount> MountOpenModeAfterReadingF() {
    WriteFile(src_ / "f", "first");
    AgeFile(src_ / "f", 3600);
    auto m = MountIt({"--consistency", "open"});
    EXPECT_EQ(ReadFile(mnt_ / "f"), "first");
    return m;
  }

  // Reads every file of `d` through the mount with `threads` threads; returns mismatches.
  std::vector<std::string> ReadAllThroughMount(const Dataset& d, int threads) {
    std::vector<std::string> bad;
    std::mutex bad_mutex;
    std::atomic<size_t> next{0};
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; t++) {
      workers.emplace_back([&] {
        for (size_t i = next++; i < d.files.size(); i = next++) {
          const auto& [name, content] = d.files[i];
          std::string got;
          try {
            got = ReadFile(mnt_ / name);
          } catch (const std::exception& e) {
            got = std::string("<error: ") + e.what() + ">";
          }
          if (got != content) {
            std::lock_guard lock(bad_mutex);
            bad.push_back(name + " (" + std::to_string(got.size()) + " bytes, want " +
                          std::to_string(content.size()) + ")");
          }
        }
      });
    }
    for (auto& w : workers) w.join();
    return bad;
  }

};

TEST_F(MountTest, EveryFileByteIdenticalFrom16Threads) {
  Dataset d = Dataset::Make(src_, 400, 8, 300 * 1024, 1);
  auto m = MountIt();
  ASSERT_TRUE(m->ok());
  // Twice: the first pass fills the tiers, the second is served from them.
  for (int pass = 0; pass < 2; pass++) {
    auto bad = ReadAllThroughMount(d, 16);
    EXPECT_TRUE(bad.empty()) << "pass " << pass << ": " << bad.size() << " wrong, e.g. " << bad[0];
  }
  auto stats = m->Stats();
  EXPECT_GT(stats["source_reads"].get<uint64_t>(), 0u);
  EXPECT_GT(stats["ram_hits"].get<uint64_t>() + stats["ssd_hits"].get<uint64_t>(), 0u);
  EXPECT_EQ(stats["corrupt_entries"].get<uint64_t>(), 0u);
}

TEST_F(MountTest, MetadataIsTheSource) {
  Dataset d = Dataset::Make(src_, 20, 2, 10000, 2);
  fsys::create_symlink("class_0/sample_0.txt", src_ / "link");
  fsys::create_hard_link(src_ / "class_1/sample_1.jpg", src_ / "hard");
  ASSERT_EQ(::setxattr((src_ / "hard").c_str(), "user.label", "cat", 3, 0), 0);
  ::chmod((src_ / "class_0/sample_2.txt").c_str(), 0640);
  ::chown((src_ / "class_0/sample_2.txt").c_str(), 1234, 5678);
  auto m = MountIt();
  ASSERT_TRUE(m->ok());

  std::set<std::string> src_names, mnt_names;
  for (const auto& e : fsys::recursive_directory_iterator(src_)) {
    src_names.insert(fsys::relative(e.path(), src_).string());
  }
  for (const auto& e : fsys::recursive_directory_iterator(mnt_)) {
    mnt_names.insert(fsys::relative(e.path(), mnt_).string());
  }
  EXPECT_EQ(src_names, mnt_names);  // and no .epochfs in the listing
  EXPECT_EQ(mnt_names.count(".epochfs"), 0u);

  for (const auto& name : src_names) {
    struct stat a {}, b {};
    ASSERT_EQ(::lstat((src_ / name).c_str(), &a), 0);
    ASSERT_EQ(::lstat((mnt_ / name).c_str(), &b), 0) << name;
    EXPECT_EQ(a.st_mode, b.st_mode) << name;
    EXPECT_EQ(a.st_size, b.st_size) << name;
    EXPECT_EQ(a.st_uid, b.st_uid) << name;
    EXPECT_EQ(a.st_gid, b.st_gid) << name;
    EXPECT_EQ(a.st_nlink, b.st_nlink) << name;
    EXPECT_EQ(a.st_ino, b.st_ino) << name;
    EXPECT_EQ(a.st_mtim.tv_sec, b.st_mtim.tv_sec) << name;
    EXPECT_EQ(a.st_mtim.tv_nsec, b.st_mtim.tv_nsec) << name;
  }
  EXPECT_EQ(fsys::read_symlink(mnt_ / "link"), "class_0/sample_0.txt");
  EXPECT_EQ(ReadFile(mnt_ / "link"), d.files[0].second);
  char value[16] = {};
  EXPECT_EQ(::getxattr((mnt_ / "hard").c_str(), "user.label", value, sizeof(value)), 3);
  EXPECT_STREQ(value, "cat");
  // The control directory is reachable by name.
  struct stat st {};
  EXPECT_EQ(::stat((mnt_ / ".epochfs/stats").c_str(), &st), 0);
}

TEST_F(MountTest, LargeDirectoryListingIsCompleteAndStable) {
  constexpr int kEntries = 100000;
  fsys::create_directories(src_ / "big");
  for (int i = 0; i < kEntries; i++) {
    int fd = ::open((src_ / "big" / ("f" + std::to_string(i))).c_str(), O_CREAT | O_WRONLY, 0644);
    ASSERT_GE(fd, 0);
    ::close(fd);
  }
  auto m = MountIt();
  ASSERT_TRUE(m->ok());
  for (int pass = 0; pass < 2; pass++) {
    std::set<std::string> names;
    size_t count = 0;
    for (const auto& e : fsys::directory_iterator(mnt_ / "big")) {
      names.insert(e.path().filename().string());
      count++;
    }
    EXPECT_EQ(count, static_cast<size_t>(kEntries)) << "pass " << pass;  // no duplicates
    EXPECT_EQ(names.size(), static_cast<size_t>(kEntries)) << "pass " << pass;
  }
}

TEST_F(MountTest, MountOverItself) {
  Dataset d = Dataset::Make(src_, 50, 3, 50000, 3);
  auto m = std::make_unique<Mount>(src_, src_, cache_);
  ASSERT_TRUE(m->ok()) << m->output();
  EXPECT_TRUE(IsMounted(src_));
  for (const auto& [name, content] : d.files) EXPECT_EQ(ReadFile(src_ / name), content) << name;
  // A write through the mount lands in the hidden source.
  WriteFile(src_ / "written.txt", "hello");
  auto stats = m->Stats();
  EXPECT_EQ(stats["source"].get<std::string>(), fsys::canonical(src_).string());
  ASSERT_TRUE(m->Unmount());
  EXPECT_FALSE(IsMounted(src_));
  EXPECT_EQ(ReadFile(src_ / "written.txt"), "hello");
  for (const auto& [name, content] : d.files) EXPECT_EQ(ReadFile(src_ / name), content);
}

// Whether every thread of process `pid` is stopped (state T) within `timeout`.
bool AllThreadsStopped(int pid, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    bool all = true;
    std::error_code ec;
    const fsys::path tasks = fsys::path("/proc") / std::to_string(pid) / "task";
    for (const auto& task : fsys::directory_iterator(tasks, ec)) {
      std::string stat;
      try {
        stat = ReadFile(task.path() / "stat");
      } catch (const std::exception&) {
        all = false;  // a thread that just exited: look again
        continue;
      }
      const size_t close = stat.rfind(')');  // "pid (comm) STATE ..."
      if (close == std::string::npos || close + 2 >= stat.size() || stat[close + 2] != 'T') {
        all = false;
      }
    }
    if (all && !ec) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

// Two LOOKUPs in one directory are served side by side: one that waits on a slow source
// does not hold up a second in the same directory (FUSE_PARALLEL_DIROPS, which
// libfuse 3.14 never passes to the kernel by itself: fs/init_reply.h). The slow
// part of the source is a folder that is itself a FUSE mount (a second epochfs),
// stopped with SIGSTOP: a LOOKUP of a name its kernel has not cached waits for it, one
// of a name it has cached does not.
TEST_F(MountTest, ALookupWaitingOnTheSourceDoesNotHoldUpTheRestOfItsDirectory) {
  const fsys::path inner = dir_ / "inner";
  fsys::create_directories(inner);
  WriteFile(inner / "slow", "s");
  WriteFile(inner / "cached", "c");
  fsys::create_directories(src_ / "d");
  Mount folder(inner, src_ / "d", dir_ / "cache-inner");
  ASSERT_TRUE(folder.ok()) << folder.output();
  struct ::stat st {};
  ASSERT_EQ(::stat((src_ / "d" / "cached").c_str(), &st), 0);  // in the folder's kernel caches now
  const int folder_pid = folder.Stats()["pid"].get<int>();

  Mount m(src_, mnt_, cache_);
  ASSERT_TRUE(m.ok()) << m.output();
  EXPECT_TRUE(m.Stats()["parallel_lookups"].get<bool>());
  ASSERT_EQ(::stat((mnt_ / "d").c_str(), &st), 0);

  auto stat_async = [](fsys::path path) {
    return std::async(std::launch::async, [path] {
      struct ::stat s {};
      return ::stat(path.c_str(), &s);
    });
  };
  std::future<int> slow, fast;  // before the guard: it resumes the folder before they wait
  struct Resume {
    int pid;
    ~Resume() { ::kill(pid, SIGCONT); }
  } resume{folder_pid};
  ASSERT_EQ(::kill(folder_pid, SIGSTOP), 0);
  // kill() returns before every thread has stopped; one still running could answer.
  ASSERT_TRUE(AllThreadsStopped(folder_pid, std::chrono::seconds(5)));
  slow = stat_async(mnt_ / "d" / "slow");
  ASSERT_EQ(slow.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout)
      << "the stopped folder answered: the test proves nothing";
  fast = stat_async(mnt_ / "d" / "cached");
  EXPECT_EQ(fast.wait_for(std::chrono::seconds(5)), std::future_status::ready)
      << "the LOOKUP of a cached name waited for the slow one in the same directory";
  ::kill(folder_pid, SIGCONT);
  EXPECT_EQ(slow.get(), 0);
  EXPECT_EQ(fast.get(), 0);
  EXPECT_TRUE(m.Unmount());
}

// Changes made to the source underneath the mount, in both consistency modes. In
// "open" mode the next open must see them at once; in "notify" mode they travel
// through inotify, so they must be seen within a bounded time, and then for good.
class ChangedUnderneathTest : public MountTest,
                              public ::testing::WithParamInterface<std::string> {
 protected:
  bool strict() const { return GetParam() == "open"; }

  std::string ReadOrError(const std::string& name) {
    try {
      return ReadFile(mnt_ / name);
    } catch (const std::exception& e) {
      return std::string("<error: ") + e.what() + ">";
    }
  }

  // The content read through the mount becomes `want` (at once in "open" mode).
  void ExpectContent(const std::string& name, const std::string& want) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    std::string got = ReadOrError(name);
    while (got != want && !strict() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      got = ReadOrError(name);
    }
    EXPECT_EQ(got.size(), want.size()) << name;
    EXPECT_TRUE(got == want) << name << ": stale bytes";
    for (int i = 0; i < 3; i++) EXPECT_TRUE(ReadOrError(name) == want) << name << ": went back";
  }

  void ExpectGone(const std::string& name) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (fsys::exists(mnt_ / name) && !strict() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_THROW(ReadFile(mnt_ / name), std::runtime_error) << name;
    EXPECT_FALSE(fsys::exists(mnt_ / name)) << name;
  }
};

TEST_P(ChangedUnderneathTest, ModifiedReplacedDeletedCreatedAreNeverServedStale) {
  Dataset d = Dataset::Make(src_, 10, 1, 20000, 4);
  const std::string a = d.files[1].first, b = d.files[2].first, c = d.files[3].first;
  auto m = MountIt({"--consistency", GetParam()});
  ASSERT_TRUE(m->ok());
  EXPECT_EQ(m->Stats()["consistency"].get<std::string>(), GetParam());
  // Twice, so the kernel's page cache and the daemon's tiers both hold every file.
  for (int pass = 0; pass < 2; pass++) {
    for (const auto& [name, content] : d.files) ASSERT_EQ(ReadFile(mnt_ / name), content);
  }
  // Modified in place: new bytes, the same size.
  const std::string same_size = RandomBytes(d.files[1].second.size(), 99);
  WriteFile(src_ / a, same_size);
  ExpectContent(a, same_size);
  // Modified: grown.
  const std::string grown = RandomBytes(d.files[1].second.size() + 5000, 98);
  WriteFile(src_ / a, grown);
  ExpectContent(a, grown);
  EXPECT_EQ(fsys::file_size(mnt_ / a), grown.size());
  // Replaced: a new file renamed over it.
  const std::string replacement = RandomBytes(777, 97);
  WriteFile(src_ / "tmp.new", replacement);
  fsys::rename(src_ / "tmp.new", src_ / b);
  ExpectContent(b, replacement);
  // Deleted.
  fsys::remove(src_ / c);
  ExpectGone(c);
  // Created, after the mount had said it does not exist.
  EXPECT_FALSE(fsys::exists(mnt_ / "new.bin"));
  WriteFile(src_ / "new.bin", "new");
  if (strict()) std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // negative entry
  ExpectContent("new.bin", "new");
  EXPECT_EQ(m->Stats()["corrupt_entries"].get<uint64_t>(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Modes, ChangedUnderneathTest, ::testing::Values("open", "notify"));

// Opens carry kernel-internal flags (an exec) and flags the source fd must not get
// (O_DIRECT would break the cache's unaligned reads).
TEST_P(ChangedUnderneathTest, ExecAndODirectOpensWork) {
  fsys::copy_file("/bin/true", src_ / "true");
  const std::string data = RandomBytes(1u << 20, 31);
  WriteFile(src_ / "direct.bin", data);
  auto m = MountIt({"--consistency", GetParam()});
  ASSERT_TRUE(m->ok());
  CommandResult r = ::epochfs::testing::Run({(mnt_ / "true").string()});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  int fd = ::open((mnt_ / "direct.bin").c_str(), O_RDONLY | O_DIRECT);
  ASSERT_GE(fd, 0) << strerror(errno);
  void* buf = nullptr;
  ASSERT_EQ(::posix_memalign(&buf, 4096, data.size()), 0);
  EXPECT_EQ(::pread(fd, buf, data.size(), 0), static_cast<ssize_t>(data.size())) << strerror(errno);
  EXPECT_EQ(std::memcmp(buf, data.data(), data.size()), 0);
  ::free(buf);
  ::close(fd);
}

// In "open" mode a READ the cache answers opens no source file: on a network source an
// open is round trips of its own (GlusterFS: OPEN, FLUSH and RELEASE at the bricks).
// The READs go to the daemon here because the opens are O_DIRECT. A file changed
// underneath is still read as it is now (the first read after the change opens it).
TEST_F(MountTest, ReadsTheCacheAnswersOpenNoSourceFile) {
  const std::string first = RandomBytes(256u << 10, 41);
  WriteFile(src_ / "f.bin", first);
  // Past the racily clean window: bytes read sooner after a change are not cached.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto m = MountIt({"--consistency", "open"});
  ASSERT_TRUE(m->ok());
  void* raw = nullptr;
  ASSERT_EQ(::posix_memalign(&raw, 4096, 1u << 20), 0);
  const std::unique_ptr<void, decltype(&::free)> buf(raw, &::free);
  auto read_direct = [&]() -> std::string {
    const int fd = ::open((mnt_ / "f.bin").c_str(), O_RDONLY | O_DIRECT);
    if (fd < 0) return std::string("<open: ") + strerror(errno) + ">";
    const ssize_t n = ::pread(fd, buf.get(), 1u << 20, 0);
    ::close(fd);
    if (n < 0) return std::string("<read: ") + strerror(errno) + ">";
    return std::string(static_cast<const char*>(buf.get()), static_cast<size_t>(n));
  };
  auto source_opens = [&] { return m->Stats()["open_file_fd_reopens"].get<uint64_t>(); };

  ASSERT_EQ(read_direct(), first);  // a miss: read from the source, and cached
  const uint64_t after_miss = source_opens();
  for (int i = 0; i < 3; i++) ASSERT_EQ(read_direct(), first);
  EXPECT_EQ(source_opens(), after_miss) << "a cache hit opened the source";

  const std::string second = RandomBytes(200u << 10, 42);
  WriteFile(src_ / "f.bin", second);
  EXPECT_EQ(read_direct(), second);
  EXPECT_EQ(read_direct(), second);
}

// POSIX: a file a reader has open stays that file when its name is unlinked or
// renamed over. The reads below the first 1 MiB are not in the kernel's page cache
// yet, so they reach the daemon after the name is gone.
TEST_P(ChangedUnderneathTest, OpenFileSurvivesUnlinkAndRenameOver) {
  const std::string old_bytes = RandomBytes(8u << 20, 21);
  for (const char* name : {"gone.bin", "replaced.bin"}) {
    WriteFile(src_ / name, old_bytes);
    AgeFile(src_ / name, 3600);
  }
  auto m = MountIt({"--consistency", GetParam()});
  ASSERT_TRUE(m->ok());
  for (const std::string name : {"gone.bin", "replaced.bin"}) {
    int fd = ::open((mnt_ / name).c_str(), O_RDONLY);
    ASSERT_GE(fd, 0) << name;
    char head[4096];
    ASSERT_EQ(::pread(fd, head, sizeof(head), 0), static_cast<ssize_t>(sizeof(head)));
    if (name == "gone.bin") {
      fsys::remove(mnt_ / name);
    } else {
      WriteFile(mnt_ / "new.tmp", "new content");
      fsys::rename(mnt_ / "new.tmp", mnt_ / name);
    }
    std::string tail(1u << 20, '\0');
    const off_t at = 6u << 20;
    EXPECT_EQ(::pread(fd, tail.data(), tail.size(), at), static_cast<ssize_t>(tail.size()))
        << name << ": " << strerror(errno);
    EXPECT_TRUE(tail == old_bytes.substr(at, tail.size())) << name << ": not the old bytes";
    struct stat st {};
    EXPECT_EQ(::fstat(fd, &st), 0) << name << ": " << strerror(errno);
    EXPECT_EQ(st.st_size, static_cast<off_t>(old_bytes.size())) << name;
    ::close(fd);
  }
  EXPECT_EQ(ReadFile(mnt_ / "replaced.bin"), "new content");
  EXPECT_FALSE(fsys::exists(mnt_ / "gone.bin"));
}

// The same after a warm open: in "open" mode, an open of a file the kernel has read
// only stats the source file (open_checks), and a READ then opens that very inode
// through the node's O_PATH fd, even once its name is gone or names another file.
TEST_P(ChangedUnderneathTest, ACheckedOpenReadsTheFileItChecked) {
  const std::string old_bytes = RandomBytes(8u << 20, 22);
  for (const char* name : {"gone.bin", "replaced.bin"}) {
    WriteFile(src_ / name, old_bytes);
    AgeFile(src_ / name, 3600);
  }
  auto m = MountIt({"--consistency", GetParam()});
  ASSERT_TRUE(m->ok());
  for (const std::string name : {"gone.bin", "replaced.bin"}) {
    std::string head(4096, '\0');
    {
      int fd = ::open((mnt_ / name).c_str(), O_RDONLY);  // the kernel reads it: warm
      ASSERT_GE(fd, 0) << name;
      ASSERT_EQ(::pread(fd, head.data(), head.size(), 0), static_cast<ssize_t>(head.size()));
      ::close(fd);
    }
    const uint64_t checks = m->Stats()["open_checks"].get<uint64_t>();
    int fd = ::open((mnt_ / name).c_str(), O_RDONLY);
    ASSERT_GE(fd, 0) << name;
    if (std::string(GetParam()) == "open") {
      EXPECT_EQ(m->Stats()["open_checks"].get<uint64_t>(), checks + 1) << name;
    }
    ASSERT_EQ(::pread(fd, head.data(), head.size(), 0), static_cast<ssize_t>(head.size()));
    EXPECT_TRUE(head == old_bytes.substr(0, head.size())) << name;
    if (name == "gone.bin") {
      fsys::remove(src_ / name);
    } else {
      WriteFile(src_ / "new.tmp", "new content");
      fsys::rename(src_ / "new.tmp", src_ / name);
    }
    std::string tail(1u << 20, '\0');
    const off_t at = 6u << 20;
    EXPECT_EQ(::pread(fd, tail.data(), tail.size(), at), static_cast<ssize_t>(tail.size()))
        << name << ": " << strerror(errno);
    EXPECT_TRUE(tail == old_bytes.substr(at, tail.size())) << name << ": not the old bytes";
    ::close(fd);
  }
  // The next opens see the source as it is now.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // notify mode's latency
  EXPECT_EQ(ReadFile(mnt_ / "replaced.bin"), "new content");
  EXPECT_FALSE(fsys::exists(mnt_ / "gone.bin"));
}

TEST_F(MountTest, RequestsPerFileInEachMode) {
  Dataset d = Dataset::Make(src_, 100, 4, 20000, 11);
  for (const std::string mode : {"open", "notify"}) {
    auto m = MountIt({"--consistency", mode});
    ASSERT_TRUE(m->ok());
    for (int pass = 0; pass < 3; pass++) {
      for (const auto& [name, content] : d.files) ASSERT_EQ(ReadFile(mnt_ / name), content);
    }
    auto r = m->Stats()["requests"];
    const uint64_t opens = r["open"].get<uint64_t>();
    if (mode == "open") {
      EXPECT_GE(opens, 300u) << r.dump();  // one per file per pass
    } else {
      EXPECT_LE(opens, 2u) << r.dump();  // answered ENOSYS once, then never asked again
      EXPECT_EQ(r["release"].get<uint64_t>(), 0u) << r.dump();
    }
    EXPECT_EQ(r["flush"].get<uint64_t>(), 0u);  // never sent: close() costs no round trip
    // Warm passes come from the kernel's page cache: reads on the first pass only.
    EXPECT_LE(r["read"].get<uint64_t>(), 2 * d.files.size()) << r.dump();
    ASSERT_TRUE(m->Unmount());
  }
}

// request_errors counts every request answered with an error, whatever its kind (a
// failed RMDIR or REMOVEXATTR once went uncounted), but no answer to a question.
TEST_F(MountTest, EveryErrorReplyIsCounted) {
  fsys::create_directories(src_ / "full");
  WriteFile(src_ / "full" / "f", "x");
  auto m = MountIt();
  ASSERT_TRUE(m->ok());
  const uint64_t before = m->Stats()["request_errors"].get<uint64_t>();
  EXPECT_NE(::rmdir((mnt_ / "full").c_str()), 0);  // the source answers ENOTEMPTY
  EXPECT_EQ(errno, ENOTEMPTY);
  EXPECT_NE(::removexattr((mnt_ / "full" / "f").c_str(), "user.epochfs-none"), 0);
  EXPECT_EQ(m->Stats()["request_errors"].get<uint64_t>(), before + 2);
  // ...but "no such attribute" to a GETXATTR is an answer (ls -l asks it four times per
  // file), not an error.
  char value[16];
  EXPECT_LT(::getxattr((mnt_ / "full" / "f").c_str(), "user.epochfs-none", value, sizeof(value)), 0);
  EXPECT_EQ(errno, ENODATA);
  EXPECT_EQ(m->Stats()["request_errors"].get<uint64_t>(), before + 2);
}

// In "open" mode an open that finds the file changed underneath asks the kernel to look
// its name up again (ESTALE): counted as a relookup, not as an error (every change
// underneath made a healthy mount's errors grow).
TEST_F(MountTest, ARelookupAfterAChangeUnderneathIsNoError) {
  auto m = MountOpenModeAfterReadingF();
  ASSERT_TRUE(m->ok());
  const auto before = m->Stats();
  WriteFile(src_ / "f", "second, longer");
  EXPECT_EQ(ReadFile(mnt_ / "f"), "second, longer");
  const auto after = m->Stats();
  EXPECT_GT(after["open_relookups"].get<uint64_t>(), before["open_relookups"].get<uint64_t>())
      << after.dump();
  EXPECT_EQ(after["request_errors"], before["request_errors"]) << after.dump();
}

// An open that cannot trust the kernel's size of a file changed underneath sets it
// (a store of the last byte) rather than reading with direct I/O: the kernel refuses a
// shared mapping of a file opened with direct I/O (ENODEV), and numpy's mmap_mode maps
// files shared. Every open within a second of the change is such an open.
TEST_F(MountTest, AFileChangedUnderneathCanBeMappedSharedAtOnce) {
  auto m = MountOpenModeAfterReadingF();
  ASSERT_TRUE(m->ok());
  const std::string second = RandomBytes(9000, 3);
  WriteFile(src_ / "f", second);
  for (int i = 0; i < 3; i++) {
    const int fd = ::open((mnt_ / "f").c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    struct ::stat st {};
    ASSERT_EQ(::fstat(fd, &st), 0);
    EXPECT_EQ(st.st_size, 9000);
    void* map = ::mmap(nullptr, second.size(), PROT_READ, MAP_SHARED, fd, 0);
    ASSERT_NE(map, MAP_FAILED) << "open " << i << ": " << std::strerror(errno);
    EXPECT_EQ(std::string(static_cast<const char*>(map), second.size()), second) << i;
    ::munmap(map, second.size());
    ::close(fd);
  }
  EXPECT_GT(m->Stats()["open_sizes_shown"].get<uint64_t>(), 0u) << m->Stats().dump();
}

// Readers of one file changed underneath, with only two FUSE workers: an open or a
// GETATTR that finds the change drops the kernel's pages, which waits for the page a
// READ in flight holds locked, and that READ needs a free worker. Workers that queued
// for the node's open_order behind that drop would leave it none: a hang, not an error.
// The load runs in a child process, so that a hang fails the test instead of hanging
// it (the daemon is then killed, which ends the connection and every wait on it).
TEST_F(MountTest, ReadersOfAFileChangedUnderneathNeverHangTheMount) {
  const size_t kSize = 4u << 20;
  WriteFile(src_ / "shared", RandomBytes(kSize, 21));
  AgeFile(src_ / "shared", 3600);
  auto m = MountIt({"--consistency", "open", "--threads", "2"});
  ASSERT_TRUE(m->ok());
  auto* progress = static_cast<std::atomic<uint64_t>*>(
      ::mmap(nullptr, sizeof(std::atomic<uint64_t>), PROT_READ | PROT_WRITE,
             MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(progress, MAP_FAILED);
  new (progress) std::atomic<uint64_t>(0);
  struct ::stat mounted {};
  ASSERT_EQ(::stat(mnt_.c_str(), &mounted), 0);
  const dev_t mount_dev = mounted.st_dev;
  const std::string through = (mnt_ / "shared").string();
  const std::string under = (src_ / "shared").string();
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(4);
    std::vector<std::thread> load;
    for (int r = 0; r < 6; r++) {
      load.emplace_back([&] {
        std::vector<char> buf(1 << 20);
        while (std::chrono::steady_clock::now() < until) {
          const int fd = ::open(through.c_str(), O_RDONLY | O_CLOEXEC);
          if (fd < 0) continue;  // ESTALE twice in a row is possible under this churn
          while (::read(fd, buf.data(), buf.size()) > 0) {}
          ::close(fd);
          progress->fetch_add(1);
        }
      });
    }
    load.emplace_back([&] {
      const int fd = ::open(under.c_str(), O_WRONLY | O_CLOEXEC);
      uint64_t i = 0;
      while (std::chrono::steady_clock::now() < until) {
        const char byte = static_cast<char>(i);
        (void)::pwrite(fd, &byte, 1, static_cast<off_t>((i++ * 7919 * 4096) % kSize));
        const int rfd = ::open(through.c_str(), O_RDONLY | O_CLOEXEC);
        if (rfd >= 0) {
          char one;
          (void)::read(rfd, &one, 1);
          ::close(rfd);
        }
        progress->fetch_add(1);
      }
      ::close(fd);
    });
    for (auto& t : load) t.join();
    ::_exit(0);
  }
  // The load ends after 4 s; 20 s more is a hang, not a slow machine.
  int status = 0;
  bool hung = true;
  for (int i = 0; i < 240; i++) {
    if (::waitpid(child, &status, WNOHANG) == child) {
      hung = false;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const uint64_t done = progress->load();
  if (hung) {
    // Ends the connection (fusectl's abort): every request in flight fails, the child
    // exits, and the daemon's waits end.
    (void)::mount("fusectl", "/sys/fs/fuse/connections", "fusectl", 0, nullptr);
    WriteFile("/sys/fs/fuse/connections/" + std::to_string(minor(mount_dev)) + "/abort", "1");
    ::waitpid(child, &status, 0);
    m->UnmountedByTheTest();
    (void)::umount2(mnt_.c_str(), MNT_DETACH);
  }
  ::munmap(progress, sizeof(std::atomic<uint64_t>));
  ASSERT_FALSE(hung) << "the mount stopped answering after " << done << " reads and opens";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_GT(done, 0u);
}

TEST_F(MountTest, LargeFilesAreReadInChunkSizedRequests) {
  // 8 MiB read cold: at the kernel's default 128 KiB readahead that is 64 READs.
  const std::string big = RandomBytes(8u << 20, 12);
  WriteFile(src_ / "big.bin", big);
  AgeFile(src_ / "big.bin", 3600);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto m = MountIt();
  ASSERT_TRUE(m->ok());
  std::string device;
  for (const auto& line : [] {
         std::vector<std::string> lines;
         std::ifstream in("/proc/self/mountinfo");
         for (std::string l; std::getline(in, l);) lines.push_back(l);
         return lines;
       }()) {
    if (line.find(" " + mnt_.string() + " ") != std::string::npos) {
      std::istringstream fields(line);
      std::string id, parent;
      fields >> id >> parent >> device;
    }
  }
  ASSERT_FALSE(device.empty());
  EXPECT_EQ(ReadFile("/sys/class/bdi/" + device + "/read_ahead_kb"), "1024\n");
  ASSERT_EQ(ReadFile(mnt_ / "big.bin"), big);
  const uint64_t reads = m->Stats()["requests"]["read"].get<uint64_t>();
  EXPECT_LE(reads, 16u) << "8 MiB took " << reads << " READ requests";
  EXPECT_GE(reads, 8u);
}

TEST_F(MountTest, WritesPassThrough) {
  Dataset d = Dataset::Make(src_, 5, 1, 5000, 5);
  auto m = MountIt();
  ASSERT_TRUE(m->ok());
  WriteFile(mnt_ / "new.txt", "first");
  EXPECT_EQ(ReadFile(src_ / "new.txt"), "first");
  EXPECT_EQ(ReadFile(mnt_ / "new.txt"), "first");
  {
    std::ofstream out(mnt_ / "new.txt", std::ios::app);
    out << " second";
  }
  EXPECT_EQ(ReadFile(mnt_ / "new.txt"), "first second");
  EXPECT_EQ(ReadFile(src_ / "new.txt"), "first second");
  fsys::resize_file(mnt_ / "new.txt", 5);
  EXPECT_EQ(ReadFile(mnt_ / "new.txt"), "first");
  EXPECT_EQ(ReadFile(src_ / "new.txt"), "first");
  // Overwrite a cached file through the mount: the cache must not serve the old bytes.
  const std::string& cached = d.files[0].first;
  ASSERT_EQ(ReadFile(mnt_ / cached), d.files[0].second);
  WriteFile(mnt_ / cached, "overwritten");
  EXPECT_EQ(ReadFile(mnt_ / cached), "overwritten");
  EXPECT_EQ(ReadFile(src_ / cached), "overwritten");

  fsys::create_directory(mnt_ / "dir");
  EXPECT_TRUE(fsys::is_directory(src_ / "dir"));
  fsys::rename(mnt_ / "new.txt", mnt_ / "dir" / "moved.txt");
  EXPECT_EQ(ReadFile(src_ / "dir" / "moved.txt"), "first");
  EXPECT_EQ(ReadFile(mnt_ / "dir" / "moved.txt"), "first");
  EXPECT_FALSE(fsys::exists(src_ / "new.txt"));
  fsys::permissions(mnt_ / "dir" / "moved.txt", fsys::perms(0600));
  EXPECT_EQ(fsys::status(src_ / "dir" / "moved.txt").permissions(), fsys::perms(0600));
  struct timespec times[2] = {{1000000, 0}, {2000000, 5}};
  ASSERT_EQ(::utimensat(AT_FDCWD, (mnt_ / "dir" / "moved.txt").c_str(), times, 0), 0);
  struct stat st {};
  ASSERT_EQ(::stat((src_ / "dir" / "moved.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_mtim.tv_sec, 2000000);
  fsys::create_symlink("moved.txt", mnt_ / "dir" / "link");
  EXPECT_EQ(fsys::read_symlink(src_ / "dir" / "link"), "moved.txt");
  int fd = ::open((mnt_ / "dir" / "moved.txt").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(::fsync(fd), 0);
  ::close(fd);
  fsys::remove(mnt_ / "dir" / "link");
  fsys::remove(mnt_ / "dir" / "moved.txt");
  fsys::remove(mnt_ / "dir");
  EXPECT_FALSE(fsys::exists(src_ / "dir"));
}

TEST_F(MountTest, ReadOnlyRefusesWrites) {
  Dataset d = Dataset::Make(src_, 3, 1, 100, 6);
  auto m = MountIt({"--read-only"});
  ASSERT_TRUE(m->ok());
  EXPECT_EQ(ReadFile(mnt_ / d.files[0].first), d.files[0].second);
  int fd = ::open((mnt_ / "x").c_str(), O_CREAT | O_WRONLY, 0644);
  EXPECT_LT(fd, 0);
  EXPECT_EQ(errno, EROFS);
  fd = ::open((mnt_ / d.files[0].first).c_str(), O_WRONLY);
  EXPECT_LT(fd, 0);
  EXPECT_EQ(errno, EROFS);
  EXPECT_NE(::unlink((mnt_ / d.files[0].first).c_str()), 0);
  EXPECT_TRUE(fsys::exists(src_ / d.files[0].first));
}

TEST_F(MountTest, SecondDaemonServesFromSsdWithZeroSourceReads) {
  Dataset d = Dataset::Make(src_, 200, 4, 200 * 1024, 7);
  {
    auto m = MountIt();
    ASSERT_TRUE(m->ok());
    EXPECT_TRUE(ReadAllThroughMount(d, 4).empty());
    ASSERT_TRUE(m->Unmount());  // flushes packs and index
  }
  auto m = MountIt();
  ASSERT_TRUE(m->ok());
  EXPECT_TRUE(ReadAllThroughMount(d, 4).empty());
  auto stats = m->Stats();
  EXPECT_EQ(stats["source_reads"].get<uint64_t>(), 0u) << stats.dump();
  EXPECT_GT(stats["ssd_hits"].get<uint64_t>(), 0u);
}

TEST_F(MountTest, FlippedByteInPackIsDetectedAndRightBytesServed) {
  Dataset d = Dataset::Make(src_, 30, 2, 60000, 8);
  {
    auto m = MountIt();
    ASSERT_TRUE(m->ok());
    EXPECT_TRUE(ReadAllThroughMount(d, 2).empty());
    ASSERT_TRUE(m->Unmount());
  }
  // Find one file's bytes in a pack (incompressible files are stored raw) and flip one.
  const auto& victim = *std::find_if(d.files.begin(), d.files.end(), [](const auto& f) {
    return f.first.ends_with(".jpg") && f.second.size() > 1000 && f.second.size() < 1000000;
  });
  bool flipped = false;
  for (const auto& e : fsys::recursive_directory_iterator(cache_)) {
    if (!e.is_regular_file() || e.path().extension() != ".epk") continue;
    std::string pack = ReadFile(e.path());
    size_t at = pack.find(victim.second.substr(0, 256));
    if (at == std::string::npos) continue;
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(at + victim.second.size() / 2));
    char c = static_cast<char>(pack[at + victim.second.size() / 2] ^ 0x5a);
    f.write(&c, 1);
    flipped = true;
  }
  ASSERT_TRUE(flipped) << "the victim's bytes were not found in any pack";
  auto m = MountIt();
  ASSERT_TRUE(m->ok());
  EXPECT_EQ(ReadFile(mnt_ / victim.first), victim.second);
  EXPECT_TRUE(ReadAllThroughMount(d, 2).empty());
  EXPECT_GE(m->Stats()["corrupt_entries"].get<uint64_t>(), 1u);
}

// A damaged block inside one of the index's tables (RocksDB opens the database, but the
// scan at start-up finds the bad block): the next mount rebuilds the index from the
// packs instead of refusing to start, and serves every file from the SSD tier.
TEST_F(MountTest, CorruptIndexTableIsRebuiltFromThePacks) {
  Dataset d = Dataset::Make(src_, 400, 4, 20000, 9);
  {
    auto m = MountIt();
    ASSERT_TRUE(m->ok());
    EXPECT_TRUE(ReadAllThroughMount(d, 2).empty());
    ASSERT_TRUE(m->Unmount());
  }
  {
    // The records are in RocksDB's log until a reopen writes them into a table.
    auto m = MountIt();
    ASSERT_TRUE(m->ok());
    ASSERT_TRUE(m->Unmount());
  }
  size_t damaged = 0;
  for (const auto& e : fsys::directory_iterator(cache_ / "index")) {
    if (e.path().extension() != ".sst" || e.file_size() < 4096) continue;
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    // The data blocks come first; the footer, index and filter blocks sit at the end.
    for (uint64_t at = 64; at < e.file_size() / 2; at += 512) {
      f.seekp(static_cast<std::streamoff>(at));
      f.write("\xde\xad\xbe\xef", 4);
    }
    damaged++;
  }
  ASSERT_GT(damaged, 0u) << "no index table to damage";
  auto m = MountIt();
  ASSERT_TRUE(m->ok()) << "a damaged index refused the mount";
  EXPECT_TRUE(m->Stats()["index_rebuilt"].get<bool>());
  EXPECT_TRUE(ReadAllThroughMount(d, 2).empty());
  // Rebuilt from the packs: nothing had to come from the source.
  EXPECT_EQ(m->Stats()["source_reads"].get<uint64_t>(), 0u);
}

// `epochfs warm` fills the SSD tier: on a source faster than the cache disk the fill
// waits for the writer instead of dropping entries, and after a restart every file is
// served without reading the source.
TEST_F(MountTest, WarmLeavesEveryFileInTheSsdTier) {
  Dataset d = Dataset::Make(src_, 3000, 10, 80000, 10);
  ::sync();  // a data set at rest: its own writeback does not compete with the cache's
  {
    auto m = MountIt({"--ram", "16M"});
    ASSERT_TRUE(m->ok());
    CommandResult warm = Epochfs({"warm", mnt_.string(), "--threads", "8"});
    EXPECT_EQ(warm.exit_code, 0) << warm.output;
    // A cache disk that fell behind (a 16M --ram has a 4 MiB write queue) drops chunks on
    // their way to the SSD tier; warm then reads again until everything is stored.
    if (m->Stats()["ssd_writes_dropped"].get<uint64_t>() > 0) {
      EXPECT_NE(warm.output.find("passes)"), std::string::npos) << warm.output;
    }
    ASSERT_TRUE(m->Unmount());
  }
  auto m = MountIt({"--ram", "16M"});
  ASSERT_TRUE(m->ok());
  EXPECT_TRUE(ReadAllThroughMount(d, 4).empty());
  EXPECT_EQ(m->Stats()["source_reads"].get<uint64_t>(), 0u);
}

TEST_F(MountTest, FullCacheDiskStillServesEverything) {
  // The cache disk is a 2 MiB tmpfs: far too small for the data set.
  fsys::create_directories(cache_);
  ASSERT_EQ(::mount("tmpfs", cache_.c_str(), "tmpfs", 0, "size=2m"), 0) << strerror(errno);
  struct Unmounter {
    fsys::path p;
    ~Unmounter() { ::umount2(p.c_str(), MNT_DETACH); }
  } unmount_cache{cache_};
  Dataset d = Dataset::Make(src_, 120, 3, 100 * 1024, 9);
  auto m = std::make_unique<Mount>(src_, mnt_, cache_,
                                   std::vector<std::string>{"--ram", "4M", "--disk", "1G"});  // the least --ram
  ASSERT_TRUE(m->ok()) << m->output();
  for (int pass = 0; pass < 2; pass++) EXPECT_TRUE(ReadAllThroughMount(d, 4).empty());
  auto stats = m->Stats();
  EXPECT_TRUE(stats["ssd_degraded"].get<bool>()) << stats.dump();
  ASSERT_TRUE(m->Unmount());
}

class BadInputTest : public MountTest {
 protected:
  // Runs `epochfs mount ARGS...` expecting exit code 2, a one-line error containing
  // `expected`, and no new mount.
  void ExpectRefused(const std::vector<std::string>& args, const std::string& expected) {
    const size_t mounts_before = CountMounts();
    std::vector<std::string> full = {"mount"};
    full.insert(full.end(), args.begin(), args.end());
    CommandResult r = Epochfs(full);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(expected), std::string::npos) << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
    EXPECT_EQ(CountMounts(), mounts_before);
  }
  static size_t CountMounts() {
    std::ifstream in("/proc/self/mountinfo");
    size_t n = 0;
    std::string line;
    while (std::getline(in, line)) n++;
    return n;
  }
};

TEST_F(BadInputTest, EachIsRefusedWithExitCode2AndLeavesNothing) {
  WriteFile(dir_ / "a_file", "x");
  const std::string cache = cache_.string();
  ExpectRefused({(dir_ / "missing").string(), mnt_.string(), "--cache-dir", cache}, "missing");
  ExpectRefused({(dir_ / "a_file").string(), mnt_.string(), "--cache-dir", cache},
                "not a directory");
  ExpectRefused({src_.string(), mnt_.string(), "--cache-dir", cache, "--ram", "12Q"}, "12Q");
  ExpectRefused({src_.string(), mnt_.string(), "--cache-dir", cache, "--disk", "lots"}, "lots");
  ExpectRefused({src_.string(), mnt_.string(), "--cache-dir", (dir_ / "a_file" / "c").string()},
                "cache dir");
  ExpectRefused({src_.string(), mnt_.string(), "--cache-dir", cache, "--bogus-flag"},
                "bogus-flag");
  ExpectRefused({src_.string(), mnt_.string(), "--cache-dir", cache, "--prefetch", "65"},
                "--prefetch");
  ExpectRefused({src_.string(), mnt_.string(), "--cache-dir", cache, "--prefetch-iops", "-3"},
                "--prefetch-iops");
  ExpectRefused(
      {src_.string(), mnt_.string(), "--cache-dir", cache, "--prefetch-bandwidth", "fast"},
      "--prefetch-bandwidth");
  // Half a byte is not a budget (it used to become 0 without a word).
  ExpectRefused({src_.string(), mnt_.string(), "--cache-dir", cache, "--ram", "0.5"},
                "not a whole number of bytes");
  // A log file that cannot be written would leave the daemon with no voice at all.
  ExpectRefused(
      {src_.string(), mnt_.string(), "--cache-dir", cache, "--log-file", "/proc/nope/log"},
      "/proc/nope/log");
  EXPECT_FALSE(fsys::exists(cache_)) << "a refused mount left its cache dir behind";

  // A read-only cache disk.
  fsys::create_directories(dir_ / "ro");
  ASSERT_EQ(::mount("tmpfs", (dir_ / "ro").c_str(), "tmpfs", MS_RDONLY, "size=1m"), 0);
  ExpectRefused({src_.string(), mnt_.string(), "--cache-dir", (dir_ / "ro" / "c").string()},
                "cache dir");
  ::umount2((dir_ / "ro").c_str(), MNT_DETACH);

  // Already an epochfs mount.
  auto m = MountIt();
  ASSERT_TRUE(m->ok());
  ExpectRefused({src_.string(), mnt_.string(), "--cache-dir", (dir_ / "other").string()},
                "already an epochfs mount");
  // The same cache dir in use by a running daemon.
  fsys::create_directories(dir_ / "mnt2");
  ExpectRefused({src_.string(), (dir_ / "mnt2").string(), "--cache-dir", cache}, "in use");
}

TEST_F(MountTest, StatusAndUmountCommands) {
  Dataset d = Dataset::Make(src_, 10, 1, 1000, 10);
  auto m = MountIt();
  ASSERT_TRUE(m->ok());
  for (const auto& [name, content] : d.files) ASSERT_EQ(ReadFile(mnt_ / name), content);
  CommandResult table = Epochfs({"status", mnt_.string()});
  EXPECT_EQ(table.exit_code, 0) << table.output;
  EXPECT_NE(table.output.find("RAM hits"), std::string::npos) << table.output;
  EXPECT_NE(table.output.find("source reads"), std::string::npos) << table.output;
  CommandResult json = Epochfs({"status", mnt_.string(), "--json"});
  ASSERT_EQ(json.exit_code, 0) << json.output;
  auto j = nlohmann::json::parse(json.output);
  EXPECT_GE(j["requests"]["lookup"].get<uint64_t>(), 10u) << json.output;
  EXPECT_GT(j["daemon_rss_bytes"].get<uint64_t>(), 0u);
  EXPECT_EQ(j["misses"].get<uint64_t>() + j["ram_hits"].get<uint64_t>() +
                j["ssd_hits"].get<uint64_t>() >= 10, true);
  CommandResult all = Epochfs({"status", "--json"});
  ASSERT_EQ(all.exit_code, 0);
  EXPECT_TRUE(nlohmann::json::parse(all.output).is_array());

  CommandResult not_ours = Epochfs({"status", src_.string()});
  EXPECT_EQ(not_ours.exit_code, 2);
  EXPECT_NE(not_ours.output.find("not an epochfs mount"), std::string::npos);

  CommandResult version = Epochfs({"--version"});
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_NE(version.output.find("epochfs"), std::string::npos);

  ASSERT_TRUE(m->Unmount());
  EXPECT_FALSE(IsMounted(mnt_));
  CommandResult again = Epochfs({"umount", mnt_.string()});
  EXPECT_EQ(again.exit_code, 2);
}

}  // namespace
}  // namespace epochfs::testing
