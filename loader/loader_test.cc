#include "loader/loader.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <map>
#include <set>

#include "loader/backend.h"
#include "loader/test_files.h"

#ifdef EPOCHFS_LOADER_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace epochfs::loader {
namespace {

using testing::RandomBytes;
using testing::ReadFile;
using testing::TempDir;

// A data set of `classes` x `per_class` files of varied sizes (0 bytes to ~40 KB, one of
// 300 KB), ImageFolder style.
struct Samples {
  TempDir dir;
  Dataset ds;
  std::vector<std::string> bytes;  // expected content per file

  explicit Samples(int classes = 3, int per_class = 23) {
    for (int c = 0; c < classes; ++c) {
      for (int i = 0; i < per_class; ++i) {
        const int k = c * per_class + i;
        size_t size = k == 0 ? 0 : (k == 5 ? 300000 : (static_cast<size_t>(k) * 7919) % 40000);
        dir.Write("class" + std::to_string(c) + "/s" + std::to_string(1000 + i) + ".bin",
                  RandomBytes(size, static_cast<uint64_t>(k) + 1));
      }
    }
    auto scanned = ScanImageFolder(dir.path());
    if (!scanned.ok()) throw std::runtime_error(scanned.status().ToString());
    ds = std::move(scanned.value());
    for (const auto& f : ds.files) bytes.push_back(ReadFile(f));
  }
  size_t size() const { return ds.files.size(); }
};

class LoaderTest : public ::testing::TestWithParam<IoBackend> {
 protected:
  LoaderOptions Options(const Samples& s, size_t batch) {
    LoaderOptions o;
    o.files = s.ds.files;
    o.labels = s.ds.labels;
    o.batch_size = batch;
    o.device = DeviceKind::kCpu;
    o.io = GetParam();
    o.queue_depth = 16;
    return o;
  }

  std::unique_ptr<Loader> Make(LoaderOptions o) {
    auto l = Loader::Create(std::move(o));
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    return l.ok() ? std::move(l.value()) : nullptr;
  }

