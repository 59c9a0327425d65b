// The Prefetcher's readahead against a real Cache (SSD tier on a temporary directory):
// the order it reads the remaining set in, --prefetch 0, and the source budget.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <fcntl.h>
#include <numeric>
#include <random>
#include <set>
#include <thread>

#include "cache/testing/test_files.h"
#include "prefetcher/prefetcher.h"
#include "prefetcher/readahead_gate.h"
#include "prefetcher/testing/dir_source_tree.h"
#include "prefetcher/testing/fake_clock.h"

namespace epochfs::prefetch {
namespace {

using cache::testing::OpenSourceFile;
using cache::testing::RandomBytes;
using cache::testing::TempDir;
using cache::testing::WriteFile;

std::string Name(uint32_t i) {
  char name[16];
  std::snprintf(name, sizeof(name), "f%04u", i);
  return name;
}

// `n` small files in a temporary directory, a cache over them, and a prefetcher whose
// source tree records the order it fetched files in.
class PrefetcherIo : public ::testing::Test {
 protected:
  static constexpr uint32_t kFiles = 600;

  void SetUp() override {
    std::filesystem::create_directory(dir_ / "src");
    for (uint32_t i = 0; i < kFiles; ++i) {
      WriteFile(dir_ / "src" / Name(i), RandomBytes(4096, i));
      struct stat st;
      ASSERT_EQ(::stat((dir_ / "src" / Name(i)).c_str(), &st), 0);
      keys_.push_back(FileKey{st.st_dev, st.st_ino});
    }
    cache::testing::WaitUntilFilesSettle();
  }

  void OpenCache(uint64_t disk_budget) {
    policy_ = Prefetcher::NewPolicy(64 << 20);
    cache::CacheOptions o;
    o.cache_dir = dir_ / "cache";
    o.ram_budget = 64 << 20;
    o.disk_budget = disk_budget;
    o.min_free_bytes = 0;
    o.ram_policy_override = policy_;
    auto opened = cache::Cache::Open(o);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    cache_ = std::move(*opened);
  }

  // Reads files into the cache in `order` (so the SSD tier writes them in that order).
  void Fill(const std::vector<uint32_t>& order) {
    for (uint32_t i : order) {
      auto src = OpenSourceFile(dir_ / "src" / Name(i));
      ASSERT_TRUE(cache_->Read(src.file, 0, 4096).ok());
    }
    ASSERT_TRUE(cache_->Flush().ok());
  }

  // One fetch at a time, each one an open of the source: the order of the opens is the
  // order readahead chose.
  std::unique_ptr<Prefetcher> StartPrefetcher(PrefetcherOptions o) {
    o.stream_from_ssd = false;
    return Prefetcher::Create(std::move(o), source_, cache_.get(), policy_);
  }

  void Access(Prefetcher& p, uint32_t i) {
    p.OnRead(keys_[i], Name(i), 0);
  }

  // An epoch in name order, then the first 240 files of a shuffled one: enough for the
  // classifier to name it shuffled (with a last order to compare with, it waits 224).
  void SequentialThenShuffled(Prefetcher& p, uint32_t seed) {
    for (uint32_t i = 0; i < kFiles; ++i) Access(p, i);
    std::vector<uint32_t> shuffled(kFiles);
    std::iota(shuffled.begin(), shuffled.end(), 0u);
    std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937(seed));
    for (uint32_t k = 0; k < 240; ++k) Access(p, shuffled[k]);
  }

  // Waits until the prefetcher has issued no new fetch for 300 ms (at most 20 s).
  void WaitQuiet() {
    size_t last = SIZE_MAX;
    for (int i = 0; i < 200; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      const size_t opened = source_.opened().size();
      if (opened == last && i >= 3) return;
      last = opened;
    }
  }

  std::vector<std::string> Opened() { return source_.opened(); }

