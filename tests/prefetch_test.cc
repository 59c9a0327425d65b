// Black-box tests of the prefetcher: a published plan is followed, a bad plan is
// refused and changes nothing, a plan is checked against the writer's permissions, and
// readahead turns a sequential epoch's SSD reads into RAM hits after a restart.
#include <fcntl.h>
#include <signal.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <mutex>
#include <random>
#include <thread>

#include "base/unique_fd.h"
#include "tests/mount_fixture.h"

namespace epochfs::testing {
namespace {

std::string PlanText(const std::vector<std::string>& paths) {
  std::string text = "epochfs-plan 1\n";
  for (const auto& p : paths) text += p + "\n";
  return text + "\n";
}

// Holds one thread of process `pid`, found by its name, off the CPU until the guard goes,
// as a busy machine's scheduler may leave it: ptrace's seize and interrupt stop that
// thread alone, the rest of the process runs on. Check ok().
class StoppedThread {
 public:
  StoppedThread(int pid, const std::string& name) {
    const fsys::path tasks = fsys::path("/proc") / std::to_string(pid) / "task";
    std::error_code error;
    for (const auto& task : fsys::directory_iterator(tasks, error)) {
      std::ifstream comm(task.path() / "comm");
      std::string comm_name;
      if (!std::getline(comm, comm_name) || comm_name != name) continue;
      const pid_t tid = std::stoi(task.path().filename().string());
      if (::ptrace(PTRACE_SEIZE, tid, nullptr, nullptr) != 0) {
        why_not_ = std::string("PTRACE_SEIZE: ") + std::strerror(errno);
        return;
      }
      tid_ = tid;
      int status = 0;
      if (::ptrace(PTRACE_INTERRUPT, tid, nullptr, nullptr) != 0 ||
          ::waitpid(tid, &status, __WALL) != tid || !WIFSTOPPED(status)) {
        why_not_ = std::string("PTRACE_INTERRUPT: ") + std::strerror(errno);
        return;
      }
      ok_ = true;
      return;
    }
    why_not_ = "no thread named " + name + " in " + tasks.string();
  }
  ~StoppedThread() {
    if (tid_ > 0) ::ptrace(PTRACE_DETACH, tid_, nullptr, nullptr);
  }
  StoppedThread(const StoppedThread&) = delete;
  StoppedThread& operator=(const StoppedThread&) = delete;

  bool ok() const { return ok_; }
  const std::string& why_not() const { return why_not_; }

 private:
  pid_t tid_ = 0;
  bool ok_ = false;
  std::string why_not_;
};

class PrefetchTest : public MountedDirsTest, public ::testing::WithParamInterface<std::string> {
 protected:
  // `count` files of `size` bytes in `dirs` folders, old enough to be cached.
  std::vector<std::string> MakeFiles(int count, int dirs, size_t size) {
    std::vector<std::string> names;
    for (int i = 0; i < count; ++i) {
      const std::string dir = "d" + std::to_string(i % dirs);
      fsys::create_directories(src_ / dir);
      char name[64];
      std::snprintf(name, sizeof(name), "%s/f%05d.bin", dir.c_str(), i);
      WriteFile(src_ / name, RandomBytes(size, i));
      AgeFile(src_ / name, 3600);
      names.push_back(name);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(150));  // the racily-clean rule
    return names;
  }

  std::unique_ptr<Mount> MountIt(std::vector<std::string> extra = {}) {
    extra.push_back("--consistency");
    extra.push_back(GetParam());
    auto m = std::make_unique<Mount>(src_, mnt_, cache_, extra);
    EXPECT_TRUE(m->ok()) << m->output();
    return m;
  }

