// The isatty guard (daemon/isatty_guard.h) through real mounts: where the kernel lets the
// daemon load its BPF LSM program, a plain Python reader's buffered opens send no ioctl
// to the daemon, every other ioctl and every other filesystem are untouched, and the
// program is gone once its mount is (`epochfs umount`, kill -9). Where it cannot load
// (no `bpf` LSM, a kernel that refuses tracing programs, a build without libbpf), those
// tests skip with the reason, and what is checked is the fallback: each buffered open
// costs an ioctl request, and `epochfs status` says why.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/bpf.h>
#include <linux/fs.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <termios.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <thread>

#include "base/unique_fd.h"
#include "tests/mount_fixture.h"

namespace epochfs::testing {
namespace {

constexpr const char* kProgramName = "epochfs_isatty";  // IsattyGuard::kProgramName
constexpr int kFiles = 40;

// Reads every file of `src` through `mnt` with Python's buffered open() (an isatty()
// each), and checks it against the source read unbuffered. Prints how many it read.
constexpr const char* kReader =
    "import os, sys\n"
    "src, mnt = sys.argv[1], sys.argv[2]\n"
    "n = 0\n"
    "for name in sorted(os.listdir(src)):\n"
    "    with open(os.path.join(mnt, name), 'rb') as f:\n"
    "        got = f.read()\n"
    "    with open(os.path.join(src, name), 'rb', buffering=0) as f:\n"
    "        want = f.read()\n"
    "    assert got == want, name\n"
    "    n += 1\n"
    "print(n)\n";

uint64_t Ioctls(const nlohmann::json& stats) { return stats["requests"]["ioctl"].get<uint64_t>(); }

// The ids of the BPF programs named kProgramName that process `pid` holds an fd of (a
// program's or its link's: fdinfo says "prog_id"). Only this daemon's: another mount's
// program (a test run beside this one) never counts.
std::set<uint32_t> GuardProgramsOf(int pid) {
  std::set<uint32_t> ids;
  const fsys::path fdinfo = "/proc/" + std::to_string(pid) + "/fdinfo";
  std::error_code ec;
  for (const auto& entry : fsys::directory_iterator(fdinfo, ec)) {
    std::ifstream in(entry.path());
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("prog_id:", 0) != 0) continue;
      const uint32_t id = static_cast<uint32_t>(std::stoul(line.substr(8)));
      union bpf_attr get {};
      get.prog_id = id;
      UniqueFd fd(static_cast<int>(::syscall(__NR_bpf, BPF_PROG_GET_FD_BY_ID, &get, sizeof(get))));
      if (!fd) continue;
      struct bpf_prog_info info {};
      union bpf_attr query {};
      query.info.bpf_fd = static_cast<uint32_t>(fd.get());
      query.info.info_len = sizeof(info);
      query.info.info = reinterpret_cast<uint64_t>(&info);
      if (::syscall(__NR_bpf, BPF_OBJ_GET_INFO_BY_FD, &query, sizeof(query)) == 0 &&
          std::strcmp(info.name, kProgramName) == 0) {
        ids.insert(id);
      }
    }
  }
  return ids;
}

// Whether the program with this id is still loaded.
bool ProgramLoaded(uint32_t id) {
  union bpf_attr get {};
  get.prog_id = id;
  UniqueFd fd(static_cast<int>(::syscall(__NR_bpf, BPF_PROG_GET_FD_BY_ID, &get, sizeof(get))));
  return fd || errno != ENOENT;
}

