// Black-box tests that the daemon holds its resources under every workload: fds and
// the disk space of deleted files go back once the kernel forgets the files, the SSD
// writer never stalls first reads, memory stays within --ram with many small files and
// with huge plans, a hostile writer cannot flood the log, and the control files answer
// while the source hangs. Each one mounts epochfs for real.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <thread>

#include "tests/mount_fixture.h"

extern char** environ;

namespace epochfs::testing {
namespace {

using Clock = std::chrono::steady_clock;

void DropKernelCaches() {
  ::sync();
  std::ofstream("/proc/sys/vm/drop_caches") << "3\n";
}

struct FdCount {
  int source = 0;   // fds of the source's files and folders
  int deleted = 0;  // fds of files with no name left: their disk space is held
  std::string listing;
};

// The daemon's fds of objects under `source` (the rest are the cache's, the FUSE
// device's, the log's: they come and go with the cache's own work).
FdCount CountFds(pid_t pid, const fsys::path& source) {
  FdCount count;
  const fsys::path dir = "/proc/" + std::to_string(pid) + "/fd";
  std::error_code ec;
  for (const auto& entry : fsys::directory_iterator(dir, ec)) {
    std::error_code link_ec;
    const std::string target = fsys::read_symlink(entry.path(), link_ec).string();
    if (target.rfind(source.string(), 0) == 0) count.source++;
    if (target.find("(deleted)") != std::string::npos) count.deleted++;
    count.listing += target + "\n";
  }
  return count;
}

class ResourcesTest : public ConsistencyModeTest {
 protected:
  FdCount FdsOnceForgotten(const Mount& m, pid_t pid) const {
    WaitUntilForgotten(m);
    return CountFds(pid, src_);
  }