  // Polls the stats until `key` reaches `want` (or 10 s pass); returns the last value.
  uint64_t WaitFor(const Mount& m, const std::string& key, uint64_t want) {
    uint64_t v = 0;
    for (int i = 0; i < 200; ++i) {
      v = m.Stats().value(key, uint64_t{0});
      if (v >= want) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return v;
  }

};

TEST_P(PrefetchTest, PublishedPlanIsFollowed) {
  auto names = MakeFiles(300, 3, 64 * 1024);
  auto m = MountIt();
  ASSERT_TRUE(m->ok());
  std::mt19937 rng(5);
  std::shuffle(names.begin(), names.end(), rng);
  // Odd-sized pieces: lines arrive split across writes.
  ASSERT_EQ(WritePlan(mnt_, PlanText(names), 1000), 0);
  auto before = m->Stats();
  EXPECT_EQ(before["pattern"], "published");
  EXPECT_EQ(before["plan_entries"], 300);
  // Readahead goes at most `lookahead` (256) files past the reader.
  EXPECT_GE(WaitFor(*m, "prefetched", 257), 257u);

  before = m->Stats();
  for (const auto& name : names) {
    ASSERT_EQ(ReadFile(mnt_ / name).size(), 64u * 1024) << name;
    std::this_thread::sleep_for(std::chrono::microseconds(300));  // "compute"
  }
  WaitFor(*m, "plan_position", 299);  // the last opens reach the prefetcher a moment later
  auto after = m->Stats();
  const uint64_t ram_hits = after["ram_hits"].get<uint64_t>() - before["ram_hits"].get<uint64_t>();
  const uint64_t misses = after["misses"].get<uint64_t>() - before["misses"].get<uint64_t>();
  const uint64_t pushed =
      after["pushed_files"].get<uint64_t>() - before["pushed_files"].get<uint64_t>();
  // Each file is one READ (64 KiB), a RAM hit; or it was pushed into the kernel's page
  // cache and no READ came: in "open" mode by its open (the kernel had no inode for it
  // when it was read ahead), or once a listing gave the kernel its inode (the daemon
  // lists a folder again once most of its files were read: kernel_cache/attr_refresh.h).
  EXPECT_GE(ram_hits + pushed, 295u) << after.dump();
  EXPECT_LE(misses, 5u) << after.dump();
  EXPECT_GE(after["prefetch_hits"].get<uint64_t>(), 295u) << after.dump();
  EXPECT_EQ(after["plan_position"], 299);
  EXPECT_EQ(after["pattern"], "published");
}

TEST_P(PrefetchTest, BadPlansAreRefusedAndThePreviousPlanStays) {
  auto names = MakeFiles(5, 1, 1000);
  fsys::create_symlink("/etc/passwd", src_ / "link");
  fsys::create_directories(src_ / "sub");
  auto m = MountIt();
  ASSERT_TRUE(m->ok());
  ASSERT_EQ(WritePlan(mnt_, PlanText(names)), 0);
  const std::string long_name(PATH_MAX + 10, 'a');
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"dotdot", PlanText({"../src/" + names[0]})},
      {"dotdot inside", PlanText({"d0/../../x"})},
      {"absolute", PlanText({(src_ / names[0]).string()})},
      {"unknown", PlanText({names[0], "d0/nope.bin"})},
      {"NUL", PlanText({names[0] + std::string(1, '\0') + "x"})},
      {"garbage header", "epochfs-plan 9\n" + names[0] + "\n\n"},
      {"binary garbage", std::string("\x89PNG\r\n\x1a\n\0\0\0\rIHDR", 16)},
      {"directory", PlanText({"sub"})},
      {"symlink out", PlanText({"link"})},
      {"control file", PlanText({".epochfs/stats"})},
      {"line longer than PATH_MAX", PlanText({long_name})},
      {"data after the end", PlanText({names[0]}) + names[1] + "\n"},
  };
  for (const auto& [what, text] : bad) {
    EXPECT_EQ(WritePlan(mnt_, text), EINVAL) << what;
  }
  auto stats = m->Stats();
  EXPECT_EQ(stats["plans_published"], 1) << stats.dump();
  EXPECT_EQ(stats["plan_entries"], 5);
  EXPECT_EQ(stats["pattern"], "published");
  // A good plan after all that is accepted.
  ASSERT_EQ(WritePlan(mnt_, PlanText({names[1], names[0]})), 0);
  EXPECT_EQ(m->Stats()["plan_entries"], 2);
  // A large plan (12,000 entries) is taken in pieces; one larger than its share of
  // --ram (a sixteenth: 4 MiB of the 64M here, about 15,000 entries) is refused, and
  // the previous plan stays.
  std::vector<std::string> many;
  for (int i = 0; i < 12000; ++i) many.push_back(names[i % names.size()]);
  ASSERT_EQ(WritePlan(mnt_, PlanText(many), 128 * 1024), 0);
  EXPECT_EQ(m->Stats()["plan_entries"], 12000);
  for (int i = 12000; i < 200000; ++i) many.push_back(names[i % names.size()]);
  EXPECT_EQ(WritePlan(mnt_, PlanText(many), 128 * 1024), EINVAL);
  stats = m->Stats();
  EXPECT_EQ(stats["plan_entries"], 12000);
  EXPECT_LT(stats["daemon_rss_bytes"].get<uint64_t>(), (64ull + 64) << 20);
}

TEST_P(PrefetchTest, PlanIsCheckedAgainstTheWritersPermissions) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to write as another user";
  auto names = MakeFiles(200, 4, 1000);
  WriteFile(src_ / "secret.bin", "top secret");
  fsys::create_directory(src_ / "locked");
  WriteFile(src_ / "locked" / "open.bin", "in a folder nobody else may search");
  AgeFile(src_ / "locked" / "open.bin", 3600);
  fsys::permissions(src_ / "locked", fsys::perms::owner_all);
  AgeFile(src_ / "secret.bin", 3600);
  fsys::permissions(src_ / "secret.bin", fsys::perms::owner_read | fsys::perms::owner_write);
  fsys::permissions(dir_.path(), fsys::perms::owner_all | fsys::perms::group_read |
                                     fsys::perms::group_exec | fsys::perms::others_read |
                                     fsys::perms::others_exec);
  auto m = MountIt({"--allow-other"});
  ASSERT_TRUE(m->ok());
  auto as_nobody = [&](const std::string& text) {
    pid_t pid = ::fork();
    if (pid == 0) {
      if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(100);
      ::_exit(WritePlan(mnt_, text));
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  EXPECT_EQ(as_nobody(PlanText({names[0], "secret.bin"})), EACCES);
  EXPECT_EQ(m->Stats()["plans_published"], 0);
  EXPECT_EQ(as_nobody(PlanText({names[0], names[1]})), 0);
  EXPECT_EQ(m->Stats()["plans_published"], 1);
  // Root may name it.
  EXPECT_EQ(WritePlan(mnt_, PlanText({"secret.bin"})), 0);

  // Long plans (their lines resolved in parallel, folders checked once): the same rules.
  std::vector<std::string> plan(names.begin(), names.end());
  plan.insert(plan.begin() + 150, "secret.bin");
  EXPECT_EQ(as_nobody(PlanText(plan)), EACCES);
  plan[150] = "locked/open.bin";
  EXPECT_EQ(as_nobody(PlanText(plan)), EACCES);
  plan[150] = "no/such.bin";
  EXPECT_EQ(as_nobody(PlanText(plan)), EINVAL);
  EXPECT_EQ(m->Stats()["plans_published"], 2);
  plan.erase(plan.begin() + 150);
  plan.insert(plan.end(), names.begin(), names.end());  // this epoch and the next
  EXPECT_EQ(as_nobody(PlanText(plan)), 0);
  EXPECT_EQ(m->Stats()["plans_published"], 3);
  EXPECT_GE(m->Stats()["plan_entries"], 400);  // with the other publishers still live
}

// Past its checking budget (0 here: as on a cold source, where each check reads a
// folder and an inode from a slow disk) a plan is published at once, and its entries
// are checked afterwards, in order, joining the plan as they are: the plan is followed
// all the same. What those checks refuse (a missing file, one the writer may not read,
// one in a folder it may not search) is left out and counted, and tells the writer no
// more than a refusal would; the write, answered already, succeeded. A newer plan of the
// same process makes the checks of the older one moot.
TEST_P(PrefetchTest, APlanPastItsCheckingBudgetIsPublishedAtOnceAndCheckedAfterwards) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to write as another user";
  auto names = MakeFiles(300, 3, 64 * 1024);
  WriteFile(src_ / "secret.bin", "top secret");
  AgeFile(src_ / "secret.bin", 3600);
  fsys::permissions(src_ / "secret.bin", fsys::perms::owner_read | fsys::perms::owner_write);
  fsys::create_directory(src_ / "locked");
  WriteFile(src_ / "locked" / "open.bin", "in a folder nobody else may search");
  AgeFile(src_ / "locked" / "open.bin", 3600);
  fsys::permissions(src_ / "locked", fsys::perms::owner_all);
  fsys::permissions(dir_.path(), fsys::perms::owner_all | fsys::perms::group_read |
                                     fsys::perms::group_exec | fsys::perms::others_read |
                                     fsys::perms::others_exec);
  ::setenv("EPOCHFS_PLAN_RESOLVE_BUDGET_MS", "0", 1);
  auto m = MountIt({"--allow-other"});
  ::unsetenv("EPOCHFS_PLAN_RESOLVE_BUDGET_MS");
  ASSERT_TRUE(m->ok());
  std::mt19937 rng(11);
  std::shuffle(names.begin(), names.end(), rng);
  std::vector<std::string> plan = names;
  plan.insert(plan.begin() + 250, "locked/open.bin");
  plan.insert(plan.begin() + 200, "secret.bin");
  plan.insert(plan.begin() + 100, "no/such.bin");
  const std::vector<std::string> later(names.begin(), names.begin() + 100);
  // Files no plan of the publisher named yet: checked after publication, not taken from
  // its previous plan.
  std::vector<std::string> fresh;
  for (int i = 0; i < 150; ++i) {
    fresh.push_back("fresh/g" + std::to_string(i) + ".bin");
    fsys::create_directories(src_ / "fresh");
    WriteFile(src_ / fresh.back(), RandomBytes(1000, 1000 + i));
    AgeFile(src_ / fresh.back(), 3600);
  }

  // The publisher: a process of user nobody that lives until the test is done with its
  // plans (a plan goes with its process). It writes a plan per byte it reads from
  // `go`, and reports each write's errno on `done`.
  int go[2], done[2];
  ASSERT_EQ(::pipe(go), 0);
  ASSERT_EQ(::pipe(done), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(go[1]);
    ::close(done[0]);
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(100);
    char which = 0;
    while (::read(go[0], &which, 1) == 1) {
      const int err = which == 'a' ? WritePlan(mnt_, PlanText(plan), 1000)
                                   : WritePlan(mnt_, PlanText(fresh)) |
                                         WritePlan(mnt_, PlanText(later));
      const char result = static_cast<char>(err);
      if (::write(done[1], &result, 1) != 1) ::_exit(101);
    }
    ::_exit(0);
  }
  ::close(go[0]);
  ::close(done[1]);
  auto publish = [&](char which) {
    char result = -1;
    EXPECT_EQ(::write(go[1], &which, 1), 1);
    EXPECT_EQ(::read(done[0], &result, 1), 1);
    return static_cast<int>(result);
  };

  EXPECT_EQ(publish('a'), 0) << "the refusals come after the write";
  EXPECT_EQ(WaitFor(*m, "plan_entries", 300), 300u) << m->Stats().dump();
  EXPECT_EQ(m->Stats()["plans_published"], 1);
  EXPECT_EQ(m->Stats()["pattern"], "published");
  // The plan file's summary counts them (readable in "open" mode only: see
  // APublishersNextPlanReusesItsPreviousChecks).
  const bool summary_readable = std::string(GetParam()) == "open";
  if (summary_readable) {
    EXPECT_NE(ReadFile(mnt_ / ".epochfs" / "plan").find("3 entries left out after publication"),
              std::string::npos)
        << ReadFile(mnt_ / ".epochfs" / "plan");
  }
  EXPECT_GE(WaitFor(*m, "prefetched", 257), 257u);
  auto before = m->Stats();
  for (const auto& name : names) {
    ASSERT_EQ(ReadFile(mnt_ / name).size(), 64u * 1024) << name;
    std::this_thread::sleep_for(std::chrono::microseconds(300));  // "compute"
  }
  WaitFor(*m, "plan_position", 299);
  auto after = m->Stats();
  // Readahead follows the plan (in a shuffled order nothing would be ahead): nearly every
  // file was there before its read. Not all: readahead keeps a window of 256 files ahead
  // and refills it as the reader goes, and on a loaded 2-core machine (two busy loops
  // beside it) the reader overtook it for up to 27 of the 300 files.
  EXPECT_GE(after["prefetch_hits"].get<uint64_t>(), 265u) << after.dump();
  EXPECT_LE(after["misses"].get<uint64_t>() - before["misses"].get<uint64_t>(), 35u)
      << after.dump();

  // Two plans in a row, the first of files checked after publication: its checks,
  // wherever they are, are dropped, and nothing of it joins the second.
  EXPECT_EQ(publish('b'), 0);
  EXPECT_EQ(WaitFor(*m, "plans_published", 3), 3u);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(m->Stats()["plan_entries"], 100) << m->Stats().dump();
  if (summary_readable) {
    EXPECT_NE(ReadFile(mnt_ / ".epochfs" / "plan").find("0 entries being checked"),
              std::string::npos)
        << ReadFile(mnt_ / ".epochfs" / "plan");
  }

  ::close(go[1]);
  ::close(done[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST_P(PrefetchTest, SequentialEpochAfterRestartIsReadAheadIntoRam) {
  auto names = MakeFiles(500, 1, 32 * 1024);
  std::sort(names.begin(), names.end());
  {
    auto m = MountIt();
    ASSERT_TRUE(m->ok());
    for (const auto& name : names) ReadFile(mnt_ / name);  // fills the SSD tier
    ASSERT_TRUE(m->Unmount());
  }
  // Restarted: the SSD tier is warm, RAM and the kernel's page cache are cold.
  auto m = MountIt();
  ASSERT_TRUE(m->ok());
  for (const auto& name : names) {
    ASSERT_EQ(ReadFile(mnt_ / name).size(), 32u * 1024);
    std::this_thread::sleep_for(std::chrono::microseconds(500));  // "compute"
  }
  auto s = m->Stats();
  // Sorted order; "replay" too if the first mount's order was recorded as an epoch.
  EXPECT_TRUE(s["pattern"] == "sequential" || s["pattern"] == "replay") << s.dump();
  EXPECT_EQ(s["source_reads"], 0) << s.dump();
  // The classifier needs 128 files to be sure; after that readahead should stay ahead.
  // Its files are RAM hits, or never reach the daemon at all: pushed into the kernel's
  // page cache (the daemon lists the recorded folders at a restart, so the kernel knows
  // them), they are read with no READ.
  EXPECT_GE(s["prefetch_hits"].get<uint64_t>(), 250u) << s.dump();
  EXPECT_GE(s["ram_hits"].get<uint64_t>() + s["pushed_files"].get<uint64_t>(), 250u) << s.dump();
  EXPECT_LE(s["ssd_hits"].get<uint64_t>(), 150u) << s.dump();
  EXPECT_GT(s["prefetch_from_ssd"].get<uint64_t>(), 0u) << s.dump();
  EXPECT_EQ(s["prefetch_pacing"], true) << s.dump();  // the default
  EXPECT_GT(s["prefetch_pace_reads_per_s"].get<double>(), 0.0) << s.dump();
}

// --prefetch 0: the "without" side of the readahead benchmark. Nothing is read ahead,
// not even the SSD tier's read-around, so every read of the restarted mount is an SSD
// hit; the epoch is still tracked.
TEST_P(PrefetchTest, PrefetchZeroReadsNothingAhead) {
  auto names = MakeFiles(300, 1, 32 * 1024);
  std::sort(names.begin(), names.end());
  {
    auto m = MountIt();
    ASSERT_TRUE(m->ok());
    for (const auto& name : names) ReadFile(mnt_ / name);
    ASSERT_TRUE(m->Unmount());
  }
  auto m = MountIt({"--prefetch", "0"});
  ASSERT_TRUE(m->ok());
  for (const auto& name : names) ASSERT_EQ(ReadFile(mnt_ / name).size(), 32u * 1024);
  auto s = m->Stats();
  EXPECT_EQ(s["prefetch_threads"], 0) << s.dump();
  EXPECT_EQ(s["prefetch_pace_reads_per_s"], 0) << s.dump();  // nothing to pace
  EXPECT_EQ(s["prefetched"], 0) << s.dump();
  EXPECT_EQ(s["prefetch_from_ssd"], 0) << s.dump();
  EXPECT_EQ(s["ssd_read_around"], 0) << s.dump();
  EXPECT_EQ(s["ssd_hits"], names.size()) << s.dump();
  EXPECT_EQ(s["source_reads"], 0) << s.dump();
  EXPECT_EQ(s["epoch_accesses"], names.size()) << s.dump();
}

// --prefetch-iops: readahead from the source stays within the budget; demand reads
// are not limited (the epoch completes with every byte right).
TEST_P(PrefetchTest, ReadaheadFromTheSourceStaysWithinItsBudget) {
  auto names = MakeFiles(400, 4, 16 * 1024);
  std::sort(names.begin(), names.end());
  auto m = MountIt({"--prefetch-iops", "40", "--disk", "0"});
  ASSERT_TRUE(m->ok());
  const auto start = std::chrono::steady_clock::now();
  for (const auto& name : names) {
    ASSERT_EQ(ReadFile(mnt_ / name), RandomBytes(16 * 1024, std::stoi(name.substr(4, 5))));
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // "compute": ~1 s in all
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  auto s = m->Stats();
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(s["prefetch_iops_limit"], 40) << s.dump();
  // A burst of at most 4 (20 ms worth, at least 1), then 40/s, plus the files in flight.
  EXPECT_LE(s["prefetch_source_reads"].get<double>(), 4 + 40 * elapsed + 4) << s.dump();
  // It read past the burst and had to wait (the sequential epoch offered ~270 files).
  EXPECT_GE(s["prefetch_source_reads"].get<uint64_t>(), 10u) << s.dump();
  EXPECT_GT(s["prefetch_budget_wait_ms"].get<uint64_t>(), 0u) << s.dump();
}

// A loader publishes its next plan as soon as it has opened the last file of an epoch.
// Those opens are the old epoch's, though the access watcher may read them a few
// milliseconds after the plan arrived ("notify" mode): counted in the new epoch, a later
// read of the same file there ended that epoch early and dropped its plan. Every epoch
// is the plan's, whole.
TEST_P(PrefetchTest, OpensJustBeforeANewPlanBelongToTheOldEpoch) {
  const auto names = MakeFiles(120, 4, 4096);
  auto m = MountIt();
  ASSERT_TRUE(m->ok());
  uint64_t epoch = m->Stats()["epoch"].get<uint64_t>();
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    auto order = names;
    std::shuffle(order.begin(), order.end(), std::mt19937_64(seed));
    ASSERT_EQ(WritePlan(mnt_, PlanText(order)), 0);
    // Read in order; the last 16 opened in a burst, as a loader's last batch is, and
    // the next plan written right after (the next round).
    for (size_t i = 0; i + 16 < order.size(); ++i) ASSERT_EQ(ReadFile(mnt_ / order[i]).size(), 4096u);
    std::vector<int> fds;
    for (size_t i = order.size() - 16; i < order.size(); ++i) {
      fds.push_back(::open((mnt_ / order[i]).c_str(), O_RDONLY | O_CLOEXEC));
    }
    for (int fd : fds) ::close(fd);
    const auto s = m->Stats();
    EXPECT_EQ(s["epoch"].get<uint64_t>(), epoch + 1) << "seed " << seed << ": " << s.dump();
    EXPECT_EQ(s["plan_entries"], 120) << "seed " << seed << ": " << s.dump();
    epoch = s["epoch"].get<uint64_t>();
  }
}

// A reader that opens a file right after the kernel looked up its folder (the first
// open in each folder of a first epoch) opens it before the access watcher has marked
// the folder: no fanotify event. Its READ must count instead, and only then: each file
// read once is one access of the epoch, never none and never two.
TEST_P(PrefetchTest, TheFirstOpenInAFolderJustLookedUpIsAnAccess) {
  const auto names = MakeFiles(60, 60, 4096);  // one file per folder
  auto m = MountIt();
  ASSERT_TRUE(m->ok());
  const auto start = m->Stats();
  const uint64_t before = start["epoch_accesses"].get<uint64_t>();
  for (const auto& name : names) ASSERT_EQ(ReadFile(mnt_ / name).size(), 4096u) << name;
  const uint64_t accesses = WaitFor(*m, "epoch_accesses", before + names.size());
  const auto s = m->Stats();
  EXPECT_EQ(accesses, before + names.size()) << s.dump();
  EXPECT_EQ(s["epoch"], start["epoch"]) << s.dump();  // no access counted twice
  if (GetParam() == "notify") {
    // Seen by the watcher, each folder marked: not by READs past a wait that ran out.
    EXPECT_EQ(s["access_opens"].get<uint64_t>(), names.size()) << s.dump();
    EXPECT_GE(s["access_marks"].get<uint64_t>(), names.size()) << s.dump();
  }
  // Each file again, its folder marked by now: the opens are seen, the READs are not
  // counted again (the page cache may still hold the files: no READ at all then).
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const uint64_t epoch = m->Stats()["epoch"].get<uint64_t>();
  for (const auto& name : names) ASSERT_EQ(ReadFile(mnt_ / name).size(), 4096u) << name;
  WaitFor(*m, "epoch", epoch + 1);
  const auto after = m->Stats();
  EXPECT_EQ(after["epoch"].get<uint64_t>(), epoch + 1) << after.dump();
  EXPECT_EQ(WaitFor(*m, "epoch_accesses", names.size()), names.size()) << m->Stats().dump();
}

// Two ranks on one mount: each process's plan is its own and both are live at once (the
// mount merges them); each is dropped when its process exits.
TEST_P(PrefetchTest, EachProcessHasItsOwnPlanUntilItExits) {
  const auto names = MakeFiles(40, 2, 4096);
  auto m = MountIt();
  ASSERT_TRUE(m->ok());
  // A rank: publishes its half of the files, then waits until `release` is closed.
  std::vector<int> parent_ends;  // a rank must not hold another's write end open
  auto rank = [&](size_t first, int release_fd[2]) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(release_fd[1]);
      for (int fd : parent_ends) ::close(fd);
      std::vector<std::string> mine(names.begin() + first, names.begin() + first + 20);
      const int err = WritePlan(mnt_, PlanText(mine));
      char c;
      (void)!::read(release_fd[0], &c, 1);  // until the parent closes its end
      ::_exit(err == 0 ? 0 : 1);
    }
    ::close(release_fd[0]);
    parent_ends.push_back(release_fd[1]);
    return pid;
  };
  int release_a[2], release_b[2];
  ASSERT_EQ(::pipe(release_a), 0);
  ASSERT_EQ(::pipe(release_b), 0);
  const pid_t a = rank(0, release_a);
  EXPECT_EQ(WaitFor(*m, "plans", 1), 1u) << m->Stats().dump();
  const pid_t b = rank(20, release_b);
  EXPECT_EQ(WaitFor(*m, "plans", 2), 2u) << m->Stats().dump();
  auto s = m->Stats();
  EXPECT_EQ(s["plan_entries"], 40) << s.dump();
  EXPECT_EQ(s["plans_published"], 2) << s.dump();
  // Rank a's plan is followed as well as b's: reading a's files reads ahead a's next.
  for (size_t i = 0; i < 5; ++i) ReadFile(mnt_ / names[i]);
  EXPECT_GE(WaitFor(*m, "prefetched", 8), 8u) << m->Stats().dump();

  auto exit_of = [](pid_t pid, int release_write) {
    ::close(release_write);
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  EXPECT_EQ(exit_of(a, release_a[1]), 0);
  // Dropped within the reaper's second: the mount counts down to b's plan alone.
  uint64_t plans = 2;
  for (int i = 0; i < 100 && plans != 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    plans = m->Stats()["plans"].get<uint64_t>();
  }
  s = m->Stats();
  EXPECT_EQ(plans, 1u) << s.dump();
  EXPECT_EQ(s["plan_entries"], 20) << s.dump();
  EXPECT_EQ(exit_of(b, release_b[1]), 0);
  for (int i = 0; i < 100 && plans != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    plans = m->Stats()["plans"].get<uint64_t>();
  }
  EXPECT_EQ(plans, 0u) << m->Stats().dump();
}

// A publisher's next plan takes the entries its previous plan had from that plan (each
// is a few stats of the source, round trips on a network filesystem): new entries are
// checked as always, and a writer that is now another user is checked in full.
TEST_P(PrefetchTest, APublishersNextPlanReusesItsPreviousChecks) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to write as another user";
  const auto names = MakeFiles(200, 2, 1000);
  WriteFile(src_ / "secret.bin", "top secret");
  AgeFile(src_ / "secret.bin", 3600);
  fsys::permissions(src_ / "secret.bin", fsys::perms::owner_read | fsys::perms::owner_write);
  fsys::permissions(dir_.path(), fsys::perms::owner_all | fsys::perms::group_exec |
                                     fsys::perms::others_exec);
  auto m = MountIt({"--allow-other"});
  ASSERT_TRUE(m->ok());
  // The plan file's summary (read with direct I/O: "open" mode only; in "notify" mode
  // the file has size 0 and reads return nothing).
  const bool summary_readable = std::string(GetParam()) == "open";
  auto reused = [&] {
    if (!summary_readable) return uint64_t{0};
    const std::string summary = ReadFile(mnt_ / ".epochfs" / "plan");
    const size_t at = summary.find(" entries reused");
    if (at == std::string::npos) return uint64_t{UINT64_MAX};
    const size_t start = summary.rfind(' ', at - 1) + 1;
    return static_cast<uint64_t>(std::stoull(summary.substr(start, at - start)));
  };
  std::vector<std::string> first(names.begin(), names.begin() + 150);
  ASSERT_EQ(WritePlan(mnt_, PlanText(first)), 0);
  EXPECT_EQ(reused(), 0u);
  std::vector<std::string> next(names.begin() + 50, names.end());  // 100 known, 50 new
  ASSERT_EQ(WritePlan(mnt_, PlanText(next)), 0);
  if (summary_readable) {
    EXPECT_EQ(reused(), 100u);
  }
  EXPECT_EQ(m->Stats()["plan_entries"], 150);
  next.push_back("no/such.bin");  // a new entry is still checked
  EXPECT_EQ(WritePlan(mnt_, PlanText(next)), EINVAL);

  // One process, root first, then another user: the second plan is checked in full.
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (WritePlan(mnt_, PlanText({names[0], "secret.bin"})) != 0) ::_exit(101);
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(100);
    ::_exit(WritePlan(mnt_, PlanText({names[0], "secret.bin"})));
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), EACCES);
}

