#include "cli/config.h"

#include <gtest/gtest.h>

namespace epochfs::cli {

using daemon::Consistency;
using daemon::MountOptions;
using daemon::ParseSize;
namespace {

Status Apply(const std::string& text, MountOptions& o, std::set<std::string>* keys = nullptr) {
  return ApplyConfigText(text, "/etc/epochfs/x.conf", o, keys);
}

TEST(Config, SetsEveryKnownKey) {
  MountOptions o;
  std::set<std::string> keys;
  Status st = Apply(R"(# a comment
source = "/data/imagenet"
mountpoint = "/mnt/imagenet"
cache_dir = "/nvme/epochfs"
log_file = "/var/log/epochfs.log"
ram = "8G"
disk = 1073741824
chunk_size = "512K"
readahead = "2M"
prefetch = 8
prefetch_iops = 250
prefetch_bandwidth = "100M"
prefetch_pacing = false
page_cache_push = false
passthrough = true
read_only = true
allow_other = true
io_uring = false
fuse_uring = true
isatty_guard = "off"
log_level = "debug"
consistency = "open"
attr_timeout = 5
entry_timeout = 2.5
threads = 8
metrics_listen = "127.0.0.1:9123"
metrics_allow_remote = false
metrics_textfile = "/var/lib/node_exporter/epochfs.prom"
)",
                    o, &keys);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(keys, ConfigKeys());  // the test names every key there is
  EXPECT_EQ(o.source, "/data/imagenet");
  EXPECT_EQ(o.mountpoint, "/mnt/imagenet");
  EXPECT_EQ(o.cache_dir, "/nvme/epochfs");
  EXPECT_EQ(o.log_file, "/var/log/epochfs.log");
  EXPECT_EQ(o.ram_budget, 8ull << 30);
  EXPECT_EQ(o.disk_budget, 1ull << 30);
  EXPECT_TRUE(o.disk_budget_set);
  EXPECT_EQ(o.chunk_size, 512u << 10);
  EXPECT_EQ(o.readahead, 2ull << 20);
  EXPECT_EQ(o.prefetch_threads, 8u);
  EXPECT_EQ(o.prefetch_iops, 250u);
  EXPECT_EQ(o.prefetch_bandwidth, 100ull << 20);
  EXPECT_FALSE(o.prefetch_pacing);
  EXPECT_FALSE(o.page_cache_push);
  EXPECT_TRUE(o.passthrough);
  EXPECT_TRUE(o.read_only);
  EXPECT_TRUE(o.allow_other);
  EXPECT_FALSE(o.use_io_uring);
  EXPECT_TRUE(o.fuse_uring);
  EXPECT_FALSE(o.isatty_guard);
  EXPECT_EQ(o.log_level, "debug");
  EXPECT_EQ(o.consistency, Consistency::kOpen);
  EXPECT_DOUBLE_EQ(o.timeouts.attr_s, 5.0);
  EXPECT_DOUBLE_EQ(o.timeouts.entry_s, 2.5);
  EXPECT_EQ(o.max_threads, 8u);
  EXPECT_EQ(o.metrics_listen, "127.0.0.1:9123");
  EXPECT_EQ(o.metrics_textfile, "/var/lib/node_exporter/epochfs.prom");
}

TEST(Config, EmptyFileChangesNothing) {
  MountOptions o;
  ASSERT_TRUE(Apply("\n# nothing\n", o).ok());
  MountOptions d;
  EXPECT_EQ(o.ram_budget, d.ram_budget);
  EXPECT_EQ(o.read_only, d.read_only);
  EXPECT_EQ(o.consistency, d.consistency);
}

TEST(Config, UnknownKeyNamesFileLineAndKey) {
  MountOptions o;
  Status st = Apply("ram = \"1G\"\n\nread_onyl = true\n", o);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_EQ(st.message().rfind("/etc/epochfs/x.conf:3: key 'read_onyl': unknown key", 0), 0u)
      << st.message();
}

TEST(Config, WrongTypeNamesFileLineAndKey) {
  MountOptions o;
  Status st = Apply("ram = \"1G\"\nread_only = \"yes\"\n", o);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(),
            "/etc/epochfs/x.conf:2: key 'read_only': expected true or false, got a string");
  st = Apply("threads = 2.5\n", o);
  EXPECT_EQ(st.message(),
            "/etc/epochfs/x.conf:1: key 'threads': expected an integer, got a number");
}

