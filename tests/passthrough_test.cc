// --passthrough: opens the kernel serves from the source file itself (fs/passthrough.h).
// Every test skips where the kernel did not grant passthrough at INIT (before 6.12, or
// built without CONFIG_FUSE_PASSTHROUGH): the mount then serves every open itself.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/unique_fd.h"
#include "tests/mount_fixture.h"

namespace epochfs::testing {
namespace {

class PassthroughTest : public MountedDirsTest {
 protected:
  // Mounts src_ with passthrough in "open" mode and no readahead (whose pushes would put
  // the files in the kernel's pages first). Null when the kernel refused passthrough.
  std::unique_ptr<Mount> MountWithPassthrough() {
    auto m = std::make_unique<Mount>(
        src_, mnt_, cache_,
        std::vector<std::string>{"--passthrough", "--consistency", "open", "--prefetch", "0"});
    EXPECT_TRUE(m->ok()) << m->output();
    if (!m->ok()) return nullptr;
    if (!m->Stats().value("passthrough", false)) return nullptr;
    return m;
  }

  // A source file written long enough ago to be cached (the racily-clean rule).
  void WriteOld(const std::string& name, const std::string& content) {
    WriteFile(src_ / name, content);
    AgeFile(src_ / name, 60);
  }

  static uint64_t Counter(const Mount& m, const char* name) {
    return m.Stats().value(name, uint64_t{0});
  }
  // Chunks READs of files asked of the cache (not of the control files, whose READs the
  // stats themselves cost).
  static uint64_t ChunkReads(const Mount& m) {
    const auto stats = m.Stats();
    return stats.value("ram_hits", uint64_t{0}) + stats.value("ssd_hits", uint64_t{0}) +
           stats.value("misses", uint64_t{0});
  }

