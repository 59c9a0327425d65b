// FUSE over io_uring (fs/fuse_uring.h): with the fuse module's enable_uring set, a mount
// with --fuse-uring takes its requests through rings, and every operation still gives
// exact bytes; a daemon killed while its rings hold requests leaves no reader hanging;
// without the flag (experimental, off by default) requests stay on /dev/fuse. The
// fixture sets the module parameter (root) and puts it back after.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <random>
#include <thread>
#include <vector>

#include "tests/mount_fixture.h"

namespace epochfs::testing {
namespace {

constexpr const char* kParameter = "/sys/module/fuse/parameters/enable_uring";

std::string ReadParameter() {
  std::ifstream in(kParameter);
  std::string value;
  in >> value;
  return value;
}

bool WriteParameter(const std::string& value) {
  std::ofstream out(kParameter);
  out << value << "\n";
  out.flush();
  return out.good() && ReadParameter() == value;
}

class FuseUringTest : public MountedDirsTest {
 protected:
  void SetUp() override {
    MountedDirsTest::SetUp();
    if (IsSkipped()) return;
    before_ = ReadParameter();
    if (before_.empty()) GTEST_SKIP() << "this kernel has no FUSE over io_uring (" << kParameter << ")";
    if (!WriteParameter("Y")) GTEST_SKIP() << "cannot set " << kParameter << " (needs root)";
  }
  void TearDown() override {
    if (!before_.empty()) WriteParameter(before_);
  }

  // The daemon's pid, from its counters.
  static int DaemonPid(const Mount& m) { return m.Stats()["pid"].get<int>(); }