  TempDir dir_;
  std::vector<FileKey> keys_;
  std::shared_ptr<cache::EvictionPolicy> policy_;
  std::unique_ptr<cache::Cache> cache_;
  // Lists nothing: sequential readahead stays off, as the tests want the other patterns.
  testing::DirSourceTree source_{dir_ / "src", /*can_list=*/false};
};

// The first epoch reads the files in name order; the SSD tier holds them in reverse
// (written that way). In a shuffled epoch, readahead must read the unread files in the
// SSD tier's order (reverse), not in the order they were first seen.
TEST_F(PrefetcherIo, ShuffledReadaheadFollowsPackOrder) {
  OpenCache(64 << 20);
  std::vector<uint32_t> reverse(kFiles);
  std::iota(reverse.rbegin(), reverse.rend(), 0u);
  Fill(reverse);
  PrefetcherOptions o;
  o.threads = 1;  // one fetch at a time: the issue order is the order
  o.lookahead = kFiles;
  auto p = StartPrefetcher(std::move(o));
  SequentialThenShuffled(*p, 7);
  ASSERT_EQ(p->Stats().epoch, 1u);
  ASSERT_EQ(p->Stats().pattern, Pattern::kShuffled);
  WaitQuiet();
  const std::vector<std::string> opened = Opened();
  ASSERT_GE(opened.size(), 150u) << "the remaining set should be read ahead";
  EXPECT_TRUE(std::is_sorted(opened.rbegin(), opened.rend()))
      << "not in pack order: " << opened.front() << ", " << opened[1] << ", ...";
}

// Without an SSD tier there is no pack order: first-seen order it is.
TEST_F(PrefetcherIo, WithoutSsdTierShuffledReadaheadKeepsFirstSeenOrder) {
  OpenCache(0);
  PrefetcherOptions o;
  o.threads = 1;
  o.lookahead = kFiles;
  auto p = StartPrefetcher(std::move(o));
  SequentialThenShuffled(*p, 8);
  ASSERT_EQ(p->Stats().pattern, Pattern::kShuffled);
  WaitQuiet();
  const std::vector<std::string> opened = Opened();
  ASSERT_GE(opened.size(), 150u);
  EXPECT_TRUE(std::is_sorted(opened.begin(), opened.end()));
}

// The first epoch: nothing was read before it, so its remaining set is what the reader
// listed. Once the accesses show a shuffle, readahead reads the listed files that were
// not read yet; without the listing, it has nothing to read.
TEST_F(PrefetcherIo, AShuffledFirstEpochReadsTheListedFilesAhead) {
  OpenCache(0);
  std::vector<uint32_t> shuffled(kFiles);
  std::iota(shuffled.begin(), shuffled.end(), 0u);
  std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937(11));
  auto first_epoch = [&](bool listed) {
    PrefetcherOptions o;
    o.threads = 2;
    o.lookahead = kFiles;
    auto p = StartPrefetcher(std::move(o));
    if (listed) {
      std::vector<Prefetcher::Opened> files;
      for (uint32_t i = 0; i < kFiles; ++i) files.push_back({keys_[i], Name(i)});
      p->OnListed(files);
    }
    for (uint32_t k = 0; k < 200; ++k) Access(*p, shuffled[k]);
    EXPECT_EQ(p->Stats().epoch, 0u);
    EXPECT_EQ(p->Stats().pattern, Pattern::kShuffled);
    WaitQuiet();
    return p->Stats();
  };
  const PrefetcherStats unlisted = first_epoch(false);
  EXPECT_EQ(unlisted.prefetched, 0u);
  EXPECT_TRUE(Opened().empty());

  const PrefetcherStats listed = first_epoch(true);
  const std::vector<std::string> opened = Opened();
  std::set<std::string> read(opened.begin(), opened.end());
  for (uint32_t k = 0; k < 200; ++k) read.erase(Name(shuffled[k]));
  EXPECT_GE(read.size(), 150u) << "the files not read yet should be read ahead";
  EXPECT_GE(listed.prefetched, 150u);
  EXPECT_EQ(listed.files_known, kFiles);
}

