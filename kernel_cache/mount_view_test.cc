#include "kernel_cache/mount_view.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

namespace epochfs::kernel_cache {
namespace {

namespace fsys = std::filesystem;

// A real mount (a tmpfs) over a folder that has a folder of the same name underneath,
// as epochfs is mounted over its source. Needs root; skipped otherwise.
class MountViewTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/epochfs-mountview-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    point_ = dir;
    fsys::create_directory(point_ / "class0");  // underneath: what the path means after
    if (::mount("tmpfs", point_.c_str(), "tmpfs", 0, "size=1m") != 0) {
      GTEST_SKIP() << "cannot mount a tmpfs here (" << std::strerror(errno) << "): needs root";
    }
    mounted_ = true;
    fsys::create_directory(point_ / "class0");
    std::ofstream(point_ / "class0" / "a.jpg") << "x";
  }
  void TearDown() override {
    if (mounted_) ::umount2(point_.c_str(), MNT_DETACH);
    fsys::remove_all(point_);
  }
  bool Unmount() {
    if (::umount2(point_.c_str(), 0) != 0) return false;
    mounted_ = false;
    return true;
  }
  static int Entries(int fd) {
    alignas(8) char buf[4096];
    int entries = 0;
    long n;
    while ((n = ::syscall(SYS_getdents64, fd, buf, sizeof(buf))) > 0) {
      for (long at = 0; at < n; ++entries) {
        at += reinterpret_cast<const struct dirent64*>(buf + at)->d_reclen;
      }
    }
    return entries;
  }

  fsys::path point_;
  bool mounted_ = false;
};

// What the class is for: a folder held open through a plain path makes umount(2) fail;
// one opened through the view does not, and is still listed to its end afterwards.
TEST_F(MountViewTest, AFolderItHoldsOpenDoesNotMakeTheMountBusy) {
  {
    const int plain = ::open((point_ / "class0").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ASSERT_GE(plain, 0);
    EXPECT_NE(::umount2(point_.c_str(), 0), 0);
    EXPECT_EQ(errno, EBUSY);
    ::close(plain);
  }
  auto view = MountView::Of(point_);
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  auto held = (*view)->Open("class0", O_RDONLY | O_DIRECTORY);
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  EXPECT_TRUE((*view)->private_clones());
  ASSERT_TRUE(Unmount()) << std::strerror(errno);
  EXPECT_EQ(Entries(held->get()), 3);  // ".", ".." and a.jpg: the tmpfs's folder
}

// After the unmount the path leads to the folder underneath: the view refuses it
// rather than list the wrong folder.
TEST_F(MountViewTest, AfterTheUnmountItOpensNothingUnderneath) {
  auto view = MountView::Of(point_);
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  ASSERT_TRUE((*view)->Open("", O_RDONLY | O_DIRECTORY).ok());
  EXPECT_TRUE((*view)->StillMounted());
  ASSERT_TRUE(Unmount()) << std::strerror(errno);
  EXPECT_FALSE((*view)->StillMounted());
  ASSERT_TRUE(fsys::is_directory(point_ / "class0"));
  for (const std::string relative : {"", "class0"}) {
    auto fd = (*view)->Open(relative, O_RDONLY | O_DIRECTORY);
    ASSERT_FALSE(fd.ok()) << "opened '" << relative << "' underneath the mount";
    EXPECT_EQ(fd.status().code(), Code::kNotFound) << fd.status().ToString();
  }
}

}  // namespace
}  // namespace epochfs::kernel_cache