  // Reads one epoch of `order` and checks every batch against the files; returns the
  // sample indices in delivery order.
  std::vector<int64_t> ReadAndCheck(Loader& l, const Samples& s,
                                    const std::vector<int64_t>& order) {
    EXPECT_TRUE(l.StartEpoch(order).ok());
    std::vector<int64_t> seen;
    size_t batches = 0;
    while (true) {
      auto next = l.Next();
      EXPECT_TRUE(next.ok()) << next.status().ToString();
      if (!next.ok() || *next == nullptr) break;
      const Batch& b = **next;
      EXPECT_EQ(b.index(), batches);
      EXPECT_FALSE(b.on_device());
      ++batches;
      const auto* data = static_cast<const uint8_t*>(b.data());
      EXPECT_EQ(reinterpret_cast<uintptr_t>(data) % 256, 0u);
      for (size_t i = 0; i < b.size(); ++i) {
        const size_t idx = static_cast<size_t>(b.sample_indices()[i]);
        const std::string& want = s.bytes[idx];
        EXPECT_EQ(static_cast<size_t>(b.lengths()[i]), want.size());
        EXPECT_EQ(std::memcmp(data + b.offsets()[i], want.data(), want.size()), 0)
            << "sample " << idx << " (" << s.ds.files[idx] << ") differs";
        EXPECT_EQ(b.host_labels()[i], s.ds.labels[idx]);
        EXPECT_EQ(b.labels()[i], s.ds.labels[idx]);
        if (i + 1 < b.size()) {
          EXPECT_EQ(b.offsets()[i] + b.lengths()[i], b.offsets()[i + 1]);
        }
        seen.push_back(static_cast<int64_t>(idx));
      }
    }
    EXPECT_EQ(batches, l.NumBatches(order.size()));
    return seen;
  }
};

TEST_P(LoaderTest, EverySampleOnceInOrderByteIdentical) {
  Samples s;
  auto l = Make(Options(s, 8));
  ASSERT_TRUE(l);
  EXPECT_EQ(l->io_backend(), std::string(GetParam() == IoBackend::kPread ? "pread" : "io_uring"));
  auto order = ShuffledOrder(s.size(), 7);
  EXPECT_EQ(ReadAndCheck(*l, s, order), order);
  // A second epoch in another order; the ring is reused.
  auto order2 = ShuffledOrder(s.size(), 8);
  EXPECT_EQ(ReadAndCheck(*l, s, order2), order2);
  auto st = l->stats();
  EXPECT_EQ(st.epochs, 2u);
  EXPECT_EQ(st.files_read, 2 * s.size());
  EXPECT_EQ(st.batches, 2 * l->NumBatches(s.size()));
}

TEST_P(LoaderTest, LabelsMatchClassFolders) {
  Samples s;
  auto l = Make(Options(s, 5));
  ASSERT_TRUE(l);
  ASSERT_TRUE(l->StartEpoch(SequentialOrder(s.size())).ok());
  while (true) {
    auto b = l->Next();
    ASSERT_TRUE(b.ok());
    if (*b == nullptr) break;
    for (size_t i = 0; i < (*b)->size(); ++i) {
      const std::string& path = s.ds.files[static_cast<size_t>((*b)->sample_indices()[i])];
      const std::string cls = s.ds.classes[static_cast<size_t>((*b)->host_labels()[i])];
      EXPECT_NE(path.find("/" + cls + "/"), std::string::npos) << path;
    }
  }
}

TEST_P(LoaderTest, DropLastAndBatchCounts) {
  Samples s(1, 23);
  auto o = Options(s, 5);
  o.drop_last = true;
  auto l = Make(o);
  ASSERT_TRUE(l);
  EXPECT_EQ(l->NumBatches(23), 4u);
  auto order = SequentialOrder(23);
  auto seen = ReadAndCheck(*l, s, order);
  EXPECT_EQ(seen, std::vector<int64_t>(order.begin(), order.begin() + 20));

  o.drop_last = false;
  auto l2 = Make(o);
  EXPECT_EQ(l2->NumBatches(23), 5u);
  EXPECT_EQ(ReadAndCheck(*l2, s, order), order);
  // One sample, batch larger than the set; repeated indices.
  EXPECT_EQ(ReadAndCheck(*l2, s, {3}), (std::vector<int64_t>{3}));
  EXPECT_EQ(ReadAndCheck(*l2, s, {4, 4, 4}), (std::vector<int64_t>{4, 4, 4}));
  EXPECT_TRUE(ReadAndCheck(*l2, s, {}).empty());
}

TEST_P(LoaderTest, ShardsSplitLikeDistributedSampler) {
  Samples s(2, 20);  // 40 samples, 3 ranks: 14 each, 2 padded
  auto order = ShuffledOrder(s.size(), 3);
  std::multiset<int64_t> all;
  for (int rank = 0; rank < 3; ++rank) {
    auto shard = ShardOrder(order, rank, 3);
    ASSERT_TRUE(shard.ok());
    EXPECT_EQ(shard->size(), 14u);
    auto l = Make(Options(s, 4));
    ASSERT_TRUE(l);
    auto seen = ReadAndCheck(*l, s, *shard);
    EXPECT_EQ(seen, *shard);
    all.insert(seen.begin(), seen.end());
  }
  EXPECT_EQ(all.size(), 42u);
  for (size_t i = 0; i < s.size(); ++i) EXPECT_GE(all.count(static_cast<int64_t>(i)), 1u);
  EXPECT_EQ(all.count(order[0]), 2u);  // the padding repeats the head
  EXPECT_EQ(all.count(order[1]), 2u);
}

TEST_P(LoaderTest, FixedSizeRecordsAreDense) {
  TempDir dir;
  const size_t header = 16, record = 24;
  std::vector<std::string> files, records;
  for (int i = 0; i < 10; ++i) {
    records.push_back(RandomBytes(record, 100 + i));
    files.push_back(
        dir.Write("r" + std::to_string(i) + ".npy", std::string(header, 'H') + records.back()));
  }
  LoaderOptions o;
  o.files = files;
  o.batch_size = 4;
  o.device = DeviceKind::kCpu;
  o.io = GetParam();
  o.record_offset = header;
  o.record_bytes = record;
  auto l = Make(o);
  ASSERT_TRUE(l);
  auto order = ShuffledOrder(10, 1);
  ASSERT_TRUE(l->StartEpoch(order).ok());
  size_t k = 0;
  while (true) {
    auto b = l->Next();
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    if (*b == nullptr) break;
    ASSERT_EQ((*b)->data_bytes(), (*b)->size() * record);
    for (size_t i = 0; i < (*b)->size(); ++i, ++k) {
      EXPECT_EQ(std::string(static_cast<const char*>((*b)->data()) + i * record, record),
                records[static_cast<size_t>(order[k])]);
      EXPECT_EQ((*b)->labels()[i], 0);
    }
  }
  EXPECT_EQ(k, 10u);

  // A file of the wrong size is refused up front, by name.
  files.push_back(dir.Write("odd.npy", std::string(header + record + 1, 'x')));
  o.files = files;
  auto bad = Loader::Create(o);
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("odd.npy"), std::string::npos);
}

