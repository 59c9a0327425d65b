// The Prefetcher's epoch tracking and pattern, with readahead off (no cache IO).
#include "prefetcher/prefetcher.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <thread>

#include "prefetcher/testing/dir_source_tree.h"
#include "prefetcher/testing/reader_orders.h"

namespace epochfs::prefetch {
namespace {

// No cache, so no workers: the source tree is never asked.
const testing::DirSourceTree& NoSource() {
  static const testing::DirSourceTree source;
  return source;
}

std::unique_ptr<Prefetcher> Tracker() {
  PrefetcherOptions o;
  o.threads = 0;  // no workers: Cache is never called
  return Prefetcher::Create(std::move(o), NoSource(), nullptr, Prefetcher::NewPolicy(1 << 20));
}

void Access(Prefetcher& p, uint32_t i) {
  char path[32];
  std::snprintf(path, sizeof(path), "d/%06u.jpg", i);
  p.OnRead(FileKey{1, 100 + i}, path, 0);
}

TEST(Prefetcher, EpochsAreCountedAndPatternsNamed) {
  auto p = Tracker();
  const uint32_t n = 1000;
  for (uint32_t i = 0; i < n; ++i) Access(*p, i);
  EXPECT_EQ(p->Stats().epoch, 0u);
  EXPECT_EQ(p->Stats().pattern, Pattern::kSequential);
  // Later reads of a file (offset > 0) are not accesses and do not end the epoch.
  p->OnRead(FileKey{1, 100}, "", 4096);
  EXPECT_EQ(p->Stats().epoch, 0u);

  // A shuffled epoch: the first repeat starts epoch 1.
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  std::shuffle(order.begin(), order.end(), std::mt19937(3));
  for (uint32_t i : order) Access(*p, i);
  EXPECT_EQ(p->Stats().epoch, 1u);
  EXPECT_EQ(p->Stats().epoch_accesses, n);
  EXPECT_EQ(p->Stats().pattern, Pattern::kShuffled);

  // The same order again: replay. A re-read inside the epoch (well before it covered
  // the last one) is not a boundary.
  for (uint32_t k = 0; k < n; ++k) {
    Access(*p, order[k]);
    if (k == 100) Access(*p, order[0]);
  }
  EXPECT_EQ(p->Stats().epoch, 2u);
  EXPECT_EQ(p->Stats().epoch_accesses, n);
  EXPECT_EQ(p->Stats().pattern, Pattern::kReplay);
}

// The classifier needs 128 accesses of an epoch to name it (224 with a last order to
// compare with); until then a shuffled last epoch predicts a shuffled one, so readahead
// need not wait (and then burst).
// Readers out of step: 4 readers each read a quarter of every pass's shuffled order,
// one after the other, at different speeds, so that near each pass's end the fast ones
// read the next pass while the slow ones finish this one. Epochs stay about as long as
// a pass; measured against the last epoch only, each cut-short epoch cut the next one
// shorter still (docs/benchmarks.md, "Pushing into the page cache", "Warm epochs, what
// was done about it").
TEST(Prefetcher, ReadersOutOfStepDoNotCutEpochsShorterAndShorter) {
  auto p = Tracker();
  const uint32_t n = 1000, readers = 4, passes = 6;
  std::mt19937 rng(7);
  std::vector<std::vector<uint32_t>> slices(readers);  // each reader's files, all passes
  for (uint32_t pass = 0; pass < passes; ++pass) {
    std::vector<uint32_t> order(n);
    std::iota(order.begin(), order.end(), 0u);
    std::shuffle(order.begin(), order.end(), rng);
    for (uint32_t i = 0; i < n; ++i) slices[i % readers].push_back(order[i]);
  }
  // Reader r reads 4 + r files per round.
  std::vector<size_t> next(readers, 0);
  for (bool more = true; more;) {
    more = false;
    for (uint32_t r = 0; r < readers; ++r) {
      for (uint32_t k = 0; k < 4 + r && next[r] < slices[r].size(); ++k) Access(*p, slices[r][next[r]++]);
      more = more || next[r] < slices[r].size();
    }
  }
  EXPECT_LE(p->Stats().epoch, passes + 2) << "epochs for " << passes << " passes";
}

// While the access watcher does not watch opens (the kernel's page cache serves every
// file), an epoch's opens go unseen, and the epoch seen lacks files. Measured by
// coverage of the longest epoch, a repeat in the next epoch then looked like a re-read
// in this one until the two together covered it: the next epoch's start went unseen,
// and the watcher, which judges an epoch from its start, watched it to its end. So
// after opens went unseen the first repeat of a file seen since then ends the epoch
// too (a file seen before may be this epoch's, read while unseen), unless it was seen
// just now (a file opened twice).
TEST(Prefetcher, AfterOpensWentUnseenAnEpochEndsAtTheFirstRepeatOfAFileSeenSince) {
  for (const bool told : {false, true}) {
    SCOPED_TRACE(told ? "told of the unseen opens" : "not told");
    auto p = Tracker();
    const uint32_t n = 1000;
    for (uint32_t i = 0; i < n; ++i) Access(*p, i);  // epoch 0, 1000 files
    std::vector<uint32_t> order(n);
    std::iota(order.begin(), order.end(), 0u);
    std::shuffle(order.begin(), order.end(), std::mt19937(5));
    for (uint32_t k = 0; k < 300; ++k) Access(*p, order[k]);  // epoch 1 begins, seen
    ASSERT_EQ(p->Stats().epoch, 1u);
    if (told) p->SetOpensSeen(false);
    // order[300..799] are read unseen; the watcher resumes for the rest.
    if (told) p->SetOpensSeen(true);
    for (uint32_t k = 800; k < n; ++k) Access(*p, order[k]);
    Access(*p, order[n - 1]);  // opened twice
    EXPECT_EQ(p->Stats().epoch, 1u);
    // The next epoch: a file seen before the opens went unseen first, then one seen
    // since.
    Access(*p, order[10]);
    EXPECT_EQ(p->Stats().epoch, 1u);
    Access(*p, order[900]);
    EXPECT_EQ(p->Stats().epoch, told ? 2u : 1u);
    if (told) {
      // The rest of that epoch seen: coverage alone ends it again, as before.
      for (uint32_t k = 0; k < n; ++k) {
        if (k != 900) Access(*p, order[k]);
        if (k == 100) Access(*p, order[50]);  // a re-read
      }
      EXPECT_EQ(p->Stats().epoch, 2u);
      Access(*p, order[0]);
      EXPECT_EQ(p->Stats().epoch, 3u);
    }
  }
}

TEST(Prefetcher, AShuffledEpochPredictsTheNextOneUntilTheClassifierKnows) {
  auto p = Tracker();
  const uint32_t n = 600;
  for (uint32_t i = 0; i < n; ++i) Access(*p, i);
  EXPECT_EQ(p->Stats().pattern, Pattern::kSequential);
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  std::shuffle(order.begin(), order.end(), std::mt19937(5));
  for (uint32_t k = 0; k < 10; ++k) Access(*p, order[k]);  // epoch 1: too early to know
  EXPECT_EQ(p->Stats().epoch, 1u);
  EXPECT_EQ(p->Stats().pattern, Pattern::kUnknown);  // a sequential epoch predicts nothing
  for (uint32_t k = 10; k < n; ++k) Access(*p, order[k]);
  EXPECT_EQ(p->Stats().pattern, Pattern::kShuffled);
  std::shuffle(order.begin(), order.end(), std::mt19937(6));
  for (uint32_t k = 0; k < 10; ++k) Access(*p, order[k]);  // epoch 2
  EXPECT_EQ(p->Stats().epoch, 2u);
  EXPECT_EQ(p->Stats().pattern, Pattern::kShuffled);
}

// A replayed last epoch predicts a replay while the new epoch's first reads follow its
// order, so that readahead need not leave those first 128 files to demand reads; a new
// epoch that starts elsewhere in that order predicts nothing.
TEST(Prefetcher, AReplayedEpochPredictsTheNextOneWhileItsReadsFollowTheOrder) {
  auto p = Tracker();
  const uint32_t n = 600;
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  std::shuffle(order.begin(), order.end(), std::mt19937(8));
  for (uint32_t pass = 0; pass < 2; ++pass) {
    for (uint32_t i : order) Access(*p, i);
  }
  EXPECT_EQ(p->Stats().epoch, 1u);
  EXPECT_EQ(p->Stats().pattern, Pattern::kReplay);
  // Epoch 2, the same order again: predicted from its first read on.
  for (uint32_t k = 0; k < 10; ++k) {
    Access(*p, order[k]);
    EXPECT_EQ(p->Stats().pattern, Pattern::kReplay) << "read " << k;
  }
  EXPECT_EQ(p->Stats().epoch, 2u);
  for (uint32_t k = 10; k < n; ++k) Access(*p, order[k]);
  EXPECT_EQ(p->Stats().pattern, Pattern::kReplay);
  // Epoch 3 reshuffled: its reads jump far into the last order, and nothing is predicted
  // until the classifier knows.
  std::vector<uint32_t> reshuffled = order;
  std::shuffle(reshuffled.begin(), reshuffled.end(), std::mt19937(9));
  for (uint32_t k = 0; k < 10; ++k) Access(*p, reshuffled[k]);
  EXPECT_EQ(p->Stats().epoch, 3u);
  EXPECT_EQ(p->Stats().pattern, Pattern::kUnknown);
  for (uint32_t k = 10; k < n; ++k) Access(*p, reshuffled[k]);
  EXPECT_EQ(p->Stats().pattern, Pattern::kShuffled);
}

// In a replay, the RAM tier keeps what the next epoch reads first: of two files read
// this epoch, the one read later goes first (it is read later in the next epoch too).
// Ranked by read age instead, the tier ended each replayed epoch holding its last
// files, read last again, and acted as a static set (docs/benchmarks.md, "A replay the
// classifier missed"). A reshuffled epoch still evicts the oldest read first.
TEST(Prefetcher, AReplayKeepsWhatTheNextEpochReadsFirst) {
  std::shared_ptr<cache::EvictionPolicy> policy = Prefetcher::NewPolicy(1 << 20);
  PrefetcherOptions o;
  o.threads = 0;
  auto p = Prefetcher::Create(std::move(o), NoSource(), nullptr, policy);
  const uint32_t n = 600;
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  std::shuffle(order.begin(), order.end(), std::mt19937(12));
  const cache::ChunkKey early{1, 100 + order[5], 0};
  const cache::ChunkKey late{1, 100 + order[500], 0};
  for (uint32_t pass = 0; pass < 2; ++pass) {
    for (uint32_t i : order) Access(*p, i);
  }
  ASSERT_EQ(p->Stats().epoch, 1u);
  ASSERT_EQ(p->Stats().pattern, Pattern::kReplay);
  policy->OnInsert(early, 4096);
  policy->OnInsert(late, 4096);
  EXPECT_EQ(policy->Victim(), late);
  // The next epoch's first reads keep the ranking: the replay is predicted.
  for (uint32_t k = 0; k < 3; ++k) Access(*p, order[k]);
  ASSERT_EQ(p->Stats().epoch, 2u);
  EXPECT_EQ(policy->Victim(), late);

  // Reshuffled: once the classifier knows, the file read first goes first.
  std::vector<uint32_t> reshuffled = order;
  std::shuffle(reshuffled.begin(), reshuffled.end(), std::mt19937(13));
  for (uint32_t k = 3; k < n; ++k) Access(*p, order[k]);
  for (uint32_t i : reshuffled) Access(*p, i);
  ASSERT_EQ(p->Stats().epoch, 3u);
  ASSERT_EQ(p->Stats().pattern, Pattern::kShuffled);
  const auto at = [&](uint32_t file) {
    return std::find(reshuffled.begin(), reshuffled.end(), file) - reshuffled.begin();
  };
  const cache::ChunkKey first_read = at(order[5]) < at(order[500]) ? early : late;
  EXPECT_EQ(policy->Victim(), first_read);
}

// Many DataLoader workers make the replay's prediction flicker in an epoch's first
// reads (a worker's first files lie far into the last order); the ranking must hold
// through that until the classifier's verdict, and then stay.
TEST(Prefetcher, AReplayReadByManyWorkersStaysRanked) {
  const uint32_t n = 8000;
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  std::shuffle(order.begin(), order.end(), std::mt19937(21));
  for (int workers : {4, 8, 16}) {
    for (uint32_t seed = 0; seed < 4; ++seed) {
      std::shared_ptr<cache::EvictionPolicy> policy = Prefetcher::NewPolicy(1 << 20);
      PrefetcherOptions o;
      o.threads = 0;
      auto p = Prefetcher::Create(std::move(o), NoSource(), nullptr, policy);
      for (uint32_t epoch = 0; epoch < 3; ++epoch) {
        for (uint32_t i : testing::SeenFromDataLoader(order, workers, 32, 100 * seed + epoch)) {
          Access(*p, i);
        }
      }
      ASSERT_EQ(p->Stats().pattern, Pattern::kReplay) << workers << " workers, seed " << seed;
      // Both read this epoch: the one the next epoch reads later goes first.
      const cache::ChunkKey early{1, 100 + order[5], 0};
      const cache::ChunkKey late{1, 100 + order[n - 500], 0};
      policy->OnInsert(early, 4096);
      policy->OnInsert(late, 4096);
      EXPECT_EQ(policy->Victim(), late) << workers << " workers, seed " << seed;
    }
  }
}

// The ordered patterns' window follows the reader: about a second of its consumption,
// at least 16 files, at most the lookahead (256).
TEST(Prefetcher, ReadaheadWindowFollowsTheReadersRate) {
  auto p = Tracker();
  EXPECT_EQ(p->Stats().readahead_window, 256u);  // not measured yet
  // ~50 files/s (slower on a loaded machine, never faster).
  for (uint32_t i = 0; i < 40; ++i) {
    Access(*p, i);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_GT(p->Stats().access_rate, 0.0);
  EXPECT_GE(p->Stats().readahead_window, 16u);
  EXPECT_LE(p->Stats().readahead_window, 60u);
  // Then thousands of files/s: the window opens up to the lookahead.
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(800);
  for (uint32_t i = 40; std::chrono::steady_clock::now() < until; ++i) {
    Access(*p, i);
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  EXPECT_EQ(p->Stats().readahead_window, 256u);
}

TEST(Prefetcher, PublishedPlanStartsAnEpochAndTracksPosition) {
  auto p = Tracker();
  std::vector<PlannedFile> plan;
  for (uint32_t i = 0; i < 10; ++i) {
    plan.push_back(PlannedFile{"d/" + std::to_string(i), FileKey{1, 100 + i}, 10});
  }
  p->Publish(plan);
  auto s = p->Stats();
  EXPECT_EQ(s.pattern, Pattern::kPublished);
  EXPECT_EQ(s.plan_entries, 10u);
  EXPECT_EQ(s.plans_published, 1u);
  EXPECT_EQ(s.epoch, 1u);
  Access(*p, 3);
  Access(*p, 1);
  EXPECT_EQ(p->Stats().plan_position, 3u);
}

}  // namespace
}  // namespace epochfs::prefetch

#include <unistd.h>

#include <filesystem>

#include "prefetcher/epoch_record.h"

namespace epochfs::prefetch {
namespace {

TEST(EpochRecord, RoundTripsAndRefusesGarbage) {
  char tmpl[] = "/tmp/epochfs-record-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::filesystem::path dir = tmpl;
  EpochRecord r;
  r.files = {{FileKey{1, 2}, "a/b c.jpg"}, {FileKey{1, 3}, "bad\nname"}, {FileKey{1, 4}, "d"}};
  r.order = {2, 1, 0};
  ASSERT_TRUE(SaveEpochRecord(dir / "epochs", r).ok());
  auto back = LoadEpochRecord(dir / "epochs");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->files.size(), 2u);  // the name with a newline is left out
  EXPECT_EQ(back->files[0].second, "a/b c.jpg");
  EXPECT_EQ(back->files[1].first, (FileKey{1, 4}));
  EXPECT_EQ(back->order, (std::vector<uint32_t>{1, 0}));
  EXPECT_EQ(back->pattern, Pattern::kUnknown);
  r.pattern = Pattern::kShuffled;  // kept, so a restart can stream from mount
  ASSERT_TRUE(SaveEpochRecord(dir / "epochs", r).ok());
  EXPECT_EQ(LoadEpochRecord(dir / "epochs")->pattern, Pattern::kShuffled);
  {
    // A record written before the pattern line existed still loads.
    std::FILE* f = std::fopen((dir / "old").c_str(), "w");
    std::fputs("epochfs-epochs 1\nfiles 1\n1 2 x\norder 1\n0\n", f);
    std::fclose(f);
  }
  auto old = LoadEpochRecord(dir / "old");
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_EQ(old->pattern, Pattern::kUnknown);
  EXPECT_EQ(old->order, (std::vector<uint32_t>{0}));
  EXPECT_EQ(LoadEpochRecord(dir / "none").status().code(), Code::kNotFound);
  {
    std::FILE* f = std::fopen((dir / "junk").c_str(), "w");
    std::fputs("epochfs-epochs 1\nfiles 5\n1 2 x\n", f);
    std::fclose(f);
  }
  EXPECT_EQ(LoadEpochRecord(dir / "junk").status().code(), Code::kCorruption);
  std::filesystem::remove_all(dir);
}

TEST(Prefetcher, ARestartedDaemonRecognisesAReplayInItsFirstEpoch) {
  char tmpl[] = "/tmp/epochfs-record-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::filesystem::path dir = tmpl;
  const uint32_t n = 500;
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  std::shuffle(order.begin(), order.end(), std::mt19937(4));
  auto make = [&] {
    PrefetcherOptions o;
    o.threads = 0;
    o.record_path = dir / "epochs";
    return Prefetcher::Create(std::move(o), NoSource(), nullptr, Prefetcher::NewPolicy(1 << 20));
  };
  {
    auto p = make();
    for (uint32_t i : order) Access(*p, i);
    Access(*p, order[0]);  // epoch 1 begins: epoch 0's order is recorded
    EXPECT_EQ(p->Stats().epoch, 1u);
  }
  auto p = make();
  // Before any read, it knows every recorded file by path (the metadata warm-up's list).
  std::vector<std::string> known = p->KnownPaths();
  ASSERT_EQ(known.size(), n);
  std::sort(known.begin(), known.end());
  EXPECT_EQ(known.front(), "d/000000.jpg");
  EXPECT_EQ(known.back(), "d/000499.jpg");
  for (uint32_t i : order) Access(*p, i);
  EXPECT_EQ(p->Stats().pattern, Pattern::kReplay);
  EXPECT_EQ(p->Stats().epoch, 0u);
  p.reset();  // it records at exit: before the directory goes
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace epochfs::prefetch