// A job restarted at once: the plan of a process that has exited is not merged with the
// next process's plan, even before the reaper's next round (once a second). The new
// plan starts an epoch of its own.
TEST_P(PrefetchTest, APlanOfAProcessGoneIsNotMergedWithTheNextOne) {
  const auto names = MakeFiles(40, 2, 4096);
  auto m = MountIt();
  ASSERT_TRUE(m->ok());
  auto publish_and_exit = [&](size_t first) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      std::vector<std::string> mine(names.begin() + first, names.begin() + first + 20);
      ::_exit(WritePlan(mnt_, PlanText(mine)) == 0 ? 0 : 1);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  ASSERT_EQ(publish_and_exit(0), 0);
  const uint64_t epoch = m->Stats()["epoch"].get<uint64_t>();
  ASSERT_EQ(publish_and_exit(20), 0);  // at once: the first one's plan is not reaped yet
  const auto s = m->Stats();
  EXPECT_EQ(s["plans"], 1) << s.dump();
  EXPECT_EQ(s["plan_entries"], 20) << s.dump();
  EXPECT_GT(s["epoch"].get<uint64_t>(), epoch) << s.dump();
}

INSTANTIATE_TEST_SUITE_P(Consistency, PrefetchTest, ::testing::Values("notify", "open"));

// Streaming the SSD tier. A shuffled data set is read twice, the daemon
// restarts, and the restarted daemon streams the SSD tier into RAM from mount on.
class StreamTest : public PrefetchTest {
 protected:
  static constexpr size_t kSize = 48 * 1024;

  // Reads every file once, in a shuffled order; checks every byte. `after_read(i)` runs
  // after the i-th file; a fatal failure in it ends the epoch (the caller checks
  // HasFatalFailure()).
  void ShuffledEpoch(std::vector<std::string> names, uint64_t seed,
                     const std::map<std::string, std::string>& changed = {},
                     const std::function<void(size_t)>& after_read = {}) {
    std::shuffle(names.begin(), names.end(), std::mt19937_64(seed));
    for (size_t i = 0; i < names.size(); ++i) {
      const std::string& name = names[i];
      const auto it = changed.find(name);
      const std::string want = it != changed.end()
                                   ? it->second
                                   : RandomBytes(kSize, std::stoi(name.substr(name.find('f') + 1, 5)));
      ASSERT_EQ(ReadFile(mnt_ / name), want) << name;
      if (after_read) {
        after_read(i);
        if (HasFatalFailure()) return;
      }
    }
  }
  // Fills the SSD tier with two shuffled epochs, then unmounts (the record says shuffled).
  std::vector<std::string> FillAndUnmount(int count, const std::vector<std::string>& extra) {
    auto names = MakeFiles(count, 4, kSize);
    auto m = MountIt(extra);
    EXPECT_TRUE(m->ok());
    ShuffledEpoch(names, 1);
    ShuffledEpoch(names, 2);
    EXPECT_EQ(m->Stats()["pattern"], "shuffled") << m->Stats().dump();
    EXPECT_TRUE(m->Unmount());
    return names;
  }
  // Flips one bit in the middle of the (only) pack file: one entry fails its checksum.
  bool CorruptTheMiddleOfThePack() const {
    const fsys::path pack = OnlyPack(cache_);
    if (pack.empty()) return false;
    std::fstream f(pack, std::ios::in | std::ios::out | std::ios::binary);
    const auto middle = static_cast<std::streamoff>(fsys::file_size(pack) / 2);
    f.seekg(middle);
    char c;
    f.get(c);
    f.seekp(middle);
    f.put(static_cast<char>(c ^ 0x10));
    return true;
  }
  static fsys::path OnlyPack(const fsys::path& cache) {
    std::vector<fsys::path> packs;
    for (const auto& e : fsys::directory_iterator(cache / "packs")) packs.push_back(e.path());
    std::sort(packs.begin(), packs.end());
    return packs.empty() ? fsys::path() : packs.front();
  }
};

