// End-to-end tests of the Cache on real files in a temporary directory: every tier,
// restarts, changed files, damaged packs, a full disk and concurrent readers. The
// suite runs once with the pread engine and once with io_uring.
#include "cache/cache.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>
#include <vector>

#include "cache/cache_internal.h"
#include "cache/testing/fault_io_engine.h"
#include "cache/testing/test_files.h"

namespace epochfs::cache {
namespace {

namespace fs = std::filesystem;
using testing::FaultInjectingIoEngine;
using testing::OpenSource;
using testing::OpenSourceFile;
using testing::RandomBytes;
using testing::TempDir;
using testing::TextBytes;
using testing::WaitUntilFilesSettle;
using testing::WriteFile;

class CacheTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { fs::create_directories(dir_ / "src"); }

  CacheOptions Options() const {
    CacheOptions o;
    o.cache_dir = dir_ / "cache";
    o.ram_budget = 64 << 20;
    o.disk_budget = 64 << 20;
    o.chunk_size = 256 << 10;
    o.pack_size = 4 << 20;
    o.use_io_uring = GetParam();
    o.min_free_bytes = 0;
    o.sync_interval_ms = 50;
    return o;
  }

  std::unique_ptr<Cache> OpenCache(const CacheOptions& o) {
    Result<std::unique_ptr<Cache>> cache = Cache::Open(o);
    EXPECT_TRUE(cache.ok()) << cache.status().ToString();
    return cache.ok() ? std::move(cache).value() : nullptr;
  }
  std::unique_ptr<Cache> OpenCacheWith(const CacheOptions& o, std::shared_ptr<IoEngine> io) {
    Result<std::unique_ptr<Cache>> cache = OpenCacheWithIoEngine(o, std::move(io));
    EXPECT_TRUE(cache.ok()) << cache.status().ToString();
    return cache.ok() ? std::move(cache).value() : nullptr;
  }

  fs::path Src(const std::string& name) const { return dir_ / "src" / name; }

  // Reads [offset, offset + length) through the cache; records the tier used.
  static std::string Read(Cache& cache, const SourceFile& file, uint64_t offset, size_t length,
                          Tier* tier = nullptr) {
    Result<ReadBuffer> buf = cache.Read(file, offset, length);
    EXPECT_TRUE(buf.ok()) << buf.status().ToString();
    if (!buf.ok()) return {};
    if (tier) *tier = buf->tier;
    return std::string(buf->data, buf->size);
  }
  static std::string ReadWhole(Cache& cache, const OpenSource& src, Tier* tier = nullptr) {
    return Read(cache, src.file, 0, src.file.id.size, tier);
  }

  uint64_t PackBytesOnDisk() const {
    uint64_t total = 0;
    for (const auto& e : fs::directory_iterator(dir_ / "cache" / "packs")) {
      total += e.file_size();
    }
    return total;
  }

