// OpenBeneath with openat2 and its fallback: the same answers for the paths the source
// tree, plan entries and requests pass.
#include "fs/open_beneath.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace epochfs::fs {
namespace {

using Opener = Result<UniqueFd> (*)(int, const std::string&, int, mode_t);

class OpenBeneathTest : public ::testing::TestWithParam<Opener> {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/epochfs-open-beneath-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    std::filesystem::create_directories(dir_ / "root" / "a" / "b");
    std::ofstream(dir_ / "root" / "a" / "b" / "f") << "data";
    std::ofstream(dir_ / "outside") << "secret";
    std::filesystem::create_symlink("b", dir_ / "root" / "a" / "link_dir");
    std::filesystem::create_symlink("b/f", dir_ / "root" / "a" / "link_file");
    std::filesystem::create_symlink("../../outside", dir_ / "root" / "a" / "escape");
    root_ = UniqueFd(::open((dir_ / "root").c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(root_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  int Errno(const std::string& path, int flags = O_RDONLY) {
    auto fd = GetParam()(root_.get(), path, flags, 0);
    return fd.ok() ? 0 : fd.status().err();
  }

  std::filesystem::path dir_;
  UniqueFd root_;
};

TEST_P(OpenBeneathTest, OpensFilesAndFoldersBeneath) {
  EXPECT_EQ(Errno("a/b/f"), 0);
  EXPECT_EQ(Errno("a/b", O_RDONLY | O_DIRECTORY), 0);
  EXPECT_EQ(Errno("a"), 0);
  EXPECT_EQ(Errno("a/b/missing"), ENOENT);
}

TEST_P(OpenBeneathTest, RefusesSymlinksAnywhere) {
  EXPECT_EQ(Errno("a/link_dir/f"), ELOOP);
  EXPECT_EQ(Errno("a/link_file"), ELOOP);
  EXPECT_EQ(Errno("a/escape"), ELOOP);
}

TEST_P(OpenBeneathTest, OPathOpensATrailingSymlinkItself) {
  auto fd = GetParam()(root_.get(), "a/link_file", O_PATH, 0);
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  struct ::stat st {};
  ASSERT_EQ(::fstat(fd->get(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
}

TEST_P(OpenBeneathTest, RefusesLeavingTheRoot) {
  EXPECT_EQ(Errno("../outside"), EXDEV);
  EXPECT_EQ(Errno("a/../../outside"), EXDEV);
  EXPECT_EQ(Errno((dir_ / "outside").string()), EXDEV);
}

TEST_P(OpenBeneathTest, CreatesWithPermissionBitsOnly) {
  auto fd = GetParam()(root_.get(), "a/new", O_WRONLY | O_CREAT | O_EXCL, S_IFREG | 0640);
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  struct ::stat st {};
  ASSERT_EQ(::fstat(fd->get(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  const mode_t umask = ::umask(0);
  ::umask(umask);
  EXPECT_EQ(st.st_mode & 07777, 0640u & ~umask);
}

INSTANTIATE_TEST_SUITE_P(Openat2AndFallback, OpenBeneathTest,
                         ::testing::Values(&OpenBeneath, &OpenBeneathWithoutOpenat2),
                         [](const ::testing::TestParamInfo<Opener>& info) {
                           return info.index == 0 ? "Openat2" : "Fallback";
                         });

}  // namespace
}  // namespace epochfs::fs