  std::string before_;
};

std::string Slurp(const fsys::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + p.string());
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void Spit(const fsys::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << bytes;
  if (!out.flush()) throw std::runtime_error("cannot write " + p.string());
}

TEST_F(FuseUringTest, RequestsComeThroughTheRingsAndEveryOperationGivesExactBytes) {
  const Dataset data = Dataset::Make(src_, 300, 6, 300'000, /*seed=*/7);
  Mount m(src_, mnt_, cache_, {"--fuse-uring"});
  ASSERT_TRUE(m.ok()) << m.output();
  ASSERT_TRUE(m.Stats()["fuse_uring"].get<bool>()) << "the kernel offered io_uring";

  // Reads by four threads in shuffled orders, twice (a cold and a cached epoch).
  for (int epoch = 0; epoch < 2; epoch++) {
    std::vector<size_t> order(data.files.size());
    for (size_t i = 0; i < order.size(); i++) order[i] = i;
    std::shuffle(order.begin(), order.end(), std::mt19937(epoch));
    std::atomic<int> wrong{0};
    std::vector<std::thread> readers;
    for (size_t r = 0; r < 4; r++) {
      readers.emplace_back([&, r] {
        for (size_t i = r; i < order.size(); i += 4) {
          const auto& [name, bytes] = data.files[order[i]];
          if (Slurp(mnt_ / name) != bytes) wrong++;
        }
      });
    }
    for (auto& t : readers) t.join();
    EXPECT_EQ(wrong.load(), 0) << "epoch " << epoch;
  }

  // Writes of every kind land in the source and read back through the mount.
  fsys::create_directories(mnt_ / "new" / "deeper");
  const std::string big(3 << 20, 'x');  // larger than one ring entry's payload
  Spit(mnt_ / "new" / "big", big);
  EXPECT_EQ(Slurp(src_ / "new" / "big"), big);
  EXPECT_EQ(Slurp(mnt_ / "new" / "big"), big);
  {
    const int fd = ::open((mnt_ / "new" / "log").c_str(), O_CREAT | O_WRONLY | O_APPEND, 0644);
    ASSERT_GE(fd, 0);
    for (int i = 0; i < 100; i++) ASSERT_EQ(::write(fd, "line\n", 5), 5);
    ASSERT_EQ(::fsync(fd), 0);
    ::close(fd);
  }
  EXPECT_EQ(Slurp(mnt_ / "new" / "log").size(), 500u);
  fsys::rename(mnt_ / "new" / "log", mnt_ / "new" / "deeper" / "log2");
  EXPECT_TRUE(fsys::exists(src_ / "new" / "deeper" / "log2"));
  fsys::resize_file(mnt_ / "new" / "big", 1000);
  EXPECT_EQ(Slurp(mnt_ / "new" / "big"), std::string(1000, 'x'));
  fsys::create_symlink("big", mnt_ / "new" / "link");
  EXPECT_EQ(fsys::read_symlink(src_ / "new" / "link"), "big");
  ASSERT_EQ(::setxattr((mnt_ / "new" / "big").c_str(), "user.k", "v", 1, 0), 0);
  char value[8] = {};
  EXPECT_EQ(::getxattr((mnt_ / "new" / "big").c_str(), "user.k", value, sizeof(value)), 1);
  EXPECT_EQ(value[0], 'v');
  size_t listed = 0;
  for (const auto& e : fsys::directory_iterator((mnt_ / data.files.front().first).parent_path())) {
    (void)e;
    listed++;
  }
  EXPECT_GT(listed, 0u);
  fsys::remove_all(mnt_ / "new");
  EXPECT_FALSE(fsys::exists(src_ / "new"));

  EXPECT_GT(m.Stats()["fuse_uring_requests"].get<uint64_t>(), 500u);
}

TEST_F(FuseUringTest, ADaemonKilledWhileReadersWaitLeavesNoneHanging) {
  const Dataset data = Dataset::Make(src_, 200, 4, 200'000, /*seed=*/3);
  Mount m(src_, mnt_, cache_, {"--fuse-uring"});
  ASSERT_TRUE(m.ok()) << m.output();
  ASSERT_TRUE(m.Stats()["fuse_uring"].get<bool>());
  const int pid = DaemonPid(m);

  // Readers in child processes (a reader stuck in the kernel cannot be joined), reading
  // until the mount fails them, or for 3 s (the kernel may go on serving pages it holds).
  std::vector<pid_t> readers;
  for (int r = 0; r < 4; r++) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
      while (std::chrono::steady_clock::now() < deadline) {
        for (const auto& [name, bytes] : data.files) {
          const int fd = ::open((mnt_ / name).c_str(), O_RDONLY);
          if (fd < 0) ::_exit(0);
          char buf[65536];
          ssize_t n = 0;
          while ((n = ::read(fd, buf, sizeof(buf))) > 0) {
          }
          ::close(fd);
          if (n < 0) ::_exit(0);  // the mount failed the read (an open may need no daemon)
        }
      }
      ::_exit(0);
    }
    readers.push_back(child);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  EXPECT_TRUE(ExitsWithin(pid, std::chrono::seconds(10)));
  for (const pid_t child : readers) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    int status = 0;
    pid_t done = 0;
    while ((done = ::waitpid(child, &status, WNOHANG)) == 0 &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_EQ(done, child) << "a reader still runs 10 s after the daemon died";
    if (done != child) {
      ::kill(child, SIGKILL);
      ::waitpid(child, &status, 0);
    }
  }
  // A name the kernel never saw fails at once.
  Spit(src_ / "after", "x");
  struct stat st;
  EXPECT_NE(::stat((mnt_ / "after").c_str(), &st), 0);
  // The dead mount comes off, and the source has all its bytes.
  EXPECT_EQ(epochfs::testing::Run({"umount", "-l", mnt_.string()}).exit_code, 0);
  m.UnmountedByTheTest();
  for (const auto& [name, bytes] : data.files) ASSERT_EQ(Slurp(src_ / name), bytes) << name;
}

TEST_F(FuseUringTest, WithoutTheFlagRequestsStayOnDevFuse) {
  Spit(src_ / "f", "bytes");
  Mount m(src_, mnt_, cache_);
  ASSERT_TRUE(m.ok()) << m.output();
  EXPECT_EQ(Slurp(mnt_ / "f"), "bytes");
  const auto stats = m.Stats();
  EXPECT_FALSE(stats["fuse_uring"].get<bool>());
  EXPECT_EQ(stats["fuse_uring_requests"].get<uint64_t>(), 0u);
}

}  // namespace
}  // namespace epochfs::testing
