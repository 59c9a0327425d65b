// The classifier on synthetic access sequences, including interleaved workers.
#include "prefetcher/classifier.h"

#include <gtest/gtest.h>
#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "prefetcher/testing/reader_orders.h"

namespace epochfs::prefetch {
namespace {

using testing::SeenFromDataLoader;
using testing::SeenFromSharedReaders;

constexpr uint32_t kFiles = 2000;

std::string PathOf(uint32_t i) { return fmt::format("class{:02}/img{:06}.jpg", i / 100, i); }
FileKey KeyOf(uint32_t i) { return FileKey{7, 1000 + i}; }

std::vector<uint32_t> Shuffled(uint32_t seed) {
  std::vector<uint32_t> order(kFiles);
  std::iota(order.begin(), order.end(), 0u);
  std::mt19937 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  return order;
}

// What `workers` DataLoader workers produce reading `order`: batches of `batch` go to
// the workers round-robin, and the workers read their batches at the same pace, so
// their reads interleave one by one.
std::vector<uint32_t> Interleaved(const std::vector<uint32_t>& order, int workers, int batch) {
  std::vector<uint32_t> out;
  const size_t round = static_cast<size_t>(workers) * batch;
  for (size_t start = 0; start < order.size(); start += round) {
    for (int k = 0; k < batch; ++k) {
      for (int w = 0; w < workers; ++w) {
        const size_t i = start + static_cast<size_t>(w) * batch + k;
        if (i < order.size()) out.push_back(order[i]);
      }
    }
  }
  return out;
}

// Workers each reading one contiguous slice of the order, in parallel.
std::vector<uint32_t> Sliced(const std::vector<uint32_t>& order, int workers) {
  std::vector<uint32_t> out;
  const size_t slice = (order.size() + workers - 1) / workers;
  for (size_t k = 0; k < slice; ++k) {
    for (int w = 0; w < workers; ++w) {
      const size_t i = static_cast<size_t>(w) * slice + k;
      if (i < order.size()) out.push_back(order[i]);
    }
  }
  return out;
}

std::vector<FileKey> KeysOf(const std::vector<uint32_t>& order) {
  std::vector<FileKey> keys;
  for (uint32_t i : order) keys.push_back(KeyOf(i));
  return keys;
}

Pattern Classify(Classifier& c, const std::vector<uint32_t>& seq) {
  for (uint32_t i : seq) c.Access(KeyOf(i), PathOf(i));
  return c.pattern();
}

std::vector<uint32_t> Sorted() {
  std::vector<uint32_t> order(kFiles);
  std::iota(order.begin(), order.end(), 0u);
  return order;
}

TEST(Classifier, SequentialScanIsSequential) {
  Classifier c;
  c.NewEpoch(nullptr);
  EXPECT_EQ(Classify(c, Sorted()), Pattern::kSequential);
  EXPECT_GT(c.sequential_score(), 0.99);
}

TEST(Classifier, FourInterleavedWorkersOnASortedOrderAreSequential) {
  Classifier c;
  c.NewEpoch(nullptr);
  EXPECT_EQ(Classify(c, Interleaved(Sorted(), 4, 8)), Pattern::kSequential)
      << c.sequential_score();
  Classifier d;
  d.NewEpoch(nullptr);
  EXPECT_EQ(Classify(d, Sliced(Sorted(), 4)), Pattern::kSequential) << d.sequential_score();
}

TEST(Classifier, RandomPermutationIsShuffled) {
  Classifier c;
  c.NewEpoch(nullptr);
  EXPECT_EQ(Classify(c, Shuffled(1)), Pattern::kShuffled);
  EXPECT_LT(c.sequential_score(), 0.3);
  // Also against a previous epoch's different permutation.
  std::vector<FileKey> previous;
  for (uint32_t i : Shuffled(2)) previous.push_back(KeyOf(i));
  c.NewEpoch(previous);
  EXPECT_EQ(Classify(c, Interleaved(Shuffled(3), 4, 8)), Pattern::kShuffled);
  EXPECT_LT(c.replay_score(), 0.3);
}

// The prefetcher asks for the pattern after every access, so the guess must hold from
// the first one it makes, not only at the end. Early in a shuffled epoch few files have
// been seen, so the path predecessor of a random file is likely one of the last `window`
// accesses by chance alone (window/i at the i-th access): that chance is not order.
TEST(Classifier, AShuffledEpochIsNeverCalledSequentialWhileItStarts) {
  int sequential_guesses = 0;
  int epochs_with_one = 0;
  for (uint32_t seed = 100; seed < 300; ++seed) {
    Classifier c;
    c.NewEpoch(nullptr);
    bool guessed = false;
    const auto order = Interleaved(Shuffled(seed), 4, 8);
    for (size_t i = 0; i < 1024; ++i) {
      c.Access(KeyOf(order[i]), PathOf(order[i]));
      if (c.pattern() == Pattern::kSequential) {
        ++sequential_guesses;
        guessed = true;
      }
    }
    epochs_with_one += guessed ? 1 : 0;
  }
  EXPECT_EQ(epochs_with_one, 0) << sequential_guesses << " accesses were called sequential";
}

TEST(Classifier, ASortedEpochIsCalledSequentialAsSoonAsItCanBe) {
  for (int workers : {1, 4, 8}) {
    Classifier c;
    c.NewEpoch(nullptr);
    const auto order = Interleaved(Sorted(), workers, 8);
    for (size_t i = 0; i < ClassifierOptions{}.min_accesses; ++i) {
      c.Access(KeyOf(order[i]), PathOf(order[i]));
    }
    EXPECT_EQ(c.pattern(), Pattern::kSequential) << workers << " workers, score "
                                                 << c.sequential_score();
  }
}

TEST(Classifier, SameOrderAsLastEpochIsReplayEvenWithFourWorkers) {
  const auto order = Shuffled(9);
  std::vector<FileKey> previous;
  for (uint32_t i : order) previous.push_back(KeyOf(i));
  Classifier c;
  c.NewEpoch(previous);
  EXPECT_EQ(Classify(c, Interleaved(order, 4, 8)), Pattern::kReplay) << c.replay_score();
  Classifier d;
  d.NewEpoch(previous);
  EXPECT_EQ(Classify(d, Sliced(order, 4)), Pattern::kReplay) << d.replay_score();
}

// A replay as the daemon sees it: the previous order is itself what it saw, so both
// epochs are the same order reordered differently by the readers' timing. Readers that
// share one iterator swap neighbours, and a file's predecessor is often seen after it;
// DataLoader workers interleave 16 batches, differently in each epoch (512 files in
// flight: a data set of 2,000 is too small to tell that spread from a shuffle).
TEST(Classifier, AReplayReorderedByConcurrentReadersIsReplay) {
  const auto order = Shuffled(11);
  std::vector<uint32_t> larger(4 * kFiles);
  std::iota(larger.begin(), larger.end(), 0u);
  std::shuffle(larger.begin(), larger.end(), std::mt19937(11));
  for (uint32_t seed = 0; seed < 5; ++seed) {
    Classifier c;
    c.NewEpoch(KeysOf(SeenFromSharedReaders(order, 4, 100 + seed)));
    EXPECT_EQ(Classify(c, SeenFromSharedReaders(order, 4, 200 + seed)), Pattern::kReplay)
        << "shared iterator, seed " << seed << ", score " << c.replay_score();
    Classifier d;
    d.NewEpoch(KeysOf(SeenFromDataLoader(larger, 16, 32, 100 + seed)));
    EXPECT_EQ(Classify(d, SeenFromDataLoader(larger, 16, 32, 200 + seed)), Pattern::kReplay)
        << "DataLoader 16 x 32, seed " << seed << ", score " << d.replay_score();
  }
}

// Files the daemon did not see in one epoch (the kernel served them) say nothing about
// the order: a replay seen only in part is still a replay.
TEST(Classifier, AReplaySeenInPartIsReplay) {
  const auto order = Shuffled(12);
  std::mt19937 rng(5);
  auto part = [&](const std::vector<uint32_t>& seen) {
    std::vector<uint32_t> out;
    for (uint32_t f : seen) {
      if (rng() % 3 != 0) out.push_back(f);  // a third unseen, different ones each epoch
    }
    return out;
  };
  Classifier c;
  c.NewEpoch(KeysOf(part(SeenFromSharedReaders(order, 4, 1))));
  EXPECT_EQ(Classify(c, part(SeenFromSharedReaders(order, 4, 2))), Pattern::kReplay)
      << c.replay_score();
}

// Neither does a reshuffle become a replay under the looser rule, whoever reads it.
TEST(Classifier, AReshuffleReadByConcurrentReadersIsNotReplay) {
  for (uint32_t seed = 0; seed < 5; ++seed) {
    Classifier c;
    c.NewEpoch(KeysOf(SeenFromSharedReaders(Shuffled(20 + seed), 4, 1)));
    EXPECT_EQ(Classify(c, SeenFromSharedReaders(Shuffled(40 + seed), 4, 2)), Pattern::kShuffled)
        << c.replay_score();
    Classifier d;
    d.NewEpoch(KeysOf(SeenFromDataLoader(Shuffled(20 + seed), 16, 32, 1)));
    EXPECT_EQ(Classify(d, SeenFromDataLoader(Shuffled(40 + seed), 16, 32, 2)),
              Pattern::kShuffled)
        << d.replay_score();
    // Shards of 64 read in a new order, each shuffled inside: every access lies near
    // recent ones in the last order, but the epoch does not move through it.
    std::vector<uint32_t> sharded = Shuffled(20 + seed);
    std::mt19937 rng(seed);
    std::vector<size_t> shards(sharded.size() / 64);
    std::iota(shards.begin(), shards.end(), size_t{0});
    std::shuffle(shards.begin(), shards.end(), rng);
    std::vector<uint32_t> resharded;
    for (size_t shard : shards) {
      std::vector<uint32_t> files(sharded.begin() + shard * 64, sharded.begin() + (shard + 1) * 64);
      std::shuffle(files.begin(), files.end(), rng);
      resharded.insert(resharded.end(), files.begin(), files.end());
    }
    Classifier f;
    f.NewEpoch(KeysOf(SeenFromSharedReaders(sharded, 4, 1)));
    EXPECT_NE(Classify(f, SeenFromSharedReaders(resharded, 4, 2)), Pattern::kReplay)
        << f.replay_score();
    // Nor is the last order read backwards.
    std::vector<uint32_t> backwards = Shuffled(20 + seed);
    Classifier g;
    g.NewEpoch(KeysOf(SeenFromSharedReaders(backwards, 4, 1)));
    std::reverse(backwards.begin(), backwards.end());
    EXPECT_NE(Classify(g, SeenFromSharedReaders(backwards, 4, 2)), Pattern::kReplay)
        << g.replay_score();
    // A sorted epoch after a shuffled one is sequential, not a replay.
    Classifier e;
    e.NewEpoch(KeysOf(SeenFromSharedReaders(Shuffled(20 + seed), 4, 1)));
    EXPECT_EQ(Classify(e, SeenFromSharedReaders(Sorted(), 4, 2)), Pattern::kSequential)
        << e.replay_score();
  }
}

TEST(Classifier, TooFewAccessesIsUnknown) {
  Classifier c;
  c.NewEpoch(nullptr);
  std::vector<uint32_t> few = Sorted();
  few.resize(50);
  EXPECT_EQ(Classify(c, few), Pattern::kUnknown);
}

}  // namespace
}  // namespace epochfs::prefetch