// After a restart the record's pattern starts streaming at mount, before any read; a
// file changed while the daemon was down is not streamed (stale) and reads its new bytes.
TEST_P(StreamTest, RestartStreamsFromTheEpochRecordAndNeverAChangedFile) {
  // 600 x 48 KB fit the RAM tier of --ram 96M (44 MiB), not that of 64M (24 MiB).
  const auto names = FillAndUnmount(600, {"--ram", "96M"});
  const std::string fresh = RandomBytes(kSize, 999'999);
  WriteFile(src_ / names[7], fresh);
  AgeFile(src_ / names[7], 60);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto m = MountIt({"--ram", "96M"});
  ASSERT_TRUE(m->ok());
  EXPECT_GE(WaitFor(*m, "ssd_streamed", 599), 599u) << m->Stats().dump();
  auto s = m->Stats();
  EXPECT_EQ(s["pattern"], "shuffled") << s.dump();  // predicted from the record
  EXPECT_EQ(s["epoch_accesses"], 0) << s.dump();    // nothing read yet
  EXPECT_EQ(s["stale_entries"], 1) << s.dump();     // the changed file
  EXPECT_LT(s["ssd_stream_ios"].get<uint64_t>(), 60u) << s.dump();  // ~29 MB in large reads
  ShuffledEpoch(names, 3, {{names[7], fresh}});
  s = m->Stats();
  // Served from RAM, or pushed on into the kernel's page cache (the daemon lists the
  // recorded folders at a restart, so the kernel knows the files): never from the SSD.
  EXPECT_GE(s["ram_hits"].get<uint64_t>() + s["pushed_files"].get<uint64_t>(), 599u) << s.dump();
  // Except the holes this VM's reclaim made in pushed files (kernel_hole_reads): their
  // READs find no RAM copy of a file pushed from the stream.
  EXPECT_LE(s["ssd_hits"].get<uint64_t>(), s["kernel_hole_reads"].get<uint64_t>()) << s.dump();
  EXPECT_EQ(s["source_reads"], 1) << s.dump();  // only the changed file
}

// After a restart the recorded files' source metadata is brought in at mount and held
// until the kernel looks each file up (fs/metadata_warmup.h). A file deleted or replaced
// while the daemon was down is not served from anything the warm-up saw: its new bytes
// are read, and a deleted file is gone.
TEST_P(StreamTest, RestartWarmsTheRecordedMetadataUntilLookedUp) {
  auto names = FillAndUnmount(200, {});
  const std::string fresh = RandomBytes(kSize, 888'888);
  WriteFile(src_ / names[3], fresh);
  AgeFile(src_ / names[3], 60);
  fsys::remove(src_ / names[4]);
  auto m = MountIt();
  ASSERT_TRUE(m->ok());
  EXPECT_GE(WaitFor(*m, "metadata_warmed", 199), 199u) << m->Stats().dump();
  auto s = m->Stats();
  EXPECT_EQ(s["metadata_warmed"], 199) << s.dump();  // the deleted file could not be opened
  // Pinned, or looked up already: the daemon lists the recorded folders at a restart
  // (kernel_cache/kernel_listing.h), and a node takes its file's pin over.
  EXPECT_LE(s["metadata_pins"].get<uint64_t>(), 199u) << s.dump();
  // The warm-up reads metadata only. The one source read there may be is the
  // readahead's, of the file rewritten while the daemon was down (its SSD entry is stale).
  EXPECT_EQ(s["misses"], 0) << s.dump();
  EXPECT_LE(s["source_reads"].get<uint64_t>(), 1u) << s.dump();
  EXPECT_FALSE(fsys::exists(mnt_ / names[4]));
  names.erase(names.begin() + 4);
  ShuffledEpoch(names, 3, {{names[3], fresh}});
  s = m->Stats();
  EXPECT_EQ(s["metadata_pins"], 0) << s.dump();  // every lookup took its file's pin over
  EXPECT_FALSE(s["metadata_warmup"].get<bool>()) << s.dump();
}

// A damaged entry inside a streamed range is dropped, counted and read from the source.
TEST_P(StreamTest, CorruptEntryInAStreamedRangeIsReadFromTheSource) {
  const auto names = FillAndUnmount(300, {});
  ASSERT_TRUE(CorruptTheMiddleOfThePack());
  auto m = MountIt();
  ASSERT_TRUE(m->ok());
  WaitFor(*m, "ssd_streamed", 299);
  ShuffledEpoch(names, 3);
  auto s = m->Stats();
  EXPECT_EQ(s["corrupt_entries"], 1) << s.dump();
  EXPECT_EQ(s["source_reads"], 1) << s.dump();
}

// With a RAM tier far smaller than the data set, streaming keeps it full but never over
// its budget, and the daemon is gone soon after the unmount (nothing left running).
TEST_P(StreamTest, StreamingStaysWithinTheRamBudgetAndStopsAtUnmount) {
  const auto names = FillAndUnmount(1000, {"--ram", "48M"});  // 48 MB of files
  auto m = MountIt({"--ram", "48M"});
  ASSERT_TRUE(m->ok());
  auto s = m->Stats();
  // The tier's budget moves with what the rest of the daemon leaves of --ram
  // (daemon/ram_balancer.h), but never to all of it; each snapshot has the tier's bytes
  // and its budget as of one moment.
  ASSERT_LT(s["ram_tier_budget_bytes"].get<uint64_t>(), 48u << 20);
  for (int i = 0; i < 20; ++i) {
    s = m->Stats();
    ASSERT_LE(s["ram_bytes"].get<uint64_t>(), s["ram_tier_budget_bytes"].get<uint64_t>()) << s.dump();
    ASSERT_LT(s["ram_tier_budget_bytes"].get<uint64_t>(), 48u << 20) << s.dump();
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  EXPECT_GT(s["ssd_streamed"].get<uint64_t>(), 0u) << s.dump();
  auto order = names;
  std::shuffle(order.begin(), order.end(), std::mt19937_64(5));
  for (size_t i = 0; i < order.size(); ++i) {
    ASSERT_EQ(ReadFile(mnt_ / order[i]).size(), kSize);
    if (i % 50 == 0) {
      s = m->Stats();
      ASSERT_LE(s["ram_bytes"].get<uint64_t>(), s["ram_tier_budget_bytes"].get<uint64_t>()) << s.dump();
    }
  }
  s = m->Stats();
  EXPECT_GT(s["ssd_streamed"].get<uint64_t>(), 300u) << s.dump();  // refilled as read
  EXPECT_EQ(s["source_reads"], 0) << s.dump();
  const int pid = s["pid"].get<int>();
  ASSERT_TRUE(m->Unmount());
  EXPECT_TRUE(ExitsWithin(pid, std::chrono::seconds(5)))
      << "daemon " << pid << " still running after unmount";
}

INSTANTIATE_TEST_SUITE_P(Consistency, StreamTest, ::testing::Values("notify", "open"));

// Pushing into the kernel's page cache (kernel_cache/page_cache_pusher.h). After a restart the
// record's files stream from the SSD tier; once the reader lists the data set (as
// torchvision's DatasetFolder does), the kernel knows their inodes and readahead
// stores their bytes in its page cache, where reading them sends no READ.
class PushTest : public StreamTest {
 protected:
  // The stats of the mount on mnt_, for tests that mount through MountInside (no Mount).
  nlohmann::json MountStats() const {
    return nlohmann::json::parse(ReadFile(mnt_ / ".epochfs" / "stats"));
  }
  // Mounts with the daemon born inside `group` (a memory limit: one copy, pushed and
  // READ pages charged to --ram `ram`).
  CommandResult MountInside(const MemoryCgroup& group, const std::string& ram) {
    return epochfs::testing::Run(
        {"sh", "-c", group.Enter() + EPOCHFS_BINARY + " mount " + src_.string() + " " +
                         mnt_.string() + " --cache-dir " + cache_.string() + " --ram " + ram +
                         " --consistency " + GetParam()});
  }
  // Lists every folder (READDIRPLUS: the kernel learns each file's inode).
  void ListAll() {
    for (const auto& dir : fsys::directory_iterator(mnt_)) {
      if (!dir.is_directory() || dir.path().filename() == ".epochfs") continue;
      for (const auto& e : fsys::directory_iterator(dir.path())) (void)e;
    }
  }
  // The OPENDIRs that were not the daemon's own listings (AttrRefresh), waiting up to 2 s
  // for them to be `expected`: a listing under way has its OPENDIR counted at once and
  // itself only when it ends.
  static uint64_t ReaderOpendirs(const Mount& m, uint64_t expected) {
    uint64_t opendirs = 0;
    for (int i = 0; i < 200; ++i) {
      const auto s = m.Stats();
      opendirs = s["requests"]["opendir"].get<uint64_t>() - s["attr_refresh_listings"].get<uint64_t>();
      if (opendirs == expected) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return opendirs;
  }
  static std::string PushSummary(const Mount& m) {
    std::string out;
    const auto s = m.Stats();
    for (const auto& [key, value] : s.items()) {
      if (key.find("push") != std::string::npos || key.find("kernel_page") != std::string::npos ||
          key.find("access") != std::string::npos || key == "epoch_accesses" ||
          key == "ssd_streamed" || key == "pattern" || key == "requests") {
        out += key + "=" + value.dump() + " ";
      }
    }
    return out;
  }
  static uint64_t Requests(const nlohmann::json& s, const char* kind) {
    return s["requests"][kind].get<uint64_t>();
  }
  // Reads of the data set's files that reached the daemon (hits and misses of every
  // tier; the stats file's own READs are not among them).
  // Rewrites source file `name` underneath the mount with `bytes`, and records them in
  // `changed`. `old_mtime`: an hour-old mtime put back, so that only ctime tells.
  void ChangeUnderneath(std::map<std::string, std::string>& changed, const std::string& name,
                        std::string bytes, bool old_mtime = false) {
    WriteFile(src_ / name, bytes);
    if (old_mtime) AgeFile(src_ / name, 3600);
    changed[name] = std::move(bytes);
  }
  static uint64_t HoleReads(const nlohmann::json& s) {
    return s["kernel_hole_reads"].get<uint64_t>();
  }
  static uint64_t NotHeldOpens(const nlohmann::json& s) {
    return s["access_opens_not_held"].get<uint64_t>();
  }
  static uint64_t FileReads(const nlohmann::json& s) {
    return s["ram_hits"].get<uint64_t>() + s["ssd_hits"].get<uint64_t>() +
           s["misses"].get<uint64_t>();
  }
  // A shuffled epoch (`seed`), then the mount's stats once the access watcher has read
  // the epoch's last events (it reads them in batches): the epochs' events stay apart.
  nlohmann::json EpochThenStats(const Mount& m, const std::vector<std::string>& names,
                                uint64_t seed) {
    ShuffledEpoch(names, seed);
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    return m.Stats();
  }
  // Why an epoch of 300 files the kernel held (stats `quiet`, after `filled`) was not
  // the quiet epoch a test of the watcher's pause needs; nullopt if it was. Holes filled
  // do not count, and one file in 256 (here 1) READ or read ahead is noise. Files whose
  // READ replies the epoch before handled out of order (busy CPUs) are not known whole:
  // their opens rightly keep a first quarter from counting as quiet.
  static std::optional<std::string> NotQuiet(const nlohmann::json& filled,
                                             const nlohmann::json& quiet) {
    if (FileReads(quiet) - FileReads(filled) - (HoleReads(quiet) - HoleReads(filled)) +
            quiet["prefetched"].get<uint64_t>() - filled["prefetched"].get<uint64_t>() > 1) {
      return "the kernel let files go during the quiet epoch: " + quiet.dump();
    }
    if (NotHeldOpens(quiet) - NotHeldOpens(filled) > 1) {
      return "opens of files not known held (READs out of order): " + quiet.dump();
    }
    return std::nullopt;
  }
  // A mount of 300 files read twice: the first epoch READ every file, the second needed
  // nothing and paused the access watcher within itself. Why not, if it did not: "open"
  // mode (no watcher), a second epoch that was not quiet, no pause.
  struct PausedWatcher {
    std::vector<std::string> names;
    std::unique_ptr<Mount> m;
    nlohmann::json filled, quiet;  // the stats after each epoch
  };
  std::optional<std::string> PauseInAQuietSecondEpoch(PausedWatcher& w) {
    if (GetParam() == std::string("open")) {
      return "\"open\" mode has no access watcher: every open reaches the daemon";
    }
    w.names = MakeFiles(300, 4, kSize);
    w.m = MountIt();
    if (!w.m->ok()) {
      ADD_FAILURE() << "mount failed";
      return "mount failed";
    }
    w.filled = EpochThenStats(*w.m, w.names, 1);  // every file READ from the source
    w.quiet = EpochThenStats(*w.m, w.names, 2);  // in the page cache: paused within it
    if (const auto why = NotQuiet(w.filled, w.quiet)) return why;
    if (w.quiet["access_paused"] != 1) return "not paused in the quiet epoch: " + w.quiet.dump();
    return std::nullopt;
  }
  // Drops the first page of `name` from the kernel's page cache, as reclaim might.
  void DropFirstPage(const std::string& name) {
    const UniqueFd fd(::open((mnt_ / name).c_str(), O_RDONLY | O_CLOEXEC));
    ASSERT_TRUE(fd.valid()) << name;
    ASSERT_EQ(::posix_fadvise(fd.get(), 0, ::sysconf(_SC_PAGESIZE), POSIX_FADV_DONTNEED), 0);
  }
  // Why the READs of `dropped` first pages since `before` did not resume the watcher
  // (stats `after`): the kernel kept some, or they were not enough.
  static std::optional<std::string> NotResumed(const nlohmann::json& before,
                                               const nlohmann::json& after, uint64_t dropped) {
    if (FileReads(after) - FileReads(before) < dropped) {
      return "the kernel kept some first pages: " + after.dump();
    }
    if (after["access_paused"] != 0) return "not resumed: " + after.dump();
    return std::nullopt;
  }
  // Why an epoch that should have needed nothing (stats `after`, since `before`) did not.
  static std::optional<std::string> NotQuietAgain(const nlohmann::json& before,
                                                  const nlohmann::json& after) {
    if (FileReads(after) - FileReads(before) > 1) {
      return "the kernel let files go during the epoch: " + after.dump();
    }
    return std::nullopt;
  }
  // Bytes of the files' pages in the kernel's page cache (mincore through the mount).
  uint64_t ResidentBytes(const std::vector<std::string>& names) {
    const long page = ::sysconf(_SC_PAGESIZE);
    uint64_t resident = 0;
    for (const auto& name : names) {
      const int fd = ::open((mnt_ / name).c_str(), O_RDONLY);
      if (fd < 0) continue;
      struct ::stat st {};
      ::fstat(fd, &st);
      if (st.st_size > 0) {
        void* map = ::mmap(nullptr, st.st_size, PROT_READ, MAP_SHARED, fd, 0);
        if (map != MAP_FAILED) {
          std::vector<unsigned char> pages((st.st_size + page - 1) / page);
          if (::mincore(map, st.st_size, pages.data()) == 0) {
            for (unsigned char p : pages) resident += (p & 1) ? page : 0;
          }
          ::munmap(map, st.st_size);
        }
      }
      ::close(fd);
    }
    return resident;
  }
};

// Pushed files are read with no READ at all; the prefetcher still sees every open (the
// access watcher); and a file changed underneath after its bytes were pushed is read
// with its new bytes, in both modes: same size with the old mtime put back, larger,
// and emptied.
TEST_P(PushTest, PushedFilesCostNoReadAndAChangeUnderneathIsNeverServedStale) {
  const auto names = FillAndUnmount(300, {});
  auto m = MountIt();
  ASSERT_TRUE(m->ok());
  ListAll();
  EXPECT_GE(WaitFor(*m, "pushed_files", 300), 300u) << PushSummary(*m);
  auto s = m->Stats();
  // "notify": a fanotify watcher sees the opens (marks on the root and 4 folders);
  // "open": each open reaches the daemon as an OPEN, which is the access.
  if (GetParam() == std::string("notify")) {
    ASSERT_GE(s["access_marks"].get<uint64_t>(), 5u) << s.dump();
  } else {
    EXPECT_EQ(s["access_marks"], 0) << s.dump();
  }
  EXPECT_LE(s["kernel_page_bytes"].get<uint64_t>(), s["ram_bytes"].get<uint64_t>());
  const uint64_t reads_before = FileReads(s);

  std::map<std::string, std::string> changed;
  ChangeUnderneath(changed, names[10], RandomBytes(kSize, 700'010), /*old_mtime=*/true);
  ChangeUnderneath(changed, names[20], RandomBytes(kSize + 5000, 700'020));
  ChangeUnderneath(changed, names[30], "");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the watcher's latency

  ShuffledEpoch(names, 4, changed);
  WaitFor(*m, "epoch_accesses", 300);  // the watcher reads its events a moment later
  s = m->Stats();
  // Only the changed files (a few reads each) reached the daemon.
  // Two epochs of 300 files: without pushing, 600 and more. The changed files take a
  // few; now and then some pushed files are read through the daemon all the same (their
  // pages gone from the kernel for a reason not found yet: docs/architecture.md,
  // "Pushed pages"; how often: docs/benchmarks.md, "Figures behind design choices"),
  // hence the bound.
  EXPECT_LE(FileReads(s) - reads_before, 60u) << s.dump();
  if (GetParam() == std::string("notify")) {
    EXPECT_GE(s["access_opens"].get<uint64_t>(), 300u) << s.dump();
  }
  EXPECT_EQ(s["epoch_accesses"], 300) << s.dump();
  // And again, with the kernel's pages as they are now.
  ShuffledEpoch(names, 5, changed);
}

// A file streamed from the SSD tier whose inode the kernel has goes from the stream's
// buffers straight into its page cache, with no copy in RAM (Cache::StreamFromSsd's
// taker): the kernel's own copy, or under a memory limit a kernel entry of the RAM tier
// made for it, charged to --ram. Such a push has the same checks as one from RAM: a file
// changed underneath after it is read with its new bytes, in both modes. (No epoch
// record: nothing streams at mount, before the listing gave the kernel the inodes; the
// published plan then streams them.)
class StraightFromTheStreamTest : public PushTest {
 protected:
  void PushThenChange(const MemoryCgroup* group) {
    const auto names = FillAndUnmount(300, {});
    fsys::remove_all(cache_ / "epochs");
    std::unique_ptr<Mount> m;
    std::optional<UnmountOnExit> unmount;
    if (group != nullptr) {
      const CommandResult mounted = MountInside(*group, "96M");
      ASSERT_EQ(mounted.exit_code, 0) << mounted.output;
      unmount.emplace(mnt_);
    } else {
      m = MountIt();
      ASSERT_TRUE(m->ok());
    }
    const auto stats = [this] { return MountStats(); };
    ListAll();
    auto order = names;
    std::shuffle(order.begin(), order.end(), std::mt19937_64(11));  // ShuffledEpoch's, seed 11
    ASSERT_EQ(WritePlan(mnt_, PlanText(order)), 0);
    // Readahead goes up to 256 files past the reader.
    for (int i = 0; i < 200 && stats()["pushed_files"].get<uint64_t>() < 250; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    auto s = stats();
    ASSERT_GE(s["pushed_files"].get<uint64_t>(), 250u) << s.dump();
    EXPECT_GE(s["pushed_from_stream"].get<uint64_t>(), 200u) << s.dump();
    if (group != nullptr) {
      // Charged as pushed pages are: kernel entries, within the tier's budget.
      EXPECT_GE(s["kernel_page_entries"].get<uint64_t>(), 200u) << s.dump();
      EXPECT_LE(s["ram_bytes"].get<uint64_t>(), s["ram_tier_budget_bytes"].get<uint64_t>()) << s.dump();
      EXPECT_LE(group->PageCacheBytes(), s["ram_tier_budget_bytes"].get<uint64_t>() + (2u << 20))
          << s.dump();
    } else {
      EXPECT_EQ(s["ssd_streamed"].get<uint64_t>(),
                s["ram_entries"].get<uint64_t>() + s["pushed_from_stream"].get<uint64_t>())
          << "a file taken by the stream was also copied into RAM: " << s.dump();
    }

    std::map<std::string, std::string> changed;
    ChangeUnderneath(changed, order[5], RandomBytes(kSize, 710'005), /*old_mtime=*/true);
    ChangeUnderneath(changed, order[50], RandomBytes(kSize + 5000, 710'050));
    ChangeUnderneath(changed, order[100], "");
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the watcher's latency
    ShuffledEpoch(names, 11, changed);
    if (HasFatalFailure()) return;
    ShuffledEpoch(names, 12, changed);  // and again, with the kernel's pages as they are now
    if (group != nullptr) {
      EXPECT_EQ(group->OomKills(), 0u);
    }
  }
};

TEST_P(StraightFromTheStreamTest, AChangeUnderneathIsNeverReadStale) { PushThenChange(nullptr); }

TEST_P(StraightFromTheStreamTest, UnderAMemoryLimitTheyAreChargedAndAChangeIsNeverReadStale) {
  MemoryCgroup group(1ull << 30);
  if (!group.ok()) GTEST_SKIP() << group.why_not();
  PushThenChange(&group);
}

INSTANTIATE_TEST_SUITE_P(Consistency, StraightFromTheStreamTest, ::testing::Values("notify", "open"));

// A reader that never lists (it opens files by path from a list of its own) gives the
// kernel no inode before each open. After a restart the daemon lists the recorded
// folders itself (kernel_cache/kernel_listing.h), so readahead pushes ahead of that reader too:
// its epoch costs few READs, and every byte is right.
TEST_P(PushTest, AfterARestartAReaderThatNeverListsFindsItsFilesPushed) {
  const auto names = FillAndUnmount(300, {});
  auto m = MountIt();
  ASSERT_TRUE(m->ok());
  EXPECT_GE(WaitFor(*m, "pushed_files", 300), 250u) << PushSummary(*m);
  const auto before = m->Stats();
  ShuffledEpoch(names, 6);  // opens by path: no READDIR from the reader
  WaitFor(*m, "epoch_accesses", 300);
  const auto s = m->Stats();
  EXPECT_LE(FileReads(s) - FileReads(before), 60u) << s.dump();
  // Folders the daemon opened itself (AttrRefresh, after the few READs) are not the
  // reader's.
  const uint64_t opendirs_before = before["requests"]["opendir"].get<uint64_t>() -
                                   before["attr_refresh_listings"].get<uint64_t>();
  EXPECT_EQ(ReaderOpendirs(*m, opendirs_before), opendirs_before)
      << "the reader listed nothing: " << m->Stats().dump();
}

// An epoch served by READs leaves the kernel's attributes of each file it read stale (a
// READ marks the atime), and the next stat() of each, which Python's open() makes, would
// be a GETATTR. The daemon lists a folder again once three quarters of its files were
// read, or a quarter once its reads went quiet (kernel_cache/attr_refresh.h): most stats
// after the epoch cost no GETATTR (here every file was read: at most a quarter of each
// folder can be left). On a read-only mount READs leave the attributes fresh, and
// nothing is listed.
TEST_P(PushTest, AfterAnEpochOfReadsTheNextStatsCostNoGetattr) {
  const auto names = MakeFiles(200, 4, kSize);
  for (const bool read_only : {false, true}) {
    SCOPED_TRACE(read_only ? "read-only" : "read-write");
    std::vector<std::string> extra;
    if (read_only) extra.push_back("--read-only");
    auto m = MountIt(extra);
    ASSERT_TRUE(m->ok());
    ShuffledEpoch(names, 31);  // the first: from the source, mostly by READs
    // Until the listings stop (the last folders are listed once their reads go quiet).
    uint64_t refreshed = 0;
    for (int quiet_polls = 0, i = 0; quiet_polls < 5 && i < 100; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      const uint64_t now = m->Stats()["attr_refresh_files"].get<uint64_t>();
      quiet_polls = now == refreshed ? quiet_polls + 1 : 0;
      refreshed = now;
    }
    const auto before = m->Stats();
    if (!read_only) {
      // The files not pushed were read by READs, which marked them.
      const uint64_t by_reads = names.size() - before["pushed_files"].get<uint64_t>();
      EXPECT_GE(refreshed, by_reads / 2) << before.dump();
    }
    for (const auto& name : names) {
      struct ::stat st;
      ASSERT_EQ(::stat((mnt_ / name).c_str(), &st), 0);
    }
    const auto after = m->Stats();
    EXPECT_LE(Requests(after, "getattr") - Requests(before, "getattr"),
              read_only ? names.size() / 20 : names.size() / 4)
        << after.dump();
    if (read_only) {
      EXPECT_EQ(after["attr_refresh_listings"].get<uint64_t>(), 0u);
    }
    m.reset();
  }
}

// The daemon's own listings (AttrRefresh here; KernelListing after a restart) hold a
// folder open while the kernel reads it. A umount(2) in that moment, as `umount` or
// `fusermount3 -u` make, is not busy (kernel_cache/mount_view.h): it goes through, the
// listing under way is answered to its end, and the daemon flushes and exits as after
// any unmount.
TEST_P(PushTest, AnUnmountWhileTheDaemonListsAFolderIsNotBusy) {
  // One folder of 8,000 files: its listing takes long enough to be caught under way.
  constexpr int kFiles = 8000;
  const auto name = [](int i) { return "big/" + std::to_string(100000 + i) + ".bin"; };
  fsys::create_directories(src_ / "big");
  for (int i = 0; i < kFiles; ++i) WriteFile(src_ / name(i), std::string(64, 'a' + i % 26));
  auto m = MountIt();
  ASSERT_TRUE(m->ok());
  const pid_t pid = m->Stats()["pid"].get<pid_t>();
  const uint64_t dirplus_before = Requests(m->Stats(), "readdirplus");
  // Files read to their end by READs, until the daemon starts listing their folder.
  bool listing = false;
  for (int i = 0; i < 200 && !listing; ++i) {
    ASSERT_EQ(ReadFile(mnt_ / name(i)), std::string(64, 'a' + i % 26));
    for (int poll = 0; poll < 20 && !listing && i >= 15; ++poll) {
      const auto s = m->Stats();
      listing = Requests(s, "readdirplus") > dirplus_before && s["attr_refresh_listings"] == 0;
      if (!listing) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  ASSERT_TRUE(listing) << "the daemon never began listing the folder: " << m->Stats().dump();
  ASSERT_EQ(::umount2(mnt_.c_str(), 0), 0) << "umount(2) during the daemon's listing: "
                                            << std::strerror(errno);
  m->UnmountedByTheTest();
  for (int i = 0; i < 3000 && ::kill(pid, 0) == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_NE(::kill(pid, 0), 0) << "the daemon still runs 30 s after its unmount";
  // Its cache is whole: mounted again, every file reads right.
  auto again = MountIt();
  ASSERT_TRUE(again->ok());
  for (int i = 0; i < kFiles; i += 97) {
    ASSERT_EQ(ReadFile(mnt_ / name(i)), std::string(64, 'a' + i % 26)) << name(i);
  }
}

// A reader that never lists, on a fresh mount, with its order published: readahead
// brings the files into RAM before the kernel knows their inodes (a push finds none).
// In "open" mode the OPEN that needs each file pushes it first, and the read costs no
// READ. ("notify" mode has no OPEN to do it in: the kernel opens without asking, and
// the READs are served from RAM.) A file changed underneath after it was read ahead is
// read with its new bytes, in both modes.
TEST_P(PushTest, TheOpenPushesAFileReadAheadBeforeTheKernelKnewIt) {
  const auto names = MakeFiles(200, 4, kSize);
  auto m = MountIt();
  ASSERT_TRUE(m->ok());
  auto order = names;
  std::shuffle(order.begin(), order.end(), std::mt19937_64(9));
  WriteFile(mnt_ / ".epochfs" / "plan", PlanText(order));
  EXPECT_GE(WaitFor(*m, "prefetched", 200), 200u) << PushSummary(*m);
  auto s = m->Stats();
  ASSERT_EQ(s["pushed_files"], 0) << "the kernel knew no inode yet: " << PushSummary(*m);
  const uint64_t reads_before = FileReads(s);

  std::map<std::string, std::string> changed;
  ChangeUnderneath(changed, order[5], RandomBytes(kSize, 800'005), /*old_mtime=*/true);
  ChangeUnderneath(changed, order[6], RandomBytes(kSize + 3000, 800'006));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the watcher's latency

  ShuffledEpoch(names, 9, changed);  // the plan's order; opens by path, lists nothing
  s = m->Stats();
  if (GetParam() == std::string("open")) {
    EXPECT_GE(s["pushed_at_open"].get<uint64_t>(), 180u) << PushSummary(*m);
    // Only the changed files (a read or two each) reached the daemon; without the
    // pushes at open, all 200.
    EXPECT_LE(FileReads(s) - reads_before, 20u) << s.dump();
  } else {
    EXPECT_EQ(s["pushed_at_open"], 0) << PushSummary(*m);
  }
  // Folders the daemon opened itself (AttrRefresh, after the READs) are not the reader's.
  EXPECT_EQ(ReaderOpendirs(*m, 0), 0u) << "the reader listed nothing: " << m->Stats().dump();
  // And again, with the kernel's pages as they are now.
  ShuffledEpoch(names, 10, changed);
}

// A damaged pack entry is never pushed: it fails its checksum while streaming, and the
// file is read from the source.
TEST_P(PushTest, ACorruptPackEntryIsNeverPushed) {
  const auto names = FillAndUnmount(300, {});
  ASSERT_TRUE(CorruptTheMiddleOfThePack());
  auto m = MountIt();
  ASSERT_TRUE(m->ok());
  ListAll();
  EXPECT_GE(WaitFor(*m, "pushed_files", 300), 300u) << PushSummary(*m);
  ShuffledEpoch(names, 3);  // every byte checked
  auto s = m->Stats();
  EXPECT_EQ(s["corrupt_entries"], 1) << s.dump();
  // Readahead read the damaged file from the source, and pushed those bytes.
  EXPECT_EQ(s["pushed_files"], 300) << s.dump();
  EXPECT_EQ(s["source_reads"], 1) << s.dump();
}

// Under a memory limit (here a 1 GiB cgroup, as a job scheduler sets one) the pages
// pushed never exceed --ram's RAM tier, counted by the daemon and measured in the
// kernel (mincore); as the epoch reads them, the files read are dropped and others
// pushed in their place; pushing stops at unmount. (With no limit, pages the tier lets
// go are left to the kernel's LRU instead: PageCachePusher's drop_when_let_go.)
TEST_P(PushTest, UnderAMemoryLimitPushedPagesStayWithinTheRamBudget) {
  MemoryCgroup group(1ull << 30);
  if (!group.ok()) GTEST_SKIP() << group.why_not();
  const auto names = FillAndUnmount(1000, {"--ram", "48M"});  // 48 MB of files
  const CommandResult mounted = MountInside(group, "48M");
  ASSERT_EQ(mounted.exit_code, 0) << mounted.output;
  UnmountOnExit unmount(mnt_);
  const auto stats = [this] { return MountStats(); };
  ListAll();
  for (int i = 0; i < 200 && stats()["pushed_files"].get<uint64_t>() < 200; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // until the tier is full
  auto s = stats();
  // The tier's budget moves with what the rest of the daemon leaves of --ram
  // (daemon/ram_balancer.h); pages pushed under the largest it had may still be there.
  uint64_t budget = s["ram_tier_budget_bytes"].get<uint64_t>();
  const auto largest_budget = [&budget](const nlohmann::json& j) {
    budget = std::max(budget, j["ram_tier_budget_bytes"].get<uint64_t>());
    return budget;
  };
  ASSERT_GT(s["pushed_files"].get<uint64_t>(), 100u) << s.dump();
  EXPECT_LE(s["kernel_page_bytes"].get<uint64_t>(), budget) << s.dump();
  // Measured in the kernel too: the pushed pages are charged to the daemon's cgroup
  // (which holds nothing else that reads much; 2 MiB for the index and the record).
  EXPECT_LE(group.PageCacheBytes(), budget + (2u << 20)) << s.dump();
  // And seen from the files (mincore). The walk is no snapshot: its own opens count as
  // reads (fanotify sees them), so files it walked are dropped and others pushed
  // meanwhile, and it may count both. What it counts was resident when it began (within
  // the budget, with slack for a drop that runs on the pusher's thread just after the
  // tier lets the pages go) or pushed since. (A bound of the budget plus a fixed slack
  // was flaky with the CPUs busy: docs/benchmarks.md, "Figures behind design choices".)
  const uint64_t pushed_before = stats()["pushed_bytes"].get<uint64_t>();
  const uint64_t resident = ResidentBytes(names);
  const uint64_t pushed_during = stats()["pushed_bytes"].get<uint64_t>() - pushed_before;
  EXPECT_LE(resident, largest_budget(stats()) + pushed_during + (8u << 20)) << s.dump();

  ShuffledEpoch(names, 5, {}, [&](size_t i) {
    if (i % 100 != 50) return;
    s = stats();
    ASSERT_LE(s["ram_bytes"].get<uint64_t>(), s["ram_tier_budget_bytes"].get<uint64_t>()) << s.dump();
    ASSERT_LE(largest_budget(s), (48u << 20) - (4u << 20)) << s.dump();  // a margin kept
    // The pages charged to the daemon: the pushed ones (those of READs are the
    // reader's, charged to this test process outside the group).
    ASSERT_LE(group.PageCacheBytes(), largest_budget(stats()) + (2u << 20)) << s.dump();
  });
  if (HasFatalFailure()) return;
  s = stats();
  EXPECT_GT(s["pushed_files"].get<uint64_t>(), 500u) << s.dump();  // refilled as read
  EXPECT_GT(s["kernel_page_drops"].get<uint64_t>(), 0u) << s.dump();
  EXPECT_EQ(s["source_reads"], 0) << s.dump();
  EXPECT_EQ(group.OomKills(), 0u);
  const int pid = s["pid"].get<int>();
  const CommandResult down = Epochfs({"umount", mnt_.string()});
  ASSERT_EQ(down.exit_code, 0) << down.output;
  // Pushing stopped with the daemon.
  EXPECT_TRUE(ExitsWithin(pid, std::chrono::seconds(5)))
      << "daemon " << pid << " still running after unmount";
}

// --ram bounds the daemon's resident set plus its pushed pages. Its fixed split leaves
// the RAM tier a share (here 64 MiB of 128) and ceilings for the rest, which the rest
// mostly does not use: the tier grows into that (daemon/ram_balancer.h), and so more
// files are pushed, while the daemon's RSS plus its pushed pages stays within --ram.
TEST_P(PushTest, TheTierGrowsIntoWhatTheRestLeavesOfRamAndTheSumStaysWithinIt) {
  MemoryCgroup group(1ull << 30);
  if (!group.ok()) GTEST_SKIP() << group.why_not();
  const auto names = FillAndUnmount(2000, {"--ram", "128M"});  // 96 MB of files
  const CommandResult mounted = MountInside(group, "128M");
  ASSERT_EQ(mounted.exit_code, 0) << mounted.output;
  UnmountOnExit unmount(mnt_);
  const auto stats = [this] { return MountStats(); };
  ListAll();
  constexpr uint64_t kRam = 128ull << 20;
  auto s = stats();
  const uint64_t share = s["ram_tier_share_bytes"].get<uint64_t>();
  ASSERT_GT(share, 0u) << s.dump();
  ASSERT_LT(share, 80ull << 20) << s.dump();  // the 96 MB would not fit in the share
  uint64_t largest = 0;
  for (int i = 0; i < 100; ++i) {  // the balancer's period is 250 ms; readahead fills the tier
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    s = stats();
    const uint64_t budget = s["ram_tier_budget_bytes"].get<uint64_t>();
    largest = std::max(largest, budget);
    ASSERT_GE(budget, share) << s.dump();
    ASSERT_LE(budget, kRam) << s.dump();
    ASSERT_LE(s["ram_bytes"].get<uint64_t>(), budget) << s.dump();
    if (s["kernel_page_bytes"].get<uint64_t>() > share + (4u << 20) && i > 20) break;
  }
  EXPECT_GT(largest, share) << s.dump();
  // More pushed than the share could hold: the room was used.
  EXPECT_GT(s["kernel_page_bytes"].get<uint64_t>(), share) << s.dump();
  // The daemon's memory as --ram means it: RSS plus pushed pages, the latter as the
  // kernel charges them to the daemon's group. The balancer keeps a margin of 16 MiB;
  // the slack is for the 2 MiB of the index and the record in that page cache and for
  // the RSS moving within a period.
  const uint64_t page_cache = group.PageCacheBytes();
  EXPECT_LE(s["daemon_rss_bytes"].get<uint64_t>() + page_cache, kRam + (8u << 20))
      << "page cache " << page_cache << " " << s.dump();
  EXPECT_LE(page_cache, largest + (2u << 20)) << s.dump();

  // Reading every file in a shuffled order: the tier keeps to its moving budget.
  ShuffledEpoch(names, 11, {}, [&](size_t i) {
    if (i % 100 != 50) return;
    s = stats();
    ASSERT_LE(s["ram_bytes"].get<uint64_t>(), s["ram_tier_budget_bytes"].get<uint64_t>()) << s.dump();
    largest = std::max(largest, s["ram_tier_budget_bytes"].get<uint64_t>());
    ASSERT_LE(group.PageCacheBytes(), largest + (2u << 20)) << s.dump();
  });
  if (HasFatalFailure()) return;
  EXPECT_EQ(group.OomKills(), 0u);
}

// Under a memory limit the pages READs bring are one budget with the pushed ones: a
// file a READ delivered whole is charged to the RAM tier as a kernel entry (and dropped
// when the epoch policy lets it go) or, when the tier does not keep it, dropped a
// moment after the read. So however much is read, what the kernel holds of the files
// stays within the tier's budget, where its LRU would keep all 48 MB (this reader is
// outside the group).
TEST_P(PushTest, UnderAMemoryLimitPagesOfReadsAreChargedOrDropped) {
  MemoryCgroup group(1ull << 30);
  if (!group.ok()) GTEST_SKIP() << group.why_not();
  const auto names = FillAndUnmount(1000, {"--ram", "48M"});  // 48 MB of files
  const CommandResult mounted = MountInside(group, "48M");
  ASSERT_EQ(mounted.exit_code, 0) << mounted.output;
  UnmountOnExit unmount(mnt_);
  const auto stats = [this] { return MountStats(); };
  auto s = stats();
  // The largest budget the tier had: it moves with what the rest of the daemon leaves
  // of --ram (daemon/ram_balancer.h), never to all 48 MB.
  uint64_t budget = s["ram_tier_budget_bytes"].get<uint64_t>();
  ASSERT_LT(budget, 40u << 20) << s.dump();
  ShuffledEpoch(names, 9, {}, [&](size_t i) {
    if (i % 100 != 50) return;
    s = stats();
    ASSERT_LE(s["ram_bytes"].get<uint64_t>(), s["ram_tier_budget_bytes"].get<uint64_t>()) << s.dump();
    budget = std::max(budget, s["ram_tier_budget_bytes"].get<uint64_t>());
    ASSERT_LT(budget, 40u << 20) << s.dump();
  });
  if (HasFatalFailure()) return;
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the drops come due
  s = stats();
  const uint64_t moved = s["read_pages_moved"].get<uint64_t>();
  const uint64_t dropped = s["read_pages_dropped"].get<uint64_t>();
  // Every file came whole into the kernel by a push (the daemon lists the recorded
  // folders at a restart, and readahead pushes what the tier has room for ahead of the
  // reader) or by READs, and then it was charged or dropped. (A file may take more than
  // one READ: the READ counters count READs, not files.)
  EXPECT_GE(moved + dropped, 200u) << s.dump();  // about 300 of the 1000 come by READs
  EXPECT_GE(moved + dropped + s["pushed_files"].get<uint64_t>(), 900u) << s.dump();
  EXPECT_GT(dropped, 0u) << s.dump();  // 48 MB do not fit: the tier keeps some only
  EXPECT_LE(s["kernel_page_bytes"].get<uint64_t>(), s["ram_tier_budget_bytes"].get<uint64_t>())
      << s.dump();
  budget = std::max(budget, s["ram_tier_budget_bytes"].get<uint64_t>());
  // Seen from the files (mincore, which reads nothing): the walk's opens are accesses,
  // which may push files meanwhile; what it counts is within the budget or pushed since.
  const uint64_t pushed_before = stats()["pushed_bytes"].get<uint64_t>();
  const uint64_t resident = ResidentBytes(names);
  const uint64_t pushed_during = stats()["pushed_bytes"].get<uint64_t>() - pushed_before;
  EXPECT_LE(resident, budget + pushed_during + (4u << 20)) << s.dump();
  // --ram bounds the daemon's RSS plus every page it is charged for, READ pages among
  // them (kernel_page_bytes counts the pushed and the READ-delivered files alike). At 48M
  // the daemon's own RSS is past what the split planned for it, so the tier gives up
  // part of its share (daemon/ram_balancer.h). The balancer steps every 250 ms, and
  // the RSS moves between two steps: the sum is checked once it had a step to settle.
  const auto held = [&] {
    s = stats();
    return s["daemon_rss_bytes"].get<uint64_t>() + s["kernel_page_bytes"].get<uint64_t>();
  };
  uint64_t sum = held();
  for (int i = 0; i < 20 && sum > (48ull << 20); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    sum = held();
  }
  EXPECT_LE(sum, 48ull << 20) << s.dump();
  EXPECT_EQ(group.OomKills(), 0u);
}

// The kernel's copy of a file that came by demand READs (no readahead, nothing pushed) is
// never read stale: a file changed right after its READ, underneath the mount, is read
// with its new bytes by the next open. The changes: the same size with the old mtime put
// back (only ctime tells), larger, and emptied.
TEST_P(PushTest, AFileChangedRightAfterADemandReadIsReadNew) {
  const auto names = MakeFiles(120, 4, kSize);
  auto m = MountIt({"--prefetch", "0"});
  ASSERT_TRUE(m->ok());
  std::map<std::string, std::string> changed;
  for (size_t i = 0; i < names.size(); ++i) {
    ASSERT_EQ(ReadFile(mnt_ / names[i]), RandomBytes(kSize, static_cast<int>(i))) << names[i];
    // At once after its READ, while the kernel holds its pages.
    if (i % 40 == 10) ChangeUnderneath(changed, names[i], RandomBytes(kSize, static_cast<int>(710'000 + i)), true);
    if (i % 40 == 20) ChangeUnderneath(changed, names[i], RandomBytes(kSize + 4096, static_cast<int>(720'000 + i)));
    if (i % 40 == 30) ChangeUnderneath(changed, names[i], "");
  }
  auto s = m->Stats();
  EXPECT_EQ(s["pushed_files"], 0) << s.dump();  // every page came by a READ
  // "notify" mode sees a change underneath through its watcher, a moment later.
  if (GetParam() == std::string("notify")) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ShuffledEpoch(names, 21, changed);
  ShuffledEpoch(names, 22, changed);
}

// Files changed underneath while the daemon drops pages (a memory limit: one copy, and
// every file a READ delivered whole is charged or dropped, pushed ones dropped when the
// epoch policy lets them go) are read with their last bytes once the changes stop. A
// thread rewrites files throughout two epochs; drops, pushes and READs race it.
TEST_P(PushTest, FilesChangedWhilePagesAreDroppedAreNeverReadStale) {
  MemoryCgroup group(1ull << 30);
  if (!group.ok()) GTEST_SKIP() << group.why_not();
  const auto names = FillAndUnmount(600, {"--ram", "40M"});  // 29 MB of files
  const CommandResult mounted = MountInside(group, "40M");
  ASSERT_EQ(mounted.exit_code, 0) << mounted.output;
  UnmountOnExit unmount(mnt_);
  ListAll();
  std::map<std::string, std::string> last;  // what each changed file holds now
  std::mutex last_mu;
  std::atomic<bool> stop{false};
  std::thread changer([&] {
    std::mt19937_64 rng(77);
    for (int round = 0; !stop.load(); ++round) {
      const std::string& name = names[rng() % names.size()];
      std::string bytes = RandomBytes(kSize + (round % 3) * 1000, 800'000 + round);
      {
        std::lock_guard lock(last_mu);
        WriteFile(src_ / name, bytes);
        if (round % 2 == 0) AgeFile(src_ / name, 3600);  // only ctime tells
        last[name] = std::move(bytes);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  // Reads race the changes: a file may be read old or new then, never a mix that stays.
  std::vector<std::string> order = names;
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::shuffle(order.begin(), order.end(), std::mt19937_64(31 + epoch));
    for (const auto& name : order) (void)ReadFile(mnt_ / name);
  }
  stop = true;
  changer.join();
  ASSERT_GT(last.size(), 20u);
  if (GetParam() == std::string("notify")) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto s = MountStats();
  EXPECT_GT(s["kernel_page_drops"].get<uint64_t>() + s["read_pages_dropped"].get<uint64_t>(), 0u)
      << s.dump();
  ShuffledEpoch(names, 33, last);
  ShuffledEpoch(names, 34, last);
  EXPECT_EQ(group.OomKills(), 0u);
}

// A warm epoch costs the daemon no readahead: every file's pages are in the kernel
// (pushed, or filled by READs), so readahead passes over them (prefetch_in_kernel)
// instead of statting each on the source and pushing bytes the kernel has. A file
// whose pages were dropped (changed underneath) is not passed over: it is read with
// its new bytes.
TEST_P(PushTest, AWarmEpochPassesOverWhatTheKernelHolds) {
  const auto names = FillAndUnmount(300, {});
  auto m = MountIt();
  ASSERT_TRUE(m->ok());
  ListAll();
  EXPECT_GE(WaitFor(*m, "pushed_files", 300), 300u) << PushSummary(*m);
  // Orders of their own: seed 1 would read FillAndUnmount's first epoch again, which the
  // classifier rightly calls a replay of the recorded order; an epoch after a replay that
  // does not follow it has no readahead until its own pattern is known (224 accesses
  // with a last order to compare with), and those files are read before readahead could
  // pass over them.
  ShuffledEpoch(names, 11);
  WaitFor(*m, "epoch_accesses", 300);
  auto before = m->Stats();
  ShuffledEpoch(names, 12);
  WaitFor(*m, "epoch_accesses", 300);
  auto s = m->Stats();
  // Unless the access watcher paused first ("notify" mode, an epoch with nothing
  // reaching the daemon: TheAccessWatcherPausesWhileThePageCacheHoldsEverything), when
  // readahead sees no opens at all, which costs less still. (One failure here, beside a
  // package build, had no file passed over; this pause is the likely cause, unverified.)
  if (s["access_paused"].get<uint64_t>() == 0) {
    EXPECT_GE(s["prefetch_in_kernel"].get<uint64_t>() - before["prefetch_in_kernel"].get<uint64_t>(),
              200u)
        << "before: " << before.dump() << "\nafter: " << s.dump();
  }
  // Nearly none pushed again: a file the kernel filled with READs whose replies were
  // handled out of order (two FUSE threads) is not known whole, and is pushed once more
  // (a few in 300 with the CPUs busy).
  EXPECT_LE(s["pushed_files"].get<uint64_t>() - before["pushed_files"].get<uint64_t>(), 15u)
      << s.dump();
  EXPECT_EQ(s["prefetch_source_reads"], before["prefetch_source_reads"]) << s.dump();
  // What the daemon believes is what the kernel holds: the files it passed over are in
  // the page cache (mincore through the mount, which reads nothing), all but a few.
  EXPECT_GE(ResidentBytes(names), names.size() * kSize * 95 / 100) << s.dump();

  std::map<std::string, std::string> changed;
  changed[names[7]] = RandomBytes(kSize + 3000, 700'007);
  WriteFile(src_ / names[7], changed[names[7]]);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the watcher's latency
  ShuffledEpoch(names, 13, changed);
}

// With the data set in the page cache, the access watcher stops watching opens after
// a quiet epoch (its events cost every open and tell readahead nothing), and starts
// again once READs reach the daemon: here, of files changed underneath, read with their
// new bytes.
TEST_P(PushTest, TheAccessWatcherPausesWhileThePageCacheHoldsEverything) {
  if (GetParam() == std::string("open")) {
    GTEST_SKIP() << "\"open\" mode has no access watcher: every open reaches the daemon";
  }
  const auto names = FillAndUnmount(300, {});
  auto m = MountIt();
  ASSERT_TRUE(m->ok());
  ListAll();
  EXPECT_GE(WaitFor(*m, "pushed_files", 300), 300u) << PushSummary(*m);
  uint64_t seed = 10;
  const auto epochs_until_paused = [&] {
    for (int epoch = 0; epoch < 12 && m->Stats()["access_paused"] != 1; ++epoch) {
      ShuffledEpoch(names, seed++);
      std::this_thread::sleep_for(std::chrono::milliseconds(150));  // the watcher's look
    }
    return m->Stats()["access_paused"] == 1;
  };
  ASSERT_TRUE(epochs_until_paused()) << m->Stats().dump();
  auto s = m->Stats();
  ShuffledEpoch(names, seed++);
  auto after = m->Stats();
  if (after["access_paused"] == 1) {
    EXPECT_EQ(after["access_opens"], s["access_opens"]) << after.dump();  // no events
    // No READ but to fill a hole the kernel's own reclaim made (a busy machine), and at
    // most one of a file it lost (300 files: the one in 256 a paused watcher lets pass).
    EXPECT_LE(FileReads(after) - FileReads(s) - (HoleReads(after) - HoleReads(s)), 1u)
        << after.dump();
  } else {
    // The kernel let some pages go meanwhile (a busy machine): their READs resumed it.
    EXPECT_GT(FileReads(after), FileReads(s)) << after.dump();
    ASSERT_TRUE(epochs_until_paused()) << m->Stats().dump();
  }

  // Two files changed: more READs than the one file in 256 a paused watcher lets pass.
  std::map<std::string, std::string> changed;
  for (int i : {5, 6}) {
    changed[names[i]] = RandomBytes(kSize + 100, 700'000 + i);
    WriteFile(src_ / names[i], changed[names[i]]);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the watcher's latency
  ShuffledEpoch(names, 31, changed);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  s = m->Stats();
  EXPECT_EQ(s["access_paused"], 0) << s.dump();  // the changed files' READs resumed it
  // The next epoch's opens are watched again, at least its first part (64 opens, or a
  // quarter of the 300): needing nothing, it may pause again after that.
  ShuffledEpoch(names, 32, changed);
  EXPECT_GE(WaitFor(*m, "access_opens", s["access_opens"].get<uint64_t>() + 64),
            s["access_opens"].get<uint64_t>() + 64)
      << m->Stats().dump();
}

// The watcher pauses as soon as the first quarter of an epoch went by with nothing
// reaching the daemon: here within the second, after a first that READ every file.
// (It used to wait for the whole second epoch to end, and before that for the fourth.)
// Then a page the kernel lets go on its own (proactive reclaim takes single pages) comes
// back with one READ inside the file, and that READ leaves the watcher paused: readahead
// has nothing to do for it.
TEST_P(PushTest, TheAccessWatcherPausesWithinTheFirstQuietEpochAndAHoleDoesNotWakeIt) {
  if (GetParam() == std::string("open")) {
    GTEST_SKIP() << "\"open\" mode has no access watcher: every open reaches the daemon";
  }
  const auto names = MakeFiles(300, 4, kSize);
  auto m = MountIt();
  ASSERT_TRUE(m->ok());
  // The pause keeps the epochs' events (and READs) apart: the watcher reads its events
  // in batches.
  constexpr auto kLook = std::chrono::milliseconds(150);
  const auto filled = EpochThenStats(*m, names, 1);  // every file READ from the source
  ASSERT_EQ(filled["access_paused"], 0) << filled.dump();
  const auto quiet = EpochThenStats(*m, names, 2);  // every file in the page cache
  if (const auto why = NotQuiet(filled, quiet)) GTEST_SKIP() << *why;
  EXPECT_EQ(quiet["access_pauses"], 1) << quiet.dump();
  if (quiet["access_paused"] != 1) {
    // Resumed: only by READs beyond the noise (1 start, 16 inside files), on a busy
    // machine whose reclaim took pages meanwhile.
    EXPECT_GT(FileReads(quiet) - FileReads(filled), 1u) << quiet.dump();
    GTEST_SKIP() << "READs beyond the noise resumed it: " << quiet.dump();
  }
  // Paused after the epoch's first quarter (75 opens of 300) and a batch or two: the
  // rest of its opens made no event.
  EXPECT_LT(quiet["access_opens"].get<uint64_t>() - filled["access_opens"].get<uint64_t>(), 200u)
      << quiet.dump();
  ShuffledEpoch(names, 3);
  const auto third = m->Stats();
  if (third["access_paused"] != 1) {
    // Resumed, as above: its opens are seen again.
    EXPECT_GT(FileReads(third) - FileReads(quiet), 1u) << third.dump();
    GTEST_SKIP() << "READs beyond the noise resumed it: " << third.dump();
  }
  EXPECT_EQ(third["access_opens"], quiet["access_opens"]) << third.dump();  // no events

  const std::string& name = names[17];
  const int fd = ::open((mnt_ / name).c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  const long page = ::sysconf(_SC_PAGESIZE);
  const off_t hole = 5 * page;
  ASSERT_EQ(::posix_fadvise(fd, hole, page, POSIX_FADV_DONTNEED), 0);
  std::vector<unsigned char> resident((kSize + page - 1) / page);
  void* map = ::mmap(nullptr, kSize, PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(map, MAP_FAILED);
  ASSERT_EQ(::mincore(map, kSize, resident.data()), 0);
  ::munmap(map, kSize);
  if ((resident[0] & 1) == 0 || (resident[5] & 1) != 0) {
    ::close(fd);
    GTEST_SKIP() << "the kernel did not make the one hole asked for";
  }
  std::string bytes(kSize, '\0');
  ASSERT_EQ(::pread(fd, bytes.data(), kSize, 0), static_cast<ssize_t>(kSize));
  ::close(fd);
  EXPECT_EQ(bytes, RandomBytes(kSize, std::stoi(name.substr(name.find('f') + 1, 5))));
  std::this_thread::sleep_for(kLook);
  auto s = m->Stats();
  EXPECT_GT(FileReads(s), FileReads(third)) << s.dump();  // the hole was READ
  if (HoleReads(s) == HoleReads(third)) {
    GTEST_SKIP() << "the file was not believed held whole (READs answered out of order)";
  }
  EXPECT_EQ(s["access_paused"], 1) << s.dump();

  // Holes in forty files: more than the 16 READs inside files a paused watcher lets pass
  // in an epoch's time (at least 20 of them in one window, wherever it ends).
  const auto before = s;
  for (int i = 100; i < 140; ++i) {
    const int f = ::open((mnt_ / names[i]).c_str(), O_RDONLY);
    ASSERT_GE(f, 0);
    ASSERT_EQ(::posix_fadvise(f, hole, page, POSIX_FADV_DONTNEED), 0);
    ASSERT_EQ(::pread(f, bytes.data(), kSize, 0), static_cast<ssize_t>(kSize));
    ::close(f);
  }
  std::this_thread::sleep_for(kLook);
  s = m->Stats();
  if (FileReads(s) - FileReads(before) < 40) GTEST_SKIP() << "the kernel kept some pages";
  EXPECT_EQ(s["access_paused"], 0) << s.dump();
}

// A watcher thread that reads a whole epoch's events at once (the scheduler kept it off
// the CPU while the reader ran, as on a busy machine) still looks at the epoch where it
// began among the events, and pauses after its first quarter. (Before, the look came
// after the whole batch, a quarter past it lay beyond the epoch's end, and the quiet
// epoch went by unjudged: this failed once in about 31 runs of the test above, when
// the scheduler did it by chance.)
TEST_P(PushTest, TheAccessWatcherJudgesAnEpochWhoseEventsItReadAllAtOnce) {
  if (GetParam() == std::string("open")) {
    GTEST_SKIP() << "\"open\" mode has no access watcher: every open reaches the daemon";
  }
  const auto names = MakeFiles(300, 4, kSize);
  auto m = MountIt();
  ASSERT_TRUE(m->ok());
  const auto filled = EpochThenStats(*m, names, 1);  // every file READ from the source
  {
    StoppedThread watcher(filled["pid"].get<int>(), "access-watch");
    if (!watcher.ok()) GTEST_SKIP() << "cannot hold the watcher's thread: " << watcher.why_not();
    ShuffledEpoch(names, 2);  // every file in the page cache; 300 events queued
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  const auto quiet = m->Stats();
  EXPECT_EQ(quiet["access_opens"].get<uint64_t>() - filled["access_opens"].get<uint64_t>(), 300u)
      << quiet.dump();
  if (const auto why = NotQuiet(filled, quiet)) GTEST_SKIP() << *why;
  EXPECT_EQ(quiet["epoch"].get<uint64_t>(), filled["epoch"].get<uint64_t>() + 1) << quiet.dump();
  EXPECT_EQ(quiet["access_pauses"], 1) << quiet.dump();
}

// Reclaim that takes the first pages of many files (this VM's DAMON does) sends READs of
// their starts only: the kernel keeps the rest. Past the noise those READs resume a
// paused watcher, rightly. The files are then whole in the kernel again, and the next
// epoch, which needs nothing, is paused after its first quarter. (Before, such a file
// stayed "not known whole": its READs never cover the rest. Its open then counted against
// the quarter, and the next epoch was watched to its end: docs/benchmarks.md, "A warm
// epoch watched from end to end after reclaim took files' first pages".)
TEST_P(PushTest, AfterReclaimTookFilesFirstPagesTheNextQuietEpochStillPauses) {
  PausedWatcher w;
  if (const auto why = PauseInAQuietSecondEpoch(w)) GTEST_SKIP() << *why;
  for (size_t i = 0; i < 12; ++i) {  // as reclaim might: the first page of a few (4%)
    DropFirstPage(w.names[i]);
    ASSERT_FALSE(HasFatalFailure());
  }
  // 12 READs of files' starts, past the noise: it resumes.
  const auto refilled = EpochThenStats(*w.m, w.names, 3);
  if (const auto why = NotResumed(w.quiet, refilled, 12)) GTEST_SKIP() << *why;
  // Under load the watcher may resume so late that the prefetcher counts the refill as
  // an epoch of its own; the fourth epoch then sometimes goes unpaused. A known miss,
  // not fixed yet: seen in 2 runs of 16 beside another test's load, with the tree of
  // 0743cf3 too (issue 34's note of 2026-11-29).
  if (refilled["epoch"] != w.quiet["epoch"]) {
    GTEST_SKIP() << "the prefetcher counted the refill as an epoch of its own: " << refilled.dump();
  }
  const auto fourth = EpochThenStats(*w.m, w.names, 4);  // needs nothing again
  if (const auto why = NotQuietAgain(refilled, fourth)) GTEST_SKIP() << *why;
  // The files whose first pages were READ count as held whole again.
  EXPECT_LE(NotHeldOpens(fourth) - NotHeldOpens(refilled), 1u) << fourth.dump();
  EXPECT_EQ(fourth["access_paused"], 1) << fourth.dump();
  // Paused within the fourth epoch, after its first quarter (75 opens, and the handful
  // its start is seen in), not at its end. (Before the prefetcher was told of the opens
  // the pause hid, it saw the fourth epoch begin well into it: paused after 210-237.)
  EXPECT_LT(fourth["access_opens"].get<uint64_t>() - refilled["access_opens"].get<uint64_t>(),
            150u)
      << fourth.dump();
}

// A watcher that paused within an epoch and resumed later in it (reclaim took pages, and
// their READs went past the noise) showed the prefetcher only part of that epoch's
// opens. The prefetcher tells an epoch's end by a repeat once the epoch covered most of
// the longest one; the opens it never saw kept that from happening until well into the
// next epoch, which was taken for more of the same: its start went unseen, and, quiet as
// it was, it was watched to its end (docs/benchmarks.md, "A warm epoch watched to its end
// after a pause and a resume within the epoch before"). The prefetcher is now told when
// opens go unseen.
TEST_P(PushTest, AWatcherThatResumedWithinAnEpochPausesWithinTheNextQuietOne) {
  PausedWatcher w;
  if (const auto why = PauseInAQuietSecondEpoch(w)) GTEST_SKIP() << *why;
  // The third epoch: its first 250 opens go unseen; then reclaim takes the first page of
  // 12 of the other 50 files, and their READs resume the watcher for the last of them.
  auto third = w.names;
  std::shuffle(third.begin(), third.end(), std::mt19937_64(3));  // ShuffledEpoch's order
  ShuffledEpoch(w.names, 3, {}, [&](size_t i) {
    if (i != 249) return;
    for (size_t k = 250; k < 262 && !HasFatalFailure(); ++k) DropFirstPage(third[k]);
  });
  ASSERT_FALSE(HasFatalFailure());
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  const auto resumed = w.m->Stats();
  if (const auto why = NotResumed(w.quiet, resumed, 12)) GTEST_SKIP() << *why;
  const auto fourth = EpochThenStats(*w.m, w.names, 4);  // needs nothing again
  if (const auto why = NotQuietAgain(resumed, fourth)) GTEST_SKIP() << *why;
  EXPECT_EQ(fourth["access_paused"], 1) << fourth.dump();
  // Paused within the fourth epoch, not at its end or later.
  EXPECT_LT(fourth["access_opens"].get<uint64_t>() - resumed["access_opens"].get<uint64_t>(), 250u)
      << fourth.dump();
}

// A reader that opens files well ahead of its reads (a loader's queue of open files)
// shows the watcher a quarter of an epoch's opens before any of their READs: that part
// is not quiet. The watcher tells by what the kernel holds of the files opened, not
// only by the READs counted so far; here every file changed underneath after the first
// epoch, so the kernel holds none of them. (Before, it paused there, and the READs that
// then came counted each file a second time.)
TEST_P(PushTest, AReaderThatOpensAheadOfItsReadsDoesNotPauseTheAccessWatcher) {
  if (GetParam() == std::string("open")) {
    GTEST_SKIP() << "\"open\" mode has no access watcher: every open reaches the daemon";
  }
  auto names = MakeFiles(300, 4, kSize);
  auto m = MountIt();
  ASSERT_TRUE(m->ok());
  ShuffledEpoch(names, 1);  // every file READ from the source
  std::map<std::string, std::string> changed;
  for (size_t i = 0; i < names.size(); ++i) {
    changed[names[i]] = RandomBytes(kSize, 800'000 + static_cast<int>(i));
    WriteFile(src_ / names[i], changed[names[i]]);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the change watcher's latency
  const auto before = m->Stats();
  std::shuffle(names.begin(), names.end(), std::mt19937_64(2));
  // Owned, so that a failure anywhere still closes them before the unmount.
  std::vector<UniqueFd> fds;
  const auto open_up_to = [&](size_t count) {
    while (fds.size() < count) {
      fds.emplace_back(::open((mnt_ / names[fds.size()]).c_str(), O_RDONLY | O_CLOEXEC));
      ASSERT_TRUE(fds.back().valid()) << names[fds.size() - 1];
    }
  };
  open_up_to(16);
  if (HasFatalFailure()) return;
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the epoch's first look
  open_up_to(names.size());
  if (HasFatalFailure()) return;
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // every open's event read
  const auto opened = m->Stats();
  EXPECT_EQ(opened["access_pauses"], before["access_pauses"]) << opened.dump();
  for (size_t i = 0; i < fds.size(); ++i) {
    std::string bytes(kSize + 1, '\0');
    EXPECT_EQ(::pread(fds[i].get(), bytes.data(), bytes.size(), 0), static_cast<ssize_t>(kSize));
    bytes.resize(kSize);
    EXPECT_TRUE(bytes == changed[names[i]]) << names[i] << ": stale or wrong bytes";
    fds[i].reset();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto read = m->Stats();
  EXPECT_EQ(read["access_pauses"], before["access_pauses"]) << read.dump();
  EXPECT_EQ(read["access_opens"].get<uint64_t>() - before["access_opens"].get<uint64_t>(), 300u)
      << read.dump();
  EXPECT_EQ(read["epoch"].get<uint64_t>(), before["epoch"].get<uint64_t>() + 1) << read.dump();
}

// An epoch too small for a look at its first quarter (fewer than 64 files) is judged
// when it ends, at the next epoch's first batch of opens, however short it was: here 48
// files, epochs back to back of a few ms each (a fixed period between looks would judge
// it an epoch or more late).
TEST_P(PushTest, TheAccessWatcherJudgesASmallEpochAsSoonAsItEndsHoweverShort) {
  if (GetParam() == std::string("open")) {
    GTEST_SKIP() << "\"open\" mode has no access watcher: every open reaches the daemon";
  }
  const auto names = MakeFiles(48, 2, kSize);
  auto m = MountIt();
  ASSERT_TRUE(m->ok());
  const auto start = std::chrono::steady_clock::now();
  ShuffledEpoch(names, 1);  // every file READ from the source
  // The watcher reads events in batches of 4 ms: an epoch's last opens are counted
  // before the snapshot, not with the next epoch's.
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const auto filled = m->Stats();
  ShuffledEpoch(names, 2);  // every file in the page cache
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const auto quiet = m->Stats();
  ASSERT_EQ(quiet["access_paused"], 0) << quiet.dump();  // no look within so small an epoch
  ShuffledEpoch(names, 3);
  const auto third = m->Stats();
  const auto took = std::chrono::steady_clock::now() - start;
  // Noise is one file in 256 of those known: none of 48, not even a hole.
  if (FileReads(quiet) - FileReads(filled) + quiet["prefetched"].get<uint64_t>() -
          filled["prefetched"].get<uint64_t>() > 0) {
    GTEST_SKIP() << "the kernel let files go during the quiet epoch: " << quiet.dump();
  }
  if (third["access_paused"] != 1 && FileReads(third) - FileReads(quiet) > 0) {
    GTEST_SKIP() << "READs resumed it: " << third.dump();
  }
  EXPECT_EQ(third["access_pauses"], 1) << third.dump();
  // The third epoch's opens seen before the pause: its first batches, not all 48.
  EXPECT_LT(third["access_opens"].get<uint64_t>() - quiet["access_opens"].get<uint64_t>(), 48u)
      << "three epochs in " << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
      << " ms; " << third.dump();
}

// Reclaim that takes a file's first pages sends a READ of its start, which the watcher
// counts as a file the kernel lost (the stricter noise; the file itself is still believed
// held whole). A few of those in an epoch, one in 256 of the files known or fewer, are
// noise: the epoch still counts as quiet, and a paused watcher stays paused until more
// READs than that reach the daemon within an epoch's time.
TEST_P(PushTest, AFewReadsOfFilesTheKernelLostAreNoiseToTheAccessWatcher) {
  if (GetParam() == std::string("open")) {
    GTEST_SKIP() << "\"open\" mode has no access watcher: every open reaches the daemon";
  }
  const auto names = MakeFiles(1100, 4, kSize);  // noise: 1100 / 256 = 4 files an epoch
  auto m = MountIt();
  ASSERT_TRUE(m->ok());
  constexpr auto kLook = std::chrono::milliseconds(150);
  // What reached the daemon between two snapshots beyond holes filled: READs of files
  // the kernel lost, and files read ahead.
  const auto activity = [](const nlohmann::json& a, const nlohmann::json& b) {
    return FileReads(b) - FileReads(a) - (HoleReads(b) - HoleReads(a)) +
           b["prefetched"].get<uint64_t>() - a["prefetched"].get<uint64_t>();
  };
  ShuffledEpoch(names, 1);  // every file READ from the source
  std::this_thread::sleep_for(kLook);
  const auto first = m->Stats();
  // The second epoch's first file (ShuffledEpoch's order): its READ comes in the part
  // of the epoch the watcher judges, before it pauses. (Its files 200 to 320 are the
  // paused watcher's below.)
  std::vector<std::string> second_order = names;
  std::shuffle(second_order.begin(), second_order.end(), std::mt19937_64(2));
  const std::string lost = *std::find_if(
      second_order.begin(), second_order.end(), [&](const std::string& name) {
        const auto at = std::find(names.begin(), names.end(), name) - names.begin();
        return at < 200 || at >= 320;
      });
  DropFirstPage(lost);
  const auto second_began = std::chrono::steady_clock::now();
  ShuffledEpoch(names, 2);  // a READ of a file's start
  std::this_thread::sleep_for(kLook);
  // The paused watcher's window: the quiet epoch's time, as its looks saw it, >= 1 s.
  const auto window = std::max<std::chrono::steady_clock::duration>(
      std::chrono::seconds(1), std::chrono::steady_clock::now() - second_began);
  const auto second = m->Stats();
  if (activity(first, second) > 2) {
    // Files the first epoch's READs did not fill in order (busy CPUs) are read ahead.
    GTEST_SKIP() << "more than the one file reached the daemon: " << second.dump();
  }
  if (NotHeldOpens(second) - NotHeldOpens(first) > 4) {
    GTEST_SKIP() << "opens of files not known held (READs out of order): " << second.dump();
  }
  // Paused within the second epoch, after its first quarter: the one READ was noise,
  // before the pause or after it.
  ASSERT_EQ(second["access_pauses"], 1) << second.dump();
  ShuffledEpoch(names, 3);  // paused from its start
  const auto third = m->Stats();
  ASSERT_EQ(third["access_pauses"], 1) << third.dump();
  const auto lost_reads = [](const nlohmann::json& a, const nlohmann::json& b) {
    return FileReads(b) - FileReads(a) - (HoleReads(b) - HoleReads(a));
  };
  if (third["access_paused"] != 1) {
    // Resumed: only by more READs than the noise (busy CPUs).
    EXPECT_GT(FileReads(third) - FileReads(second), 4u) << third.dump();
    GTEST_SKIP() << "the kernel let more files go: " << third.dump();
  }
  EXPECT_EQ(third["access_opens"], second["access_opens"]) << third.dump();  // no events

  // Paused: four READs of files the kernel lost in an epoch's time leave it paused, and
  // so do four more in the next; more than four at once resume it.
  const auto lose_and_read = [&](int first, int count) {
    for (int i = first; i < first + count; ++i) DropFirstPage(names[i]);
    for (int i = first; i < first + count; ++i) {
      ASSERT_EQ(ReadFile(mnt_ / names[i]), RandomBytes(kSize, i));
    }
    std::this_thread::sleep_for(kLook);
  };
  if (lost_reads(second, third) != 0) {
    GTEST_SKIP() << "READs in the paused epoch use up its noise: " << third.dump();
  }
  lose_and_read(200, 4);
  if (HasFatalFailure()) return;
  auto s = m->Stats();
  if (lost_reads(third, s) != 4) GTEST_SKIP() << "not the four READs made: " << s.dump();
  EXPECT_EQ(s["access_paused"], 1) << s.dump();
  std::this_thread::sleep_for(2 * window);
  auto before = s;
  lose_and_read(210, 4);
  if (HasFatalFailure()) return;
  s = m->Stats();
  if (lost_reads(before, s) > 4) GTEST_SKIP() << "the kernel let more files go: " << s.dump();
  EXPECT_EQ(s["access_paused"], 1) << s.dump();
  // Nine: whichever way the window's end splits them, five or more fall on one side.
  before = s;
  lose_and_read(300, 9);
  if (HasFatalFailure()) return;
  s = m->Stats();
  if (lost_reads(before, s) < 9) GTEST_SKIP() << "the kernel kept some pages: " << s.dump();
  EXPECT_EQ(s["access_paused"], 0) << s.dump();
}

INSTANTIATE_TEST_SUITE_P(Consistency, PushTest, ::testing::Values("notify", "open"));



}  // namespace
}  // namespace epochfs::testing

namespace epochfs::testing {
namespace {

// `epochfs warm`: loads a tree into the SSD tier; interrupted, a second run completes
// it and fetches from the source only what the first did not.
TEST(Warm, InterruptedThenResumedLoadsEverythingOnce) {
  EPOCHFS_SKIP_WITHOUT_FUSE();
  TempDir dir;
  const fsys::path src = dir / "src", mnt = dir / "mnt", cache = dir / "cache";
  fsys::create_directories(mnt);
  Dataset d = Dataset::Make(src, 300, 6, 100 * 1024, 11);
  uint64_t total = 0;
  for (const auto& f : d.files) total += f.second.size();
  Mount m(src, mnt, cache, {"--ram", "4M"});  // RAM far smaller than the data set
  ASSERT_TRUE(m.ok()) << m.output();

  // An interrupted run: one class folder only (deterministic), then a killed run.
  CommandResult first = Epochfs({"warm", mnt.string(), "class_0"});
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_NE(first.output.find("warmed 50 files"), std::string::npos) << first.output;
  pid_t pid = ::fork();
  if (pid == 0) {
    const std::string bin = EPOCHFS_BINARY;
    ::execl(bin.c_str(), bin.c_str(), "warm", mnt.c_str(), "-j", "1", nullptr);
    ::_exit(127);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  const uint64_t source_before = m.Stats()["source_bytes"].get<uint64_t>();
  EXPECT_LT(source_before, total);

  CommandResult second = Epochfs({"warm", mnt.string()});
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("warmed 300 files"), std::string::npos) << second.output;
  auto s = m.Stats();
  // Every byte came from the source exactly once over all runs (the first run's files
  // were SSD hits the second time), and the SSD tier holds the whole data set.
  EXPECT_EQ(s["source_bytes"].get<uint64_t>(), total) << s.dump();
  EXPECT_GT(s["ssd_hits"].get<uint64_t>() + s["ram_hits"].get<uint64_t>(), 0u) << second.output;
  ASSERT_TRUE(m.Unmount());
  // After a restart, a full pass reads nothing from the source.
  Mount again(src, mnt, cache, {"--ram", "4M"});
  ASSERT_TRUE(again.ok()) << again.output();
  CommandResult third = Epochfs({"warm", mnt.string()});
  ASSERT_EQ(third.exit_code, 0) << third.output;
  EXPECT_EQ(again.Stats()["source_bytes"], 0) << third.output;
}

}  // namespace
}  // namespace epochfs::testing