TEST_F(PrefetcherIo, ZeroThreadsReadsNothingAhead) {
  OpenCache(0);
  PrefetcherOptions o;
  o.threads = 0;
  auto p = StartPrefetcher(std::move(o));
  SequentialThenShuffled(*p, 9);
  ASSERT_EQ(p->Stats().pattern, Pattern::kShuffled);  // still tracked and classified
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_TRUE(Opened().empty());
  EXPECT_EQ(p->Stats().prefetched, 0u);
}

// A budget of 50 source reads per second: readahead of a 400-file remaining set takes
// several seconds, and in any case never reads faster than the budget allows (a 20 ms
// burst plus the rate times the elapsed time, plus the files in flight). Nothing is in
// RAM beforehand (the accesses read nothing), so every fetch reads the source.
TEST_F(PrefetcherIo, SourceReadsStayWithinTheBudget) {
  OpenCache(0);
  PrefetcherOptions o;
  o.threads = 4;
  o.lookahead = kFiles;
  o.source_reads_per_s = 50;
  auto p = StartPrefetcher(std::move(o));
  const auto start = std::chrono::steady_clock::now();
  SequentialThenShuffled(*p, 10);
  ASSERT_EQ(p->Stats().pattern, Pattern::kShuffled);
  // Polls until it has read past the burst (a loaded CI machine may take a while to get
  // there), checking the ceiling at each step. The elapsed time is taken after the
  // stats, so the bound is never tighter than the truth.
  const auto deadline = start + std::chrono::seconds(20);
  PrefetcherStats s = p->Stats();
  while (s.prefetch_source_reads <= 50 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    s = p->Stats();
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_LE(s.prefetch_source_reads, 5 + 50 * elapsed + 4) << "after " << elapsed << " s";
  }
  EXPECT_GT(s.prefetch_source_reads, 50u);  // it did read (past the burst)
  EXPECT_GT(s.budget_wait_ms, 0u);          // and it waited for the budget
}

// A plan that runs on into the next epoch (DistributedSampler's next shard, appended by
// the run hook): the window reads the next files into RAM as always, and what lies
// beyond it and no tier holds is read from the source into the SSD tier, before the
// reader gets near: the source is used while the reader hits the tiers.
TEST_F(PrefetcherIo, APlanBeyondTheWindowIsFilledIntoTheSsdTier) {
  OpenCache(64 << 20);
  Fill({0, 1, 2, 3, 10, 11, 12, 13});  // already in the SSD tier: not read again
  PrefetcherOptions o;
  o.threads = 2;
  o.lookahead = 16;
  o.ssd_budget = 64 << 20;
  auto p = StartPrefetcher(std::move(o));
  // This epoch: files 10-99; the next: 300-399, then 0-3 (never in the window) and
  // 10-13 again (a file twice).
  std::vector<PlannedFile> plan;
  auto add = [&](uint32_t i) { plan.push_back(PlannedFile{Name(i), keys_[i], 4096}); };
  for (uint32_t i = 10; i < 100; ++i) add(i);
  for (uint32_t i = 300; i < 400; ++i) add(i);
  for (uint32_t i = 0; i < 4; ++i) add(i);
  for (uint32_t i = 10; i < 14; ++i) add(i);
  p->Publish(std::move(plan));
  for (uint32_t i = 10; i < 20; ++i) Access(*p, i);
  WaitQuiet();
  ASSERT_TRUE(cache_->Flush().ok());
  const PrefetcherStats s = p->Stats();
  EXPECT_EQ(s.plan_position, 9u) << "a file's second entry is not where the reader is";
  for (uint32_t i : {50u, 99u, 300u, 350u, 399u}) {
    EXPECT_TRUE(cache_->SsdPosition(keys_[i].dev, keys_[i].ino).has_value()) << Name(i);
  }
  for (uint32_t i : {100u, 200u, 299u}) {  // not in the plan
    EXPECT_FALSE(cache_->SsdPosition(keys_[i].dev, keys_[i].ino).has_value()) << Name(i);
  }
  // A fill of a file the SSD tier holds opens nothing: 0-3, planned only beyond the
  // window. A file is opened twice at most once the window has grown over filled files
  // (the window's read into RAM opens the source for the file's identity): no more
  // than a window's worth.
  std::vector<std::string> opened = Opened();
  std::sort(opened.begin(), opened.end());
  const size_t distinct = static_cast<size_t>(std::unique(opened.begin(), opened.end()) - opened.begin());
  EXPECT_LE(Opened().size() - distinct, 16u);
  opened.resize(distinct);
  for (uint32_t i = 0; i < 4; ++i) EXPECT_FALSE(std::binary_search(opened.begin(), opened.end(), Name(i)));
  EXPECT_GE(s.prefetch_filled, 150u);  // this epoch's past the window (~64), and the next's 100
}