  TempDir dir_;
};

TEST_P(CacheTest, MissThenRamHitThenSsdHitAfterReopen) {
  const std::vector<std::string> contents = {RandomBytes(100'000, 1), TextBytes(50'000, 2),
                                             RandomBytes(10, 3)};
  for (size_t i = 0; i < contents.size(); ++i) WriteFile(Src(std::to_string(i)), contents[i]);
  WaitUntilFilesSettle();
  {
    auto cache = OpenCache(Options());
    ASSERT_TRUE(cache);
    for (size_t i = 0; i < contents.size(); ++i) {
      OpenSource src = OpenSourceFile(Src(std::to_string(i)));
      Tier tier;
      EXPECT_EQ(ReadWhole(*cache, src, &tier), contents[i]);
      EXPECT_EQ(tier, Tier::kSource);
      EXPECT_EQ(ReadWhole(*cache, src, &tier), contents[i]);
      EXPECT_EQ(tier, Tier::kRam);
    }
    ASSERT_TRUE(cache->Flush().ok());
    CacheStats s = cache->Stats();
    EXPECT_EQ(s.source_reads, 3u);
    EXPECT_EQ(s.misses, 3u);
    EXPECT_EQ(s.ram_hits, 3u);
    EXPECT_EQ(s.ram_hit_bytes, 150'010u);
    EXPECT_EQ(s.not_admitted, 0u);
    EXPECT_EQ(s.ssd.writes, 3u);
    EXPECT_EQ(s.ssd.entries, 3u);
    EXPECT_EQ(s.ssd.compressed_entries, 1u);  // the text
    EXPECT_EQ(s.ssd.packs, 1u);
    EXPECT_EQ(s.io_uring, GetParam() && NewIoUringIoEngine().ok());
  }
  auto cache = OpenCache(Options());
  ASSERT_TRUE(cache);
  for (size_t i = 0; i < contents.size(); ++i) {
    OpenSource src = OpenSourceFile(Src(std::to_string(i)));
    Tier tier;
    EXPECT_EQ(ReadWhole(*cache, src, &tier), contents[i]);
    EXPECT_NE(tier, Tier::kSource);
  }
  CacheStats s = cache->Stats();
  EXPECT_EQ(s.source_reads, 0u);
  EXPECT_GE(s.ssd_hits, 1u);
  EXPECT_EQ(s.ssd_hits + s.ram_hits, 3u);  // read-around may have moved some to RAM
  EXPECT_EQ(s.ssd.entries, 3u);
}

TEST_P(CacheTest, ChangedFileIsAMissWithFreshBytes) {
  WriteFile(Src("f"), RandomBytes(80'000, 1));
  WaitUntilFilesSettle();
  auto cache = OpenCache(Options());
  ASSERT_TRUE(cache);
  {
    OpenSource src = OpenSourceFile(Src("f"));
    ReadWhole(*cache, src);
    ASSERT_TRUE(cache->Flush().ok());
  }
  const std::string fresh = RandomBytes(90'000, 2);
  WriteFile(Src("f"), fresh);
  WaitUntilFilesSettle();
  OpenSource src = OpenSourceFile(Src("f"));
  Tier tier;
  EXPECT_EQ(ReadWhole(*cache, src, &tier), fresh);
  EXPECT_EQ(tier, Tier::kSource);
  EXPECT_GE(cache->Stats().stale_entries, 1u);
  ASSERT_TRUE(cache->Flush().ok());

  // Same size, new bytes: mtime/ctime still tell the versions apart.
  const std::string same_size = RandomBytes(90'000, 3);
  WriteFile(Src("f"), same_size);
  WaitUntilFilesSettle();
  OpenSource again = OpenSourceFile(Src("f"));
  EXPECT_EQ(ReadWhole(*cache, again, &tier), same_size);
  EXPECT_EQ(tier, Tier::kSource);
  ASSERT_TRUE(cache->Flush().ok());
  cache.reset();

  // After a restart the SSD tier serves the latest version only.
  cache = OpenCache(Options());
  EXPECT_EQ(ReadWhole(*cache, again, &tier), same_size);
  EXPECT_EQ(tier, Tier::kSsd);
}

TEST_P(CacheTest, FlippedPackByteIsCorruptAndServedFromSource) {
  const std::string content = RandomBytes(100'000, 4);
  WriteFile(Src("f"), content);
  WaitUntilFilesSettle();
  {
    auto cache = OpenCache(Options());
    OpenSource src = OpenSourceFile(Src("f"));
    ReadWhole(*cache, src);
    ASSERT_TRUE(cache->Flush().ok());
  }
  std::vector<fs::path> packs;
  for (const auto& e : fs::directory_iterator(dir_ / "cache" / "packs")) packs.push_back(e.path());
  ASSERT_EQ(packs.size(), 1u);
  {
    std::fstream f(packs[0], std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-1000, std::ios::end);
    char c;
    f.get(c);
    f.seekp(-1000, std::ios::end);
    f.put(static_cast<char>(c ^ 0x20));
  }
  auto cache = OpenCache(Options());
  OpenSource src = OpenSourceFile(Src("f"));
  Tier tier;
  EXPECT_EQ(ReadWhole(*cache, src, &tier), content);
  EXPECT_EQ(tier, Tier::kSource);
  CacheStats s = cache->Stats();
  EXPECT_EQ(s.ssd.corrupt_entries, 1u);
  EXPECT_EQ(s.source_reads, 1u);
  // Re-admitted: the next read is a RAM hit, and the damaged record is gone.
  EXPECT_EQ(ReadWhole(*cache, src, &tier), content);
  EXPECT_EQ(tier, Tier::kRam);
  ASSERT_TRUE(cache->Flush().ok());
  EXPECT_EQ(cache->Stats().ssd.entries, 1u);  // the fresh copy
}

TEST_P(CacheTest, LargeFileAcrossChunkBoundariesIsByteExact) {
  CacheOptions o = Options();
  o.chunk_size = 64 << 10;
  const std::string content = RandomBytes((1 << 20) + 12345, 5);
  WriteFile(Src("big"), content);
  WaitUntilFilesSettle();
  auto cache = OpenCache(o);
  OpenSource src = OpenSourceFile(Src("big"));
  std::mt19937_64 rng(6);
  for (int i = 0; i < 300; ++i) {
    const uint64_t off = rng() % (content.size() + 1000);
    const size_t len = rng() % (300 << 10);
    const std::string got = Read(*cache, src.file, off, len);
    const std::string want = off < content.size() ? content.substr(off, len) : std::string();
    ASSERT_EQ(got.size(), want.size()) << "offset " << off << " length " << len;
    ASSERT_TRUE(got == want) << "offset " << off << " length " << len;
  }
  EXPECT_EQ(ReadWhole(*cache, src), content);
  // Past the end: empty, not an error.
  Result<ReadBuffer> past = cache->Read(src.file, content.size(), 100);
  ASSERT_TRUE(past.ok());
  EXPECT_EQ(past->size, 0u);
  // Each chunk was read from the source exactly once (17 chunks).
  EXPECT_EQ(cache->Stats().source_reads, 17u);

  // A read inside one chunk points into the chunk's shared buffer (no copy); one
  // across two chunks is a fresh buffer.
  Result<ReadBuffer> a = cache->Read(src.file, 100, 1000);
  Result<ReadBuffer> b = cache->Read(src.file, 5000, 1000);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->owner.get(), b->owner.get());
  EXPECT_EQ(b->data - a->data, 4900);
  Result<ReadBuffer> across = cache->Read(src.file, (64 << 10) - 10, 20);
  ASSERT_TRUE(across.ok());
  EXPECT_NE(across->owner.get(), a->owner.get());
  EXPECT_EQ(std::string(across->data, across->size), content.substr((64 << 10) - 10, 20));
}

TEST_P(CacheTest, SsdBudgetIsNeverExceededAndDeadBytesAreReclaimed) {
  CacheOptions o = Options();
  o.ram_budget = 0;  // every repeated read goes to the SSD tier
  o.chunk_size = 64 << 10;
  o.disk_budget = 2 << 20;
  o.pack_size = 256 << 10;
  constexpr int kFiles = 24;
  std::vector<std::string> contents;
  for (int i = 0; i < kFiles; ++i) {
    contents.push_back(RandomBytes(60'000, 100 + i));
    WriteFile(Src(std::to_string(i)), contents.back());
  }
  WaitUntilFilesSettle();
  auto cache = OpenCache(o);
  auto read_all = [&] {
    for (int i = 0; i < kFiles; ++i) {
      OpenSource src = OpenSourceFile(Src(std::to_string(i)));
      ASSERT_EQ(ReadWhole(*cache, src), contents[i]) << i;
    }
    ASSERT_TRUE(cache->Flush().ok());
    EXPECT_LE(cache->Stats().ssd.bytes, o.disk_budget);
    EXPECT_LE(PackBytesOnDisk(), o.disk_budget);
  };
  read_all();
  EXPECT_EQ(cache->Stats().ssd.entries, static_cast<uint64_t>(kFiles));

  // Rewrite two files in three: their old entries die, and room for the new ones must
  // come from compacting packs that are now mostly dead.
  for (int i = 0; i < kFiles; ++i) {
    if (i % 3 == 0) continue;
    contents[i] = RandomBytes(60'000, 200 + i);
    WriteFile(Src(std::to_string(i)), contents[i]);
  }
  WaitUntilFilesSettle();
  read_all();
  CacheStats s = cache->Stats();
  EXPECT_GT(s.ssd.packs_reclaimed, 0u);
  EXPECT_GE(s.stale_entries, 16u);

  // More data than the budget: the tier fills up and then admits nothing new.
  std::vector<std::string> more;
  for (int i = 0; i < 40; ++i) {
    more.push_back(RandomBytes(60'000, 300 + i));
    WriteFile(Src("more" + std::to_string(i)), more.back());
  }
  WaitUntilFilesSettle();
  for (int i = 0; i < 40; ++i) {
    OpenSource src = OpenSourceFile(Src("more" + std::to_string(i)));
    ASSERT_EQ(ReadWhole(*cache, src), more[i]);
  }
  ASSERT_TRUE(cache->Flush().ok());
  s = cache->Stats();
  EXPECT_GT(s.ssd.writes_dropped, 0u);
  EXPECT_LE(s.ssd.bytes, o.disk_budget);
  EXPECT_LE(PackBytesOnDisk(), o.disk_budget);
  cache.reset();

  // Everything still reads back exactly after a restart.
  cache = OpenCache(o);
  read_all();
  for (int i = 0; i < 40; ++i) {
    OpenSource src = OpenSourceFile(Src("more" + std::to_string(i)));
    ASSERT_EQ(ReadWhole(*cache, src), more[i]);
  }
}

TEST_P(CacheTest, FullDiskDegradesButReadsStayCorrect) {
  auto io = std::make_shared<FaultInjectingIoEngine>(NewIoEngine(GetParam()));
  io->FailWrites(ENOSPC);
  const std::string content = RandomBytes(70'000, 7);
  WriteFile(Src("f"), content);
  WaitUntilFilesSettle();
  CacheOptions o = Options();
  o.ram_budget = 0;
  auto cache = OpenCacheWith(o, io);
  ASSERT_TRUE(cache);
  OpenSource src = OpenSourceFile(Src("f"));
  EXPECT_EQ(ReadWhole(*cache, src), content);
  Status flushed = cache->Flush();
  EXPECT_EQ(flushed.code(), Code::kNoSpace) << flushed.ToString();
  CacheStats s = cache->Stats();
  EXPECT_TRUE(s.ssd.degraded);
  EXPECT_NE(s.ssd.degraded_reason.find("injected write fault"), std::string::npos)
      << s.ssd.degraded_reason;
  EXPECT_GT(io->failed_writes(), 0u);
  // Reads keep working (from the source) and further writes are not attempted.
  const uint64_t writes_before = io->writes();
  for (int i = 0; i < 3; ++i) {
    Tier tier;
    EXPECT_EQ(ReadWhole(*cache, src, &tier), content);
    EXPECT_EQ(tier, Tier::kSource);
  }
  ASSERT_FALSE(cache->Flush().ok());
  EXPECT_EQ(io->writes(), writes_before);
  EXPECT_GE(cache->Stats().ssd.writes_dropped, 3u);
}

TEST_P(CacheTest, LowFreeSpaceDegrades) {
  CacheOptions o = Options();
  o.min_free_bytes = uint64_t{1} << 62;  // more than any disk has
  WriteFile(Src("f"), "some bytes");
  WaitUntilFilesSettle();
  auto cache = OpenCache(o);
  OpenSource src = OpenSourceFile(Src("f"));
  EXPECT_EQ(ReadWhole(*cache, src), "some bytes");
  EXPECT_EQ(cache->Flush().code(), Code::kNoSpace);
  CacheStats s = cache->Stats();
  EXPECT_TRUE(s.ssd.degraded);
  EXPECT_NE(s.ssd.degraded_reason.find("min_free_bytes"), std::string::npos);
  EXPECT_EQ(s.ssd.packs, 0u);
  // The RAM tier still works.
  Tier tier;
  EXPECT_EQ(ReadWhole(*cache, src, &tier), "some bytes");
  EXPECT_EQ(tier, Tier::kRam);
}

TEST_P(CacheTest, DegradedTierResumesAfterTheRetryDelay) {
  auto io = std::make_shared<FaultInjectingIoEngine>(NewIoEngine(GetParam()));
  io->FailWrites(EIO);
  CacheOptions o = Options();
  o.ram_budget = 0;
  Result<std::unique_ptr<Cache>> opened = OpenCacheWithIoEngine(
      o, io, [](SsdTierOptions* t) { t->degraded_retry = std::chrono::milliseconds(100); });
  ASSERT_TRUE(opened.ok());
  Cache& cache = **opened;
  WriteFile(Src("a"), RandomBytes(5000, 1));
  WriteFile(Src("b"), RandomBytes(5000, 2));
  WaitUntilFilesSettle();
  OpenSource a = OpenSourceFile(Src("a"));
  ReadWhole(cache, a);
  EXPECT_EQ(cache.Flush().code(), Code::kIoError);
  io->FailWrites(0);
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  OpenSource b = OpenSourceFile(Src("b"));
  ReadWhole(cache, b);
  EXPECT_TRUE(cache.Flush().ok());
  EXPECT_FALSE(cache.Stats().ssd.degraded);
  Tier tier;
  ReadWhole(cache, b, &tier);
  EXPECT_EQ(tier, Tier::kSsd);
}

// Compressible chunks fill the write queue (counted uncompressed) while their pack
// bytes stay far below the sync threshold: the writer must sync for the queue's sake,
// not leave readers waiting out the sync interval and then dropping their chunks.
TEST_P(CacheTest, CompressibleFillsNeverWaitForTheSyncInterval) {
  CacheOptions o = Options();
  o.ram_budget = 0;
  o.sync_interval_ms = 60'000;  // a stall would last the whole interval
  o.ssd_write_queue_bytes = 1 << 20;  // four 256 KiB chunks
  const std::string zeros(1 << 20, '\0');
  for (int i = 0; i < 12; ++i) WriteFile(Src("z" + std::to_string(i)), zeros);
  WaitUntilFilesSettle();
  auto cache = OpenCache(o);
  for (int i = 0; i < 12; ++i) {
    OpenSource src = OpenSourceFile(Src("z" + std::to_string(i)));
    EXPECT_EQ(ReadWhole(*cache, src), zeros);
  }
  ASSERT_TRUE(cache->Flush().ok());
  const CacheStats s = cache->Stats();
  EXPECT_EQ(s.ssd.writes_dropped, 0u);
  EXPECT_EQ(s.ssd.entries, 48u);
  EXPECT_EQ(s.ssd.compressed_entries, 48u);
}

TEST_P(CacheTest, RacilyCleanFileIsServedButNotAdmitted) {
  auto cache = OpenCache(Options());
  const std::string content = RandomBytes(30'000, 8);
  WriteFile(Src("fresh"), content);  // ctime is "now"
  OpenSource src = OpenSourceFile(Src("fresh"));
  Tier tier;
  EXPECT_EQ(ReadWhole(*cache, src, &tier), content);
  EXPECT_EQ(tier, Tier::kSource);
  EXPECT_EQ(ReadWhole(*cache, src, &tier), content);
  EXPECT_EQ(tier, Tier::kSource);
  CacheStats s = cache->Stats();
  EXPECT_EQ(s.not_admitted, 2u);
  EXPECT_EQ(s.source_reads, 2u);
  EXPECT_EQ(s.ram_entries, 0u);
  ASSERT_TRUE(cache->Flush().ok());
  EXPECT_EQ(cache->Stats().ssd.writes, 0u);
  // Once the ctime is safely in the past, the same file is admitted.
  WaitUntilFilesSettle();
  ReadWhole(*cache, src);
  EXPECT_EQ(ReadWhole(*cache, src, &tier), content);
  EXPECT_EQ(tier, Tier::kRam);
}

TEST_P(CacheTest, FileThatShrankUnderneathIsServedShortAndNotAdmitted) {
  const std::string content = RandomBytes(100'000, 9);
  WriteFile(Src("f"), content);
  WaitUntilFilesSettle();
  auto cache = OpenCache(Options());
  OpenSource src = OpenSourceFile(Src("f"));  // identity says 100'000 bytes
  ASSERT_EQ(::truncate(Src("f").c_str(), 40'000), 0);
  Tier tier;
  EXPECT_EQ(ReadWhole(*cache, src, &tier), content.substr(0, 40'000));
  EXPECT_EQ(cache->Stats().not_admitted, 1u);
  EXPECT_EQ(cache->Stats().ram_entries, 0u);
}

TEST_P(CacheTest, SourceErrorsFailTheReadAndOnlyThatRead) {
  auto io = std::make_shared<FaultInjectingIoEngine>(NewIoEngine(GetParam()));
  CacheOptions o = Options();
  o.disk_budget = 0;  // only source reads go through the engine
  auto cache = OpenCacheWith(o, io);
  const std::string content = RandomBytes(1000, 10);
  WriteFile(Src("f"), content);
  WaitUntilFilesSettle();
  OpenSource src = OpenSourceFile(Src("f"));
  io->FailNthRead(1, EIO);
  Result<ReadBuffer> failed = cache->Read(src.file, 0, 1000);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), Code::kIoError);
  EXPECT_EQ(failed.status().err(), EIO);
  EXPECT_EQ(ReadWhole(*cache, src), content);
}

TEST_P(CacheTest, FailedPackReadIsAMissAndCounted) {
  const std::string content = RandomBytes(50'000, 11);
  WriteFile(Src("f"), content);
  WaitUntilFilesSettle();
  {
    auto cache = OpenCache(Options());
    OpenSource src = OpenSourceFile(Src("f"));
    ReadWhole(*cache, src);
    ASSERT_TRUE(cache->Flush().ok());
  }
  auto io = std::make_shared<FaultInjectingIoEngine>(NewIoEngine(GetParam()));
  auto cache = OpenCacheWith(Options(), io);
  io->FailNthRead(2, EIO);  // 1: the pack's file header, 2: the entry
  OpenSource src = OpenSourceFile(Src("f"));
  Tier tier;
  EXPECT_EQ(ReadWhole(*cache, src, &tier), content);
  EXPECT_EQ(tier, Tier::kSource);
  CacheStats s = cache->Stats();
  EXPECT_EQ(s.ssd.read_errors, 1u);
  EXPECT_EQ(s.ssd.corrupt_entries, 0u);
  EXPECT_EQ(s.source_reads, 1u);
}

TEST_P(CacheTest, ReadRightAfterAFillFindsThePendingEntry) {
  CacheOptions o = Options();
  o.ram_budget = 0;
  o.sync_interval_ms = 60'000;  // nothing reaches the index during the test
  auto cache = OpenCache(o);
  const std::string content = RandomBytes(40'000, 12);
  WriteFile(Src("f"), content);
  WaitUntilFilesSettle();
  OpenSource src = OpenSourceFile(Src("f"));
  ReadWhole(*cache, src);
  Tier tier;
  EXPECT_EQ(ReadWhole(*cache, src, &tier), content);
  EXPECT_EQ(tier, Tier::kSsd);
  EXPECT_EQ(cache->Stats().source_reads, 1u);
}

TEST_P(CacheTest, InvalidateDropsEveryTier) {
  const std::string content = RandomBytes(40'000, 13);
  WriteFile(Src("f"), content);
  WaitUntilFilesSettle();
  OpenSource src = OpenSourceFile(Src("f"));
  {
    auto cache = OpenCache(Options());
    ReadWhole(*cache, src);
    ASSERT_TRUE(cache->Flush().ok());
    EXPECT_EQ(cache->Stats().ssd.entries, 1u);
    cache->Invalidate(src.file.id.dev, src.file.id.ino);
    EXPECT_EQ(cache->Stats().ssd.entries, 0u);
    EXPECT_EQ(cache->Stats().ram_entries, 0u);
  }
  auto cache = OpenCache(Options());
  Tier tier;
  EXPECT_EQ(ReadWhole(*cache, src, &tier), content);
  EXPECT_EQ(tier, Tier::kSource);
}

TEST_P(CacheTest, IndexIsRebuiltFromPacks) {
  std::vector<std::string> contents;
  for (int i = 0; i < 5; ++i) {
    contents.push_back(i % 2 ? TextBytes(30'000, i) : RandomBytes(30'000, i));
    WriteFile(Src(std::to_string(i)), contents.back());
  }
  WaitUntilFilesSettle();
  {
    auto cache = OpenCache(Options());
    for (int i = 0; i < 5; ++i) ReadWhole(*cache, OpenSourceFile(Src(std::to_string(i))));
    ASSERT_TRUE(cache->Flush().ok());
  }
  fs::remove_all(dir_ / "cache" / "index");
  auto cache = OpenCache(Options());
  EXPECT_EQ(cache->Stats().ssd.entries, 5u);
  for (int i = 0; i < 5; ++i) {
    Tier tier;
    EXPECT_EQ(ReadWhole(*cache, OpenSourceFile(Src(std::to_string(i))), &tier), contents[i]);
    EXPECT_NE(tier, Tier::kSource);
  }
  EXPECT_EQ(cache->Stats().source_reads, 0u);
}

TEST_P(CacheTest, TornPackTailLosesOnlyTheTornEntries) {
  std::vector<std::string> contents;
  for (int i = 0; i < 4; ++i) {
    contents.push_back(RandomBytes(30'000, 500 + i));
    WriteFile(Src(std::to_string(i)), contents.back());
  }
  WaitUntilFilesSettle();
  {
    auto cache = OpenCache(Options());
    for (int i = 0; i < 4; ++i) ReadWhole(*cache, OpenSourceFile(Src(std::to_string(i))));
    ASSERT_TRUE(cache->Flush().ok());
  }
  // As if the machine died while the last entry was being written: cut it in half.
  std::vector<fs::path> packs;
  for (const auto& e : fs::directory_iterator(dir_ / "cache" / "packs")) packs.push_back(e.path());
  ASSERT_EQ(packs.size(), 1u);
  fs::resize_file(packs[0], fs::file_size(packs[0]) - 15'000);

  // With the index intact, the record that points past the end is dropped at start-up.
  {
    auto cache = OpenCache(Options());
    EXPECT_EQ(cache->Stats().ssd.entries, 3u);
    EXPECT_EQ(cache->Stats().ssd.dangling_records, 1u);
    for (int i = 0; i < 4; ++i) {
      Tier tier;
      EXPECT_EQ(ReadWhole(*cache, OpenSourceFile(Src(std::to_string(i))), &tier), contents[i]);
      EXPECT_EQ(tier == Tier::kSource, i == 3) << i;
    }
  }
  // With the index lost too, the rebuild stops at the torn tail; nothing is lost
  // that was whole (the fourth file was re-cached into a new pack meanwhile).
  fs::remove_all(dir_ / "cache" / "index");
  auto cache = OpenCache(Options());
  EXPECT_EQ(cache->Stats().ssd.entries, 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(ReadWhole(*cache, OpenSourceFile(Src(std::to_string(i)))), contents[i]);
  }
  EXPECT_EQ(cache->Stats().source_reads, 0u);
}

// A pack whose file header is damaged loses its entries: each read is a miss served
// from the source, and the records are dropped and counted as corrupt.
TEST_P(CacheTest, PackWithABadHeaderIsCountedAndServedFromTheSource) {
  const std::string content = RandomBytes(30'000, 901);
  WriteFile(Src("f"), content);
  WaitUntilFilesSettle();
  {
    auto cache = OpenCache(Options());
    ReadWhole(*cache, OpenSourceFile(Src("f")));
    ASSERT_TRUE(cache->Flush().ok());
  }
  for (const auto& e : fs::directory_iterator(dir_ / "cache" / "packs")) {
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    f.write("XXXX", 4);  // the magic
  }
  auto cache = OpenCache(Options());
  Tier tier;
  EXPECT_EQ(ReadWhole(*cache, OpenSourceFile(Src("f")), &tier), content);
  EXPECT_EQ(tier, Tier::kSource);
  EXPECT_GE(cache->Stats().ssd.corrupt_entries, 1u);
  // The warning ("cannot read pack 1 ...: bad magic") goes to the daemon's log; the
  // library's logger is not reachable from this binary to capture it.
}

TEST_P(CacheTest, ReadAroundMovesNeighboursToRam) {
  constexpr int kFiles = 30;
  std::vector<std::string> contents;
  for (int i = 0; i < kFiles; ++i) {
    contents.push_back(RandomBytes(20'000, 400 + i));
    WriteFile(Src(std::to_string(i)), contents.back());
  }
  WaitUntilFilesSettle();
  {
    auto cache = OpenCache(Options());
    for (int i = 0; i < kFiles; ++i) ReadWhole(*cache, OpenSourceFile(Src(std::to_string(i))));
    ASSERT_TRUE(cache->Flush().ok());
  }
  auto cache = OpenCache(Options());
  int ram = 0;
  for (int i = 0; i < kFiles; ++i) {
    Tier tier;
    ASSERT_EQ(ReadWhole(*cache, OpenSourceFile(Src(std::to_string(i))), &tier), contents[i]);
    ram += tier == Tier::kRam;
  }
  CacheStats s = cache->Stats();
  EXPECT_EQ(s.source_reads, 0u);
  EXPECT_GT(s.ssd.read_around_entries, 0u);
  // 30 entries of ~20 KB in 256 KiB windows: a handful of SSD reads serve them all.
  EXPECT_GE(ram, kFiles / 2);
  EXPECT_LE(s.ssd_hits, 8u);
}

// Fills the SSD tier with `n` files of about `size` bytes (one chunk each), restarts
// the cache, and returns the files' contents.
class StreamTest : public CacheTest {
 protected:
  std::vector<std::string> FillSsd(int n, size_t size) {
    std::vector<std::string> contents;
    for (int i = 0; i < n; ++i) {
      contents.push_back(RandomBytes(size - static_cast<size_t>(i) * 7, 900 + i));
      WriteFile(Src(std::to_string(i)), contents.back());
    }
    WaitUntilFilesSettle();
    auto cache = OpenCache(Options());
    for (int i = 0; i < n; ++i) ReadWhole(*cache, OpenSourceFile(Src(std::to_string(i))));
    EXPECT_TRUE(cache->Flush().ok());
    return contents;
  }
  // Flips a byte in the middle of the cache's only pack: inside the data of one of the
  // middle entries. False when there is not exactly one pack.
  bool FlipAByteInTheMiddleOfTheOnlyPack() const {
    std::vector<fs::path> packs;
    for (const auto& e : fs::directory_iterator(dir_ / "cache" / "packs")) packs.push_back(e.path());
    if (packs.size() != 1) return false;
    std::fstream f(packs[0], std::ios::in | std::ios::out | std::ios::binary);
    const auto middle = static_cast<std::streamoff>(fs::file_size(packs[0]) / 2);
    f.seekg(middle);
    char c;
    f.get(c);
    f.seekp(middle);
    f.put(static_cast<char>(c ^ 0x01));
    return static_cast<bool>(f);
  }
  std::vector<SourceIdentity> Identities(int n) const {
    std::vector<SourceIdentity> ids;
    for (int i = 0; i < n; ++i) ids.push_back(OpenSourceFile(Src(std::to_string(i))).file.id);
    return ids;
  }
};

// After a restart, 60 files stream into RAM in a few large reads; every later read is a
// byte-exact RAM hit; the pack bytes did not also land in the page cache.
TEST_P(StreamTest, BringsFilesIntoRamInFewLargeReads) {
  constexpr int kFiles = 60;
  const std::vector<std::string> contents = FillSsd(kFiles, 50'000);
  auto cache = OpenCache(Options());
  std::vector<SourceIdentity> ids = Identities(kFiles);
  std::reverse(ids.begin(), ids.end());  // any order: the cache sorts by pack position
  const std::vector<bool> in_ram = cache->StreamFromSsd(ids);
  EXPECT_EQ(std::count(in_ram.begin(), in_ram.end(), true), kFiles);
  CacheStats s = cache->Stats();
  EXPECT_EQ(s.ssd.streamed_entries, static_cast<uint64_t>(kFiles));
  // 3 MB in runs of at most 4 MiB (packs of 4 MiB here): one or two reads.
  EXPECT_LE(s.ssd.stream_ios, 3u);
  EXPECT_GE(s.ssd.stream_bytes, 60u * 49'000);
  for (int i = 0; i < kFiles; ++i) {
    Tier tier;
    ASSERT_EQ(ReadWhole(*cache, OpenSourceFile(Src(std::to_string(i))), &tier), contents[i]);
    EXPECT_EQ(tier, Tier::kRam) << i;
  }
  EXPECT_EQ(cache->Stats().source_reads, 0u);
  EXPECT_EQ(cache->Stats().ssd_hits, 0u);
  for (const auto& e : fs::directory_iterator(dir_ / "cache" / "packs")) {
    EXPECT_LE(testing::ResidentPages(e.path()), 2u) << e.path();  // O_DIRECT: not cached
  }
}

// A damaged entry in the middle of a streamed run is dropped and counted; its
// neighbours stream; its own read comes from the source, byte-exact.
TEST_P(StreamTest, CorruptEntryInARunIsDroppedAndReadFromTheSource) {
  constexpr int kFiles = 20;
  const std::vector<std::string> contents = FillSsd(kFiles, 30'000);
  ASSERT_TRUE(FlipAByteInTheMiddleOfTheOnlyPack());
  auto cache = OpenCache(Options());
  const std::vector<bool> in_ram = cache->StreamFromSsd(Identities(kFiles));
  EXPECT_EQ(std::count(in_ram.begin(), in_ram.end(), false), 1);
  EXPECT_EQ(cache->Stats().ssd.corrupt_entries, 1u);
  EXPECT_EQ(cache->Stats().ssd.streamed_entries, static_cast<uint64_t>(kFiles - 1));
  for (int i = 0; i < kFiles; ++i) {
    Tier tier;
    ASSERT_EQ(ReadWhole(*cache, OpenSourceFile(Src(std::to_string(i))), &tier), contents[i]);
    EXPECT_EQ(tier, in_ram[i] ? Tier::kRam : Tier::kSource) << i;
  }
  EXPECT_EQ(cache->Stats().source_reads, 1u);
}

// A file changed since it was cached is not streamed (its record is dropped as stale),
// and its read serves the new bytes.
TEST_P(StreamTest, ChangedFileIsNeverStreamed) {
  constexpr int kFiles = 10;
  FillSsd(kFiles, 20'000);
  const std::string fresh = RandomBytes(20'000, 77);
  WriteFile(Src("3"), fresh);
  WaitUntilFilesSettle();
  auto cache = OpenCache(Options());
  const std::vector<bool> in_ram = cache->StreamFromSsd(Identities(kFiles));
  for (int i = 0; i < kFiles; ++i) EXPECT_EQ(in_ram[i], i != 3) << i;
  EXPECT_EQ(cache->Stats().stale_entries, 1u);
  EXPECT_EQ(cache->Stats().ram_entries, static_cast<uint64_t>(kFiles - 1));
  Tier tier;
  EXPECT_EQ(ReadWhole(*cache, OpenSourceFile(Src("3")), &tier), fresh);
  EXPECT_EQ(tier, Tier::kSource);
}

// Streaming never takes the RAM tier past its budget: what does not fit is refused.
TEST_P(StreamTest, RamBudgetHoldsWhileStreaming) {
  constexpr int kFiles = 40;
  FillSsd(kFiles, 50'000);
  CacheOptions o = Options();
  o.ram_budget = 10 * 50'000;
  o.ram_policy = RamPolicy::kStatic;
  auto cache = OpenCache(o);
  const std::vector<bool> in_ram = cache->StreamFromSsd(Identities(kFiles));
  const auto streamed = std::count(in_ram.begin(), in_ram.end(), true);
  EXPECT_GT(streamed, 0);
  EXPECT_LT(streamed, kFiles);
  EXPECT_LE(cache->Stats().ram_bytes, o.ram_budget);
}

// A taker gets each file stored whole straight from the stream, verified and
// byte-exact; what it takes is not copied into RAM (a later read comes from the SSD
// tier), what it refuses is, and a damaged entry never reaches it.
TEST_P(StreamTest, ATakerGetsVerifiedWholeFilesThatThenStayOutOfRam) {
  constexpr int kFiles = 20;
  const std::vector<std::string> contents = FillSsd(kFiles, 30'000);
  ASSERT_TRUE(FlipAByteInTheMiddleOfTheOnlyPack());
  CacheOptions o = Options();
  o.read_around = false;  // a taken file's read then shows where it came from
  auto cache = OpenCache(o);
  const std::vector<SourceIdentity> ids = Identities(kFiles);
  std::map<uint64_t, int> index_of;  // by inode
  for (int i = 0; i < kFiles; ++i) index_of[ids[i].ino] = i;
  std::map<int, int> offered;  // file -> times offered
  const std::vector<bool> brought =
      cache->StreamFromSsd(ids, [&](const SourceIdentity& id, std::span<const char> bytes) {
        const int i = index_of.at(id.ino);
        ++offered[i];
        EXPECT_EQ(id, ids[i]);
        EXPECT_EQ(std::string(bytes.data(), bytes.size()), contents[i]) << i;
        return i % 2 == 0;  // takes the even ones
      });
  ASSERT_EQ(std::count(brought.begin(), brought.end(), false), 1);
  const int damaged = static_cast<int>(std::find(brought.begin(), brought.end(), false) - brought.begin());
  EXPECT_EQ(offered.count(damaged), 0u) << "a damaged entry was offered";
  EXPECT_EQ(offered.size(), static_cast<size_t>(kFiles - 1));
  for (const auto& [i, times] : offered) EXPECT_EQ(times, 1) << i;
  EXPECT_EQ(cache->Stats().ssd.streamed_entries, static_cast<uint64_t>(kFiles - 1));
  for (int i = 0; i < kFiles; ++i) {
    Tier tier;
    ASSERT_EQ(ReadWhole(*cache, OpenSourceFile(Src(std::to_string(i))), &tier), contents[i]);
    const Tier expected = i == damaged ? Tier::kSource : i % 2 == 0 ? Tier::kSsd : Tier::kRam;
    EXPECT_EQ(tier, expected) << i;
  }
}

// A file of several chunks is never offered to the taker (it takes whole files only):
// its chunks stream into RAM.
TEST_P(StreamTest, AFileOfSeveralChunksIsNotOfferedToTheTaker) {
  const std::string content = RandomBytes(600'000, 31);  // 3 chunks of 256 KiB
  WriteFile(Src("big"), content);
  WaitUntilFilesSettle();
  {
    auto cache = OpenCache(Options());
    ReadWhole(*cache, OpenSourceFile(Src("big")));
    ASSERT_TRUE(cache->Flush().ok());
  }
  auto cache = OpenCache(Options());
  const SourceIdentity id = OpenSourceFile(Src("big")).file.id;
  int offered = 0;
  const std::vector<bool> brought = cache->StreamFromSsd(
      std::vector<SourceIdentity>{id}, [&](const SourceIdentity&, std::span<const char>) {
        ++offered;
        return true;
      });
  EXPECT_EQ(offered, 0);
  ASSERT_EQ(brought, std::vector<bool>{true});
  Tier tier;
  EXPECT_EQ(ReadWhole(*cache, OpenSourceFile(Src("big")), &tier), content);
  EXPECT_EQ(tier, Tier::kRam);
}

INSTANTIATE_TEST_SUITE_P(Engines, StreamTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "IoUring" : "Pread"; });

TEST_P(CacheTest, ConcurrentReadersOfOneFileReadEachChunkOnce) {
  CacheOptions o = Options();
  o.chunk_size = 64 << 10;
  const std::string content = RandomBytes(2 << 20, 14);  // 32 chunks
  WriteFile(Src("big"), content);
  WaitUntilFilesSettle();
  auto cache = OpenCache(o);
  OpenSource src = OpenSourceFile(Src("big"));
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::vector<uint64_t> offsets;
      for (uint64_t off = 0; off < content.size(); off += 16 << 10) offsets.push_back(off);
      std::shuffle(offsets.begin(), offsets.end(), std::mt19937_64(t));
      for (uint64_t off : offsets) {
        Result<ReadBuffer> r = cache->Read(src.file, off, 16 << 10);
        if (!r.ok() ||
            std::string_view(r->data, r->size) != std::string_view(content).substr(off, 16 << 10)) {
          ++bad;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(cache->Stats().source_reads, 32u);
}

TEST_P(CacheTest, RamOnlyCacheWritesNothingToDisk) {
  CacheOptions o = Options();
  o.disk_budget = 0;
  auto cache = OpenCache(o);
  WriteFile(Src("f"), "ram only");
  WaitUntilFilesSettle();
  OpenSource src = OpenSourceFile(Src("f"));
  Tier tier;
  EXPECT_EQ(ReadWhole(*cache, src, &tier), "ram only");
  EXPECT_EQ(ReadWhole(*cache, src, &tier), "ram only");
  EXPECT_EQ(tier, Tier::kRam);
  EXPECT_TRUE(cache->Flush().ok());
  EXPECT_FALSE(fs::exists(dir_ / "cache"));
}

TEST_P(CacheTest, BadOptionsAreRejected) {
  CacheOptions o = Options();
  o.chunk_size = 0;
  EXPECT_EQ(Cache::Open(o).status().code(), Code::kInvalidArgument);
  o = Options();
  o.min_compression_saving = 1.5;
  EXPECT_EQ(Cache::Open(o).status().code(), Code::kInvalidArgument);
  o = Options();
  o.cache_dir.clear();
  EXPECT_EQ(Cache::Open(o).status().code(), Code::kInvalidArgument);
  o = Options();
  o.disk_budget = 1 << 20;  // less than eight 256 KiB chunks
  EXPECT_EQ(Cache::Open(o).status().code(), Code::kInvalidArgument);
}

// A push checks after its store that the tier still holds the file's kernel entries
// (kernel_cache/page_cache_pusher.cc): an entry let go of while its store was on its way (a
// lowered budget, an eviction) had its drop reported then, maybe before the pages
// arrived, so the pusher drops them again.
TEST_P(CacheTest, AKernelEntryLetGoOfDuringItsStoreIsNoLongerHeld) {
  const std::string a_bytes = RandomBytes(100'000, 1);
  WriteFile(Src("a"), a_bytes);
  WriteFile(Src("b"), RandomBytes(100'000, 2));
  WaitUntilFilesSettle();
  std::vector<uint64_t> dropped;
  CacheOptions o = Options();
  o.drop_kernel_pages = [&](uint64_t, uint64_t ino) { dropped.push_back(ino); };
  auto cache = OpenCache(o);
  ASSERT_TRUE(cache);
  OpenSource a = OpenSourceFile(Src("a"));
  OpenSource b = OpenSourceFile(Src("b"));
  ASSERT_EQ(ReadWhole(*cache, a), a_bytes);
  ReadWhole(*cache, b);
  EXPECT_FALSE(cache->HoldsInKernel(a.file.id));  // bytes in RAM, nothing pushed yet

  std::string stored;
  ASSERT_TRUE(cache->MoveToKernel(a.file.id, [&](uint64_t, std::span<const char> bytes) {
    stored.assign(bytes.data(), bytes.size());
    return true;
  }));
  EXPECT_EQ(stored, a_bytes);
  EXPECT_TRUE(cache->HoldsInKernel(a.file.id));
  EXPECT_TRUE(dropped.empty());

  // b's store meets a budget lowered to nothing: both files' entries go (their drops
  // reported while b's store is still on its way), and neither is held any more.
  ASSERT_TRUE(cache->MoveToKernel(b.file.id, [&](uint64_t, std::span<const char>) {
    cache->SetRamBudget(0);
    return true;
  }));
  EXPECT_FALSE(cache->HoldsInKernel(b.file.id));
  EXPECT_FALSE(cache->HoldsInKernel(a.file.id));
  std::sort(dropped.begin(), dropped.end());
  EXPECT_EQ(dropped, (std::vector<uint64_t>{std::min(a.file.id.ino, b.file.id.ino),
                                            std::max(a.file.id.ino, b.file.id.ino)}));
  EXPECT_EQ(cache->RamUsage().bytes, 0u);
  EXPECT_EQ(cache->RamUsage().budget, 0u);
}

TEST_P(CacheTest, SecondCacheOnTheSameDirectoryIsRefused) {
  auto first = OpenCache(Options());
  ASSERT_TRUE(first);
  Result<std::unique_ptr<Cache>> second = Cache::Open(Options());
  EXPECT_EQ(second.status().code(), Code::kBusy) << second.status().ToString();
}

INSTANTIATE_TEST_SUITE_P(Engines, CacheTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "IoUring" : "Pread"; });

}  // namespace
}  // namespace epochfs::cache

namespace epochfs::cache {
namespace {

using testing::OpenSource;
using testing::OpenSourceFile;
using testing::RandomBytes;
using testing::TempDir;
using testing::WaitUntilFilesSettle;
using testing::WriteFile;

// Source reads wait at a gate until the test opens it: before they read, or, with
// `read_first`, after.
class GatedIoEngine final : public IoEngine {
 public:
  explicit GatedIoEngine(std::unique_ptr<IoEngine> inner, bool read_first = false)
      : inner_(std::move(inner)), read_first_(read_first) {}
  void Open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  Result<size_t> ReadAt(int fd, void* buf, size_t len, uint64_t offset) override {
    if (!read_first_) Wait();
    auto result = inner_->ReadAt(fd, buf, len, offset);
    if (read_first_) Wait();
    return result;
  }
  Status ReadBatch(std::span<ReadOp> ops) override {
    if (!read_first_) Wait();
    Status status = inner_->ReadBatch(ops);
    if (read_first_) Wait();
    return status;
  }
  Status WriteAt(int fd, const void* buf, size_t len, uint64_t offset) override {
    return inner_->WriteAt(fd, buf, len, offset);
  }
  Status DataSync(int fd) override { return inner_->DataSync(fd); }
  bool is_io_uring() const override { return inner_->is_io_uring(); }

 private:
  void Wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return open_; });
  }
  const std::unique_ptr<IoEngine> inner_;
  const bool read_first_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

// A cache with no SSD tier whose source reads go through `io`.
std::unique_ptr<Cache> OpenRamOnlyCache(const fs::path& cache_dir, std::shared_ptr<IoEngine> io,
                                        DemandObserver* demand_observer = nullptr) {
  CacheOptions o;
  o.cache_dir = cache_dir;
  o.disk_budget = 0;
  o.demand_observer = demand_observer;
  auto opened = OpenCacheWithIoEngine(o, std::move(io));
  EXPECT_TRUE(opened.ok()) << opened.status().ToString();
  return opened.ok() ? std::move(opened).value() : nullptr;
}

// Waits (up to 1 s) until a demand read is filling from below, then a little longer, so
// that it has reached the gate.
void WaitForADemandFillAtTheGate(Cache& cache) {
  for (int i = 0; i < 500 && cache.DemandFillsInFlight() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

// Readahead holds back while demand reads fill from below: the cache counts those, and
// only those (a prefetch is not a demand).
TEST(CacheDemandFills, CountsDemandFillsNotPrefetches) {
  TempDir dir;
  WriteFile(dir / "a", RandomBytes(5000, 1));
  WriteFile(dir / "b", RandomBytes(5000, 2));
  WaitUntilFilesSettle();
  auto io = std::make_shared<GatedIoEngine>(NewIoEngine(false));
  auto opened = OpenRamOnlyCache(dir / "cache", io);
  ASSERT_NE(opened, nullptr);
  Cache& cache = *opened;
  OpenSource a = OpenSourceFile(dir / "a");
  OpenSource b = OpenSourceFile(dir / "b");
  EXPECT_EQ(cache.DemandFillsInFlight(), 0u);
  std::thread prefetch([&] { ASSERT_TRUE(cache.Prefetch(b.file).ok()); });
  std::thread demand([&] { ASSERT_TRUE(cache.Read(a.file, 0, 5000).ok()); });
  WaitForADemandFillAtTheGate(cache);
  // Both are blocked at the gate; only the demand read counts.
  EXPECT_EQ(cache.DemandFillsInFlight(), 1u);
  io->Open();
  prefetch.join();
  demand.join();
  EXPECT_EQ(cache.DemandFillsInFlight(), 0u);
  // A RAM hit is no fill.
  ASSERT_TRUE(cache.Read(a.file, 0, 5000).ok());
  EXPECT_EQ(cache.DemandFillsInFlight(), 0u);
}

class CountingDemandObserver final : public DemandObserver {
 public:
  void OnDemandSourceRead(std::chrono::steady_clock::duration) override { ++reads; }
  std::atomic<int> reads{0};
};

// The pacer learns the source's latency from demand reads that read the source. A read
// that waited on another's read of the same chunk read nothing: reported, its wait (any
// part of the leader's) would pass for the source's latency. Nor does a prefetch that
// waited on a demand read count as a source read of its own.
TEST(CacheCoalescing, OnlyTheReaderThatReadTheSourceCountsASourceRead) {
  TempDir dir;
  WriteFile(dir / "a", RandomBytes(5000, 1));
  WriteFile(dir / "b", RandomBytes(5000, 2));
  WaitUntilFilesSettle();
  {  // readahead leads, the demand read waits on it
    auto io = std::make_shared<GatedIoEngine>(NewIoEngine(false));
    CountingDemandObserver observer;
    auto cache = OpenRamOnlyCache(dir / "cache", io, &observer);
    ASSERT_NE(cache, nullptr);
    OpenSource a = OpenSourceFile(dir / "a");
    Result<PrefetchResult> prefetched = Status::Ok();
    std::thread prefetch([&] { prefetched = cache->Prefetch(a.file); });
    std::this_thread::sleep_for(std::chrono::milliseconds(30));  // it is at the gate
    std::thread demand([&] { EXPECT_TRUE(cache->Read(a.file, 0, 5000).ok()); });
    WaitForADemandFillAtTheGate(*cache);
    io->Open();
    prefetch.join();
    demand.join();
    ASSERT_TRUE(prefetched.ok()) << prefetched.status().ToString();
    EXPECT_EQ(prefetched->source_reads, 1u);
    EXPECT_EQ(cache->Stats().source_reads, 1u) << "the demand read read the chunk again";
    EXPECT_EQ(observer.reads, 0) << "a wait on readahead's read was reported as a source read";
  }
  {  // the demand read leads, readahead waits on it
    auto io = std::make_shared<GatedIoEngine>(NewIoEngine(false));
    CountingDemandObserver observer;
    auto cache = OpenRamOnlyCache(dir / "cache2", io, &observer);
    ASSERT_NE(cache, nullptr);
    OpenSource b = OpenSourceFile(dir / "b");
    std::thread demand([&] { EXPECT_TRUE(cache->Read(b.file, 0, 5000).ok()); });
    WaitForADemandFillAtTheGate(*cache);
    Result<PrefetchResult> prefetched = Status::Ok();
    std::thread prefetch([&] { prefetched = cache->Prefetch(b.file); });
    std::this_thread::sleep_for(std::chrono::milliseconds(30));  // it waits on the leader
    io->Open();
    prefetch.join();
    demand.join();
    ASSERT_TRUE(prefetched.ok()) << prefetched.status().ToString();
    EXPECT_EQ(prefetched->source_reads, 0u) << "readahead counted the demand read's read";
    EXPECT_EQ(cache->Stats().source_reads, 1u);
    EXPECT_EQ(observer.reads, 1);
  }
}

// Coalescing concurrent misses of one chunk must not hand a reader bytes read before a
// change it must see. A source with coarse timestamps (NFS, or a kernel without
// fine-grained ctime) can change a file twice within one tick without changing its
// size: both states have the same identity. Simulated here by a second reader that
// passes the identity the first one saw, after the file was rewritten in place.
TEST(CacheCoalescing, AReaderAfterAChangeWithinOneTimestampTickGetsTheNewBytes) {
  TempDir dir;
  const std::string old_bytes = RandomBytes(5000, 1), new_bytes = RandomBytes(5000, 2);
  WriteFile(dir / "f", old_bytes);  // recent: changed just now
  auto io = std::make_shared<GatedIoEngine>(NewIoEngine(false), /*read_first=*/true);
  auto opened = OpenRamOnlyCache(dir / "cache", io);
  ASSERT_NE(opened, nullptr);
  Cache& cache = *opened;
  auto text = [](const ReadBuffer& b) { return std::string(b.data, b.size); };
  OpenSource first = OpenSourceFile(dir / "f");
  std::string first_got;
  std::thread leader([&] {
    auto read = cache.Read(first.file, 0, 5000);
    ASSERT_TRUE(read.ok());
    first_got = text(*read);
  });
  WaitForADemandFillAtTheGate(cache);  // it has read, and waits
  {
    std::fstream f(dir / "f", std::ios::in | std::ios::out | std::ios::binary);
    f.write(new_bytes.data(), static_cast<std::streamsize>(new_bytes.size()));
  }
  OpenSource second = OpenSourceFile(dir / "f");
  const SourceFile same_tick{second.file.fd, first.file.id, {}};
  std::string second_got;
  std::thread follower([&] {
    auto read = cache.Read(same_tick, 0, 5000);
    ASSERT_TRUE(read.ok());
    second_got = text(*read);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  io->Open();
  leader.join();
  follower.join();
  EXPECT_EQ(first_got, old_bytes);  // it read before the change
  EXPECT_TRUE(second_got == new_bytes) << "the later reader got bytes from before the change";
  // Neither read was admitted: the file changed under both.
  auto again = cache.Read(second.file, 0, 5000);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(text(*again) == new_bytes);
}

// An identity check needs no atime (a FUSE or NFS client would fetch one after each
// read); everything an identity holds must be what fstat() says.
TEST(StatForIdentityTest, GivesWhatFstatGivesButTheAtime) {
  TempDir dir;
  WriteFile(dir / "f", std::string(12345, 'x'));
  UniqueFd fd(::open((dir / "f").c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(fd);
  struct ::stat expected {};
  ASSERT_EQ(::fstat(fd.get(), &expected), 0);

  Result<struct ::stat> by_fd = StatForIdentity(fd.get());
  ASSERT_TRUE(by_fd.ok()) << by_fd.status().ToString();
  EXPECT_EQ(SourceIdentity::FromStat(*by_fd), SourceIdentity::FromStat(expected));
  EXPECT_EQ(by_fd->st_mode, expected.st_mode);
  EXPECT_EQ(by_fd->st_size, 12345);
  EXPECT_EQ(by_fd->st_atim.tv_sec, 0);

  UniqueFd dir_fd(::open(dir.path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(dir_fd);
  Result<struct ::stat> by_name = StatForIdentity(dir_fd.get(), "f", AT_SYMLINK_NOFOLLOW);
  ASSERT_TRUE(by_name.ok()) << by_name.status().ToString();
  EXPECT_EQ(SourceIdentity::FromStat(*by_name), SourceIdentity::FromStat(expected));

  Result<struct ::stat> missing = StatForIdentity(dir_fd.get(), "nope", AT_SYMLINK_NOFOLLOW);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_FALSE(StatForIdentity(-1).ok());
}

}  // namespace
}  // namespace epochfs::cache