// ---- Errors ------------------------------------------------------------------------

TEST_P(LoaderTest, MissingOrNonRegularFilesFailCreateByName) {
  Samples s(1, 4);
  auto o = Options(s, 2);
  o.files[2] = s.dir.path().string() + "/missing.bin";
  auto missing = Loader::Create(o);
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_NE(missing.status().message().find("missing.bin"), std::string::npos);

  o.files[2] = s.dir.Mkdir("a_directory");
  auto dir = Loader::Create(o);
  EXPECT_EQ(dir.status().code(), Code::kIoError);
  EXPECT_NE(dir.status().message().find("a_directory"), std::string::npos);
  EXPECT_NE(dir.status().message().find("directory"), std::string::npos);

  o.files[2] = s.dir.path().string() + "/fifo";
  ASSERT_EQ(::mkfifo(o.files[2].c_str(), 0600), 0);
  auto fifo = Loader::Create(o);
  EXPECT_EQ(fifo.status().code(), Code::kIoError);
  EXPECT_NE(fifo.status().message().find("fifo"), std::string::npos);
}

TEST_P(LoaderTest, BadOptionsAndOrdersAreRefused) {
  Samples s(1, 4);
  auto o = Options(s, 0);
  EXPECT_EQ(Loader::Create(o).status().code(), Code::kInvalidArgument);
  o = Options(s, 2);
  o.labels.pop_back();
  EXPECT_EQ(Loader::Create(o).status().code(), Code::kInvalidArgument);
  o = Options(s, 2);
  o.num_buffers = 1;
  EXPECT_EQ(Loader::Create(o).status().code(), Code::kInvalidArgument);
  o = Options(s, 2);
  o.files.clear();
  o.labels.clear();
  EXPECT_EQ(Loader::Create(o).status().code(), Code::kInvalidArgument);

  auto l = Make(Options(s, 2));
  EXPECT_EQ(l->Next().status().code(), Code::kInvalidArgument);  // before StartEpoch
  EXPECT_EQ(l->StartEpoch({0, 4}).code(), Code::kInvalidArgument);
  EXPECT_EQ(l->StartEpoch({-1}).code(), Code::kInvalidArgument);
}

// Runs an epoch in file order and returns (batches delivered before the error, error).
std::pair<size_t, Status> RunUntilError(Loader& l, size_t n) {
  EXPECT_TRUE(l.StartEpoch(SequentialOrder(n)).ok());
  size_t good = 0;
  while (true) {
    auto b = l.Next();
    if (!b.ok()) return {good, b.status()};
    if (*b == nullptr) return {good, Status::Ok()};
    ++good;
  }
}

TEST_P(LoaderTest, FileDeletedAfterListingFailsTheEpochByName) {
  Samples s(1, 20);
  auto l = Make(Options(s, 4));
  ASSERT_TRUE(l);
  ASSERT_EQ(::unlink(s.ds.files[9].c_str()), 0);  // batch 2
  auto [good, st] = RunUntilError(*l, s.size());
  EXPECT_EQ(good, 2u);  // the batches before it still arrive
  EXPECT_EQ(st.code(), Code::kNotFound) << st.ToString();
  EXPECT_NE(st.message().find(s.ds.files[9]), std::string::npos) << st.ToString();
  // The error is sticky for the epoch, and the loader can start another.
  EXPECT_EQ(l->Next().status().code(), Code::kNotFound);
  s.dir.Write("class0/s1009.bin", s.bytes[9]);
  EXPECT_EQ(ReadAndCheck(*l, s, SequentialOrder(s.size())), SequentialOrder(s.size()));
}

