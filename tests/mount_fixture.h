// Helpers for black-box tests that mount epochfs for real and read through the mount.
//
// Each test gets a fresh directory under /tmp with `src/` (the source), `mnt/` and
// `cache/`; the `Mount` guard unmounts in its destructor whatever happened in the test
// (lazily if a plain unmount fails), so a failing assertion never leaves a mount behind.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "base/testing/test_files.h"
#include "nlohmann/json.hpp"

namespace epochfs::testing {

namespace fsys = std::filesystem;

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs `args` (no shell), returning its exit code and output.
CommandResult Run(const std::vector<std::string>& args);
// Runs the epochfs binary under test with `args`.
CommandResult Epochfs(const std::vector<std::string>& args);

bool FuseAvailable();
#define EPOCHFS_SKIP_WITHOUT_FUSE()                                                     \
  do {                                                                                  \
    if (!::epochfs::testing::FuseAvailable())                                           \
      GTEST_SKIP() << "/dev/fuse is missing or unusable: mount tests need FUSE (root)"; \
  } while (0)

// An epochfs mount that is unmounted when the guard goes.
class Mount {
 public:
  // Mounts with `extra` flags; check ok() (a failed mount records its output).
  Mount(const fsys::path& source, const fsys::path& mountpoint, const fsys::path& cache_dir,
        const std::vector<std::string>& extra = {});
  ~Mount();
  Mount(const Mount&) = delete;
  Mount& operator=(const Mount&) = delete;

  bool ok() const { return ok_; }
  const std::string& output() const { return output_; }
  // Unmounts now (waits for the daemon to flush). Returns whether it worked.
  bool Unmount();
  // The test unmounted it some other way (umount(2)): the guard leaves it alone.
  void UnmountedByTheTest() { mounted_ = false; }
  // The daemon's counters (the JSON of `.epochfs/stats`).
  nlohmann::json Stats() const;

 private:
  fsys::path mountpoint_;
  bool ok_ = false;
  bool mounted_ = false;
  std::string output_;
};

// Unmounts `mountpoint` when it goes, for tests that mount through a wrapper command
// (prlimit, a cgroup) instead of Mount: `epochfs umount`, else a lazy detach.
class UnmountOnExit {
 public:
  explicit UnmountOnExit(fsys::path mountpoint) : mountpoint_(std::move(mountpoint)) {}
  ~UnmountOnExit();
  UnmountOnExit(const UnmountOnExit&) = delete;
  UnmountOnExit& operator=(const UnmountOnExit&) = delete;

 private:
  fsys::path mountpoint_;
};

// A cgroup-v1 memory cgroup with a limit, as a container or a job scheduler sets one,
// removed when the guard goes. Check ok() (no v1 memory controller, or no right to make
// one: the caller skips).
class MemoryCgroup {
 public:
  explicit MemoryCgroup(uint64_t limit_bytes);
  ~MemoryCgroup();
  MemoryCgroup(const MemoryCgroup&) = delete;
  MemoryCgroup& operator=(const MemoryCgroup&) = delete;

  bool ok() const { return ok_; }
  const std::string& why_not() const { return why_not_; }
  // A shell prefix that moves the shell into the cgroup: "echo $$ > .../cgroup.procs && exec ".
  std::string Enter() const;
  // How many times the kernel's OOM killer killed a process of the cgroup.
  uint64_t OomKills() const;
  // The page cache charged to the cgroup (memory.stat "cache"): pages its processes read
  // or stored, such as a daemon's pushed pages.
  uint64_t PageCacheBytes() const;

 private:
  fsys::path group_;
  bool ok_ = false;
  std::string why_not_;
};

// A fixture base for tests that mount: skips without FUSE, and gives each test a fresh
// temporary directory with `src/` and `mnt/` made and `cache/` named (not made: a
// mount makes it).
class MountedDirsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    EPOCHFS_SKIP_WITHOUT_FUSE();
    fsys::create_directories(src_);
    fsys::create_directories(mnt_);
  }

  TempDir dir_;
  fsys::path src_ = dir_ / "src";
  fsys::path mnt_ = dir_ / "mnt";
  fsys::path cache_ = dir_ / "cache";
};

// A mount test run once per consistency mode (the parameter: "notify" or "open").
class ConsistencyModeTest : public MountedDirsTest,
                            public ::testing::WithParamInterface<const char*> {
 protected:
  // Mounts src_ on mnt_ in this test's mode, with `extra` flags.
  std::unique_ptr<Mount> MountIt(std::vector<std::string> extra = {}) {
    extra.insert(extra.end(), {"--consistency", GetParam()});
    auto m = std::make_unique<Mount>(src_, mnt_, cache_, extra);
    EXPECT_TRUE(m->ok()) << m->output();
    return m;
  }
};

// Writes `text` to the mount's plan file in `piece`-byte writes; returns the first errno
// (0: the plan was taken).
int WritePlan(const fsys::path& mnt, const std::string& text, size_t piece = 4096);

// A set of files written into a source tree, kept in memory to compare against.
struct Dataset {
  std::vector<std::pair<std::string, std::string>> files;  // relative path, content
  // Writes `count` files in `classes` class folders, sizes spread from 0 to `max_size`,
  // plus a few larger than one 1 MiB chunk. Sets mtimes in the past, as for a data set
  // that was copied in earlier, and returns once every file is old enough to be cached.
  static Dataset Make(const fsys::path& root, int count, int classes, size_t max_size,
                      uint64_t seed);
};

// Whether process `pid` stops running within `timeout`: gone, or a zombie waiting for a
// reaper (there is no init here to reap a daemon).
bool ExitsWithin(int pid, std::chrono::milliseconds timeout);

// The whole file, read with a fresh open (O_RDONLY | extra_flags) until its end; on an
// open that fails, "<open failed: REASON>", which no file content of the tests equals.
std::string ReadWhole(const fsys::path& path, int extra_flags = 0);

// Sets the file's atime and mtime to `seconds_ago` in the past.
void AgeFile(const fsys::path& path, int seconds_ago);

}  // namespace epochfs::testing
