#include "loader/plan_publisher.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include "loader/test_files.h"

namespace epochfs::loader {
namespace {

using testing::ReadFile;
using testing::TempDir;

// A folder that looks like an epochfs mount to the loader: <root>/.epochfs/plan exists
// (a plain, empty file stands in for the control file).
struct FakeMount {
  TempDir dir;
  std::string root;
  FakeMount() {
    char buf[PATH_MAX];
    root = ::realpath(dir.path().c_str(), buf);
    dir.Write(".epochfs/plan", "");
  }
  std::string plan() const { return ReadFile(root + "/.epochfs/plan"); }
};

TEST(PlanPublisherTest, FindsTheRootByWalkingUp) {
  FakeMount m;
  m.dir.Mkdir("data/train/cat");
  EXPECT_EQ(FindEpochfsRoot(m.root + "/data/train/cat"), m.root);
  EXPECT_EQ(FindEpochfsRoot(m.root), m.root);
}

TEST(PlanPublisherTest, NoRootOnAPlainFolder) {
  TempDir dir;
  dir.Mkdir("a/b");
  EXPECT_EQ(FindEpochfsRoot(dir.path().string() + "/a/b"), "");
  EXPECT_EQ(PlanPublisher::ForFiles({dir.Write("a/b/f", "x")}), nullptr);
}

TEST(PlanPublisherTest, WritesTheExactBytes) {
  FakeMount m;
  std::vector<std::string> files = {m.dir.Write("data/cat/1.jpg", "a"),
                                    m.dir.Write("data/cat/2.jpg", "b"),
                                    m.dir.Write("data/dog/3 space.jpg", "c")};
  auto pub = PlanPublisher::ForFiles(files);
  ASSERT_NE(pub, nullptr);
  EXPECT_EQ(pub->root(), m.root);
  EXPECT_EQ(pub->plan_path(), m.root + "/.epochfs/plan");
  ASSERT_TRUE(pub->Publish({2, 0, 1, 0}).ok());
  EXPECT_EQ(m.plan(),
            "epochfs-plan 1\n"
            "data/dog/3 space.jpg\n"
            "data/cat/1.jpg\n"
            "data/cat/2.jpg\n"
            "data/cat/1.jpg\n"
            "\n");
  EXPECT_EQ(pub->Format({1}), "epochfs-plan 1\ndata/cat/2.jpg\n\n");
}

TEST(PlanPublisherTest, RelativeAndSymlinkedPathsResolveUnderTheRoot) {
  FakeMount m;
  std::string f = m.dir.Write("data/x.bin", "x");
  TempDir outside;
  std::string link = outside.path().string() + "/link";
  ASSERT_EQ(::symlink((m.root + "/data").c_str(), link.c_str()), 0);
  // The folder given goes through a symlink from outside the mount.
  PlanPublisher pub(m.root, {link + "/x.bin", m.root + "/data/../data/x.bin"});
  EXPECT_EQ(pub.unplannable(), 0u);
  EXPECT_EQ(pub.Format({0, 1}), "epochfs-plan 1\ndata/x.bin\ndata/x.bin\n\n");
  EXPECT_EQ(FindEpochfsRoot(link), m.root);
  (void)f;
}

TEST(PlanPublisherTest, LeavesOutWhatItCannotName) {
  FakeMount m;
  TempDir outside;
  std::string in = m.dir.Write("in.bin", "x");
  std::string out = outside.Write("out.bin", "y");
  std::string newline = m.dir.Write("new\nline.bin", "z");
  PlanPublisher pub(m.root, {in, out, newline});
  EXPECT_EQ(pub.unplannable(), 2u);
  EXPECT_EQ(pub.Format({0, 1, 2, 0}), "epochfs-plan 1\nin.bin\nin.bin\n\n");
}

TEST(PlanPublisherTest, ARefusedPlanIsAStatusNotACrash) {
  TempDir dir;
  dir.Mkdir(".epochfs/plan");  // a folder where the control file should be: open fails
  char buf[PATH_MAX];
  std::string root = ::realpath(dir.path().c_str(), buf);
  auto pub = PlanPublisher::ForFiles({dir.Write("f.bin", "x")});
  ASSERT_NE(pub, nullptr);
  Status st = pub->Publish({0});
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find(root + "/.epochfs/plan"), std::string::npos) << st.ToString();
  EXPECT_EQ(pub->Publish({5}).code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace epochfs::loader