TEST_P(LoaderTest, FileTruncatedAfterListingIsAnError) {
  Samples s(1, 20);
  auto l = Make(Options(s, 4));
  ASSERT_TRUE(l);
  ASSERT_GT(s.bytes[13].size(), 10u);
  ASSERT_EQ(::truncate(s.ds.files[13].c_str(), 10), 0);
  auto [good, st] = RunUntilError(*l, s.size());
  EXPECT_EQ(good, 3u);
  EXPECT_EQ(st.code(), Code::kStale) << st.ToString();
  EXPECT_NE(st.message().find(s.ds.files[13]), std::string::npos);
  EXPECT_NE(st.message().find("is now 10 bytes"), std::string::npos) << st.ToString();
}

TEST_P(LoaderTest, FileGrownAfterListingIsAnError) {
  Samples s(1, 20);
  auto l = Make(Options(s, 4));
  ASSERT_TRUE(l);
  testing::WriteFile(s.ds.files[0], "now longer than the empty file it was");
  auto [good, st] = RunUntilError(*l, s.size());
  EXPECT_EQ(good, 0u);
  EXPECT_EQ(st.code(), Code::kStale) << st.ToString();
  EXPECT_NE(st.message().find(s.ds.files[0]), std::string::npos);
}

TEST_P(LoaderTest, FileReplacedByADirectoryOrAFifoFailsWithoutHanging) {
  Samples s(1, 12);
  auto l = Make(Options(s, 4));
  ASSERT_TRUE(l);
  ASSERT_EQ(::unlink(s.ds.files[6].c_str()), 0);
  ASSERT_EQ(::mkdir(s.ds.files[6].c_str(), 0700), 0);
  auto [good, st] = RunUntilError(*l, s.size());
  EXPECT_EQ(good, 1u);
  EXPECT_EQ(st.err(), EISDIR) << st.ToString();
  EXPECT_NE(st.message().find(s.ds.files[6]), std::string::npos);

  ASSERT_EQ(::rmdir(s.ds.files[6].c_str()), 0);
  ASSERT_EQ(::mkfifo(s.ds.files[6].c_str(), 0600), 0);  // no writer: must not block
  auto [good2, st2] = RunUntilError(*l, s.size());
  EXPECT_EQ(good2, 1u);
  EXPECT_FALSE(st2.ok());
  EXPECT_NE(st2.message().find(s.ds.files[6]), std::string::npos) << st2.ToString();
}

TEST_P(LoaderTest, HostAllocationFailureIsNoMemory) {
  TempDir dir;
  std::string huge = dir.Write("huge.bin", "");
  ASSERT_EQ(::truncate(huge.c_str(), int64_t{1} << 40), 0);  // sparse, 1 TiB
  LoaderOptions o;
  o.files = {huge, dir.Write("small.bin", "x")};
  o.batch_size = 2;
  o.device = DeviceKind::kCpu;
  o.io = GetParam();
  const size_t before = LiveBufferBytes();
  auto l = Loader::Create(o);
  EXPECT_EQ(l.status().code(), Code::kNoMemory) << l.status().ToString();
  EXPECT_NE(l.status().message().find("batch buffer 1 of 4"), std::string::npos);
  EXPECT_EQ(LiveBufferBytes(), before);
}

// ---- Stopping and resources ----------------------------------------------------------