// Streaming a plan: only files the SSD tier's index holds are stat'ed for their
// identity (on a network source each stat is a round trip, and a batch was stat'ed file
// by file before anything was read); the rest are read from the source.
TEST_F(PrefetcherIo, StreamingStatsOnlyWhatTheSsdTierHolds) {
  OpenCache(64 << 20);
  Fill({0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  PrefetcherOptions o;
  o.threads = 2;
  o.lookahead = 100;
  o.stream_from_ssd = true;
  auto p = Prefetcher::Create(std::move(o), source_, cache_.get(), policy_);
  std::vector<PlannedFile> plan;
  for (uint32_t i = 0; i < 100; ++i) plan.push_back(PlannedFile{Name(i), keys_[i], 4096});
  p->Publish(std::move(plan));
  WaitQuiet();
  std::vector<std::string> stated = source_.stated();
  std::sort(stated.begin(), stated.end());
  stated.erase(std::unique(stated.begin(), stated.end()), stated.end());
  EXPECT_FALSE(stated.empty()) << "the files the SSD tier holds were not streamed";
  for (const std::string& name : stated) EXPECT_LT(name, Name(10)) << name << " was stat'ed";
  std::vector<std::string> opened = Opened();
  std::sort(opened.begin(), opened.end());
  for (uint32_t i = 10; i < 100; ++i) {
    EXPECT_TRUE(std::binary_search(opened.begin(), opened.end(), Name(i))) << Name(i);
  }
  EXPECT_GE(p->Stats().prefetched, 90u);
}

// A published plan leaves its files' opens to readahead (fs/ opens none of them
// passthrough) only while readahead runs: once the gate has stopped it, nothing brings
// them, and each would be READs through the daemon.
TEST_F(PrefetcherIo, APlanIsLeftToReadaheadOnlyWhileTheGateLetsItRun) {
  OpenCache(64 << 20);
  testing::FakeClock clock;
  auto gate = std::make_shared<ReadaheadGate>([] { return 1.0; }, clock.fn());
  PrefetcherOptions o;
  o.threads = 2;
  o.lookahead = 16;
  o.gate = gate;
  auto plan = [&] {
    std::vector<PlannedFile> files;
    for (uint32_t i = 10; i < 100; ++i) files.push_back(PlannedFile{Name(i), keys_[i], 4096});
    return files;
  };
  {
    auto p = StartPrefetcher(o);
    EXPECT_FALSE(p->PlanLeftToReadahead()) << "no plan published";
    p->Publish(plan());
    EXPECT_TRUE(p->PlanLeftToReadahead());
    p->Publish({});
    EXPECT_FALSE(p->PlanLeftToReadahead()) << "the plan was dropped";
  }
  // Readers faster without readahead on a saturated CPU turn it off
  // (readahead_gate_test.cc has the cases); driven with no prefetcher thread running, as
  // the fake clock is not theirs to read while it moves.
  using std::chrono::duration;
  for (int i = 0; i < 200'000 && gate->state() != ReadaheadGate::State::kOff; ++i) {
    const bool runs = gate->Allows();
    clock.t += std::chrono::duration_cast<ReadaheadGate::Clock::duration>(
        duration<double>(runs ? 1.0 / 850 : 1.0 / 1000));
    gate->OnAccess(runs ? ReadaheadGate::Access::kHit : ReadaheadGate::Access::kMiss);
  }
  ASSERT_EQ(gate->state(), ReadaheadGate::State::kOff);
  {
    auto p = StartPrefetcher(o);
    p->Publish(plan());
    EXPECT_FALSE(p->PlanLeftToReadahead()) << "readahead is off: passthrough may serve the plan";
    EXPECT_EQ(p->Stats().readahead_gate, "off");
  }
  // No readahead threads at all (--prefetch 0): nothing brings the plan's files either.
  PrefetcherOptions none;
  none.threads = 0;
  auto p = StartPrefetcher(none);
  p->Publish(plan());
  EXPECT_FALSE(p->PlanLeftToReadahead());
}

// With no SSD tier there is nowhere to fill: the window alone reads ahead.
TEST_F(PrefetcherIo, WithoutSsdTierNothingBeyondTheWindowIsRead) {
  OpenCache(0);
  PrefetcherOptions o;
  o.threads = 2;
  o.lookahead = 16;
  auto p = StartPrefetcher(std::move(o));
  std::vector<PlannedFile> plan;
  for (uint32_t i = 0; i < 200; ++i) plan.push_back(PlannedFile{Name(i), keys_[i], 4096});
  p->Publish(std::move(plan));
  Access(*p, 0);
  WaitQuiet();
  EXPECT_LE(Opened().size(), 1u + 16u + 1u);
  EXPECT_EQ(p->Stats().prefetch_filled, 0u);
}

}  // namespace
}  // namespace epochfs::prefetch