  // Waits until the idle filler cached `files` files (it runs only on idle CPU time).
  static bool FilledWithin(const Mount& m, uint64_t files, std::chrono::seconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (Counter(m, "passthrough_fills") < files) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
  }
};

#define SKIP_WITHOUT_PASSTHROUGH(m) \
  if (!(m)) GTEST_SKIP() << "the kernel did not grant FUSE passthrough"

TEST_F(PassthroughTest, FirstReadsComeFromTheSourceThroughTheKernelAndLaterOnesFromTheCache) {
  const Dataset data = Dataset::Make(src_, 40, 4, 200'000, 7);
  auto m = MountWithPassthrough();
  SKIP_WITHOUT_PASSTHROUGH(m);
  for (const auto& [path, content] : data.files) {
    ASSERT_EQ(ReadWhole(mnt_ / path), content) << path;
  }
  EXPECT_EQ(Counter(*m, "passthrough_opens"), data.files.size());
  EXPECT_EQ(ChunkReads(*m), 0u) << "the kernel read every file itself";
  ASSERT_TRUE(FilledWithin(*m, data.files.size(), std::chrono::seconds(20)))
      << Counter(*m, "passthrough_fills") << " of " << data.files.size() << " cached";
  // Now cached: the daemon serves them (the kernel's pages went at the passthrough opens).
  for (const auto& [path, content] : data.files) {
    ASSERT_EQ(ReadWhole(mnt_ / path), content) << path;
  }
  // An empty file has nothing to cache: its opens stay passthrough.
  const auto empty = std::count_if(data.files.begin(), data.files.end(),
                                   [](const auto& file) { return file.second.empty(); });
  EXPECT_EQ(Counter(*m, "passthrough_opens"), data.files.size() + empty)
      << "a second passthrough of a cached file";
  EXPECT_GT(ChunkReads(*m), 0u);
  EXPECT_EQ(m->Stats().value("misses", uint64_t{1}), 0u)
      << "every READ a hit of what the filler cached";
}

// With readahead on, the page-cache pusher exists: the filler's bytes go on into the
// kernel's pages instead of the RAM tier, and the next open reads them with no request.
TEST_F(PassthroughTest, AFilledFileGoesOnIntoTheKernelsPagesAndItsNextReadSendsNoRequest) {
  std::vector<std::string> contents;
  for (int i = 0; i < 24; ++i) {
    contents.push_back(std::string(60'000 + 1'000 * i, static_cast<char>('a' + i)));
    WriteOld("f" + std::to_string(i), contents.back());
  }
  std::vector<int> order(contents.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::shuffle(order.begin(), order.end(), std::mt19937(5));  // no pattern to read ahead
  Mount m(src_, mnt_, cache_, {"--passthrough", "--consistency", "open"});
  ASSERT_TRUE(m.ok()) << m.output();
  if (!m.Stats().value("passthrough", false)) GTEST_SKIP() << "no FUSE passthrough";
  for (int i : order) ASSERT_EQ(ReadWhole(mnt_ / ("f" + std::to_string(i))), contents[i]) << i;
  const uint64_t opens = Counter(m, "passthrough_opens");
  ASSERT_GT(opens, 0u);
  ASSERT_TRUE(FilledWithin(m, opens, std::chrono::seconds(20)));
  EXPECT_EQ(Counter(m, "pushed_after_passthrough"), opens) << m.Stats().dump();
  const uint64_t reads_before = ChunkReads(m);
  for (int i : order) ASSERT_EQ(ReadWhole(mnt_ / ("f" + std::to_string(i))), contents[i]) << i;
  EXPECT_EQ(Counter(m, "passthrough_opens"), opens) << "a filled file opened by passthrough again";
  // Each filled file the kernel did not hold would cost a READ (this VM's reclaim may
  // take a page now and then, hence not 0).
  EXPECT_LT(ChunkReads(m) - reads_before, opens) << m.Stats().dump();
}

TEST_F(PassthroughTest, AFileChangedAfterItsFillWentIntoTheKernelIsReadNew) {
  const std::string old_bytes(120'000, 'o');
  WriteOld("f", old_bytes);
  Mount m(src_, mnt_, cache_, {"--passthrough", "--consistency", "open"});
  ASSERT_TRUE(m.ok()) << m.output();
  if (!m.Stats().value("passthrough", false)) GTEST_SKIP() << "no FUSE passthrough";
  ASSERT_EQ(ReadWhole(mnt_ / "f"), old_bytes);
  ASSERT_EQ(Counter(m, "passthrough_opens"), 1u);
  ASSERT_TRUE(FilledWithin(m, 1, std::chrono::seconds(20)));
  ASSERT_EQ(Counter(m, "pushed_after_passthrough"), 1u) << m.Stats().dump();
  // The same size: only the identity's times tell the kernel's pages are old.
  const std::string new_bytes(120'000, 'n');
  WriteFile(src_ / "f", new_bytes);
  EXPECT_EQ(ReadWhole(mnt_ / "f"), new_bytes);
}

// The filler pushes into the kernel through objects the daemon takes down at unmount:
// it must stop before them, with fills still queued.
TEST_F(PassthroughTest, AnUnmountWithFillsStillQueuedEndsCleanlyAndLosesNothing) {
  const Dataset data = Dataset::Make(src_, 300, 6, 150'000, 13);
  {
    Mount m(src_, mnt_, cache_, {"--passthrough", "--consistency", "open"});
    ASSERT_TRUE(m.ok()) << m.output();
    if (!m.Stats().value("passthrough", false)) GTEST_SKIP() << "no FUSE passthrough";
    for (const auto& [path, content] : data.files) {
      ASSERT_EQ(ReadWhole(mnt_ / path), content) << path;
    }
    ASSERT_TRUE(m.Unmount());
  }
  Mount again(src_, mnt_, cache_, {"--consistency", "open"});
  ASSERT_TRUE(again.ok()) << again.output();
  for (const auto& [path, content] : data.files) {
    ASSERT_EQ(ReadWhole(mnt_ / path), content) << path;
  }
}

TEST_F(PassthroughTest, UnderAPublishedPlanReadaheadServesTheFilesNotPassthrough) {
  const Dataset data = Dataset::Make(src_, 60, 3, 100'000, 11);
  Mount m(src_, mnt_, cache_, {"--passthrough", "--consistency", "open"});
  ASSERT_TRUE(m.ok()) << m.output();
  if (!m.Stats().value("passthrough", false)) GTEST_SKIP() << "no FUSE passthrough";
  std::string plan = "epochfs-plan 1\n";
  for (const auto& [path, content] : data.files) plan += path + "\n";
  ASSERT_EQ(WritePlan(mnt_, plan + "\n"), 0);
  for (const auto& [path, content] : data.files) {
    ASSERT_EQ(ReadWhole(mnt_ / path), content) << path;
  }
  // A passthrough open of a file readahead is bringing would throw its work away.
  EXPECT_EQ(Counter(m, "passthrough_opens"), 0u);
}

TEST_F(PassthroughTest, AFileChangedUnderneathIsReadNewWhateverWasCached) {
  const std::string old_bytes(150'000, 'o');
  WriteOld("f", old_bytes);
  auto m = MountWithPassthrough();
  SKIP_WITHOUT_PASSTHROUGH(m);
  // Open by passthrough, and held open while the source changes: the kernel reads the
  // source file itself, so the open sees the new bytes as a direct reader would.
  UniqueFd held(::open((mnt_ / "f").c_str(), O_RDONLY));
  ASSERT_TRUE(held) << std::strerror(errno);
  ASSERT_EQ(Counter(*m, "passthrough_opens"), 1u);
  const std::string new_bytes(150'000, 'n');
  WriteFile(src_ / "f", new_bytes);
  std::string got(new_bytes.size(), '\0');
  ASSERT_EQ(::pread(held.get(), got.data(), got.size(), 0), static_cast<ssize_t>(got.size()));
  EXPECT_EQ(got, new_bytes);
  held.reset();
  // The filler caches the file as it is now; a change after that is found at the next
  // open, which reads the change, not the cached copy.
  ASSERT_TRUE(FilledWithin(*m, 1, std::chrono::seconds(20)));
  EXPECT_EQ(ReadWhole(mnt_ / "f"), new_bytes);
  const std::string newer_bytes(90'000, 'w');
  WriteFile(src_ / "f", newer_bytes);
  EXPECT_EQ(ReadWhole(mnt_ / "f"), newer_bytes);
}

TEST_F(PassthroughTest, ConcurrentOpensOfOneFileShareItsBackingFile) {
  // The kernel fails (EIO) an open that names another backing file than the open files of
  // its inode: every passthrough open of a file must name the same one.
  std::vector<std::string> contents;
  for (int i = 0; i < 3; ++i) {
    contents.push_back(std::string(120'000 + i, static_cast<char>('a' + i)));
    WriteOld("f" + std::to_string(i), contents.back());
  }
  auto m = MountWithPassthrough();
  SKIP_WITHOUT_PASSTHROUGH(m);
  std::atomic<int> wrong{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([&] {
      for (int round = 0; round < 100; ++round) {
        for (int i = 0; i < 3; ++i) {
          if (ReadWhole(mnt_ / ("f" + std::to_string(i))) != contents[i]) ++wrong;
        }
      }
    });
  }
  for (auto& r : readers) r.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GE(Counter(*m, "passthrough_opens"), 3u);
}

TEST_F(PassthroughTest, AWriterBesideAPassthroughReaderWritesTheSourceAndNoStaleCopyStays) {
  const std::string old_bytes(100'000, 'o');
  WriteOld("f", old_bytes);
  auto m = MountWithPassthrough();
  SKIP_WITHOUT_PASSTHROUGH(m);
  UniqueFd reader(::open((mnt_ / "f").c_str(), O_RDONLY));
  ASSERT_TRUE(reader) << std::strerror(errno);
  // Beside a passthrough open the kernel takes no other mode: the writer joins it.
  UniqueFd writer(::open((mnt_ / "f").c_str(), O_WRONLY));
  ASSERT_TRUE(writer) << "a writer beside a passthrough reader: " << std::strerror(errno);
  const std::string patch(5'000, 'W');
  ASSERT_EQ(::pwrite(writer.get(), patch.data(), patch.size(), 1'000),
            static_cast<ssize_t>(patch.size()));
  writer.reset();
  std::string expected = old_bytes;
  expected.replace(1'000, patch.size(), patch);
  std::string got(expected.size(), '\0');
  ASSERT_EQ(::pread(reader.get(), got.data(), got.size(), 0), static_cast<ssize_t>(got.size()));
  EXPECT_EQ(got, expected) << "the reader sees the write";
  reader.reset();
  EXPECT_EQ(ReadFile(src_ / "f"), expected) << "the write reached the source";
  // Whatever the filler cached of the file (before or after the write), an open now
  // reads the file as written.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(ReadWhole(mnt_ / "f"), expected);
}

TEST_F(PassthroughTest, AReaderBesideAWriterServedByTheDaemonIsNoError) {
  WriteOld("f", std::string(50'000, 'o'));
  auto m = MountWithPassthrough();
  SKIP_WITHOUT_PASSTHROUGH(m);
  // The writer's open is served by the daemon (a first open for writing is never
  // passthrough); a reader beside it must then be served the same way, not fail.
  UniqueFd writer(::open((mnt_ / "f").c_str(), O_WRONLY));
  ASSERT_TRUE(writer) << std::strerror(errno);
  ASSERT_EQ(::pwrite(writer.get(), "XYZ", 3, 0), 3);
  std::string expected(50'000, 'o');
  expected.replace(0, 3, "XYZ");
  EXPECT_EQ(ReadWhole(mnt_ / "f"), expected);
  EXPECT_EQ(Counter(*m, "passthrough_opens"), 0u);
  writer.reset();
}

}  // namespace
}  // namespace epochfs::testing