 public:
  // Drops the kernel's caches until it has forgotten every node but the root (up to
  // 10 s: FORGETs arrive asynchronously).
  static void WaitUntilForgotten(const Mount& m) {
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    for (;;) {
      DropKernelCaches();
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      if (m.Stats()["inodes"].get<uint64_t>() <= 1 || Clock::now() > deadline) break;
    }
  }
};

INSTANTIATE_TEST_SUITE_P(Modes, ResourcesTest, ::testing::Values("notify", "open"));

// Files written and read back through the mount, copied with copy_file_range, read by
// root after a chmod 000, renamed over while open: once the kernel forgets them, the
// daemon holds no fd it did not hold before, and none of a deleted file (in "notify"
// mode a created file's handle used to stay open forever: the kernel sends no RELEASE
// there).
TEST_P(ResourcesTest, NoFdAndNoDeletedFileIsHeldOnceTheKernelForgets) {
  WriteFile(src_ / "seed", RandomBytes(300000, 1));
  AgeFile(src_ / "seed", 3600);
  auto m = MountIt();
  ASSERT_TRUE(m->ok());
  const pid_t pid = m->Stats()["pid"].get<pid_t>();
  const FdCount before = FdsOnceForgotten(*m, pid);
  ASSERT_EQ(before.deleted, 0);

  const std::string bytes = RandomBytes(1000000, 2);
  for (int i = 0; i < 20; i++) {  // written, read back, removed
    const fsys::path f = mnt_ / ("t" + std::to_string(i));
    WriteFile(f, bytes);
    EXPECT_EQ(ReadFile(f), bytes);
    fsys::remove(f);
  }
  for (int i = 0; i < 10; i++) {  // cp: copy_file_range into a file the mount creates
    const fsys::path f = mnt_ / ("c" + std::to_string(i));
    const CommandResult cp = epochfs::testing::Run({"cp", (mnt_ / "seed").string(), f.string()});
    EXPECT_EQ(cp.exit_code, 0) << cp.output;
    EXPECT_EQ(fsys::file_size(f), 300000u);
    fsys::remove(f);
  }
  for (int i = 0; i < 10; i++) {  // chmod 000, then a read by root
    const fsys::path f = mnt_ / ("p" + std::to_string(i));
    WriteFile(f, bytes.substr(0, 5000));
    fsys::permissions(f, fsys::perms::none);
    EXPECT_EQ(ReadFile(f), bytes.substr(0, 5000));
    fsys::remove(f);
  }
  for (int i = 0; i < 10; i++) {  // renamed over while a reader has it open
    const fsys::path f = mnt_ / ("r" + std::to_string(i));
    WriteFile(f, "old");
    const int fd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    WriteFile(mnt_ / "next", "new");
    fsys::rename(mnt_ / "next", f);
    char buf[8] = {};
    EXPECT_EQ(::pread(fd, buf, sizeof(buf), 0), 3);
    EXPECT_STREQ(buf, "old");
    ::close(fd);
    fsys::remove(f);
  }

  const FdCount after = FdsOnceForgotten(*m, pid);
  EXPECT_EQ(after.deleted, 0);
  EXPECT_LE(after.source, before.source) << "before:\n" << before.listing << "after:\n"
                                         << after.listing;
  const auto stats = m->Stats();
  EXPECT_EQ(stats["open_file_fds"].get<uint64_t>(), 0u) << stats.dump();
}

// Files and folders deleted underneath the mount after they were read: the kernel
// forgets them on its own, without a cache drop or a look at the mount, and with them the
// daemon's fds (and the disk space those held). In "open" mode the kernel's entries of
// the deleted files stayed until reclaim, and with them the disk space of every deleted
// file read (docs/benchmarks.md, "Figures behind design choices"); in "notify" mode the
// access watcher's fanotify marks kept every deleted folder's node.
TEST_P(ResourcesTest, WhatIsDeletedUnderneathIsLetGoWithoutACacheDrop) {
  for (int d = 0; d < 4; d++) {
    fsys::create_directories(src_ / ("d" + std::to_string(d)));
    for (int f = 0; f < 50; f++) {
      const fsys::path file = src_ / ("d" + std::to_string(d)) / ("f" + std::to_string(f));
      WriteFile(file, RandomBytes(20000, static_cast<uint64_t>(d * 100 + f)));
      AgeFile(file, 3600);
    }
  }
  auto m = MountIt();
  ASSERT_TRUE(m->ok());
  const pid_t pid = m->Stats()["pid"].get<pid_t>();
  for (int d = 0; d < 4; d++) {
    for (int f = 0; f < 50; f++) {
      ASSERT_EQ(ReadFile(mnt_ / ("d" + std::to_string(d)) / ("f" + std::to_string(f))).size(),
                20000u);
    }
  }
  ASSERT_GE(m->Stats()["inodes"].get<uint64_t>(), 205u);
  for (int d = 0; d < 4; d++) fsys::remove_all(src_ / ("d" + std::to_string(d)));
  FdCount held;
  uint64_t inodes = 0;
  for (const auto deadline = Clock::now() + std::chrono::seconds(5); Clock::now() < deadline;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    held = CountFds(pid, src_);
    inodes = m->Stats()["inodes"].get<uint64_t>();
    if (held.deleted == 0 && inodes <= 1) break;
  }
  EXPECT_EQ(held.deleted, 0) << held.listing;
  EXPECT_EQ(inodes, 1u);
}

// First reads of compressible files run about as fast as of incompressible ones: the
// SSD writer syncs when its queue fills with chunks that compress to almost nothing,
// instead of leaving every 16th reader waiting out the 1 s sync interval (what that
// cost is in docs/benchmarks.md, "Figures behind design choices").
TEST_P(ResourcesTest, CompressibleFirstReadsAreWithinTwiceIncompressibleOnes) {
  constexpr int kFiles = 120;
  const std::string zeros(1000000, '\0');
  const std::string noise = RandomBytes(1000000, 3);
  fsys::create_directories(src_ / "z");
  fsys::create_directories(src_ / "r");
  for (int i = 0; i < kFiles; i++) {
    WriteFile(src_ / "z" / std::to_string(i), zeros);
    WriteFile(src_ / "r" / std::to_string(i), noise.substr(i) + noise.substr(0, i));
  }
  AgeFile(src_, 3600);
  for (const char* d : {"z", "r"}) {
    for (int i = 0; i < kFiles; i++) AgeFile(src_ / d / std::to_string(i), 3600);
  }
  auto m = MountIt({"--ram", "64M"});
  ASSERT_TRUE(m->ok());
  auto read_all = [&](const char* dir) {
    DropKernelCaches();
    const auto start = Clock::now();
    for (int i = 0; i < kFiles; i++) {
      EXPECT_EQ(fsys::file_size(mnt_ / dir / std::to_string(i)), 1000000u);
      ReadFile(mnt_ / dir / std::to_string(i));
    }
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  const double incompressible_s = read_all("r");
  const double compressible_s = read_all("z");
  std::cout << "first reads of " << kFiles << " x 1 MB: incompressible " << incompressible_s
            << " s, compressible " << compressible_s << " s\n";
  // Generous: the stall this catches cost about 1 s per 16 files.
  EXPECT_LE(compressible_s, 2 * incompressible_s + 1.0);
  EXPECT_EQ(ReadFile(mnt_ / "z" / "7"), zeros);
  EXPECT_EQ(m->Stats()["ssd_writes_dropped"].get<uint64_t>(), 0u);
}

// What the daemon holds beyond --ram: code, thread stacks, libfuse's buffers, RocksDB's
// own, allocator slack (measured: docs/operations.md), with a little room.
constexpr uint64_t kFixedOverheadBytes = 48ull << 20;

// 100,000 files of 100 bytes read once with --ram 64M, the daemon inside a 300 MB memory
// cgroup: once the kernel has forgotten them, the daemon's RSS is within --ram and its
// fixed overhead, and its unmount (the cache's flush) is not OOM-killed. (Each RAM
// entry and each known file used to cost memory nothing counted, and the daemon was
// then OOM-killed during `epochfs umount`: docs/benchmarks.md, "Figures behind design
// choices".)
// (The default mode only: what --ram covers does not depend on it, and 100,000 opens
// in "open" mode take a minute.)
TEST_F(MountedDirsTest, ManySmallFilesStayWithinRamOnceTheKernelForgets) {
  const MemoryCgroup group(300ull << 20);
  const std::string bytes = RandomBytes(100, 4);
  for (int d = 0; d < 100; d++) {
    const fsys::path dir = src_ / ("d" + std::to_string(d));
    fsys::create_directories(dir);
    for (int i = 0; i < 1000; i++) WriteFile(dir / std::to_string(i), bytes);
  }
  const CommandResult aged = epochfs::testing::Run(
      {"find", src_.string(), "-exec", "touch", "-h", "-d", "1 hour ago", "{}", "+"});
  ASSERT_EQ(aged.exit_code, 0) << aged.output;
  const std::string in_group = group.ok() ? group.Enter() : "exec ";
  const CommandResult mounted = epochfs::testing::Run(
      {"sh", "-c", in_group + EPOCHFS_BINARY + " mount " + src_.string() + " " + mnt_.string() +
                       " --cache-dir " + cache_.string() + " --ram 64M --disk 512M"});
  ASSERT_EQ(mounted.exit_code, 0) << mounted.output;
  auto m = std::make_unique<UnmountOnExit>(mnt_);
  const CommandResult read = epochfs::testing::Run(
      {"sh", "-c", "find " + mnt_.string() + " -type f -print0 | xargs -0 cat | wc -c"});
  ASSERT_EQ(read.exit_code, 0) << read.output;
  EXPECT_EQ(std::stoull(read.output), 100'000u * 100);
  const auto stats_of = [&] { return nlohmann::json::parse(ReadFile(mnt_ / ".epochfs" / "stats")); };
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  do {  // until the kernel has forgotten every node but the root
    DropKernelCaches();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  } while (stats_of()["inodes"].get<uint64_t>() > 1 && Clock::now() < deadline);
  std::this_thread::sleep_for(std::chrono::seconds(5));  // the memory trimmer's period, twice
  const auto stats = stats_of();
  EXPECT_LE(stats["ram_bytes"].get<uint64_t>(), stats["ram_tier_budget_bytes"].get<uint64_t>());
  EXPECT_LE(stats["file_table_bytes"].get<uint64_t>(), 8ull << 20);
  EXPECT_GT(stats["files_untracked"].get<uint64_t>(), 0u);
  EXPECT_LE(stats["daemon_rss_bytes"].get<uint64_t>(), (64ull << 20) + kFixedOverheadBytes)
      << stats.dump();
  std::cout << "daemon RSS " << (stats["daemon_rss_bytes"].get<uint64_t>() >> 20)
            << " MiB (peak " << (stats["daemon_peak_rss_bytes"].get<uint64_t>() >> 20)
            << " MiB while the kernel held the inodes) with --ram 64M, "
            << stats["ram_entries"] << " RAM entries, " << stats["files_known"]
            << " files known\n";
  const CommandResult unmounted = epochfs::testing::Epochfs({"umount", mnt_.string()});
  EXPECT_EQ(unmounted.exit_code, 0) << unmounted.output;
  m.reset();
  // A daemon that went down cleanly cleared its pid from the lock file (a killed one
  // leaves it, and `umount` then fails: see ops_test's dead daemon).
  EXPECT_EQ(ReadFile(cache_ / "lock"), "");
  if (group.ok()) {
    EXPECT_EQ(group.OomKills(), 0u) << "the daemon was OOM-killed in its 300 MB cgroup";
  } else {
    std::cout << "(not run inside a memory cgroup: " << group.why_not() << ")\n";
  }
}

// A --ram that cannot fit the memory cgroup the daemon would run in is refused at mount,
// with the numbers; it used to mount, and be OOM-killed right after (a 100 MB cgroup
// with --ram 128M).
TEST_F(MountedDirsTest, RamBeyondTheCgroupsLimitIsRefusedAtMount) {
  const MemoryCgroup group(100ull << 20);
  if (!group.ok()) GTEST_SKIP() << group.why_not();
  const auto mount_with = [&](const char* ram) {
    return epochfs::testing::Run(
        {"sh", "-c", group.Enter() + EPOCHFS_BINARY + " mount " + src_.string() + " " +
                         mnt_.string() + " --cache-dir " + cache_.string() + " --ram " + ram});
  };
  const CommandResult refused = mount_with("128M");
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("memory limit of 100 MiB"), std::string::npos) << refused.output;
  EXPECT_FALSE(fsys::exists(cache_)) << "a refused mount leaves nothing behind";
  const CommandResult fits = mount_with("32M");
  EXPECT_EQ(fits.exit_code, 0) << fits.output;
  UnmountOnExit unmount(mnt_);
}

// An epoch record far larger than --ram's file table allows (a damaged one, or one
// written under a much larger --ram) is ignored at mount instead of parsed whole, which
// sent the RSS far past --ram (docs/benchmarks.md, "Figures behind design choices").
// Here 1,000,000 well-formed file lines (about 40 MB) under --ram 64M, whose file table
// is 8 MiB.
TEST_F(MountedDirsTest, AHugeEpochRecordIsIgnoredWithinRam) {
  WriteFile(src_ / "f", "x");
  AgeFile(src_ / "f", 3600);
  fsys::create_directories(cache_);
  {
    std::ofstream record(cache_ / "epochs");
    constexpr int kFiles = 1'000'000;
    record << "epochfs-epochs 1\nfiles " << kFiles << "\n";
    for (int i = 0; i < kFiles; i++) record << "2049 " << 1000000 + i << " class_x/sample_" << i << ".jpg\n";
    record << "order 0\npattern shuffled\n";
  }
  auto m = std::make_unique<Mount>(src_, mnt_, cache_, std::vector<std::string>{"--ram", "64M"});
  ASSERT_TRUE(m->ok()) << m->output();
  EXPECT_EQ(ReadFile(mnt_ / "f"), "x");
  const auto stats = m->Stats();
  EXPECT_LE(stats["daemon_peak_rss_bytes"].get<uint64_t>(), (64ull << 20) + kFixedOverheadBytes)
      << stats.dump();
  EXPECT_NE(ReadFile(cache_ / "epochfs.log").find("ignoring"), std::string::npos);
}

// A plan of 4,000,000 entries is refused once it outgrows its share of --ram, without
// the daemon's memory following it (it used to, far past --ram: docs/benchmarks.md,
// "Figures behind design choices"); and a user writing bad plans in a loop leaves a few
// log lines, not hundreds of MB.
TEST_P(ResourcesTest, HugePlansAndPlanFloodsStayBounded) {
  WriteFile(src_ / "f", "x");
  AgeFile(src_ / "f", 3600);
  auto m = MountIt({"--ram", "64M"});
  ASSERT_TRUE(m->ok());
  std::string huge = "epochfs-plan 1\n";
  huge.reserve(8'100'000);
  for (int i = 0; i < 4'000'000; i++) huge += "f\n";
  huge += "\n";
  EXPECT_EQ(WritePlan(mnt_, huge, 128 * 1024), EINVAL);
  auto stats = m->Stats();
  EXPECT_EQ(stats["plans_published"].get<uint64_t>(), 0u);
  EXPECT_LE(stats["daemon_peak_rss_bytes"].get<uint64_t>(), (64ull << 20) + kFixedOverheadBytes)
      << stats.dump();

  const auto log_lines = [&] {
    std::ifstream log(cache_ / "epochfs.log");
    std::string line;
    int refused = 0;
    while (std::getline(log, line)) refused += line.find("plan refused") != std::string::npos;
    return refused;
  };
  const int before = log_lines();
  for (int i = 0; i < 2000; i++) EXPECT_EQ(WritePlan(mnt_, "not a plan\n"), EINVAL);
  const int logged = log_lines() - before;
  EXPECT_GE(logged, 1);
  EXPECT_LE(logged, 10) << "a flood of bad plans must not flood the log";
}

// A command started in the background, whose end can be waited for with a deadline: a
// process stuck in the kernel behind a hung FUSE server cannot be killed, so a test
// must be able to give up waiting on it without hanging itself.
class Background {
 public:
  explicit Background(const std::vector<std::string>& args) {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    if (posix_spawnp(&pid_, argv[0], &actions, nullptr, argv.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&actions);
  }
  ~Background() {
    if (pid_ > 0 && !done_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  // Whether it ended within `seconds` (its exit code then in exit_code()).
  bool WaitFor(double seconds) {
    const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
    while (!done_ && pid_ > 0) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        done_ = true;
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        break;
      }
      if (Clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return done_;
  }
  int exit_code() const { return exit_code_; }
  std::string output() const { return ReadFile(out_); }

 private:
  TempDir dir_;
  fsys::path out_ = dir_ / "output";
  pid_t pid_ = -1;
  bool done_ = false;
  int exit_code_ = -1;
};

// A source that stops answering: the source is a mergerfs mount (a FUSE filesystem of
// its own) whose daemon is stopped. A lookup through epochfs then hangs in the source,
// holding what the kernel holds for it; `status` and `umount --lazy` must still answer
// (they hung in D state until the source came back, and `timeout` could not stop them).
TEST_F(MountedDirsTest, StatusAndLazyUmountAnswerWhileASourceLookupHangs) {
  const fsys::path lower = dir_ / "lower";
  fsys::create_directories(lower);
  WriteFile(src_ / "a", "a");
  fsys::create_directories(src_ / "d");
  const CommandResult merged = epochfs::testing::Run(
      {"mergerfs", "-o", "cache.entry=0,cache.attr=0,cache.negative_entry=0,cache.files=off",
       src_.string(), lower.string()});
  if (merged.exit_code != 0) GTEST_SKIP() << "mergerfs (the hanging source) failed: " << merged.output;
  struct UnmountLower {
    fsys::path path;
    pid_t pid = 0;
    ~UnmountLower() {
      if (pid > 0) ::kill(pid, SIGCONT);
      ::umount2(path.c_str(), MNT_DETACH);
    }
  } unmount_lower{lower};
  const CommandResult pid_of = epochfs::testing::Run({"pgrep", "-n", "-x", "mergerfs"});
  ASSERT_EQ(pid_of.exit_code, 0) << pid_of.output;
  const pid_t source_daemon = std::stoi(pid_of.output);

  // Not a Mount guard: the test unmounts it itself, lazily.
  const CommandResult mounted = epochfs::testing::Epochfs(
      {"mount", lower.string(), mnt_.string(), "--cache-dir", cache_.string(), "--ram", "64M"});
  ASSERT_EQ(mounted.exit_code, 0) << mounted.output;
  UnmountOnExit unmount_on_exit(mnt_);
  EXPECT_EQ(ReadFile(mnt_ / "a"), "a");
  EXPECT_EQ(epochfs::testing::Epochfs({"status", mnt_.string()}).exit_code, 0);

  DropKernelCaches();  // `.epochfs` too must be looked up under the root's lock
  ASSERT_EQ(::kill(source_daemon, SIGSTOP), 0);
  unmount_lower.pid = source_daemon;  // from here on, SIGCONT on every way out
  Background hung_root({"stat", (mnt_ / "new-name").string()});
  Background hung_dir({"stat", (mnt_ / "d" / "x").string()});
  // More lookups stuck in the source than the daemon has FUSE threads (--threads 16).
  std::vector<std::unique_ptr<Background>> crowd;
  for (int i = 0; i < 24; i++) {
    crowd.push_back(std::make_unique<Background>(
        std::vector<std::string>{"stat", (mnt_ / ("n" + std::to_string(i))).string()}));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // past the attribute timeout
  Background hung_root_attrs({"stat", mnt_.string()});
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ASSERT_FALSE(hung_root.WaitFor(0)) << "the source did not hang: " << hung_root.output();
  ASSERT_FALSE(hung_dir.WaitFor(0)) << "the source did not hang: " << hung_dir.output();

  Background status({EPOCHFS_BINARY, "status", "--json", mnt_.string()});
  const bool status_answered = status.WaitFor(2.0);
  EXPECT_TRUE(status_answered) << "status hangs behind the source lookup";
  Background lazy({EPOCHFS_BINARY, "umount", "--lazy", mnt_.string()});
  const bool lazy_answered = lazy.WaitFor(2.0);
  EXPECT_TRUE(lazy_answered) << "umount --lazy hangs behind the source lookup";

  ::kill(source_daemon, SIGCONT);  // the source answers again: everything drains
  EXPECT_TRUE(hung_root.WaitFor(10));
  EXPECT_TRUE(hung_dir.WaitFor(10));
  EXPECT_TRUE(hung_root_attrs.WaitFor(10));
  for (auto& b : crowd) EXPECT_TRUE(b->WaitFor(10));
  if (status_answered) {
    EXPECT_EQ(status.exit_code(), 0) << status.output();
    EXPECT_NE(status.output().find("\"pid\""), std::string::npos) << status.output();
  }
  ASSERT_TRUE(lazy.WaitFor(30));
  EXPECT_EQ(lazy.exit_code(), 0) << lazy.output();
  EXPECT_NE(epochfs::testing::Run({"findmnt", "-n", mnt_.string()}).exit_code, 0)
      << "still mounted after umount --lazy";
}

}  // namespace
}  // namespace epochfs::testing
