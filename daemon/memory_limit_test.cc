#include "daemon/memory_limit.h"

#include <gtest/gtest.h>

#include <fstream>

#include "base/testing/test_files.h"

namespace epochfs::daemon {
namespace {

namespace fsys = std::filesystem;
using epochfs::testing::TempDir;

void WriteKnob(const fsys::path& file, const std::string& value) {
  fsys::create_directories(file.parent_path());
  std::ofstream(file) << value << "\n";
}

TEST(MemoryLimit, V1TakesTheSmallestLimitOnTheWayUp) {
  TempDir root;
  const fsys::path mem = root / "memory";
  WriteKnob(mem / "memory.limit_in_bytes", "9223372036854771712");  // none at the root
  WriteKnob(mem / "jobs" / "memory.limit_in_bytes", "300000000");
  WriteKnob(mem / "jobs" / "42" / "memory.limit_in_bytes", "9223372036854771712");
  const std::string cgroup = "12:pids:/\n4:memory:/jobs/42\n0::/\n";
  auto limit = CgroupMemoryLimit(cgroup, root.path());
  ASSERT_TRUE(limit.has_value());
  EXPECT_EQ(limit->bytes, 300000000u);
  EXPECT_EQ(limit->cgroup, "/jobs");

  WriteKnob(mem / "jobs" / "42" / "memory.limit_in_bytes", "104857600");
  limit = CgroupMemoryLimit(cgroup, root.path());
  ASSERT_TRUE(limit.has_value());
  EXPECT_EQ(limit->bytes, 104857600u);
  EXPECT_EQ(limit->cgroup, "/jobs/42");
}

TEST(MemoryLimit, V2ReadsMemoryMax) {
  TempDir root;
  WriteKnob(root / "user.slice" / "memory.max", "max");
  WriteKnob(root / "user.slice" / "job" / "memory.max", "2147483648");
  auto limit = CgroupMemoryLimit("0::/user.slice/job\n", root.path());
  ASSERT_TRUE(limit.has_value());
  EXPECT_EQ(limit->bytes, 2147483648u);
  EXPECT_EQ(limit->cgroup, "/user.slice/job");
}

TEST(MemoryLimit, NoLimitSetOrReadable) {
  TempDir root;
  WriteKnob(root / "memory" / "memory.limit_in_bytes", "9223372036854771712");
  EXPECT_FALSE(CgroupMemoryLimit("4:memory:/\n", root.path()).has_value());
  EXPECT_FALSE(CgroupMemoryLimit("0::/gone\n", root.path()).has_value());
  EXPECT_FALSE(CgroupMemoryLimit("garbage", root.path()).has_value());
  EXPECT_FALSE(CgroupMemoryLimit("", root.path()).has_value());
}

}  // namespace
}  // namespace epochfs::daemon