namespace epochfs::prefetch {
namespace {

// Behind a reader that goes faster than readahead can follow (here it was reading
// thousands of files a second when the plan came), the files right past the reader are
// its own: fetched, they would be overtaken and the work lost, which on a busy machine
// kept readahead behind for whole epochs (docs/benchmarks.md). Readahead starts where it
// arrives first.
TEST_F(PrefetcherIo, BehindTheReaderReadaheadStartsWhereItArrivesFirst) {
  OpenCache(0);
  PrefetcherOptions o;
  o.threads = 1;
  auto p = StartPrefetcher(std::move(o));
  // The reader's rate, measured over files the plan does not name.
  std::vector<uint32_t> warm(200);
  std::iota(warm.begin(), warm.end(), 200u);
  std::shuffle(warm.begin(), warm.end(), std::mt19937(9));
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(600);
  for (size_t k = 0; std::chrono::steady_clock::now() < until; ++k) {
    Access(*p, warm[k % warm.size()]);
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  const double rate = p->Stats().access_rate;
  ASSERT_GT(rate, 1000.0) << "the reader's rate was not measured";
  std::vector<PlannedFile> plan;
  for (uint32_t i = 0; i < 200; ++i) plan.push_back(PlannedFile{Name(i), keys_[i], 4096});
  p->Publish(std::move(plan));
  WaitQuiet();
  const std::vector<std::string> opened = Opened();
  auto fetched = [&](uint32_t i) {
    return std::find(opened.begin(), opened.end(), Name(i)) != opened.end();
  };
  // At least rate x 5 ms: 5 files and more.
  for (uint32_t i = 0; i < 5; ++i) EXPECT_FALSE(fetched(i)) << Name(i) << " at " << rate << " files/s";
  EXPECT_TRUE(fetched(150)) << "readahead followed the plan past the reader";
}

}  // namespace
}  // namespace epochfs::prefetch
