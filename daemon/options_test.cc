#include "daemon/options.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "daemon/mount_table.h"

namespace epochfs::daemon {
namespace {

namespace fsys = std::filesystem;

TEST(ParseSize, AcceptsSuffixesInPowersOf1024) {
  EXPECT_EQ(*ParseSize("4096"), 4096u);
  EXPECT_EQ(*ParseSize("64k"), 64u << 10);
  EXPECT_EQ(*ParseSize("512M"), 512ull << 20);
  EXPECT_EQ(*ParseSize("8G"), 8ull << 30);
  EXPECT_EQ(*ParseSize("8GB"), 8ull << 30);
  EXPECT_EQ(*ParseSize("1.5G"), 3ull << 29);
  EXPECT_EQ(*ParseSize("2T"), 2ull << 40);
  EXPECT_EQ(*ParseSize("0"), 0u);
}

TEST(ParseSize, RefusesGarbageWithTheTextInTheMessage) {
  for (const char* bad : {"12Q", "", "G", "-1G", "1.2.3M", "8 G", "8GiBs", "1e9", "abc"}) {
    auto r = ParseSize(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_NE(r.status().message().find(std::string("'") + bad + "'"), std::string::npos)
        << r.status().message();
  }
}

TEST(DefaultCacheDir, IsReadableStableAndDistinct) {
  const auto a = DefaultCacheDir("/data/imagenet");
  EXPECT_EQ(a.parent_path(), fsys::path("/var/cache/epochfs"));
  EXPECT_EQ(a.filename().string().rfind("data-imagenet-", 0), 0u) << a;
  EXPECT_EQ(a, DefaultCacheDir("/data/imagenet"));
  EXPECT_NE(a, DefaultCacheDir("/data-imagenet"));  // same readable part, other hash
  EXPECT_NE(a, DefaultCacheDir("/data/imagenet2"));
}

TEST(MountTable, UnescapesOctal) {
  EXPECT_EQ(UnescapeMountField("/mnt/with\\040space"), "/mnt/with space");
  EXPECT_EQ(UnescapeMountField("/a\\134b"), "/a\\b");
  EXPECT_EQ(UnescapeMountField("/trailing\\04"), "/trailing\\04");  // not a full escape
  EXPECT_FALSE(ReadMountTable().empty());  // / at least
}

class ValidateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/epochfs-options-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    fsys::create_directories(root_ / "src");
    fsys::create_directories(root_ / "mnt");
    std::ofstream(root_ / "file") << "x";
  }
  void TearDown() override { fsys::remove_all(root_); }
  fsys::path root_;
};

TEST_F(ValidateTest, FillsDefaults) {
  MountOptions o;
  o.source = root_ / "src";
  ASSERT_TRUE(ResolveAndValidate(o).ok());
  EXPECT_EQ(o.mountpoint, fsys::canonical(root_ / "src"));
  EXPECT_EQ(o.cache_dir, DefaultCacheDir(fsys::canonical(root_ / "src")));
}

TEST_F(ValidateTest, RefusesMissingSourceFileSourceAndCacheInsideSource) {
  MountOptions missing;
  missing.source = root_ / "nope";
  Status st = ResolveAndValidate(missing);
  EXPECT_EQ(st.code(), Code::kNotFound);
  EXPECT_NE(st.message().find("nope"), std::string::npos);

  MountOptions file;
  file.source = root_ / "file";
  st = ResolveAndValidate(file);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("not a directory"), std::string::npos);

  MountOptions inside;
  inside.source = root_ / "src";
  inside.cache_dir = root_ / "src" / "cache";
  st = ResolveAndValidate(inside);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("inside"), std::string::npos);

  MountOptions bad_mountpoint;
  bad_mountpoint.source = root_ / "src";
  bad_mountpoint.mountpoint = root_ / "file";
  EXPECT_FALSE(ResolveAndValidate(bad_mountpoint).ok());
}

// `E mount src src/class00` was accepted: every unmount of it was busy afterwards, and
// after a lazy one the daemon never exited.
TEST_F(ValidateTest, RefusesAMountpointInsideTheSource) {
  fsys::create_directories(root_ / "src" / "class00");
  MountOptions o;
  o.source = root_ / "src";
  o.mountpoint = root_ / "src" / "class00";
  const Status st = ResolveAndValidate(o);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("lies inside the source"), std::string::npos) << st.message();
  // A sibling whose name starts like the source is not inside it.
  fsys::create_directories(root_ / "src2");
  o = MountOptions();
  o.source = root_ / "src";
  o.mountpoint = root_ / "src2";
  EXPECT_TRUE(ResolveAndValidate(o).ok());
}

TEST_F(ValidateTest, RefusesARamBudgetTooSmallToWork) {
  for (uint64_t ram : {0ull, 1ull, (4ull << 20) - 1}) {
    MountOptions o;
    o.source = root_ / "src";
    o.ram_budget = ram;
    const Status st = ResolveAndValidate(o);
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << ram;
    EXPECT_NE(st.message().find("--ram"), std::string::npos) << st.message();
  }
  MountOptions o;
  o.source = root_ / "src";
  o.ram_budget = 4ull << 20;
  EXPECT_TRUE(ResolveAndValidate(o).ok());
}

TEST_F(ValidateTest, PrepareCacheDirCreatesAndProbes) {
  bool created = false;
  ASSERT_TRUE(PrepareCacheDir(root_ / "c" / "d", &created).ok());
  EXPECT_TRUE(created);
  EXPECT_TRUE(fsys::is_directory(root_ / "c" / "d"));
  EXPECT_TRUE(fsys::is_empty(root_ / "c" / "d"));  // the probe file is gone again
  ASSERT_TRUE(PrepareCacheDir(root_ / "c" / "d", &created).ok());
  EXPECT_FALSE(created);
  Status st = PrepareCacheDir(root_ / "file", &created);
  EXPECT_FALSE(st.ok());
}

}  // namespace
}  // namespace epochfs::daemon