TEST_P(LoaderTest, StoppingMidEpochIsCleanAndBatchesOutliveTheLoader) {
  Samples s;
  const int fds = testing::CountOpenFds();
  const int threads = testing::CountThreads();
  const size_t buffers = LiveBufferBytes();
  std::shared_ptr<const Batch> kept;
  {
    auto l = Make(Options(s, 4));
    ASSERT_TRUE(l);
    EXPECT_GT(LiveBufferBytes(), buffers);
    ASSERT_TRUE(l->StartEpoch(ShuffledOrder(s.size(), 1)).ok());
    auto b = l->Next();
    ASSERT_TRUE(b.ok() && *b);
    kept = *b;
    // A new epoch mid-epoch: the old one stops, the new one is complete.
    auto order = ShuffledOrder(s.size(), 2);
    EXPECT_EQ(ReadAndCheck(*l, s, order), order);
    // Stop() mid-epoch, then Next() says the epoch is over.
    ASSERT_TRUE(l->StartEpoch(order).ok());
    ASSERT_TRUE(l->Next().ok());
    l->Stop();
    auto after = l->Next();
    ASSERT_TRUE(after.ok());
    EXPECT_EQ(*after, nullptr);
    // Destroyed mid-epoch, with reads in flight.
    ASSERT_TRUE(l->StartEpoch(order).ok());
  }
  // The kept batch is still readable after its loader is gone.
  const size_t idx = static_cast<size_t>(kept->sample_indices()[0]);
  EXPECT_EQ(std::string(static_cast<const char*>(kept->data()), s.bytes[idx].size()), s.bytes[idx]);
  kept.reset();
  EXPECT_EQ(LiveBufferBytes(), buffers);
  EXPECT_EQ(testing::CountOpenFds(), fds);
  EXPECT_LE(testing::WaitForThreadsAtMost(threads), threads);
}

TEST_P(LoaderTest, HoldingEveryBufferIsAnErrorNotAHang) {
  Samples s(1, 20);
  auto o = Options(s, 2);
  o.num_buffers = 3;
  auto l = Make(o);
  ASSERT_TRUE(l);
  ASSERT_TRUE(l->StartEpoch(SequentialOrder(s.size())).ok());
  std::vector<std::shared_ptr<const Batch>> held;
  for (int i = 0; i < 3; ++i) {
    auto b = l->Next();
    ASSERT_TRUE(b.ok() && *b);
    held.push_back(*b);
  }
  auto busy = l->Next();
  EXPECT_EQ(busy.status().code(), Code::kBusy);
  EXPECT_NE(busy.status().message().find("num_buffers"), std::string::npos);
  held.erase(held.begin());  // let one go: the epoch goes on
  auto b = l->Next();
  ASSERT_TRUE(b.ok() && *b) << b.status().ToString();
  EXPECT_EQ((*b)->index(), 3u);
}

TEST_P(LoaderTest, PublishesThePlanOnAnEpochfsMountAndReadsInThatOrder) {
  Samples s(2, 6);
  s.dir.Write(".epochfs/plan", "");  // stands in for the control file
  char buf[PATH_MAX];
  const std::string root = ::realpath(s.dir.path().c_str(), buf);
  auto l = Make(Options(s, 5));
  ASSERT_TRUE(l);
  EXPECT_EQ(l->plan_root(), root);
  auto order = *ShardOrder(ShuffledOrder(s.size(), 9), 1, 2);
  ASSERT_TRUE(l->StartEpoch(order).ok());
  // Published before the first read: the plan is there before Next() is called.
  std::string plan = ReadFile(root + "/.epochfs/plan");
  std::string expected = "epochfs-plan 1\n";
  for (int64_t i : order)
    expected += s.ds.files[static_cast<size_t>(i)].substr(root.size() + 1) + "\n";
  expected += "\n";  // the empty line that publishes it
  EXPECT_EQ(plan, expected);
  EXPECT_EQ(ReadAndCheck(*l, s, order), order);  // starts (and publishes) it again
  EXPECT_EQ(ReadFile(root + "/.epochfs/plan"), expected);
  EXPECT_EQ(l->stats().plans_published, 2u);

  // drop_last: only what will be read is published.
  auto o = Options(s, 4);
  o.drop_last = true;
  testing::WriteFile(root + "/.epochfs/plan", "");
  auto l2 = Make(o);
  ASSERT_TRUE(l2->StartEpoch(SequentialOrder(6)).ok());
  EXPECT_EQ(
      ReadFile(root + "/.epochfs/plan"),
      "epochfs-plan 1\nclass0/s1000.bin\nclass0/s1001.bin\nclass0/s1002.bin\nclass0/s1003.bin\n\n");

  // publish_plan = false writes nothing.
  testing::WriteFile(root + "/.epochfs/plan", "");
  o.publish_plan = false;
  auto l3 = Make(o);
  EXPECT_EQ(l3->plan_root(), "");
  ASSERT_TRUE(l3->StartEpoch(SequentialOrder(6)).ok());
  EXPECT_EQ(ReadFile(root + "/.epochfs/plan"), "");
}