// Whether every program of `ids` is gone within a few seconds: the kernel frees a
// program after its last reference, once an RCU grace period has passed.
bool AllUnloaded(const std::set<uint32_t>& ids) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (true) {
    bool any = false;
    for (uint32_t id : ids) any = any || ProgramLoaded(id);
    if (!any) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

// The kernel's list of active LSMs ("" when unreadable even with securityfs mounted).
std::string ActiveLsms() {
  const char* list = "/sys/kernel/security/lsm";
  if (!fsys::exists(list)) ::mount("none", "/sys/kernel/security", "securityfs", 0, nullptr);
  std::ifstream in(list);
  std::string lsms;
  std::getline(in, lsms);
  return lsms;
}

class IsattyGuardTest : public MountedDirsTest {
 protected:
  void SetUp() override {
    MountedDirsTest::SetUp();
    if (IsSkipped()) return;
    for (int i = 0; i < kFiles; ++i) {
      WriteFile(src_ / ("f" + std::to_string(i)), RandomBytes(3000 + 97 * i, i));
    }
  }

  // Why the mount's daemon does not answer isatty() in the kernel ("": it does).
  static std::string WhyNotGuarded(const nlohmann::json& stats) {
    const std::string lsms = ActiveLsms();
    if (!lsms.empty() && ("," + lsms + ",").find(",bpf,") == std::string::npos) {
      return "the BPF LSM is not active (lsm: " + lsms + ")";
    }
    const std::string state = stats.value("isatty", "");
    return state.rfind("kernel", 0) == 0 ? "" : "isatty guard not in force: " + state;
  }

  // kReader over `src` through `mnt`; fails the test unless it read every file right.
  void ReadAll(const fsys::path& src, const fsys::path& mnt) {
    const CommandResult r = epochfs::testing::Run({"/usr/bin/python3", "-c", kReader, src.string(), mnt.string()});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(r.output, std::to_string(kFiles) + "\n");
  }
};

// Runs everywhere: with the guard off each buffered open costs an ioctl request, the
// daemon holds no program, and status says so.
TEST_F(IsattyGuardTest, OffSendsEveryBufferedOpensIoctlToTheDaemon) {
  Mount m(src_, mnt_, cache_, {"--isatty-guard", "off"});
  ASSERT_TRUE(m.ok()) << m.output();
  const nlohmann::json stats = m.Stats();
  EXPECT_EQ(stats.value("isatty", "").rfind("daemon (--isatty-guard off", 0), 0u)
      << stats.value("isatty", "");
  EXPECT_TRUE(GuardProgramsOf(stats["pid"].get<int>()).empty());
  const uint64_t before = Ioctls(stats);
  ReadAll(src_, mnt_);
  EXPECT_GE(Ioctls(m.Stats()) - before, static_cast<uint64_t>(kFiles));
  const CommandResult status = Epochfs({"status", mnt_.string()});
  ASSERT_EQ(status.exit_code, 0) << status.output;
  EXPECT_NE(status.output.find("--isatty-guard off"), std::string::npos) << status.output;
}

// (a) and (b): no ioctl request for buffered opens; other ioctls still reach the daemon
// and get its answer; TCGETS elsewhere is the kernel's usual business.
TEST_F(IsattyGuardTest, BufferedOpensSendNoIoctlButOtherIoctlsDo) {
  Mount m(src_, mnt_, cache_);
  ASSERT_TRUE(m.ok()) << m.output();
  const nlohmann::json stats = m.Stats();
  const uint64_t before = Ioctls(stats);
  if (stats.value("isatty", "").rfind("kernel", 0) != 0) {
    // The fallback, checked before skipping: a request per open, and the reason shown.
    ReadAll(src_, mnt_);
    EXPECT_GE(Ioctls(m.Stats()) - before, static_cast<uint64_t>(kFiles));
    EXPECT_NE(stats.value("isatty", "").find("epochfs run"), std::string::npos);
  }
  if (const std::string why = WhyNotGuarded(stats); !why.empty()) GTEST_SKIP() << why;
  EXPECT_FALSE(GuardProgramsOf(stats["pid"].get<int>()).empty());
  ReadAll(src_, mnt_);
  EXPECT_EQ(Ioctls(m.Stats()), before);

  UniqueFd fd(::open((mnt_ / "f0").c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(fd);
  struct termios tio {};
  EXPECT_EQ(::ioctl(fd.get(), TCGETS, &tio), -1);
  EXPECT_EQ(errno, ENOTTY);
  EXPECT_EQ(Ioctls(m.Stats()), before) << "TCGETS reached the daemon";
  long flags = 0;
  EXPECT_EQ(::ioctl(fd.get(), FS_IOC_GETFLAGS, &flags), -1);
  EXPECT_EQ(errno, ENOTTY);  // the daemon's answer to every ioctl
  struct winsize ws {};
  EXPECT_EQ(::ioctl(fd.get(), TIOCGWINSZ, &ws), -1);
  EXPECT_GE(Ioctls(m.Stats()), before + 2) << "other ioctls must still reach the daemon";

  UniqueFd elsewhere(::open((dir_ / "src" / "f0").c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(elsewhere);
  EXPECT_EQ(::ioctl(elsewhere.get(), TCGETS, &tio), -1);
  EXPECT_EQ(errno, ENOTTY);
}

// The program filters by device: a second mount with the guard off still gets every
// buffered open's ioctl while the first mount's guard is in force.
TEST_F(IsattyGuardTest, OnlyItsOwnMountIsGuarded) {
  Mount guarded(src_, mnt_, cache_);
  ASSERT_TRUE(guarded.ok()) << guarded.output();
  if (const std::string why = WhyNotGuarded(guarded.Stats()); !why.empty()) GTEST_SKIP() << why;
  const fsys::path mnt2 = dir_ / "mnt2";
  fsys::create_directories(mnt2);
  Mount plain(src_, mnt2, dir_ / "cache2", {"--isatty-guard", "off"});
  ASSERT_TRUE(plain.ok()) << plain.output();
  const uint64_t guarded_before = Ioctls(guarded.Stats());
  const uint64_t plain_before = Ioctls(plain.Stats());
  ReadAll(src_, mnt_);
  ReadAll(src_, mnt2);
  EXPECT_EQ(Ioctls(guarded.Stats()), guarded_before);
  EXPECT_GE(Ioctls(plain.Stats()) - plain_before, static_cast<uint64_t>(kFiles));
}

// (c): nothing pinned, so the program goes with its mount: at `epochfs umount`, and when
// the daemon is killed (the kernel closes its fds).
TEST_F(IsattyGuardTest, GoneAtUnmountAndWhenTheDaemonIsKilled) {
  {
    Mount m(src_, mnt_, cache_);
    ASSERT_TRUE(m.ok()) << m.output();
    const nlohmann::json stats = m.Stats();
    if (const std::string why = WhyNotGuarded(stats); !why.empty()) GTEST_SKIP() << why;
    const std::set<uint32_t> ids = GuardProgramsOf(stats["pid"].get<int>());
    ASSERT_FALSE(ids.empty());
    ASSERT_TRUE(m.Unmount());
    EXPECT_TRUE(AllUnloaded(ids)) << "still loaded after epochfs umount";
  }
  const CommandResult mounted = Epochfs({"mount", src_.string(), mnt_.string(), "--cache-dir",
                                         cache_.string(), "--ram", "64M", "--disk", "512M"});
  ASSERT_EQ(mounted.exit_code, 0) << mounted.output;
  UnmountOnExit cleanup(mnt_);  // the dead daemon's mount: `epochfs umount`, else a detach
  const int pid =
      nlohmann::json::parse(ReadFile(mnt_ / ".epochfs" / "stats"))["pid"].get<int>();
  const std::set<uint32_t> ids = GuardProgramsOf(pid);
  ASSERT_FALSE(ids.empty());
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  EXPECT_TRUE(ExitsWithin(pid, std::chrono::seconds(10)));
  EXPECT_TRUE(AllUnloaded(ids)) << "still loaded after kill -9 of the daemon";
}

}  // namespace
}  // namespace epochfs::testing
