#include <gtest/gtest.h>
#include <unistd.h>

#include "loader/loader.h"
#include "loader/test_files.h"

namespace epochfs::loader {
namespace {

using testing::TempDir;

TEST(ScanImageFolderTest, ClassFoldersBecomeSortedLabels) {
  TempDir dir;
  dir.Write("dog/b.jpg", "b");
  dir.Write("dog/a.jpg", "a");
  dir.Write("cat/z.jpg", "z");
  dir.Write("cat/sub/y.jpg", "y");
  dir.Write("cat/sub2/x.jpg", "x");
  dir.Write("ant/.hidden", "h");
  dir.Write("ant/1.png", "1");
  dir.Write("root_file.txt", "ignored");
  dir.Mkdir("empty");

  auto ds = ScanImageFolder(dir.path());
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->classes, (std::vector<std::string>{"ant", "cat", "dog", "empty"}));
  const std::string r = dir.path().string() + "/";
  // sorted(os.walk()) order: a folder's files, then its sub-folders' by path.
  EXPECT_EQ(ds->files,
            (std::vector<std::string>{r + "ant/1.png", r + "cat/z.jpg", r + "cat/sub/y.jpg",
                                      r + "cat/sub2/x.jpg", r + "dog/a.jpg", r + "dog/b.jpg"}));
  EXPECT_EQ(ds->labels, (std::vector<int64_t>{0, 1, 1, 1, 2, 2}));
}

TEST(ScanImageFolderTest, FollowsSymlinkedClassFolders) {
  TempDir dir;
  dir.Write("elsewhere/f.bin", "f");
  dir.Mkdir("root");
  ASSERT_EQ(::symlink((dir.path().string() + "/elsewhere").c_str(), (dir.path().string() + "/root/cls").c_str()), 0);
  auto ds = ScanImageFolder(dir.path().string() + "/root");
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->files, (std::vector<std::string>{dir.path().string() + "/root/cls/f.bin"}));
}

TEST(ScanImageFolderTest, ErrorsNameTheFolder) {
  TempDir dir;
  auto missing = ScanImageFolder(dir.path().string() + "/nope");
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_NE(missing.status().message().find(dir.path().string() + "/nope"), std::string::npos);

  dir.Write("flat.jpg", "x");
  auto flat = ScanImageFolder(dir.path());
  EXPECT_EQ(flat.status().code(), Code::kNotFound);
  EXPECT_NE(flat.status().message().find("no class folders"), std::string::npos);

  auto file = ScanImageFolder(dir.path().string() + "/flat.jpg");
  EXPECT_EQ(file.status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace epochfs::loader