TEST_P(LoaderTest, ARefusedPlanIsOnlyAWarning) {
  Samples s(1, 6);
  s.dir.Mkdir(".epochfs/plan");  // exists, but cannot be written
  auto l = Make(Options(s, 4));
  ASSERT_TRUE(l);
  EXPECT_NE(l->plan_root(), "");
  auto order = SequentialOrder(s.size());
  EXPECT_EQ(ReadAndCheck(*l, s, order), order);
  EXPECT_EQ(l->stats().plans_refused, 1u);
  EXPECT_EQ(l->stats().plans_published, 0u);
}

TEST_P(LoaderTest, ManyFilesManyBatches) {
  TempDir dir;
  std::vector<std::string> files, bytes;
  for (int i = 0; i < 600; ++i) {
    bytes.push_back(RandomBytes(4096 + static_cast<size_t>(i % 7), static_cast<uint64_t>(i)));
    files.push_back(dir.Write("f" + std::to_string(i), bytes.back()));
  }
  LoaderOptions o;
  o.files = files;
  o.batch_size = 32;
  o.device = DeviceKind::kCpu;
  o.io = GetParam();
  o.queue_depth = 64;
  auto l = Make(o);
  ASSERT_TRUE(l);
  for (int epoch = 0; epoch < 3; ++epoch) {
    auto order = ShuffledOrder(files.size(), static_cast<uint64_t>(epoch));
    ASSERT_TRUE(l->StartEpoch(order).ok());
    size_t k = 0;
    while (true) {
      auto b = l->Next();
      ASSERT_TRUE(b.ok()) << b.status().ToString();
      if (*b == nullptr) break;
      for (size_t i = 0; i < (*b)->size(); ++i, ++k) {
        ASSERT_EQ((*b)->sample_indices()[i], order[k]);
        const std::string& want = bytes[static_cast<size_t>(order[k])];
        ASSERT_EQ(std::memcmp(static_cast<const char*>((*b)->data()) + (*b)->offsets()[i],
                              want.data(), want.size()),
                  0);
      }
    }
    EXPECT_EQ(k, files.size());
  }
}

INSTANTIATE_TEST_SUITE_P(Io, LoaderTest, ::testing::Values(IoBackend::kUring, IoBackend::kPread),
                         [](const auto& info) {
                           return std::string(info.param == IoBackend::kUring ? "Uring" : "Pread");
                         });

// io=kAuto: the ring for small files, pread workers for samples of 1 MiB and more (a
// whole large file copies faster with pread), and every reader thread asked for.
TEST(LoaderIoTest, AutoReadsLargeSamplesWithPreadAndSmallOnesWithTheRing) {
  TempDir dir;
  std::vector<std::string> small, large;
  for (int i = 0; i < 4; ++i) {
    small.push_back(dir.Write("s" + std::to_string(i), std::string(4096, 'a' + i)));
    large.push_back(dir.Write("l" + std::to_string(i), std::string(2u << 20, 'A' + i)));
  }
  LoaderOptions o;
  o.batch_size = 2;
  o.device = DeviceKind::kCpu;
  o.reader_threads = 3;
  o.files = small;
  auto ring = Loader::Create(o);
  ASSERT_TRUE(ring.ok()) << ring.status().ToString();
  EXPECT_EQ((*ring)->reader_threads(), 3u);
  o.files = large;
  auto whole = Loader::Create(o);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_EQ((*whole)->io_backend(), std::string("pread"));
  ASSERT_TRUE((*whole)->StartEpoch(SequentialOrder(4)).ok());
  size_t samples = 0;
  for (;;) {
    auto b = (*whole)->Next();
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    if (!*b) break;
    for (size_t i = 0; i < (*b)->size(); ++i) {
      const char* bytes = static_cast<const char*>((*b)->data()) + (*b)->offsets()[i];
      EXPECT_EQ(bytes[0], 'A' + (*b)->sample_indices()[i]);
      EXPECT_EQ(bytes[(2u << 20) - 1], 'A' + (*b)->sample_indices()[i]);
      samples++;
    }
  }
  EXPECT_EQ(samples, 4u);
}