TEST(Config, BadSizeNamesFileLineAndKey) {
  MountOptions o;
  Status st = Apply("\n\nram = \"8Q\"\n", o);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message().rfind("/etc/epochfs/x.conf:3: key 'ram': ", 0), 0u) << st.message();
  st = Apply("disk = -5\n", o);
  EXPECT_EQ(st.message(), "/etc/epochfs/x.conf:1: key 'disk': a size cannot be negative (-5)");
}

TEST(Config, BadEnumAndRange) {
  MountOptions o;
  EXPECT_EQ(Apply("consistency = \"sometimes\"\n", o).message(),
            "/etc/epochfs/x.conf:1: key 'consistency': \"sometimes\" is not one of auto, open, "
            "notify");
  EXPECT_FALSE(Apply("attr_timeout = -1\n", o).ok());
  EXPECT_FALSE(Apply("threads = 0\n", o).ok());
  EXPECT_EQ(Apply("prefetch = 65\n", o).message(),
            "/etc/epochfs/x.conf:1: key 'prefetch': 65 is outside 0..64");
  EXPECT_TRUE(Apply("prefetch = 0\n", o).ok());  // readahead off
  EXPECT_FALSE(Apply("prefetch_iops = -1\n", o).ok());
  EXPECT_FALSE(Apply("prefetch_bandwidth = \"fast\"\n", o).ok());
  EXPECT_FALSE(Apply("chunk_size = \"1K\"\n", o).ok());
  EXPECT_FALSE(Apply("metrics_listen = \"9100\"\n", o).ok());
}

TEST(Config, TomlSyntaxErrorNamesFileAndLine) {
  MountOptions o;
  Status st = Apply("ram = \"1G\"\nread_only = \n", o);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message().rfind("/etc/epochfs/x.conf:2:", 0), 0u) << st.message();
}

TEST(Config, TablesAreUnknownKeys) {
  MountOptions o;
  Status st = Apply("[cache]\nram = \"1G\"\n", o);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("key 'cache': unknown key"), std::string::npos) << st.message();
}

TEST(Config, MissingFileIsNotFound) {
  MountOptions o;
  Status st = ApplyConfigFile("/nonexistent/epochfs.conf", o, nullptr);
  EXPECT_EQ(st.code(), Code::kNotFound);
  EXPECT_NE(st.message().find("/nonexistent/epochfs.conf"), std::string::npos);
}

// `--config DIR` was read as an empty file: every setting silently the default.
TEST(Config, DirectoryIsRefused) {
  MountOptions o;
  Status st = ApplyConfigFile("/tmp", o, nullptr);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("is a directory"), std::string::npos) << st.message();
}

// The file and the command line accept the chunk sizes the daemon accepts (the docs
// and the table said up to 1G, the daemon stops at 64M), and no --ram below 4M.
TEST(Config, ChunkSizeAndRamRangesMatchTheDaemon) {
  MountOptions o;
  EXPECT_TRUE(ApplyConfigText("chunk_size = \"64M\"\n", "c.conf", o, nullptr).ok());
  EXPECT_EQ(o.chunk_size, 64u << 20);
  Status st = ApplyConfigText("chunk_size = \"128M\"\n", "c.conf", o, nullptr);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("64M"), std::string::npos) << st.message();
  st = ApplyConfigText("ram = 1\n", "c.conf", o, nullptr);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("4M"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace epochfs::cli