// ---- Devices -----------------------------------------------------------------------

TEST(LoaderDeviceTest, AutoFallsBackToTheHostWithoutCuda) {
  std::string why;
  if (CudaUsable(&why)) GTEST_SKIP() << "a CUDA device is present; this checks the fallback";
  Samples s(1, 3);
  LoaderOptions o;
  o.files = s.ds.files;
  o.batch_size = 2;
  auto l = Loader::Create(o);  // kAuto
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_FALSE((*l)->on_device());
  EXPECT_EQ((*l)->device_id(), -1);
  o.device = DeviceKind::kCuda;
  auto cuda = Loader::Create(o);
  EXPECT_EQ(cuda.status().code(), Code::kUnsupported);
  EXPECT_NE(cuda.status().message().find("device=cuda"), std::string::npos);
}

#ifdef EPOCHFS_LOADER_HAVE_CUDA
class CudaLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!CudaUsable(&why))
      GTEST_SKIP() << "no usable CUDA device (" << why << "); CUDA path not tested";
  }
};

TEST_F(CudaLoaderTest, BatchesArriveInDeviceMemoryByteIdentical) {
  Samples s;
  LoaderOptions o;
  o.files = s.ds.files;
  o.labels = s.ds.labels;
  o.batch_size = 8;
  o.device = DeviceKind::kCuda;
  auto l = Loader::Create(o);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  ASSERT_TRUE((*l)->on_device());
  cudaStream_t consumer;
  ASSERT_EQ(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking), cudaSuccess);
  for (int epoch = 0; epoch < 2; ++epoch) {
    auto order = ShuffledOrder(s.size(), static_cast<uint64_t>(epoch));
    ASSERT_TRUE((*l)->StartEpoch(order).ok());
    size_t k = 0;
    while (true) {
      auto b = (*l)->Next(consumer);
      ASSERT_TRUE(b.ok()) << b.status().ToString();
      if (*b == nullptr) break;
      const Batch& batch = **b;
      ASSERT_TRUE(batch.on_device());
      cudaPointerAttributes attr;
      ASSERT_EQ(cudaPointerGetAttributes(&attr, batch.data()), cudaSuccess);
      EXPECT_EQ(attr.type, cudaMemoryTypeDevice);
      std::string host(batch.data_bytes(), '\0');
      std::vector<int64_t> labels(batch.size());
      ASSERT_EQ(
          cudaMemcpyAsync(host.data(), batch.data(), host.size(), cudaMemcpyDeviceToHost, consumer),
          cudaSuccess);
      ASSERT_EQ(cudaMemcpyAsync(labels.data(), batch.labels(), labels.size() * 8,
                                cudaMemcpyDeviceToHost, consumer),
                cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(consumer), cudaSuccess);
      for (size_t i = 0; i < batch.size(); ++i, ++k) {
        const size_t idx = static_cast<size_t>(order[k]);
        EXPECT_EQ(batch.sample_indices()[i], order[k]);
        EXPECT_EQ(host.substr(static_cast<size_t>(batch.offsets()[i]), s.bytes[idx].size()),
                  s.bytes[idx]);
        EXPECT_EQ(labels[i], s.ds.labels[idx]);
      }
    }
    EXPECT_EQ(k, s.size());
  }
  l->reset();
  cudaStreamDestroy(consumer);
}

TEST_F(CudaLoaderTest, DeviceOutOfMemoryIsAClearError) {
  TempDir dir;
  std::string huge = dir.Write("huge.bin", "");
  ASSERT_EQ(::truncate(huge.c_str(), int64_t{1} << 42), 0);  // 4 TiB, sparse
  LoaderOptions o;
  o.files = {huge};
  o.batch_size = 1;
  o.device = DeviceKind::kCuda;
  const size_t before = LiveBufferBytes();
  auto l = Loader::Create(o);
  EXPECT_EQ(l.status().code(), Code::kNoMemory) << l.status().ToString();
  EXPECT_NE(l.status().message().find("cuda:0"), std::string::npos) << l.status().ToString();
  EXPECT_EQ(LiveBufferBytes(), before);
}
#endif

}  // namespace
}  // namespace epochfs::loader
